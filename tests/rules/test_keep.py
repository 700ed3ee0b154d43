"""The keeper's pure rules: where a VM runs, apart or not, migrations, the decision, the manifest."""
import copy
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from kube import launcher_pod as launcher, load, node

from webhook.config import Settings
from webhook.rules.classify import Skip, running_exemption, vm_exemption
from webhook.rules.facts import Fact
from webhook.rules.keep import (
    APART,
    CO_LOCATED,
    SPLIT,
    UNRESOLVED,
    Attempt,
    Backoff,
    Hold,
    Limits,
    Migration,
    Mode,
    Skipped,
    VmiView,
    apart_since,
    attempts,
    backoff,
    backoff_delay,
    decide_keep,
    in_flight_counts,
    last_migration_end,
    locality,
    migrating,
    migration_manifest,
    parse_time,
    read_migration,
    read_vmi,
    target_hostname,
    unseen_success,
    vm_pods,
)

SETTINGS = Settings()
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"


def at(text):
    return parse_time(text)


def ago(**span):
    return NOW - timedelta(**span)


def stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    ([source(), target()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Skip.SUPERSEDED}),
    ([target(), source()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Skip.SUPERSEDED}),
    ([source(), target(phase="Pending")], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Skip.SUPERSEDED}),
    ([source(), target(None, "Pending")], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Skip.NOT_SCHEDULED}),
    ([source(), target(terminating=True)], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Skip.TERMINATING}),
    ([source(), target(phase="Failed")], ["virt-launcher-vm1-abcde"], {"virt-launcher-vm1-q8w4z": Skip.FINISHED}),
    ([source(phase="Succeeded"), target()], ["virt-launcher-vm1-q8w4z"], {"virt-launcher-vm1-abcde": Skip.FINISHED}),
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
    assert [why for _, why in found.skipped] == [Skip.NOT_OPTED_IN, Skip.EPHEMERAL, Skip.NOT_LAUNCHER]


