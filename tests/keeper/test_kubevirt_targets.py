"""The keeper against what KubeVirt really does with a migration: the target pod it creates
(CPU model, features, vendor, machine type), the slots a drain needs, the queue's priority."""
import logging

import kmock as kmocklib
import pytest
from tests.support.stores import in_cache
from tests.support.clock import Clock
from tests.support.kube import node
from tests.support.kubevirt_api import (
    VMIMS,
    ago,
    apart_vm,
    eventually,
    launcher,
    migration,
    sample,
    three_nodes,
    vmi,
)

from webhook.config import Settings
from webhook.rules.keeping.record import Action
from webhook.rules.shared.alone import Alone

from .test_passes import events_settle, record

VMIMS_RESOURCE = ("kubevirt.io", "v1", "virtualmachineinstancemigrations")
MESSAGE = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes "
           "are available: 3 Preemption is not helpful for scheduling.")


def mixed(storage_cpu="Broadwell-IBRS"):
    """node-a of the VM's CPU generation, node-b (its storage) of another, node-c like node-a."""
    return [node("node-a"), node("node-b", cpu=storage_cpu), node("node-c")]


# --------------------------------------------------------------------------- the target pod


@pytest.mark.parametrize("mode", ["migrate", "report"])
async def test_a_storage_node_of_an_older_cpu_generation_holds_the_vm_with_the_reason(cluster, make_keeper, kmock,
                                                                                     mode):
    """The launcher pod would fit node-b; KubeVirt's migration target pod would not."""
    cluster.seed(mixed() + apart_vm())
    keeper = await make_keeper(Settings(keep=mode, keep_after=0))

    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()

    assert cluster.migrations(ours=False) == []
    assert record(report).hold == Alone.TARGET_UNFIT
    assert record(report).decision == ("cannot move to node-b: node node-b lacks cpu-model-migration.node.kubevirt.io/"
                                       "Skylake-Client-IBRS (host-model CPU of the source node)")
    assert not [r for r in kmock if r.method == "POST" and "virtualmachineinstancemigrations" in str(r.url)]


async def test_another_vendor_holds_the_vm(cluster, make_keeper):
    cluster.seed(mixed(storage_cpu="EPYC-Milan") + apart_vm())
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert report.created == ()
    assert "node node-b lacks" in record(report).decision and cluster.migrations() == []


async def test_what_the_target_pod_cannot_be_built_from_holds_the_vm(cluster, make_keeper):
    cluster.seed([node("node-a", cpu=None), node("node-b"), node("node-c")] + apart_vm())
    keeper = await make_keeper()
    for _ in range(2):
        report = await keeper.run_pass()
        assert report.created == ()
    assert record(report).hold == Alone.TARGET_UNFIT
    assert ("cannot tell what its migration target needs: source node node-a has no "
            "host-model-cpu.node.kubevirt.io/* label") in record(report).decision
    assert cluster.migrations(ours=False) == []


def without_machine_types(name):
    """A node whose labeller listed no machine type."""
    bare = node(name)
    for key in [k for k in bare["metadata"]["labels"] if k.startswith("machine-type.")]:
        del bare["metadata"]["labels"][key]
    return bare


@pytest.mark.parametrize("moves", [True, False], ids=["storage-node-has-it", "storage-node-lacks-it"])
async def test_a_vmi_without_status_machine_type_is_judged_by_its_specs(cluster, make_keeper, moves):
    """virt-controller's machine type: status.machine.type, else spec.domain.machine.type (q35)."""
    objects = apart_vm()
    next(o for o in objects if o["kind"] == "VirtualMachineInstance")["status"].pop("machine")
    storage = node("node-b")
    if not moves:
        del storage["metadata"]["labels"]["machine-type.node.kubevirt.io/q35"]
    cluster.seed([node("node-a"), storage, node("node-c")] + objects)
    keeper = await make_keeper()
    report = await keeper.run_pass()
    if moves:
        assert len(report.created) == 1, record(report).decision
        [made] = cluster.migrations()
        assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    else:
        assert report.created == () and record(report).hold == Alone.TARGET_UNFIT
        assert record(report).decision == ("cannot move to node-b: node node-b lacks machine-type.node.kubevirt.io/"
                                           "q35 (machine type of the VM's spec)")


