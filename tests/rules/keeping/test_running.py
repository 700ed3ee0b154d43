"""Where a VM runs: its launcher pods and its VMI as the keeper reads them."""

import pytest
from tests.support.keeping import SETTINGS, UID, at, cached, in_flight_state, vmi_obj
from tests.support.kube import launcher_pod as launcher
from tests.support.kube import load

from webhook.config import Settings
from webhook.rules.shared.alone import Alone
from webhook.rules.shared.reading import Malformed
from webhook.rules.keeping.running import VmiView, read_vmi, vm_pods

# --------------------------------------------------------------------------- where a VM runs: pods


def source(phase="Running", **kw):
    """The VM's pod before the migration, on node-b where its share-manager runs."""
    return launcher("virt-launcher-pod.yaml", "virt-launcher-vm1-abcde", "node-b", "2026-11-01T08:00:00Z", phase, **kw)


def target(node_name="node-a", phase="Running", **kw):
    """The migration target pod, created later."""
    return launcher("migration-target-pod.yaml", "virt-launcher-vm1-q8w4z", node_name, "2026-11-20T09:57:40Z", phase, **kw)


def names(pods):
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.parametrize("pods, running, skipped", [
    ([load("migrated-launcher-pod.yaml")], ["virt-launcher-vm1-q8w4z"], {}),
    ([source(), target()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Alone.SUPERSEDED}),
    ([target(), source()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Alone.SUPERSEDED}),
    ([source(), target(phase="Pending")], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Alone.SUPERSEDED}),
    ([source(), target(None, "Pending")], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Alone.NOT_SCHEDULED}),
    ([source(), target(terminating=True)], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Alone.TERMINATING}),
    ([source(), target(phase="Failed")], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Alone.FINISHED}),
    ([source(phase="Succeeded"), target()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Alone.FINISHED}),
    ([source(), source()], ["virt-launcher-vm1-abcde"], {}),
], ids=["migrated", "in-flight-target-scheduled", "order-independent", "target-scheduled-not-started",
        "target-not-scheduled", "failed-target-terminating", "failed-target-finished", "completed-source-succeeded",
        "same-pod-twice"])
def test_where_a_vm_runs(pods, running, skipped):
    found = vm_pods(pods, SETTINGS)
    assert names(found.running) == running
    assert {p["metadata"]["name"]: why for p, why in found.skipped} == skipped


def test_pods_of_different_vms_and_pods_without_a_vmi_label_stand_alone():
    other = launcher("virt-launcher-pod.yaml", "virt-launcher-vm2-aaaaa", "node-c", "2026-11-02T08:00:00Z")
    other["metadata"]["labels"]["kubevirt.io/created-by"] = "another-vmi-uid"
    loose = [launcher("virt-launcher-pod.yaml", f"virt-launcher-loose-{i}", "node-c", "2026-11-02T08:00:00Z") for i in (1, 2)]
    for pod in loose:
        del pod["metadata"]["labels"]["kubevirt.io/created-by"]
    found = vm_pods([source(), other, *loose], SETTINGS)
    assert names(found.running) == ["virt-launcher-vm1-abcde", "virt-launcher-vm2-aaaaa", *names(loose)]
    assert found.skipped == []


def test_same_vmi_uid_in_another_namespace_is_another_vm():
    elsewhere = target()
    elsewhere["metadata"]["namespace"] = "other"
    assert len(vm_pods([source(), elsewhere], SETTINGS).running) == 2


