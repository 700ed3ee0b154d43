"""Drains on the emulator (kubefake/evacuation.py: KubeVirt 1.9's evacuation and migration controllers
and Longhorn's share-manager as their sources do it, the webhook admitting every migration and
share-manager pod as the apiserver would — a sync's evacuations all at once, over the cluster as it was
before the sync, pkg/virt-controller/watch/drain/evacuation/evacuation.go `sync`): with
`--aim-evacuations on` each VM moves once, in its own evacuation, and ends beside its NFS server, so the
keeper has nothing to move, and the drain takes no longer than with the aim off. First a node of 8
opted-in VMs (disks: four served from the drained node, two from other nodes, one shared by two VMs and
served from the drained node); then 30 where the other nodes have room for 12 + 10 + 10."""
from __future__ import annotations

import collections
import copy
import itertools
import math

import jsonpatch
import pytest
from tests.support.kube import (LONGHORN_NS, OLD_CPU, answer, decode_patch, launcher_pod_of, migration_review, node, review,
                                rwx_disk, vmi, workload_pod)

from kubefake.objects import LARGE_ALLOCATABLE

from kubefake.evacuation import Drain, Pace
from webhook.admission.admit import Shared, admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.rules.placement import aim
from webhook.rules.placement.promised import Promises
from webhook.stores.snapshot import SnapshotStore