def test_any_vm_counts_vms_that_are_not_opted_in():
    not_opted = target()
    del not_opted["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    share_manager = {"metadata": {"name": "share-manager-x"}, "spec": {"nodeName": "node-a"}}
    found = vm_pods([source(), not_opted, share_manager], SETTINGS, any_vm=True)
    assert names(found.running) == ["virt-launcher-vm1-q8w4z"]
    assert [why for _, why in found.skipped] == [Skip.NOT_LAUNCHER, Skip.SUPERSEDED]
    assert vm_pods([not_opted], SETTINGS).running == []


def test_a_migrated_pod_counts_but_admission_still_leaves_targets_alone():
    migrated = load("migrated-launcher-pod.yaml")
    assert running_exemption(migrated, SETTINGS) is None
    assert vm_exemption(load("migration-target-pod.yaml"), SETTINGS) == Skip.MIGRATION_TARGET


# --------------------------------------------------------------------------- where a VM runs: the VMI


def vmi_obj(**status):
    obj = copy.deepcopy(load("vmi-migrated.yaml"))
    for key, value in status.items():
        if value is None:
            obj["status"].pop(key, None)
        else:
            obj["status"][key] = value
    return obj


def in_flight_state(**changes):
    state = {"migrationUid": "u2", "sourceNode": "node-a", "targetNode": "node-c",
             "targetPod": "virt-launcher-vm1-zzzzz", "startTimestamp": "2026-11-20T11:59:00Z", "completed": False}
    state.update(changes)
    return {k: v for k, v in state.items() if v is not None}


def test_vmi_after_a_migration():
    view = read_vmi(load("vmi-migrated.yaml"), SETTINGS)
    assert isinstance(view, VmiView)
    assert (view.namespace, view.name, view.uid, view.phase, view.node) == ("default", "vm1", UID, "Running", "node-a")
    assert view.running and view.opted_in and view.kept and view.live_migratable
    assert view.claims == ("vm1-rootdisk",)
    m = view.migration
    assert (m.source_node, m.target_node, m.target_pod) == ("node-b", "node-a", "virt-launcher-vm1-q8w4z")
    assert m.started == at("2026-11-20T09:58:02Z") and m.ended == at("2026-11-20T09:58:31Z")
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


def test_vmi_never_migrated():
    view = read_vmi(vmi_obj(migrationState=None), SETTINGS)
    assert view.migration is None


@pytest.mark.parametrize("annotation, kept", [("false", False), ("true", True), ("no", True), (None, True)])
def test_keep_opt_out(annotation, kept):
    obj = vmi_obj()
    if annotation is not None:
        obj["metadata"]["annotations"]["kubevirt-scheduler/keep"] = annotation
    assert read_vmi(obj, SETTINGS).kept is kept


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
    assert isinstance(skipped, Skipped) and reason in skipped.reason


# --------------------------------------------------------------------------- apart from storage


def fact(claim, node_name):
    return Fact(claim, node_name, f"share-manager of {claim} runs on {node_name}" if node_name
                else f"share-manager of {claim} is stopped")


@pytest.mark.parametrize("vm_node, facts, state, storage, why", [
    ("node-a", [fact("a", "node-a")], CO_LOCATED, ("node-a",), "disks served from node-a, where the VM runs"),
    ("node-a", [fact("a", "node-a"), fact("b", "node-a")], CO_LOCATED, ("node-a",), "where the VM runs"),
    ("node-a", [fact("a", "node-a"), fact("b", None)], CO_LOCATED, ("node-a",), "ignored: share-manager of b is stopped"),
    ("node-a", [fact("a", "node-b")], APART, ("node-b",), "disks served from node-b, the VM runs on node-a"),
    ("node-a", [fact("a", "node-b"), fact("b", "node-b"), fact("c", None)], APART, ("node-b",), "ignored: share-manager of c"),
    ("node-a", [fact("a", "node-b"), fact("b", "node-c"), fact("c", "node-c")], SPLIT, ("node-c", "node-b"),
     "disks served from node-c (2), node-b (1)"),
    ("node-a", [fact("a", "node-a"), fact("b", "node-b")], SPLIT, ("node-a", "node-b"), "node-a (1), node-b (1)"),
    ("node-a", [fact("a", None), fact("b", None)], UNRESOLVED, (), "share-manager of a is stopped; share-manager of b"),
    ("node-a", [], UNRESOLVED, (), "no disks to follow"),
    (None, [fact("a", "node-b")], UNRESOLVED, (), "not running on a node"),
], ids=["co-located", "co-located-two", "co-located-one-unresolved", "apart", "apart-one-unresolved", "split",
        "split-with-own-node", "unresolved", "no-disks", "not-running"])
def test_locality(vm_node, facts, state, storage, why):
    where = locality(vm_node, facts)
    assert where.state is state and where.storage == storage and why in where.why
    assert where.target == ("node-b" if state is APART else None)


MIGRATED_AT = at("2026-11-20T09:58:31Z")  # vmi-migrated.yaml's endTimestamp


@pytest.mark.parametrize("vmi, share_manager, created, since", [
    (vmi_obj(), at("2026-11-01T08:00:00Z"), None, MIGRATED_AT),
    (vmi_obj(), at("2026-11-20T11:00:00Z"), None, at("2026-11-20T11:00:00Z")),
    (vmi_obj(), None, None, None),
    (vmi_obj(migrationState=None), at("2026-11-01T08:00:00Z"), at("2026-11-02T08:00:00Z"), at("2026-11-02T08:00:00Z")),
    (vmi_obj(migrationState=None), at("2026-11-03T08:00:00Z"), at("2026-11-02T08:00:00Z"), at("2026-11-03T08:00:00Z")),
    (vmi_obj(migrationState=None), at("2026-11-03T08:00:00Z"), None, None),
    (vmi_obj(migrationState=in_flight_state()), at("2026-11-01T08:00:00Z"), at("2026-11-01T08:00:00Z"), None),
    (vmi_obj(migrationState=in_flight_state(failed=True, endTimestamp="2026-11-20T11:59:40Z")),
     at("2026-11-01T08:00:00Z"), None, at("2026-11-20T11:59:40Z")),
    (vmi_obj(migrationState=in_flight_state(failed=True)), at("2026-11-01T08:00:00Z"), None, None),
], ids=["migrated-after-share-manager", "share-manager-after-migration", "share-manager-unknown",
        "never-migrated-started-after", "never-migrated-share-manager-after", "never-migrated-start-unknown",
        "migration-in-flight", "failed-migration-ended", "failed-migration-no-end"])
def test_apart_since_is_read_from_the_cluster(vmi, share_manager, created, since):
    """The later of the VM coming to its node and the share-manager pod's creation; None when unknown."""
    assert apart_since(read_vmi(vmi, SETTINGS), share_manager, created) == since


# --------------------------------------------------------------------------- migrations


def vmim(phase="Running", *, ours=True, created=None, name="vm1-colocate-abcde", vmi="vm1", transitions=(), end=None):
    obj = copy.deepcopy(load("vmim-to-storage.yaml"))
    obj["metadata"].pop("generateName")
    obj["metadata"].update(name=name, creationTimestamp=stamp(created or ago(minutes=5)))
    if not ours:
        obj["metadata"]["labels"] = {}
        obj["spec"].pop("addedNodeSelector")
    else:
        obj["metadata"]["annotations"] = {"kubevirt-scheduler/node": "node-b"}
    obj["spec"]["vmiName"] = vmi
    if phase is not None:
        obj["status"] = {"phase": phase}
        if transitions:
            obj["status"]["phaseTransitionTimestamps"] = [
                {"phase": p, "phaseTransitionTimestamp": stamp(t)} for p, t in transitions]
        if end:
            obj["status"]["migrationState"] = {"endTimestamp": stamp(end), "completed": phase == "Succeeded"}
    return obj


@pytest.mark.parametrize("phase, in_flight, succeeded, failed", [
    (None, True, False, False),
    ("Pending", True, False, False),
    ("Scheduling", True, False, False),
    ("Scheduled", True, False, False),
    ("PreparingTarget", True, False, False),
    ("TargetReady", True, False, False),
    ("Running", True, False, False),
    ("WaitingForSync", True, False, False),
    ("Succeeded", False, True, False),
    ("Failed", False, False, True),
], ids=lambda v: str(v))
def test_migration_phases(phase, in_flight, succeeded, failed):
    m = read_migration(vmim(phase))
    assert isinstance(m, Migration) and m.phase == (phase or "")
    assert (m.in_flight(NOW), m.succeeded, m.failed, m.final) == (in_flight, succeeded, failed, succeeded or failed)


def test_ours_and_others():
    ours, theirs = read_migration(vmim()), read_migration(vmim(ours=False, name="kubevirt-evacuation-x7k2p"))
    assert ours.ours and ours.target == "node-b"
    assert not theirs.ours and theirs.target is None
    assert (ours.namespace, ours.name, ours.vmi, ours.created) == ("default", "vm1-colocate-abcde", "vm1", ago(minutes=5))


@pytest.mark.parametrize("age, in_flight", [
    (timedelta(minutes=59, seconds=59), True),
    (timedelta(hours=1), False),
    (timedelta(days=3), False),
], ids=["just-under-an-hour", "an-hour", "days"])
def test_unfinished_for_an_hour_stops_counting(age, in_flight):
    m = read_migration(vmim("Scheduling", created=NOW - age))
    assert m.in_flight(NOW) is in_flight and not m.final


@pytest.mark.parametrize("obj, ended", [
    (vmim("Succeeded", transitions=[("Pending", ago(minutes=5)), ("Running", ago(minutes=4)),
                                    ("Succeeded", ago(minutes=3))], end=ago(minutes=2)), ago(minutes=3)),
    (vmim("Failed", end=ago(minutes=2)), ago(minutes=2)),
    (vmim("Failed", transitions=[("Pending", ago(minutes=5)), ("Running", ago(minutes=4))]), ago(minutes=4)),
    (vmim("Failed", created=ago(minutes=7)), ago(minutes=7)),
    (vmim("Running", transitions=[("Running", ago(minutes=4))], end=ago(minutes=1)), None),
], ids=["final-transition", "migration-state-end", "latest-transition", "creation", "not-final"])
def test_when_a_migration_ended(obj, ended):
    assert read_migration(obj).ended == ended


def broken_vmim(path, value):
    obj = vmim("Running", transitions=[("Running", ago(minutes=4))])
    *parents, last = path
    target_obj = obj
    for key in parents:
        target_obj = target_obj[key]
    if value is None:
        del target_obj[last]
    else:
        target_obj[last] = value
    return obj


@pytest.mark.parametrize("obj, reason", [
    ([], "a VMIM is a list, not an object"),
    (broken_vmim(("spec", "vmiName"), None), "spec.vmiName '' is not a VMI name"),
    (broken_vmim(("spec", "vmiName"), 3), "spec.vmiName is a int, not a string"),
    (broken_vmim(("spec",), "vm1"), "VMIM.spec is a str, not an object"),
    (broken_vmim(("metadata", "creationTimestamp"), None), "no metadata.creationTimestamp"),
    (broken_vmim(("metadata", "creationTimestamp"), "2026-11-20"), "creationTimestamp '2026-11-20' is not an RFC 3339"),
    (broken_vmim(("status", "phase"), ["Running"]), "status.phase is a list, not a string"),
    (broken_vmim(("status", "phaseTransitionTimestamps"), "x"), "phaseTransitionTimestamps is a str, not a list"),
    (broken_vmim(("status", "phaseTransitionTimestamps"), ["x"]), "holds a non-object"),
], ids=["not-an-object", "no-vmi", "vmi-int", "spec-str", "no-created", "created-date", "phase-list",
        "transitions-str", "transition-str"])
def test_migration_of_unexpected_shape_is_skipped(obj, reason):
    skipped = read_migration(obj)
    assert isinstance(skipped, Skipped) and reason in skipped.reason
    if isinstance(obj, dict):
        assert skipped.what == "VMIM default/vm1-colocate-abcde"


def migrations(*objs):
    return [read_migration(o) for o in objs]


def test_in_flight_counts():
    found = migrations(
        vmim("Running"), vmim("Pending", name="m2", vmi="vm2"),
        vmim("Scheduling", ours=False, name="m3", vmi="vm3"), vmim(None, ours=False, name="m4", vmi="vm4"),
        vmim("Succeeded", name="m5"), vmim("Failed", ours=False, name="m6"),
        vmim("Running", created=ago(hours=2), name="m7"), vmim("Running", ours=False, created=ago(hours=2), name="m8"),
    )
    assert in_flight_counts(found, NOW) == (2, 4)


def view(obj=None):
    return read_vmi(obj or vmi_obj(), SETTINGS)


def test_migrating_from_the_vmi_or_a_queued_migration_object():
    settled = view()
    assert not migrating(settled, [], NOW)
    assert migrating(view(vmi_obj(migrationState=in_flight_state())), [], NOW)
    assert migrating(settled, migrations(vmim(None)), NOW)  # queued: not in the VMI's status yet
    assert not migrating(settled, migrations(vmim(None, vmi="vm2")), NOW)
    # Unfinished for hours: one of ours still holds its VM (never a second one); another's does not.
    assert migrating(settled, migrations(vmim("Pending", created=ago(hours=2))), NOW)
    assert not migrating(settled, migrations(vmim("Pending", ours=False, created=ago(hours=2))), NOW)
    other_ns = vmim(None)
    other_ns["metadata"]["namespace"] = "other"
    assert not migrating(settled, migrations(other_ns), NOW)


def success(uid, *, name, end, vmi="vm1"):
    obj = vmim("Succeeded", name=name, vmi=vmi, created=end - timedelta(minutes=1), transitions=[("Succeeded", end)])
    obj["metadata"]["uid"] = uid
    return obj


def test_a_success_the_vmi_does_not_show_yet_counts_as_in_flight():
    """KubeVirt marks a migration Succeeded once the VMI names it: a VMI that does not is older than it."""
    named_u2 = view(vmi_obj(migrationState=in_flight_state(migrationUid="u2", completed=True,
                                                           endTimestamp=stamp(ago(seconds=30)))))
    older = view()  # names the drain's migration, 0d9c2b7e-…
    done = migrations(success("u2", name="m2", end=ago(seconds=30)))
    assert not migrating(named_u2, done, NOW)
    assert migrating(older, done, NOW) and unseen_success(older, done, NOW).name == "m2"
    assert migrating(view(vmi_obj(migrationState=None)), done, NOW)
    assert not migrating(older, done, NOW + timedelta(minutes=5))  # a VMI started again never names it
    # Only the latest success counts; one that ended in the same second will do.
    both = migrations(success("u1", name="m1", end=ago(hours=1)), success("u2", name="m2", end=ago(seconds=30)),
                      success("u3", name="m3", end=ago(seconds=30)))
    assert not migrating(named_u2, both, NOW)
    assert migrating(named_u2, migrations(success("u3", name="m3", end=ago(seconds=10))), NOW)
    # Failures, migrations of other VMIs and migrations without a uid (older objects) do not.
    failed = vmim("Failed", name="m4", end=ago(seconds=10))
    failed["metadata"]["uid"] = "u4"
    without_uid = vmim("Succeeded", name="m5", transitions=[("Succeeded", ago(seconds=10))])
    other = success("u6", name="m6", vmi="vm2", end=ago(seconds=10))
    assert not migrating(older, migrations(failed, without_uid, other), NOW)


def test_last_migration_end_of_any_origin():
    settled = view()  # migrationState ended 2026-11-20T09:58:31Z
    assert last_migration_end(settled, []) == at("2026-11-20T09:58:31Z")
    later = vmim("Failed", ours=False, end=ago(minutes=10))
    assert last_migration_end(settled, migrations(later, vmim("Running"))) == ago(minutes=10)
    assert last_migration_end(settled, migrations(vmim("Failed", vmi="vm2", end=ago(minutes=1)))) == at("2026-11-20T09:58:31Z")
    assert last_migration_end(view(vmi_obj(migrationState=None)), []) is None


def test_attempts_are_ours_of_this_vm_oldest_first():
    found = migrations(
        vmim("Failed", created=ago(hours=5), end=ago(hours=4), name="m1"),
        vmim("Running", created=ago(minutes=5), name="m2"),
        vmim("Succeeded", created=ago(hours=20), end=ago(hours=19), name="m3"),
        vmim("Failed", ours=False, created=ago(hours=1), end=ago(minutes=50), name="m4"),
        vmim("Failed", vmi="vm2", name="m5"),
    )
    assert attempts(view(), found) == [
        Attempt(ago(hours=20), ago(hours=19), True),
        Attempt(ago(hours=5), ago(hours=4), False),
        Attempt(ago(minutes=5), None, None),
    ]


# --------------------------------------------------------------------------- backoff


def test_backoff_sequence():
    minutes = [backoff_delay(n) / timedelta(minutes=1) for n in range(0, 9)]
    assert minutes == [0, 30, 60, 120, 240, 480, 960, 1440, 1440]
    assert backoff_delay(10_000) == timedelta(hours=24)


def failed(end):
    return Attempt(end - timedelta(minutes=1), end, False)


def succeeded(end):
    return Attempt(end - timedelta(minutes=1), end, True)


@pytest.mark.parametrize("history, failures, until", [
    ([], 0, None),
    ([succeeded(ago(hours=1))], 0, None),
    ([failed(ago(hours=1))], 1, ago(minutes=30)),
    ([failed(ago(hours=3)), failed(ago(hours=1))], 2, NOW),
    ([failed(ago(hours=5)), failed(ago(hours=3)), failed(ago(hours=1))], 3, ago(hours=-1)),
    ([failed(ago(hours=5)), succeeded(ago(hours=3)), failed(ago(hours=1))], 1, ago(minutes=30)),
    ([failed(ago(hours=3)), failed(ago(hours=1)), succeeded(ago(minutes=5))], 0, None),
    ([failed(ago(hours=1)), Attempt(ago(minutes=5))], 1, ago(minutes=30)),
    ([failed(ago(hours=1 + i)) for i in range(12)], 12, ago(hours=1 - 24)),
], ids=["none", "success", "one-failure", "two", "three", "success-resets", "ends-in-success",
        "unfinished-ignored", "capped"])
def test_backoff(history, failures, until):
    assert backoff(history) == Backoff(failures, until)


# --------------------------------------------------------------------------- the decision

APART_VMI = view()  # runs on node-a, migrated there from node-b
APART_WHERE = locality("node-a", [fact("vm1-rootdisk", "node-b")])
READY = dict(
    now=NOW, apart_since=ago(minutes=15), limits=Limits(), history=[], in_flight_ours=0, in_flight_all=0,
    vmi_migrating=False, last_end=ago(hours=2), target_unfit=None, targeted=True, mode=Mode.MIGRATE,
)


def keep(vmi=APART_VMI, where=APART_WHERE, **changes):
    return decide_keep(vmi, where, **{**READY, **changes})


def vmi_with(**changes):
    return dataclasses.replace(APART_VMI, **changes)


def test_an_apart_vm_is_moved_to_its_storage():
    decision = keep()
    assert decision.act and decision.hold is None
    assert (decision.source, decision.target, decision.state) == ("node-a", "node-b", APART)
    assert decision.reason == ("migrating from node-a to node-b: disks served from node-b, the VM runs on node-a;"
                               " apart for 900s")


HOLDS = [
    (vmi_with(opted_in=False), APART_WHERE, {}, Hold.NOT_OPTED_IN, "not opted in"),
    (vmi_with(kept=False), APART_WHERE, {}, Hold.OPTED_OUT, 'annotated kubevirt-scheduler/keep: "false"'),
    (vmi_with(phase="Succeeded"), APART_WHERE, {}, Hold.NOT_RUNNING, "VMI is Succeeded, not running on a node"),
    (vmi_with(node=None), APART_WHERE, {}, Hold.NOT_RUNNING, "VMI is Running, not running on a node"),
    (APART_VMI, locality("node-a", [fact("d", "node-a")]), {}, Hold.NOT_APART,
     "co-located: disks served from node-a, where the VM runs"),
    (APART_VMI, locality("node-a", [fact("d", "node-b"), fact("e", "node-c")]), {}, Hold.NOT_APART,
     "split: disks served from node-b (1), node-c (1), the VM runs on node-a"),
    (APART_VMI, locality("node-a", [fact("d", None)]), {}, Hold.NOT_APART,
     "unresolved: share-manager of d is stopped"),
    (APART_VMI, APART_WHERE, {"target_unfit": "node node-b is cordoned"}, Hold.TARGET_UNFIT,
     "cannot move to node-b: node node-b is cordoned"),
    (vmi_with(live_migratable=False, not_migratable="HostDeviceNotLiveMigratable"), APART_WHERE, {},
     Hold.NOT_MIGRATABLE, "not live-migratable: HostDeviceNotLiveMigratable"),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True}, Hold.MIGRATING, "a migration of this VMI is in flight"),
    (APART_VMI, APART_WHERE, {"apart_since": ago(seconds=120)}, Hold.APART_BRIEFLY, "apart for 120s of 600s"),
    (APART_VMI, APART_WHERE, {"apart_since": None}, Hold.APART_BRIEFLY, "apart for 0s of 600s"),
    (APART_VMI, APART_WHERE, {"apart_since": NOW + timedelta(seconds=5)}, Hold.APART_BRIEFLY, "apart for 0s of 600s"),
    (APART_VMI, APART_WHERE, {"last_end": ago(seconds=30)}, Hold.MIGRATED_RECENTLY,
     "last migration ended 30s ago (wait 600s)"),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(minutes=10))]}, Hold.BACKING_OFF,
     "backing off until 2026-11-20T12:20:00Z after 1 failed migration"),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(hours=3)), failed(ago(minutes=50))]}, Hold.BACKING_OFF,
     "backing off until 2026-11-20T12:10:00Z after 2 failed migrations in a row"),
    (APART_VMI, APART_WHERE, {"history": [succeeded(ago(hours=20)), succeeded(ago(hours=10))]}, Hold.DAILY_LIMIT,
     "migrated 2 times in the last 24h (limit 2)"),
    (APART_VMI, APART_WHERE, {"targeted": False}, Hold.UNTARGETED,
     "targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"),
    (APART_VMI, APART_WHERE, {"in_flight_ours": 2, "in_flight_all": 2}, Hold.OUR_LIMIT,
     "2 of our migrations in flight (limit 2)"),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5}, Hold.CLUSTER_LIMIT, "5 migrations in flight cluster-wide (limit 5)"),
    (APART_VMI, APART_WHERE, {"mode": Mode.REPORT}, Hold.REPORT_ONLY,
     "report only: would migrate from node-a to node-b: disks served from node-b, the VM runs on node-a; apart for 900s"),
]


