"""A drain storm: many share-managers re-created at once beside VM starts, on a large cluster.

`python -m bench.storm --nodes 200 --vms 4000 --share-managers 25 --vm-starts 30`

The cluster (kubefake's apiserver in a process of its own, served as bench.emulator serves it):
`--nodes` KubeVirt nodes (each with the labels of a production node: `objects.in_full`); `--vms`
running opted-in VMs, each with its RWX disk served from the node it runs on, every one of them
migrated once (its pod a migration target pod, with KubeVirt's required anti-affinity toward its
own VMI's pods, as after a KubeVirt upgrade's workload updates);
the first node drained (cordoned, tainted `kubevirt.io/drain`) with `--share-managers` of those VMs
still on it, whose share-managers `kubectl drain` evicted (their ShareManagers stopped, owned by the
drained node; before each storm their pods are evicted again, terminating there for a few seconds
and then gone, as before longhorn-manager creates them again: bench/evicted.py). `python -m webhook
serve` (the production command) watches it.

The storm: longhorn-manager re-creates every evicted share-manager at once while `--vm-starts`
VMs start (their disks served elsewhere); every review is sent at once, as kube-apiserver sends it
(bench/bodies.py: defaulted, `managedFields`, the creating ServiceAccount), to the path and with
the `?timeout=` of its webhook in the install's configuration (`rounds.calls`), on connections as
kube-apiserver holds them (bench/sender.py): each review in flight on a connection
of its own over HTTP/1.1, a new TLS connection for each review beyond those kept idle since the
last burst (`--idle-connections`, 25 as kube-apiserver keeps; 0: every review a new TLS connection),
and timed by the sender: the handshake and queueing in the server included (a connection closed
or an answer other than 200 ends the run; the sender on uvloop, as `serve`, and each answer's
decision read once the burst is answered, as the apiserver reads none). Before each storm, the
same VM starts alone (a quiet cluster), and the control: the same starts beside as many
share-managers of volumes no VM uses, which the rule answers at once (what the storm's reviews
or creates cost without the rule's work); `--rounds` of the three, alternating. Printed: each
kind's latency (p50, p99, max; the median over the rounds) and how many were not answered as
meant in all ("undecided": a VM or a drain's share-manager without its decision, a control's
share-manager with one; `--json` for tools, each round too), and `serve`'s own view from its
log: each review's `latency_ms` from its connection's accept to its answer, beside the sender's
time for it, and its CPU per batch; and whether the storm met its targets (`verdicts`).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubefake import objects
from webhook.process.loop import new_event_loop
from webhook.tools import certs

from .__main__ import cores, https, process, process_kib, wait_for, webhook_server
from . import bodies, sized
from .rounds import WANTED, batches, calls, round_figures, serve_urls, unused
from .served import admissions_logged, caches_synced, cpu_seconds, served_median, settled
from .apiserver_load import Busy, Stored
from .evicted import SECONDS as EVICTED_SECONDS, Eviction
from .sender import IDLE, Connections, timed

DRAINED = "node-000"
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
VMS_NS = "default"


def node_name(i: int) -> str:
    return f"node-{i:03d}"


def migrated(pod: dict[str, Any]) -> dict[str, Any]:
    """The VM's pod as a migration target pod: KubeVirt's anti-affinity toward its VMI's pods."""
    uid = pod["metadata"]["labels"]["kubevirt.io/created-by"]
    pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": uid}}, "topologyKey": "kubernetes.io/hostname"}]}
    return pod


def storm_cluster(nodes: int, vms: int, share_managers: int, vm_starts: int) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The cluster's objects, the volumes of the evicted share-managers, and the claims of the VMs to start."""
    found: list[dict[str, Any]] = [objects.node(DRAINED, unschedulable=True, taints=[DRAIN_TAINT], full=True)]
    found += [objects.node(node_name(i), full=True) for i in range(1, nodes)]
    evicted = []
    for k in range(vms):
        on = DRAINED if k < share_managers else node_name(1 + k % (nodes - 1))
        vmi = objects.vmi(f"vm-{k:05d}", on, f"disk-{k:05d}", namespace=VMS_NS, uid=f"uid-vm-{k:05d}")
        found += [vmi, migrated(objects.launcher_pod_of(vmi))]
        if on == DRAINED:
            found += objects.rwx_disk(f"disk-{k:05d}", None, state="stopped", owner=DRAINED)
            evicted.append(f"pvc-disk-{k:05d}")
        else:
            found += objects.rwx_disk(f"disk-{k:05d}", on)
    starts = []
    for j in range(vm_starts):
        claim = f"start-{j:03d}"
        found += objects.rwx_disk(claim, node_name(1 + j % (nodes - 1)))
        starts.append(claim)
    return found, evicted, starts


