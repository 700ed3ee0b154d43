"""VolumeBinding and VolumeZone for bound claims: can the node mount the pod's volumes?"""
from tests.support.fitting import row_tests

test_why_not_fit, test_only_the_named_check_fails, test_one_demand_for_every_node = row_tests("volumes")
