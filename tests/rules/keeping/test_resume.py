"""A VM on a stale NFS mount and a VM carried paused onto a fresh one: whether its mount is stale and
since when (Longhorn's remount request, never KubeVirt's re-stamped condition), whether its pause
came over with a migration, and whether the keeper unpauses it — by what is true now, with no record
of its own migration."""
import dataclasses
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago, apart_vmi, fact, vmim

from webhook.config import KeepMode
from webhook.rules.keeping.apart import locality
from webhook.rules.keeping.keep import Limits, PassFacts, VmFacts
from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.recovery import cannot_finish, came_over, failed_recovery, Mount, not_fresh, Server
from webhook.rules.keeping.resume import decide_resume, paused_note
from webhook.rules.keeping.record import Action, Refusal
from webhook.rules.shared.alone import Alone

PAUSED_AT = ago(minutes=30)
REMOUNT = ago(minutes=40)


def paused(reason="PausedIOError", since=PAUSED_AT, **changes):
    """vm1 (co-located with its storage on node-a), paused since `since`."""
    return dataclasses.replace(apart_vmi(), node="node-a", paused=reason, paused_since=since, **changes)


def ours(name="vm1-colocate-r1", created=ago(minutes=20), phase="Succeeded", recovers="stale-mount", ours_=True):
    obj = vmim(phase, ours=ours_, created=created, name=name, transitions=[(phase, created + timedelta(minutes=1))])
    if recovers:
        obj["metadata"].setdefault("annotations", {})["kubevirt-scheduler/recovers"] = recovers
    obj["metadata"]["uid"] = f"uid-{name}"
    return read_migration(obj)


def test_a_mount_is_afresh_only_when_its_pod_started_after_every_request():
    assert not_fresh(Mount(pod_started=ago(minutes=1), servers=(Server(volume="pvc-d", requested=REMOUNT),))) is None
    assert not_fresh(Mount(pod_started=None)) == "when its launcher pod started is not known"
    assert not_fresh(None) == "when its launcher pod started is not known"
    assert not_fresh(Mount(pod_started=ago(hours=1), servers=(Server(volume="pvc-d", requested=REMOUNT),
                                                              Server(volume="pvc-e", requested=ago(minutes=10))))) == (
        "its pod started 2026-11-20T11:00:00Z, before Longhorn asked for volume pvc-e to be remounted "
        "(2026-11-20T11:50:00Z)")  # the latest request


MOVED = dataclasses.replace(apart_vmi().migration, completed=True, failed=False, ended=ago(minutes=5))


@pytest.mark.parametrize("vmi, pod_started, came", [
    (paused(since=ago(minutes=30)), ago(minutes=6), True),  # paused, then carried into a newer pod
    (paused(since=ago(minutes=5)), ago(minutes=6), False),  # paused in the pod it runs in: KubeVirt's retry
    # re-stamped on the source after the target pod started, before the switchover the VMI records
    (paused(since=ago(minutes=5), migration=MOVED), ago(minutes=6), True),
    (paused(since=ago(minutes=4), migration=MOVED), ago(minutes=6), False),  # paused after the switchover
    (paused(since=None), ago(minutes=6), False),
    (paused(), None, False),
], ids=["carried", "paused-here", "re-stamped-before-switchover", "paused-after-switchover", "since-unknown",
        "pod-unknown"])
def test_a_pause_came_over_with_a_migration(vmi, pod_started, came):
    assert came_over(vmi, pod_started) is came


WHERE = locality("node-a", [fact("d", "node-a")])
FRESH = Mount(pod_started=ago(minutes=6), servers=(Server(volume="pvc-d", requested=REMOUNT),))


def resume(vmi=None, mount=FRESH, **changes):
    vm = {k: changes.pop(k) for k in ("migrating", "unpause_refused", "unpaused", "unpauses") if k in changes}
    facts = VmFacts(vmi=vmi or paused(), where=WHERE, mount=mount, **vm)
    return decide_resume(facts, PassFacts(**{"now": NOW, "limits": Limits(), "mode": KeepMode.MIGRATE,
                                             "targeted": True, **changes}))


def test_a_vm_carried_paused_onto_a_fresh_mount_is_unpaused():
    decision = resume()
    assert decision.act and decision.reason == ("unpausing: paused on a disk I/O error before it moved onto a fresh "
                                                "NFS mount, where KubeVirt keeps it paused")


HELD = Refusal(namespace="default", name="vm1", action=Action.UNPAUSE, count=1, retry=NOW + timedelta(seconds=10),
            words="unpausing failed: API answered 503", status=503)


