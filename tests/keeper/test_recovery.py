"""A VM Longhorn spared when its NFS server restarted, stopped by QEMU on its stale mount, recovered
by the keeper without a reboot, on the emulator playing KubeVirt's rules: a migrated paused VMI stays
paused (it keeps its Paused condition), and `unpause` clears it (409 for a VMI not paused)."""
from __future__ import annotations

import datetime
import json

from tests.support.kube import run_verb
from tests.support.kubevirt_api import VMIS, cached_vmis, eventually
from tests.support.stale import launchers, stale_vm1

from webhook import kinds
from webhook.config import Settings

UNPAUSE = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/{}/unpause"


def unpauses(kmock, name="vm1"):
    """The unpause requests the emulator served for the VMI."""
    return [r for r in list(kmock) if str(r.method.value if hasattr(r.method, "value") else r.method).upper() == "PUT"
            and r.url.path == UNPAUSE.format(name)]


def paused(kmock, name="vm1"):
    """The reason of the VMI's Paused condition, None when it has none."""
    conditions = kmock.objects[kinds.VMI, "default", name].raw["status"].get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "Paused"), None)


async def pause_by_user(cluster, name):
    """`virtctl pause vmi NAME`, as virt-api serves it."""
    async with cluster.api() as session:
        await session.put(UNPAUSE.format(name).removesuffix("unpause") + "pause", json={})


async def test_a_vm_recovered_apart_from_its_storage_is_unpaused_once_and_one_its_user_paused_never(kmock, cluster,
                                                                                                    make_keeper):
    """vm1, spared, paused on its stale mount (its pod older than the remount request), apart from its
    NFS server: one migration to its storage node; KubeVirt keeps it paused there; the keeper then
    unpauses it exactly once, and never vm2, which its user paused, nor vm1 once its user pauses it."""
    keeper = await stale_vm1(kmock, cluster, make_keeper, "node-b", keep_after=3600)
    await pause_by_user(cluster, "vm2")
    await keeper.run_pass()
    [made] = cluster.migrations()
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert made["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert unpauses(kmock) == []  # still on its stale mount: an unpause would stop it again
    await cluster.finish(made["metadata"]["name"], "Succeeded", "vm1", "node-b")
    assert paused(kmock) == "PausedIOError"  # as KubeVirt leaves it: the target keeps it paused

    await keeper.run_pass()
    assert len(unpauses(kmock)) == 1 and paused(kmock) is None  # running, on its fresh mount
    [event] = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "UnpausedAfterRecovery"])
    assert event["involvedObject"]["name"] == "vm1" and made["metadata"]["name"] in event["message"]
    for _ in range(2):
        await keeper.run_pass()
    assert len(unpauses(kmock)) == 1 and len(cluster.migrations()) == 1

    await pause_by_user(cluster, "vm1")  # its user pauses it after: not the pause the keeper recovered
    await eventually(lambda: cached_vmis(keeper.watch) and paused(kmock) == "PausedByUser")
    await keeper.run_pass()
    assert len(unpauses(kmock)) == 1 and paused(kmock) == "PausedByUser"
    assert unpauses(kmock, "vm2") == [] and paused(kmock, "vm2") == "PausedByUser"


async def test_a_keeper_started_again_unpauses_from_what_the_cluster_shows(tmp_path, kmock, cluster, make_keeper):
    """The recovery migration is the keeper's evidence, in the cluster: a new leader unpauses the VM,
    and `status` says it will (with --keep report, that it would)."""
    keeper = await stale_vm1(kmock, cluster, make_keeper, "node-b", keep_after=3600)
    await keeper.run_pass()
    [made] = cluster.migrations()
    await cluster.finish(made["metadata"]["name"], "Succeeded", "vm1", "node-b")
    why = (f"paused on a disk I/O error before migration {made['metadata']['name']} moved it onto a fresh NFS mount, "
           f"where KubeVirt keeps it paused")
    for keep, said in (("migrate", f"unpaused at the keeper's next pass ({why})"),
                       ("report", f"stays paused: report only: would unpause it ({why})")):
        code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                        "--keep", keep, "--keep-after", "3600")
        assert code == 0, err
        assert [vm["next"] for vm in json.loads(out)["vms"] if vm["name"] == "vm1"] == [said]
    reader = await make_keeper(Settings(keep="report", keep_after=3600))
    report = await reader.run_pass()  # report only: it says so and does nothing
    assert unpauses(kmock) == [] and paused(kmock) == "PausedIOError"
    assert {r.name: r.last_action for r in report.vms}["vm1"] == ""
    leader = await make_keeper(Settings(keep="migrate", keep_after=3600))
    await leader.run_pass()
    assert len(unpauses(kmock)) == 1 and paused(kmock) is None