@pytest.mark.parametrize("vmi, where, changes, hold, reason", HOLDS, ids=[
        "not-opted-in", "opted-out", "not-running", "no-node", "co-located", "split", "unresolved", "target-unfit",
        "not-migratable", "migrating", "apart-briefly", "apart-since-unknown", "apart-since-ahead", "migrated-recently",
        "backing-off", "backing-off-twice", "daily-limit", "untargeted", "our-limit", "cluster-limit", "report"])
def test_each_condition_holds_the_vm(vmi, where, changes, hold, reason):
    decision = keep(vmi, where, **changes)
    assert not decision.act and decision.hold is hold and decision.reason == reason


@pytest.mark.parametrize("changes", [
    {"apart_since": ago(seconds=600)},
    {"last_end": ago(seconds=600)},
    {"last_end": None},
    {"history": [failed(ago(minutes=30))]},
    {"history": [failed(ago(hours=3)), failed(ago(hours=1))], "limits": Limits(max_per_day=3)},
    {"history": [failed(ago(hours=2)), succeeded(ago(minutes=20))], "limits": Limits(max_per_day=3)},
    {"history": [succeeded(ago(hours=30)), succeeded(ago(hours=10))]},
    {"history": [succeeded(ago(hours=10))]},
    {"in_flight_ours": 1, "in_flight_all": 4},
    {"limits": Limits(after=timedelta(0), max_inflight=1, max_cluster_inflight=1, max_per_day=1),
     "apart_since": NOW, "last_end": NOW},
], ids=["apart-exactly-long-enough", "settled-exactly-long-enough", "never-migrated", "backoff-over",
        "second-backoff-over", "success-resets-backoff", "old-migrations-do-not-count", "one-today",
        "just-under-limits", "zero-wait"])
