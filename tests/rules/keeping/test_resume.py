"""A VM the keeper recovered from a stale NFS mount: which migration recovered it (read from the
cluster alone), whether its pod mounted its disks afresh, and whether the keeper unpauses it."""
import dataclasses
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago, apart_vmi, fact, vmim

from webhook.config import KeepMode
from webhook.rules.keeping.apart import locality
from webhook.rules.keeping.keep import Limits, PassFacts, VmFacts
from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.recovery import cannot_finish, failed_recovery, not_afresh, recovered_by
from webhook.rules.keeping.resume import decide_resume, paused_note

PAUSED_AT = ago(minutes=30)


def paused(reason="PausedIOError", since=PAUSED_AT, **changes):
    """vm1 (co-located with its storage on node-a), paused since `since`."""
    return dataclasses.replace(apart_vmi(), node="node-a", paused=reason, paused_since=since, **changes)


def ours(name="vm1-colocate-r1", created=ago(minutes=20), phase="Succeeded", recovers="stale-mount", ours_=True):
    obj = vmim(phase, ours=ours_, created=created, name=name, transitions=[(phase, created + timedelta(minutes=1))])
    if recovers:
        obj["metadata"].setdefault("annotations", {})["kubevirt-scheduler/recovers"] = recovers
    obj["metadata"]["uid"] = f"uid-{name}"
    return read_migration(obj)


@pytest.mark.parametrize("vmi, migrations, found", [
    (paused(), [ours()], "vm1-colocate-r1"),
    (paused(), [ours("vm1-colocate-r1", ago(minutes=20)), ours("vm1-colocate-r2", ago(minutes=10))], "vm1-colocate-r2"),
    (paused(), [ours(recovers=None)], None),  # ours, for drift: not a recovery
    (paused(), [ours(ours_=False)], None),  # someone else's migration
    (paused(), [ours(phase="Failed")], None),
    (paused(), [ours(phase="Running")], None),
    (paused(since=ago(minutes=5)), [ours()], None),  # paused again after it: a new pause, not ours to lift
    (paused(since=None), [ours()], None),  # since when it is paused is not said: cannot tell
    (paused(reason=""), [ours()], None),  # not paused
], ids=["recovered", "the-latest", "drift-migration", "not-ours", "failed", "unfinished", "paused-after", "since-unknown",
        "not-paused"])
def test_which_migration_recovered_a_paused_vm(vmi, migrations, found):
    migration = recovered_by(vmi, migrations)
    assert (migration.name if migration else None) == found


@pytest.mark.parametrize("started, remounts, said", [
    (ago(minutes=1), {"pvc-d": ago(minutes=40)}, None),
    (ago(minutes=1), {"pvc-d": None}, None),
    (ago(hours=1), {"pvc-d": ago(minutes=40), "pvc-e": None}, "its pod started 2026-11-20T11:00:00Z, before Longhorn "
                                                              "asked for volume pvc-d to be remounted (2026-11-20T11:20:00Z)"),
    (None, {"pvc-d": ago(minutes=40)}, "when its launcher pod started is not known"),
])
def test_whether_its_pod_mounted_its_disks_afresh(started, remounts, said):
    assert not_afresh(started, remounts) == said


WHERE = locality("node-a", [fact("d", "node-a")])


def resume(vmi=None, recovered="default", **changes):
    vm = {k: changes.pop(k) for k in ("migrating", "not_afresh") if k in changes}
    facts = VmFacts(vmi=vmi or paused(), where=WHERE, recovered=ours() if recovered == "default" else recovered, **vm)
    return decide_resume(facts, PassFacts(**{"now": NOW, "limits": Limits(), "mode": KeepMode.MIGRATE,
                                             "targeted": True, **changes}))


def test_a_vm_the_keeper_recovered_is_unpaused():
    decision = resume()
    assert decision.act and (decision.migration, decision.uid) == ("vm1-colocate-r1", "uid-vm1-colocate-r1")
    assert decision.reason == ("unpausing: still paused (PausedIOError) after migration vm1-colocate-r1 recovered it "
                               "from a stale NFS mount; its pod mounted its disks afresh")


