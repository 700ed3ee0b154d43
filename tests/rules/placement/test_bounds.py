"""A pod beyond what a VM's or Longhorn's pod carries is not read further: each bound, at its
limit (read as usual) and one past it (the reason names what is too many)."""
import copy

import pytest
from tests.support.kube import migration_target, share_manager_pod, vm_pod

from webhook.rules.placement import bounds
from webhook.rules.placement.bounds import too_large

TERM = {"matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}]}


def with_claims(n):
    pod = vm_pod()
    pod["spec"]["volumes"] += [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i}"}} for i in range(n)]
    return pod


def with_volumes(n):
    """`n` volumes in all, none of them a claim beyond the pod's own disk."""
    pod = vm_pod()
    pod["spec"]["volumes"] += [{"name": f"e{i}", "emptyDir": {}} for i in range(n - len(pod["spec"]["volumes"]))]
    return pod


def with_containers(n):
    pod = vm_pod()
    sidecar = pod["spec"]["containers"][0]
    pod["spec"]["containers"] += [dict(copy.deepcopy(sidecar), name=f"hook-{i}")
                                  for i in range(n - len(pod["spec"]["containers"]) - len(pod["spec"].get("initContainers", [])))]
    return pod


def with_tolerations(n):
    pod = vm_pod()
    pod["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(n)]
    return pod


def with_spread(n):
    pod = vm_pod()
    pod["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": f"a{i}"}}} for i in range(n)]
    return pod


def with_node_terms(n):
    pod = vm_pod()
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = \
        [copy.deepcopy(TERM) for _ in range(n)]
    return pod


def with_expressions(n):
    pod = vm_pod()
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": [{"key": f"k{i}", "operator": "DoesNotExist"} for i in range(n)]}]
    return pod


def with_preferred(n):
    pod = vm_pod()
    pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 1, "preference": copy.deepcopy(TERM)} for _ in range(n)]
    return pod


def with_pod_terms(kind, n, expressions=1):
    pod = vm_pod()
    pod["spec"]["affinity"][kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchExpressions": [
            {"key": f"k{j}", "operator": "DoesNotExist"} for j in range(expressions)]}} for _ in range(n)]}
    return pod


@pytest.mark.parametrize("pod", [vm_pod(), migration_target(), share_manager_pod("pvc-vm1-rootdisk", "node-b"),
                                 share_manager_pod("pvc-vm1-rootdisk", topology_zone="zone-a")],
                         ids=["vm-pod", "migration-target", "share-manager-pod", "share-manager-pod-zonal"])
def test_the_pods_kubevirt_and_longhorn_make_are_read(pod):
    assert too_large(pod) is None


BOUNDS = {
    "claims": (with_claims, bounds.CLAIMS - 1, "claims"),  # the fixture pod's own disk is one
    "volumes": (with_volumes, bounds.VOLUMES, "volumes"),
    "containers": (with_containers, bounds.CONTAINERS, "containers"),
    "tolerations": (with_tolerations, bounds.TOLERATIONS, "tolerations"),
    "spread": (with_spread, bounds.SPREAD, "topology spread constraints"),
    "node-terms": (with_node_terms, bounds.TERMS, "required node-affinity terms"),
    "expressions": (with_expressions, bounds.EXPRESSIONS, "requirements in a node-affinity term"),
    "preferred": (with_preferred, bounds.PREFERRED, "preferred node-affinity terms"),
    "anti-affinity": (lambda n: with_pod_terms("podAntiAffinity", n), bounds.POD_TERMS,
                      "required podAntiAffinity terms"),
    "affinity": (lambda n: with_pod_terms("podAffinity", n), bounds.POD_TERMS, "required podAffinity terms"),
    "selector": (lambda n: with_pod_terms("podAntiAffinity", 1, n), bounds.EXPRESSIONS,
                 "requirements in a podAntiAffinity selector"),
}


@pytest.mark.parametrize("build, limit, what", BOUNDS.values(), ids=BOUNDS.keys())
def test_at_its_bound_a_pod_is_read_and_one_past_it_is_not(build, limit, what):
    assert too_large(build(limit)) is None
    reason = too_large(build(limit + 1))
    assert reason is not None and what in reason, reason


def test_the_reason_says_how_many_and_the_bound():
    assert too_large(with_tolerations(1000)) == \
        f"the pod has 1000 tolerations, more than a VM's or Longhorn's pod carries ({bounds.TOLERATIONS})"


@pytest.mark.parametrize("spec", [
    {"volumes": "nope"}, {"affinity": "nope"}, {"affinity": {"nodeAffinity": "nope"}},
    {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["nope"]}}},
    {"containers": None, "tolerations": {"k": "v"}},
], ids=["volumes-not-list", "affinity-not-object", "node-affinity-not-object", "pod-term-not-object", "odd-lists"])
def test_a_pod_of_odd_shape_is_left_to_the_rules_that_read_it(spec):
    pod = vm_pod()
    pod["spec"].update(spec)
    assert too_large(pod) is None
