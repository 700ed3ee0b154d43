"""The keeper's passes on the emulator: what it creates, when it holds back, what it tells."""
import asyncio
import contextlib
import datetime
import json
import logging

import kmock as kmocklib
import pytest
from tests.support.stores import api_host, for_host, in_cache, watched_store
from tests.support.kube import node, rwx_disk
from tests.support.kubevirt_api import (
    TIMING,
    VMIMS,
    VMIS,
    ago,
    apart_vm,
    eventually,
    launcher,
    migration,
    sample,
    stamp,
    three_nodes,
    vmi,
)

from webhook.cluster.reflector import Timing
from webhook.config import Settings
from webhook.keeper import keeper as keeper_module
from webhook.keeper.keeper import Keeper, KeeperTiming
from webhook.logs import JsonFormatter
from webhook.rules.shared.alone import Alone
from webhook.rules.shared.facts import claims_of


def record(report, name="vm1"):
    """What the pass that made `report` made of one VM."""
    return next(r for r in report.vms if r.name == name)


def events_about(cluster, name="vm1"):
    return [e for e in cluster.events() if e["involvedObject"]["name"] == name]


async def events_settle(cluster, count, name="vm1"):
    """Events are sent in the background: wait until `count` of them have arrived."""
    return await eventually(lambda: len(events_about(cluster, name)) >= count and events_about(cluster, name))


def refused_for_vm1(request):
    """KubeVirt's admission turning away every migration of vm1 (422)."""
    if (request.data.get("spec") or {}).get("vmiName") == "vm1":
        return kmocklib.KubernetesError(status=422, reason="Invalid", message="admission webhook denied the request")
    return None


def vm1_then_vm2():
    """Two VMs apart, vm2 come apart later than vm1: vm1 is tried first."""
    vm2 = apart_vm("vm2")
    for obj in vm2:
        if obj["kind"] == "Pod" and obj["metadata"].get("labels", {}).get("kubevirt.io") == "virt-launcher":
            obj["metadata"]["creationTimestamp"] = ago(hours=1)
    return apart_vm("vm1") + vm2


# --------------------------------------------------------------------------- the migration


async def test_a_vm_apart_from_its_storage_gets_one_targeted_migration(cluster, make_keeper):
    # node-b's hostname label differs from its name: addedNodeSelector is label-based.
    cluster.seed([node("node-a"), node("node-b", **{"kubernetes.io/hostname": "b.example"})] + apart_vm())
    keeper = await make_keeper()
    created_before = sample("colocate_keeper_migrations_total", result="created")

    report = await keeper.run_pass()

    [made] = cluster.migrations()
    assert report.created == (f"default/{made['metadata']['name']}",)
    assert made["apiVersion"] == "kubevirt.io/v1" and made["kind"] == "VirtualMachineInstanceMigration"
    meta = made["metadata"]
    assert meta["generateName"] == "vm1-colocate-" and meta["name"].startswith("vm1-colocate-")
    assert meta["namespace"] == "default"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "kubevirt-colocate"}
    assert meta["annotations"]["kubevirt-scheduler/node"] == "node-b"
    assert meta["annotations"]["kubevirt-scheduler/reason"].startswith(
        "migrating from node-a to node-b: disks served from node-b, the VM runs on node-a")
    # KubeVirt gives up on its target pod after a minute unschedulable, not its default 5.
    assert meta["annotations"]["kubevirt.io/migrationUnschedulablePodTimeoutSeconds"] == "60"
    # The emulated cluster keeps spec.priority (see the test where it is pruned): ours queue last.
    assert made["spec"] == {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "b.example"},
                            "priority": "system-maintenance"}
    assert sample("colocate_keeper_migrations_total", result="created") == created_before + 1

    [event] = await events_settle(cluster, 1)
    assert event["involvedObject"] == {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                       "name": "vm1", "namespace": "default", "uid": "uid-vm1"}
    assert event["reason"] == "MigratingToStorage" and event["type"] == "Normal"
    assert "from node-a to node-b" in event["message"] and meta["name"] in event["message"]
    assert record(report).last_action == f"created migration {meta['name']} to node-b"

    # Its migration is in flight: later passes add nothing.
    for _ in range(3):
        report = await keeper.run_pass()
        assert report.created == ()
    assert len(cluster.migrations()) == 1
    assert record(report).hold == Alone.MIGRATING