async def test_a_stale_vm_beside_its_storage_goes_away_and_back_without_a_reboot(tmp_path, kmock, cluster, make_keeper):
    """vm1's NFS server restarted on its own node: KubeVirt's target pod cannot land beside the VM's own
    pod, so the keeper migrates it to another node that passes the checks (its mount refreshed there),
    unpauses it, and its usual return brings it back: 2 migrations, 0 reboots. With --keep report, none,
    and `status` names it with what it costs."""
    report_keeper = await stale_vm1(kmock, cluster, make_keeper, "node-a", keep_after=0, keep="report")
    pods = launchers(kmock)
    uid = kmock.objects[kinds.VMI, "default", "vm1"].raw["metadata"]["uid"]
    report = await report_keeper.run_pass()
    assert cluster.migrations(ours=False) == []
    assert {r.name: r.hold for r in report.vms}["vm1"] == "report only"
    for keep, said in (("report", "would migrate from node-a to node-b and back (2 migrations"),
                       ("migrate", "moves to node-b at the keeper's next pass and back to node-a after (stale mount "
                                   "beside its NFS server: 2 migrations, no reboot)")):
        code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                        "--keep", keep, "--keep-after", "0")
        assert code == 0, err
        [vm1] = [vm for vm in json.loads(out)["vms"] if vm["name"] == "vm1"]
        assert vm1["next"].startswith(said), vm1["next"]
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0))

    await keeper.run_pass()
    [away] = cluster.migrations()
    assert away["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert away["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    await cluster.finish(away["metadata"]["name"], "Succeeded", "vm1", "node-b")
    assert paused(kmock) == "PausedIOError"
    await keeper.run_pass()
    assert len(unpauses(kmock)) == 1 and paused(kmock) is None and len(cluster.migrations()) == 1
    await eventually(lambda: [v for v in cached_vmis(keeper.watch) if v["metadata"]["name"] == "vm1"
                              and not any(c.get("type") == "Paused" for c in v["status"].get("conditions") or [])])
    await keeper.run_pass()  # the usual return, to its storage node
    back = next(m for m in cluster.migrations() if m["metadata"]["name"] != away["metadata"]["name"])
    assert back["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    assert "kubevirt-scheduler/recovers" not in back["metadata"]["annotations"]
    await cluster.finish(back["metadata"]["name"], "Succeeded", "vm1", "node-a")
    report = await keeper.run_pass()
    assert {r.name: (r.state.value, r.node) for r in report.vms}["vm1"] == ("co-located", "node-a")
    assert len(cluster.migrations()) == 2 and len(unpauses(kmock)) == 1
    vm1 = kmock.objects[kinds.VMI, "default", "vm1"].raw
    assert vm1["metadata"]["uid"] == uid and vm1["status"]["phase"] == "Running"  # never rebooted
    assert launchers(kmock) == pods  # no launcher pod deleted by Longhorn's remount


async def test_a_stale_vm_no_migration_can_recover_is_left_and_said_to_need_a_restart(tmp_path, kmock, cluster,
                                                                                       make_keeper):
    """vm1's disk has cache mode writeback: QEMU fails every flush after a failed one, so its migration's
    last flush of the stale mount fails and it never finishes. The keeper does not try; `status` says why."""
    keeper = await stale_vm1(kmock, cluster, make_keeper, "node-b", keep_after=3600)  # vm2, vm3 wait
    vm1 = kmock.objects[kinds.VMI, "default", "vm1"].raw
    disks = [{**disk, "cache": "writeback"} for disk in vm1["spec"]["domain"]["devices"]["disks"]]
    await cluster.patch(f"{VMIS}/vm1", {"spec": {"domain": {"devices": {"disks": disks}}}})
    await eventually(lambda: any(d.get("cache") for v in cached_vmis(keeper.watch) if v["metadata"]["name"] == "vm1"
                                 for d in v["spec"]["domain"]["devices"]["disks"]))
    report = await keeper.run_pass()
    assert cluster.migrations() == [] and unpauses(kmock) == []
    assert {r.name: r.hold for r in report.vms}["vm1"] == "needs a restart"
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--keep", "migrate", "--keep-after", "3600")
    assert code == 0, err
    [said] = [vm for vm in json.loads(out)["vms"] if vm["name"] == "vm1"]
    assert said["next"].startswith("needs a restart: paused on an I/O error of disk disk0 at ")
    assert "cache mode writeback" in said["next"] and said["next"].endswith("a restart mounts the volume afresh "
                                                                           "(`virtctl restart`)")


async def test_a_vm_paused_on_a_stale_mount_a_moment_ago_is_left_to_kubevirts_retry(tmp_path, kmock, cluster,
                                                                                      make_keeper):
    """In Longhorn's usual case the mount recovers (the same Service IP) and virt-handler's retry resumes
    the VM: until a retry after its new NFS server serves has failed, nothing says its mount is stale. The
    keeper treats it as any VM apart (--keep-after) and `status` says what it waits for."""
    keeper = await stale_vm1(kmock, cluster, make_keeper, "node-b", keep_after=3600, ago=datetime.timedelta(seconds=30))
    report = await keeper.run_pass()
    assert cluster.migrations() == []
    [vm1] = [r for r in report.vms if r.name == "vm1"]
    assert vm1.hold == "apart too briefly"
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--keep", "migrate", "--keep-after", "3600")
    assert code == 0, err
    [said] = [vm for vm in json.loads(out)["vms"] if vm["name"] == "vm1"]
    assert said["stale_mount"] is None and "KubeVirt retries it (or the keeper resumes it once), and the keeper recovers it if it pauses again" in \
        said["waiting_for_retry"]


