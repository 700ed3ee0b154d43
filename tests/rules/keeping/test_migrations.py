"""Migrations: ours and others', in flight or ended, the backoff, and the one we create."""
import copy
from datetime import timedelta

import pytest
from tests.support.keeping import (
    NOW,
    ago,
    apart_vmi,
    attempt,
    at,
    evacuation,
    failed,
    in_flight_state,
    stamp,
    succeeded,
    view,
    vmi_obj,
    vmim,
)
from tests.support.kube import load, node

from webhook.rules.keeping.migrations import (
    Backoff,
    Migration,
    attempts,
    backoff,
    BACKOFF_CAP,
    BACKOFF_FIRST,
    doubled,
    flying,
    last_migration_end,
    last_move,
    migrating,
    migration_manifest,
    read_migration,
    target_hostname,
    unseen_success,
)
from webhook.rules.shared.reading import Malformed

# --------------------------------------------------------------------------- migrations


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
    assert isinstance(skipped, Malformed) and reason in skipped.reason
    if isinstance(obj, dict):
        assert skipped.what == "VMIM default/vm1-colocate-abcde"


def migrations(*objs):
    return [read_migration(o) for o in objs]


def test_in_flight():
    found = migrations(
        vmim("Running"), vmim("Pending", name="m2", vmi="vm2"),
        vmim("Scheduling", ours=False, name="m3", vmi="vm3"), vmim(None, ours=False, name="m4", vmi="vm4"),
        vmim("Succeeded", name="m5"), vmim("Failed", ours=False, name="m6"),
        vmim("Running", created=ago(hours=2), name="m7"), vmim("Running", ours=False, created=ago(hours=2), name="m8"),
    )
    assert sorted(ours for _, _, ours in flying(found, [], NOW)) == [False, False, True, True]


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


# --------------------------------------------------------------------------- the descheduler's evictions


@pytest.mark.parametrize("obj, descheduled", [
    (evacuation(), True),
    (evacuation("system-critical"), False),  # a drain's
    (evacuation(annotations={}), False),  # not an evacuation: no priority but virt-controller's, though
    (vmim("Succeeded"), False),  # ours
], ids=["descheduler", "drain", "not-an-evacuation", "ours"])
def test_an_evacuation_for_the_descheduler_is_told_by_its_priority(obj, descheduled):
    migration = read_migration(obj)
    assert migration.descheduled is descheduled


def test_an_evacuation_as_kubevirt_stores_it():
    migration = read_migration(evacuation())
    assert (migration.name, migration.evacuated, migration.priority, migration.uid) == (
        "kubevirt-evacuation-x7k2p", "node-b", "system-maintenance", "0d9c2b7e-1111-4a2b-9c3d-44e5f6a7b8c9")
    assert not migration.ours and migration.succeeded and migration.ended == at("2026-11-20T09:58:31Z")
    assert read_migration(vmim(ours=False)).evacuated is None


def uid(obj, value):
    obj["metadata"]["uid"] = value
    return obj


def test_the_last_move_is_the_success_the_vmi_names():
    """vm1's VMI names the evacuation that brought it to node-a (0d9c2b7e-…)."""
    settled = view()
    older = success("u0", name="m0", end=ago(hours=5))
    assert last_move(settled, migrations(evacuation(), older)).name == "kubevirt-evacuation-x7k2p"
    # Its object deleted: nobody can tell where the move came from, not even an older success.
    assert last_move(settled, migrations(older, evacuation(name="kubevirt-evacuation-old", uid="u-old"))) is None
    assert last_move(settled, []) is None
    # A VMI that shows no migration has not moved since it started: an earlier run's is not it.
    assert last_move(view(vmi_obj(migrationState=None)), migrations(evacuation())) is None
    # The migration of another VMI is not its.
    of_vm2 = evacuation()
    of_vm2["spec"]["vmiName"] = "vm2"
    assert last_move(settled, migrations(of_vm2)) is None


def test_after_a_failed_migration_the_last_move_is_the_latest_success():
    tried = view(vmi_obj(migrationState=in_flight_state(migrationUid="u9", failed=True, completed=True,
                                                        endTimestamp=stamp(ago(minutes=5)))))
    found = migrations(success("u0", name="m0", end=ago(hours=5)), evacuation(),
                       uid(vmim("Failed", name="m9", end=ago(minutes=5)), "u9"))
    assert last_move(tried, found).name == "kubevirt-evacuation-x7k2p"
    assert last_move(tried, migrations(uid(vmim("Failed", name="m9", end=ago(minutes=5)), "u9"))) is None