async def test_a_vm_moved_by_a_targeted_migration_can_be_moved_again(cluster, make_keeper):
    """Its pod was a migration target: its nodeSelector names the node an earlier migration asked
    for (kubernetes.io/hostname). The next move is judged as KubeVirt makes the next target."""
    objects = apart_vm()  # on node-a, its disk served from node-b
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["labels"].get("kubevirt.io") == "virt-launcher")
    pod["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = "0d9c2b7e-1111-4a2b-9c3d-44e5f6a7b8c9"
    pod["spec"].setdefault("nodeSelector", {})["kubernetes.io/hostname"] = "node-a"  # an earlier move's addedNodeSelector
    cluster.seed(three_nodes() + objects)
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert len(report.created) == 1, record(report).decision
    [made] = cluster.migrations()
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}


async def test_a_migration_that_succeeds_is_followed_to_its_end(cluster, make_keeper):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    succeeded = sample("colocate_keeper_migrations_total", result="succeeded")
    await keeper.run_pass()
    [made] = cluster.migrations()

    await cluster.finish(made["metadata"]["name"], "Succeeded", "vm1", "node-b")
    await eventually(lambda: in_cache(keeper.watch.vmis, "default", "vm1")["status"]["nodeName"] == "node-b")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]).get("status"))
    report = await keeper.run_pass()

    assert report.created == () and report.states["co-located"] == 1
    assert sample("colocate_keeper_migrations_total", result="succeeded") == succeeded + 1
    ended = (await events_settle(cluster, 2))[-1]
    assert ended["reason"] == "MigratedToStorage" and ended["type"] == "Normal"
    assert made["metadata"]["name"] in ended["message"] and "succeeded" in ended["message"]
    assert record(report).state == "co-located"
    await keeper.run_pass()  # its end is announced once: the migration is no longer followed
    assert sample("colocate_keeper_migrations_total", result="succeeded") == succeeded + 1


async def test_after_a_failed_migration_the_vm_backs_off(cluster, make_keeper):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    failed = sample("colocate_keeper_migrations_total", result="failed")
    await keeper.run_pass()
    [made] = cluster.migrations()

    await cluster.finish(made["metadata"]["name"], "Failed")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]).get("status"))
    for _ in range(3):
        report = await keeper.run_pass()
        assert report.created == ()

    assert len(cluster.migrations()) == 1
    assert sample("colocate_keeper_migrations_total", result="failed") == failed + 1
    ended = (await events_settle(cluster, 2))[-1]
    assert ended["reason"] == "MigrationToStorageFailed" and ended["type"] == "Warning"
    assert "failed; no new attempt before " in ended["message"]
    assert record(report).hold == Alone.BACKING_OFF
    assert "after 1 failed migration" in record(report).decision

    # KubeVirt garbage-collects old migrations: the leader remembers the failure.
    async with cluster.api() as session:
        await session.delete(f"{VMIMS}/{made['metadata']['name']}")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]) is None)
    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == Alone.BACKING_OFF


async def test_a_migration_that_ended_before_the_vmi_shows_it_is_not_repeated(cluster, make_keeper):
    """The watch of migrations shows ours Succeeded while the VMI and its pods, on watches that lag
    behind (each resource has its own), still show the VM where it was: it is not moved again."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    [created] = (await keeper.run_pass()).created
    name = created.split("/")[1]

    await cluster.patch(f"{VMIMS}/{name}", {"status": {"phase": "Succeeded", "phaseTransitionTimestamps": [
        {"phase": "Succeeded", "phaseTransitionTimestamp": stamp()}]}})
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name).get("status", {}).get("phase")
                     == "Succeeded")
    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()
    assert len(cluster.migrations()) == 1
    assert record(report).hold == Alone.MIGRATING

    await cluster.finish(name, "Succeeded", "vm1", "node-b")  # the VMI catches up: it names the migration
    await eventually(lambda: in_cache(keeper.watch.vmis, "default", "vm1")["status"]["nodeName"] == "node-b")
    report = await keeper.run_pass()
    assert report.created == () and report.states["co-located"] == 1


async def test_a_migration_a_previous_leader_made_is_followed_not_repeated(cluster, make_keeper):
    earlier = migration("vm1-colocate-prev1", "vm1", phase="Running", ours=True, created=ago(minutes=2))
    cluster.seed(three_nodes() + apart_vm() + [earlier])
    keeper = await make_keeper()

    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == Alone.MIGRATING
    await cluster.finish("vm1-colocate-prev1", "Succeeded", "vm1", "node-b")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", "vm1-colocate-prev1").get("status", {}).get(
        "phase") == "Succeeded")
    await keeper.run_pass()
    [ended] = await events_settle(cluster, 1)
    assert ended["reason"] == "MigratedToStorage" and "vm1-colocate-prev1" in ended["message"]


async def test_a_migration_deleted_under_way_counts_as_failed(cluster, make_keeper, caplog):
    """Deleting a migration aborts it: the VM is neither left "migrating" nor moved again at once."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    [created] = (await keeper.run_pass()).created
    name = created.split("/")[1]
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name))
    await keeper.run_pass()

    async with cluster.api() as session:
        await session.delete(f"{VMIMS}/{name}")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name) is None)
    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == Alone.BACKING_OFF
    await keeper.run_pass()  # its end is said once: the migration is no longer followed
    gone = [r for r in caplog.records if r.getMessage() == "keeper migration gone"]
    assert [r.fields["migration"] for r in gone] == [name]


