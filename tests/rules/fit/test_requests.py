"""What a pod asks of a node, as NodeResourcesFit counts it."""
import copy

import pytest
from tests.support.fitting import GI, KVM, MI, init_container, vm, workload
from tests.support.kube import vm_pod

from webhook.rules.fit.fields import Unreadable
from webhook.rules.fit.requests import pod_requests

LAUNCHER = {"cpu": 100, "memory": 2294 * MI, KVM: 1}

@pytest.mark.parametrize("changes, expected", [
    ({}, LAUNCHER),
    ({"overhead": {"cpu": "100m", "memory": "200Mi"}}, {**LAUNCHER, "cpu": 200, "memory": 2494 * MI}),
    ({"initContainers": [init_container("disk-prep", "2", "1Gi")]}, {**LAUNCHER, "cpu": 2000}),  # init runs alone
    ({"initContainers": [init_container("proxy", "500m", "256Mi", sidecar=True), init_container("disk-prep", "1")]},
     {**LAUNCHER, "cpu": 1500, "memory": (2294 + 256) * MI}),  # prep runs beside the sidecar started before it
    ({"initContainers": [init_container("disk-prep", "1"), init_container("proxy", "500m", "256Mi", sidecar=True)]},
     {**LAUNCHER, "cpu": 1000, "memory": (2294 + 256) * MI}),  # the sidecar starts after prep
    ({"resources": {"requests": {"cpu": "3"}}}, {**LAUNCHER, "cpu": 3000}),  # pod-level requests
    ({"resources": {"limits": {"memory": "8Gi"}}}, LAUNCHER),  # a pod-level limit defaults to the containers' sum
    ({"resources": {"limits": {"hugepages-2Mi": "512Mi"}}}, {**LAUNCHER, "hugepages-2Mi": 512 * MI}),
], ids=["launcher", "overhead", "init-larger", "sidecar-then-init", "init-then-sidecar", "pod-level-request",
        "pod-level-limit", "pod-level-hugepages-limit"])
def test_pod_requests(changes, expected):
    pod = vm_pod()
    pod["spec"].update(copy.deepcopy(changes))
    assert pod_requests(pod) == expected


@pytest.mark.parametrize("resources, expected", [
    ({"limits": {"cpu": "2", "memory": "4Gi"}}, {"cpu": 2000, "memory": 4 * GI}),  # requests default from limits
    ({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}, {"cpu": 1000}),
    ({"requests": {"hugepages-2Mi": "1Gi", "memory": "1Gi"}}, {"hugepages-2Mi": GI, "memory": GI}),
    ({"requests": {"nvidia.com/gpu": "1", "example.com/foo": 3}}, {"nvidia.com/gpu": 1, "example.com/foo": 3}),
    ({"requests": {"cpu": "1", "storage": "10Gi", "requests.example.com/x": "1"}}, {"cpu": 1000}),  # not counted
], ids=["limits-only", "request-wins", "hugepages", "extended", "ignored-names"])
def test_container_requests(resources, expected):
    pod = {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}
    assert pod_requests(pod) == expected


def test_in_place_resize_counts_the_larger_of_spec_and_status():
    pod = workload("db", "node-a", requests={"cpu": "1", "memory": "1Gi"})
    pod["status"]["containerStatuses"] = [{"name": "app", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                                           "allocatedResources": {"cpu": "2", "memory": "1Gi"}}]
    assert pod_requests(pod) == {"cpu": 1000, "memory": GI}
    assert pod_requests(pod, running=True) == {"cpu": 2000, "memory": GI}


def test_sums_are_exact_before_rounding():
    pod = vm(requests={"cpu": "0.5m"})
    pod["spec"]["containers"].append({"name": "side", "image": "x", "resources": {"requests": {"cpu": "0.5m"}}})
    assert pod_requests(pod)["cpu"] == 1  # 0.5m + 0.5m, not 1m + 1m


@pytest.mark.parametrize("change, words", [
    (lambda spec: spec["containers"].append("x"), "container 1 is not an object"),
    (lambda spec: spec.update(initContainers=[{"name": "i", "resources": "lots"}]),
     "init container 0 resources is not an object"),
], ids=["container", "init-resources"])
def test_an_unreadable_container_says_which(change, words):
    pod = vm_pod()
    change(pod["spec"])
    with pytest.raises(Unreadable, match=f"^{words}$"):
        pod_requests(pod)


def test_an_unreadable_resize_says_which_container():
    pod = workload("db", "node-a", requests={"cpu": "1"})
    pod["status"]["containerStatuses"] = [{"name": "app", "resources": {"requests": {"cpu": "lots"}}}]
    with pytest.raises(Unreadable, match="^container 0 actuated cpu 'lots' is not a quantity$"):
        pod_requests(pod, running=True)