@contextlib.contextmanager
def emulator(objects_file: Path, cpu: int | None) -> Iterator[tuple[str, int]]:
    command = [sys.executable, "-m", "bench.emulator", "--pvcs", "0", "--share-managers", "0", "--pods", "0",
               "--nodes", "0", "--paginate", "--objects", str(objects_file)]
    with process(command, cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the emulator did not start")
        yield line.split()[0], proc.pid


def reviews(evicted: list[str], starts: list[str], pad_kib: int = 0) -> list[tuple[str, bytes]]:
    """("share-manager" | "control" | "vm", the AdmissionReview's bytes), as the apiserver sends
    them (`bodies`: defaulted, managedFields, the creating ServiceAccount); "control": as many
    share-managers of volumes no VM uses (`unused`). Share-managers padded to `pad_kib` KiB."""
    found = []
    for kind, volumes in (("share-manager", evicted), ("control", [unused(i) for i in range(len(evicted))])):
        for i, volume in enumerate(volumes):
            found.append((kind, bodies.review(objects.share_manager_pod(volume), objects.LONGHORN_NS,
                                              f"{'sm' if kind == 'share-manager' else kind}-{i}", pad_kib=pad_kib,
                                              manager="longhorn-manager", account="longhorn-service-account")))
    for i, claim in enumerate(starts):
        found.append(("vm", bodies.review(objects.vm_pod(claim), VMS_NS, f"vm-{i}", manager="virt-controller",
                                          account="kubevirt-controller")))
    return found


def decision(answer: dict[str, Any]) -> str | None:
    """The decision the answer's patch records (`kubevirt-scheduler/decision`), if any."""
    import base64

    response = answer["response"]
    if not response.get("allowed") or "patch" not in response:
        return None
    for op in json.loads(base64.b64decode(response["patch"])):
        if op["path"] == "/metadata/annotations/kubevirt-scheduler~1decision":
            return op["value"]
        if op["path"] == "/metadata/annotations":
            return op["value"].get("kubevirt-scheduler/decision")
    return None


Ports = dict[str, Connections]  # by serve's port each webhook's Service port leads to (`rounds.calls`)


def ports(urls: dict[str, str], context: ssl.SSLContext, idle: int = 0, in_flight: int = 0) -> Ports:
    """Connections to each of serve's ports (`urls`: "webhook")."""
    return {target: Connections(url, context, idle=idle, in_flight=in_flight) for target, url in urls.items()}


async def send_all(connections: Ports, batch: list[tuple[str, bytes]], stored: Stored | None = None,
                   answered_all: Callable[[], None] | None = None) -> list[tuple[str, float, bool]]:
    """Every review at once, each on a connection of its own (`sender`), to the port, path and with
    the timeout of its webhook in the install's configuration; (kind, seconds, decided) of each answer.
    With `stored`, each answered review's pod is created in the emulator meanwhile, as the apiserver
    stores it (`apiserver_load`). `answered_all` is called once the last answer is in."""
    called = calls()

    async def one(kind: str, body: bytes) -> tuple[str, float, bytes]:
        target, path = called[kind]
        seconds, answer = await timed(connections[target], path, body)
        if stored is not None:
            stored.create(body, answer)
        return kind, seconds, answer

    answered = await asyncio.gather(*(one(kind, body) for kind, body in batch))
    if answered_all is not None:
        answered_all()
    if stored is not None:
        await stored.created()
    # Judged once all are in: the apiserver reads no decision (the storing process applies the patch, as it
    # does), and reading a pinned answer's patch here took the burst's CPU from the storm's reviews alone.
    return [(kind, seconds, decision(json.loads(answer)) == WANTED[kind]) for kind, seconds, answer in answered]


async def send_once(urls: dict[str, str], work: Path, batch: list[tuple[str, bytes]]) -> list[tuple[str, float, bool]]:
    """`send_all` on connections of its own, closed after."""
    connections = ports(urls, https(work))
    try:
        return await send_all(connections, batch)
    finally:
        await close(connections)


async def close(connections: Ports) -> None:
    for each in connections.values():
        await each.close()


def opened(connections: Ports) -> int:
    return sum(each.opened for each in connections.values())


async def storm_rounds(urls: dict[str, str], work: Path, batch: list[tuple[str, bytes]], args: argparse.Namespace,
                       log: Path, serve_pid: int, api: tuple[str, int] = ("", 0), busy: Busy | None = None,
                       eviction: Eviction | None = None,
                       ) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]], list[int], int]:
    """`--rounds` of the three batches on one set of connections, as the apiserver keeps its own:
    the rounds' figures, serve's admission lines of each batch (and the CPU serve spent on it),
    the TLS connections each opened, and the pods stored. With `--apiserver-load`, each batch beside `busy` and
    its pods stored in the emulator at `api` (its URL and process), whose CPU and the storing
    process's for each batch are the apiserver's share (`apiserver_load`). With `eviction`, the
    drained node's share-managers evicted before each storm (`evicted`)."""
    connections = ports(urls, https(work), idle=args.idle_connections, in_flight=args.in_flight)
    nodes = [node_name(i) for i in range(1, args.nodes)]
    stored = await Stored.start(api[0], nodes) if args.apiserver_load is not None else None
    rounds, served, new = [], [], []
    try:
        await send_all(connections, [r for r in batch if r[0] == "vm"][:2])  # warm up
        for _ in range(args.rounds):  # alternating, so that a slow moment of the machine hits each alike
            answered = []
            for sent in batches(batch):
                if eviction is not None and any(kind == "share-manager" for kind, _ in sent):
                    await eviction(serve_pid)  # the storm is their re-creation
                start, before, cpu = log.stat().st_size, opened(connections), cpu_seconds(serve_pid)
                apiserver, sending = apiserver_cpu(api[1], stored), time.process_time()
                at_answers: list[tuple[float, float, float]] = []  # serve's, the sender's, the apiserver's CPU at the last answer
                if busy is not None:
                    busy.start()
                try:
                    answered.append(await send_all(connections, sent, stored,
                                                   lambda: at_answers.append((cpu_seconds(serve_pid),
                                                                              time.process_time(),
                                                                              apiserver_cpu(api[1], stored)))))
                finally:
                    if busy is not None:
                        busy.stop()
                await settled(serve_pid)  # its Events posted, counted in its CPU
                burst = {"burst_cpu_ms": (at_answers[0][0] - cpu) * 1000,
                         "sender_cpu_ms": (at_answers[0][1] - sending) * 1000,
                         "apiserver_burst_cpu_ms": (at_answers[0][2] - apiserver) * 1000,
                         "burst_ms": max(seconds for _, seconds, _ in answered[-1]) * 1000}
                served.append(admissions_logged(log, start) + [{"cpu_ms": (cpu_seconds(serve_pid) - cpu) * 1000}, burst]
                              + ([{"apiserver_cpu_ms": (apiserver_cpu(api[1], stored) - apiserver) * 1000}]
                                 if stored is not None else []))
                new.append(opened(connections) - before)
                if stored is not None:  # the next batch meets the cluster as this one did
                    await stored.delete_all()
                    await settled(serve_pid)
            rounds.append(round_figures(*answered))
    finally:
        await close(connections)
        if stored is not None:
            await stored.close()
    return rounds, served, new, 0 if stored is None else stored.count