# --------------------------------------------------------------------------- limits


async def test_keep_after_holds_a_vm_apart_only_briefly(cluster, make_keeper):
    cluster.seed(three_nodes() + apart_vm(storage="node-a"))
    now = [datetime.datetime.now(datetime.UTC)]  # the keeper's clock, moved on by the test
    keeper = await make_keeper(Settings(keep="migrate", keep_after=2), clock=lambda: now[0])
    assert (await keeper.run_pass()).states["co-located"] == 1

    now[0] = datetime.datetime.now(datetime.UTC)
    await cluster.move_storage("pvc-vm1-disk", "node-b")  # its share-manager restarts elsewhere, now
    await eventually(lambda: (in_cache(keeper.store.pods, "longhorn-system", "share-manager-pvc-vm1-disk")
                              or {}).get("spec", {}).get("nodeName") == "node-b")
    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == Alone.APART_BRIEFLY
    now[0] += datetime.timedelta(seconds=0.5)
    assert (await keeper.run_pass()).created == ()
    now[0] += datetime.timedelta(seconds=2)  # apart 2.5 s by the keeper's clock (its start read in whole seconds)
    assert len((await keeper.run_pass()).created) == 1


@pytest.mark.parametrize("started", ["2h", "1min"])
async def test_how_long_a_vm_has_been_apart_comes_from_the_cluster_not_the_leader(cluster, make_keeper, started):
    """A new leader reads when the VM became apart (here: its launcher pod's start) rather than
    starting the clock again."""
    objects = three_nodes() + apart_vm()
    objects[-1]["metadata"]["creationTimestamp"] = ago(hours=2) if started == "2h" else ago(minutes=1)
    cluster.seed(objects)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600))

    report = await keeper.run_pass()

    if started == "2h":
        assert len(report.created) == 1
        assert sample("colocate_vms_apart_over_hour") == 1
        assert sample("colocate_vms_apart_longest_seconds") >= 7200
    else:
        assert report.created == ()
        assert record(report).hold == Alone.APART_BRIEFLY
        assert "apart for 6" in record(report).decision  # about 60 of 600 seconds, not 0
        assert sample("colocate_vms_apart_over_hour") == 0


async def test_a_recent_migration_of_any_origin_holds_the_vm(cluster, make_keeper):
    objects = three_nodes() + apart_vm(migration_end=ago(minutes=2))  # e.g. a node drain just moved it
    objects[-1]["metadata"]["creationTimestamp"] = ago(hours=5)
    cluster.seed(objects)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600))

    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == Alone.APART_BRIEFLY
    assert "apart for 12" in record(report).decision  # since the migration ended, about 120 s


async def test_no_more_of_our_migrations_in_flight_than_allowed(cluster, make_keeper):
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2") + apart_vm("vm3"))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=2, keep_max_outbound_per_node=3))

    report = await keeper.run_pass()

    assert len(report.created) == 2 and len(cluster.migrations()) == 2
    assert report.held == {str(Alone.OUR_LIMIT): 1}
    assert (await keeper.run_pass()).created == ()
    # One ends: room for the third.
    done = cluster.migrations()[0]
    vm = done["spec"]["vmiName"]
    await cluster.finish(done["metadata"]["name"], "Succeeded", vm, "node-b")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", done["metadata"]["name"]).get("status"))
    assert len((await keeper.run_pass()).created) == 1
    assert len(cluster.migrations()) == 3