def test_pods_that_never_say_where_a_vm_runs():
    not_opted = source()
    del not_opted["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    ephemeral = source()
    ephemeral["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] = "true"
    ephemeral["metadata"]["name"] = "virt-launcher-vm1-temp1"
    share_manager = {"metadata": {"name": "share-manager-x", "labels": {"longhorn.io/component": "share-manager"}},
                     "spec": {"nodeName": "node-a"}}
    found = vm_pods([not_opted, ephemeral, share_manager], SETTINGS)
    assert found.running == []
    assert [why for _, why in found.skipped] == [Alone.NOT_OPTED_IN, Alone.EPHEMERAL, Alone.NOT_LAUNCHER]


def test_any_vm_counts_vms_that_are_not_opted_in():
    not_opted = target()
    del not_opted["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    share_manager = {"metadata": {"name": "share-manager-x"}, "spec": {"nodeName": "node-a"}}
    found = vm_pods([source(), not_opted, share_manager], SETTINGS, any_vm=True)
    assert names(found.running) == ["virt-launcher-vm1-q8w4z"]
    assert [why for _, why in found.skipped] == [Alone.NOT_LAUNCHER, Alone.SUPERSEDED]
    assert vm_pods([not_opted], SETTINGS).running == []


# --------------------------------------------------------------------------- where a VM runs: the VMI


def test_vmi_after_a_migration():
    view = read_vmi(load("vmi-migrated.yaml"), SETTINGS)
    assert isinstance(view, VmiView)
    assert (view.namespace, view.name, view.uid, view.phase, view.node) == ("default", "vm1", UID, "Running", "node-a")
    assert view.running and view.opted_in and view.may_move and view.live_migratable
    assert view.claims == ("vm1-rootdisk",)
    m = view.migration
    assert (m.source_node, m.target_node, m.target_pod) == ("node-b", "node-a", "virt-launcher-vm1-q8w4z")
    assert m.ended == at("2026-11-20T09:58:31Z")
    assert m.completed and not m.failed and not m.in_flight


@pytest.mark.parametrize("state, in_flight, target_node", [
    (in_flight_state(), True, "node-c"),
    (in_flight_state(targetNode=None), True, None),
    (in_flight_state(completed=True, endTimestamp="2026-11-20T11:59:40Z"), False, "node-c"),
    (in_flight_state(failed=True), False, "node-c"),
    (in_flight_state(endTimestamp="2026-11-20T11:59:40Z"), False, "node-c"),
], ids=["in-flight", "target-not-chosen", "completed", "failed", "ended"])
def test_vmi_migration_in_flight(state, in_flight, target_node):
    view = read_vmi(vmi_obj(migrationState=state), SETTINGS)
    assert view.migration.in_flight is in_flight and view.migration.target_node == target_node


@pytest.mark.parametrize("status_machine, spec_machine, machine_type, machine_from", [
    ({"type": "pc-q35-rhel9.6.0"}, {"type": "q35"}, "pc-q35-rhel9.6.0", "status.machine.type"),
    (None, {"type": "q35"}, "q35", "spec.domain.machine.type"),
    ({}, {"type": "q35"}, "q35", "spec.domain.machine.type"),
    (None, None, "", ""),
], ids=["status", "spec", "status-empty", "neither"])
def test_the_machine_type_as_virt_controller_reads_it(status_machine, spec_machine, machine_type, machine_from):
    """kubevirt/kubevirt pkg/virt-controller/services/template.go, newNodeSelectorRenderer."""
    obj = vmi_obj(machine=status_machine)
    if spec_machine is None:
        del obj["spec"]["domain"]["machine"]
    view = read_vmi(obj, SETTINGS)
    assert (view.machine_type, view.machine_from) == (machine_type, machine_from)


def test_vmi_never_migrated():
    view = read_vmi(vmi_obj(migrationState=None), SETTINGS)
    assert view.migration is None


@pytest.mark.parametrize("annotation, kept", [("false", False), ("true", True), ("no", True), (None, True)])
def test_keep_opt_out(annotation, kept):
    obj = vmi_obj()
    if annotation is not None:
        obj["metadata"]["annotations"]["kubevirt-scheduler/keep"] = annotation
    assert read_vmi(obj, SETTINGS).may_move is kept


def test_opt_in_is_read_from_the_vmi():
    obj = vmi_obj()
    del obj["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    assert read_vmi(obj, SETTINGS).opted_in is False
    obj["metadata"]["annotations"]["other/opt-in"] = "true"
    assert read_vmi(obj, Settings(opt_in_annotation="other/opt-in")).opted_in is True


@pytest.mark.parametrize("conditions, migratable, why", [
    ([{"type": "LiveMigratable", "status": "True"}], True, ""),
    ([{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
       "message": "PVC vm1-scratch is not shared"}], False, "DisksNotLiveMigratable: PVC vm1-scratch is not shared"),
    ([{"type": "LiveMigratable", "status": "Unknown"}], False, "LiveMigratable is 'Unknown'"),
    ([{"type": "Ready", "status": "True"}], False, "no LiveMigratable condition"),
    (None, False, "no LiveMigratable condition"),
], ids=["true", "false-with-reason", "unknown", "absent", "no-conditions"])
def test_live_migratable(conditions, migratable, why):
    view = read_vmi(vmi_obj(conditions=conditions), SETTINGS)
    assert view.live_migratable is migratable and view.not_migratable == why


def test_vmi_not_running():
    view = read_vmi(vmi_obj(phase="Scheduling", nodeName=None), SETTINGS)
    assert view.node is None and not view.running


def broken_vmi(path, value):
    obj = vmi_obj()
    *parents, last = path
    target_obj = obj
    for key in parents:
        target_obj = target_obj[key]
    target_obj[last] = value
    return obj


@pytest.mark.parametrize("obj, reason", [
    ("vm1", "a VMI is a str, not an object"),
    ({"kind": "VirtualMachineInstance"}, "metadata.namespace/name ''/'' is not a valid object name"),
    (broken_vmi(("metadata", "name"), "VM_1"), "'default'/'VM_1' is not a valid object name"),
    (broken_vmi(("status",), []), "VMI.status is a list, not an object"),
    (broken_vmi(("status", "nodeName"), 7), "status.nodeName is a int, not a string"),
    (broken_vmi(("status", "conditions"), {"LiveMigratable": "True"}), "status.conditions is a dict, not a list"),
    (broken_vmi(("status", "migrationState"), "done"), "status.migrationState is a str, not an object"),
    (broken_vmi(("status", "migrationState", "endTimestamp"), "yesterday"), "endTimestamp 'yesterday' is not an RFC 3339 time"),
    (broken_vmi(("status", "migrationState", "completed"), "true"), "completed is a str, not a boolean"),
], ids=["not-an-object", "no-name", "bad-name", "status-list", "node-int", "conditions-dict", "state-str",
        "bad-time", "completed-str"])
def test_vmi_of_unexpected_shape_is_skipped(obj, reason):
    skipped = read_vmi(obj, SETTINGS)
    assert isinstance(skipped, Malformed) and reason in skipped.reason


PAUSED_IO = {"type": "Paused", "status": "True", "reason": "PausedIOError", "lastTransitionTime": "2026-11-20T11:40:00Z",
             "message": "VMI was paused, low-level IO error detected"}  # as virt-handler writes it


@pytest.mark.parametrize("extra, paused", [
    ([PAUSED_IO], "PausedIOError"),
    ([{**PAUSED_IO, "reason": "PausedByUser", "message": "VMI was paused by user"}], "PausedByUser"),
    ([{**PAUSED_IO, "status": "False"}], ""),
    ([], ""),
], ids=["io-error", "by-user", "condition-false", "running"])
def test_a_paused_vm_and_why(extra, paused):
    obj = vmi_obj()
    obj["status"]["conditions"] = [*obj["status"].get("conditions", []), *extra]
    view = read_vmi(obj, SETTINGS)
    assert view.paused == paused and view.live_migratable  # paused or not, KubeVirt may migrate it
    assert view.paused_since == (at("2026-11-20T11:40:00Z") if paused else None)  # through the cache too
    assert read_vmi(cached(obj), SETTINGS).paused_since == view.paused_since