def apiserver_cpu(emulator_pid: int, stored: Stored | None) -> float:
    """The CPU the emulator and the storing process have used so far: the apiserver's share."""
    return 0.0 if stored is None else cpu_seconds(emulator_pid) + cpu_seconds(stored.proc.pid)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cluster, evicted, starts = storm_cluster(args.nodes, args.vms, args.share_managers, args.vm_starts)
    objects_file = work / "cluster.jsonl"
    with objects_file.open("w") as out:
        for obj in cluster:
            out.write(json.dumps(obj) + "\n")
    if args.apiserver == "real":
        from .realstorm import run_real

        rounds = run_real(args, work, cluster, evicted, starts)
        served = {name: [r.pop(name) for r in rounds] for name in ("server", "server_control")}
        return {"apiserver": "real", "nodes": args.nodes, "vms": args.vms, "share_managers": args.share_managers,
                "vm_starts": args.vm_starts, "rounds": rounds, "refused": sum(r.pop("refused") for r in rounds),
                **{name: median_of(rounds, name) for name in KINDS},
                **{name: {key: statistics.median(f[key] for f in each) for key in each[0]}
                   for name, each in served.items()}}
    batch = reviews(evicted, starts, args.share_manager_kib)
    server_cpu, other_cpu = cores()
    loaded = args.apiserver_load is not None  # the apiserver's work on any core, serve's too
    with emulator(objects_file, None if loaded else other_cpu) as (api, api_pid), \
            webhook_server(api, work, server_cpu, "storm",
                           ("--share-manager-rule", args.share_manager_rule, "--events", args.events)) as (serve, url, ops, log):
        wait_for(f"{ops}/readyz", work)
        urls = serve_urls(url)
        if args.share_manager_rule == "on":
            judged_from_the_caches(urls, work, [r for r in batch if r[0] == "share-manager"][:1])
        caches_synced(log)
        busy = Busy(args.apiserver_load) if args.apiserver_load else None
        if other_cpu is not None and not loaded:  # the sender, as the apiserver, on a core of its own: not serve's
            os.sched_setaffinity(0, {other_cpu})
        try:
            # On uvloop, as `serve`: the apiserver's webhook client is Go's, and asyncio's own TLS in Python
            # cost the sender a fifth more CPU a burst, on the cores `serve` shares (docs/performance.md).
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                rounds, served, new, pods_stored = runner.run(storm_rounds(
                    urls, work, batch, args, log, serve.pid, (api, api_pid), busy,
                    Eviction(api, evicted, DRAINED, args.evicted_seconds) if args.evicted_seconds > 0 else None))
        finally:
            if busy is not None:
                busy.close()
        memory = {"rss_mib": process_kib(serve.pid, "VmRSS") / 1024, "peak_mib": process_kib(serve.pid, "VmHWM") / 1024}
    return {"apiserver": "emulator", "nodes": args.nodes, "vms": args.vms, "share_managers": args.share_managers,
            "vm_starts": args.vm_starts, "rounds": rounds, **{name: median_of(rounds, name) for name in KINDS},
            "server": served_median(served[2::3]), "server_control": served_median(served[1::3]), "memory": memory,
            "body_kib": {kind: round(statistics.median(len(b) for k, b in batch if k == kind) / 1024, 1)
                         for kind in ("vm", "share-manager")},
            "sender": {"idle_connections": args.idle_connections, "opened_per_storm": statistics.median(new[2::3]),
                       "apiserver_load": args.apiserver_load, "pods_stored": pods_stored}}


