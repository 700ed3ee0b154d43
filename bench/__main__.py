"""python -m bench: the admission path against a bare aiohttp server, and the store's memory.

Admission: `python -m webhook serve` (the production command) watches kubefake's apiserver and
answers a two-disk VM pod from its caches over TLS; a bare aiohttp TLS server answers the
same request with a fixed patch using stdlib json; and `python -m bench.floor` (serve with each
review parsed and allowed, nothing decided, recorded or logged), which tells what
serving costs apart from what an admission adds. The load generator (wrk, or an asyncio client without it) and
the servers run on different cores; the servers are measured in alternating rounds and the
medians are reported. Then the API-fallback path: two claims the
caches never saw, read with GETs from the emulator. Then the admission's own CPU without
HTTP, in one process (bench/inprocess.py), with and without kube-scheduler's checks.

Memory: the same `serve` process against an emulator holding 50k PVCs and PVs, 10k
ShareManagers and 20k pods (in processes of their own); RSS once synced and idle.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import cluster, emulator, load, sized

ROOT = Path(__file__).resolve().parent.parent
# What a user waits on. The throughput against a bare server and the in-process time are printed
# above the targets, reported only: a VM start is felt at the apiserver, not in microseconds here.
TARGETS = {"p99_ms": 2.0, "fallback_p99_ms": 10.0, "checks_us": 15.0}  # and RSS within sized.SHARE_OF_LIMIT of the limit


def cores() -> tuple[int | None, int | None]:
    """(server core, load core): two different cores when there are two."""
    available = sorted(os.sched_getaffinity(0))
    return (available[0], available[1]) if len(available) >= 2 else (None, None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def process(command: list[str], cpu: int | None, **kwargs: Any) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(command, cwd=ROOT, preexec_fn=load.pinned(cpu), **kwargs)
    try:
        yield proc
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def emulated_cluster(cpu: int | None, pvcs: int, share_managers: int, pods: int,
                     bench_disks: bool, other_pods: int = 0, vmis: int = 0, nodes: int = 0) -> Iterator[tuple[str, str]]:
    """(API URL, control URL) of an emulator process; the benchmark's disks or a large cluster
    (`nodes`, else a node per hundred pods, at least 20), with `vmis` VMIs when asked."""
    nodes = nodes or max(20, (pods + other_pods) // 100)
    command = [sys.executable, "-m", "bench.emulator", "--pvcs", str(pvcs), "--share-managers", str(share_managers),
               "--pods", str(pods), "--other-pods", str(other_pods), "--nodes", str(nodes)] \
        + (["--bench-disks"] if bench_disks else ["--paginate"]) + (["--vmis", str(vmis)] if vmis else [])
    with process(command, cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the emulator did not start")
        api, control, _ = line.split()
        yield api, control


def kubeconfig_for(api: str, path: Path) -> Path:
    """A kubeconfig at `path` for the emulator at `api`."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": api}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
    }))
    return path


@contextlib.contextmanager
def webhook_server(api: str | Path, work: Path, cpu: int | None, name: str, flags: Sequence[str] = (),
                   module: Sequence[str] = ("webhook", "serve")) -> Iterator[tuple[subprocess.Popen, str, str, Path]]:
    """`serve` (or `module`, given serve's flags) on the emulator at `api` (or with the kubeconfig
    `api`), logging to `<name>.log`; `flags` last."""
    kubeconfig = api if isinstance(api, Path) else kubeconfig_for(api, work / f"kubeconfig-{name}")
    port, ops_port = free_port(), free_port()
    log = work / f"{name}.log"
    command = [sys.executable, "-m", *module, "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
               "--port", str(port), "--metrics-host", "127.0.0.1", "--metrics-port", str(ops_port),
               "--drain-delay", "0", "--events", "off",
               "--tls-cert-file", str(work / "tls.crt"), "--tls-key-file", str(work / "tls.key"), *flags]
    with log.open("w") as stderr, process(command, cpu, stderr=stderr) as proc:
        yield proc, f"https://127.0.0.1:{port}", f"http://127.0.0.1:{ops_port}", log


