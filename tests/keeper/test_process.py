"""`serve` runs the keeper in a process of its own while it leads: shown as its own, stopped
with the term, a new one for the next term, gone when `serve` is; none on a follower."""
import asyncio
import datetime
import os
import pickle
import signal
import struct
import time
from pathlib import Path

import pytest
from tests.support.stores import api_host
from tests.support.kube import Serving, kubeconfig_for, metrics_with, sample, scrape
from tests.support.kubevirt_api import apart_vm, eventually, put, three_nodes

from webhook.keeper.pipe import frame
from webhook.kinds import LEASE

NS = "kubevirt-colocate"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kubevirt-colocate-keeper"


def lease_reads(kmock):
    return sum(1 for request in kmock if request.method == "GET" and request.url.path == LEASE_PATH)


async def tries(kmock, count):
    """Until serve has read the Lease `count` times more (a retry period each, 2 s by default):
    what it does over a span is read off its own tries, not off a clock."""
    start = lease_reads(kmock)
    await eventually(lambda: lease_reads(kmock) >= start + count, timeout=4 * count + 2)


def keeper_pids(serving):
    return [line["pid"] for line in serving.lines if line["msg"] == "keeper process started"]


def gone(pid):
    """Exited: no such process, or one only waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def children(pid):
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def niceness(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def ignores(pid, signum):
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(mask & (1 << (signum - 1)))


def parent_of(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


async def start(cluster, kmock, tls_files, tmp_path, *flags, lease=None):
    cluster.seed(three_nodes() + apart_vm())
    if lease is not None:
        put(kmock, LEASE, lease)
    return await Serving.start(
        tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--drain-delay", "0",
        "--keep", "report", "--lease-namespace", NS, *flags, env={"POD_NAME": "replica-a"})


async def test_the_keeper_runs_apart_from_admission_and_serve_shows_what_it_keeps(cluster, kmock, tls_files, tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        text = await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        assert pid != serving.process.pid and parent_of(pid) == serving.process.pid
        assert niceness(pid) == niceness(serving.process.pid) + 10  # admission first on a shared core
        assert ignores(pid, signal.SIGINT)  # a terminal's Ctrl-C is serve's to pass on
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"  # its orders on a pipe nothing it starts inherits
        assert sample(text, "colocate_keeper_leader") == 1
        # The keeper's own caches, beside serve's: one family each, the keeper's labelled.
        assert sample(text, "colocate_cache_healthy", cache="virtualmachineinstances", process="keeper") == 1
        assert sample(text, "colocate_cache_healthy", cache="pods", process="keeper") == 1
        assert text.count("# TYPE colocate_cache_healthy gauge") == 1
        ours = [line for line in text.splitlines()
                if line.startswith("colocate_cache_healthy{") and 'process="keeper"' not in line]
        assert ours and not [line for line in ours if "migrations" in line]  # serve watches VMIs, no migrations
    finally:
        assert await serving.stop() == 0
    assert gone(pid)
    decided = [line for line in serving.lines if line["msg"] == "keeper decision"]
    assert decided and {line.get("process") for line in decided} == {"keeper"}  # written by the keeper's process
    assert "process" not in next(line for line in serving.lines if line["msg"] == "serving")


async def readyz_says(serving, words):
    status, text = await scrape(f"{serving.ops}/readyz")
    return (status, text) if words in text else None


async def test_a_keeper_process_that_dies_hands_the_lease_over_and_the_replica_holds_off(cluster, kmock, tls_files,
                                                                                        tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [first] = keeper_pids(serving)
        os.kill(first, signal.SIGKILL)

        status, text = await eventually(lambda: readyz_says(serving, "keeper:"), timeout=5)
        assert status == 200  # admission is not the keeper: still ready
        assert text == "ok, degraded: keeper: its process ended (exit code -9); campaigning again in 5s\n"
        assert await eventually(lambda: holder(kmock) == "", timeout=5)  # handed over: another may lead meanwhile
        assert sample((await scrape(f"{serving.ops}/metrics"))[1], "colocate_keeper_leader") == 0

        # No other replica took it: this one leads again after 5 s, with a new keeper process.
        assert await eventually(lambda: len(keeper_pids(serving)) == 2, timeout=10)
        text = await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=30)
        assert sample(text, "colocate_keeper_leader") == 1 and holder(kmock) == "replica-a"
        assert await scrape(f"{serving.ops}/readyz") == (200, "ok\n")

        os.kill(keeper_pids(serving)[1], signal.SIGKILL)  # failing again soon after: twice the pause
        status, text = await eventually(lambda: readyz_says(serving, "keeper:"), timeout=5)
        assert text == "ok, degraded: keeper: its process ended (exit code -9); campaigning again in 10s\n"
    finally:
        assert await serving.stop() == 0
    assert "Traceback" not in str(serving.lines)
    ended = [line for line in serving.lines if line["msg"] == "keeper process ended"]
    assert [(line["pid"], line["exitcode"], line["level"]) for line in ended][0] == (first, -9, "warning")
    said = [(line["msg"], line.get("why")) for line in serving.lines]
    assert said.index(("keeper process ended", "ended")) < said.index(
        ("keeper stopped leading", "its process ended (exit code -9)")) < said.index(("lease released", None))


def holder(kmock):
    return kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"]


async def test_the_keeper_process_ends_with_serve(cluster, kmock, tls_files, tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        serving.process.kill()  # no shutdown at all: the keeper's stdin closes with the process
        await serving.process.wait()
        assert await eventually(lambda: gone(pid), timeout=10)
    finally:
        await serving.stop()


async def test_a_follower_runs_no_keeper_process(cluster, kmock, tls_files, tmp_path):
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kubevirt-colocate-keeper", "namespace": NS},
            "spec": {"holderIdentity": "replica-b", "leaseDurationSeconds": 60, "acquireTime": now, "renewTime": now}}
    serving = await start(cluster, kmock, tls_files, tmp_path, lease=held)
    try:
        text = await eventually(lambda: metrics_with(serving, "colocate_keeper_leader"), timeout=10)
        await tries(kmock, 2)  # it found the Lease held, and tried again
        text = (await scrape(f"{serving.ops}/metrics"))[1]
        assert sample(text, "colocate_keeper_leader") == 0 and sample(text, "colocate_vms", state="apart") is None
        assert keeper_pids(serving) == [] and children(serving.process.pid) == []
        assert await scrape(f"{serving.ops}/readyz") == (200, "ok\n")
    finally:
        assert await serving.stop() == 0


async def test_a_keeper_process_gone_silent_is_said_then_ended(cluster, kmock, tls_files, tmp_path):
    """Stopped (as by a hang): said in /readyz after 10 s without a report, ended after 30 s."""
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        os.kill(pid, signal.SIGSTOP)
        status, _ = await eventually(lambda: readyz_says(serving, "keeper: its process has not reported for"),
                                     timeout=15)
        assert status == 200
        status, text = await eventually(lambda: readyz_says(serving, "was ended"), timeout=30)
        assert text == ("ok, degraded: keeper: its process said nothing for 30s and was ended (exit code -9); "
                        "campaigning again in 5s\n")
        assert gone(pid)
    finally:
        assert await serving.stop() == 0


async def test_losing_the_lease_stops_the_keeper_process(cluster, kmock, tls_files, tmp_path):
    """Another holder shows up: serve's term ends at its next read of the Lease (2 s here), the
    keeper's process is told to stop and ends, and none starts while the other holds the Lease.
    (That a child told to stop acts no more: tests/keeper/test_child.py.)"""
    cluster.seed(three_nodes() + apart_vm(migratable=False))
    serving = await Serving.start(
        tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--drain-delay", "0",
        "--keep", "migrate", "--keep-after", "0", "--lease-namespace", NS, env={"POD_NAME": "replica-a"})
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms_held", hold="not live-migratable"), timeout=15)
        [pid] = keeper_pids(serving)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await cluster.patch(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kubevirt-colocate-keeper",
                            {"spec": {"holderIdentity": "replica-b", "renewTime": now, "acquireTime": now}})
        # The next read of the Lease (2 s), then the child's own stop: its caches closed, at nice 10.
        assert await eventually(lambda: gone(pid), timeout=10)
        await tries(kmock, 2)  # and again: replica-b still holds it
        assert keeper_pids(serving) == [pid] and children(serving.process.pid) == []
        assert cluster.migrations(ours=False) == []
    finally:
        assert await serving.stop() == 0
    said = [(line["msg"], line.get("why")) for line in serving.lines]
    assert ("keeper stopped leading", "the lease is held by replica-b") in said


def test_a_keeper_request_outlasting_the_renew_deadline_is_refused():
    """A migration is created only if its request ends while the Lease still lets the leader act."""
    from webhook.config import Settings
    from webhook.keeper.keeper import KeeperTiming
    from webhook.keeper.lease import LeaseTiming
    from webhook.keeper.pipe import Assignment
    from webhook.keeper.process import KeeperProcess

    assignment = Assignment(Settings(keep="migrate"), timing=KeeperTiming(request_timeout=10.0))
    with pytest.raises(ValueError, match="shorter than the lease's renew deadline"):
        KeeperProcess(None, assignment, namespace=NS, identity="replica-a", lease_timing=LeaseTiming(renew_deadline=10.0))


class Campaign:
    """What the keeper process asks of the Lease's campaign (lease.Elector), recorded."""

    error, leading = "", False

    def __init__(self, until=None):
        self.until, self.pauses, self.released = until, [], 0

    def acting_until(self):
        return self.until

    def hold_off(self, seconds):
        self.pauses.append(seconds)

    def step_down(self, why):
        pass

    async def release(self):
        self.released += 1


