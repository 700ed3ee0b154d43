"""Cold start: a share-manager pod follows the node of the running VM that uses its volume."""
import pytest
from tests.support.kube import (answer, LONGHORN_NS, annotations, apply_valid, decode_patch, launcher_pod, load, node, nodes, pin_of,
                  preferred_terms, required_terms, review, running_vm, rwx_disk, share_manager_pod)

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


# --------------------------------------------------------------------------- after a migration
# vm1 ran on node-b (its source pod) and live-migrated, or is migrating, to another node
# (the target pod, created later, labelled kubevirt.io/migrationJobUID for life).

VM1_VOLUME = "pvc-vm1-rootdisk"


def vm1_volume():
    return rwx_disk("vm1-rootdisk", None, state="stopped", owner="node-b")


def vm1_source(phase="Running", **kw):
    return launcher_pod("virt-launcher-pod.yaml", "virt-launcher-vm1-abcde", "node-b", "2026-11-01T08:00:00Z", phase, **kw)


def vm1_target(node_name="node-c", phase="Running", **kw):
    return launcher_pod("migration-target-pod.yaml", "virt-launcher-vm1-zzzzz", node_name, "2026-11-20T11:59:00Z",
                        phase, **kw)


MIGRATIONS = [
    ("migrated", [load("migrated-launcher-pod.yaml")], "node-a"),
    ("migrated-source-finished", [vm1_source("Succeeded"), load("migrated-launcher-pod.yaml")], "node-a"),
    ("in-flight-target-scheduled", [vm1_source(), vm1_target()], "node-c"),
    ("in-flight-target-scheduled-not-started", [vm1_source(), vm1_target(phase="Pending")], "node-c"),
    ("failed-target-terminating", [vm1_source(), vm1_target(terminating=True)], "node-b"),
    ("failed-target-finished", [vm1_source(), vm1_target(phase="Failed")], "node-b"),
]


@pytest.mark.parametrize("name, pods, where", MIGRATIONS, ids=[m[0] for m in MIGRATIONS])
async def test_share_manager_goes_where_the_vm_runs_or_is_going(make_store, name, pods, where):
    """A pod created as a migration target is the VM's once it runs there; in flight, the VM
    counts where it is going once the target is scheduled; a failed target never counts.
    (Before the target is scheduled the VM is leaving: tests/test_drains.py.)"""
    store = await make_store(vm1_volume() + NODES + pods)
    pod = share_manager_pod(VM1_VOLUME)
    result = apply_valid(pod, decode_patch(await run(store, pod)))
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
    assert annotations(result)["kubevirt-scheduler/node"] == where
    assert required_terms(result) == [{"matchFields": [pin_of(where)]}]


async def test_pods_that_do_not_count_say_why(make_store):
    store = await make_store(vm1_volume() + NODES + [vm1_source(terminating=True), vm1_target(None, "Pending")])
    outcome = await admit(parse_review(review(share_manager_pod(VM1_VOLUME), namespace=LONGHORN_NS)), store, Settings(),
                          Deadline.after(10, 1))
    assert outcome.decision is None and outcome.skipped == "no running consumer"
    assert "default/virt-launcher-vm1-abcde: terminating" in outcome.detail
    assert "default/virt-launcher-vm1-zzzzz: not scheduled yet" in outcome.detail


async def test_admission_still_leaves_a_migration_target_untouched_at_creation(make_store):
    store = await make_store(vm1_volume() + NODES + [vm1_source()] + [p for p in rwx_disk("vm1-rootdisk", "node-b")
                                                                       if p["kind"] == "Pod"])
    target = load("migration-target-pod.yaml")
    outcome = await admit(parse_review(review(target)), store, Settings(), Deadline.after(10, 1))
    assert outcome.skipped == "migration target"
    assert answer(outcome)["response"] == {"uid": "uid-1", "allowed": True}
