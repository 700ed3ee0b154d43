"""The admission's own CPU, in one process, without HTTP or TLS.

What `serve` does for one review once aiohttp has read its body (`server.Admissions.answer`:
parse, look-ups, never-strand checks, decision, patch, patch check, envelope, metrics, the
JSON log line written to a line-buffered file as stderr would be), on the event loop `serve`
runs on. The store is a `WatchedClusterStore` holding what the benchmark's emulator serves,
delivered through its informers as list events, the way the reflectors deliver them; it has
no API client, so an admission that missed the caches could not pin. kube-scheduler's checks
(`rules.fit.why_not_fit`) are timed apart, called as the admission calls them: on the pin's
node, with the store's own view of the cluster.

`python -m bench.inprocess` prints the figures on their own; `python -m bench` prints them
beside the HTTP figures.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from webhook import logs
from webhook.admission import server
from webhook.process.loop import new_event_loop
from webhook.stores.cache import WatchedClusterStore
from webhook.cluster.reflector import Event, EventType
from webhook.config import Settings
from webhook.kinds import NODE
from webhook.rules import fit

from kubefake import objects

from . import cluster, emulator


def filled_store(settings: Settings, pvcs: int, share_managers: int, pods: int, *,
                 migrated: bool = False) -> WatchedClusterStore:
    """The caches of `serve` against the admission benchmark's emulator, synced; with `migrated`,
    every VM as after a live migration (`as_migrated`)."""
    found = list(emulator.cluster_objects(pvcs, share_managers, pods))
    for obj in found if migrated else ():
        as_migrated(obj)
    return store_of(settings, found)


def store_of(settings: Settings, found: Iterable[dict[str, Any]]) -> WatchedClusterStore:
    """The caches of `serve` holding `found`, delivered through their informers as a list, synced."""
    store = WatchedClusterStore(None, settings)
    by_kind: dict[str, list[Any]] = {}
    for informer in store.informers:
        by_kind.setdefault(informer.resource.kind, []).append(informer)
    for obj in found:
        for informer in by_kind.get(obj["kind"], ()):
            informer.apply(Event(EventType.LISTED, obj))
    for informer in store.informers:
        informer.apply(Event(EventType.SYNCED, seconds=0.0))
    return store


def as_migrated(obj: dict[str, Any]) -> None:
    """A virt-launcher pod as KubeVirt creates a migration target pod, which the VM runs in once
    migrated: a required anti-affinity toward its own VMI's pods. After the workload updates of
    a KubeVirt upgrade, every VM's pod has one."""
    labels = obj["metadata"].get("labels") or {}
    if obj["kind"] != "Pod" or labels.get("kubevirt.io") != "virt-launcher":
        return
    term = {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": labels["kubevirt.io/created-by"]}},
            "topologyKey": "kubernetes.io/hostname"}
    obj["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}


@contextlib.contextmanager
def logging_to(path: Path) -> Iterator[logging.Handler]:
    """The log setup of `serve`, writing to a line-buffered file (stderr is line-buffered)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    with path.open("w", buffering=1, encoding="utf-8") as stream:
        logs.setup("info")
        handler = root.handlers[0]
        handler.setStream(stream)
        try:
            yield handler
        finally:
            handler.flush()
            root.handlers[:], _ = saved
            root.setLevel(saved[1])


def review_bytes() -> bytes:
    """The review the HTTP benchmark sends: the example VM pod with the two benchmark disks."""
    return json.dumps(cluster.two_disk_review(emulator.BENCH_NS, emulator.BENCH_CLAIMS)).encode()


async def cpu_per_admission(endpoint: server.Admissions, raw: bytes, count: int, log: logging.Handler) -> float:
    """CPU time per admission (µs) over `count` admissions back to back, as in a burst of VM
    starts, each with its log line written as `serve` writes it."""
    began = time.process_time()
    for _ in range(count):
        await endpoint.answer(raw, endpoint.deadline(10.0), time.monotonic())
    log.flush()
    return (time.process_time() - began) * 1e6 / count


async def pinned(endpoint: server.Admissions, raw: bytes) -> None:
    answer = json.loads(await endpoint.answer(raw, endpoint.deadline(10.0), time.monotonic()))
    if "patch" not in answer["response"]:
        raise SystemExit(f"the in-process admission did not pin: {answer}")


async def cpu_per_check(store: WatchedClusterStore, raw: bytes, count: int) -> float:
    """CPU time (µs) of kube-scheduler's checks of the review's pod on the node it is pinned to,
    over `count` calls, with the view of the cluster the admission gets from the store."""
    pod = json.loads(raw)["request"]["object"]
    node = store.peek(NODE, None, emulator.BENCH_NODE)[1]
    view = await store.fit_view(emulator.BENCH_NS, timeout=10.0)
    if node is None or view is None or fit.why_not_fit(pod, emulator.BENCH_NS, node, view) is not None:
        raise SystemExit(f"the checks do not pass the benchmark's pod on {emulator.BENCH_NODE}")
    began = time.process_time()
    for _ in range(count):
        fit.why_not_fit(pod, emulator.BENCH_NS, node, view)
    return (time.process_time() - began) * 1e6 / count


DRAINED = "node-drained"


def drained_store(settings: Settings, pvcs: int, share_managers: int, pods: int) -> WatchedClusterStore:
    """`filled_store` with `--aim-evacuations on`, and a VM on a cordoned node whose two disks (the
    benchmark's) are served from the benchmark's node: its evacuation is aimed there."""
    store = filled_store(settings, pvcs, share_managers, pods)
    the_vmi = objects.vmi("bench-vm", DRAINED, *emulator.BENCH_CLAIMS, namespace=emulator.BENCH_NS)
    extra = [objects.node(DRAINED, unschedulable=True), the_vmi, objects.launcher_pod_of(the_vmi)]
    by_kind = {informer.resource.kind: informer for informer in store.informers}
    for obj in extra:
        by_kind[obj["kind"]].apply(Event(EventType.ADDED, obj))
    return store


def migration_review_bytes() -> bytes:
    """KubeVirt's evacuation of that VM, as virt-controller creates it."""
    return json.dumps(objects.migration_review(objects.evacuation("bench-vm", DRAINED, namespace=emulator.BENCH_NS),
                                               namespace=emulator.BENCH_NS)).encode()


def migration_admissions(count: int, rounds: int) -> float:
    """µs of CPU per admission of a drain's evacuation, aimed (median of `rounds`)."""
    settings = Settings(aim_evacuations=True)
    endpoint = server.Admissions(drained_store(settings, 100, 50, 50), settings)
    raw = migration_review_bytes()
    with tempfile.TemporaryDirectory(prefix="colocate-inprocess-") as tmp, logging_to(Path(tmp) / "serve.log") as log:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(pinned(endpoint, raw))
            return statistics.median(runner.run(cpu_per_admission(endpoint, raw, count, log)) for _ in range(rounds))


def migrated_checks(count: int, rounds: int, vms: int) -> float:
    """kube-scheduler's checks (µs, median of `rounds`) on a cluster of `vms` VMs that have all
    migrated once (`as_migrated`) and as many share-manager pods."""
    store = filled_store(Settings(), 100, 50, 2 * vms, migrated=True)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return statistics.median(runner.run(cpu_per_check(store, review_bytes(), count)) for _ in range(rounds))


def measure(count: int = 1000, rounds: int = 21, pvcs: int = 100, share_managers: int = 50,
            pods: int = 50) -> dict[str, float]:
    """µs of CPU per admission: the whole path, kube-scheduler's checks within it, and the rest.

    The two are measured in pairs of rounds, in turn first, and medians are reported (of each,
    and of the difference within each pair): other work on the machine only ever adds time,
    in bursts, to some rounds of either."""
    settings = Settings()
    store = filled_store(settings, pvcs, share_managers, pods)
    endpoint = server.Admissions(store, settings)
    raw = review_bytes()
    whole, checks = [], []
    with tempfile.TemporaryDirectory(prefix="colocate-inprocess-") as tmp, logging_to(Path(tmp) / "serve.log") as log:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(pinned(endpoint, raw))
            runner.run(cpu_per_admission(endpoint, raw, count, log))  # warm up the caches and the interpreter
            for i in range(rounds):
                if i % 2:
                    checks.append(runner.run(cpu_per_check(store, raw, count)))
                    whole.append(runner.run(cpu_per_admission(endpoint, raw, count, log)))
                else:
                    whole.append(runner.run(cpu_per_admission(endpoint, raw, count, log)))
                    checks.append(runner.run(cpu_per_check(store, raw, count)))
    return {"admission_us": statistics.median(whole), "checks_us": statistics.median(checks),
            "without_checks_us": statistics.median(w - c for w, c in zip(whole, checks))}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="admissions per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=21, help="rounds of each; medians are printed (default 21)")
    parser.add_argument("--migrated-vms", type=int, default=10_000,
                        help="VMs of the cluster where every VM has migrated, for the checks alone (default 10000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (for `python -m bench`)")
    args = parser.parse_args()
    figures = measure(args.count, args.rounds)
    figures["migrated_vms"] = args.migrated_vms
    figures["checks_migrated_us"] = migrated_checks(args.count, args.rounds, args.migrated_vms)
    figures["evacuation_us"] = migration_admissions(args.count, args.rounds)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"in-process admission: {figures['admission_us']:.1f} µs CPU; without kube-scheduler's checks "
          f"{figures['without_checks_us']:.1f} µs (the checks add {figures['checks_us']:.1f} µs)")
    print(f"kube-scheduler's checks where all {args.migrated_vms} VMs have migrated (KubeVirt's anti-affinity on "
          f"each VM's pod): {figures['checks_migrated_us']:.1f} µs")
    print(f"in-process admission of a drain's evacuation, aimed (--aim-evacuations on): {figures['evacuation_us']:.1f} µs CPU")


if __name__ == "__main__":
    main()
