"""Drains: a share-manager re-created while its VM is leaving its node goes where the VM's
migration can land too, never where the VM can never follow (an older CPU generation, a node
too small, a node the share-manager itself may not use)."""
import collections
import copy

import pytest
from tests.support.kube import (ALLOCATABLE, LONGHORN_NS, NEW_CPU, OLD_CPU, annotations, answer, apply_valid, decode_patch, launcher_pod_of,
                  migration_node_selector, node, preferred_terms, required_terms, review, rwx_disk, share_manager_pod,
                  vmi, workload_pod)

from webhook.admission.admit import Shared, admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
from tests.support.stores import requests_since, seed, watched_store

VOLUME = "pvc-d1"
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
SMALL = {"cpu": "1", "memory": "1Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}
SLOTS_TAKEN = {"cpu": "15800m", "memory": "62Gi", "pods": "1", "devices.kubevirt.io/kvm": "1k"}


def promised(promises):
    """How many VMs are promised a node, in all."""
    return sum(promises.to(node).vms for node in list(promises.nodes()))



def source(**kw):
    """node-a, where vm1 runs, in the state the case puts it in."""
    return node("node-a", **kw)


def others(**extra):
    """Two nodes that take both pods (node-b busier than node-c), two of an older CPU generation."""
    return [node("node-b", **extra), node("node-c", **extra), node("old-1", cpu=OLD_CPU), node("old-2", cpu=OLD_CPU)]


def vm1(node_name="node-a"):
    return vmi("vm1", node_name, "d1")


def cluster(source_node, *, nodes=None, extra=()):
    """vm1 running on `source_node` with its disk d1, whose share-manager pod the drain evicted."""
    the_vmi = vm1()
    return [source_node, *(others() if nodes is None else nodes), the_vmi, launcher_pod_of(the_vmi),
            *rwx_disk("d1", None, state="stopped", owner="node-a"), workload_pod(1, "node-b"), *extra]


def unscheduled_target(added=None):
    """vm1's migration target pod as KubeVirt creates it, not scheduled yet."""
    the_vmi = vm1()
    selector = migration_node_selector(the_vmi, {}, source()["metadata"]["labels"], added)
    pod = launcher_pod_of(the_vmi, name="virt-launcher-vm1-tgt42", migration_uid="mig-uid-1", node_selector=selector,
                          started="2026-11-23T10:00:00Z")
    del pod["spec"]["nodeName"]
    pod["metadata"]["labels"].pop("kubevirt.io/nodeName")
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]}
    return pod


async def decided(store, pod=None, settings=None, *, promises=None, dry_run=False):
    pod = pod or share_manager_pod(VOLUME)
    sent = review(pod, namespace=LONGHORN_NS)
    sent["request"]["dryRun"] = dry_run
    outcome = await admit(parse_review(sent), store, settings or Settings(), Deadline.after(10, 1),
                          None if promises is None else Shared(promises=promises))
    envelope = answer(outcome)
    assert envelope["response"]["allowed"] is True
    return outcome, apply_valid(pod, decode_patch(envelope))


def among(pod):
    """The nodes the pod is required to be among: one term per node, one value each (the
    apiserver refuses a node field selector with more)."""
    nodes = []
    for term in required_terms(pod):
        (requirement,) = [f for f in term["matchFields"] if f["key"] == "metadata.name"]
        assert requirement["operator"] == "In" and len(requirement["values"]) == 1
        nodes += requirement["values"]
    return nodes


def preferred(pod):
    return [(t["preference"]["matchFields"][0]["values"][0], t["weight"]) for t in preferred_terms(pod)]


LEAVING = [
    ("cordoned", cluster(source(unschedulable=True)), "node node-a is cordoned"),
    ("drain-taint", cluster(source(taints=[DRAIN_TAINT])), "untolerated taint kubevirt.io/drain"),
    ("not-ready", cluster(source(ready=False)), "node node-a is not Ready"),
    ("full", cluster(source(allocatable=SLOTS_TAKEN)), "node node-a has no room"),
    ("migrating", cluster(source(), extra=[unscheduled_target()]),
     "target pod virt-launcher-vm1-tgt42 is not scheduled yet"),
]