async def test_no_more_than_five_migrations_in_flight_cluster_wide(cluster, make_keeper):
    others = [migration(f"drain-{i}", f"other-{i}") for i in range(4)]
    stuck = migration("drain-stuck", "other-9", phase="Scheduling", created=ago(hours=2))  # stale: not counted
    finished = migration("drain-done", "other-8", phase="Succeeded")
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2") + others + [stuck, finished])
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=2))

    report = await keeper.run_pass()

    assert len(report.created) == 1 and len(cluster.migrations()) == 1
    assert report.held == {str(Alone.CLUSTER_LIMIT): 1}
    assert "5 migrations in flight cluster-wide (limit 5)" in next(
        r.decision for r in report.vms if r.hold == Alone.CLUSTER_LIMIT)


async def test_a_vm_is_moved_at_most_twice_a_day(cluster, make_keeper):
    """Something keeps moving its storage away (or the VM): the keeper stops following after two moves."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    for storage, vm_node in (("node-b", "node-c"), ("node-c", "node-b")):
        [created] = (await keeper.run_pass()).created
        name = created.split("/")[1]
        await cluster.finish(name, "Succeeded", "vm1", storage)
        await cluster.move_storage("pvc-vm1-disk", vm_node)  # and then the storage moves away again
        await eventually(lambda: in_cache(keeper.watch.migrations, "default", name).get("status"))
        await eventually(lambda: in_cache(keeper.watch.vmis, "default", "vm1")["status"]["nodeName"] == storage)
        await eventually(lambda: in_cache(keeper.store.pods,
            "longhorn-system", "share-manager-pvc-vm1-disk")["spec"]["nodeName"] == vm_node)

    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()
    assert len(cluster.migrations()) == 2
    assert record(report).hold == Alone.DAILY_LIMIT
    assert "migrated 2 times in the last 24h (limit 2)" in record(report).decision


# --------------------------------------------------------------------------- what it leaves alone


async def test_report_mode_decides_and_reports_but_creates_nothing(cluster, make_keeper):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper(Settings(keep="report", keep_after=0))

    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()
    assert cluster.migrations(ours=False) == []
    assert record(report).hold == Alone.REPORT_ONLY
    assert record(report).decision.startswith("report only: would migrate from node-a to node-b")
    assert report.states == {"co-located": 0, "apart": 1, "split": 0, "unresolved": 0}
    await keeper.events.close()  # whatever the passes queued has reached the API first
    assert events_about(cluster) == []


async def test_split_unmigratable_opted_out_and_not_opted_in_vms_are_left_alone(cluster, make_keeper):
    split = vmi("split", "node-a", "s-1", "s-2")
    cordoned = node("node-c", unschedulable=True)
    cluster.seed(
        [node("node-a"), node("node-b"), cordoned, node("node-d")]
        + rwx_disk("s-1", "node-b") + rwx_disk("s-2", "node-d") + [split, launcher(split)]
        + apart_vm("pinned", migratable=False)
        + apart_vm("mine", keep="false")
        + apart_vm("stranger", opted_in=False)
        + apart_vm("fenced", storage="node-c"))
    keeper = await make_keeper()

    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()

    assert cluster.migrations(ours=False) == []
    holds = {r.name: (str(r.state), r.hold) for r in report.vms}
    assert holds == {
        "split": ("split", Alone.NOT_APART),
        "pinned": ("apart", Alone.NOT_MIGRATABLE),
        "mine": ("apart", Alone.OPTED_OUT),
        "fenced": ("apart", Alone.TARGET_UNFIT),
    }  # "stranger" is not opted in: not even counted
    assert "node node-c is cordoned" in record(report, "fenced").decision
    assert "PVC vm-local is not shared" in record(report, "pinned").decision


async def test_every_state_is_counted(cluster, make_keeper):
    home = vmi("home", "node-b", "home-disk")
    lost = vmi("lost", "node-a", "lost-disk")
    split = vmi("split", "node-a", "s-1", "s-2")
    cluster.seed(three_nodes() + apart_vm()
                 + rwx_disk("home-disk", "node-b") + [home, launcher(home)]
                 + rwx_disk("lost-disk", None, state="stopped") + [lost, launcher(lost)]
                 + rwx_disk("s-1", "node-b") + rwx_disk("s-2", "node-c") + [split, launcher(split)]
                 + [vmi("off", None, "home-disk") | {"status": {"phase": "Succeeded"}}])
    keeper = await make_keeper(Settings(keep="report", keep_after=0))

    report = await keeper.run_pass()

    assert report.states == {"co-located": 1, "apart": 1, "split": 1, "unresolved": 1}
    for state in ("co-located", "apart", "split", "unresolved"):
        assert sample("colocate_vms", state=state) == 1
    assert "share-manager of pvc-lost-disk is stopped" in record(report, "lost").why


# --------------------------------------------------------------------------- targeted migration


def strict_decoding_error():
    raise kmocklib.KubernetesError(status=400, reason="BadRequest",
                                   message='VirtualMachineInstanceMigration in version "v1" cannot be handled as a '
                                           'VirtualMachineInstanceMigration: strict decoding error: unknown field '
                                           '"spec.addedNodeSelector"')


@pytest.mark.parametrize("answer", ["pruned", "strict"])
async def test_without_added_node_selector_nothing_is_created_until_an_upgrade(cluster, make_keeper, kmock, caplog,
                                                                               answer):
    """KubeVirt < 1.6: the dry run shows the field dropped (201) or refused (400 under fieldValidation=Strict)."""
    old = {"kubevirt": True}

    def old_kubevirt(request):
        if not old["kubevirt"] or request.params.get("dryRun") != "All":
            return None  # spent: the emulator answers from now on (KubeVirt was upgraded)
        if answer == "strict":
            strict_decoding_error()
        pruned = dict(request.data, spec={"vmiName": request.data["spec"]["vmiName"]})
        return pruned

    kmock["create", kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << old_kubevirt
    cluster.seed(three_nodes() + apart_vm())
    timing = KeeperTiming(period=TIMING.period, recheck_targeted=0.5, request_timeout=2.0, watch=TIMING.watch)
    keeper = await make_keeper(timing=timing)
    caplog.set_level(logging.INFO, logger="webhook.keeper")

    for _ in range(3):
        report = await keeper.run_pass()
        assert report.created == ()
    assert cluster.migrations(ours=False) == []
    assert record(report).hold == Alone.UNTARGETED
    assert sample("colocate_keeper_targeted_migration") == 0
    said = [r for r in caplog.records if r.getMessage() == "targeted migration unavailable"]
    assert len(said) == 1  # once, not once a pass
    assert "needs KubeVirt 1.6" in said[0].fields["why"]
    dry_runs = [r for r in kmock if r.method == "POST" and r.params.get("dryRun") == "All"]
    assert len(dry_runs) == 1 and dry_runs[0].params.get("fieldValidation") == "Strict"

    old["kubevirt"] = False  # upgraded: noticed at the next check
    keeper.targeted.recheck = 0.0  # the next check is due (the test does not wait out its 0.5 s)
    assert len((await keeper.run_pass()).created) == 1
    assert sample("colocate_keeper_targeted_migration") == 1


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("answer", [403, 429, 503])
async def test_a_failed_create_is_counted_and_reported_never_raised(cluster, make_keeper, kmock, answer):
    """A 403 refuses each VM's own create, a 429 or a 503 fails it: each VM is held with the API's
    words and tried once a pass at most; two VMs failing are theirs, not the keeper's (/readyz says the
    namespace waits for the next pass, not that the API is lost)."""
    def failing(request):
        if request.params.get("dryRun") == "All":
            return request.data
        raise kmocklib.KubernetesError(status=answer, reason="Forbidden", message="cannot create migrations")

    kmock["create", kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << failing
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2"))
    keeper = await make_keeper()
    errors = sample("colocate_keeper_migrations_total", result="error")

    report = await keeper.run_pass()

    assert report.created == ()
    assert sample("colocate_keeper_migrations_total", result="error") == errors + 2
    # A refusal is about the VM; a 429 or 5xx of two VMs leaves their namespace for the next pass, said. Never the API lost.
    assert all(note.startswith("namespace default: not tried in this pass: ") for note in keeper.degraded())
    assert f"creating a migration failed: API answered {answer}" in record(report).last_action
    report = await keeper.run_pass()
    assert sample("colocate_keeper_migrations_total", result="error") == errors + 2  # each waits its backoff
    assert {r.hold for r in report.vms} == {Alone.REFUSED}
    verb = "failed" if answer >= 500 else "was refused"
    assert f"its migration {verb} once (creating a migration failed: API answered {answer}: cannot create migrations)" \
        in record(report).decision


async def test_one_vm_whose_migration_is_refused_backs_off_and_the_others_still_move(cluster, make_keeper, kmock):
    """KubeVirt's admission refuses migrations of vm1 (422): vm1 waits its backoff; vm2 is moved."""
    kmock.refuse = refused_for_vm1
    cluster.seed(three_nodes() + vm1_then_vm2())
    keeper = await make_keeper()

    report = await keeper.run_pass()

    assert [name.split("/")[1].split("-colocate-")[0] for name in report.created] == ["vm2"]
    assert not any("422" in note for note in keeper.degraded())  # one VM's refusal is no fault of the keeper's
    assert "creating a migration failed: API answered 422" in record(report).last_action
    report = await keeper.run_pass()
    assert report.created == ()  # vm1 waits, vm2's is in flight
    vm1 = record(report)
    assert vm1.hold == "migration refused" and "retrying after" in vm1.decision


