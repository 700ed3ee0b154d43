"""The descheduler's evictions: KubeVirt turns each into an evacuation migration with priority
system-maintenance, where a drain's is system-critical (kubevirt/kubevirt
pkg/virt-controller/watch/drain/evacuation/evacuation.go). Such a VM was moved off a loaded node
on purpose: the keeper leaves it there for --keep-after-descheduled after that migration ended."""
import logging
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.kubevirt_api import VMIMS, evacuated_vm, eventually, sample, stamp, three_nodes

from webhook.config import Settings
from webhook.rules.shared.alone import Alone

from .test_passes import record

HELD = "moved by the descheduler"


def just_now():
    return datetime.now(UTC).replace(microsecond=0)


async def test_a_vm_the_descheduler_moved_is_held_until_the_hold_ends_then_moved(cluster, make_keeper, caplog):
    ended = just_now() - timedelta(hours=1)
    cluster.seed(three_nodes() + evacuated_vm(ended))
    clock = [just_now()]
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600), clock=lambda: clock[0])
    caplog.set_level(logging.INFO, logger="webhook.keeper")

    report = await keeper.run_pass()

    assert report.created == () and cluster.migrations() == []
    assert record(report).hold == Alone.DESCHEDULED and report.held == {HELD: 1}
    assert record(report).decision == (
        f"moved off node-b by the descheduler (migration kubevirt-evacuation-x7k2p ended {stamp(ended)}): "
        f"not moved back before {stamp(ended + timedelta(hours=6))}")
    assert sample("colocate_vms_held", hold=HELD) == 1
    [line] = [r for r in caplog.records if r.getMessage() == "keeper decision"]
    assert line.fields["hold"] == HELD and line.fields["reason"] == record(report).decision

    clock[0] = ended + timedelta(hours=6, seconds=-1)
    report = await keeper.run_pass()
    assert report.created == () and record(report).hold == Alone.DESCHEDULED

    clock[0] = ended + timedelta(hours=6)
    report = await keeper.run_pass()
    assert len(report.created) == 1, record(report).decision
    [made] = cluster.migrations()
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert sample("colocate_vms_held", hold=HELD) == 0


@pytest.mark.parametrize("priority, ended_ago, settings, hold", [
    ("system-critical", timedelta(minutes=15), Settings(keep="migrate", keep_after=600), None),
    ("system-critical", timedelta(minutes=5), Settings(keep="migrate", keep_after=600), Alone.APART_BRIEFLY),
    ("system-maintenance", timedelta(minutes=15), Settings(keep="migrate", keep_after=600), Alone.DESCHEDULED),
    ("system-maintenance", timedelta(minutes=15), Settings(keep="migrate", keep_after=600, keep_after_descheduled=0),
     None),
    ("system-maintenance", timedelta(minutes=5), Settings(keep="migrate", keep_after=600, keep_after_descheduled=0),
     Alone.APART_BRIEFLY),
    ("system-maintenance", timedelta(minutes=15), Settings(keep="report", keep_after=600), Alone.DESCHEDULED),
], ids=["drain-moves-after-keep-after", "drain-within-keep-after", "descheduler-holds-longer",
        "descheduler-hold-off", "descheduler-hold-off-still-keep-after", "report-shows-it"])
async def test_only_the_descheduler_holds_a_vm_beyond_keep_after(cluster, make_keeper, priority, ended_ago, settings,
                                                                 hold):
    cluster.seed(three_nodes() + evacuated_vm(just_now() - ended_ago, priority=priority))
    keeper = await make_keeper(settings)

    report = await keeper.run_pass()

    assert record(report).hold == hold, record(report).decision
    assert len(report.created) == (hold is None)


async def test_a_vm_whose_descheduler_migration_is_gone_waits_keep_after_only(cluster, make_keeper):
    """The VMI names the migration that brought it, but someone deleted that object (KubeVirt itself
    keeps a VMI's 5 newest finished ones); virt-handler removed the VMI's eviction-source annotation
    when the migration completed: nothing tells a descheduler's eviction from a drain now, and the
    VM waits --keep-after since the end its VMI shows, like after any migration."""
    ended = just_now() - timedelta(minutes=15)
    objects = [o for o in evacuated_vm(ended) if o["kind"] != "VirtualMachineInstanceMigration"]
    cluster.seed(three_nodes() + objects)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600))

    report = await keeper.run_pass()

    assert len(report.created) == 1, record(report).decision


async def test_the_hold_ends_for_a_vm_the_descheduler_moved_when_it_moves_again(cluster, make_keeper):
    """A user's migration after the descheduler's: the VM's last move is no longer the descheduler's."""
    ended = just_now() - timedelta(hours=1)
    objects = evacuated_vm(ended)
    cluster.seed(three_nodes() + objects)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600))
    assert record(await keeper.run_pass()).hold == Alone.DESCHEDULED

    # An admin's migration moves the VM from node-a to node-c, and it ended 20 minutes ago.
    await cluster.create(VMIMS, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                 "metadata": {"name": "vm1-by-hand", "namespace": "default"},
                                 "spec": {"vmiName": "vm1"}})
    await cluster.finish("vm1-by-hand", "Succeeded", "vm1", "node-c")
    clock_after = just_now() + timedelta(minutes=20)
    keeper.clock = lambda: clock_after

    async def moved():
        report = await keeper.run_pass()
        return report if record(report).node == "node-c" else None

    report = await eventually(moved)
    assert len(report.created) == 1, record(report).decision