@pytest.mark.parametrize("name, objects, why", LEAVING, ids=[c[0] for c in LEAVING])
async def test_a_leaving_vms_share_manager_goes_where_the_vm_can_follow(make_store, name, objects, why):
    """Never the VM's own node, never a node of the older CPU generation: the VM's migration
    target needs the source's host-model CPU and its machine type, which they lack."""
    outcome, pod = await decided(await make_store(objects))
    assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned-among"
    assert among(pod) == ["node-b", "node-c"]
    assert annotations(pod)["kubevirt-scheduler/node"] == "node-b,node-c"
    # The node its volume picks first, by far; the other as a fallback.
    assert {n for n, _ in preferred(pod)} == {"node-b", "node-c"} and [w for _, w in preferred(pod)] == [100, 50]
    assert why in outcome.decision.reason and "VM default/vm1" in outcome.decision.reason


async def test_a_drains_share_managers_spread_over_the_nodes_their_vms_can_follow_to(make_store):
    """A drained node's VMs each leave a share-manager to place: each is required among the same
    nodes, but not all prefer the same one first, so that their VMs can follow them there."""
    drained_node = source(unschedulable=True)
    vms = [vmi(f"vm{i}", "node-a", f"d{i}") for i in range(1, 13)]
    disks = [obj for i in range(1, 13) for obj in rwx_disk(f"d{i}", None, state="stopped", owner="node-a")]
    targets = [node(f"node-{letter}") for letter in "bcde"]
    store = await make_store([drained_node, *targets, *vms, *map(launcher_pod_of, vms), *disks])
    first = []
    for i in range(1, 13):
        _, pod = await decided(store, share_manager_pod(f"pvc-d{i}"))
        assert among(pod) == ["node-b", "node-c", "node-d", "node-e"]
        first.append(preferred(pod)[0][0])
    assert len(set(first)) >= 3, first
    assert max(first.count(n) for n in set(first)) <= 6, first


async def test_a_drains_share_managers_send_no_node_more_vms_than_it_has_room_for(make_store):
    """Each share-manager's VM is counted where it was sent: a node with room for two VMs is preferred
    first by two share-managers at most, the others go where there is room; once every node is
    promised full, a share-manager still goes where both land now, and the reason says so."""
    from webhook.rules.placement.promised import Promises

    two_slots = {**ALLOCATABLE, "pods": "2"}  # room for two pods: two VMs, nothing of the drain's bound yet
    vms = [vmi(f"vm{i}", "node-a", f"d{i}") for i in range(1, 10)]
    disks = [obj for i in range(1, 10) for obj in rwx_disk(f"d{i}", None, state="stopped", owner="node-a")]
    targets = [node(f"node-{letter}", allocatable=two_slots) for letter in "bcde"]
    store = await make_store([source(unschedulable=True), *targets, *vms, *map(launcher_pod_of, vms), *disks])
    promises, first = Promises(), []
    for i in range(1, 9):
        _, pod = await decided(store, share_manager_pod(f"pvc-d{i}"), promises=promises)
        first.append(preferred(pod)[0][0])
    assert collections.Counter(first) == {"node-b": 2, "node-c": 2, "node-d": 2, "node-e": 2}
    outcome, pod = await decided(store, share_manager_pod("pvc-d9"), promises=promises)
    assert among(pod) == ["node-b", "node-c", "node-d", "node-e"]
    assert "none with room beside the VMs already sent to follow their share-managers there" in outcome.decision.reason


