"""Whether a VM is on a stale NFS mount, on KubeVirt's own words: virt-launcher's `IOerror` Event per disk
("VM Paused due to IO error at the volume: X" or "... not enough space on volume: X", KubeVirt v1.9.0
`pkg/virt-launcher/notify-client/client.go`), told again on every domain callback while the VM stays paused: its
`count` and `lastTimestamp` are not pauses. A pod older than a remount request of Longhorn's is not enough
(Longhorn stamps one on every reconcile while a share-manager is down, wherever it comes back); a resume after the
new share-manager served and the NFS client had its 30 s to reconnect must be followed by a pause of that disk: the
keeper's own resume, or the VM seen running again after a pause KubeVirt's retry lifted."""
from datetime import timedelta

import pytest
from tests.support.keeping import ago, NOW

from webhook.rules.keeping.recovery import (DiskError, FAILS_WITHIN, full, judge, Mount, probe, PROVEN, Server,
                                            sighted, Sighting, Stale, storage_wait)

SERVED = ago(minutes=30)  # the new share-manager serves (11:30:00)
SERVER = Server(volume="pvc-d", requested=SERVED - timedelta(seconds=8), served=SERVED, pod="share-manager-pvc-d",
                node="node-a")
MOUNT = Mount(pod_started=ago(days=3), servers=(SERVER, Server(volume="pvc-other", served=ago(days=3))))
IO = "PausedIOError"


def at(n):
    """`n` seconds after the share-manager served."""
    return SERVED + timedelta(seconds=n)


def error(first, last, *, volume="pvc-d", no_space=False, combined=False):
    return DiskError(disk="rootdisk" if volume == "pvc-d" else "datadisk", volume=volume, no_space=no_space,
                     first=at(first), last=at(last), combined=combined)


@pytest.mark.parametrize("errors, paused, now", [
    ([], "", at(600)),  # its NFS client recovered: it never paused
    ([error(-20, 10)], "", at(600)),  # paused while the server was away and the client reconnected; running since
    ([error(45, 45)], "", at(700)),  # one pause after it served, lifted by KubeVirt's first retry: 10 min running
    ([error(45, 45)], "", at(86400 * 2)),  # ... days ago
    ([error(-20, 86400 * 2)], "", at(86400 * 2 + 700)),  # the outage's pauses and one transient, folded, days later
    ([error(40, 60, volume="pvc-other")], IO, at(120)),  # the other disk failed: its share-manager never restarted
    ([error(40, 60, no_space=True)], IO, at(120)),  # the disk is full: "not enough space", whatever the count
    ([error(40, 60)], "PausedByUser", at(120)),  # its user paused it after its I/O errors: the user wins
], ids=["never-paused", "paused-while-reconnecting", "first-retry-lifted", "first-retry-lifted-days-ago",
        "transient-days-later-folded", "other-disk", "disk-full", "user-paused"])
def test_nothing_says_a_mount_is_stale(errors, paused, now):
    assert judge(MOUNT, errors, paused, now) is None


def test_a_pause_lifted_by_the_first_retry_is_no_evidence_and_the_vm_waits_for_nothing():
    """A transient I/O error after the server served, the VM running since. Said while KubeVirt could still
    retry it, then proven."""
    assert "KubeVirt retries it" in judge(MOUNT, [error(45, 45)], "", at(100))
    assert judge(MOUNT, [error(45, 45)], "", at(45) + PROVEN) is None


@pytest.mark.parametrize("last", [40, 100, 3000], ids=["told-again", "told-a-minute-later", "told-for-an-hour"])
def test_an_event_told_again_and_again_while_paused_is_no_evidence(last):
    """Paused since +40 s, its Event told every 15 s (access credentials): however fresh its lastTimestamp, nothing
    resumed it since it paused."""
    assert isinstance(judge(MOUNT, [error(40, last)], IO, at(last + 10), {"pvc-d": Sighting(at(40))}), str)


def test_a_pause_after_the_keepers_own_resume_is_a_resume_that_failed():
    """The keeper resumed it at +60 s; the Event tells of the disk after that, within FAILS_WITHIN."""
    judged = judge(MOUNT, [error(-20, 75)], IO, at(90), resumed=[at(60)])
    assert isinstance(judged, Stale) and judged.words.startswith(
        "paused on an I/O error of disk rootdisk at 2026-11-20T11:31:15Z, after the keeper resumed it at "
        "2026-11-20T11:31:00Z, once share-manager share-manager-pvc-d served again on node-a at 2026-11-20T11:30:00Z")
    assert isinstance(judge(MOUNT, [error(-20, 62)], IO, at(90), resumed=[at(60)]), str)  # a callback of before
    assert isinstance(judge(MOUNT, [error(-20, 75)], IO, at(90), resumed=[at(20)]), str)  # resumed within the margin
    late = 60 + FAILS_WITHIN.total_seconds() + 1
    assert isinstance(judge(MOUNT, [error(-20, late)], IO, at(late + 5), resumed=[at(60)]), str)  # ran 3 min: works


