"""A fake apiserver (kubefake.apiserver) in a process of its own, serving a synthetic cluster.

Prints its URL and a control URL on stdout, then serves until stdin closes. With
`--paginate`, lists honour `limit`/`continue` and `labelSelector` as the apiserver does
(otherwise it returns everything at once), so large collections are read page by page as
from a real cluster.

The control server: `GET /requests` counts the API requests served other than watches;
`POST /late` writes the `late-*` claims and volumes without watch events, so the webhook's
caches never see them and must read them with GETs.

Served bare (kubefake.apiserver `serve`): kmock keeps every request it serves and matches each
new one against that whole history and every reaction (kmock 0.8, `View.__contains__`), so a
benchmark served by it would slow down as it runs; here kmock only holds the objects.

With `--vmis N`, KubeVirt too (for the keeper in `serve`): N running opted-in VMIs, the
first ones those of the cluster's launcher pods, every `--vmis-apart-every`-th of those
moved with its pod to the next node, apart from its storage; migrations and Leases are
served (names from generateName, `dryRun=All` never stored, PUT), as they are in any run.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import itertools
import json
import os
import sys
import uuid
from typing import Any

from aiohttp import web

from kubefake import objects
from kubefake.apiserver import Apiserver, Call
from kubefake.apiserver import serve as serve_api
from webhook.kinds import LEASE, POD, VMI, VMIM
from webhook.kinds import RULE_RESOURCES as RESOURCES

from . import cluster

BENCH_NS = "vms-bench"
BENCH_CLAIMS = ["bench-disk-0", "bench-disk-1"]
LATE_CLAIMS = ["late-disk-0", "late-disk-1"]
BENCH_NODE = "node-bench"


def claim_objects(claim: str) -> list[dict[str, Any]]:
    return [objects.pvc(claim, f"pvc-{claim}", namespace=BENCH_NS), objects.pv(claim, f"pvc-{claim}", namespace=BENCH_NS)]


def share_manager_objects(claim: str) -> list[dict[str, Any]]:
    return [objects.share_manager(f"pvc-{claim}", BENCH_NODE), objects.share_manager_pod(f"pvc-{claim}", BENCH_NODE)]


def bench_objects() -> list[dict[str, Any]]:
    """The benchmark's two disks, served from BENCH_NODE, and the share-managers of the late ones."""
    found = [objects.node(BENCH_NODE, allocatable=objects.LARGE_ALLOCATABLE)]
    for claim in BENCH_CLAIMS:
        found += claim_objects(claim) + share_manager_objects(claim)
    for claim in LATE_CLAIMS:
        found += share_manager_objects(claim)
    return found


def cluster_objects(pvcs: int, share_managers: int, pods: int, nodes: int = 20, bench_disks: bool = True,
                    other_pods: int = 0) -> list[dict[str, Any]]:
    """Every object the emulator serves: the synthetic cluster, and the benchmark's disks."""
    found = list(cluster.cluster(pvcs, share_managers, pods, nodes, other_pods))
    return found + bench_objects() if bench_disks else found


def add_kubevirt(emulator: Emulator, vmis: int, nodes: int, share_managers: int, apart_every: int) -> tuple[int, int]:
    """Serve VMIs, migrations and Leases, and put `vmis` running opted-in VMIs: first one per
    launcher pod (its uid, node and first claim), every `apart_every`-th of those moved with its
    pod to the next node, so apart from its storage; then VMIs without pods, each next to the
    share-manager of its one claim. (objects put, VMIs apart)."""
    for resource in (VMI, VMIM, LEASE):
        emulator.apiserver.resources[resource] = {}
        emulator.by_kind[(resource.api_version, resource.kind)] = resource
    launchers = sorted((obj.raw for (resource, _, _), obj in emulator.apiserver.objects.items() if resource == POD
                        and (obj.raw["metadata"].get("labels") or {}).get("kubevirt.io") == "virt-launcher"),
                       key=lambda pod: pod["metadata"]["name"])
    put = apart = 0
    for k in range(vmis):
        if k < len(launchers):
            pod = launchers[k]
            meta, labels = pod["metadata"], pod["metadata"]["labels"]
            name, namespace, uid = labels["kubevirt.io/vm"], meta["namespace"], labels["kubevirt.io/created-by"]
            claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                      if "persistentVolumeClaim" in v][:1]  # the second disk is served from another node here
            node = pod["spec"]["nodeName"]
            if apart_every and k % apart_every == 0:
                node = cluster.node_name(int(node.rsplit("-", 1)[1]) + 1, nodes)
                moved = copy.deepcopy(pod)
                moved["spec"]["nodeName"] = node
                emulator.put(moved)
                apart += 1
        else:
            a = k % max(1, share_managers)
            name, namespace, uid = f"vm-{k:06d}", f"vms-{a % 100:02d}", str(uuid.UUID(int=k, version=4))
            claims, node = [f"disk-{a:06d}"], cluster.node_name(a, nodes)
        emulator.put(objects.vmi(name, node, *claims, namespace=namespace, uid=uid))
        put += 1
    return put, apart