async def test_a_dry_run_sends_no_vm(make_store):
    """A dry run's share-manager is never created: its VM is not counted where it would have gone."""
    from webhook.rules.placement.promised import Promises

    store = await make_store(cluster(source(unschedulable=True)))
    promises = Promises()
    await decided(store, promises=promises, dry_run=True)
    assert promised(promises) == 0
    await decided(store, promises=promises)
    assert promised(promises) == 1


async def test_the_server_counts_every_vm_it_sent(make_store):
    """One record a server: each drain's share-manager it answers sends its VM, counted for the next."""
    import json
    import time

    from webhook.admission.server import Admissions

    vms = [vmi(f"vm{i}", "node-a", f"d{i}") for i in (1, 2)]
    disks = [obj for i in (1, 2) for obj in rwx_disk(f"d{i}", None, state="stopped", owner="node-a")]
    store = await make_store([source(unschedulable=True), *others(), *vms, *map(launcher_pod_of, vms), *disks])
    endpoint = Admissions(store, Settings())
    for i in (1, 2):
        body = json.dumps(review(share_manager_pod(f"pvc-d{i}"), namespace=LONGHORN_NS)).encode()
        await endpoint.answer(body, endpoint.deadline(10), time.monotonic())
    assert promised(endpoint.shared.promises) == 2


async def test_on_the_caches_a_drains_share_manager_reads_nothing_from_the_api(kmock):
    """The share-managers of a drain come back together: each renders its VM's migration target
    from the launcher pod, the VMI and the source node as the caches keep them, with no request to
    the apiserver (which is busy with the drain's creates)."""
    for name, objects, _ in LEAVING:
        seed(kmock, objects)
        store = await watched_store(kmock)
        try:
            mark = len(list(kmock))
            _, pod = await decided(store)
            assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned-among", name
            assert requests_since(kmock, mark) == [], name
        finally:
            await store.close()


async def test_a_migration_that_names_its_node_takes_the_share_manager_there(make_store):
    """The target pod KubeVirt already created is judged as it is: its addedNodeSelector included."""
    objects = cluster(source(), extra=[unscheduled_target({"kubernetes.io/hostname": "node-b"})])
    _, pod = await decided(await make_store(objects))
    assert among(pod) == ["node-b"]


async def test_the_share_managers_own_placement_narrows_the_set(make_store):
    """Longhorn's StorageClass topology on the share-manager pod keeps it in zone-a."""
    zoned = [node("node-b", **{"topology.kubernetes.io/zone": "zone-a"}),
             node("node-c", **{"topology.kubernetes.io/zone": "zone-b"}), node("old-1", cpu=OLD_CPU)]
    store = await make_store(cluster(source(unschedulable=True), nodes=zoned))
    _, pod = await decided(store, share_manager_pod(VOLUME, topology_zone="zone-a"))
    assert among(pod) == ["node-b"]


async def test_a_node_too_small_for_the_vm_is_left_out(make_store):
    store = await make_store(cluster(source(unschedulable=True), nodes=[node("node-b"), node("node-c", allocatable=SMALL)]))
    _, pod = await decided(store)
    assert among(pod) == ["node-b"]


async def test_of_many_nodes_the_ones_with_most_room_are_required(make_store):
    """A large cluster: the share-manager is required among the 16 nodes with most room for the
    VM (a term per node), and the reason says how many took both."""
    from webhook.rules.placement.together import AMONG_NODES

    many = [node(f"n{i:02d}") for i in range(24)]
    busy = [workload_pod(100 + i, f"n{i:02d}") for i in range(AMONG_NODES, 24)]  # the last 8 have less room
    store = await make_store(cluster(source(unschedulable=True), nodes=many, extra=busy))
    outcome, pod = await decided(store)
    assert among(pod) == [f"n{i:02d}" for i in range(AMONG_NODES)]
    assert f"(the {AMONG_NODES} with most room for the VM)" in outcome.decision.reason


