"""Where a share-manager and its VM can land together while the VM leaves its node (a drain):
every node judged for both pods, the answer required among those that take both (or only
preferred), the ones with most room for the VM first, and why no node does."""
import dataclasses

import pytest
from tests.support.kube import ALLOCATABLE, LONGHORN_NS, OLD_CPU, launcher_pod_of, node, rwx_disk, share_manager_pod, vmi, workload_pod

from webhook.config import Settings
from webhook.rules.fit.fields import name_of
from webhook.rules.fit.view import StaticView
from webhook.rules.keeping.running import read_vmi
from webhook.rules.kubevirt.target import target_pod
from webhook.rules.placement.decide import AMONG, PREFERRED
from webhook.rules.placement.together import (AMONG_NODES, Destination, Destinations, among_at_most, decide_together, DestinationSearch,
                                              left_of, named, nowhere, spread_over)

VOLUME = "pvc-d1"
SMALL = {"cpu": "1", "memory": "1Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}


def destinations(share_manager, share_manager_namespace, target, vm_namespace, source, view):
    """Every node of the view but the VM's own (`source`), judged for both pods."""
    search = DestinationSearch(share_manager, share_manager_namespace, target, vm_namespace, source, view)
    for _ in search:
        pass
    return search.found


def drained(*others, share_manager=None):
    """vm1 on node-a (its disk d1), node-a drained; the share-manager pod the drain evicted re-created, not
    scheduled yet."""
    the_vmi = vmi("vm1", "node-a", "d1")
    launcher = launcher_pod_of(the_vmi)
    source = node("node-a", unschedulable=True)
    disk = {obj["kind"]: obj for obj in rwx_disk("d1", None, state="stopped", owner="node-a")}
    view = StaticView([source, *others], [launcher, workload_pod(1, "node-b")], [disk["PersistentVolumeClaim"]],
                      [disk["PersistentVolume"]])
    target = target_pod(launcher, read_vmi(the_vmi, Settings()), source, {})
    return destinations(share_manager or share_manager_pod(VOLUME), LONGHORN_NS, target, "default", "node-a", view)


def test_both_land_on_the_nodes_of_the_vms_cpu_generation_most_room_first():
    found = drained(node("node-b"), node("node-c"), node("old-1", cpu=OLD_CPU))
    assert [destination.node for destination in found.nodes] == ["node-c", "node-b"]  # node-b runs a workload
    assert found.nodes[0].room > found.nodes[1].room > 0
    assert found.refused["node-a"] == "node node-a is where the VM runs now"
    assert found.refused["old-1"].startswith("node old-1 lacks cpu-model-migration.node.kubevirt.io/"), found.refused


@pytest.mark.parametrize("other, why", [
    (node("node-b", allocatable=SMALL), "the VM"),  # room for the share-manager, not for the VM
    (node("node-b", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]), "untolerated taint"),
    (node("node-b", schedulable_label=False), "kubevirt.io/schedulable"),  # the share-manager could, the VM not
], ids=["too-small-for-the-vm", "tainted", "no-kubevirt"])
def test_a_node_that_takes_only_one_of_the_two_is_refused(other, why):
    found = drained(other)
    assert found.nodes == ()
    assert why in found.refused["node-b"], found.refused


def asking(resources):
    pod = share_manager_pod(VOLUME)
    pod["spec"]["containers"][0]["resources"] = {"requests": resources}
    return pod


@pytest.mark.parametrize("resources, why", [
    ({"example.com/nfs": "1"}, "offers no example.com/nfs"), ({"memory": "64Gi"}, "the share-manager asks memory"),
], ids=["what-the-vm-does-not", "more"])
def test_a_share_manager_asking_what_the_vm_does_not_is_judged_for_it(resources, why):
    """The share-manager's own room is judged unless the VM asks as much of everything it asks."""
    found = drained(node("node-b"), share_manager=asking(resources))
    assert found.nodes == ()
    assert why in found.refused["node-b"], found.refused
    assert [d.node for d in drained(node("node-b"), share_manager=asking({"memory": "64Mi"})).nodes] == ["node-b"]


def taking(*rooms):
    return Destinations(tuple(Destination(f"node-{i}", room) for i, room in enumerate(rooms)), {})


def picking(key, *rooms):
    """`key`'s pick among nodes of these rooms (most room first)."""
    return spread_over(taking(*rooms).nodes, key)


def key_picking(index, *rooms):
    """A volume name whose pick is the node at `index`."""
    return next(f"pvc-{i}" for i in range(10_000) if picking(f"pvc-{i}", *rooms) == index)


