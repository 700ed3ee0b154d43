"""kubefake/evacuation.py plays KubeVirt v1.9.0's drain as its source does, with no webhook in the way
(admission passes objects through, or adds a selector as a test says):
- the drained node's VMIs marked (virt-api's eviction admitter, status.evacuationNodeName), the mark
  cleared once migrated; its other pods evicted and created again by their controllers elsewhere;
- every evacuation created at once (pkg/virt-controller/watch/drain/evacuation/evacuation.go, `sync`:
  all candidates, since the MigrationPriorityQueue gate went GA, one goroutine each), each admitted
  over the cluster as it was before the sync, shaped as `GenerateNewMigration`;
- at most parallelOutboundMigrationsPerNode (2) off a node and parallelMigrationsPerCluster (5) with
  a target pod (pkg/virt-controller/watch/migration/migration.go, `handleTargetPodCreation`);
- `addedNodeSelector` merged into the target pod's nodeSelector under the VM's own keys (`createTargetPod`);
- an unschedulable target pod fails the migration after 300 s (`defaultUnschedulablePendingTimeoutSeconds`,
  `handlePendingPodTimeout`), or the migration's kubevirt.io/migrationUnschedulablePodTimeoutSeconds, and the evacuation created again waits 20 s, doubling per failure since
  the last success, from the last failure (`handleMigrationBackoff`);
- Longhorn creates an evicted share-manager pod again only once the old one is gone
  (longhorn-manager controller/share_manager_controller.go: a new pod only when `GetPod` finds none)."""
from __future__ import annotations

import asyncio

from tests.support.kube import OLD_CPU, launcher_pod_of, node, rwx_disk, vmi, workload_pod

from kubefake.evacuation import Drain, Pace

HOSTNAME = "kubernetes.io/hostname"


def cluster(count=8, *, own_host=None):
    vms = [vmi(f"vm{i}", "node-a", f"d{i}") for i in range(1, count + 1)]
    if own_host:
        vms[0]["spec"]["nodeSelector"][HOSTNAME] = own_host
    disks = [o for i in range(1, count + 1) for o in rwx_disk(f"d{i}", "node-a")]
    return [node("node-a"), node("node-b"), node("node-c"), node("old-1", cpu=OLD_CPU), *disks, *vms,
            *(launcher_pod_of(v) for v in vms)]


async def passed(obj, objects):
    return obj


def adding(selector, annotations=None):
    async def added(obj, objects):
        metadata = {**obj["metadata"], "annotations": {**obj["metadata"]["annotations"], **(annotations or {})}}
        return {**obj, "metadata": metadata, "spec": {**obj["spec"], "addedNodeSelector": dict(selector)}}
    return added


async def played(objects, admit_migration=passed, pace=Pace()):
    return await Drain(objects, "node-a", admit_migration, passed, pace).run()


def events(done, what):
    return [(at, name) for at, happened, name in done.log if happened == what]


async def test_every_evacuation_is_created_at_once_and_the_slots_hold():
    done = await played(cluster())
    assert [at for at, _ in events(done, "evacuation created")] == [0.0] * 8
    migration = done.migrations[0]
    assert migration["metadata"]["annotations"] == {"kubevirt.io/evacuationMigration": "node-a"}
    assert migration["spec"]["priority"] == "system-critical" and "addedNodeSelector" not in migration["spec"]
    assert done.peaks == {"cluster": 2, "outbound": 2}  # one drained node: its 2 outbound slots bind
    one = await played(cluster(), pace=Pace(outbound=1))
    assert one.peaks == {"cluster": 1, "outbound": 1} and one.ended > done.ended


async def test_five_at_most_in_the_cluster():
    done = await played(cluster(), pace=Pace(outbound=8))
    assert done.peaks["cluster"] == 5


async def test_the_added_selector_is_merged_under_the_vms_own():
    done = await played(cluster(1), adding({HOSTNAME: "node-c"}))
    assert done.vm_nodes()["vm1"] == "node-c"
    own = await played(cluster(1, own_host="node-b"), adding({HOSTNAME: "node-c"}))
    assert own.vm_nodes()["vm1"] == "node-b"  # the VM's own key wins


