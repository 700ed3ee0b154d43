"""`serve` runs the keeper in a process of its own: shown as its own, started again when it
dies, gone when `serve` is."""
import asyncio
import os
import signal
from pathlib import Path

from conftest import api_host
from kube import Serving, kubeconfig_for, metrics_with, sample, scrape
from kubevirt_api import apart_vm, eventually, three_nodes

from webhook.kinds import LEASE

NS = "kubevirt-colocate"


def keeper_pids(serving):
    return [line["pid"] for line in serving.lines if line["msg"] == "keeper process started"]


def gone(pid):
    """Exited: no such process, or one only waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def parent_of(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


async def start(cluster, kmock, tls_files, tmp_path, *flags):
    cluster.seed(three_nodes() + apart_vm())
    return await Serving.start(
        tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--drain-delay", "0",
        "--keep", "report", "--lease-namespace", NS, *flags, env={"POD_NAME": "replica-a"})


async def test_the_keeper_runs_apart_from_admission_and_serve_shows_what_it_keeps(cluster, kmock, tls_files, tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        text = await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        assert pid != serving.process.pid and parent_of(pid) == serving.process.pid
        assert sample(text, "colocate_keeper_leader") == 1
        # The keeper's own caches, beside serve's: one family each, the keeper's labelled.
        assert sample(text, "colocate_cache_healthy", cache="virtualmachineinstances", process="keeper") == 1
        assert sample(text, "colocate_cache_healthy", cache="pods", process="keeper") == 1
        assert text.count("# TYPE colocate_cache_healthy gauge") == 1
        ours = [line for line in text.splitlines()
                if line.startswith("colocate_cache_healthy{") and 'process="keeper"' not in line]
        assert ours and not [line for line in ours if "virtualmachineinstances" in line]  # serve watches no VMIs
    finally:
        assert await serving.stop() == 0
    assert gone(pid)


async def test_a_keeper_process_that_dies_is_said_and_started_again(cluster, kmock, tls_files, tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [first] = keeper_pids(serving)
        os.kill(first, signal.SIGKILL)

        async def said():
            status, text = await scrape(f"{serving.ops}/readyz")
            return (status, text) if "keeper:" in text else None

        status, text = await eventually(said, timeout=5)
        assert status == 200  # admission is not the keeper: still ready
        assert "keeper: its process exited with code -9; started again in 5s" in text
        text = await eventually(lambda: metrics_with(serving, "colocate_keeper_leader"), timeout=5)
        assert sample(text, "colocate_keeper_leader") == 0 and sample(text, "colocate_vms", state="apart") is None

        assert await eventually(lambda: len(keeper_pids(serving)) == 2, timeout=10)
        text = await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=30)
        assert sample(text, "colocate_keeper_leader") == 1  # the lease it held taken again by the new one
        assert await scrape(f"{serving.ops}/readyz") == (200, "ok\n")
    finally:
        assert await serving.stop() == 0
    assert "Traceback" not in str(serving.lines)
    [ended] = [line for line in serving.lines if line["msg"] == "keeper process ended"]
    assert (ended["pid"], ended["exitcode"], ended["level"]) == (first, -9, "warning")


async def test_the_keeper_process_ends_with_serve_and_hands_the_lease_over(cluster, kmock, tls_files, tmp_path):
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        assert kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"] == "replica-a"
        serving.process.kill()  # no shutdown at all: the pipe to the keeper closes with the process
        await serving.process.wait()
        assert await eventually(lambda: gone(pid), timeout=10)
    finally:
        await serving.stop()
    assert kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"] == ""
    assert "lease released" in [line["msg"] for line in serving.lines]


async def test_a_keeper_process_gone_silent_is_said(cluster, kmock, tls_files, tmp_path):
    """Stopped (as by a hang): said in /readyz after 10 s without a report, and no more once it reports again."""
    serving = await start(cluster, kmock, tls_files, tmp_path)
    try:
        await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=15)
        [pid] = keeper_pids(serving)
        os.kill(pid, signal.SIGSTOP)
        try:
            async def said():
                status, text = await scrape(f"{serving.ops}/readyz")
                return (status, text) if "keeper: its process has not reported for" in text else None

            status, _ = await eventually(said, timeout=15)
            assert status == 200
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await eventually(lambda: readyz_ok(serving), timeout=5)
        assert keeper_pids(serving) == [pid]  # reported, not started again
    finally:
        assert await serving.stop() == 0


async def readyz_ok(serving):
    return await scrape(f"{serving.ops}/readyz") == (200, "ok\n")