@pytest.mark.parametrize("rooms, picked, required, outcome, preferences, among", [
    ((0.8, 0.4), 0, True, AMONG, (("node-0", 100), ("node-1", 50)), ("node-0", "node-1")),
    ((0.8, 0.4), 1, True, AMONG, (("node-1", 100), ("node-0", 50)), ("node-0", "node-1")),
    ((0.8, 0.4), 0, False, PREFERRED, (("node-0", 100), ("node-1", 50)), ()),
    ((0.9, 0.6, 0.3, 0.1), 0, True, AMONG, (("node-0", 100), ("node-1", 50), ("node-2", 25)),
     ("node-0", "node-1", "node-2", "node-3")),
    ((0.9, 0.6, 0.3, 0.1), 2, True, AMONG, (("node-2", 100), ("node-3", 50), ("node-0", 25)),
     ("node-0", "node-1", "node-2", "node-3")),
    ((0.0, 0.0), 1, True, AMONG, (("node-1", 100), ("node-0", 50)), ("node-0", "node-1")),  # full: alike
], ids=["required", "required-second-picked", "pin-preferred", "three-preferred-of-four", "wrapping", "no-room-left"])
def test_decide_together(rooms, picked, required, outcome, preferences, among):
    """The picked node first, by far; then the next ones with most room, as fallbacks."""
    decision = decide_together(taking(*rooms), "default/vm1", "node node-a is cordoned", required=required,
                               spread=key_picking(picked, *rooms))
    assert (decision.outcome, decision.preferences, decision.among) == (outcome, preferences, among)
    assert "where this share-manager and the migration of default/vm1 can both land (node node-a is cordoned)" \
        in decision.reason


@pytest.mark.parametrize("rooms", [(0.5,) * 16, (0.9, 0.6, 0.3, 0.1), (0.7, 0.7, 0.2, 0.0)],
                         ids=["sixteen-alike", "falling", "one-full"])
def test_a_drains_share_managers_spread_over_the_nodes_as_their_room(rooms):
    """Of a drain's share-managers, each node is picked first about in proportion to the room it
    leaves the VM (a node left with none, never): not all onto the one with most room, where their VMs
    could not all follow."""
    keys = [f"pvc-{i:05d}" for i in range(4_000)]
    counts = [0] * len(rooms)
    for key in keys:
        counts[picking(key, *rooms)] += 1
    for room, count in zip(rooms, counts):
        expected = len(keys) * room / sum(rooms)
        assert abs(count - expected) <= 4 * expected ** 0.5 + 1, (rooms, counts)
    assert all(picking(key, *rooms) == picking(key, *rooms) for key in keys[:50])  # a volume keeps its pick


def test_required_among_the_ones_with_most_room_at_most():
    found = taking(*(1 - i / 40 for i in range(20)))
    decision = decide_together(found, "default/vm1", "leaving", required=True, most=4)
    assert decision.among == ("node-0", "node-1", "node-2", "node-3")
    assert decision.reason.startswith("pinned among node-0, node-1, node-2, node-3 (the 4 with most room for the VM)")


FOUR = (0.9, 0.6, 0.3, 0.1)


@pytest.mark.parametrize("picked, required, refused, left", [
    (2, True, {"node-1"}, ("node-0", "node-2", "node-3")),
    (2, True, {"node-0", "node-1", "node-3"}, ("node-2",)),
    (2, True, {"node-2"}, None),  # the preferred node: where the VM was sent
    (0, False, {"node-3"}, ("node-0", "node-1", "node-2")),  # not named by a preference-only answer: not judged again
    (0, False, {"node-1"}, ("node-0", "node-2")),
    (0, True, set(), ("node-0", "node-1", "node-2", "node-3")),
], ids=["one-left-out", "only-the-preferred-left", "the-preferred-refused", "preferred-only-unnamed",
        "preferred-only-named", "none-refused"])
def test_an_answer_left_of_the_nodes_refused_since_keeps_its_preferred_node(picked, required, refused, left):
    """Left out of an answer: the nodes refused since. Its preferred node stays first, the rest most
    room first; a node it never named is never one it is given."""
    found, key = taking(*FOUR), key_picking(picked, *FOUR)
    decision = decide_together(found, "default/vm1", "leaving", required=required, spread=key)
    reduced = left_of(found, decision, refused)
    assert (reduced and tuple(destination.node for destination in reduced.nodes)) == left
    if reduced:
        again = decide_together(reduced, "default/vm1", "leaving", required=required, spread=key,
                                prefer=decision.preferences[0][0])
        assert again.preferences[0] == decision.preferences[0]
        assert set(again.nodes) | set(again.among) <= set(left)


def test_a_crowded_answer_is_never_left_of():
    found = dataclasses.replace(taking(*FOUR), crowded=True)
    decision = decide_together(found, "default/vm1", "leaving", required=True, spread=key_picking(0, *FOUR))
    assert left_of(found, decision, {"node-3"}) is None


def test_no_node_takes_both():
    assert decide_together(Destinations((), {"node-b": "x"}), "default/vm1", "leaving", required=True) is None
    refused = {"node-c": "node node-c is cordoned", "node-a": "node node-a is where the VM runs now"}
    assert nowhere(Destinations((), refused), "default/vm1") == (
        "no node takes both this share-manager and the migration of default/vm1: "
        "node node-a is where the VM runs now; node node-c is cordoned")
    assert nowhere(Destinations((), {}), "default/vm1").endswith(": no nodes")