def https(work: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    return context


def call(url: str, work: Path, body: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=https(work) if url.startswith("https") else None,
                                    timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(url: str, work: Path, status: int = 200, timeout: float = 1800, body: bytes | None = None) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if call(url, work, body)[0] == status:
                return time.monotonic() - started
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"{url} did not answer {status} within {timeout:.0f} s")


def review_file(work: Path, name: str, claims: list[str]) -> Path:
    path = work / f"{name}.json"
    path.write_bytes(json.dumps(cluster.two_disk_review(emulator.BENCH_NS, claims)).encode())
    return path


def decided(url: str, work: Path, body: Path) -> tuple[str, list[dict[str, Any]]]:
    status, raw = call(f"{url}/mutate?timeout=10s", work, body.read_bytes())
    if status != 200:
        raise SystemExit(f"{url}/mutate answered {status}: {raw[:300]!r}")
    response = json.loads(raw)["response"]
    patch = json.loads(base64.b64decode(response.get("patch", "") or "W10="))
    node = next((op["value"] for op in patch if op["path"].endswith("kubevirt-scheduler~1node")), "")
    outcome = next((op["value"] for op in patch if op["path"].endswith("kubevirt-scheduler~1decision")), "untouched")
    return f"{outcome} {node}".strip(), patch


def api_requests(control: str) -> int:
    with urllib.request.urlopen(f"{control}/requests", timeout=10) as response:
        return json.load(response)["requests"]


def run_load(args: argparse.Namespace, url: str, body: Path, work: Path, cpu: int | None, connections: int,
             duration: float, server_pid: int) -> load.Result:
    """Load one server; also the server's own CPU time per request, which other work on the
    machine does not skew the way it skews throughput."""
    before = cpu_ticks(server_pid)
    if args.use_wrk:
        result = load.run_wrk(f"{url}/mutate?timeout=10s", body, connections, duration, work, cpu)
    else:
        result = load.run_asyncio_client(f"{url}/mutate?timeout=10s", body, connections, duration, work / "ca.crt", cpu)
    ticks = cpu_ticks(server_pid) - before
    result.cpu_us = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(1, result.requests)
    return result


def median(results: list[load.Result]) -> dict[str, float]:
    return {
        "rps": statistics.median(r.rps for r in results),
        "p50_ms": statistics.median(r.p50_ms for r in results),
        "p99_ms": statistics.median(r.p99_ms for r in results),
        "cpu_us": statistics.median(r.cpu_us for r in results),
        "errors": sum(r.errors for r in results),
    }


def admission_bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    server_cpu, load_cpu = cores()
    report: dict[str, Any] = {}
    with emulated_cluster(load_cpu, args.pvcs, args.share_managers, args.pods, True) as (api, control), \
            webhook_server(api, work, server_cpu, "full") as (full_proc, full, full_ops, _), \
            webhook_server(api, work, server_cpu, "floor", module=("bench.floor",)) \
            as (floor_proc, floor, floor_ops, _):
        wait_for(f"{full_ops}/readyz", work, timeout=120)
        wait_for(f"{floor_ops}/readyz", work, timeout=120)
        body = review_file(work, "review", emulator.BENCH_CLAIMS)
        decision, patch = decided(full, work, body)
        if decision != f"pinned {emulator.BENCH_NODE}":
            raise SystemExit(f"the full path should pin to {emulator.BENCH_NODE}, it said: {decision}")
        (work / "patch.json").write_bytes(json.dumps(patch).encode())
        bare_port = free_port()
        bare_command = [sys.executable, "-m", "bench.bare", "--port", str(bare_port), "--patch-file",
                        str(work / "patch.json"), "--tls-cert-file", str(work / "tls.crt"),
                        "--tls-key-file", str(work / "tls.key")]
        with process(bare_command, server_cpu) as bare_proc:
            bare = f"https://127.0.0.1:{bare_port}"
            wait_for(f"{bare}/mutate", work, body=body.read_bytes(), timeout=30)
            warm = min(1.0, args.duration)
            servers = ((full, full_proc), (bare, bare_proc), (floor, floor_proc))
            for url, proc in servers:
                run_load(args, url, body, work, load_cpu, args.connections, warm, proc.pid)
            before = api_requests(control)
            rounds: list[list[load.Result]] = [[] for _ in servers]
            for _ in range(args.rounds):
                for results, (url, proc) in zip(rounds, servers):
                    results.append(run_load(args, url, body, work, load_cpu, args.connections, args.duration, proc.pid))
            report["api_requests_during_full"] = api_requests(control) - before
        report["full"], report["bare"], report["floor"] = (median(results) for results in rounds)
        report["ratio"] = report["full"]["rps"] / report["bare"]["rps"]

        # The fallback path: claims written behind the watches' back, so every admission GETs them.
        urllib.request.urlopen(urllib.request.Request(f"{control}/late", data=b"{}"), timeout=10).read()
        late = review_file(work, "late", emulator.LATE_CLAIMS)
        decision, _ = decided(full, work, late)
        if decision != f"pinned {emulator.BENCH_NODE}":
            raise SystemExit(f"the fallback path should pin to {emulator.BENCH_NODE}, it said: {decision}")
        before = api_requests(control)
        fallback = run_load(args, full, late, work, load_cpu, 1, args.duration, full_proc.pid)
        report["fallback"] = median([fallback])
        report["fallback"]["gets_per_admission"] = (api_requests(control) - before) / max(1, fallback.requests)
    return report


def in_process(rounds: int, migrated_vms: int) -> dict[str, float]:
    """The admission's own CPU without HTTP (bench/inprocess.py), once the servers have stopped;
    on whichever core is free (no load generator to keep apart from)."""
    command = [sys.executable, "-m", "bench.inprocess", "--json", "--rounds", str(rounds),
               "--migrated-vms", str(migrated_vms)]
    with process(command, None, stdout=subprocess.PIPE, text=True) as proc:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit("the in-process measurement failed")
    return json.loads(out)


def process_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle(pid: int, within: float = 15.0) -> None:
    """Until the process has used at most one clock tick of CPU (10 ms) a second for two seconds in a
    row, or `within` seconds have passed: a process that hears from another every second (serve from
    the keeper's process) is never quite still, and on a busy machine a tick lands on it more often."""
    ticks, quiet, deadline = cpu_ticks(pid), 0, time.monotonic() + within
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_ticks(pid)
        quiet = quiet + 1 if now - ticks <= 1 else 0
        ticks = now


def synced_objects(log: Path) -> dict[str, int]:
    """Objects per resource, from the "cache synced" lines of `serve`'s log."""
    counts = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("msg") == "cache synced":
            counts[entry["resource"]] = entry["objects"]
    return counts


def memory_of_serve(work: Path, pvcs: int, share_managers: int, pods: int, other_pods: int = 0,
                    nodes: int = 0, vmis: int = 0) -> dict[str, Any]:
    """RSS of `serve` once its caches have synced and every watch event is handled (CPU idle), and its
    probes' slowest answers meanwhile."""
    server_cpu, emulator_cpu = cores()
    with emulated_cluster(emulator_cpu, pvcs, share_managers, pods, False, other_pods, vmis, nodes) as (api, _), \
            webhook_server(api, work, server_cpu, f"memory-{pvcs}") as (proc, url, ops_url, log), \
            sized.SlowestProbes(ops_url) as probes:
        synced = wait_for(f"{ops_url}/readyz", work)
        idle(proc.pid)  # the apiserver replays every object as ADDED when a watch opens
        return {"rss_mib": process_kib(proc.pid, "VmRSS") / 1024, "peak_mib": process_kib(proc.pid, "VmHWM") / 1024,
                "sync_seconds": synced, "objects": synced_objects(log), "probes": probes}


def memory_at_size(work: Path, size: sized.Size) -> list[tuple[str, bool]]:
    """`serve`'s RSS on a cluster of `size`, its probes while it syncs: printed, and the targets."""
    print(f"memory: `serve` holding {size} (kubefake's apiserver in its own process) ...", flush=True)
    got = memory_of_serve(work, size.vms, size.vms, size.pods, nodes=size.nodes, vmis=size.vms)
    limit = sized.memory_limit_mib("serve")
    print(f"RSS {got['rss_mib']:.1f} MiB (peak {got['peak_mib']:.1f} MiB; the chart's limit {limit:.0f} MiB), "
          f"synced in {got['sync_seconds']:.1f} s")
    print("cached: " + ", ".join(f"{n} {r}" for r, n in got["objects"].items()))
    print(f"slowest probes while syncing: {got['probes'].said()}")
    return [(f"RSS ≤ {sized.SHARE_OF_LIMIT:.0%} of the limit", got["rss_mib"] <= sized.SHARE_OF_LIMIT * limit),
            ("probes ≤ 1 s", got["probes"].worst() <= 1.0)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server (default 3)")
    parser.add_argument("--connections", type=int, default=4, help="concurrent keep-alive connections (default 4)")
    parser.add_argument("--load", choices=["auto", "wrk", "asyncio"], default="auto",
                        help="load generator: wrk when installed (auto), or the asyncio client")
    parser.add_argument("--inprocess-rounds", type=int, default=21,
                        help="rounds of 1000 admissions for the in-process figure (default 21)")
    parser.add_argument("--migrated-vms", type=int, default=10_000,
                        help="VMs, all migrated once, of the cluster the checks are also timed on (default 10000)")
    parser.add_argument("--pvcs", type=int, default=100, help="background claims in the admission emulator")
    parser.add_argument("--share-managers", type=int, default=50)
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--memory", default="50000,10000,20000,50000", metavar="PVCS,SHARE_MANAGERS,PODS[,OTHER_PODS]",
                        help="cluster of the memory figure (PVs as many as PVCs; pods of other workloads last; "
                             "default 50000,10000,20000,50000)")
    parser.add_argument("--size", type=sized.Size.parse, metavar="NODES,VMS",
                        help="the memory figure's cluster instead: VMS VMs with one RWX disk each on NODES nodes "
                             f"(Kubernetes' limit: {sized.KUBERNETES_LIMIT}); target: RSS within "
                             f"{sized.SHARE_OF_LIMIT:.0%}% of the chart's memory limit, probes within 1 s")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args()

    if args.load == "wrk" and not load.have_wrk():
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk); use --load asyncio")
    args.use_wrk = args.load == "wrk" or (args.load == "auto" and load.have_wrk())
    server_cpu, load_cpu = cores()
    generator = ("wrk" if args.use_wrk else "asyncio client" if args.load == "asyncio"
                 else "asyncio client (wrk is not installed: apt-get install wrk)")
    pinning = f"servers on core {server_cpu}, load on core {load_cpu}" if server_cpu is not None else "no pinning (one core)"
    from webhook.tools import certs

    with tempfile.TemporaryDirectory(prefix="colocate-bench-") as tmp:
        work = Path(tmp)
        certs.write(certs.generate(["localhost", "127.0.0.1"], days=1), work)
        checks: list[tuple[str, bool]] = []
        if not args.memory_only:
            print(f"admission: two-disk VM pod over TLS, {args.connections} keep-alive connections, "
                  f"{args.rounds} × {args.duration:g} s per server, load: {generator}; {pinning}", flush=True)
            report = admission_bench(args, work)
            full, bare, fallback = report["full"], report["bare"], report["fallback"]
            print(f"{'':34}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'CPU µs/req':>12}{'errors':>8}")
            for name, row in (("full admission path (cache)", full), ("bare aiohttp, stdlib json", bare),
                              ("serve, parse and allow only", report["floor"])):
                print(f"{name:34}{row['rps']:>10.0f}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{row['cpu_us']:>12.0f}"
                      f"{row['errors']:>8}")
            print(f"{'ratio full / bare':34}{report['ratio']:>10.2f}{'':20}{bare['cpu_us'] / full['cpu_us']:>12.2f}")
            print(f"API requests during the full-path runs: {report['api_requests_during_full']}")
            print(f"{'API-fallback path, 1 connection':34}{fallback['rps']:>10.0f}{fallback['p50_ms']:>10.2f}"
                  f"{fallback['p99_ms']:>10.2f}{fallback['cpu_us']:>12.0f}{fallback['errors']:>8}   "
                  f"({fallback['gets_per_admission']:.1f} GETs to the emulator per admission)", flush=True)
            own = in_process(args.inprocess_rounds, args.migrated_vms)
            print(f"in-process admission (parse … log line, metrics; no HTTP): {own['admission_us']:.1f} µs CPU; "
                  f"kube-scheduler's checks add {own['checks_us']:.1f} µs of it; "
                  f"{own['checks_migrated_us']:.1f} µs where all {own['migrated_vms']} VMs have migrated; "
                  f"a drain's evacuation aimed (--aim-evacuations on): {own['evacuation_us']:.1f} µs", flush=True)
            checks += [(f"checks ≤ {TARGETS['checks_us']:g} µs", own["checks_us"] <= TARGETS["checks_us"]),
                       (f"full-path p99 ≤ {TARGETS['p99_ms']} ms", full["p99_ms"] <= TARGETS["p99_ms"]),
                       (f"fallback p99 ≤ {TARGETS['fallback_p99_ms']} ms", fallback["p99_ms"] <= TARGETS["fallback_p99_ms"])]
        if not args.skip_memory and args.size:
            checks += memory_at_size(work, args.size)
        elif not args.skip_memory:
            pvcs, share_managers, pods, other_pods = ([int(n) for n in args.memory.split(",")] + [0])[:4]
            print(f"memory: `serve` holding {pvcs} PVCs, {pvcs} PVs, {share_managers} ShareManagers, {pods} pods "
                  f"of VMs and share-managers, {other_pods} other pods (kubefake's apiserver in its own process) ...", flush=True)
            empty = memory_of_serve(work, 0, 0, 0)
            full_store = memory_of_serve(work, pvcs, share_managers, pods, other_pods)
            print(f"RSS {full_store['rss_mib']:.1f} MiB (peak {full_store['peak_mib']:.1f} MiB; "
                  f"{empty['rss_mib']:.1f} MiB with an empty cluster), synced in {full_store['sync_seconds']:.1f} s")
            print("cached: " + ", ".join(f"{n} {r}" for r, n in full_store["objects"].items()))
            limit = sized.memory_limit_mib("serve")
            checks.append((f"RSS ≤ {sized.SHARE_OF_LIMIT:.0%} of the limit ({limit:.0f} MiB)",
                           full_store["rss_mib"] <= sized.SHARE_OF_LIMIT * limit))
        print("targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in checks))


if __name__ == "__main__":
    main()