async def test_a_vmi_without_any_machine_type_needs_none_of_its_target(cluster, make_keeper):
    """Neither in the status nor in the spec: no machine-type selector, so a storage node whose
    labeller listed no machine type takes the migration."""
    objects = apart_vm()
    vm = next(o for o in objects if o["kind"] == "VirtualMachineInstance")
    vm["status"].pop("machine")
    vm["spec"]["domain"].pop("machine")
    launcher_pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith("virt-launcher"))
    launcher_pod["spec"]["nodeSelector"].pop("machine-type.node.kubevirt.io/q35")  # rendered from that VMI
    cluster.seed([node("node-a"), without_machine_types("node-b"), node("node-c")] + objects)
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert len(report.created) == 1, record(report).decision


async def test_a_vm_with_a_named_cpu_model_moves_to_a_node_that_has_it(cluster, make_keeper):
    objects = apart_vm()
    next(o for o in objects if o["kind"] == "VirtualMachineInstance")["spec"]["domain"]["cpu"]["model"] = "Broadwell-IBRS"
    # node-b has no Skylake host model, but offers Broadwell-IBRS, and the QEMU the VM runs with.
    newer_qemu = node("node-b", cpu="Broadwell-IBRS", **{"machine-type.node.kubevirt.io/pc-q35-rhel9.6.0": "true"})
    cluster.seed([node("node-a"), newer_qemu, node("node-c")] + objects)
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert len(report.created) == 1, record(report).decision


async def test_a_storage_node_with_an_older_qemu_holds_the_vm(cluster, make_keeper):
    objects = apart_vm()
    next(o for o in objects if o["kind"] == "VirtualMachineInstance")["spec"]["domain"]["cpu"]["model"] = "Broadwell-IBRS"
    cluster.seed(mixed() + objects)
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert report.created == ()
    assert record(report).decision == ("cannot move to node-b: node node-b lacks machine-type.node.kubevirt.io/"
                                       "pc-q35-rhel9.6.0 (machine type of the running VM)")


# --------------------------------------------------------------------------- a target pod that cannot be placed


async def stuck_target(cluster, keeper, made, *, seconds):
    """KubeVirt's target pod for `made`: Pending, the scheduler unable to place it for `seconds`."""
    vm = vmi("vm1", "node-a", "vm1-disk")
    pod = launcher(vm, created=ago(seconds=seconds + 1))
    pod["metadata"]["name"] = "virt-launcher-vm1-t4rgt"
    pod["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = made["metadata"]["uid"]
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE,
        "lastTransitionTime": ago(seconds=seconds)}]}
    await cluster.create("/api/v1/namespaces/default/pods", pod)
    await eventually(lambda: in_cache(keeper.store.pods, "default", "virt-launcher-vm1-t4rgt"))


