"""InterPodAffinity: required pod affinity and anti-affinity, the pod's own and the placed pods'."""
from fitting import row_tests

test_why_not_fit, test_only_the_named_check_fails = row_tests("inter_pod_affinity")
