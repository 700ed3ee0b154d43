"""python -m bench.keeper: the keeper against a drained cluster, and its memory in `serve`.

Simulation: `bench.kubevirt` (a process of its own) serves a cluster after a drain, by default
500 opted-in running VMIs of which 200 run apart from their storage, on nodes of two CPU
generations, and plays KubeVirt (see there: migrations of 0.2–0.5 s, one in 20 failing, at most
5 at once and 2 from one node, target pods the scheduler cannot place, someone else's
migrations, lagging watches, nodes lost during the run) and, halfway, a real drain of a busy
node: its share-managers evicted and re-created 3–10 s later through the webhook's
share-manager rule, its VMs evacuated by KubeVirt a few at a time, each migration target pod
through the webhook (which leaves every one untouched), every pod placed by a simulated
kube-scheduler. The keeper runs here,
in-process, as the elected replica runs it (`Keeper` on the admission caches, Events on), in
migrate mode, `--unplaceable` as its KeeperTiming.unplaceable and `--outbound-per-node` as its
--keep-max-outbound-per-node; its passes are driven one after another until every movable VM is
back, the drain is done and a few more passes create nothing, and halfway a new leader takes
over. The simulated cluster checks each migration as it is created, each one deleted, each
target pod the webhook changed, and the end state.

`--keep-after` is 10 s (the keeper's default is 600 s). Moving at once (0) would mix the keeper
into the drain; the figure worth having is what the drain and the webhook do before the keeper
steps in. 10 s is the default 600 s at the scale of the drain's migrations (1–3 s here, about a
minute on a real cluster): the keeper leaves the drain's VMs alone while KubeVirt evacuates
them (its in-flight bounds hold it anyway while the evacuations queue), then catches up with
those still apart, whose move can succeed. The 130 movable VMs apart since before the run
(20 minutes) are moved at once, as before.

Printed: what was created and brought back, the migrations of ours that cannot
be placed or took a slot over a limit (0 each), how soon the unplaceable ones ended after their
target pod became unschedulable, the peaks in flight, what held VMs, the violations, the CPU
time of this process during each pass over all the VMIs (`time.process_time`; the caches'
handling of events during the pass included, as in `serve`), and the drain: its evacuations,
each share-manager's return (while its VM was waiting, migrating or gone; the rule's answer;
placed with its VM, where the VM can follow, or where its migration cannot go), the drain's VMs
apart when it was done and at the end (each with the keeper's hold), those that no migration can
bring next to their storage (goal 0), the keeper's migrations of them, and their VM-seconds apart from the drain's start to the end of the run. A missed
target on a "targets:" line makes the exit status 1; the goals of the drain that the webhook's
rules do not meet yet are on a "goals:" line, reported but not in the exit status
(`BINDING_GOALS` names those that are).

Memory: `python -m webhook keep --keep report` (the keeper's pod) against `bench.emulator` holding
50k PVCs and PVs, 10k ShareManagers, 20k pods and 20k VMIs (one in twenty apart); RSS once its
caches have synced (what they hold: the last sample, every 50 ms, before the first pass began),
after each of two passes (30 s apart), the process idle, and at its peak. With `--size`, a cluster
of that size in each of `--shapes` (every VM apart from its storage, as on the day the keeper is
installed; every VM beside it, as once it has settled; half and half) and `--modes`: besides the
above, each pass's CPU and log lines, and the Lease's renewals as the API holds them (the longest
from one to the next; the keeper renews every 2 s and stops acting after 10 s without).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from . import kubevirt, sized
from .__main__ import (cores, emulated_cluster, free_port, idle, kubeconfig_for, process, process_kib, synced_objects,
                       wait_for)

TARGETS = {"first_pass_cpu": 60.0, "pass_cpu": 30.0}  # and peak RSS within sized.SHARE_OF_LIMIT of the chart's limit
KEEP_AFTER = 10.0  # the keeper's --keep-after: its default 600 s at the scale of the drain's migrations
CANCEL_SLACK = 0.5  # seconds a pass may take to reach its cancellations and the DELETE to be answered (a busy machine)
SETTLE_PASSES = 3  # passes that create nothing once every movable VM is back, before the end
RSS_PERIOD = 0.05  # seconds between two samples of the keeper's RSS
PASS_WITHIN = 3600.0  # seconds the memory figure waits for a pass (at 75,000 VMs on a busy machine: tens of minutes)


# --------------------------------------------------------------------------- the simulation


def simulation_flags(args: argparse.Namespace) -> list[str]:
    return ["--vmis", str(args.vmis), "--apart", str(args.apart),
            "--nodes", str(args.nodes),
            "--unready-nodes", str(args.unready_nodes), "--cordoned-nodes", str(args.cordoned_nodes),
            "--delay-min", str(args.delay_min), "--delay-max", str(args.delay_max),
            "--fail-every", str(args.fail_every), "--foreign", str(args.foreign),
            "--max-inflight", str(args.max_inflight), "--seed", str(args.seed),
            "--watch-lag", str(args.watch_lag), "--old-cpu-nodes", str(args.old_cpu_nodes),
            "--outbound-per-node", str(args.outbound_per_node), "--unplaceable", str(args.unplaceable),
            "--evacuation-delay-min", str(args.evacuation_delay_min), "--evacuation-delay-max",
            str(args.evacuation_delay_max), "--share-manager-delay-min", str(args.share_manager_delay_min),
            "--share-manager-delay-max", str(args.share_manager_delay_max),
            "--lose-nodes" if args.lose_nodes else "--no-lose-nodes", "--drain" if args.drain else "--no-drain"]


@contextlib.contextmanager
def simulated_cluster(args: argparse.Namespace, cpu: int | None) -> Iterator[tuple[str, str]]:
    """(API URL, control URL) of the simulated cluster's process."""
    command = [sys.executable, "-m", "bench.kubevirt", *simulation_flags(args)]
    with process(command, cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the simulated cluster did not start")
        api, control = line.split()
        yield api, control


async def drive(args: argparse.Namespace, api_url: str, control: str) -> dict[str, Any]:
    """The keeper's passes until every movable VM is back (and a few more), or the timeout. With
    `--handover`, once half the movable VMs have a migration, the leader changes: a new Keeper,
    remembering nothing, takes over with the same caches (as `serve` does on another replica)."""
    from kubernetes_asyncio.client import Configuration

    from webhook.cluster import client
    from webhook.stores.cache import WatchedClusterStore
    from webhook.cluster.events import EventSink
    from webhook.config import Settings
    from webhook.keeper.keeper import Keeper, KeeperTiming
    from webhook.keeper.records import state_name, StateStore

    settings = Settings(keep="migrate", keep_after=args.keep_after, keep_max_inflight=args.max_inflight,
                        keep_max_per_day=args.max_per_day, keep_max_outbound_per_node=args.outbound_per_node)
    real = KeeperTiming()  # the bucket over the keeper's writes sped up as its passes are
    timing = KeeperTiming(period=args.period, unplaceable=args.unplaceable,
                          write_rate=real.write_rate * real.period / args.period)
    store = WatchedClusterStore(client.new_api_client(Configuration(host=api_url)), settings)
    api = client.new_api_client(Configuration(host=api_url))
    events = EventSink(api)
    loop = asyncio.get_running_loop()
    passes: list[dict[str, Any]] = []
    last: Any = None  # the last pass's report: what the keeper made of each VM at the end
    began = loop.time()
    leaders, quiet = 0, 0
    try:
        async with aiohttp.ClientSession(control) as session:
            async def simulated(final: bool = False) -> dict[str, Any]:
                async with session.get("/report", params={"final": "1"} if final else {}) as response:
                    return await response.json()

            handover_at = max(1, (await simulated())["movable"] // 2) if args.handover else None
            store.start()
            synced: float | None = None
            while quiet < SETTLE_PASSES and (synced is None or loop.time() - synced < args.timeout):
                # Each leader reads the state the one before it kept, as in a cluster.
                state = StateStore(api, "default", state_name(settings), timeout=timing.request_timeout)
                keeper = Keeper(api, store, settings, events=events, timing=timing, state=state)
                leaders += 1
                async with keeper.watching() as watch:
                    async with asyncio.timeout(120):
                        await asyncio.gather(store.wait_synced(), watch.wait_synced())
                    if synced is None:
                        synced = loop.time()
                        async with session.post("/others"):
                            pass  # someone else's migrations start now
                    while loop.time() - synced < args.timeout and quiet < SETTLE_PASSES:
                        started, cpu = loop.time(), time.process_time()
                        report = await keeper.run_pass()
                        cpu = time.process_time() - cpu
                        if report.vms:
                            last = report
                        passes.append({"cpu": cpu, "wall": loop.time() - started, "created": len(report.created),
                                       "seen": sum(report.states.values()), "note": report.note,
                                       "held": report.held, "leader": leaders})
                        now = await simulated()
                        quiet = quiet + 1 if now["settled"] and not report.created else 0
                        if handover_at is not None and now["created"] >= handover_at:
                            handover_at = None
                            break  # this leader steps down; the next one starts from nothing
                        await asyncio.sleep(max(0.0, args.period - (loop.time() - started)))
            final = await simulated(final=True)
    finally:
        await events.close()
        await store.close()
        await api.close()
    final["passes"] = passes
    final["leaders"] = leaders
    if final["drain"] and last is not None:  # the keeper's answer for each of the drain's VMs still apart
        records = {f"{r.namespace}/{r.name}": r for r in last.vms}
        for apart in final["drain"]["apart"]:
            record = records.get(apart["vm"])
            apart["hold"] = str(record.hold) if record is not None and record.hold else None
            apart["decision"] = record.decision if record is not None else "not seen by the keeper"
    final["seconds"] = loop.time() - began
    final["timed_out"] = quiet < SETTLE_PASSES
    return final


def run_simulation(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from webhook.process.loop import new_event_loop
    from webhook.logs import JsonFormatter

    keeper_cpu, cluster_cpu = cores()
    log = args.log or work / "keeper.log"
    handler = logging.FileHandler(log)
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)  # as `serve` logs: the cost of the keeper's lines counts
    try:
        with simulated_cluster(args, cluster_cpu) as (api_url, control):
            if keeper_cpu is not None:
                os.sched_setaffinity(0, {keeper_cpu})
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                return runner.run(drive(args, api_url, control))
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def cancel_bound(args: argparse.Namespace) -> float:
    """Seconds from a target pod of ours becoming unschedulable to its migration's end, at most:
    the keeper's threshold, then its next pass (and that pass's own start, CANCEL_SLACK)."""
    return args.unplaceable + args.period + CANCEL_SLACK


# The drain's goals (issue 25): reported, met or MISSED; those the webhook's rules meet are named in
# BINDING_GOALS, and only those make the exit status 1 when missed. The share-manager rule places a
# share-manager where its VM's migration can follow (rules/placement/together.py): a target.
NEVER_GOAL = "0 of the drain's VMs where no migration can bring them to their storage"
BINDING_GOALS = {NEVER_GOAL}


def simulation_checks(args: argparse.Namespace, got: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    """The simulation's targets and goals: (name, met, whether a miss makes the exit status 1)."""
    unplaceable = got["unplaceable"]
    checks = [("invariants hold", not got["violations"], True),
              ("every movable VM settled", not got["timed_out"], True),
              ("0 migrations created that cannot be placed", got["cannot_place"] == 0, True),
              ("0 over a slot limit", got["over_slots"] == 0, True),
              (f"unplaceable ones cancelled within {cancel_bound(args):g} s",
               all(u["after"] is not None and u["after"] <= cancel_bound(args) for u in unplaceable), True)]
    if args.drain:
        drain = got["drain"]
        checks.append(("drain done", drain is not None and drain["done"] is not None, True))
        if drain is not None:
            shared = drain["share_managers"]
            checks += [(f"the drained node held at least {kubevirt.BUSY} opted-in VMs", drain["vms"] >= kubevirt.BUSY,
                        True),
                       ("every share-manager evicted placed again", shared["back"] == shared["evicted"], True),
                       (NEVER_GOAL, drain["never"] == 0, NEVER_GOAL in BINDING_GOALS)]
    return checks


def counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "none"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def print_drain(args: argparse.Namespace, drain: dict[str, Any]) -> None:
    """The drain, its share-managers, and where its VMs ended (with the keeper's hold of each one apart)."""
    node = drain["node"]
    done = f"done at {drain['done']:.1f} s" if drain["done"] is not None else "NOT DONE"
    arrived = f"; {drain['arrived']} more arrived by a migration under way" if drain.get("arrived") else ""
    print(f"drain: {node} ({drain['cpu']}) drained at {drain['at']:.1f} s with {drain['vms']} opted-in VMs on it "
          f"(and {drain['others']} not opted in{arrived}): cordoned and tainted {kubevirt.DRAIN_TAINT}; "
          f"{drain['created']} evacuation migrations (system-critical) created, {drain['completed']} completed, "
          f"{drain['failed']} failed, "
          f"the last ended at {seconds(drain['evacuated_in'])}, {done}; {drain['peak_running']} running from it at "
          f"once at most, {drain['peak_waiting']} waiting their turn at most; {drain['left_on_it']} left on it "
          f"(not live-migratable); migrations of the drain take {args.evacuation_delay_min:g}–"
          f"{args.evacuation_delay_max:g} s")
    shared = drain["share_managers"]
    delay = shared["delay"]
    back = f"back {delay[0]:.1f}–{delay[1]:.1f} s later" if delay else "none"
    stuck = f"; LEFT UNSCHEDULABLE: {', '.join(shared['stuck'])}" if shared["stuck"] else "; 0 left unschedulable"
    print(f"share-managers: {shared['evicted']} evicted from {node} as the drain began, {back} through the webhook's "
          f"share-manager rule ({shared['back']} placed again{stuck}); of the {shared['opted_in']} serving opted-in "
          f"VMs, back while their VM was: {counted(shared['while'])}")
    examples = shared["examples"]
    decisions = sorted(shared["decisions"].items(), key=lambda kv: -kv[1])
    print("  the rule's answers: " + "; ".join(f"{n} {what} (e.g. \"{examples.get(what, '')[:110]}\")"
                                              for what, n in decisions))
    unreachable = (" (" + ", ".join(f"{n} on {where}" for where, n in sorted(shared["unreachable_nodes"].items()))
                   + ")") if shared["unreachable_nodes"] else ""
    print(f"  placed: {counted(shared['landed'])}{unreachable}")
    print(f"the drain's VMs when it was done: {sum(drain.get('apart_when_done', {}).values())} apart "
          f"({counted(drain.get('apart_when_done', {}))}); {drain['evacuated']} evacuated, {drain['back_by_drain']} "
          "of them onto their storage node")
    apart = drain["apart"]
    holds = collections.Counter(a.get("hold") or "none" for a in apart)
    print(f"the drain's VMs apart at the end: {len(apart)}, held by the keeper as: {counted(dict(holds))}")
    for one in apart:
        never = f"; never: {one['never']}" if one["never"] else ""
        never += "; a migration of ours failed: it backs off" if one["failed"] else ""
        print(f"  {one['vm']} on {one['node']}, storage on {one['storage']}: {one.get('hold') or 'no hold'} "
              f"({one.get('decision', '')[:140]}){never}")
    print(f"the drain's VMs no migration can bring next to their storage (the storage node cannot take their "
          f"migration target): {drain['never']}")
    print(f"keeper migrations of the drain's {drain['drained_vms']} VMs: {drain['keeper_migrations']} "
          f"({drain['keeper_moved']} VMs moved again, at most {drain['keeper_most']} each)")
    spent = drain["vm_seconds"]
    print(f"VM-seconds apart of the drain's VMs, from its start to the end of the run ({spent['span']:.1f} s): "
          f"{spent['total']:.0f} ({spent['during']:.0f} until the drain was done; {spent['forever']:.0f} by the "
          f"{drain['never']} apart for good)")


def print_targets(got: dict[str, Any]) -> None:
    admissions = got["admissions"]
    spent = ", ".join(f"{rule} {n} in {admissions['seconds'].get(rule, 0.0) * 1000 / n:.0f} ms each"
                      for rule, n in sorted(admissions["answered"].items()))
    print(f"migration target pods through the webhook: {counted(got['targets'])}; the webhook's rules in the "
          f"simulation: {spent} (CPU of the simulation's process, on the cluster as it was)")


def print_simulation(args: argparse.Namespace, got: dict[str, Any]) -> None:
    nodes = got["nodes"]
    print(f"keeper: {got['vmis']} opted-in VMIs on {sum(nodes.values())} nodes ({nodes['unready']} not Ready, "
          f"{nodes['cordoned']} cordoned); {got['not_opted_in']} VMs not opted in, {args.foreign} migrations of "
          f"theirs kept under way by someone else; migrations take {args.delay_min:g}–{args.delay_max:g} s, "
          f"KubeVirt runs {kubevirt.PARALLEL} at once, {got['outbound_limit']} from one node", flush=True)
    print(f"CPU generations: {counted(got['cpu_nodes'])} nodes; the opted-in VMs run machine types "
          f"{counted(got['machines'])}")
    later = (kubevirt.CORDONED_LATER, kubevirt.UNREADY_LATER)
    print(f"apart at start: {got['apart_at_start']}; movable: {got['movable_at_start']}; "
          f"never to be moved: {counted(got['held_at_start'])}")
    if got["lost_nodes"]:
        print("during the run: " + ", ".join(f"{node} {why}" for node, why in got["lost_nodes"].items()) + "; "
              + ", ".join(f"{got['held'].get(why, 0)} VMs waiting with their {why}" for why in later)
              + f": {got['movable']} movable left")
    drain = got["drain"]
    if drain:
        print_drain(args, drain)
    elif args.drain:
        print("drain: none (too few healthy nodes left)")
    failed = f", {got['failed']} failed" if got["failed"] else ""
    cancelled = f", {got['cancelled']} cancelled" if got["cancelled"] else ""
    print(f"migrations created: {got['created']} ({got['succeeded']} succeeded{failed}{cancelled}); brought back: "
          f"{got['brought_back']} of {got['movable']} movable" + (
              f"; {got['failed_apart']} whose migration failed or was cancelled back off (30 min, not retried)"
              if got["failed_apart"] else ""))
    print(f"migrations created that cannot be placed: {got['cannot_place']}; over a slot limit: {got['over_slots']} "
          f"(KubeVirt runs {got['outbound_limit']} per source node, {got['parallel']} in the cluster)")
    unplaceable = got["unplaceable"]
    ended = [u["after"] for u in unplaceable if u["after"] is not None]
    words = {"cancelled": "cancelled by the keeper", "timed out": "failed at KubeVirt's timeout (our annotation)"}
    how = collections.Counter(words.get(u["how"], u["how"] or "still waiting") for u in unplaceable)
    print(f"unplaceable target pods of ours: {len(unplaceable)} ({counted(dict(how))}); ended at most "
          + (f"{max(ended):.2f} s" if ended else "-") + f" after they became unschedulable (keeper's threshold "
          f"{args.unplaceable:g} s, a pass every {args.period:g} s: within {cancel_bound(args):g} s); others' "
          f"unschedulable: {got['foreign_unplaceable']}")
    print(f"peak in flight: ours {got['peak_in_flight_ours']} (limit {args.max_inflight}), all "
          f"{got['peak_in_flight_all']} ({got['peak_running']} running at once at most), from one node "
          f"{got['peak_outbound']}")
    passes = got["passes"]
    full = [p["cpu"] for p in passes if p["seen"] == got["vmis"] and not p["note"]]
    leaders = f", {got['leaders']} leaders" if got["leaders"] > 1 else ""
    print(f"passes: {len(passes)} in {got['seconds']:.1f} s{leaders}")
    if full:
        print(f"keeper CPU per full pass ({got['vmis']} VMIs): median {milliseconds(statistics.median(full))}, "
              f"max {milliseconds(max(full))} (first {milliseconds(full[0])}, last {milliseconds(full[-1])}; "
              f"{len(full)} passes)")
    most: dict[str, int] = {}
    for p in passes:
        for why, n in p["held"].items():
            most[why] = max(most.get(why, 0), n)
    print("held by the keeper during the run (most VMs in one pass): " + counted(most))
    last = passes[-1]["held"] if passes else {}
    print("held in the last pass: " + counted(last))
    if got["timed_out"]:
        print(f"NOT SETTLED within {args.timeout:g} s: {got['left_apart']} movable VMs still apart, "
              f"{got['in_flight_ours']} of our migrations in flight")
    if got["raced"]:
        print(f"created within {kubevirt.GRACE.total_seconds():g} s of a change they break (raced the watch, "
              f"not counted): {len(got['raced'])}")
        for race in got["raced"][:5]:
            print(f"  {race}")
    print_targets(got)
    print(f"invariant violations: {len(got['violations'])}")
    for violation in got["violations"][:20]:
        print(f"  {violation}")


# --------------------------------------------------------------------------- the memory figure


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of one metric on a /metrics page, by their labels as written."""
    found = {}
    for line in text.splitlines():
        match = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)$", line)
        if match:
            found[match.group(1) or ""] = float(match.group(2))
    return found


SHAPES = {"apart": 1, "beside": 0, "half": 2}  # --shapes: every K-th VM apart from its storage (0: none)
SHAPE_WORDS = {"apart": "every VM apart (a first install)", "beside": "every VM beside its storage (a settled cluster)",
               "half": "half the VMs apart"}
LEASE_NAMESPACE = "colocate-bench"


@contextlib.contextmanager
def emulated_keeper_cluster(cpu: int | None, size: sized.Size, apart_every: int) -> Iterator[str]:
    """The API URL of an emulator serving `size` with every `apart_every`-th VM apart from its storage."""
    command = [sys.executable, "-m", "bench.emulator", "--pvcs", str(size.vms), "--share-managers", str(size.vms),
               "--pods", str(size.pods), "--nodes", str(size.nodes), "--paginate", "--vmis", str(size.vms),
               "--vmis-apart-every", str(apart_every)]
    with process(command, cpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the emulator did not start")
        yield line.split()[0]


def memory_of_keeper(work: Path, pvcs: int, share_managers: int, pods: int, other_pods: int,
                     vmis: int, passes: int, nodes: int = 0) -> dict[str, Any]:
    """RSS of `keep --keep report` (the keeper's pod) against the emulator: its term's caches
    synced, the keeper's first pass made (each VMI counted in `colocate_vms`), idle."""
    server_cpu, emulator_cpu = cores()
    with emulated_cluster(emulator_cpu, pvcs, share_managers, pods, False, other_pods, vmis, nodes) as (api, _):
        return keeper_memory(api, work, server_cpu, vmis, passes)


def scrape(ops: str) -> str:
    with urllib.request.urlopen(f"{ops}/metrics", timeout=10) as response:
        return response.read().decode()


@contextlib.contextmanager
def keeper_process(api: str, work: Path, cpu: int | None, keep: str) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """`keep` on the emulator at `api`, logging to `keep-<mode>.log`: the process, its ops URL, its log."""
    kubeconfig = kubeconfig_for(api, work / f"kubeconfig-keep-{keep}")
    ops_port = free_port()
    log = work / f"keep-{keep}.log"
    command = [sys.executable, "-m", "webhook", "keep", "--kubeconfig", str(kubeconfig), "--metrics-host", "127.0.0.1",
               "--metrics-port", str(ops_port), "--events", "off", "--keep", keep, "--lease-namespace", LEASE_NAMESPACE]
    with log.open("w") as stderr, process(command, cpu, stderr=stderr) as proc:
        yield proc, f"http://127.0.0.1:{ops_port}", log


def next_pass(ops: str, log: Path, after: dict[str, float], began: float) -> dict[str, float]:
    """`colocate_keeper_pass_seconds` ({"wall": s, "cpu": s}) once a pass other than `after` has ended."""
    while True:
        figures = {re.sub(r'.*clock="([^"]*)".*', r"\1", k): v
                   for k, v in samples(scrape(ops), "colocate_keeper_pass_seconds").items()}
        if figures and all(figures.get(clock) != after.get(clock) for clock in ("wall", "cpu")):
            return figures  # both set by the pass that ended (a scrape between the two sees one)
        if time.monotonic() - began > PASS_WITHIN:
            raise SystemExit(f"the keeper made no pass within {PASS_WITHIN:g} s (see {log})")
        time.sleep(0.5)


class RssSamples(sized.Sampling):
    """The RSS of process `pid` every RSS_PERIOD from a thread while the block runs: `before(moment)`
    is the last sample taken before then (a wall-clock time)."""

    period = RSS_PERIOD

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid, self.taken = pid, []  # (time.time(), MiB)

    def step(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.taken.append((time.time(), process_kib(self.pid, "VmRSS") / 1024))

    def before(self, moment: float) -> float | None:
        return next((mib for at, mib in reversed(self.taken) if at < moment), None)


class LeaseRenewals(sized.Sampling):
    """The keeper's Lease read from the API every RSS_PERIOD: each renewal (`spec.renewTime`, as the keeper
    wrote it) and each holder seen. `worst()`: the longest from one renewal to the next (the keeper renews
    every retry period, 2 s; a leader that has not renewed for 10 s stops acting)."""

    period = RSS_PERIOD

    def __init__(self, api: str, name: str = "kubevirt-colocate-keeper") -> None:
        super().__init__()
        self.url = f"{api}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"
        self.renewals: list[datetime.datetime] = []
        self.holders: list[str] = []

    def step(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=5) as answer:
                spec = json.loads(answer.read()).get("spec") or {}
        except (OSError, ValueError):
            return
        renewed = datetime.datetime.fromisoformat(str(spec.get("renewTime") or "").replace("Z", "+00:00") or "1970-01-01")
        holder = str(spec.get("holderIdentity") or "")
        if holder and (not self.holders or self.holders[-1] != holder):
            self.holders.append(holder)
        if holder and (not self.renewals or renewed > self.renewals[-1]):
            self.renewals.append(renewed)

    def worst(self) -> float:
        return max(((b - a).total_seconds() for a, b in zip(self.renewals, self.renewals[1:])), default=0.0)


def synced_at(log: Path, by: float) -> float:
    """When the keeper's caches were synced (its first pass begins then): the wall-clock time of the
    last "cache synced" line of `log` before `by`."""
    times = [datetime.datetime.fromisoformat(entry["time"]).timestamp()
             for entry in log_entries(log) if entry.get("msg") == "cache synced"]
    return max((t for t in times if t < by), default=by)


def log_entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def log_lines(log: Path) -> int:
    with log.open("rb") as lines:
        return sum(1 for _ in lines)


def keeper_memory(api: str, work: Path, cpu: int | None, vmis: int, passes: int, keep: str = "report") -> dict[str, Any]:
    """RSS of the keeper's process once its caches have synced, once idle after its first pass and after
    each of `passes` more (a pass every 30 s): a pass leaves more behind than it keeps. Each pass's time, CPU
    and log lines, the peak RSS, the Lease's renewals and the slowest probe answers throughout."""
    with keeper_process(api, work, cpu, keep) as (proc, ops, log), sized.SlowestProbes(ops) as probes, \
            RssSamples(proc.pid) as rss, LeaseRenewals(api) as lease:
        began = time.monotonic()
        wait_for(f"{ops}/readyz", work)
        made = [next_pass(ops, log, {}, began)]
        synced = rss.before(synced_at(log, time.time()))
        passed = time.monotonic() - began
        lines = [log_lines(log)]
        states = samples(scrape(ops), "colocate_vms")
        idle(proc.pid)
        first_rss = process_kib(proc.pid, "VmRSS") / 1024
        while len(made) < passes:
            made.append(next_pass(ops, log, made[-1], time.monotonic()))
            lines.append(log_lines(log))
        idle(proc.pid)
        counts = synced_objects(log)
        entries = log_entries(log)
        lost = [e.get("why") for e in entries if e.get("msg") == "keeper stopped leading" and e.get("why") != "shutting down"]
        return {"rss_mib": process_kib(proc.pid, "VmRSS") / 1024, "peak_mib": process_kib(proc.pid, "VmHWM") / 1024,
                "synced_mib": synced, "first_pass_rss_mib": first_rss, "first_pass_seconds": passed, "objects": counts,
                "passes": made, "first_pass": made[0], "second_pass": made[-1], "probes": probes,
                "log_lines": [b - a for a, b in zip([0, *lines], lines)], "lease_worst": lease.worst(),
                "renewals": len(lease.renewals), "lost": lost,
                "terms": sum(1 for e in entries if e.get("msg") == "keeper leading"),
                "states": {re.sub(r'.*state="([^"]*)".*', r"\1", k): int(v) for k, v in states.items()}}


def size_of_keeper(work: Path, size: sized.Size, shape: str, keep: str, passes: int) -> dict[str, Any]:
    """`keeper_memory` on `size` in `shape` (SHAPES), the keeper in mode `keep`."""
    server_cpu, emulator_cpu = cores()
    with emulated_keeper_cluster(emulator_cpu, size, SHAPES[shape]) as api:
        return keeper_memory(api, work, server_cpu, size.vms, passes, keep)


def memory_figure(args: argparse.Namespace, work: Path) -> list[tuple[str, bool]]:
    """The keeper's memory, passes and probes on the cluster `--size` (in each of `--shapes` and `--modes`) or
    `--memory` says: printed, and the targets."""
    if not args.size:
        pvcs, share_managers, pods, other_pods = ([int(n) for n in args.memory.split(",")] + [0])[:4]
        print(f"memory: `keep --keep report` holding {pvcs} PVCs, {pvcs} PVs, {share_managers} ShareManagers, "
              f"{pods} pods of VMs and share-managers, {other_pods} other pods, {args.memory_vmis} VMIs "
              f"(kubefake's apiserver in its own process) ...", flush=True)
        report = memory_of_keeper(work, pvcs, share_managers, pods, other_pods, args.memory_vmis, args.memory_passes)
        return print_memory(args, report)
    checks = []
    for shape in args.shapes.split(","):
        for keep in args.modes.split(","):
            print(f"memory: `keep --keep {keep}` holding {args.size}, {SHAPE_WORDS[shape]} (kubefake's apiserver in "
                  "its own process) ...", flush=True)
            report = size_of_keeper(work, args.size, shape, keep, args.memory_passes)
            checks += [(f"{shape}, {keep}: {name}", ok) for name, ok in print_memory(args, report)]
    return checks


def print_memory(args: argparse.Namespace, report: dict[str, Any]) -> list[tuple[str, bool]]:
    after = ("after the keeper's last pass ({:.1f} MiB after its first; ".format(report["first_pass_rss_mib"])
             if args.memory_passes > 1 else "after the keeper's first pass (")
    limit = sized.memory_limit_mib("keeper")
    first, second = report["first_pass"], report["second_pass"]
    print(f"RSS of the keeper's process {report['rss_mib']:.1f} MiB {after}peak {report['peak_mib']:.1f} MiB; "
          f"the chart's limit {limit:.0f} MiB); first pass done at {report['first_pass_seconds']:.1f} s")
    synced = report["synced_mib"]
    print(f"RSS once its caches had synced, before its first pass: {synced:.1f} MiB (the peak "
          f"{report['peak_mib'] / synced - 1:.0%} over it)" if synced else "RSS once its caches had synced: not sampled")
    print("passes: " + ", ".join(f"{n} {p['wall']:.1f} s ({p['cpu']:.1f} s of CPU)"
                                 for n, p in zip(("the first", *(f"#{k}" for k in range(2, 100))), report["passes"])))
    print("log lines: " + ", ".join(f"{n}" for n in report["log_lines"]) + " (up to the first pass's end, then each pass's)")
    lost = "; ".join(report["lost"]) or "none"
    print(f"lease: {report['renewals']} renewals seen, the longest from one to the next {report['lease_worst']:.1f} s "
          f"(every 2 s; 10 s unrenewed stops the leader); terms {report['terms']}, lost: {lost}")
    print("cached: " + ", ".join(f"{n} {r}" for r, n in report["objects"].items()))
    print("the keeper's pass: " + ", ".join(f"{n} {state}" for state, n in report["states"].items()))
    print(f"slowest probes: {report['probes'].said()}")
    later = [p["cpu"] for p in report["passes"][1:]] or [second["cpu"]]
    return [(f"peak RSS ≤ {sized.SHARE_OF_LIMIT:.0%} of the limit", report["peak_mib"] <= sized.SHARE_OF_LIMIT * limit),
            (f"first pass ≤ {TARGETS['first_pass_cpu']:g} s CPU", first["cpu"] <= TARGETS["first_pass_cpu"]),
            (f"next pass ≤ {TARGETS['pass_cpu']:g} s CPU", max(later) <= TARGETS["pass_cpu"]),
            ("probes ≤ 1 s", report["probes"].worst() <= 1.0),
            ("no lease lost", not report["lost"] and report["terms"] == 1)]


# --------------------------------------------------------------------------- the command


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.keeper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    kubevirt.add_layout_flags(parser)
    parser.add_argument("--keep-after", type=float, default=KEEP_AFTER,
                        help=f"the keeper's --keep-after (default {KEEP_AFTER:g}: see above)")
    parser.add_argument("--max-per-day", type=int, default=2, help="the keeper's --keep-max-per-day (default 2)")
    parser.add_argument("--handover", action=argparse.BooleanOptionalAction, default=True,
                        help="halfway, a new leader takes over, remembering nothing (default on)")
    parser.add_argument("--period", type=float, default=0.25, help="seconds between the starts of passes (default 0.25)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (default 300)")
    parser.add_argument("--log", type=Path, help="the keeper's JSON log lines to this file")
    parser.add_argument("--memory", default="50000,10000,20000", metavar="PVCS,SHARE_MANAGERS,PODS[,OTHER_PODS]",
                        help="cluster of the memory figure (default 50000,10000,20000)")
    parser.add_argument("--memory-vmis", type=int, default=20000, help="VMIs of the memory figure (default 20000)")
    parser.add_argument("--memory-passes", type=int, default=2,
                        help="measure after the keeper's first pass, or after this many (default 2)")
    parser.add_argument("--shapes", default="apart,beside",
                        help="with --size: the clusters played, each in turn: apart (every VM apart from its storage, "
                             "as at a first install), beside (every VM beside it, settled), half (default apart,beside)")
    parser.add_argument("--modes", default="report",
                        help="with --size: the keeper's modes played on each shape, report and/or migrate (default report)")
    parser.add_argument("--size", type=sized.Size.parse, metavar="NODES,VMS",
                        help="the memory figure's cluster instead: VMS VMIs with one RWX disk each on NODES nodes "
                             f"(Kubernetes' limit: {sized.KUBERNETES_LIMIT}); targets: peak RSS within "
                             f"{sized.SHARE_OF_LIMIT:.0%}% of the chart's memory limit, the first pass within "
                             f"{TARGETS['first_pass_cpu']:g} s of CPU, the next within {TARGETS['pass_cpu']:g} s, "
                             "probes within 1 s")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args()
    from webhook.tools import certs

    failed = False
    checks: list[tuple[str, bool]] = []
    with tempfile.TemporaryDirectory(prefix="colocate-bench-keeper-") as tmp:
        work = Path(tmp)
        if not args.memory_only:
            print(f"--- --keep-after {args.keep_after:g} ---", flush=True)
            got = run_simulation(args, work)
            print_simulation(args, got)
            found = simulation_checks(args, got)
            print("targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok, bound in found if bound))
            goals = [(name, ok) for name, ok, bound in found if not bound]
            if goals:
                print("goals (reported, not in the exit status): "
                      + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in goals))
            failed = failed or not all(ok for _, ok, bound in found if bound)
        if not args.skip_memory:
            certs.write(certs.generate(["localhost", "127.0.0.1"], days=1), work)
            checks += memory_figure(args, work)
    if checks:
        print("targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in checks))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
