"""The drain storm through a real kube-apiserver: `python -m bench.storm --apiserver real`.

The cluster of `bench.storm` is created in etcd and kube-apiserver 1.36 started from the
binaries `KUBEBUILDER_ASSETS` names (`kubefake.envtest`, as the tests start them), with
KubeVirt's and Longhorn's CRDs; `python -m webhook serve` watches it and the apiserver calls it,
registered by URL in the install's own MutatingWebhookConfiguration. Then, each round, the 30
VM pods are created at once (a quiet cluster), and then the 25 share-manager pods and the 30 VM
pods at once (the storm), each a real create through the apiserver, timed by the client that
sends it: the apiserver's admission chain, its call to the webhook, the webhook's queueing and
work, validation and the write to etcd. Counted: creates the apiserver refused, and pods created
without the webhook's decision (`pinned` for a VM, `pinned-among` for a share-manager). The pods
are deleted between rounds; no kube-scheduler runs, so they stay unbound.

The share-managers are created by a client of their own (longhorn-manager's), the VM pods by
another (virt-controller's), each with as many connections as it has creates in flight, as
client-go multiplexes a controller's requests on HTTP/2: through one aiohttp client, whose pool
holds 100 connections, the 30 VM creates sent after 100 share-managers would wait for those to be
answered, a wait of the client, not of the apiserver or the webhook. The apiserver calls each
webhook at its own path in the install's configuration. serve's own figures come from its log
(each review's `latency_ms`, from its connection's accept to its answer).
"""
from __future__ import annotations

import asyncio
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from kubefake import objects
from kubefake.envtest import Api, ControlPlane, Refused, assets, webhook_registration

from .__main__ import cores, wait_for, webhook_server
from .rounds import HOOKS, WANTED, batches, calls, round_figures, serve_urls, unused
from .served import admissions_logged, caches_synced, server_figures, settled

CONFIGURATION = "kubevirt-colocate-storm"
PARALLEL = 48  # creates in flight while the cluster is loaded
POD = {"apiVersion": "v1", "kind": "Pod"}


class Controller(Api):
    """One controller's client (longhorn-manager's, virt-controller's): `Api`, with no bound on
    its connections, so that each create in flight has one, as on client-go's HTTP/2."""

    def __init__(self, plane: ControlPlane) -> None:
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
        self.url = plane.url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0))


def registration(urls: dict[str, str], ca: Path) -> dict[str, Any]:
    """The install's MutatingWebhookConfiguration, each webhook calling serve at its own port and path
    (`urls`: serve's, by the Service's target port each webhook leads to: `rounds.calls`)."""
    config = webhook_registration(f"{urls['webhook']}/mutate", ca, CONFIGURATION)
    where = {HOOKS[kind]: (target, called.partition("?")[0]) for kind, (target, called) in calls().items()}
    for hook in config["webhooks"]:
        target, path = where[hook["name"]]
        hook["clientConfig"]["url"] = f"{urls[target]}{path}"
    return config


async def _loaded(plane: ControlPlane, cluster: list[dict[str, Any]]) -> None:
    """Every object created as its controller would, status included, `PARALLEL` at a time;
    nodes and what pods refer to first."""
    order = ("Node", "PersistentVolume", "PersistentVolumeClaim", "ShareManager", "VirtualMachineInstance", "Pod")
    gate = asyncio.Semaphore(PARALLEL)
    async with Api(plane) as api:
        await api.namespace(objects.VM_NS)
        await api.longhorn()

        async def one(obj: dict[str, Any]) -> None:
            async with gate:
                await api.create(obj)

        for kind in order:
            await asyncio.gather(*(one(o) for o in cluster if o["kind"] == kind))