@pytest.mark.parametrize("vmi, changes, hold, reason", [
    (paused(phase="Succeeded"), {}, Alone.NOT_RUNNING, "VMI is Succeeded, not running"),
    (dataclasses.replace(paused(), may_move=False), {}, Alone.OPTED_OUT,
     "keep disabled on this VM: the keeper never unpauses it"),
    (None, {"migrating": True}, Alone.MIGRATING, "a migration of this VMI is in flight"),
    (None, {"unpause_refused": HELD}, Alone.REFUSED, "its unpause failed once (unpausing failed: API answered 503); "
                                                  "retrying after 2026-11-20T12:00:10Z"),
    (None, {"incomplete": "pods: not synced"}, Alone.VIEW_INCOMPLETE, "not acting on an incomplete view: pods: not synced"),
    (None, {"mode": KeepMode.REPORT}, Alone.REPORT_ONLY, "report only: would unpause it (paused on a disk I/O error "
                                                         "before it moved onto a fresh NFS mount, where KubeVirt keeps it paused)"),
    (None, {"lease": False}, Alone.NO_LEASE, "not acting: the lease might run out before it is unpaused"),
], ids=["not-running", "opted-out", "migrating", "backing-off", "view-incomplete", "report", "no-lease"])
def test_what_holds_an_unpause(vmi, changes, hold, reason):
    decision = resume(vmi, **changes)
    assert not decision.act and (decision.hold, decision.reason) == (hold, reason)


def test_an_unpause_that_does_not_hold_is_made_twice_in_one_pod_then_it_needs_a_restart():
    """Paused again at once on its fresh mount, its disk fails on that node too: no unpause loop."""
    assert resume(unpauses=1).act
    held = resume(unpauses=2)
    assert not held.act and held.hold is Alone.NEEDS_RESTART
    assert held.reason.startswith("paused again on its fresh mount after 2 unpauses by the keeper")


STALE = Mount(pod_started=ago(hours=1), servers=(Server(volume="pvc-d", requested=REMOUNT),))  # older than the request


@pytest.mark.parametrize("vmi, changes, act", [
    (paused(since=ago(seconds=30)), {}, True),  # paused 30 s in its own pod: KubeVirt's next retry may be minutes away
    (paused(since=ago(seconds=5)), {}, None),  # a pause KubeVirt resumes at once
    (paused(since=ago(seconds=30)), {"stale": "paused again after it"}, None),  # proven: a migration recovers it
    (paused(since=ago(seconds=30)), {"full": "its disk is full"}, False),  # never unpaused
    (paused(since=ago(seconds=30)), {"probe": None}, None),  # resumed once already, or no disk of a restarted server
    (paused("PausedByUser", since=ago(seconds=30)), {}, None),
], ids=["paused", "resumed-at-once", "stale", "disk-full", "done", "by-user"])
def test_a_vm_paused_on_a_disk_whose_server_serves_again_is_resumed_once(vmi, changes, act):
    """What KubeVirt's retry does, minutes sooner (`recovery.probe`): its mount works again, or it pauses again on
    that disk, which proves the mount stale."""
    facts = VmFacts(vmi=vmi, where=WHERE, mount=STALE, **{"probe": "paused on an I/O error of disk rootdisk …",
                                                          **changes})
    decided = decide_resume(facts, PassFacts(now=NOW, limits=Limits(), mode=KeepMode.MIGRATE, targeted=True))
    assert (decided and decided.act) if act else (decided is None if act is None else not decided.act)
    if act:
        assert decided.reason == "unpausing: paused on an I/O error of disk rootdisk …"


def test_a_hold_whose_retry_has_come_holds_no_more():
    assert resume(unpause_refused=dataclasses.replace(HELD, retry=NOW)).act


@pytest.mark.parametrize("vmi, mount, changes", [
    (paused("PausedByUser"), FRESH, {}),
    (paused("PausedByMigrationMonitor"), FRESH, {}),
    (paused(reason=""), FRESH, {}),  # not paused
    (paused(since=ago(minutes=5)), FRESH, {}),  # paused on its fresh mount: KubeVirt's own retry's
    (None, Mount(pod_started=ago(hours=1), servers=(Server(volume="pvc-d", requested=REMOUNT),)), {}),  # still on the stale mount
    (None, None, {}),  # its mount could not be read
    (None, FRESH, {"unpaused": True, "unpauses": 1}),  # unpaused a moment ago in this pod: the watch may not show it
], ids=["by-user", "by-migration-monitor", "not-paused", "paused-here", "stale", "mount-unknown", "just-unpaused"])
def test_a_vm_not_carried_paused_onto_a_fresh_mount_is_none_of_its_business(vmi, mount, changes):
    assert resume(vmi, mount, **changes) is None


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


def test_a_recovery_that_failed_under_way_on_this_stale_mount_is_named():
    state = dataclasses.replace(apart_vmi().migration, failed=True, completed=False, migration_uid="uid-vm1-colocate-r1",
                                failure_reason="job 'migration out' failed: Error in migration completion")
    vmi = paused(migration=state)
    assert failed_recovery(vmi, [ours(phase="Failed")], REMOUNT) == ("vm1-colocate-r1", state.failure_reason)
    assert failed_recovery(vmi, [ours(phase="Failed", recovers=None)], REMOUNT) is None  # a drift migration of ours
    assert failed_recovery(vmi, [ours(phase="Failed")], ago(minutes=5)) is None  # made before this remount request
    no_words = paused(migration=dataclasses.replace(state, failure_reason=""))
    assert failed_recovery(no_words, [ours(phase="Failed")], REMOUNT) is None


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