def test_at_the_edges_the_vm_is_moved(changes):
    assert keep(**changes).act


@pytest.mark.parametrize("vmi, where, changes, hold", [
    (vmi_with(opted_in=False, kept=False), APART_WHERE, {}, Hold.NOT_OPTED_IN),
    (vmi_with(kept=False), locality("node-a", [fact("d", "node-a")]), {"mode": Mode.REPORT}, Hold.OPTED_OUT),
    (APART_VMI, locality("node-a", [fact("d", "node-a")]), {"target_unfit": "node node-b is cordoned"}, Hold.NOT_APART),
    (vmi_with(live_migratable=False), APART_WHERE, {"target_unfit": "node node-b is not Ready"}, Hold.TARGET_UNFIT),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True, "in_flight_all": 5, "apart_since": NOW}, Hold.MIGRATING),
    (APART_VMI, APART_WHERE, {"apart_since": NOW, "history": [failed(ago(minutes=1))]}, Hold.APART_BRIEFLY),
    (APART_VMI, APART_WHERE, {"targeted": False, "mode": Mode.REPORT}, Hold.UNTARGETED),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5, "mode": Mode.REPORT}, Hold.CLUSTER_LIMIT),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(minutes=1)), failed(ago(hours=3))], "targeted": False},
     Hold.BACKING_OFF),
], ids=["never-touch-not-opted-in", "opt-out-before-state", "state-before-target", "target-before-migratable",
        "own-migration-before-cluster", "time-before-backoff", "report-shows-untargeted", "report-shows-limits",
        "vm-before-cluster"])
