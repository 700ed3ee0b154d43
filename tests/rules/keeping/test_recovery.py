"""Whether a VM is on a stale NFS mount, on KubeVirt's own words: virt-launcher's `IOerror` Event per disk
("VM Paused due to IO error at the volume: X" or "... not enough space on volume: X", KubeVirt v1.9.0
`pkg/virt-launcher/notify-client/client.go`), its repeats folded by client-go's recorder into `count`,
`firstTimestamp` and `lastTimestamp`. A pod older than a remount request of Longhorn's is not enough (Longhorn
stamps one on every reconcile while a share-manager is down, wherever it comes back); a retry of KubeVirt's must
have failed once the new share-manager served and the NFS client had its 30 s to reconnect."""
from datetime import timedelta

import pytest
from tests.support.keeping import ago, NOW

from webhook.rules.keeping.recovery import (DiskError, full, judge, Mount, PROVEN, Server, sightings, Stale,
                                            storage_wait)

SERVED = ago(minutes=30)  # the new share-manager serves (11:30:00)
SERVER = Server(volume="pvc-d", requested=SERVED - timedelta(seconds=8), served=SERVED, pod="share-manager-pvc-d",
                node="node-a")
MOUNT = Mount(pod_started=ago(days=3), servers=(SERVER, Server(volume="pvc-other", served=ago(days=3))))
IO = "PausedIOError"


def at(n):
    """`n` seconds after the share-manager served."""
    return SERVED + timedelta(seconds=n)


def error(first, last, count, *, volume="pvc-d", no_space=False):
    return DiskError(disk="rootdisk" if volume == "pvc-d" else "datadisk", volume=volume, no_space=no_space,
                     count=count, first=at(first), last=at(last))


@pytest.mark.parametrize("errors, paused, now", [
    ([], "", at(600)),  # its NFS client recovered: it never paused
    ([error(-20, 10, 4)], "", at(600)),  # paused while the server was away and the client reconnected; running since
    ([error(45, 45, 1)], "", at(700)),  # one pause after it served, lifted by KubeVirt's first retry: 10 min running
    ([error(45, 45, 1)], "", at(86400 * 2)),  # ... days ago
    ([error(-20, 86400 * 2, 5)], "", at(86400 * 2 + 700)),  # the outage's pauses and one transient, folded, days later
    ([error(40, 60, 6, volume="pvc-other")], IO, at(120)),  # the other disk failed: its share-manager never restarted
    ([error(40, 60, 6, no_space=True)], IO, at(120)),  # the disk is full: "not enough space", whatever the count
    ([error(40, 60, 6)], "PausedByUser", at(120)),  # its user paused it after its I/O errors: the user wins
], ids=["never-paused", "paused-while-reconnecting", "first-retry-lifted", "first-retry-lifted-days-ago",
        "transient-days-later-folded", "other-disk", "disk-full", "user-paused"])
def test_nothing_says_a_mount_is_stale(errors, paused, now):
    assert judge(MOUNT, errors, paused, now) is None


def test_a_pause_lifted_by_the_first_retry_is_no_evidence_and_the_vm_waits_for_nothing():
    """A transient I/O error after the server served: counted once, the VM running since. Said while KubeVirt
    could still retry it, then proven."""
    assert "KubeVirt retries it" in judge(MOUNT, [error(45, 45, 1)], "", at(100))
    assert judge(MOUNT, [error(45, 45, 1)], "", at(45) + PROVEN) is None


def test_two_pauses_after_the_margin_are_a_retry_that_failed():
    """A slowly failing mount first paused after the server served, resumed, and paused again: the Event counts 2."""
    judged = judge(MOUNT, [error(40, 130, 2)], "", at(140))
    assert judged == Stale("paused 2 times on I/O errors of disk rootdisk from 2026-11-20T11:30:40Z to "
                           "2026-11-20T11:32:10Z, 130s after share-manager share-manager-pvc-d served again on node-a at "
                           "2026-11-20T11:30:00Z: KubeVirt's retry did not bring it back", SERVER.requested, at(130))


