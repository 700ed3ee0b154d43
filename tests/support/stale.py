"""A cluster whose node holds VMs and their NFS servers, on Longhorn 1.12's model (kubefake/longhorn.py),
and what happens to a VM Longhorn spares when its NFS server restarts: its stale mount, QEMU stopping
it on an I/O error. For the tests of the drain and of the keeper's recovery."""
from __future__ import annotations

import base64
import datetime
import gzip
import json

from tests.support.kube import launcher_pod_of, longhorn_settings, node, rwx_disk, vmi
from tests.support.kubevirt_api import ago, cached_vmis, eventually

from kubefake import longhorn
from kubefake.io_error_retry import IoErrorRetry
from kubefake.virt_handler import io_error_pause, play_io_errors, record_io_errors, stored_vmi
from webhook import kinds
from webhook.config import Settings

VMS = ("vm1", "vm2", "vm3")


def drained_node_cluster(spared: bool):
    """vm1..vm3 on node-a with their disks served from node-a (co-located); node-b and node-c beside it."""
    objects = [node("node-a"), node("node-b"), node("node-c")]
    for name in VMS:
        the_vmi = vmi(name, "node-a", f"{name}-disk")
        pod = launcher_pod_of(the_vmi)
        pod["metadata"]["name"] = f"virt-launcher-{name}-x7k2p"
        pod["metadata"]["creationTimestamp"] = pod["status"]["startTime"] = ago(days=3)
        objects += [*rwx_disk(f"{name}-disk", "node-a"), the_vmi, pod]
    return objects + longhorn_settings(blacklist="kubevirt.io/VirtualMachineInstance" if spared else "")


def launchers(kmock):
    return {name for (resource, _, name), obj in kmock.objects.items()
            if resource.plural == "pods" and name.startswith("virt-launcher-") and not obj.deleted}


def volumes(kmock):
    """The Longhorn Volume of each VM's disk, where Longhorn records a remount request."""
    kmock.resources[kinds.LONGHORN_VOLUME] = {}
    for name in VMS:
        kmock.objects[kinds.LONGHORN_VOLUME, "longhorn-system", f"pvc-{name}-disk"] = {
            "apiVersion": "longhorn.io/v1beta2", "kind": "Volume",
            "metadata": {"name": f"pvc-{name}-disk", "namespace": "longhorn-system"},
            "spec": {"accessMode": "rwx", "numberOfReplicas": 3}, "status": {"state": "attached"}}


# How long ago a stale VM's NFS server restarted and it was paused: longer than the keeper leaves to
# KubeVirt's own retry (`rules.keeping.recovery.RETRY_WAIT`).
LONG_AGO = datetime.timedelta(minutes=6)


async def restart_storage(kmock, cluster, name, node, ago=datetime.timedelta(seconds=1)):
    """The share-manager of `name`'s disk restarted on `node`, the remount requested `ago`: Longhorn's deletion
    spares the VM (the VMI kind is on the blacklist), so its pod keeps the mount of the old NFS server."""
    requested = datetime.datetime.now(datetime.UTC) - ago
    await cluster.move_storage(f"pvc-{name}-disk", node, requested + datetime.timedelta(seconds=5))
    assert await longhorn.remount(kmock.apiserver, f"pvc-{name}-disk", requested) == []


async def pause_on_io_error(kmock, cluster, name, ago=datetime.timedelta(0)):
    """QEMU stopped the VM on a disk I/O error `ago`, and each retry of virt-handler's since failed at once: the
    Paused condition since then (kubefake.virt_handler: the first kept, as virt-handler may never see the VM
    running between them), virt-launcher's IOerror Event for each pause, up to 11 s ago (the last retry made
    and failed well before now)."""
    now = datetime.datetime.now(datetime.UTC)
    start = now - ago
    pairs = IoErrorRetry().fast_failing(start, 3 + int(ago.total_seconds()) // 60)
    await play_io_errors(kmock.apiserver, "default", name, pairs, max(start, now - datetime.timedelta(seconds=11)),
                         seen=False)


async def stale_vm1(kmock, cluster, make_keeper, storage, keep_after, keep="migrate", ago=LONG_AGO, restarted=("vm1",),
                    **options):
    """The drained-node cluster with VMs spared, the NFS server of each VM of `restarted` restarted on
    `storage` and vm1 paused on its stale mount, `ago`; a keeper of `--keep keep --keep-after keep_after`."""
    cluster.seed(drained_node_cluster(spared=True))
    volumes(kmock)
    keeper = await make_keeper(Settings(keep=keep, keep_after=keep_after), **options)
    for name in restarted:
        await restart_storage(kmock, cluster, name, storage, ago)
    await pause_on_io_error(kmock, cluster, "vm1", ago)
    await resumed_by_the_keeper(kmock, cluster, "vm1", datetime.timedelta(seconds=30))
    return keeper


def _paused_in_watch(keeper, name, paused):
    return any(v["metadata"]["name"] == name and any(c.get("type") == "Paused" for c in v["status"].get("conditions") or [])
               is paused for v in cached_vmis(keeper.watch))


async def paused_again_after_the_keepers_resume(kmock, keeper, name="vm1"):
    """A pass of the keeper resumes the VM once (its new share-manager serves and its clients had their time); QEMU
    pauses it again on the stale mount, virt-launcher telling of it 6 s later (past `recovery.RACE`)."""
    await eventually(lambda: _paused_in_watch(keeper, name, True))
    report = await keeper.run_pass()
    conditions = kmock.objects[kinds.VMI, "default", name].raw["status"].get("conditions") or []
    assert not any(c.get("type") == "Paused" for c in conditions), [(r.hold, r.decision) for r in report.vms
                                                                      if r.name == name]
    await eventually(lambda: _paused_in_watch(keeper, name, False))
    await io_error_pause(kmock.apiserver, "default", name, datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=6))
    await eventually(lambda: _paused_in_watch(keeper, name, True))


async def resumed_by_the_keeper(kmock, cluster, name, ago):
    """The keeper's record (an earlier pass's) says it resumed the VM once `ago` to see whether its mount works
    again, and virt-launcher told of its disk's I/O error 2 s ago: it paused again after that resume."""
    now = datetime.datetime.now(datetime.UTC)
    uid = kmock.objects[kinds.VMI, "default", name].raw["metadata"]["uid"]
    text = json.dumps({"version": 3, "vms": {"default": {name: {"u": uid, "p": [int((now - ago).timestamp())]}}}})
    await cluster.create("/api/v1/namespaces/default/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "binaryData": {"state.json.gz": base64.b64encode(gzip.compress(text.encode())).decode()},
        "metadata": {"name": "kubevirt-colocate-keeper-state", "namespace": "default"}})
    async with kmock.apiserver.lock:
        await record_io_errors(kmock.apiserver, stored_vmi(kmock.apiserver, "default", name),
                               now - datetime.timedelta(seconds=2))