AIM = Settings(aim_evacuations=True)
DISKS = {"vm1": "d1", "vm2": "d2", "vm3": "d3", "vm4": "d4", "vm5": "d5", "vm6": "d6", "vm7": "d7", "vm8": "d7"}
SERVED = {"d1": "node-a", "d2": "node-a", "d3": "node-a", "d4": "node-a", "d5": "node-b", "d6": "node-c", "d7": "node-a"}
# Room for three VMs of 2.4 GB beside what already runs there (`workload_pod`s): three such nodes take
# the 8 VMs with one place to spare, each filling up in the middle of the drain.
THREE_VMS = {"cpu": "4", "memory": "8Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}


def cluster(*, old_cpus=False, tight=False):
    """node-a to drain; node-b, node-c, node-d of the same CPU; with `old_cpus`, two of an older one
    (they take a share-manager, never the VMs' migrations); `tight`: the three have room for three VMs each."""
    nodes = [node(n, allocatable=THREE_VMS if tight and n != "node-a" else None)
             for n in ("node-a", "node-b", "node-c", "node-d")]
    if old_cpus:
        nodes += [node("old-1", cpu=OLD_CPU), node("old-2", cpu=OLD_CPU)]
    busy = [workload_pod(i, "node-c") for i in range(1, 4)] + [workload_pod(9, "node-d")]
    disks = [o for claim, served in SERVED.items() for o in rwx_disk(claim, served)]
    vms = [vmi(name, "node-a", claim) for name, claim in DISKS.items()]
    return [*nodes, *busy, *disks, *vms, *(launcher_pod_of(v) for v in vms)]


def admitting(settings, promises=None):
    """The webhook as the apiserver calls it: each object admitted over the cluster as it is, the patch
    applied (`promises`: a replica's memory, kept from one review to the next)."""
    async def admitted(obj, objects, body):
        outcome = await admit(parse_review(body), SnapshotStore(objects), settings, Deadline.after(10, 1),
                              None if promises is None else Shared(promises=promises))
        envelope = answer(outcome)
        assert envelope["response"]["allowed"] is True
        return jsonpatch.apply_patch(obj, decode_patch(envelope))

    async def migration(obj, objects):
        return await admitted(obj, objects, migration_review(obj, namespace=obj["metadata"]["namespace"]))

    async def pod(obj, objects):
        return await admitted(obj, objects, review(obj, namespace=LONGHORN_NS))

    return migration, pod


async def drain(settings=AIM, pace=Pace(), objects=None, admitted=None, **layout):
    migration, pod = admitted or admitting(settings)
    played = await Drain(objects or cluster(**layout), "node-a", migration, pod, pace).run()
    assert played.ended is not None, "the drain did not end"
    return played


def aims(played):
    return [(m["spec"]["vmiName"], (m["spec"].get("addedNodeSelector") or {}).get("kubernetes.io/hostname"))
            for m in played.migrations]


VARIANTS = {
    "two outbound per node": ({}, Pace()),
    "one outbound per node": ({}, Pace(outbound=1)),
    "older-CPU nodes in the cluster": ({"old_cpus": True}, Pace()),
    "nodes that fill up mid-drain": ({"tight": True}, Pace()),
}


@pytest.mark.parametrize("layout, pace", VARIANTS.values(), ids=list(VARIANTS))
async def test_with_the_aim_each_vm_moves_once_and_ends_beside_its_storage(layout, pace):
    played = await drain(pace=pace, **layout)
    assert len(played.migrations) == 8 and {vm for vm, _ in aims(played)} == set(DISKS)  # one evacuation each
    assert all(where for _, where in aims(played)), aims(played)  # every one aimed
    assert all(m["status"]["phase"] == "Succeeded" for m in played.migrations)
    assert played.unschedulable == []  # no aimed target pod left Unschedulable
    assert played.apart() == []  # so the keeper has no VM to move: no migration of ours
    nodes = played.vm_nodes()
    assert nodes["vm5"] == "node-b" and nodes["vm6"] == "node-c"  # where their storage stayed
    assert nodes["vm7"] == nodes["vm8"]  # one node for the shared disk, its share-manager with them
    assert not {"old-1", "old-2"} & set(nodes.values())


async def test_an_aimed_evacuation_that_fails_is_followed_by_an_untouched_one():
    """vm1's migration fails under way (libvirt): KubeVirt evacuates it again after its backoff, as it
    made it; the drain still ends."""
    played = await drain(pace=Pace(fail_once=frozenset({"vm1"})))
    mine = [where for vm, where in aims(played) if vm == "vm1"]
    assert len(mine) == 2 and mine[0] is not None and mine[1] is None
    assert [m["status"]["phase"] for m in played.migrations if m["spec"]["vmiName"] == "vm1"] == ["Failed", "Succeeded"]
    assert len(played.migrations) == 9


async def test_with_the_aim_off_every_evacuation_is_left_as_kubevirt_made_it():
    played = await drain(settings=Settings())
    assert len(played.migrations) == 8 and all(where is None for _, where in aims(played))
    assert played.vm_nodes()["vm5"] is not None  # the drain ends as before; the keeper moves those apart


# Room for 12, 10 and 10 VMs of 2294 MiB (memory binds; a VM asks 100m of cpu).
ROOMS = {"node-b": ("27Gi", 12), "node-c": ("22.5Gi", 10), "node-d": ("22.5Gi", 10)}


def thirty(*, not_opted=0, ordinary=0):
    """node-a to drain with 30 VMs, each disk served from node-a (vm29 and vm30 share one); the last
    `not_opted` VMs not opted in; `ordinary` pods of Deployments there too."""
    nodes = [node("node-a", allocatable=LARGE_ALLOCATABLE)] + [
        node(name, allocatable={**THREE_VMS, "cpu": "8", "memory": memory}) for name, (memory, _) in ROOMS.items()]
    claims = {f"vm{i}": f"d{min(i, 29)}" for i in range(1, 31)}
    vms = [vmi(name, "node-a", claim, opted_in=i <= 30 - not_opted) for i, (name, claim) in enumerate(claims.items(), 1)]
    disks = [o for claim in sorted(set(claims.values())) for o in rwx_disk(claim, "node-a")]
    pods = [workload_pod(100 + i, "node-a") for i in range(ordinary)]
    return [*nodes, *disks, *vms, *(launcher_pod_of(v) for v in vms), *pods]


def replicas(settings, count=2):
    """`count` webhook replicas behind the Service, taking the reviews in turn, each with its own memory."""
    served = [admitting(settings, Promises()) for _ in range(count)]
    turn = itertools.count()

    async def migration(obj, objects):
        return await served[next(turn) % count][0](obj, objects)

    async def pod(obj, objects):
        return await served[next(turn) % count][1](obj, objects)

    return migration, pod


def shares(played, rooms):
    """By node: how many of the drained node's VMs it took, and its share of them by its room."""
    landed = collections.Counter(played.vm_nodes().values())
    total = sum(rooms.values())
    return {n: (landed[n], math.ceil(sum(landed.values()) * room / total)) for n, room in rooms.items()}


DRAINS = {
    "8 VMs, room for about three on each other node": (dict(tight=True), {}, {"node-b": 3, "node-c": 3, "node-d": 3}),
    "30 VMs, room for 12 + 10 + 10": (dict(objects=thirty()), {}, {n: r for n, (_, r) in ROOMS.items()}),
    "the same, 6 of them not opted in and 4 ordinary pods evicted": (
        dict(objects=thirty(not_opted=6, ordinary=4)), {}, {n: r for n, (_, r) in ROOMS.items()}),
    "8 VMs, two replicas": (dict(tight=True, replicas=2), {}, {"node-b": 3, "node-c": 3, "node-d": 3}),
}


@pytest.mark.parametrize("layout, pace, rooms", DRAINS.values(), ids=list(DRAINS))
async def test_a_drain_aimed_as_one_plan_costs_no_more_than_one_left_alone(layout, pace, rooms):
    """Each: no target pod Unschedulable beyond the aim's timeout (10 s), the opted-in VMs beside their
    storage (so no migration of ours follows), the drain no longer than with the aim off (+ 10 s), no
    node holding more than its share of the drained node's VMs."""
    layout = dict(layout)
    count = layout.pop("replicas", 0)
    objects = layout.pop("objects", None)
    built = (lambda: copy.deepcopy(objects)) if objects else (lambda: cluster(**layout))
    off = await drain(Settings(), Pace(**pace), objects=built())
    on = await drain(AIM, Pace(**pace), objects=built(), admitted=replicas(AIM, count) if count else None)
    assert on.stuck <= aim.UNSCHEDULABLE_SECONDS, on.unschedulable
    opted = {v["metadata"]["name"] for v in on.objects if v["kind"] == "VirtualMachineInstance"
             and "kubevirt-scheduler/co-schedule" in v["metadata"]["annotations"]}
    assert set(on.apart()) & opted == set()
    assert on.ended <= off.ended + 10.0, (on.ended, off.ended)
    assert all(took <= share for took, share in shares(on, rooms).values()), shares(on, rooms)


@pytest.mark.parametrize("at", [1.0, 40.0], ids=["before the aimed targets exist", "40 s in"])
async def test_a_node_cordoned_mid_drain_costs_its_aims_seconds_each(at):
    """node-b, where the plan sends VMs, is cordoned while the drain runs, before the later ones' target
    pods exist: each such target is Unschedulable and fails after the aim's timeout (not KubeVirt's
    300 s), and KubeVirt's next evacuation, not aimed, goes where kube-scheduler puts it after its 20 s
    backoff (pkg/virt-controller/watch/migration/migration.go, `handlePendingPodTimeout`,
    `handleMigrationBackoff`) while the other VMs take the slots. A target pod created before the
    cordon is bound at once. Only a VM aimed at node-b is left apart (its NFS server came back after
    the cordon, or went ahead to node-b), and the drain takes no longer than with the aim off (+ 10 s)."""
    pace = Pace(cordon=((at, "node-b"),))
    off = await drain(Settings(), pace)
    on = await drain(AIM, pace)
    missed = {m["spec"]["vmiName"] for m in on.migrations if m["status"]["phase"] == "Failed"}
    assert missed and on.stuck <= aim.UNSCHEDULABLE_SECONDS
    assert set(on.apart()) <= {vm for vm, where in aims(on) if where == "node-b"}
    assert len(on.apart()) < len(off.apart())
    assert on.ended <= off.ended + 10.0, (on.ended, off.ended)