def test_named_shows_the_first_few_then_how_many_more():
    assert named(["a", "b"]) == "a, b"
    assert named([f"n{i}" for i in range(8)]) == "n0, n1, n2, n3, n4 and 3 more"


def with_terms(n):
    pod = share_manager_pod(VOLUME)
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [f"zone-{i}"]}]}
        for i in range(n)]}}}
    return pod


@pytest.mark.parametrize("pod, most", [
    (share_manager_pod(VOLUME), AMONG_NODES),
    (share_manager_pod(VOLUME, topology_zone="zone-a"), AMONG_NODES),  # Longhorn's one term: 16 × 1
    (with_terms(8), 8),  # 8 terms × 8 nodes = 64
    (with_terms(100), 1),
], ids=["no-terms", "longhorn-zone-term", "eight-terms", "more-terms-than-allowed"])
def test_among_at_most_keeps_the_terms_written_within_bounds(pod, most):
    assert among_at_most(pod) == most


def test_the_nodes_with_most_room_are_the_ones_now_after_a_pod_is_bound():
    """A drain's share-managers share the order of the nodes by room (worked out once), and a pod
    bound meanwhile is in it: the nodes required are the ones with most room now."""
    import asyncio

    from webhook.stores.cache import WatchedClusterStore
    from webhook.cluster.reflector import Event, EventType

    the_vmi = vmi("vm1", "node-a", "d1")
    launcher = launcher_pod_of(the_vmi)
    source = node("node-a", unschedulable=True)
    others = [node(f"node-{i:02d}") for i in range(1, AMONG_NODES + 2)]
    store = WatchedClusterStore(None, Settings())
    for informer in store.informers:
        for obj in [source, *others, launcher, *rwx_disk("d1", None, state="stopped", owner="node-a")]:
            if obj["kind"] == informer.resource.kind:
                informer.apply(Event(EventType.LISTED, obj))
        informer.apply(Event(EventType.SYNCED, seconds=0.0))
    [pods] = [informer for informer in store.informers if informer.resource.kind == "Pod"]
    view = asyncio.run(store.fit_view("default"))
    target = target_pod(launcher, read_vmi(the_vmi, Settings()), source, {})

    def among():
        found = destinations(share_manager_pod(VOLUME), LONGHORN_NS, target, "default", "node-a", view)
        return decide_together(found, "default/vm1", "leaving", required=True).among

    every = tuple(name_of(n) for n in others)
    assert among() == every[:AMONG_NODES]  # all alike: the first ones
    busy = workload_pod(1, "node-01")
    pods.apply(Event(EventType.ADDED, busy))
    assert among() == every[1:]  # node-01 has least room now
    pods.apply(Event(EventType.DELETED, busy))
    assert among() == every[:AMONG_NODES]
    [nodes] = [informer for informer in store.informers if informer.resource.kind == "Node"]
    larger = node(every[-1], allocatable={**ALLOCATABLE, "memory": "512Gi"})
    nodes.apply(Event(EventType.MODIFIED, larger))  # a node that grew: first now
    assert among() == (*every[:AMONG_NODES - 1], every[-1])


@pytest.mark.parametrize("hostname", [None, "host-node-c"], ids=["hostname-is-the-name", "hostname-differs"])
def test_a_node_with_another_pod_of_the_vms_own_is_refused_though_the_others_are_not_judged_for_it(hostname):
    """The VM's own anti-affinity (toward its VMI's pods) can only turn it away from the nodes where
    those pods run, so the other nodes are not judged for it; a pod of its VMI left on another node
    (a migration target that failed) still refuses that node, whatever the node's hostname label."""
    the_vmi = vmi("vm1", "node-a", "d1")
    launcher = launcher_pod_of(the_vmi)
    left = launcher_pod_of(the_vmi, "node-c", name="virt-launcher-vm1-old", migration_uid="uid-migration-1")
    source = node("node-a", unschedulable=True)
    others = [node("node-b"), node("node-c"), node("node-d")]
    if hostname is not None:
        others[1]["metadata"]["labels"]["kubernetes.io/hostname"] = hostname
    disk = {obj["kind"]: obj for obj in rwx_disk("d1", None, state="stopped", owner="node-a")}
    view = StaticView([source, *others], [launcher, left], [disk["PersistentVolumeClaim"]], [disk["PersistentVolume"]])
    target = target_pod(launcher, read_vmi(the_vmi, Settings()), source, {})
    found = destinations(share_manager_pod(VOLUME), LONGHORN_NS, target, "default", "node-a", view)
    assert sorted(d.node for d in found.nodes) == ["node-b", "node-d"]
    assert "fails the VM's pod anti-affinity: pod default/virt-launcher-vm1-old" in found.refused["node-c"], found.refused
