"""A drain's evacuation migration, aimed at its VM's storage (`--aim-evacuations on`): what the
apiserver stores (the patch applied to the migration as virt-controller created it), and every
migration it leaves as it came, saying why."""
import copy

import jsonpatch
import pytest
from prometheus_client import generate_latest
from tests.support.kube import (LONGHORN_NS, OLD_CPU, answer, decode_patch, evacuation, launcher_pod_of, migration_review,
                                node, review, rwx_disk, share_manager_pod, vmi, workload_pod)

from webhook.admission.admit import admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline

AIM = Settings(aim_evacuations=True)
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
HOSTNAME = "kubernetes.io/hostname"


def drained(**kw):
    return node("node-a", unschedulable=True, taints=[DRAIN_TAINT], **kw)


def others():
    """node-b busier than node-c; old-1 of an older CPU generation (never takes the migration)."""
    return [node("node-b"), node("node-c"), node("old-1", cpu=OLD_CPU), workload_pod(1, "node-b")]


def running(name, claim, where="node-a", **kw):
    the_vmi = vmi(name, where, claim, **kw)
    return [the_vmi, launcher_pod_of(the_vmi)]


def cluster(storage="node-b", *, source=None, extra=()):
    """vm1 on node-a (drained), its disk d1 served from `storage`."""
    state = {} if storage else {"state": "error", "owner": "node-a"}
    return [source or drained(), *others(), *running("vm1", "d1"), *rwx_disk("d1", storage, **state), *extra]


async def aimed(store, migration=None, settings=AIM, user=None):
    migration = migration or evacuation("vm1", "node-a")
    body = migration_review(migration) if user is None else migration_review(migration, user)
    outcome = await admit(parse_review(body), store, settings, Deadline.after(10, 1))
    envelope = answer(outcome)
    assert envelope["response"]["allowed"] is True
    stored = jsonpatch.apply_patch(migration, decode_patch(envelope))
    return outcome, (stored["spec"].get("addedNodeSelector") or {}).get(HOSTNAME)


async def test_an_evacuation_is_aimed_where_its_storage_runs(make_store):
    outcome, where = await aimed(await make_store(cluster("node-b"), AIM))
    assert where == "node-b", (outcome.skipped, outcome.detail)
    assert "where the NFS server of disk d1 runs" in outcome.decision.reason
    assert answer(outcome)["response"]["auditAnnotations"]["decision"] == "aimed"


async def test_storage_leaving_with_the_vm_aims_at_the_roomiest_node_the_vm_can_migrate_to(make_store):
    """Its share-manager was evicted too: never the older CPU's node, node-c over the busier node-b."""
    outcome, where = await aimed(await make_store(cluster(None), AIM))
    assert where == "node-c"
    assert "will follow it" in outcome.decision.reason


async def test_a_vm_of_the_same_disk_follows_the_first_aim(make_store):
    """One node per volume: vm2 shares d1 with vm1, whose evacuation is aimed at node-b already."""
    first = evacuation("vm2", "node-a", added={HOSTNAME: "node-b"})
    first["metadata"].update(name="kubevirt-evacuation-first", creationTimestamp="2026-11-27T08:00:00Z", uid="m-1")
    store = await make_store(cluster(None, extra=[*running("vm2", "d1"), first]), AIM)
    outcome, where = await aimed(store)
    assert where == "node-b"
    assert "VM default/vm2, which shares disk d1" in outcome.decision.reason