async def test_nowhere_for_both_answers_as_before_and_says_why(make_store):
    """Only nodes of the older generation left: the share-manager is only preferred toward the
    VM's node, as before, and the reason names what each node lacks."""
    store = await make_store(cluster(source(unschedulable=True), nodes=[node("old-1", cpu=OLD_CPU)]))
    outcome, pod = await decided(store)
    assert annotations(pod)["kubevirt-scheduler/decision"] == "preferred"
    assert required_terms(pod) == [] and preferred(pod) == [("node-a", 100)]
    assert "node node-a is cordoned" in outcome.decision.reason
    assert "no node takes both this share-manager and the migration of VM default/vm1" in outcome.decision.reason
    assert f"cpu-model-migration.node.kubevirt.io/{NEW_CPU}" in outcome.decision.reason


async def test_several_consumers_answer_as_before(make_store):
    vm2 = vmi("vm2", "node-a", "d1")
    store = await make_store(cluster(source(unschedulable=True), extra=[vm2, launcher_pod_of(vm2)]))
    outcome, pod = await decided(store)
    assert annotations(pod)["kubevirt-scheduler/decision"] == "preferred"
    assert outcome.decision.reason == "preferred node-a, not pinned: node node-a is cordoned"


async def test_a_vm_that_stays_is_followed_as_before(make_store):
    _, pod = await decided(await make_store(cluster(source())))
    assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned"
    assert among(pod) == ["node-a"]


async def test_pins_as_preferences_prefer_the_set_only(make_store):
    store = await make_store(cluster(source(unschedulable=True)))
    outcome, pod = await decided(store, settings=Settings(pin="preferred"))
    assert annotations(pod)["kubevirt-scheduler/decision"] == "preferred"
    assert required_terms(pod) == []
    assert {n for n, _ in preferred(pod)} == {"node-b", "node-c"}


async def test_the_vmi_unreadable_answers_as_before_and_says_why(make_store):
    objects = [o for o in cluster(source(unschedulable=True)) if o["kind"] != "VirtualMachineInstance"]
    outcome, pod = await decided(await make_store(objects))
    assert annotations(pod)["kubevirt-scheduler/decision"] == "preferred"
    assert "cannot tell where the migration of VM default/vm1 can land" in outcome.decision.reason


async def test_re_review_adds_nothing(make_store):
    store = await make_store(cluster(source(unschedulable=True)))
    _, pod = await decided(store)
    outcome = await admit(parse_review(review(copy.deepcopy(pod), namespace=LONGHORN_NS)), store, Settings(),
                          Deadline.after(10, 1))
    assert decode_patch(answer(outcome)) == []


def many_nodes(n):
    return [node(f"n{i:03d}") for i in range(n)]


async def test_the_share_managers_own_terms_times_the_nodes_stay_within_64_terms():
    """A share-manager with eight required terms of its own: among at most 8 nodes (64 terms)."""
    from webhook.stores.snapshot import SnapshotStore

    pod = share_manager_pod(VOLUME)
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                              {"key": f"rack-{i}", "operator": "DoesNotExist"}]} for i in range(8)]}}}
    store = SnapshotStore(cluster(source(unschedulable=True), nodes=many_nodes(40)))
    outcome, patched = await decided(store, pod)
    assert len(outcome.decision.required) == 8
    assert len(required_terms(patched)) == 64


async def test_a_requirement_worked_out_past_the_deadline_is_never_sent():
    """The apiserver has stopped waiting: allowed, no pin, saying so."""
    from tests.support.kube import vm_pod

    from webhook.stores.snapshot import SnapshotStore

    store = SnapshotStore([*others(), *rwx_disk("vm1-rootdisk", "node-b")])
    outcome = await admit(parse_review(review(vm_pod())), store, Settings(), Deadline.after(0, 0))
    assert outcome.decision is None and outcome.skipped == "no decision before the deadline"
    assert answer(outcome)["response"] == {"uid": "uid-1", "allowed": True,
                                           "warnings": ["co-location skipped: no decision before the deadline"]}
