"""python -m bench.beside: a normal review beside the largest hostile one, on `serve` as deployed.

A tenant can shape its VM's pod to make the rules' work grow; the largest such review the port
takes is a pod of 20,000 claims (its AdmissionReview about 1.5 MiB). One long review must not hold
the event loop for the others: a normal VM pod's review sent at the same moment should be
answered about as soon as when alone. `python -m webhook serve --state` (the fixture cluster) on
one core, two clients on another (each a process of its own, as the apiserver's calls are apart)
send, after two rounds of warm-up, each round: the normal review alone (three times, the last
timed), then the hostile review and, at once, the normal one. Reported: the
normal review alone and beside the hostile one, and the hostile one itself (median, p90 and worst
of the rounds, in ms). The target: the normal review beside the hostile one within 100 ms at p90.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kubefake.objects import fixture_cluster, review, vm_pod

from .__main__ import ROOT, cores, free_port, process, wait_for

TARGET_MS = 100.0


def with_claims(n: int) -> dict[str, Any]:
    pod = vm_pod()
    pod["spec"]["volumes"] += [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i}"}} for i in range(n)]
    return pod


async def answered(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    started = time.monotonic()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 200, response.status
        answer = await response.json()
    assert answer["response"]["allowed"] is True
    return (time.monotonic() - started) * 1000


async def hostile_sender(url: str, ca: Path, claims: int) -> None:
    """The hostile review's own client, in a process of its own (as the apiserver's calls are
    apart): a line on stdin sends it, its time in ms goes to stdout."""
    body = json.dumps(review(with_claims(claims))).encode()
    context = ssl.create_default_context(cafile=str(ca))
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1)) as session:
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(round(await answered(session, url, body), 3), flush=True)


async def rounds(url: str, ca: Path, claims: int, count: int, cpu: int | None) -> dict[str, list[float]]:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    sender = subprocess.Popen([sys.executable, "-m", "bench.beside", "--sender", url, str(ca), str(claims)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    normal = json.dumps(review(vm_pod())).encode()
    context = ssl.create_default_context(cafile=str(ca))
    found: dict[str, list[float]] = {"alone": [], "beside": [], "hostile": []}
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1)) as session:
            for counted in [False] * 2 + [True] * count:  # two rounds of warm-up: a cold server
                alone = [await answered(session, url, normal) for _ in range(3)][-1]
                sender.stdin.write("go\n")
                sender.stdin.flush()
                beside = await answered(session, url, normal)
                hostile = float(await loop.run_in_executor(None, sender.stdout.readline))
                if counted:
                    found["alone"].append(alone)
                    found["beside"].append(beside)
                    found["hostile"].append(hostile)
    finally:
        sender.stdin.close()
        sender.wait(timeout=30)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.beside", description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=20_000, help="claims of the hostile pod (default 20000)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--sender", nargs=3, metavar=("URL", "CA", "CLAIMS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sender:
        asyncio.run(hostile_sender(args.sender[0], Path(args.sender[1]), int(args.sender[2])))
        return 0
    from webhook.tools import certs

    server_cpu, client_cpu = cores()
    with tempfile.TemporaryDirectory(prefix="colocate-beside-") as tmp:
        work = Path(tmp)
        certs.write(certs.generate(["localhost", "127.0.0.1"], days=1), work)
        (work / "state.yaml").write_text(yaml.safe_dump_all(fixture_cluster()))
        port, ops = free_port(), free_port()
        command = [sys.executable, "-m", "webhook", "serve", "--state", str(work / "state.yaml"), "--host",
                   "127.0.0.1", "--port", str(port), "--metrics-host", "127.0.0.1", "--metrics-port", str(ops),
                   "--drain-delay", "0", "--tls-cert-file", str(work / "tls.crt"), "--tls-key-file",
                   str(work / "tls.key"), "--log-level", "warning"]
        with process(command, server_cpu, stderr=subprocess.DEVNULL):
            wait_for(f"http://127.0.0.1:{ops}/readyz", work, timeout=60)
            found = asyncio.run(rounds(f"https://localhost:{port}/mutate?timeout=10s", work / "ca.crt", args.claims,
                                       args.rounds, client_cpu))
    figures = {name: {"median_ms": round(statistics.median(values), 1),
                      "p90_ms": round(statistics.quantiles(values, n=10)[-1], 1) if len(values) > 1 else values[0],
                      "max_ms": round(max(values), 1)} for name, values in found.items()}
    met = figures["beside"]["p90_ms"] <= TARGET_MS
    if args.json:
        print(json.dumps({"claims": args.claims, "rounds": args.rounds, **figures, "target_met": met}))
    else:
        print(f"a normal review beside a pod of {args.claims} claims, {args.rounds} rounds (median, p90, worst):")
        for name, words in (("alone", "normal review alone"), ("beside", "normal review beside the hostile one"),
                            ("hostile", "the hostile review")):
            shown = figures[name]
            print(f"  {words}: {shown['median_ms']} ms, {shown['p90_ms']} ms, {shown['max_ms']} ms")
        print(f"  target (beside within {TARGET_MS:g} ms at p90): {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
