"""Cold start: a share-manager pod follows the node of the running VM that uses its volume."""
import pytest
from kube import (answer, LONGHORN_NS, annotations, apply_valid, decode_patch, node, nodes, pin_of, preferred_terms,
                  required_terms, review, running_vm, rwx_disk, share_manager_pod)

from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.admission.admit import admit

NODES = nodes("node-a", "node-b", "node-c")
VOLUME = "pvc-d1"


def cold_volume(claim="d1", **kw):
    """A volume whose share-manager is stopped (no pod yet): the VM is scheduled first."""
    return rwx_disk(claim, None, state="stopped", owner="node-c", **kw)


async def run(store, pod, settings=None):
    outcome = await admit(parse_review(review(pod, namespace=LONGHORN_NS)), store, settings or Settings(), Deadline.after(10, 1))
    envelope = answer(outcome)
    assert envelope["response"]["allowed"] is True
    return envelope


def _finished(pod):
    pod["status"]["phase"] = "Succeeded"  # the VM shut down; its pod is not deleted yet
    return pod


CASES = [
    ("opted-in-consumer", [running_vm("vm1", "node-a", "d1")], "pinned", {"node-a": 100}),
    ("not-opted-in", [running_vm("vm1", "node-a", "d1", opted_in=False)], None, None),
    ("unscheduled", [running_vm("vm1", None, "d1")], None, None),
    ("terminating", [running_vm("vm1", "node-a", "d1", terminating=True)], None, None),
    ("migration-target-beside-source",
     [running_vm("vm1", "node-a", "d1"), running_vm("vm1-target", "node-c", "d1", migration_target=True)],
     "pinned", {"node-a": 100}),
    ("two-consumers-two-nodes", [running_vm("vm1", "node-a", "d1"), running_vm("vm2", "node-b", "d1")],
     "preferred", {"node-a": 50, "node-b": 50}),
    ("finished", [_finished(running_vm("vm1", "node-a", "d1"))], None, None),
    ("consumer-of-another-volume", [running_vm("vm1", "node-a", "other")], None, None),
    ("consumer-in-another-namespace", [running_vm("vm1", "node-a", "d1", namespace="elsewhere")], None, None),
]


@pytest.mark.parametrize("name, consumers, outcome, weights", CASES, ids=[c[0] for c in CASES])
async def test_share_manager_follows_its_consumers(make_store, name, consumers, outcome, weights):
    store = await make_store(cold_volume() + NODES + consumers)
    pod = share_manager_pod(VOLUME)
    envelope = await run(store, pod)
    if outcome is None:
        assert envelope["response"] == {"uid": "uid-1", "allowed": True}
        return
    result = apply_valid(pod, decode_patch(envelope))
    assert annotations(result)["kubevirt-scheduler/decision"] == outcome
    got = {t["preference"]["matchFields"][0]["values"][0]: t["weight"] for t in preferred_terms(result)}
    assert got == weights
    if outcome == "pinned":
        (target,) = weights
        assert required_terms(result) == [{"matchFields": [pin_of(target)]}]
        assert annotations(result)["kubevirt-scheduler/node"] == target
    else:
        assert required_terms(result) == []


async def test_storage_class_topology_term_survives(make_store):
    store = await make_store(cold_volume() + [node("node-a", **{"topology.kubernetes.io/zone": "zone-a"})]
                             + [running_vm("vm1", "node-a", "d1")])
    pod = share_manager_pod(VOLUME, topology_zone="zone-a")
    result = apply_valid(pod, decode_patch(await run(store, pod)))
    assert required_terms(result) == [{
        "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}],
        "matchFields": [pin_of("node-a")],
    }]


