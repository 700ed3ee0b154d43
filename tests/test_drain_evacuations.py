"""A drain of a node of 8 opted-in VMs on the emulator (kubefake/evacuation.py: KubeVirt 1.9's
evacuation and migration controllers and Longhorn's share-manager as their sources do it, the webhook
admitting every migration and share-manager pod as the apiserver would): with `--aim-evacuations on`
each VM moves once, in its own evacuation, and ends beside its NFS server, so the keeper has nothing to
move. The VMs' disks: four served from the drained node, two from other nodes, one shared by two VMs
and served from the drained node."""
from __future__ import annotations

import jsonpatch
import pytest
from tests.support.kube import (LONGHORN_NS, OLD_CPU, answer, decode_patch, launcher_pod_of, migration_review, node, review,
                                rwx_disk, vmi, workload_pod)

from kubefake.evacuation import Drain, Pace
from webhook.admission.admit import admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
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


def admitting(settings):
    """The webhook as the apiserver calls it: each object admitted over the cluster as it is, the patch applied."""
    async def admitted(obj, objects, body):
        outcome = await admit(parse_review(body), SnapshotStore(objects), settings, Deadline.after(10, 1))
        envelope = answer(outcome)
        assert envelope["response"]["allowed"] is True
        return jsonpatch.apply_patch(obj, decode_patch(envelope))

    async def migration(obj, objects):
        return await admitted(obj, objects, migration_review(obj, namespace=obj["metadata"]["namespace"]))

    async def pod(obj, objects):
        return await admitted(obj, objects, review(obj, namespace=LONGHORN_NS))

    return migration, pod


async def drain(settings=AIM, pace=Pace(), **layout):
    migration, pod = admitting(settings)
    played = await Drain(cluster(**layout), "node-a", migration, pod, pace).run()
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
