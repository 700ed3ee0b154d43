"""What draining a node will do, VM by VM: who the evacuation moves, who cannot move, whose NFS
server restarts, and whom Longhorn then reboots, as its Settings say."""
import pytest

from webhook.config import KeepMode
from webhook.rules.keeping.drain import RunningVm, preview
from webhook.rules.shared.longhorn import Answer, Restarts

YES, NO, UNKNOWN = (Restarts(Answer.YES, "Longhorn v1.12.0 ..."), Restarts(Answer.NO, "spared"),
                    Restarts(Answer.CANNOT_TELL, "unreadable"))
VMS = [
    RunningVm(namespace="default", name="on-with-storage", node="node-a", storage=("node-a",)),
    RunningVm(namespace="default", name="on-storage-elsewhere", node="node-a", storage=("node-b",)),
    RunningVm(namespace="default", name="elsewhere-storage-on", node="node-c", storage=("node-a",)),
    RunningVm(namespace="default", name="on-not-migratable", node="node-a", storage=("node-a",), migratable=False,
              why_not="HostDevice: a GPU"),
    RunningVm(namespace="default", name="unrelated", node="node-b", storage=("node-c",)),
]


@pytest.mark.parametrize("restarts, rebooted", [
    (YES, {"on-with-storage", "elsewhere-storage-on", "on-not-migratable"}), (NO, set()), (UNKNOWN, set())])
def test_the_drain_of_node_a(restarts, rebooted):
    said = preview("node-a", VMS, restarts)
    assert [vm.name for vm in said.vms] == ["on-with-storage", "on-storage-elsewhere", "elsewhere-storage-on",
                                            "on-not-migratable"]
    assert said.migrations == 2
    assert said.to_json()["cannot_move"] == {"default/on-not-migratable": "HostDevice: a GPU"}
    assert {vm.name for vm in said.vms if vm.storage_restarts} == {"on-with-storage", "elsewhere-storage-on",
                                                                   "on-not-migratable"}
    assert {vm.name for vm in said.vms if vm.rebooted == "yes"} == rebooted
    unknown = {vm.name for vm in said.vms if vm.rebooted == "cannot tell"}
    assert unknown == ({"on-with-storage", "elsewhere-storage-on", "on-not-migratable"} if restarts is UNKNOWN else set())
    elsewhere = next(vm for vm in said.vms if vm.name == "elsewhere-storage-on")
    assert not elsewhere.leaves and "near node-c" in elsewhere.goes


def test_a_node_no_vm_touches_changes_nothing():
    said = preview("node-z", VMS, YES)
    assert said.vms == () and said.migrations == 0 and said.to_json()["rebooted"] == []


@pytest.mark.parametrize("keep, said", [
    (KeepMode.MIGRATE, "; if their mounts go stale, the keeper's recovery of 2 spared VM(s) without a reboot: up to 4 "
                       "migration(s)"),
    (KeepMode.REPORT, "; if their mounts go stale, the keeper's recovery of 2 spared VM(s) without a reboot: up to 4 "
                      "migration(s) (--keep report: it makes none)"),
    (KeepMode.OFF, ""),
])
def test_what_the_keepers_recovery_costs_if_the_spared_vms_mounts_go_stale(keep, said):
    """Spared, each VM keeps its mount; if it goes stale, the keeper's recovery costs one migration, or
    two beside its NFS server (which restarts near a VM that stays); a VM that cannot leave costs none."""
    preview_ = preview("node-a", VMS, NO, keep)
    assert preview_.lines()[0] == "draining node-a: 2 live migration(s) by KubeVirt's evacuation, 3 VM(s) whose NFS " \
                                  "server restarts" + said
    stays = next(vm for vm in preview_.vms if vm.name == "elsewhere-storage-on")
    if keep is KeepMode.MIGRATE:
        assert stays.goes.endswith("if its mount goes stale (paused on I/O errors), the keeper recovers it without a "
                                   "reboot: away and back beside its NFS server, 2 migrations, then unpauses it")
        assert preview_.to_json()["stale_recovery"] == {"vms": ["default/on-with-storage", "default/elsewhere-storage-on"],
                                                        "migrations": 4}
    assert next(vm for vm in preview_.vms if vm.name == "on-not-migratable").recovery == 0
    assert [vm.recovery for vm in preview("node-a", VMS, YES, keep).vms] == [0, 0, 0, 0]  # rebooted: nothing stale
    writeback = RunningVm(namespace="default", name="wb", node="node-c", storage=("node-a",),
                          cannot_finish="its disk d uses cache mode writeback")
    [vm] = preview("node-a", [writeback], NO, keep).vms
    assert vm.recovery == 0 and vm.if_stale == "if its mount goes stale, it needs a restart: its disk d uses cache mode writeback"