def test_pauses_too_far_apart_are_separate_failures():
    assert isinstance(judge(MOUNT, [error(40, 40 + 660, 2)], "", at(720)), str)
    assert isinstance(judge(MOUNT, [error(40, 40 + 1200, 3)], "", at(1260)), Stale)  # 3 in 20 min: one failure


def test_a_fast_failing_mount_still_paused_past_a_retry_after_the_margin_is_stale():
    """Paused at -20 s, KubeVirt retries at -10, +10 and +50 s (each re-pauses at once: one Event, count 4). Still
    paused 10 s after the retry at +50 s: KubeVirt resumes a new failure at once, so that retry failed."""
    errors = [error(-20, 50, 4)]
    assert isinstance(judge(MOUNT, errors, IO, at(59)), str)
    judged = judge(MOUNT, errors, IO, at(60))
    assert isinstance(judged, Stale) and judged.words.startswith(
        "paused on an I/O error of disk rootdisk at 2026-11-20T11:30:50Z and still paused, 50s after")
    assert isinstance(judge(MOUNT, [error(-20, 20, 3)], IO, at(60)), str)  # its last pause within the margin


def test_a_pause_after_one_the_keeper_saw_past_the_margin_is_a_retry_that_failed():
    """The keeper's record kept the pause at +75 s; the Event now says +225 s: KubeVirt resumed it and it failed."""
    assert isinstance(judge(MOUNT, [error(-20, 75, 2)], "", at(90), {"pvc-d": at(75)}), str)
    judged = judge(MOUNT, [error(-20, 225, 3)], "", at(240), {"pvc-d": at(75)})
    assert isinstance(judged, Stale) and "after KubeVirt resumed it from the one at 2026-11-20T11:31:15Z" in judged.words
    assert isinstance(judge(MOUNT, [error(-20, 225, 3)], "", at(240), {"pvc-d": at(20)}), str)  # seen within the margin


def test_what_the_keeper_sees_is_kept_only_past_the_margin():
    errors = [error(-20, 75, 2), error(-20, 75, 3, volume="pvc-other"), error(80, 90, 2, no_space=True)]
    assert sightings(MOUNT, errors) == {"pvc-d": at(75)}
    assert sightings(MOUNT, [error(-20, 20, 2)]) == {}


def test_found_evidence_stands_until_the_disk_is_proven_or_another_restart():
    kept = Stale("paused 2 times …", SERVER.requested, at(130))
    assert judge(MOUNT, [], IO, at(3600), kept=kept) == kept  # still paused
    assert judge(MOUNT, [], "", at(130) + PROVEN - timedelta(seconds=1), kept=kept) == kept
    assert judge(MOUNT, [], "", at(130) + PROVEN, kept=kept) is None  # ran 10 minutes since: its mount works
    newer = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=ago(minutes=1), served=NOW,
                                                           pod="share-manager-pvc-d", node="node-a"),))
    assert judge(newer, [], IO, NOW, kept=kept) is None  # another restart since: judged afresh


def test_a_full_disk_is_said_in_kubevirts_words_and_never_a_stale_mount():
    errors = [error(-20, 50, 4), error(55, 70, 3, no_space=True)]
    assert full(errors, True) == (
        "paused because its disk rootdisk is full (KubeVirt: not enough space on volume rootdisk, at "
        "2026-11-20T11:31:10Z): a migration cannot free space; free space in the guest or grow the volume")
    assert full(errors, False) is None and full(errors[:1], True) is None


def test_a_share_manager_that_does_not_serve_is_waited_for_then_said():
    """Longhorn stamps its request on every reconcile while the share-manager is down: the wait counts from the
    VM's first I/O error on that disk."""
    down = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=NOW, pod="share-manager-pvc-d"),))
    errors = [DiskError(disk="rootdisk", volume="pvc-d", no_space=False, count=3, first=ago(minutes=2), last=NOW)]
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
    assert judge(mount, [error(45, 48, 2)], "", at(60)) is None  # within 30 s of +20
    assert isinstance(judge(mount, [error(55, 58, 2)], "", at(60)), Stale)