async def a_stuck_migration_of_ours(cluster, make_keeper, *, seconds=90):
    """A keeper that made a migration whose target pod has been unschedulable for `seconds`, and
    that migration (as the keeper's watch shows it)."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    await keeper.run_pass()
    [made] = cluster.migrations()
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]))
    await stuck_target(cluster, keeper, made, seconds=seconds)
    return keeper, made


async def test_a_migration_whose_target_pod_stays_unschedulable_is_cancelled_and_backs_off(cluster, make_keeper,
                                                                                           caplog):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    failed = sample("colocate_keeper_migrations_total", result="failed")
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    assert len((await keeper.run_pass()).created) == 1
    [made] = cluster.migrations()
    name = made["metadata"]["name"]
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name))

    await stuck_target(cluster, keeper, made, seconds=30)  # not long enough yet
    report = await keeper.run_pass()
    assert report.created == () and len(cluster.migrations()) == 1
    assert record(report).hold == Alone.MIGRATING

    await cluster.patch("/api/v1/namespaces/default/pods/virt-launcher-vm1-t4rgt", {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE,
        "lastTransitionTime": ago(seconds=61)}]}})
    await eventually(lambda: in_cache(keeper.store.pods, "default", "virt-launcher-vm1-t4rgt")["status"][
        "conditions"][0]["lastTransitionTime"] < ago(seconds=60))
    report = await keeper.run_pass()
    assert report.created == ()

    assert cluster.migrations() == []  # deleted: what virtctl migrate-cancel does
    assert sample("colocate_keeper_migrations_total", result="failed") == failed + 1
    assert record(report).hold == Alone.MIGRATING  # as the pass observed it
    assert record(report).decision.startswith(f"cancelling its migration {name}: its target pod virt-launcher-vm1-t4rgt")
    report = await keeper.run_pass()
    assert record(report).hold == Alone.BACKING_OFF and "after 1 failed migration" in record(report).decision
    assert record(report).last_action.startswith(f"cancelled migration {name}: its target pod virt-launcher-vm1-t4rgt "
                                                 "could not be scheduled for 6")
    ended = (await events_settle(cluster, 2))[-1]
    assert ended["reason"] == "MigrationToStorageFailed" and ended["type"] == "Warning"
    assert ended["involvedObject"]["name"] == "vm1" and MESSAGE in ended["message"]
    assert "no new attempt before" in ended["message"]
    [line] = [r for r in caplog.records if r.getMessage() == "keeper migration cancelled"]
    assert MESSAGE in line.fields["why"]
    for _ in range(2):  # never a second migration of the same VM while it backs off
        assert (await keeper.run_pass()).created == ()
    assert cluster.migrations() == []


@pytest.mark.parametrize("answer", [403, 503])
async def test_a_cancel_that_fails_keeps_the_migration_counted_and_is_tried_again(cluster, make_keeper, kmock, answer):
    """A 403 refuses this one delete, a 503 fails it: either way the VM alone is held with the API's
    words and its own backoff, and tried again once that is over; the keeper itself is fine."""
    cluster.seed(three_nodes() + apart_vm())
    clock = Clock()
    keeper = await make_keeper(clock=clock)
    await keeper.run_pass()
    [made] = cluster.migrations()
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]))
    await stuck_target(cluster, keeper, made, seconds=90)
    refusing = {"on": True}

    def refuse_delete(request):
        if refusing["on"] and request.resource.plural == "virtualmachineinstancemigrations":
            return kmocklib.KubernetesError(status=answer, reason="Forbidden", message="cannot delete migrations")
        return None

    kmock.refuse_delete = refuse_delete

    report = await keeper.run_pass()
    assert report.created == ()
    assert len(cluster.migrations()) == 1 and record(report).hold == Alone.MIGRATING
    refused = keeper.state.refusal("default", "vm1", Action.CANCEL)
    assert refused is not None and str(answer) in refused.words and "cannot delete migrations" in refused.words
    assert not keeper.degraded()  # one object failed: the keeper itself is fine
    assert (await keeper.run_pass()).created == () and len(cluster.migrations()) == 1  # waits its backoff
    clock.advance(31)
    refusing["on"] = False  # the next pass tries again
    report = await keeper.run_pass()
    assert report.created == () and cluster.migrations() == []
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]) is None)
    report = await keeper.run_pass()
    assert record(report).hold == Alone.BACKING_OFF
    assert keeper.state.refusal("default", "vm1", Action.CANCEL) is None


async def test_a_migration_already_gone_counts_as_cancelled(cluster, make_keeper):
    keeper, made = await a_stuck_migration_of_ours(cluster, make_keeper)
    name = made["metadata"]["name"]
    async with cluster.api() as session:  # KubeVirt (or an admin) deleted it a moment ago
        await session.delete(f"{VMIMS}/{name}")
    report = await keeper.run_pass()
    assert report.created == ()
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name) is None)
    report = await keeper.run_pass()
    assert record(report).hold == Alone.BACKING_OFF
    assert (await keeper.run_pass()).created == ()


# --------------------------------------------------------------------------- slots a drain needs


def drain_of_node_a(count):
    """`count` VMs (not opted in) leaving node-a in migrations of KubeVirt's evacuation."""
    found = []
    for i in range(count):
        found += [vmi(f"evacuee-{i}", "node-a", opted_in=False),
                  migration(f"kubevirt-evacuation-{i}", f"evacuee-{i}", phase="Running")]
    return found