def test_attempts_are_ours_of_this_vm_oldest_first():
    found = migrations(
        vmim("Failed", created=ago(hours=5), end=ago(hours=4), name="m1"),
        vmim("Running", created=ago(minutes=5), name="m2"),
        vmim("Succeeded", created=ago(hours=20), end=ago(hours=19), name="m3"),
        vmim("Failed", ours=False, created=ago(hours=1), end=ago(minutes=50), name="m4"),
        vmim("Failed", vmi="vm2", name="m5"),
    )
    assert [(m.name, m.created, m.ended, m.phase) for m in attempts(view(), found)] == [
        ("m3", ago(hours=20), ago(hours=19), "Succeeded"),
        ("m1", ago(hours=5), ago(hours=4), "Failed"),
        ("m2", ago(minutes=5), None, "Running"),
    ]


# --------------------------------------------------------------------------- backoff


def test_backoff_sequence():
    minutes = [doubled(BACKOFF_FIRST, BACKOFF_CAP, n) / timedelta(minutes=1) for n in range(1, 9)]
    assert minutes == [30, 60, 120, 240, 480, 960, 1440, 1440]
    assert doubled(BACKOFF_FIRST, BACKOFF_CAP, 10_000) == timedelta(hours=24)


@pytest.mark.parametrize("history, failures, until", [
    ([], 0, None),
    ([succeeded(ago(hours=1))], 0, None),
    ([failed(ago(hours=1))], 1, ago(minutes=30)),
    ([failed(ago(hours=3)), failed(ago(hours=1))], 2, NOW),
    ([failed(ago(hours=5)), failed(ago(hours=3)), failed(ago(hours=1))], 3, ago(hours=-1)),
    ([failed(ago(hours=5)), succeeded(ago(hours=3)), failed(ago(hours=1))], 1, ago(minutes=30)),
    ([failed(ago(hours=3)), failed(ago(hours=1)), succeeded(ago(minutes=5))], 0, None),
    ([failed(ago(hours=1)), attempt(ago(minutes=5))], 1, ago(minutes=30)),
    ([failed(ago(hours=1 + i)) for i in range(12)], 12, ago(hours=1 - 24)),
], ids=["none", "success", "one-failure", "two", "three", "success-resets", "ends-in-success",
        "unfinished-ignored", "capped"])
def test_backoff(history, failures, until):
    assert backoff(history) == Backoff(failures, until)


# --------------------------------------------------------------------------- the migration we create


def test_manifest_matches_the_targeted_migration():
    manifest = migration_manifest(apart_vmi(), node("node-b"), "disks served from node-b")
    expected = load("vmim-to-storage.yaml")
    assert manifest["apiVersion"] == expected["apiVersion"] == "kubevirt.io/v1"
    assert manifest["kind"] == expected["kind"] == "VirtualMachineInstanceMigration"
    assert manifest["metadata"]["namespace"] == expected["metadata"]["namespace"] == "default"
    assert manifest["metadata"]["labels"] == expected["metadata"]["labels"]
    assert manifest["spec"] == expected["spec"]
    assert manifest["metadata"]["generateName"] == "vm1-colocate-"
    assert manifest["metadata"]["annotations"] == {"kubevirt-scheduler/node": "node-b",
                                                   "kubevirt-scheduler/reason": "disks served from node-b",
                                                   "kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "60"}
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert "priority" not in manifest["spec"]  # unless the cluster is known to keep it


def test_manifest_asks_for_the_lowest_priority_where_the_cluster_keeps_it():
    manifest = migration_manifest(apart_vmi(), node("node-b"), priority="system-maintenance")
    assert manifest["spec"] == {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node-b"},
                                "priority": "system-maintenance"}
    assert set(manifest["metadata"]) == {"generateName", "namespace", "labels", "annotations"}


def test_manifest_selects_the_node_by_its_hostname_label():
    renamed = node("node-b.example.com")
    renamed["metadata"]["labels"]["kubernetes.io/hostname"] = "node-b"
    manifest = migration_manifest(apart_vmi(), renamed)
    assert manifest["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert manifest["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-b.example.com"


def test_a_node_without_a_hostname_label_cannot_be_targeted():
    bare = node("node-b")
    del bare["metadata"]["labels"]["kubernetes.io/hostname"]
    assert target_hostname(bare) is None
    skipped = migration_manifest(apart_vmi(), bare)
    assert skipped == "node node-b has no kubernetes.io/hostname label: cannot target it"


def test_our_manifest_reads_back_as_ours():
    manifest = migration_manifest(apart_vmi(), node("node-b"), "x" * 5000)
    assert len(manifest["metadata"]["annotations"]["kubevirt-scheduler/reason"]) == 1024
    created = copy.deepcopy(manifest)
    created["metadata"].update(name="vm1-colocate-q2w3e", creationTimestamp=stamp(NOW))
    m = read_migration(created)
    assert m.ours and m.vmi == "vm1" and m.target == "node-b" and m.phase == "" and m.in_flight(NOW)
    assert attempts(apart_vmi(), [m]) == [m]
