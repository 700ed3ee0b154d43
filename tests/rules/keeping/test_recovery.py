"""Whether a VM is on a stale NFS mount: its pod older than a remount request of Longhorn's is not
enough (Longhorn stamps one on every reconcile while a share-manager is down, wherever it comes back);
KubeVirt's own I/O-error retry must have failed once the new share-manager served. The retry's schedule
is virt-handler's (`kubefake.io_error_retry` plays the same source, apart from this reading of it)."""
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago

from kubefake.io_error_retry import IoErrorRetry
from webhook.rules.keeping.recovery import judge, Mount, Pauses, retries, Server, Stale

SERVED = ago(minutes=3)  # the new share-manager serves (11:57:00)
SERVER = Server(volume="pvc-d", requested=SERVED - timedelta(seconds=8), served=SERVED, pod="share-manager-pvc-d",
                node="node-a")
MOUNT = Mount(pod_started=ago(days=3), servers=(SERVER,))
LONG = NOW - timedelta(days=1)  # the keeper has watched the VMI since


def seconds(n):
    return SERVED + timedelta(seconds=n)


def test_virt_handlers_retries_of_a_mount_that_fails_at_once():
    """Resumed at once, then 10 s later, doubling to 3 min: the schedule the keeper's judgement goes by is
    the one kubefake plays (both from `pkg/virt-handler/vm.go` and `retry_manager.go`)."""
    start = ago(hours=1)
    played = [resume for _, resume in IoErrorRetry().fast_failing(start, 9)]
    ours = retries(start)
    assert [next(ours) for _ in range(9)] == played
    assert [(at - start).total_seconds() for at in played] == [0, 10, 30, 70, 150, 310, 490, 670, 850]


@pytest.mark.parametrize("mount, pauses, paused_since, now", [
    (MOUNT, Pauses(watched_since=LONG), None, seconds(600)),  # its NFS client recovered: it never paused
    (MOUNT, Pauses(at=(seconds(-20),), watched_since=LONG), None, seconds(600)),  # a retry after it served resumed it
    (MOUNT, Pauses(at=(seconds(10),), watched_since=LONG), None, seconds(600)),  # paused while the client reconnected
    (Mount(pod_started=SERVED, servers=(SERVER,)), Pauses(at=(seconds(60),), watched_since=LONG), seconds(60),
     seconds(600)),  # its pod started after the request: a fresh mount, a pause of another cause
    (Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", served=SERVED),)), Pauses(at=(seconds(60),)),
     seconds(60), seconds(600)),  # no remount request at all
], ids=["never-paused", "first-retry-succeeded", "paused-while-reconnecting", "pod-after-request", "no-request"])
def test_nothing_says_a_mount_is_stale(mount, pauses, paused_since, now):
    assert judge(mount, pauses, paused_since, now) is None


def test_a_pause_well_after_the_new_server_serves_is_a_stale_mount():
    """A slowly failing mount: KubeVirt resumed the VM and it paused again on an I/O error 45 s after the
    server served, and shows Running again since. The pause the watch saw is the evidence."""
    judged = judge(MOUNT, Pauses(at=(seconds(-20), seconds(45)), watched_since=LONG), None, seconds(100))
    assert judged == Stale(
        "paused on an I/O error at 2026-11-20T11:57:45Z, 45s after share-manager share-manager-pvc-d served again on "
        "node-a at 2026-11-20T11:57:00Z: KubeVirt's retry did not bring it back", SERVER.requested)


def test_a_vm_paused_since_before_is_stale_once_the_retry_after_the_server_served_failed():
    """A fast-failing mount that keeps its first condition: paused at -20 s, virt-handler retries at -20, -10,
    +10 (within the reconnect margin) and +50 s; still paused 10 s after that, it is stale."""
    pauses = Pauses(at=(seconds(-20),), watched_since=LONG)
    assert judge(MOUNT, pauses, seconds(-20), seconds(59)) == (
        "paused on an I/O error since 2026-11-20T11:56:40Z: share-manager share-manager-pvc-d served again on node-a "
        "at 2026-11-20T11:57:00Z; KubeVirt retries by 2026-11-20T11:57:50Z, and the keeper recovers it if that retry "
        "fails")
    judged = judge(MOUNT, pauses, seconds(-20), seconds(60))
    assert isinstance(judged, Stale) and "still paused after KubeVirt's retry due by 2026-11-20T11:57:50Z" in judged.words


def test_each_re_stamp_seen_waits_for_the_retry_after_the_margin():
    """Each pause seen: the re-stamps at -20, -10 and +10 s are one failure; the one at +10 s, within the
    reconnect margin, is no evidence. The retry at +50 s fails and is re-stamped: that is."""
    pauses = Pauses(at=(seconds(-20), seconds(-10), seconds(10)), watched_since=LONG)
    assert isinstance(judge(MOUNT, pauses, seconds(10), seconds(49)), str)
    restamped = Pauses(at=(*pauses.at, seconds(50)), watched_since=LONG)
    assert isinstance(judge(MOUNT, restamped, seconds(50), seconds(51)), Stale)


def test_a_keeper_that_may_have_missed_the_first_pause_waits_a_longest_retry():
    """Watching the VMI for less than a longest wait, the first pause it saw may be a re-stamp: the retry
    after the server served is surely made within 3 minutes of the reconnect margin."""
    pauses = Pauses(at=(seconds(-20),), watched_since=seconds(-30))
    assert isinstance(judge(MOUNT, pauses, seconds(-20), seconds(200)), str)
    assert isinstance(judge(MOUNT, pauses, seconds(-20), seconds(220)), Stale)


def test_a_share_manager_that_does_not_serve_yet_proves_nothing():
    down = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=ago(minutes=1),
                                                          pod="share-manager-pvc-d"),))
    assert judge(down, Pauses(at=(ago(minutes=2),), watched_since=LONG), ago(minutes=2), NOW) == (
        "share-manager share-manager-pvc-d does not serve yet")
    assert judge(down, Pauses(at=(ago(minutes=2),), watched_since=LONG), None, NOW) is None


def test_a_request_stamped_after_the_server_started_counts_from_the_request():
    """Longhorn stamps the request on every reconcile while the share-manager is down: the last stamp may
    follow the new pod's start. The margin counts from the later of the two."""
    late = Server(volume="pvc-d", requested=seconds(20), served=SERVED, pod="share-manager-pvc-d", node="node-a")
    mount = Mount(pod_started=ago(days=3), servers=(late,))
    assert judge(mount, Pauses(at=(seconds(45),), watched_since=LONG), None, NOW) is None  # within 30 s of +20
    assert isinstance(judge(mount, Pauses(at=(seconds(55),), watched_since=LONG), None, NOW), Stale)


def test_what_the_keeper_found_stands_while_its_request_is_the_latest():
    """The keeper's record keeps a pause its watch saw: the same stale mount while no newer request came."""
    kept = Stale("paused on an I/O error at …", SERVER.requested)
    assert judge(MOUNT, Pauses(), None, NOW, kept) == kept
    newer = Mount(pod_started=ago(days=3), servers=(Server(volume="pvc-d", requested=ago(minutes=1), served=NOW,
                                                           pod="share-manager-pvc-d", node="node-a"),))
    assert judge(newer, Pauses(), None, NOW, kept) is None  # another restart since: judged afresh