KINDS = ("quiet_vm", "control_vm", "control_share_manager", "storm_vm", "storm_share_manager")


def judged_from_the_caches(urls: dict[str, str], work: Path, review: list[tuple[str, bytes]], timeout: float = 600.0) -> None:
    """Until a share-manager of the drain is decided: `serve` is ready before its VMI cache has
    synced (a replica serves while the KubeVirt API is slow), and a drain's share-managers are
    judged from it; until then they are answered without a decision, which is not the storm."""
    deadline = time.monotonic() + timeout
    while not all(decided for _, _, decided in asyncio.run(send_once(urls, work, review))):
        if time.monotonic() > deadline:
            raise SystemExit(f"no share-manager was decided within {timeout:.0f} s of readiness")
        time.sleep(0.5)


def median_of(rounds: list[dict[str, Any]], name: str) -> dict[str, float]:
    """Each figure's median over the rounds (undecided: the sum); the machine's noise is in
    single rounds, not in their median."""
    found = {key: statistics.median(r[name][key] for r in rounds) for key in ("p50_ms", "p99_ms", "max_ms")}
    return {**found, "undecided": sum(r[name]["undecided"] for r in rounds)}


ANSWERED_MS = 1000.0  # every review answered within this at p99 at the sender (kube-apiserver's SLO for a create)
SERVE_VM_MS = 50.0  # serve's own time from a VM review's accept to its answer, p99


