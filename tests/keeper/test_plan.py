"""One plan: the keeper's pass and `status` observe the same cluster and make the same plan, so every
decision and every hold `status` shows is the one the keeper acts on — limits that bind, a VM on a
stale mount, a VM carried paused onto a fresh mount, and a VM whose migration the API refused
(read by `status` from the keeper's state in the cluster)."""
from __future__ import annotations

import datetime
import json

import kmock as kmocklib
from tests.support.kube import run_verb
from tests.support.kubevirt_api import VMIS, apart_vm, cached_vmis, eventually, three_nodes
from tests.support.stale import (drained_node_cluster, pause_on_io_error, paused_again_after_the_keepers_resume,
                                 restart_storage, volumes)

from kubefake.virt_handler import pause_condition
from webhook import kinds
from webhook.config import Settings
from webhook.rules.keeping.record import Action
from webhook.rules.shared.alone import Alone

POLICY = ("virtualmachineinstancemigrations.kubevirt.io \"vm4-colocate-x\" is forbidden: ValidatingAdmissionPolicy "
          "'tenant-no-migrations' with binding 'tenant' denied request: migrations of vm4 are not allowed")
SETTINGS = Settings(keep="migrate", keep_after=0, keep_max_inflight=2, keep_max_outbound_per_node=5)  # our limit binds first
FLAGS = ("--lease-namespace", "default", "--keep", "migrate", "--keep-after", "0", "--keep-max-inflight", "2",
         "--keep-max-outbound-per-node", "5")


def refuse_vm4(request):
    """A tenant's admission policy: no migration of vm4, dry run or not (reason Forbidden)."""
    if (request.data.get("spec") or {}).get("vmiName") == "vm4":
        return kmocklib.KubernetesError(status=403, reason="Forbidden", message=POLICY)
    return None


def cluster_objects():
    """vm1..vm3 co-located on node-a (spared by Longhorn); vm4 and vm5 apart from their storage for days."""
    objects = drained_node_cluster(spared=True)
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "Node"}
    for name in ("vm4", "vm5"):
        objects += [o for o in apart_vm(name) if o["kind"] != "Node" or o["metadata"]["name"] not in names]
    return objects + [n for n in three_nodes() if n["metadata"]["name"] not in names]


async def test_the_keepers_pass_and_status_make_one_plan(tmp_path, kmock, cluster, make_keeper):
    kmock.refuse = refuse_vm4
    cluster.seed(cluster_objects())
    volumes(kmock)
    keeper = await make_keeper(SETTINGS)
    first = await keeper.run_pass()
    assert [name.split("/")[1].split("-colocate-")[0] for name in first.created] == ["vm5"]
    assert keeper.state.refusal("default", "vm4", Action.MIGRATE) is not None
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", *FLAGS)
    assert code == 0, err
    [vm4] = [vm for vm in json.loads(out)["vms"] if vm["name"] == "vm4"]  # read from the keeper's state
    assert vm4["hold"] == Alone.REFUSED and POLICY in vm4["decision"] and "403" in vm4["next"]  # the API's own words
    # Then: vm1's NFS server restarted 6 minutes ago (its pod, older, keeps the stale mount: paused since); vm2 was carried
    # paused onto its node (its pause older than its pod); vm3's storage moved to node-c.
    await restart_storage(kmock, cluster, "vm1", "node-b", datetime.timedelta(minutes=6))
    await pause_on_io_error(kmock, cluster, "vm1", datetime.timedelta(minutes=6))  # and KubeVirt's retries failed
    await paused_again_after_the_keepers_resume(kmock, keeper)  # and the keeper's one resume
    long_ago = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    await cluster.patch(f"{VMIS}/vm2", {"status": {"conditions": [pause_condition("PausedIOError", long_ago)]}})
    await cluster.move_storage("pvc-vm3-disk", "node-c")
    await eventually(lambda: any(v["metadata"]["name"] == "vm2" and v["status"].get("conditions")
                                 for v in cached_vmis(keeper.watch)))
    await eventually(lambda: (kmock.objects[kinds.POD, "longhorn-system", "share-manager-pvc-vm3-disk"].raw["spec"]
                              ["nodeName"] == "node-c") and keeper.store.synced())

    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", *FLAGS)
    assert code == 0, err
    said = {vm["name"]: vm for vm in json.loads(out)["vms"]}
    report = await keeper.run_pass()

    kept = {r.name: r for r in report.vms}
    assert set(kept) == set(said) == {"vm1", "vm2", "vm3", "vm4", "vm5"}
    for name, record in kept.items():
        assert (said[name]["hold"], said[name]["decision"]) == (
            str(record.hold) if record.hold is not None else None, record.decision), name
    holds = {name: said[name]["hold"] for name in said}
    # vm1, frozen on its stale mount, comes first and takes the last slot of ours; vm3 waits for one, named by
    # what holds them; vm4 waits its refusal (no limit is said of it: none binds it).
    assert holds == {"vm1": None, "vm2": Alone.NOT_APART, "vm3": Alone.OUR_LIMIT, "vm4": Alone.REFUSED,
                     "vm5": Alone.MIGRATING}
    assert said["vm3"]["decision"] == (f"2 of our migrations in flight (limit 2): default/{first.created[0].split('/')[1]}, "
                                       "default/vm1 (moved in this pass)")
    assert said["vm1"]["moves"] and said["vm1"]["stale_mount"].startswith("paused on an I/O error of disk disk0 at ")
    assert said["vm2"]["next"].startswith("unpaused at the keeper's next pass (paused on a disk I/O error")
    assert [name.split("/")[1].split("-colocate-")[0] for name in report.created] == ["vm1"]
    assert not any(c.get("type") == "Paused" for c in kmock.objects[kinds.VMI, "default", "vm2"].raw["status"]
                   .get("conditions") or [])  # unpaused, as planned

