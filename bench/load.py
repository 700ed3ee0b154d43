"""Load generators: wrk (Debian's `wrk` package) or, without it, an asyncio client.

Both keep `connections` keep-alive connections busy for `duration` seconds (closed loop)
and report throughput and latency percentiles. The asyncio client runs as its own process
(`python -m bench.load ...`) so that it can be pinned to a core of its own, like wrk.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

LUA = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
"""
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclasses.dataclass
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_us: float = 0.0  # CPU time of the server per request (set by the caller)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def pinned(cpu: int | None):
    return (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None


def run_wrk(url: str, body: Path, connections: int, duration: float, work: Path, cpu: int | None) -> Result:
    script = work / "post.lua"
    script.write_text(LUA)
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", "-s", str(script), url]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env={"BENCH_BODY": str(body)},
                         preexec_fn=pinned(cpu)).stdout
    return parse_wrk(out)


def parse_wrk(out: str) -> Result:
    def latency(percent: str) -> float:
        match = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
        if not match:
            raise RuntimeError(f"no {percent}% latency in wrk output:\n{out}")
        return float(match.group(1)) * UNITS[match.group(2)]

    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if not done:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = int(bad.group(1)) if bad else 0
    errors += sum(int(n) for n in socket_errors.groups()) if socket_errors else 0
    return Result(int(done.group(1)), float(done.group(2)) * UNITS[done.group(3)] / 1e3,
                  latency("50"), latency("99"), errors)


def run_asyncio_client(url: str, body: Path, connections: int, duration: float, cafile: Path, cpu: int | None) -> Result:
    command = [sys.executable, "-m", "bench.load", "--url", url, "--body", str(body), "--cafile", str(cafile),
               "--connections", str(connections), "--duration", str(duration)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent,
                         preexec_fn=pinned(cpu)).stdout
    return Result(**json.loads(out))


async def client(url: str, body: bytes, connections: int, duration: float, cafile: str) -> Result:
    import aiohttp

    context = ssl.create_default_context(cafile=cafile)
    latencies: list[float] = []
    errors = 0
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=connections)) as session:
        end = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal errors
            while (started := time.perf_counter()) < end:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        seconds = time.perf_counter() - began
    latencies.sort()

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3 if latencies else 0.0

    return Result(len(latencies), seconds, percentile(0.50), percentile(0.99), errors)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description="asyncio HTTPS load client")
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True)
    parser.add_argument("--cafile", required=True)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    from webhook.process.loop import new_event_loop

    body = Path(args.body).read_bytes()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        result = runner.run(client(args.url, body, args.connections, args.duration, args.cafile))
    print(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main()
