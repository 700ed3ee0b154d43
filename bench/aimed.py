"""What a drain's evacuations cost `serve --aim-evacuations on`, on the watch caches as `serve` fills
them, in one process without HTTP or TLS (`python -m bench.aimed --nodes 1000 --vms 15000 --drained 30`).

The cluster is bench.storm's: `--nodes` nodes with a production node's labels, `--vms` opted-in VMs
each beside its disk and migrated once; the first node cordoned with `--drained` of them on it, marked
by virt-api (status.evacuationNodeName), their share-managers evicted: every VM free to go to any node.
A burst is virt-controller's evacuation of those VMs, all created at once (evacuation.go `sync`), each
answered as `serve` answers it (`server.Admissions.answer`). Before each burst a pod is bound on another
node, as a live cluster changes between two drains' syncs, so each burst reads and plans the drain
anew. Printed: the CPU of the first burst, which scores every node's room for that size of VM, and of
the later ones (median of `--rounds`), and how many of each burst's evacuations were aimed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from kubefake import objects
from webhook.admission import server
from webhook.cluster.reflector import Event, EventType
from webhook.config import Settings
from webhook.process.loop import new_event_loop

from .inprocess import store_of
from .storm import DRAINED, VMS_NS, node_name, storm_cluster


async def burst(endpoint: server.Admissions, reviews: list[bytes]) -> tuple[float, int]:
    """CPU seconds of answering every review at once, and how many were aimed."""
    began = time.process_time()
    answers = await asyncio.gather(*(endpoint.answer(r, endpoint.deadline(10.0), time.monotonic()) for r in reviews))
    return time.process_time() - began, sum(1 for a in answers if "patch" in json.loads(a)["response"])


def measure(nodes: int, vms: int, drained: int, rounds: int) -> dict[str, float]:
    found, _, _ = storm_cluster(nodes, vms, drained, 0)
    marked = []
    for obj in found:
        if obj["kind"] == "VirtualMachineInstance" and obj["status"]["nodeName"] == DRAINED:
            obj["status"]["evacuationNodeName"] = DRAINED
            marked.append(obj["metadata"]["name"])
    settings = Settings(aim_evacuations=True)
    store = store_of(settings, found)
    pods = next(informer for informer in store.informers if informer.resource.kind == "Pod")
    endpoint = server.Admissions(store, settings)
    reviews = [json.dumps(objects.migration_review(objects.evacuation(vm, DRAINED, namespace=VMS_NS), namespace=VMS_NS,
                                                   uid=f"uid-{vm}")).encode() for vm in marked]
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        first, aimed = runner.run(burst(endpoint, reviews))
        later = []
        for i in range(rounds):
            pods.apply(Event(EventType.ADDED, objects.workload_pod(10_000 + i, node_name(1 + i % (nodes - 1)))))
            cpu, aimed_now = runner.run(burst(endpoint, reviews))
            later.append(cpu)
            aimed = min(aimed, aimed_now)
    return {"first_burst_ms": first * 1e3, "burst_ms": statistics.median(later) * 1e3, "evacuations": len(reviews),
            "aimed": aimed}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.aimed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--vms", type=int, default=15_000)
    parser.add_argument("--drained", type=int, default=30, help="VMs on the drained node (default 30)")
    parser.add_argument("--rounds", type=int, default=11, help="later bursts; their median is printed (default 11)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.nodes, args.vms, args.drained, args.rounds)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.nodes} nodes, {args.vms} VMs, a drain of {args.drained}: the first burst {figures['first_burst_ms']:.0f} ms "
          f"of CPU, each later one {figures['burst_ms']:.0f} ms; {figures['aimed']} of {figures['evacuations']} aimed")


if __name__ == "__main__":
    main()