async def test_a_vm_whose_other_share_manager_is_restarting_is_not_moved(cluster, make_keeper):
    """Disk d1 served from node-b for days, d2 from node-a until its share-manager restarted: the
    VM looks apart only while d2 is not back; nothing moves until it has settled."""
    obj = vmi("vm1", "node-a", "d1", "d2")
    d1 = rwx_disk("d1", "node-b")
    d2 = rwx_disk("d2", "node-a", state="starting", pod=False)
    for item in d1:
        if item["kind"] == "Pod":
            item["metadata"]["creationTimestamp"] = ago(days=4)
    cluster.seed(three_nodes() + d1 + d2 + [obj, launcher(obj)])
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600))
    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).hold == "storage settling" and "share-manager of pvc-d2 is starting" in record(report).decision


async def test_a_failing_watch_means_nothing_is_created(cluster, make_keeper, kmock):
    cluster.seed(three_nodes() + apart_vm())
    short = Timing(watch_seconds=(0.2, 0.3), backoff_initial=0.02, backoff_cap=0.2, short_watch=0.1)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0),
                               timing=KeeperTiming(period=TIMING.period, request_timeout=2.0, watch=short))

    def forbidden():
        raise kmocklib.KubernetesError(status=403, reason="Forbidden", message="migrations is forbidden")

    kmock["/apis/kubevirt.io/v1/virtualmachineinstancemigrations"] << forbidden  # RBAC lost after start
    await eventually(lambda: keeper.degraded(), timeout=5)

    report = await keeper.run_pass()

    assert report.created == () and cluster.migrations(ours=False) == []
    assert "403" in report.note
    assert record(report).hold == "view incomplete"
    assert any("virtualmachineinstancemigrations" in note for note in keeper.degraded())