async def test_topology_that_excludes_the_vm_node_is_not_pinned(make_store):
    store = await make_store(cold_volume() + [node("node-a", **{"topology.kubernetes.io/zone": "zone-a"})]
                             + [running_vm("vm1", "node-a", "d1")])
    pod = share_manager_pod(VOLUME, topology_zone="zone-b")
    result = apply_valid(pod, decode_patch(await run(store, pod)))
    assert annotations(result)["kubevirt-scheduler/decision"] == "preferred"
    assert "nodeSelector/affinity" in annotations(result)["kubevirt-scheduler/reason"]
    assert required_terms(result) == required_terms(pod)


@pytest.mark.parametrize("tolerations, outcome", [
    ([], "preferred"),
    ([{"key": "dedicated", "operator": "Equal", "value": "vms", "effect": "NoSchedule"}], "pinned"),
], ids=["untolerated", "tolerated"])
async def test_never_strand_uses_the_share_manager_pods_own_tolerations(make_store, tolerations, outcome):
    tainted = node("node-a", schedulable_label=False, taints=[{"key": "dedicated", "value": "vms", "effect": "NoSchedule"}])
    store = await make_store(cold_volume() + [tainted] + [running_vm("vm1", "node-a", "d1")])
    pod = share_manager_pod(VOLUME, tolerations=tolerations)
    result = apply_valid(pod, decode_patch(await run(store, pod)))
    assert annotations(result)["kubevirt-scheduler/decision"] == outcome


async def test_static_pv_consumers_are_found_by_volume_handle(make_store):
    store = await make_store(rwx_disk("d1", None, state="stopped", pv_name="static-pv", volume="vol-static")
                             + NODES + [running_vm("vm1", "node-b", "d1")])
    pod = share_manager_pod("vol-static")
    result = apply_valid(pod, decode_patch(await run(store, pod)))
    assert annotations(result)["kubevirt-scheduler/node"] == "node-b"


async def test_re_review_adds_nothing(make_store):
    store = await make_store(cold_volume() + NODES + [running_vm("vm1", "node-a", "d1")])
    pod = share_manager_pod(VOLUME)
    once = apply_valid(pod, decode_patch(await run(store, pod)))
    assert decode_patch(await run(store, once)) == []


async def test_share_manager_pod_already_bound_is_untouched(make_store):
    """Some Longhorn versions create the pod with spec.nodeName = ownerID: no scheduler, no pin."""
    store = await make_store(cold_volume() + NODES + [running_vm("vm1", "node-a", "d1")])
    envelope = await run(store, share_manager_pod(VOLUME, node_name="node-c"))
    assert envelope["response"] == {"uid": "uid-1", "allowed": True}


async def test_rule_can_be_turned_off(make_store):
    store = await make_store(cold_volume() + NODES + [running_vm("vm1", "node-a", "d1")])
    envelope = await run(store, share_manager_pod(VOLUME), settings=Settings(share_manager_rule=False))
    assert envelope["response"] == {"uid": "uid-1", "allowed": True}


async def test_other_longhorn_pods_and_other_namespaces_are_untouched(make_store):
    store = await make_store(cold_volume() + NODES + [running_vm("vm1", "node-a", "d1")])
    other = share_manager_pod(VOLUME)
    other["metadata"]["labels"]["longhorn.io/component"] = "instance-manager"
    assert (await run(store, other))["response"] == {"uid": "uid-1", "allowed": True}
    outcome = await admit(parse_review(review(share_manager_pod(VOLUME), namespace="default")), store, Settings(),
                          Deadline.after(10, 1))
    assert answer(outcome)["response"] == {"uid": "uid-1", "allowed": True}


async def test_custom_longhorn_namespace(make_store):
    store = await make_store(cold_volume() + NODES + [running_vm("vm1", "node-a", "d1")])
    pod = share_manager_pod(VOLUME)
    pod["metadata"]["namespace"] = "storage"
    outcome = await admit(parse_review(review(pod, namespace="storage")), store,
                          Settings(longhorn_namespace="storage"), Deadline.after(10, 1))
    assert outcome.decision.node == "node-a"
