"""python -m bench.passes: admission on the replica that leads the keeper, while its passes run.

`serve` runs the keeper in a process of its own (`webhook/keeper/process.py`), so that its passes
never hold up an admission on the leading replica. This measures what a VM start sees there:
kubefake's apiserver (a process of its own, `bench.emulator`) holds a large cluster (by default
20k PVCs and PVs, 10k ShareManagers, 20k pods, 20k running opted-in VMIs of which 1k run apart
from their storage, and the benchmark's two disks); a replica (a process of its own, the server
core) answers admissions over TLS from its caches as `serve` does (`server.make_webhook` on
`WatchedClusterStore`) and, with `--keep report` or `migrate`, runs the keeper as `serve` does
(`KeeperProcess`: the replica takes the Lease and starts the keeper's process, on the same
core, which makes its passes back to back, as the leader does when a pass takes longer than its
period); with `--keep off`
it only answers. The load is open: one review every 1/rate seconds whether or not the ones
before were answered (a VM start does not wait for another), each latency counted from when its
request was due, so a request held up by a pass counts the whole wait. The same replica with the
keeper off is measured first, then with the keeper leading; p50 and p99 of each are printed,
with the passes that ran during the load.
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

from . import emulator
from .__main__ import cores, free_port, kubeconfig_for, process, review_file

TARGETS = {"p99_ratio": 2.0}
TINY = {"pvcs": 300, "share_managers": 150, "pods": 300, "vmis": 300, "apart_every": 10, "duration": 2.0,
        "rate": 40.0}


# --------------------------------------------------------------------------- the replica


async def replica(args: argparse.Namespace) -> None:
    """Admissions over TLS and, unless --keep off, the keeper's process with passes back to back;
    "ready" on stdout once synced (and a first pass made), the passes as JSON when stdin closes."""
    from webhook import logs
    from webhook.admission import server
    from webhook.cluster.cache import WatchedClusterStore
    from webhook.config import Settings

    logs.setup("info")  # a JSON line per admission, as `serve` writes them
    settings = Settings(keep=args.keep)
    store = WatchedClusterStore.for_host(args.api, settings)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert_file, args.tls_key_file)
    runner = await server.start(server.make_webhook(store, settings), "127.0.0.1", args.port, context)
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    keeper = None if args.keep == "off" else keeper_process(args, settings)
    passes: dict[float, dict[str, float]] = {}
    try:
        store.start()
        await store.wait_synced()
        if keeper is not None:
            keeper.start()
            while not passes:
                await asyncio.sleep(0.1)
                seen(keeper, passes)
        await quiet()
        print("ready", flush=True)
        while not closed.done():
            await asyncio.wait([closed], timeout=0.2)
            if keeper is not None:
                seen(keeper, passes)
    finally:
        if keeper is not None:
            await keeper.stop()
        await runner.cleanup()
        await store.close()
    print(json.dumps(list(passes.values())), flush=True)


def keeper_process(args: argparse.Namespace, settings: Any) -> Any:
    """The keeper as `serve` runs it: a process of its own (on the replica's core, as it inherits
    it), leading at once, a pass 50 ms after the last one ended."""
    from webhook.cluster import client
    from webhook.keeper.keeper import KeeperTiming
    from webhook.keeper.pipe import Assignment
    from webhook.keeper.process import KeeperProcess

    kubeconfig = kubeconfig_for(args.api, Path(args.tls_cert_file).parent / "kubeconfig")
    return KeeperProcess(client.for_host(args.api), Assignment(settings, str(kubeconfig), events=False,
                                                               timing=KeeperTiming(period=0.05)),
                         namespace="kubevirt-colocate", identity="bench-replica")


def seen(keeper: Any, passes: dict[float, dict[str, float]]) -> None:
    """The keeper's last pass as its process last reported it (a pass takes seconds at scale)."""
    last = keeper.last.last_pass if keeper.last is not None else None
    if last is not None:
        passes[last.began] = {"began": last.began, "ended": last.ended, "cpu": last.cpu, "number": keeper.last.passes}


async def quiet() -> None:
    """Until the process has been all but idle for two seconds in a row: the watches' first
    events (every object again, as ADDED) handled, as on a replica that has been up a while."""
    calm = 0
    while calm < 2:
        cpu = time.process_time()
        await asyncio.sleep(1.0)
        calm = calm + 1 if time.process_time() - cpu < 0.05 else 0


# --------------------------------------------------------------------------- the load


