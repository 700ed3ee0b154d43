"""NodePorts: the host ports a pod takes, and a node where one is held turns it away."""
from typing import Any

import pytest
from fitting import row_tests

from webhook.rules.fit.terms import host_ports

test_why_not_fit, test_only_the_named_check_fails = row_tests("node_ports")


@pytest.mark.parametrize("containers, host_network, expected", [
    ([{"ports": [{"containerPort": 80}]}], False, ()),
    ([{"ports": [{"containerPort": 80, "hostPort": 8080}]}], False, (("0.0.0.0", "TCP", 8080),)),
    ([{"ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.5"}]}], False,
     (("10.0.0.5", "UDP", 53),)),
    ([{"ports": [{"containerPort": 9100}]}], True, (("0.0.0.0", "TCP", 9100),)),
], ids=["container-port-only", "host-port", "udp-on-ip", "host-network"])
def test_host_ports(containers, host_network, expected):
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": "x", **c} for i, c in enumerate(containers)]}
    if host_network:
        spec["hostNetwork"] = True
    assert host_ports({"spec": spec}) == expected