def test_the_first_condition_in_order_is_reported(vmi, where, changes, hold):
    assert keep(vmi, where, **changes).hold is hold


def test_a_vm_is_never_moved_twice_in_a_day_after_successes_even_when_apart_again():
    history = [succeeded(ago(hours=23)), succeeded(ago(hours=12))]
    assert keep(history=history).hold is Hold.DAILY_LIMIT
    assert keep(history=history, now=NOW + timedelta(hours=1, seconds=1)).act


def test_every_hold_has_a_case():
    assert {hold for *_, hold, _ in HOLDS} == set(Hold)


# --------------------------------------------------------------------------- the migration we create


def test_manifest_matches_the_targeted_migration():
    manifest = migration_manifest(APART_VMI, node("node-b"), "disks served from node-b")
    expected = load("vmim-to-storage.yaml")
    assert manifest["apiVersion"] == expected["apiVersion"] == "kubevirt.io/v1"
    assert manifest["kind"] == expected["kind"] == "VirtualMachineInstanceMigration"
    assert manifest["metadata"]["namespace"] == expected["metadata"]["namespace"] == "default"
    assert manifest["metadata"]["labels"] == expected["metadata"]["labels"]
    assert manifest["spec"] == expected["spec"]
    assert manifest["metadata"]["generateName"] == "vm1-colocate-"
    assert manifest["metadata"]["annotations"] == {"kubevirt-scheduler/node": "node-b",
                                                   "kubevirt-scheduler/reason": "disks served from node-b"}
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(manifest["metadata"]) == {"generateName", "namespace", "labels", "annotations"}