async def paced(url: str, body: bytes, rate: float, duration: float, cafile: str, *, connections: int = 32,
                timeout: float = 30.0) -> dict[str, Any]:
    """An open load: a request due every 1/rate s over at most `connections` keep-alive
    connections (opened first); each latency from when its request was due, in ms. A request
    unanswered after `timeout` s counts as an error, with the time it waited."""
    import aiohttp

    context = ssl.create_default_context(cafile=cafile)
    latencies: list[float] = []
    errors = 0
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async def one(due: float) -> None:
            nonlocal errors
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    errors += response.status != 200
            except (aiohttp.ClientError, TimeoutError):
                errors += 1
            latencies.append((time.perf_counter() - due) * 1e3)

        await asyncio.gather(*(one(time.perf_counter()) for _ in range(connections)))  # the connections opened
        latencies.clear()
        errors = 0
        began = time.perf_counter()
        tasks = []
        for k in range(max(1, round(rate * duration))):
            due = began + k / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one(due)))
        await asyncio.gather(*tasks)
    latencies.sort()
    return {"requests": len(latencies), "errors": errors, "began": time.time() - (time.perf_counter() - began),
            "p50_ms": latencies[len(latencies) // 2], "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "max_ms": latencies[-1]}


# --------------------------------------------------------------------------- the run


def measure(args: argparse.Namespace, api: str, work: Path, keep: str) -> dict[str, Any]:
    """One replica with `keep`: synced (and a first pass made), then the load; what it saw."""
    server_cpu, load_cpu = cores()
    port = free_port()
    command = [sys.executable, "-m", "bench.passes", "--replica", "--api", api, "--port", str(port), "--keep", keep,
               "--tls-cert-file", str(work / "tls.crt"), "--tls-key-file", str(work / "tls.key")]
    with (work / f"replica-{keep}.log").open("w") as log, \
            process(command, server_cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True) as proc:
        began = time.monotonic()
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the replica with --keep {keep} did not start:\n{(work / f'replica-{keep}.log').read_text()[-3000:]}")
        ready = time.monotonic() - began
        url = f"https://127.0.0.1:{port}/mutate?timeout=10s"
        body = review_file(work, "review", emulator.BENCH_CLAIMS)
        if load_cpu is not None:
            os.sched_setaffinity(0, {load_cpu})
        load = asyncio.run(paced(url, body.read_bytes(), args.rate, args.duration, str(work / "ca.crt")))
        proc.stdin.close()
        passes = json.loads(proc.stdout.readline() or "[]")
    ended = load["began"] + args.duration
    during = [p for p in passes if p["ended"] > load["began"] and p["began"] < ended]
    return {**load, "ready_s": ready, "passes": during[-1]["number"] - during[0]["number"] + 1 if during else 0,
            "pass_wall_s": statistics.median([p["ended"] - p["began"] for p in during]) if during else None,
            "pass_cpu_s": statistics.median([p["cpu"] for p in during]) if during else None}


def emulator_command(args: argparse.Namespace) -> list[str]:
    nodes = max(20, args.pods // 100)
    return [sys.executable, "-m", "bench.emulator", "--pvcs", str(args.pvcs), "--share-managers",
            str(args.share_managers), "--pods", str(args.pods), "--nodes", str(nodes), "--bench-disks", "--paginate",
            "--vmis", str(args.vmis), "--vmis-apart-every", str(args.apart_every)]


def row(name: str, got: dict[str, Any]) -> str:
    passes = (f"{got['passes']} passes during the load, median {got['pass_wall_s']:.2f} s "
              f"({got['pass_cpu_s']:.2f} s CPU)" if got["passes"] else "no passes")
    return (f"{name:28}{got['requests']:>9}{got['p50_ms']:>10.2f}{got['p99_ms']:>10.2f}{got['max_ms']:>10.1f}"
            f"{got['errors']:>8}   {passes}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.passes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", choices=["report", "migrate", "off"], default="report",
                        help="the leading keeper's mode (default report; off: both replicas without it)")
    parser.add_argument("--vmis", type=int, default=20000, help="running opted-in VMIs (default 20000)")
    parser.add_argument("--apart-every", type=int, default=10,
                        help="every K-th VMI with a launcher pod runs apart from its storage (default 10: 1k of 20k)")
    parser.add_argument("--pvcs", type=int, default=20000)
    parser.add_argument("--share-managers", type=int, default=10000)
    parser.add_argument("--pods", type=int, default=20000, help="half share-manager pods, half launcher pods")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per replica (default 20)")
    parser.add_argument("--rate", type=float, default=100.0, help="admissions per second (default 100)")
    parser.add_argument("--tiny", action="store_true", help="a small cluster and a short load (for the tests)")
    parser.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--api", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tls-cert-file", help=argparse.SUPPRESS)
    parser.add_argument("--tls-key-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replica:
        from webhook.admission.server import new_event_loop

        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(replica(args))
        return
    if args.tiny:
        vars(args).update(TINY)
    from webhook.tools import certs

    server_cpu, load_cpu = cores()
    print(f"admission on the keeper's leader: {args.vmis} VMIs (every {args.apart_every}th with a launcher pod "
          f"apart), {args.pods} pods, {args.pvcs} PVCs; {args.rate:g} reviews/s for {args.duration:g} s, "
          f"open load; replica on core {server_cpu}, load and apiserver on core {load_cpu}", flush=True)
    with tempfile.TemporaryDirectory(prefix="colocate-bench-passes-") as tmp:
        work = Path(tmp)
        certs.write(certs.generate(["localhost", "127.0.0.1"], days=1), work)
        with process(emulator_command(args), load_cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     text=True) as cluster:
            line = cluster.stdout.readline()
            if not line:
                raise SystemExit("the emulator did not start")
            api = line.split()[0]
            off = measure(args, api, work, "off")
            on = measure(args, api, work, args.keep)
    print(f"{'':28}{'requests':>9}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'errors':>8}")
    print(row("--keep off", off))
    print(row(f"--keep {args.keep}, passes back to back", on))
    ratio = on["p99_ms"] / off["p99_ms"]
    print(f"p99 during passes / p99 with the keeper off: {ratio:.2f}")
    print(f"targets: p99 during passes ≤ {TARGETS['p99_ratio']:g}× keeper off "
          f"{'met' if ratio <= TARGETS['p99_ratio'] else 'MISSED'}")


if __name__ == "__main__":
    main()