def keeper_process(campaign):
    from webhook.config import Settings
    from webhook.keeper.pipe import Assignment
    from webhook.keeper.process import KeeperProcess

    process = KeeperProcess(None, Assignment(Settings(keep="migrate")), namespace=NS, identity="replica-a")
    process.elector = campaign
    return process


async def test_failures_in_a_row_double_the_pause_and_ten_quiet_minutes_start_it_afresh():
    campaign = Campaign()
    process = keeper_process(campaign)
    for _ in range(8):
        await process._failed("its process ended (exit code -9)")
    assert campaign.pauses == [5, 10, 20, 40, 80, 160, 300, 300] and campaign.released == 8
    process._ended_at -= 601  # the last failure ten minutes ago, terms without one since
    await process._failed("its process ended (exit code -9)")
    assert campaign.pauses[-1] == 5
    assert process.degraded() == ["keeper: its process ended (exit code -9); campaigning again in 5s"]


def frame_of(data):
    return struct.pack(">I", len(data)) + data


def stream(data):
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    return reader


@pytest.mark.parametrize("data, said", [
    (frame(12.5), "sent what is no report (a float) and was ended"),
    (struct.pack(">I", 3) + b"abc", "sent what is no report (UnpicklingError: "),
    # A pickle of a name this version of the package does not have (serve upgraded under it).
    (frame_of(b"cwebhook.keeper.pipe\nGoneSince\n."), "sent what is no report (AttributeError: "),
    (b"", "ended"),
])
async def test_a_child_that_sends_what_is_no_report_is_ended(data, said):
    process = keeper_process(Campaign())
    reader = stream(data)
    reader.feed_eof()
    assert (await asyncio.wait_for(process._follow(reader), 5)).startswith(said)


async def test_the_child_is_sent_the_leases_deadline_on_the_clock_every_process_reads():
    """The deadline is the Elector's (its loop's time), sent as CLOCK_MONOTONIC; 0 once not leading."""
    from webhook.keeper.process import FEED_EVERY

    class Pipe:
        def __init__(self):
            self.sent = []

        def is_closing(self):
            return False

        def write(self, data):
            self.sent.append((time.monotonic(), pickle.loads(data[4:])))

        async def drain(self):
            pass

    loop = asyncio.get_running_loop()
    campaign = Campaign(until=loop.time() + 7.0)
    pipe = Pipe()
    feeding = asyncio.create_task(keeper_process(campaign)._feed(pipe))
    await eventually(lambda: pipe.sent)
    campaign.until = None  # the term ended
    await eventually(lambda: pipe.sent[-1][1] == 0.0, timeout=FEED_EVERY * 3 + 1)
    feeding.cancel()
    (sent_at, first), *_, (_, last) = pipe.sent
    assert abs(first - (sent_at + 7.0)) < 0.05
    assert last == 0.0