@pytest.mark.parametrize("vmi, changes, reason", [
    (paused("PausedByUser"), {}, "paused by its user (PausedByUser): the keeper never unpauses it"),
    (paused(phase="Succeeded"), {}, "VMI is Succeeded, not running"),
    (None, {"migrating": True}, "a migration of this VMI is in flight"),
    (None, {"not_afresh": "when its launcher pod started is not known"},
     "its disks are not known to be mounted afresh: when its launcher pod started is not known"),
    (None, {"incomplete": "pods: not synced"}, "not acting on an incomplete view: pods: not synced"),
    (None, {"mode": KeepMode.REPORT}, "report only: would unpause it (still paused (PausedIOError) after migration "
                                      "vm1-colocate-r1 recovered it from a stale NFS mount; its pod mounted its disks afresh)"),
    (None, {"lease": False}, "not acting: the lease might run out before it is unpaused"),
], ids=["by-user", "not-running", "migrating", "mount-unknown", "view-incomplete", "report", "no-lease"])
def test_what_holds_an_unpause(vmi, changes, reason):
    decision = resume(vmi, **changes)
    assert not decision.act and decision.reason == reason


def test_a_vm_it_did_not_recover_is_none_of_its_business():
    assert resume(recovered=None) is None


# --------------------------------------------------------------------------- whether a migration can finish


@pytest.mark.parametrize("caches, failed, faulted, said", [
    ((), None, (), None),  # KubeVirt's choice on NFS: cache none
    ((("d", "none"), ("e", "directsync")), None, (), None),
    ((("d", "none"), ("e", "writeback")), None, (), "its disk e uses cache mode writeback, with which QEMU fails every "
                                                   "flush after the first failed one, so a live migration can never finish"),
    ((("d", "writethrough"),), None, (), "its disk d uses cache mode writethrough, with which QEMU fails every flush "
                                         "after the first failed one, so a live migration can never finish"),
    ((), ("vm1-colocate-r1", "job 'migration out' failed: Error in migration completion: Input/output error"), (),
     "QEMU must flush the disk on the old mount before handing it over, and that failed (vm1-colocate-r1: job "
     "'migration out' failed: Error in migration completion: Input/output error)"),
    ((), None, ("pvc-d",), "its Longhorn volume pvc-d is faulted: on another node it would pause again"),
], ids=["default", "o-direct", "writeback", "writethrough", "failed-under-way", "faulted"])
def test_whether_a_migration_off_a_stale_mount_can_finish(caches, failed, faulted, said):
    assert cannot_finish(caches, failed, faulted) == said


def test_a_disks_cache_mode_is_read_by_its_claim():
    from tests.support.keeping import vmi_obj, view

    obj = vmi_obj()
    obj["spec"]["domain"]["devices"]["disks"][0]["cache"] = "writeback"
    claim = obj["spec"]["volumes"][0].get("persistentVolumeClaim", obj["spec"]["volumes"][0].get("dataVolume"))
    assert view(obj).caches == ((claim.get("claimName") or claim.get("name"), "writeback"),)
    assert view().caches == ()


def test_a_recovery_that_failed_under_way_during_this_pause_is_named():
    state = dataclasses.replace(apart_vmi().migration, failed=True, completed=False, migration_uid="uid-vm1-colocate-r1",
                                failure_reason="job 'migration out' failed: Error in migration completion")
    vmi = paused(migration=state)
    assert failed_recovery(vmi, [ours(phase="Failed")]) == ("vm1-colocate-r1", state.failure_reason)
    assert failed_recovery(vmi, [ours(phase="Failed", recovers=None)]) is None  # a drift migration of ours
    assert failed_recovery(paused(since=ago(minutes=5), migration=state), [ours(phase="Failed")]) is None  # before this pause
    assert failed_recovery(paused(migration=dataclasses.replace(state, failure_reason="")), [ours(phase="Failed")]) is None


@pytest.mark.parametrize("stale, step, said", [
    ("its mount is stale", "moves to node-b at the keeper's next pass (stale mount)",
     "its mount is stale; a migration mounts it afresh: moves to node-b at the keeper's next pass (stale mount)"),
    ("its mount is stale", "needs a restart: its mount is stale, and …", "needs a restart: its mount is stale, and …"),
    ("", "unpaused at the keeper's next pass (…)", "unpaused at the keeper's next pass (…)"),
    ("", "stays paused: report only: would unpause it (…)", "stays paused: report only: would unpause it (…)"),
    ("", "stays: co-located", "paused on a disk I/O error"),
])
def test_statuss_note_on_a_vm_paused_on_an_io_error(stale, step, said):
    assert paused_note(stale, step, "paused on a disk I/O error") == said
