"""The pod under judgement, read once; what pods of one size ask for, worked out once per store."""
import pytest
from tests.support.fitting import NS, vm

from webhook.rules.fit.demand import Demand
from webhook.rules.fit.fields import Unreadable
from webhook.rules.fit.terms import host_ports
from webhook.rules.fit.requests import pod_requests
from webhook.rules.fit.memo import Memo


@pytest.mark.parametrize("change", [
    lambda pod: pod["spec"]["containers"][0]["resources"]["requests"].update(cpu="2"),
    lambda pod: pod["spec"]["containers"][0]["resources"]["limits"].update({"ephemeral-storage": "1Gi"}),
    lambda pod: pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "1"}}}),
    lambda pod: pod["spec"].update(initContainers=[{"name": "i", "restartPolicy": "Always",
                                                    "resources": {"requests": {"cpu": "3"}}}]),
    lambda pod: pod["spec"].update(overhead={"cpu": "250m"}),
    lambda pod: pod["spec"].update(resources={"requests": {"cpu": "4"}}),
    lambda pod: pod["spec"]["containers"][0].pop("resources"),
    lambda pod: pod["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 8080}]),
    lambda pod: pod["spec"].update(hostNetwork=True) or pod["spec"]["containers"][0].update(ports=[{"containerPort": 80}]),
], ids=["request", "limit", "container", "sidecar", "overhead", "pod-level", "no-resources", "host-port", "host-network"])
def test_what_a_pod_requests_and_its_host_ports_are_kept_by_its_containers_resources_and_ports(change):
    memo = Memo()

    def read(pod):
        demand = Demand.of(pod, NS, memo)
        return demand.requests, demand.host_ports

    first, renamed = vm(), vm()
    renamed["metadata"]["name"] = "other"
    renamed["spec"]["containers"][0]["args"] = ["--name", "other"]
    assert read(renamed) == read(first) == (pod_requests(first), host_ports(first))
    changed = vm()
    change(changed)
    assert read(changed) == (pod_requests(changed), host_ports(changed)) != read(first)


@pytest.mark.parametrize("containers", [{"compute": {}}, ["compute"], [None], "compute"])
def test_containers_of_unexpected_shape_are_still_unreadable(containers):
    pod = vm()
    pod["spec"]["containers"] = containers
    with pytest.raises(Unreadable):
        Demand.of(pod, NS)
