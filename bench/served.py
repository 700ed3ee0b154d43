"""serve's own figures of a drain storm's batch, from its admission log lines (`latency_ms`,
`duration_ms`, `loop_lag_ms`) and its CPU, beside what the sender or the apiserver's client measures; and
when its caches are ready for a storm (`caches_synced`)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any


def cpu_seconds(pid: int) -> float:
    """The CPU (user and system) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settled(pid: int, quiet: float = 0.3, most: float = 5.0) -> None:
    """Until process `pid` has used at most one clock tick of CPU in `quiet` seconds (serve's Events
    of a batch, which wait for its reviews and a pause after them, posted), at most `most` seconds:
    each batch then meets a serve at rest, as a drain's storm does, and no batch's Events are
    counted in the next one's."""
    tick = 1 / os.sysconf("SC_CLK_TCK")
    until = time.monotonic() + most
    while time.monotonic() < until:
        before = cpu_seconds(pid)
        await asyncio.sleep(quiet)
        if cpu_seconds(pid) - before <= tick:
            return


def admissions_logged(log: Path, start: int) -> list[dict[str, Any]]:
    """serve's admission lines written since byte `start` of its log (once every answer is in,
    its line is written: the line goes before the answer)."""
    with log.open("rb") as stream:
        stream.seek(start)
        found = []
        for line in stream:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") == "admission":
                    found.append(entry)
        return found


def served_median(batches_served: list[list[dict[str, Any]]]) -> dict[str, float]:
    """`server_figures` of each batch's lines, each figure's median over the batches (as the sender's)."""
    each = [server_figures(lines) for lines in batches_served]
    return {key: statistics.median(figures[key] for figures in each) for key in each[0]}


def server_figures(lines: list[dict[str, Any]]) -> dict[str, float]:
    """From serve's own log lines of a batch: each review's time in serve from its handler's
    start to its answer (`duration_ms`: waiting for room to read it, reading it, deciding), from
    its connection's accept to its answer (`latency_ms`: the handshake, the request's arrival and
    any wait for the loop too), and the longest the event loop kept a request waiting before its
    handler (`loop_lag_ms`, the longest of the second before each answer)."""
    # By the rule that took each (the apiserver's reviews carry uids of its own, not the bench's).
    vm_lines = [line for line in lines if line.get("rule") == "vm"]
    sm_lines = [line for line in lines if line.get("rule") == "share-manager"]
    vm = sorted(float(line["duration_ms"]) for line in vm_lines)
    queued = sorted(float(line["duration_ms"]) + float(line.get("loop_lag_ms") or 0.0) for line in vm_lines)
    share_managers = sorted(float(line["duration_ms"]) for line in sm_lines)
    lag = [float(line["loop_lag_ms"]) for line in lines if line.get("loop_lag_ms") is not None]

    def latency(found: list[dict[str, Any]]) -> list[float]:
        return sorted(float(line["latency_ms"]) for line in found if "latency_ms" in line)

    def p99(values: list[float]) -> float:
        return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))] if values else float("nan")

    cpu = [float(line["cpu_ms"]) for line in lines if "cpu_ms" in line]
    apiserver = [float(line["apiserver_cpu_ms"]) for line in lines if "apiserver_cpu_ms" in line]
    # Its CPU from the burst's first review sent to its last answer, and that over the burst's time:
    # the share of its core `serve` had while the others' work (the sender's, the apiserver's) shared it.
    burst_cpu = sum(float(line["burst_cpu_ms"]) for line in lines if "burst_cpu_ms" in line)
    burst = sum(float(line["burst_ms"]) for line in lines if "burst_ms" in line)
    # The sender's own CPU over that time: one Python process's TLS handshakes, a core of the machine.
    sender = sum(float(line["sender_cpu_ms"]) for line in lines if "sender_cpu_ms" in line)
    apiserver_burst = sum(float(line["apiserver_burst_cpu_ms"]) for line in lines if "apiserver_burst_cpu_ms" in line)
    return {"cpu_ms": sum(cpu) if cpu else float("nan"),
            "burst_cpu_ms": burst_cpu if burst else float("nan"),
            "burst_core_share": burst_cpu / burst if burst else float("nan"),
            "sender_cpu_ms": sender if burst else float("nan"),
            "apiserver_cpu_ms": sum(apiserver) if apiserver else float("nan"),
            "apiserver_burst_cpu_ms": apiserver_burst if apiserver else float("nan"),
            "vm_p99_ms": p99(vm), "vm_max_ms": vm[-1] if vm else float("nan"), "vm_queued_p99_ms": p99(queued),
            "share_manager_p99_ms": p99(share_managers), "loop_lag_max_ms": max(lag, default=float("nan")),
            "vm_latency_p99_ms": p99(latency(vm_lines)), "share_manager_latency_p99_ms": p99(latency(sm_lines)),
            # The share-managers answered with what was prepared while their evicted pods terminated.
            "share_managers_prepared": sum("(worked out " in str(line.get("reason")) for line in sm_lines)}


def caches_synced(log: Path, timeout: float = 600.0, frozen_within: float = 5.0) -> None:
    """Until the VMI cache of `serve` has synced too (its log says so; readiness waits for the
    others) and been frozen (admission/heap.py: within `frozen_within` seconds of it), and a second
    more: a drain comes to a replica that has long been running, not to one still listing VMIs, and
    each admission's `loop_lag_ms` is the longest lag of the second before it."""
    deadline, frozen_by = time.monotonic() + timeout, None
    while True:
        with log.open("rb") as stream:
            said = [json.loads(line) for line in stream if b'"cache synced"' in line or b'"cache frozen"' in line]
        vmis = [line["msg"] for line in said if "virtualmachineinstances" in str(line.get("resource"))]
        if "cache synced" in vmis:
            frozen_by = frozen_by or time.monotonic() + frozen_within
            if "cache frozen" in vmis or time.monotonic() > frozen_by:
                time.sleep(1.0)
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"serve's VMI cache did not sync within {timeout:.0f} s")
        time.sleep(0.5)