async def test_a_disk_the_api_cannot_tell_about_leaves_the_vm_unresolved(cluster, make_keeper, kmock):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    late = vmi("vm1", "node-a", "vm1-disk", "late-disk")  # a disk hotplugged a moment ago
    await cluster.patch(f"{VMIS}/vm1", {"spec": late["spec"]})
    await eventually(lambda: "late-disk" in claims_of(in_cache(keeper.watch.vmis, "default", "vm1")))
    kmock["fetch"] << 500  # the PVC the caches do not hold cannot be read either

    report = await keeper.run_pass()

    assert report.created == () and report.states["unresolved"] == 1
    assert "late-disk" in record(report).why and "500" in record(report).why


async def test_a_vmi_of_unexpected_shape_is_skipped_with_one_log_line(cluster, make_keeper, caplog):
    odd = vmi("odd", "node-a", "odd-disk")
    odd["status"]["conditions"] = "Ready"
    cluster.seed(three_nodes() + apart_vm() + rwx_disk("odd-disk", "node-b") + [odd])
    keeper = await make_keeper()
    caplog.set_level(logging.INFO, logger="webhook.keeper")

    for _ in range(2):
        report = await keeper.run_pass()

    skipped = [r for r in caplog.records if r.getMessage() == "keeper skipped an object"]
    assert len(skipped) == 1 and skipped[0].fields["object"] == "VMI default/odd"
    assert "status.conditions is a str" in skipped[0].fields["why"]
    assert [r.name for r in report.vms] == ["vm1"]
    assert [m["spec"]["vmiName"] for m in cluster.migrations()] == ["vm1"]


# --------------------------------------------------------------------------- what the running keeper logs


def pass_lines(caplog):
    return [r for r in caplog.records if r.getMessage() == "keeper pass"]


