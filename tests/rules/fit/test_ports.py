"""NodePorts: a node where a host port the pod takes is already held turns it away."""
from tests.support.fitting import row_tests

test_why_not_fit, test_only_the_named_check_fails, test_one_demand_for_every_node = row_tests("node_ports")