async def test_an_unschedulable_target_fails_after_300_s_and_the_next_waits_its_backoff():
    """Aimed at a node of an older CPU: the target pod never fits. Each evacuation fails after 300 s;
    the next gets its target pod 20 s after the first failure, then 40 s after the second."""
    done = await played(cluster(1), adding({HOSTNAME: "old-1"}), Pace(limit=800))
    assert done.ended is None and len(done.unschedulable) >= 2
    failed = [at for at, _ in events(done, "failed")]
    targets = [at for at, _ in events(done, "target pod created")]
    assert failed[0] - targets[0] == 300.0
    assert targets[1] - failed[0] == 20.0 and targets[2] - failed[1] == 40.0


async def test_a_share_manager_comes_back_only_after_its_old_pod_is_gone():
    done = await played(cluster(2))
    gone = dict((volume, at) for at, volume in events(done, "share-manager pod gone"))
    created = dict((volume, at) for at, volume in events(done, "share-manager pod created"))
    assert set(gone) == set(created) == {"pvc-d1", "pvc-d2"}
    assert all(created[v] > gone[v] > 0 for v in gone)
    assert all(where != {None} for where in done.storage_nodes().values())  # serving again when the drain ends


async def test_a_syncs_evacuations_are_admitted_at_once_none_seeing_another():
    seen = []

    async def admitted(obj, objects):
        seen.append(sum(1 for o in objects if o["kind"] == "VirtualMachineInstanceMigration"))
        await asyncio.sleep(0)  # the others are admitted meanwhile
        return obj

    await played(cluster(), admitted)
    assert seen[:8] == [0] * 8


async def test_the_vmis_are_marked_for_evacuation_and_the_mark_cleared_once_migrated():
    marks = []

    async def admitted(obj, objects):
        marks.append({o["metadata"]["name"]: o["status"].get("evacuationNodeName") for o in objects
                      if o["kind"] == "VirtualMachineInstance"})
        return obj

    done = await played(cluster(2), admitted)
    assert marks[0] == {"vm1": "node-a", "vm2": "node-a"}
    assert all("evacuationNodeName" not in o["status"] for o in done.objects if o["kind"] == "VirtualMachineInstance")


async def test_an_aimed_miss_fails_after_the_migrations_own_timeout():
    """kubevirt.io/migrationUnschedulablePodTimeoutSeconds: 10 s, counted from the target pod's creation."""
    timeout = {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "10"}
    done = await played(cluster(1), adding({HOSTNAME: "old-1"}, timeout), Pace(limit=60))
    failed, targets = [at for at, _ in events(done, "failed")], [at for at, _ in events(done, "target pod created")]
    assert failed[0] - targets[0] == 10.0 and done.stuck == 10.0


async def test_the_drained_nodes_other_pods_are_evicted_and_placed_again_elsewhere():
    done = await played([*cluster(1), workload_pod(1, "node-a"), workload_pod(2, "node-a")])
    placed = [name for _, name in events(done, "pod placed again")]
    assert len(placed) == 2 and not any(name.endswith("on node-a") for name in placed)


async def test_a_node_cordoned_mid_drain_takes_no_new_pod():
    """The two target pods created at 0 s are bound at once (kube-scheduler's first try follows the
    create by milliseconds), before the cordon at 1 s; none created after it lands."""
    done = await played(cluster(), adding({HOSTNAME: "node-c"}), Pace(cordon=((1.0, "node-c"),), limit=40))
    assert events(done, "cordoned") == [(1.0, "node-c")]
    nodes = done.vm_nodes()
    assert {nodes["vm1"], nodes["vm2"]} == {"node-c"} and {nodes[f"vm{i}"] for i in range(3, 9)} == {"node-a"}
    assert done.stuck >= 9.0  # aimed there after the cordon: Unschedulable from 31 s to the end