async def test_what_is_aimed_and_not_landed_takes_room(make_store):
    """node-c has room for one VM of this size: aimed at for vm2 already, vm1 goes to node-b."""
    small = {"cpu": "4", "memory": "3Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}
    first = evacuation("vm2", "node-a", added={HOSTNAME: "node-c"})
    first["metadata"].update(name="kubevirt-evacuation-first", creationTimestamp="2026-11-27T08:00:00Z", uid="m-1")
    objects = [drained(), node("node-b"), node("node-c", allocatable=small), workload_pod(1, "node-b"),
               *running("vm1", "d1"), *rwx_disk("d1", None, state="error", owner="node-a"),
               *running("vm2", "d2"), *rwx_disk("d2", None, state="error", owner="node-a"), first]
    _, where = await aimed(await make_store(objects, AIM))
    assert where == "node-b"


async def test_evacuations_created_at_once_plan_together_whatever_the_store(make_store):
    """virt-controller marks both VMs (status.evacuationNodeName) and creates their evacuations at once:
    admitted over the same cluster, neither sees the other's, yet they agree (one node each) because
    each plans both; the caches keep the mark, so `serve` plans as a snapshot does."""
    vms = [*running("vm1", "d1"), *running("vm2", "d2")]
    for obj in vms[::2]:
        obj["status"]["evacuationNodeName"] = "node-a"
    disks = [*rwx_disk("d1", None, state="error", owner="node-a"), *rwx_disk("d2", None, state="error", owner="node-a")]
    store = await make_store([drained(), *others(), *vms, *disks], AIM)
    found = {vm: (await aimed(store, evacuation(vm, "node-a")))[1] for vm in ("vm1", "vm2")}
    assert sorted(found.values()) == ["node-b", "node-c"], found


async def test_a_share_manager_that_came_back_is_followed(make_store):
    back = share_manager_pod("pvc-d1", "node-b")
    _, where = await aimed(await make_store(cluster(None, extra=[back]), AIM))
    assert where == "node-b"


def failed_before(added):
    earlier = evacuation("vm1", "node-a", added=added)
    earlier["metadata"].update(name="kubevirt-evacuation-old", creationTimestamp="2026-11-27T08:00:00Z", uid="m-0")
    earlier["status"] = {"phase": "Failed"}
    return earlier


UNTOUCHED = [
    ("a user's migration", cluster(), evacuation("vm1", "node-a"), "system:admin", "not created by virt-controller"),
    ("another account's", cluster(), evacuation("vm1", "node-a"), "system:serviceaccount:kubevirt-colocate:kubevirt-colocate-keeper",
     "not created by virt-controller"),
    ("the descheduler's", cluster(), evacuation("vm1", "node-a", priority="system-maintenance"), None,
     "a descheduler's evacuation"),
    ("already aimed", cluster(), evacuation("vm1", "node-a", added={HOSTNAME: "node-c"}), None, "already aimed"),
    ("not a drain", cluster(source=node("node-a")), None, None, "its node is not cordoned"),
    ("not opted in", [drained(), *others(), *running("vm1", "d1", opted_in=False), *rwx_disk("d1", "node-b")], None,
     None, "not opted in"),
    ("aimed evacuation failed", cluster(extra=[failed_before({HOSTNAME: "node-b"})]), None, None,
     "its aimed evacuation failed"),
    ("nowhere fits", [drained(), node("old-1", cpu=OLD_CPU), *running("vm1", "d1"),
                      *rwx_disk("d1", None, state="error", owner="node-a")], None, None, "no node fits"),
    ("storage on an older node", [drained(), node("old-1", cpu=OLD_CPU), *running("vm1", "d1"), *rwx_disk("d1", "old-1")],
     None, None, "no node fits"),
]


@pytest.mark.parametrize("name, objects, migration, user, why", UNTOUCHED, ids=[c[0] for c in UNTOUCHED])
async def test_left_as_kubevirt_made_it(make_store, name, objects, migration, user, why):
    outcome, where = await aimed(await make_store(objects, AIM), migration and copy.deepcopy(migration), user=user)
    assert where is None if name != "already aimed" else where == "node-c"
    assert outcome.decision is None and outcome.skipped == why and outcome.patch == ()


async def test_an_untouched_evacuation_that_failed_does_not_stop_the_next_aim_being_untouched_too(make_store):
    """After an aimed one failed and then an untouched one failed, the next is still left alone."""
    untouched = failed_before(None)
    untouched["metadata"].update(name="kubevirt-evacuation-new", creationTimestamp="2026-11-27T08:05:00Z", uid="m-2")
    outcome, where = await aimed(await make_store(cluster(extra=[failed_before({HOSTNAME: "node-b"}), untouched]), AIM))
    assert where is None and outcome.skipped == "an earlier aimed evacuation failed"


async def test_the_keepers_migration_is_never_aimed(make_store):
    ours = evacuation("vm1", "node-a")
    ours["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kubevirt-colocate"}
    outcome, where = await aimed(await make_store(cluster(), AIM), ours)
    assert where is None and outcome.skipped == "not a drain's evacuation"


async def test_with_the_aim_off_every_migration_is_left_alone(make_store):
    outcome, where = await aimed(await make_store(cluster(), AIM), settings=Settings())
    assert where is None and outcome.skipped == "aiming evacuations is off"
    assert answer(outcome)["response"] == {"uid": "uid-1", "allowed": True}


async def test_a_vm_that_names_its_host_is_left_alone(make_store):
    the_vmi = vmi("vm1", "node-a", "d1")
    the_vmi["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "node-a"
    objects = [drained(), *others(), the_vmi, launcher_pod_of(the_vmi), *rwx_disk("d1", "node-b")]
    outcome, where = await aimed(await make_store(objects, AIM))
    assert where is None and outcome.skipped == "its VM names its host"


async def test_the_share_manager_follows_the_aimed_evacuation_of_its_vm(make_store):
    """Re-created after the evacuation was aimed at node-b: pinned there, not among the nodes."""
    aimed_one = evacuation("vm1", "node-a", added={HOSTNAME: "node-b"})
    aimed_one["metadata"].update(name="kubevirt-evacuation-first", creationTimestamp="2026-11-27T08:00:00Z", uid="m-1")
    store = await make_store(cluster(None, extra=[aimed_one]), AIM)
    outcome = await admit(parse_review(review(share_manager_pod("pvc-d1"), namespace=LONGHORN_NS)), store, AIM,
                          Deadline.after(10, 1))
    assert outcome.decision.outcome == "pinned" and outcome.decision.node == "node-b"
    assert "evacuation kubevirt-evacuation-first of its VM default/vm1 is aimed" in outcome.decision.reason
    off = await admit(parse_review(review(share_manager_pod("pvc-d1"), namespace=LONGHORN_NS)), store, Settings(),
                      Deadline.after(10, 1))
    assert off.decision.outcome == "pinned-among"  # as before, with the aim off


class Recorder:
    """Stands in for the EventSink: what would be posted."""

    def __init__(self):
        self.events = []

    def emit_about(self, involved, reason, message, *, warning=False, name=None):
        self.events.append((involved, reason, message, warning))


async def test_an_aimed_evacuation_is_said_on_the_vmi_and_counted():
    """The Event on the VM's VMI (kubectl describe vmi), and colocate_admissions_total{rule="evacuation"}
    by outcome: aimed, and each reason to leave one untouched (aimed-but-failed among them)."""
    import json
    import time

    from tests.support.kube import metric_sample

    from webhook import metrics
    from webhook.admission import server
    from webhook.stores.snapshot import SnapshotStore

    events = Recorder()
    endpoint = server.Admissions(SnapshotStore(cluster("node-b")), AIM, events)
    counted = {"aimed": dict(outcome="aimed", reason=""),
               "failed": dict(outcome="skipped", reason="its aimed evacuation failed")}

    def sampled():
        text = generate_latest(metrics.REGISTRY).decode()
        return {k: metric_sample(text, "colocate_admissions_total", 0.0, rule="evacuation", **labels)
                for k, labels in counted.items()}

    before = sampled()
    body = json.dumps(migration_review(evacuation("vm1", "node-a"))).encode()
    await endpoint.answer(body, endpoint.deadline(10), time.monotonic())
    [(involved, reason, message, warning)] = events.events
    assert (involved["kind"], involved["name"], involved["namespace"], reason, warning) == (
        "VirtualMachineInstance", "vm1", "default", "EvacuationAimed", False)
    assert "aimed at node-b" in message
    endpoint.store = SnapshotStore(cluster("node-b", extra=[failed_before({HOSTNAME: "node-b"})]))
    await endpoint.answer(body, endpoint.deadline(10), time.monotonic())
    assert sampled() == {"aimed": before["aimed"] + 1, "failed": before["failed"] + 1}
    assert len(events.events) == 1  # none for one left untouched