class Emulator:
    """The apiserver of a synthetic cluster, counting the API requests it serves other than watches."""

    def __init__(self, apiserver: Apiserver, paginate: bool):
        self.apiserver = apiserver
        self.paginate = paginate
        self.served = 0
        self.by_kind = {(r.api_version, r.kind): r for r in RESOURCES}
        self.lists: dict[str, list[dict[str, Any]]] = {}
        self.tokens = itertools.count()
        for resource in RESOURCES:
            apiserver.resources[resource] = {}

    def count(self, call: Call) -> None:
        if call.params.get("watch") != "true":
            self.served += 1

    async def answer(self, call: Call) -> Any:
        if self.paginate and call.method == "GET" and call.name is None and call.params.get("watch") != "true":
            return self.page(call)
        return await self.apiserver.answer(call)

    def put(self, obj: dict[str, Any]) -> None:
        resource = self.by_kind[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        self.apiserver.objects[resource, meta.get("namespace") if resource.namespaced else None, meta["name"]] = obj

    def page(self, request: Call) -> dict[str, Any]:
        limit = int(request.params.get("limit") or 0)
        token = request.params.get("continue")
        if token:
            list_id, _, offset_text = token.partition(":")
            items, offset = self.lists[list_id], int(offset_text)
        else:
            wanted = dict(part.split("=", 1) for part in (request.params.get("labelSelector") or "").split(",") if part)
            items = [
                obj.raw for (resource, namespace, _), obj in self.apiserver.objects.items()
                if resource == request.resource and not obj.deleted
                and (request.namespace is None or namespace == request.namespace)
                and all((obj.raw.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
            ]
            list_id, offset = str(next(self.tokens)), 0
            self.lists[list_id] = items
        end = offset + limit if limit else len(items)
        metadata = {"resourceVersion": str(self.apiserver.versions.last)}  # the watch resumes from it
        if end < len(items):
            metadata["continue"] = f"{list_id}:{end}"
        else:
            self.lists.pop(list_id, None)
        return {"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": items[offset:end]}

    def control(self) -> web.Application:
        async def requests(request: web.Request) -> web.Response:
            return web.json_response({"requests": self.served})

        async def late(request: web.Request) -> web.Response:
            for obj in (o for claim in LATE_CLAIMS for o in claim_objects(claim)):
                self.put(obj)  # behind the watches' back: no events
            return web.json_response({"added": len(LATE_CLAIMS)})

        app = web.Application()
        app.router.add_get("/requests", requests)
        app.router.add_post("/late", late)
        return app


async def control_site(app: web.Application) -> web.AppRunner:
    """The control server on loopback, started."""
    control = web.AppRunner(app, access_log=None)
    await control.setup()
    await web.TCPSite(control, "127.0.0.1", 0).start()
    return control


def url(runner: web.AppRunner) -> str:
    return f"http://127.0.0.1:{runner.addresses[0][1]}"


async def serve(args: argparse.Namespace) -> None:
    emulator = Emulator(Apiserver(), args.paginate)
    api = await serve_api(emulator.apiserver, emulator.answer, emulator.count)
    control = await control_site(emulator.control())
    try:
        count = 0
        for obj in cluster_objects(args.pvcs, args.share_managers, args.pods, args.nodes, args.bench_disks,
                                   args.other_pods):
            emulator.put(obj)
            count += 1
        if args.vmis:
            added, _ = add_kubevirt(emulator, args.vmis, args.nodes, args.share_managers, args.vmis_apart_every)
            count += added
        if args.objects:
            with open(args.objects, encoding="utf-8") as lines:
                for line in lines:
                    emulator.put(json.loads(line))
                    count += 1
        # The apiserver's collector runs beside its handlers; Python's full collection over the millions of
        # objects stored here held every request, a Lease's renewal too, for 11 s (measured at 75,000 VMs).
        gc.freeze()
        print(f"{url(api)} {url(control)} {count}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    finally:
        await control.cleanup()
        await api.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.emulator")
    parser.add_argument("--pvcs", type=int, default=200)
    parser.add_argument("--share-managers", type=int, default=100)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--other-pods", type=int, default=0, help="pods of other workloads")
    parser.add_argument("--bench-disks", action="store_true", help="add the benchmark's two disks and late claims")
    parser.add_argument("--paginate", action="store_true", help="serve lists in pages (limit/continue)")
    parser.add_argument("--vmis", type=int, default=0, help="running opted-in VMIs (and serve migrations, Leases)")
    parser.add_argument("--objects", metavar="FILE", help="serve these objects too (JSON, one per line)")
    parser.add_argument("--vmis-apart-every", type=int, default=10, metavar="K",
                        help="every K-th VMI with a launcher pod runs apart from its storage (default 10)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