def test_manifest_selects_the_node_by_its_hostname_label():
    renamed = node("node-b.example.com")
    renamed["metadata"]["labels"]["kubernetes.io/hostname"] = "node-b"
    manifest = migration_manifest(APART_VMI, renamed)
    assert manifest["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert manifest["metadata"]["annotations"] == {"kubevirt-scheduler/node": "node-b.example.com"}


def test_a_node_without_a_hostname_label_cannot_be_targeted():
    bare = node("node-b")
    del bare["metadata"]["labels"]["kubernetes.io/hostname"]
    assert target_hostname(bare) is None
    skipped = migration_manifest(APART_VMI, bare)
    assert skipped == Skipped("node node-b", "node node-b has no kubernetes.io/hostname label: cannot target it")


def test_our_manifest_reads_back_as_ours():
    manifest = migration_manifest(APART_VMI, node("node-b"), "x" * 5000)
    assert len(manifest["metadata"]["annotations"]["kubevirt-scheduler/reason"]) == 1024
    created = copy.deepcopy(manifest)
    created["metadata"].update(name="vm1-colocate-q2w3e", creationTimestamp=stamp(NOW))
    m = read_migration(created)
    assert m.ours and m.vmi == "vm1" and m.target == "node-b" and m.phase == "" and m.in_flight(NOW)
    assert attempts(APART_VMI, [m]) == [Attempt(NOW)]


@pytest.mark.parametrize("text, parsed", [
    ("2026-11-20T09:58:31Z", datetime(2026, 11, 20, 9, 58, 31, tzinfo=UTC)),
    ("2026-11-20T09:58:31.123456789Z", datetime(2026, 11, 20, 9, 58, 31, 123456, tzinfo=UTC)),
    ("2026-11-20T10:58:31+01:00", datetime(2026, 11, 20, 9, 58, 31, tzinfo=UTC)),
    ("2026-11-20T09:58:31", None),
    ("2026-11-20", None),
    ("soon", None),
    (None, None),
    (1700000000, None),
], ids=["utc", "nanoseconds", "offset", "no-zone", "date", "word", "none", "number"])
def test_parse_time(text, parsed):
    assert parse_time(text) == parsed


def test_the_next_target_is_free_of_the_node_an_earlier_targeted_migration_asked_for():
    from kube import load

    from webhook.rules.keep import as_started

    target = load("migration-target-pod.yaml")
    target["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "node-a"  # spec.addedNodeSelector, merged in
    started = as_started(target, {"kubevirt.io/schedulable": "true"})
    assert "kubernetes.io/hostname" not in started["spec"]["nodeSelector"]
    assert started["spec"]["nodeSelector"]["kubevirt.io/schedulable"] == "true"
    pinned_by_the_vm = as_started(target, {"kubernetes.io/hostname": "node-a"})  # the VM's own choice stays
    assert pinned_by_the_vm["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-a"
    assert target["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-a"  # a copy