def verdicts(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The storm's targets, each met or not: none of its admissions failed open (answered undecided),
    every review within ANSWERED_MS at p99 at the sender, serve's own time for a VM review within
    SERVE_VM_MS at p99, and serve within its memory limit (the chart's)."""
    kinds = [name for name in KINDS if name in result]
    found = [("0 admissions failed open", sum(result[name]["undecided"] for name in kinds) == 0),
             (f"every review ≤ {ANSWERED_MS:.0f} ms at p99 at the sender",
              all(result[name]["p99_ms"] <= ANSWERED_MS for name in kinds))]
    if "server" in result:
        found.append((f"serve's VM reviews ≤ {SERVE_VM_MS:.0f} ms at p99 from their accept",
                      result["server"]["vm_latency_p99_ms"] <= SERVE_VM_MS))
    if "memory" in result:
        limit = sized.memory_limit_mib("serve")
        found.append((f"serve within its memory limit ({limit:.0f} MiB)", result["memory"]["peak_mib"] <= limit))
    return found


def zero_or_more(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"a whole number, 0 or more: {text!r}")
    return value


def cores_of_load(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"cores' worth of load, 0 to 64: {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--vms", type=int, default=4000)
    parser.add_argument("--share-managers", type=int, default=25, help="evicted share-managers re-created at once")
    parser.add_argument("--vm-starts", type=int, default=30, help="VM starts beside them")
    parser.add_argument("--rounds", type=int, default=5, help="quiet starts, the control and storms, alternating")
    parser.add_argument("--apiserver", choices=["emulator", "real"], default="emulator",
                        help="reviews sent to serve directly, its cluster in kubefake's apiserver (emulator); or pods "
                             "created through a real kube-apiserver that calls serve (real: KUBEBUILDER_ASSETS)")
    parser.add_argument("--share-manager-rule", choices=["on", "off"], default="on",
                        help="off: the storm's share-managers too answered at once, undecided")
    parser.add_argument("--events", choices=["on", "off"], default="on",
                        help="serve's Events about its decisions (default on, as installed: the emulator takes each "
                             "POST); each batch waits for serve to be at rest, its Events posted")
    parser.add_argument("--idle-connections", type=zero_or_more, default=IDLE, metavar="N",
                        help="the sender, as kube-apiserver: each review in flight on a connection of its own, a new "
                             "TLS connection when none is idle; N kept open between bursts (default %(default)s, as "
                             "kube-apiserver keeps; 0: a new TLS connection for every review)")
    parser.add_argument("--in-flight", type=zero_or_more, default=0, metavar="N",
                        help="at most N reviews sent at once, the rest queued in the order sent and timed from then, as "
                             "one client with a pool of N connections would create the pods (aiohttp's default: 100); "
                             "default 0: none, as the apiserver calls the webhook")
    parser.add_argument("--apiserver-load", type=cores_of_load, metavar="CORES",
                        help="the machine shared with an apiserver's load (bench/apiserver_load.py): each answered "
                             "review's pod stored in the emulator, its event taken by serve's informers during the "
                             "burst, the emulator and the sender on any core (serve's too), and CORES cores' worth of "
                             "work more there while each burst is in flight (etcd's, kube-scheduler's; 0: none). "
                             "Default: none of it, the emulator and the sender on a core of their own")
    parser.add_argument("--share-manager-kib", type=zero_or_more, default=0, metavar="KIB",
                        help="each share-manager's review padded to at least KIB KiB (default: as the apiserver sends "
                             "longhorn-manager's pod, about 5 KiB)")
    parser.add_argument("--evicted-seconds", type=float, default=EVICTED_SECONDS, metavar="SECONDS",
                        help="before each storm, the drained node's share-manager pods evicted and terminating this "
                             f"long, then gone (bench/evicted.py; default {EVICTED_SECONDS:g}; 0: gone before serve "
                             "starts, never seen terminating)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="colocate-storm-") as tmp:
        work = Path(tmp)
        certs.write(certs.generate(["localhost", "127.0.0.1"], days=1), work)
        result = run(args, work)
    result["targets"] = {name: met for name, met in verdicts(result)}
    if args.json:
        print(json.dumps(result))
        return
    where = "through a real kube-apiserver" if args.apiserver == "real" else "sent to serve"
    print(f"drain storm ({where}): {args.nodes} nodes, {args.vms} migrated VMs, {args.share_managers} share-managers "
          f"re-created at once beside {args.vm_starts} VM starts (latency as the sender sees it, queueing included; "
          f"medians of {args.rounds} rounds)")
    for name, title in (("quiet_vm", "VM starts, quiet cluster"), ("control_vm", "VM starts, beside the control"),
                        ("control_share_manager", "share-managers, the control"),
                        ("storm_vm", "VM starts, during the storm"), ("storm_share_manager", "share-managers, the storm")):
        f = result[name]
        print(f"  {title:32s} p50 {f['p50_ms']:7.1f} ms  p99 {f['p99_ms']:7.1f} ms  max {f['max_ms']:7.1f} ms  "
              f"undecided {f['undecided']}")
    quiet, storm = result["quiet_vm"]["p99_ms"], result["storm_vm"]["p99_ms"]
    print(f"  VM starts' p99, the storm less a quiet cluster: {storm - quiet:+.1f} ms "
          f"(the control less a quiet cluster: {result['control_vm']['p99_ms'] - quiet:+.1f} ms)")
    if "memory" in result:
        server, memory = result["server"], result["memory"]
        print(f"  in serve, the storms (its log): VM reviews p99 {server['vm_p99_ms']:.1f} ms, max "
              f"{server['vm_max_ms']:.1f} ms (handler to answer); share-managers p99 {server['share_manager_p99_ms']:.1f} ms; "
              f"event loop lag before a handler, max {server['loop_lag_max_ms']:.1f} ms; VM reviews with the lag "
              f"before them p99 {server['vm_queued_p99_ms']:.1f} ms")
        control = result["server_control"]
        print(f"  in serve, from each connection's accept to its answer (its log's latency_ms), p99: VM reviews "
              f"{server['vm_latency_p99_ms']:.1f} ms in the storm, {control['vm_latency_p99_ms']:.1f} ms beside the "
              f"control; share-managers {server['share_manager_latency_p99_ms']:.1f} ms, the control's "
              f"{control['share_manager_latency_p99_ms']:.1f} ms; serve's CPU {server['cpu_ms']:.0f} ms per storm, "
              f"{control['cpu_ms']:.0f} ms per control")
        print(f"  serve's CPU until the burst's last answer: {server['burst_cpu_ms']:.0f} ms in the storm, "
              f"{server['burst_core_share']:.0%} of its core over the burst; {control['burst_cpu_ms']:.0f} ms, "
              f"{control['burst_core_share']:.0%} in the control (the kernel counts it in 10 ms ticks); the "
              f"sender's (this process, each review's TLS handshake and answer) {server['sender_cpu_ms']:.0f} ms "
              f"and {control['sender_cpu_ms']:.0f} ms")
        print(f"  share-managers answered with what serve prepared while their evicted pods terminated: "
              f"{server['share_managers_prepared']:.0f} of {args.share_managers} per storm (median)")
        print(f"  the sender: {result['sender']['opened_per_storm']:.0f} new TLS connections per storm "
              f"({args.idle_connections} kept idle between bursts)")
        if args.apiserver_load is not None:
            print(f"  the apiserver's load: {result['sender']['pods_stored']} answered pods stored and bound, the "
                  f"emulator and the sender on any core, {args.apiserver_load:g} cores' worth of work more while each "
                  f"burst was in flight; the emulator's and the storing process's CPU "
                  f"{server['apiserver_cpu_ms']:.0f} ms per storm, {control['apiserver_cpu_ms']:.0f} ms per control "
                  f"({server['apiserver_burst_cpu_ms']:.0f} and {control['apiserver_burst_cpu_ms']:.0f} ms until the "
                  f"burst's last answer)")
        print(f"  serve's memory at the end: RSS {memory['rss_mib']:.1f} MiB (peak {memory['peak_mib']:.1f} MiB)")
    if "refused" in result:
        server, control = result["server"], result["server_control"]
        print(f"  in serve, from each connection's accept to its answer (its log's latency_ms), p99: VM reviews "
              f"{server['vm_latency_p99_ms']:.1f} ms in the storm, {control['vm_latency_p99_ms']:.1f} ms beside the "
              f"control; share-managers {server['share_manager_latency_p99_ms']:.1f} ms, the control's "
              f"{control['share_manager_latency_p99_ms']:.1f} ms")
        print(f"  creates the apiserver refused: {result['refused']}")
    print("targets: " + ", ".join(f"{name} {'met' if met else 'MISSED'}" for name, met in result["targets"].items()))


if __name__ == "__main__":
    main()
