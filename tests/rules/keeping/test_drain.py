"""What draining a node will do, VM by VM: who the evacuation moves, who cannot move, whose NFS
server restarts, and whom Longhorn then reboots, as its Settings say."""
import pytest

from webhook.rules.keeping.drain import preview
from webhook.rules.shared.longhorn import Answer, Restarts

YES, NO, UNKNOWN = (Restarts(Answer.YES, "Longhorn v1.12.0 ..."), Restarts(Answer.NO, "spared"),
                    Restarts(Answer.CANNOT_TELL, "unreadable"))
VMS = [
    ("default", "on-with-storage", "node-a", ("node-a",), True, ""),
    ("default", "on-storage-elsewhere", "node-a", ("node-b",), True, ""),
    ("default", "elsewhere-storage-on", "node-c", ("node-a",), True, ""),
    ("default", "on-not-migratable", "node-a", ("node-a",), False, "HostDevice: a GPU"),
    ("default", "unrelated", "node-b", ("node-c",), True, ""),
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