async def test_the_running_keeper_logs_each_pass_at_debug_only(cluster, kmock, caplog):
    """One JSON line a pass at debug level: what it created, the VMs by state, what held them, any
    note; not each VM (those have their own lines). Nothing of it at info level."""
    cluster.seed(three_nodes() + apart_vm())
    settings = Settings(keep="migrate", keep_after=0)
    store = await watched_store(kmock, settings)
    api = for_host(api_host(kmock))
    keeper = Keeper(api, store, settings, timing=TIMING)
    caplog.set_level(logging.DEBUG, logger="webhook.keeper")
    running = asyncio.create_task(keeper.run())
    try:
        held = {str(Alone.MIGRATING): 1}
        await eventually(lambda: any(r.fields["held"] == held for r in pass_lines(caplog)), timeout=5)
        [made] = cluster.migrations()
        [creating] = [r for r in pass_lines(caplog) if r.fields["created"]]
        line = json.loads(JsonFormatter().format(creating))
        assert "\n" not in JsonFormatter().format(creating)
        assert line["level"] == "debug" and line["logger"] == "webhook.keeper"
        assert {k: v for k, v in line.items() if k not in ("time", "level", "logger", "msg")} == {
            "created": [f"default/{made['metadata']['name']}"],
            "states": {"co-located": 0, "apart": 1, "split": 0, "unresolved": 0},
            "held": {}, "note": ""}

        caplog.set_level(logging.INFO, logger="webhook.keeper")
        caplog.clear()
        await cluster.finish(made["metadata"]["name"], "Succeeded", "vm1", "node-b")
        # The passes go on (the VM's new state is an info line), and none is logged.
        await eventually(lambda: any(r.getMessage() == "keeper decision" and r.fields["state"] == "co-located"
                                     for r in caplog.records), timeout=5)
        passes = keeper.passes
        await eventually(lambda: keeper.passes >= passes + 3, timeout=10 * TIMING.period + 2)
        assert pass_lines(caplog) == []
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await store.close()
        await api.close()


# --------------------------------------------------------------------------- sharing the loop


async def test_a_pass_over_many_vms_lets_admission_run_while_it_goes(cluster, make_keeper):
    """Admission shares the keeper's event loop, and the caches answer a pass from memory
    without yielding: a pass over a few hundred VMs gives the loop back as it goes, so other
    work (an admission) runs several times before the pass ends, not only after it."""
    cluster.seed(three_nodes() + [obj for i in range(300) for obj in apart_vm(f"vm{i}", storage="node-a")])
    keeper = await make_keeper()
    ran = 0

    async def admission():
        nonlocal ran
        while True:
            ran += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(admission())
    await asyncio.sleep(0)
    before = ran
    report = await keeper.run_pass()
    during = ran - before
    other.cancel()

    assert report.states["co-located"] == 300
    assert during >= 3, during