def pods(evicted: list[str], starts: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The pods of `storm.reviews`, kind for kind."""
    made = [("share-manager", objects.share_manager_pod(volume)) for volume in evicted]
    made += [("control", objects.share_manager_pod(unused(i))) for i in range(len(evicted))]
    return made + [("vm", objects.vm_pod(claim)) for claim in starts]


async def create_all(clients: dict[str, Api], batch: list[tuple[str, dict[str, Any]]]
                     ) -> tuple[list[tuple[str, float, bool]], int]:
    """Every pod created at once, each by its controller's client (`clients`, by kind: "vm",
    "share-manager"); (kind, seconds, decided) of each, and how many the apiserver refused. The
    pods are deleted again afterwards."""
    made: list[dict[str, Any]] = []
    refused = 0
    api = clients["vm"]

    async def one(kind: str, pod: dict[str, Any]) -> tuple[str, float, bool] | None:
        nonlocal refused
        started = time.monotonic()
        try:
            got = await clients["vm" if kind == "vm" else "share-manager"].create(pod)
        except Refused:
            refused += 1
            return None
        seconds = time.monotonic() - started
        made.append(got)
        return kind, seconds, (got["metadata"].get("annotations") or {}).get("kubevirt-scheduler/decision") == WANTED[kind]

    results = await asyncio.gather(*(one(kind, pod) for kind, pod in batch))
    await asyncio.gather(*(api.delete(pod) for pod in made))
    await asyncio.sleep(1.0)  # the webhook's caches see the deletes before the next round
    return [r for r in results if r is not None], refused


async def rounds_through(plane: ControlPlane, urls: dict[str, str], ca: Path, evicted: list[str], starts: list[str],
                         rounds: int, log: Path, serve_pid: int) -> list[dict[str, Any]]:
    """`rounds` of the three batches; each round's figures, serve's own (its log's) among them."""
    async with Controller(plane) as api, Controller(plane) as longhorn:
        clients = {"vm": api, "share-manager": longhorn}
        await api.create(registration(urls, ca))
        batch = pods(evicted, starts)
        vms = [(kind, pod) for kind, pod in batch if kind == "vm"]
        deadline = time.monotonic() + 60
        while True:  # the registration reaches the apiserver's informer a moment after it is created
            got = await api.create(vms[0][1], dry_run=True)
            if (got["metadata"].get("annotations") or {}).get("kubevirt-scheduler/decision"):
                break
            if time.monotonic() > deadline:
                raise SystemExit("the apiserver never called the webhook")
            await asyncio.sleep(0.2)
        await create_all(clients, vms[:2])  # warm up
        found = []
        for _ in range(rounds):
            made, served = [], []
            for sent in batches(batch):
                start = log.stat().st_size
                made.append(await create_all(clients, sent))
                await settled(serve_pid)  # its Events posted: the next batch meets a serve at rest
                served.append(server_figures(admissions_logged(log, start)))
            found.append({**round_figures(*(results for results, _ in made)), "refused": sum(n for _, n in made),
                          "server_control": served[1], "server": served[2]})
        return found


def run_real(args: Any, work: Path, cluster: list[dict[str, Any]], evicted: list[str],
             starts: list[str]) -> list[dict[str, Any]]:
    """The rounds through a real apiserver; SystemExit with the way to get the binaries when there are none."""
    found = assets()
    if isinstance(found, str):
        raise SystemExit(found)
    (work / "envtest").mkdir()
    server_cpu, other_cpu = cores()
    if other_cpu is not None:
        # The control plane and this client on one core, serve on the other: apart, as in a cluster. Set
        # before etcd and kube-apiserver start, so that every thread of theirs inherits it: set on a
        # running Go process, it would hold its first thread alone, and the others would run on serve's core.
        os.sched_setaffinity(0, {other_cpu})
    plane = ControlPlane(found, work / "envtest").start()
    try:
        plane.install_crds()
        started = time.monotonic()
        asyncio.run(_loaded(plane, cluster))
        print(f"  {len(cluster)} objects created in the apiserver in {time.monotonic() - started:.0f} s", file=sys.stderr)
        with webhook_server(plane.kubeconfig, work, server_cpu, "storm",
                            ("--webhook-configuration", CONFIGURATION,
                             "--share-manager-rule", args.share_manager_rule, "--events", args.events)) as (serve, url, ops, log):
            wait_for(f"{ops}/readyz", work)
            caches_synced(log)  # a drain comes to a replica whose caches have long been listed
            return asyncio.run(rounds_through(plane, serve_urls(url), work / "ca.crt", evicted, starts, args.rounds, log, serve.pid))
    finally:
        plane.stop()
