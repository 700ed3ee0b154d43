"""PodTopologySpread with DoNotSchedule: matching pods within maxSkew of the emptiest domain."""
from tests.support.fitting import row_tests

test_why_not_fit, test_only_the_named_check_fails, test_one_demand_for_every_node = row_tests("pod_topology_spread")