def test_a_pause_after_the_vm_was_seen_running_again_is_a_resume_that_failed():
    """A slowly failing mount: paused at +75 s, resumed at once by KubeVirt and seen running at +90 s; its Event
    tells of the disk at +225 s, 150 s after the pause before: within FAILS_WITHIN. 300 s apart proves nothing."""
    seen = {"pvc-d": Sighting(at(75), at(90))}
    judged = judge(MOUNT, [error(-20, 225)], "", at(240), seen)
    assert isinstance(judged, Stale) and "150s after the pause KubeVirt's retry lifted" in judged.words
    assert isinstance(judge(MOUNT, [error(-20, 375)], "", at(390), seen), str)
    assert isinstance(judge(MOUNT, [error(-20, 93)], "", at(100), seen), str)  # within RACE of being seen running
    assert isinstance(judge(MOUNT, [error(-20, 225)], "", at(240), {"pvc-d": Sighting(at(75))}), str)  # never ran


def test_what_the_keeper_sees_is_kept_past_the_margin_a_new_pause_after_it_ran_again():
    errors = [error(-20, 75), error(-20, 75, volume="pvc-other"), error(80, 90, no_space=True)]
    assert sighted(MOUNT, errors, False, at(80), {}) == {"pvc-d": Sighting(at(75))}
    assert sighted(MOUNT, errors, True, at(90), {"pvc-d": Sighting(at(75))}) == {"pvc-d": Sighting(at(75), at(90))}
    assert sighted(MOUNT, errors, True, at(120), {"pvc-d": Sighting(at(75), at(90))}) == {
        "pvc-d": Sighting(at(75), at(90))}  # nothing new
    assert sighted(MOUNT, [error(-20, 225)], True, at(240), {"pvc-d": Sighting(at(75), at(90))}) == {
        "pvc-d": Sighting(at(225), at(240))}
    assert sighted(MOUNT, [error(-20, 20)], False, at(30), {}) == {}  # within the margin
    assert sighted(MOUNT, [error(-20, 75, combined=True)], False, at(80), {}) == {}  # no one disk's times


def test_the_keeper_resumes_a_paused_vm_once_after_the_margin():
    errors = [error(-20, 10)]
    assert probe(MOUNT, errors, at(20), []) is None  # the client has not had its 30 s
    assert probe(MOUNT, errors, at(30), []).startswith("paused on an I/O error of disk rootdisk after share-manager "
                                                       "share-manager-pvc-d served again on node-a")
    assert probe(MOUNT, errors, at(90), [at(60)]) is None  # once
    assert probe(MOUNT, [error(-20, 10, volume="pvc-other")], at(60), []) is None  # no restart of that disk's server
    assert probe(MOUNT, [error(-20, 10, no_space=True)], at(60), []) is None


def test_found_evidence_stands_until_the_disk_is_proven_or_another_restart():
    kept = Stale("paused …", SERVER.requested, at(130))
    assert judge(MOUNT, [], IO, at(3600), kept=kept) == kept  # still paused
    assert judge(MOUNT, [], "", at(130) + PROVEN - timedelta(seconds=1), kept=kept) == kept
    assert judge(MOUNT, [], "", at(130) + PROVEN, kept=kept) is None  # ran 10 minutes since: its mount works
    newer = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=ago(minutes=1), served=NOW,
                                                           pod="share-manager-pvc-d", node="node-a"),))
    assert judge(newer, [], IO, NOW, kept=kept) is None  # another restart since: judged afresh


def test_a_full_disk_is_said_in_kubevirts_words_and_never_a_stale_mount():
    errors = [error(-20, 50), error(55, 70, no_space=True)]
    assert full(errors, True) == (
        "paused because its disk rootdisk is full (KubeVirt: not enough space on volume rootdisk, at "
        "2026-11-20T11:31:10Z): a migration cannot free space; free space in the guest or grow the volume")
    assert full(errors, False) is None and full(errors[:1], True) is None


def test_a_share_manager_that_does_not_serve_is_waited_for_then_said():
    """Longhorn stamps its request on every reconcile while the share-manager is down: the wait counts from the
    VM's first I/O error on that disk."""
    down = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=NOW, pod="share-manager-pvc-d"),))
    errors = [DiskError(disk="rootdisk", volume="pvc-d", no_space=False, first=ago(minutes=2), last=NOW)]
    assert judge(down, errors, IO, NOW) == "share-manager share-manager-pvc-d does not serve yet"
    assert storage_wait(down, errors, NOW) is None
    later = NOW + timedelta(minutes=8)
    assert judge(down, errors, IO, later) == ("waiting for its storage, not for the keeper: share-manager "
                                              "share-manager-pvc-d has not served since 2026-11-20T11:58:00Z (10 min)")
    assert storage_wait(down, errors, later) == judge(down, errors, IO, later)
    assert judge(down, [], "", later) is None and storage_wait(MOUNT, errors, later) is None


def test_a_request_stamped_after_the_server_started_counts_from_the_request():
    """Longhorn stamps the request on every reconcile while the share-manager is down: the last stamp may
    follow the new pod's start. The margin counts from the later of the two."""
    late = Server(volume="pvc-d", requested=at(20), served=SERVED, pod="share-manager-pvc-d", node="node-a")
    mount = Mount(pod_started=ago(days=3), servers=(late,))
    assert judge(mount, [error(45, 48)], IO, at(60), resumed=[at(40)]) is not None
    assert not isinstance(judge(mount, [error(45, 48)], IO, at(60), resumed=[at(40)]), Stale)  # within 30 s of +20
    assert isinstance(judge(mount, [error(55, 58)], IO, at(60), resumed=[at(50)]), Stale)