@pytest.mark.parametrize("leaving, limit, created", [(2, 2, 0), (1, 2, 1), (2, 3, 1)],
                         ids=["slots-taken", "one-slot-free", "limit-raised"])
async def test_the_vms_node_must_have_an_outbound_slot_free(cluster, make_keeper, leaving, limit, created):
    cluster.seed(three_nodes() + apart_vm() + drain_of_node_a(leaving))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_outbound_per_node=limit))

    report = await keeper.run_pass()

    assert len(report.created) == created
    if not created:
        assert record(report).hold == Alone.SOURCE_BUSY
        assert record(report).decision.startswith(f"{leaving} migrations in flight from node-a")
        assert report.held == {str(Alone.SOURCE_BUSY): 1}


async def test_migrations_leaving_other_nodes_do_not_hold_the_vm(cluster, make_keeper):
    others = [vmi(f"evacuee-{i}", "node-c", opted_in=False) for i in range(2)]
    others += [migration(f"kubevirt-evacuation-{i}", f"evacuee-{i}", phase="Scheduling") for i in range(2)]
    cluster.seed(three_nodes() + apart_vm() + others)
    keeper = await make_keeper()
    assert len((await keeper.run_pass()).created) == 1


async def test_two_vms_on_one_node_take_its_slots_one_after_the_other(cluster, make_keeper):
    """What a pass creates counts at once: the third VM leaving node-a waits."""
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2") + apart_vm("vm3"))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=5))
    report = await keeper.run_pass()
    assert len(report.created) == 2 and report.held == {str(Alone.SOURCE_BUSY): 1}


# --------------------------------------------------------------------------- the queue's priority


@pytest.mark.parametrize("cluster_answer", ["pruned", "unknown", "refused"])
async def test_without_a_priority_kept_our_migrations_are_created_without_it(cluster, make_keeper, kmock, caplog,
                                                                             cluster_answer):
    """An older schema prunes spec.priority (or refuses it under strict validation); KubeVirt 1.7+
    refuses it from anyone but virt-controller. Targeted migration still works: create without it."""
    def answer(request):
        spec = request.data.get("spec") or {}
        if "priority" not in spec:
            return None
        if cluster_answer == "unknown" and request.params.get("dryRun") == "All":
            raise kmocklib.KubernetesError(status=400, reason="BadRequest", message=(
                'strict decoding error: unknown field "spec.priority"'))
        if cluster_answer == "refused":
            raise kmocklib.KubernetesError(status=422, reason="Invalid", message=(
                'admission webhook "migration-create-validator.kubevirt.io" denied the request: Migration priority '
                'queue, only virt-controller is allowed to set priority field'))
        if request.params.get("dryRun") == "All":
            return dict(request.data, spec={k: v for k, v in spec.items() if k != "priority"})
        return None

    kmock["create", kmock.resource(*VMIMS_RESOURCE)] << answer
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2"))
    keeper = await make_keeper()
    caplog.set_level(logging.INFO, logger="webhook.keeper")

    report = await keeper.run_pass()

    assert len(report.created) == 2
    assert all("priority" not in m["spec"] for m in cluster.migrations())
    assert all(m["spec"]["addedNodeSelector"] for m in cluster.migrations())
    assert sample("colocate_keeper_targeted_migration") == 1
    said = [r for r in caplog.records if r.getMessage() == "migration priority not kept"]
    assert len(said) == 1 and "created without it" in said[0].fields["why"]


async def test_where_the_priority_is_kept_our_migrations_queue_last(cluster, make_keeper, caplog):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    await keeper.run_pass()
    [made] = cluster.migrations()
    assert made["spec"]["priority"] == "system-maintenance"
    said = [r for r in caplog.records if r.getMessage().startswith("migration priority")]
    assert [r.getMessage() for r in said] == ["migration priority kept"]