async def test_a_dry_run_that_proves_nothing_for_one_vm_is_made_of_the_next(cluster, make_keeper, kmock):
    """KubeVirt's admission refuses every migration of vm1 (422), its dry run included: that says
    nothing of spec.addedNodeSelector, so the next VM's dry run settles it and vm2 moves in the
    same pass, rather than vm1 holding every VM until its own answer changes."""
    def dry_run_refused_for_vm1(request):
        if (refused := refused_for_vm1(request)) is not None:
            raise refused
        return None

    kmock["create", kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << dry_run_refused_for_vm1
    kmock.refuse = refused_for_vm1  # creates
    cluster.seed(three_nodes() + vm1_then_vm2())
    keeper = await make_keeper()

    report = await keeper.run_pass()

    dry_runs = [r.data["spec"]["vmiName"] for r in kmock if r.method == "POST" and r.params.get("dryRun") == "All"]
    assert dry_runs == ["vm1", "vm2"]
    assert [name.split("/")[1].split("-colocate-")[0] for name in report.created] == ["vm2"]


async def test_a_vm_whose_only_disk_apart_was_hotplugged_is_moved_to_it(cluster, make_keeper):
    """vm1 boots from a container disk; its one disk was hotplugged (the VMI lists it, the
    launcher pod does not mount it) and is served from node-b: apart, and moved there."""
    objects = apart_vm()
    for obj in objects:
        if obj["kind"] == "VirtualMachineInstance":
            for volume in obj["spec"]["volumes"]:
                if "persistentVolumeClaim" in volume:
                    volume["persistentVolumeClaim"]["hotpluggable"] = True
        if obj["kind"] == "Pod" and obj["metadata"]["labels"].get("kubevirt.io") == "virt-launcher":
            obj["spec"]["volumes"] = [v for v in obj["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    cluster.seed([node("node-a"), node("node-b")] + objects)
    keeper = await make_keeper()

    report = await keeper.run_pass()

    [made] = cluster.migrations()
    assert made["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-b"
    assert report.created == (f"default/{made['metadata']['name']}",)


async def test_a_storage_node_check_kept_from_a_pass_is_judged_again_once_its_node_changes(cluster, make_keeper):
    """A later pass takes each apart VM's storage-node check from the pass before while nothing it went by
    changed; cordoning the storage node (an update of it) holds the VM at the next pass, uncordoning frees it,
    and in migrate mode the VM moves on a check made in the pass that moves it."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper(Settings(keep="report", keep_after=0))
    assert record(await keeper.run_pass()).hold == Alone.REPORT_ONLY
    assert record(await keeper.run_pass()).hold == Alone.REPORT_ONLY

    await cluster.patch("/api/v1/nodes/node-b", {"spec": {"unschedulable": True}})
    await eventually(lambda: keeper.store.nodes.table.get("node-b")["spec"].get("unschedulable"))
    held = record(await keeper.run_pass())
    assert held.hold == Alone.TARGET_UNFIT and "node node-b is cordoned" in held.decision

    await cluster.patch("/api/v1/nodes/node-b", {"spec": {"unschedulable": False}})
    await eventually(lambda: not keeper.store.nodes.table.get("node-b")["spec"].get("unschedulable"))
    assert record(await keeper.run_pass()).hold == Alone.REPORT_ONLY


async def test_the_checks_kept_across_passes_hold_no_copy_of_a_node_from_an_earlier_pass(cluster, make_keeper):
    """Each pass reads each node once, a copy of its own; the storage-node checks it keeps (each VM judged again in a
    pass of its own) must not keep those copies alive. At 5,000 nodes of production labels the copies held by the
    checks of 20 passes grew the keeper by about 100 MiB a pass, past its memory limit."""
    import gc

    cluster.seed(three_nodes() + [obj for i in range(20) for obj in apart_vm(f"vm{i}")])
    keeper = await make_keeper(Settings(keep="report", keep_after=0))
    for _ in range(21):  # every VM judged again at least once, each in a pass of its own
        report = await keeper.run_pass()
    assert {r.hold for r in report.vms} == {Alone.REPORT_ONLY}

    gc.collect()
    copies = [o for o in gc.get_objects() if type(o) is dict and isinstance(status := o.get("status"), dict)
              and "allocatable" in status and isinstance(meta := o.get("metadata"), dict) and meta.get("name") == "node-b"]
    assert len(copies) <= 2, len(copies)  # the caches' own (and a read of it still shared): one per pass is a leak


async def test_a_vm_is_moved_on_a_storage_node_check_of_the_pass_that_moves_it(cluster, make_keeper, monkeypatch):
    """A check kept from an earlier pass (`Verdicts`) never moves a VM: the VM the plan moves is judged again,
    and a storage node that no longer takes it (what the caches' record of changes cannot show) holds it."""
    from webhook.keeper import observe

    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper(Settings(keep="report", keep_after=0))
    await keeper.run_pass()  # judged and kept
    keeper.settings = Settings(keep="migrate", keep_after=0)
    keeper.targeted.available = True
    judged = []

    async def full(self, vmi, target, span, launcher):
        judged.append(vmi.name)
        return None, f"node {target} is full"

    monkeypatch.setattr(observe.Observer, "_target", full)
    report = await keeper.run_pass()
    assert judged == ["vm1"] and report.created == ()
    assert record(report).hold == Alone.TARGET_UNFIT


def apart_in_namespaces(count: int) -> list[dict]:
    """`count` VMs on node-a apart from their storage on node-b, each in a namespace of its own."""
    return three_nodes() + [obj for n in range(1, count + 1) for obj in apart_vm(f"vm{n}", namespace=f"ns{n}")]


@pytest.mark.parametrize("keep, most", [("report", 1), ("migrate", 6)])
async def test_a_first_pass_makes_its_plan_again_only_for_what_can_change_it(cluster, make_keeper, monkeypatch, keep,
                                                                              most):
    """The plan covers every VM (seconds at 75,000): a first pass that learns, namespace by namespace, whether
    migrations can be created makes it again only for an answer, never once for each dry run it sends, and in report
    mode, where no answer changes what it does, not at all."""
    made = []

    def counted(*args, **kwargs):
        made.append(1)
        return plan(*args, **kwargs)

    plan = keeper_module.plan
    monkeypatch.setattr(keeper_module, "plan", counted)
    cluster.seed(apart_in_namespaces(12))
    keeper = await make_keeper(Settings(keep=keep, keep_after=0, keep_max_outbound_per_node=12))

    report = await keeper.run_pass()

    assert len(report.created) == (2 if keep == "migrate" else 0)
    assert len(made) <= most, f"the plan was made {len(made)} times"
