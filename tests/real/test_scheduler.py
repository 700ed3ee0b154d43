"""Never strand, against the real kube-scheduler: where the webhook's checks say a node takes the
VM, the pod pinned there (by the webhook's own patch) is bound there; where they say it cannot,
the scheduler leaves the pinned pod unschedulable too.

The clusters are the checks' own table (tests/support/fitting.py: every filter, each row judged by one
check) and clusters generated from the same parts; each is put into the real apiserver, nodes
and placed pods with their status, and removed again.
"""
from __future__ import annotations

import asyncio
import copy
import random
import time
from typing import Any

import pytest
from kubefake.envtest import Api
from tests.support.kube import affinity_ops
from tests.support.fitting import CASES, HOSTNAME, NS, ROOTDISK, ZONE, sized, term, three_nodes, view_of, vm, workload

from webhook.rules import fit

BIND_WAIT = 20.0  # seconds for the scheduler to bind, or to say Unschedulable


def replayable(case: Any) -> bool:
    """Rows the apiserver can hold and the webhook judges for sure: not its "cannot tell" rows
    (unparsable quantities, namespaces chosen by label), which it answers with no pin at all."""
    _, _, _, _, check, fragment = case.values
    return check != "*" and not (fragment and any(words in fragment for words in UNSURE))


UNSURE = ("cannot tell", "selects namespaces", "is not a quantity")
# Where the checks refuse a node kube-scheduler 1.36 would take: the safe direction (a preference
# instead of a pin, never a pod stranded), kept on purpose; the reason for each.
SAFE_DISAGREEMENTS = {
    "volume-matchfields-never-match": "kube-scheduler 1.30 matched a PV's node affinity against the node's labels "
                                      "alone, so a matchFields term never matched (kubernetes#81725); 1.36 matches "
                                      "it: the checks keep the older answer, safe on every supported version",
}


def steered(pod: dict[str, Any], node: str, *, preferred: bool = False) -> dict[str, Any]:
    """The pod as the webhook's patch pins it to `node` (or prefers it, weight 100)."""
    import jsonpatch

    pod = copy.deepcopy(pod)
    ops = affinity_ops(pod["spec"], (), ((node, 100),)) if preferred else affinity_ops(pod["spec"], (node,), ())
    return jsonpatch.apply_patch(pod, ops)


OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")
RUNTIME_CLASS = "with-overhead"


def admissible(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as a user's manifest would have it for the apiserver to admit, judged alike by the
    checks (which read requests and overhead only): extended resources and hugepages with their
    limit equal to the request (they cannot be overcommitted), and an overhead from its
    RuntimeClass (the apiserver refuses one set by hand; its RuntimeClass admission sets it)."""
    if obj["kind"] != "Pod":
        return obj
    obj = copy.deepcopy(obj)
    if obj["spec"].pop("overhead", None) is not None:
        obj["spec"]["runtimeClassName"] = RUNTIME_CLASS
    for container in obj["spec"].get("containers", []) + obj["spec"].get("initContainers", []):
        resources = container.get("resources") or {}
        for name, value in (resources.get("requests") or {}).items():
            if name not in OVERCOMMITTABLE:
                resources.setdefault("limits", {}).setdefault(name, value)
    return obj


async def placed(api: Api, objects: list[dict[str, Any]], made: list[dict[str, Any]]) -> None:
    """Put the cluster into the apiserver: namespaces first, nodes, then everything else (each
    created object into `made`, for the clean-up)."""
    namespaces = {o["metadata"].get("namespace") for o in objects} - {None}
    for namespace in sorted(namespaces):
        if namespace == "longhorn-system":
            await api.longhorn()
        else:
            await api.namespace(namespace)
    for obj in sorted(objects, key=lambda o: o["kind"] != "Node"):
        made.append(await api.create(admissible(obj)))


async def outcome(api: Api, pod: dict[str, Any]) -> str:
    """Where the scheduler binds the pod, or "Unschedulable"."""
    deadline = time.monotonic() + BIND_WAIT
    while time.monotonic() < deadline:
        got = await api.get(pod)
        if got["spec"].get("nodeName"):
            return got["spec"]["nodeName"]
        for condition in got.get("status", {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return "Unschedulable"
        await asyncio.sleep(0.1)
    return "undecided"


async def replay(api: Api, pod: dict[str, Any], node: str, cluster: list[dict[str, Any]]) -> str:
    """Where the real scheduler puts the VM pinned to `node` by the webhook's patch.

    A VM with a topology spread that filters (DoNotSchedule) is preferred to the node instead: a pin narrows the spread's
    domains to the pinned node (nodeAffinityPolicy Honor), so a pinned pod always passes it, and
    the spread the VM asked for would be lost; the checks judge the spread as the pod stands, and
    a node that fails it gets the webhook's preference, never a pin. Preferred (weight 100), the
    pod lands on the node exactly when the spread lets it."""
    made: list[dict[str, Any]] = []
    try:
        await placed(api, cluster, made)
        if "overhead" in pod["spec"]:
            made.append(await api.create({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                          "metadata": {"name": RUNTIME_CLASS}, "handler": "kata",
                                          "overhead": {"podFixed": pod["spec"]["overhead"]}}))
        spread = hard_spread(pod)
        vm_pod = await api.create(admissible(steered(pod, node, preferred=spread)), namespace=NS)
        made.append(vm_pod)
        return await outcome(api, vm_pod)
    finally:
        for obj in reversed(made):
            if obj["kind"] == "Pod":
                await api.delete(obj)
        for obj in reversed(made):
            if obj["kind"] != "Pod":
                await api.delete(obj)


@pytest.fixture
async def api(scheduler):
    async with Api(scheduler, owns=True) as api:
        yield api


def hard_spread(pod: dict[str, Any]) -> bool:
    """The VM has a topology spread that filters nodes (DoNotSchedule), not one that only scores them."""
    return any(isinstance(c, dict) and c.get("whenUnsatisfiable") == "DoNotSchedule"
               for c in pod["spec"].get("topologySpreadConstraints") or [])


def assert_agrees(pod: dict[str, Any], node_name: str, judged: str | None, got: str) -> None:
    """The scheduler's answer is the checks': on the node when they say it takes the VM; else,
    pinned, unschedulable, and preferred (a spread), anywhere but that node."""
    if judged is None:
        assert got == node_name, "the checks said the node takes the VM"
    elif hard_spread(pod):
        assert got not in (node_name, "undecided"), f"the checks said: {judged}"
    else:
        assert got == "Unschedulable", f"the checks said: {judged}"


def judgement(pod: dict[str, Any], node_name: str, view: Any) -> str | None:
    """Why the node cannot take the VM, as the webhook's never-strand checks say before a pin; None if it can."""
    node = view.node(node_name)
    return fit.why_not_run(node_name, node, pod, needs_kubevirt=True) or fit.why_not_fit(pod, NS, node, view)


def cluster_of(objects: list[dict[str, Any]], nodes: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [*(nodes if nodes is not None else three_nodes()), *ROOTDISK, *objects]


@pytest.mark.parametrize("pod, node_name, objects, nodes, check, fragment", [c for c in CASES if replayable(c)])
async def test_the_scheduler_agrees_with_each_row_of_the_checks(request, api, pod, node_name, objects, nodes, check, fragment):
    view = view_of(*objects, nodes=nodes)
    judged = judgement(pod, node_name, view)
    assert (judged is None) == (check is None), judged  # the row as the checks' own tests hold it
    got = await replay(api, pod, node_name, cluster_of(objects, nodes))
    if request.node.callspec.id in SAFE_DISAGREEMENTS:
        assert judged is not None and got == node_name
        return
    assert_agrees(pod, node_name, judged, got)


def generated(seed: int) -> tuple[dict[str, Any], str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A small cluster from the table's parts: nodes of varied size and zone, some tainted or
    cordoned, pods placed on them with requests, labels and anti-affinity; a VM with requests,
    maybe anti-affinity or a topology spread; the node to pin to."""
    rng = random.Random(seed)
    names = [f"node-{c}" for c in "abcd"[: rng.randint(2, 4)]]
    nodes = []
    for name in names:
        node = sized(name, zone=rng.choice(["zone-a", "zone-b"]), cpu=rng.choice(["2", "4", "8"]),
                     memory=rng.choice(["4Gi", "8Gi", "16Gi"]), pods=rng.choice(["3", "110"]),
                     taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}] if rng.random() < 0.15 else None,
                     unschedulable=rng.random() < 0.1)
        nodes.append(node)
    apps = ["web", "db", "cache"]
    objects = []
    for i in range(rng.randint(0, 6)):
        app = rng.choice(apps)
        anti = [term(rng.choice([HOSTNAME, ZONE]), matchLabels={"kubevirt.io": "virt-launcher"})] if rng.random() < 0.1 else None
        objects.append(workload(f"w{i}", rng.choice(names), labels={"app": app}, anti=anti,
                                requests={"cpu": rng.choice(["100m", "1", "3"]), "memory": rng.choice(["128Mi", "2Gi", "6Gi"])}))
    shape: dict[str, Any] = {"requests": {"cpu": rng.choice(["100m", "1", "2"])}, "labels": {"app": rng.choice(apps)}}
    if rng.random() < 0.3:
        shape["anti"] = [term(rng.choice([HOSTNAME, ZONE]), matchLabels={"app": rng.choice(apps)})]
    if rng.random() < 0.3:
        shape["spread"] = [{"maxSkew": 1, "topologyKey": rng.choice([HOSTNAME, ZONE]), "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": shape["labels"]["app"]}}}]
    return vm(**shape), rng.choice(names), objects, nodes


@pytest.mark.parametrize("seed", range(12))
async def test_the_scheduler_agrees_on_generated_clusters(api, seed):
    pod, node_name, objects, nodes = generated(seed)
    view = view_of(*objects, nodes=nodes)
    judged = judgement(pod, node_name, view)
    got = await replay(api, pod, node_name, cluster_of(objects, nodes))
    assert_agrees(pod, node_name, judged, got)


async def test_a_drains_share_managers_land_on_the_node_each_prefers_first(api):
    """A drain's share-managers, required among the same nodes (equal room for their VMs), land each
    on the node it prefers first (weight 100 against its fallbacks' 50 and 25): kube-scheduler's own
    scores of a small pod do not outweigh it, so they spread as their volumes pick, not onto one node."""
    import jsonpatch
    from tests.support.kube import share_manager_pod

    from webhook.config import Settings
    from webhook.rules.placement.patch import patch_for
    from webhook.rules.placement.together import Destination, Destinations, decide_together

    nodes = three_nodes()
    names = tuple(n["metadata"]["name"] for n in nodes)
    made: list[dict[str, Any]] = []
    try:
        await placed(api, nodes, made)
        await api.longhorn()  # its namespace, ServiceAccount and PriorityClass, as test_drain.py has them
        found = Destinations(tuple(Destination(name, 0.5) for name in names), {})
        firsts, landed = [], []
        for i in range(9):
            volume = f"pvc-spread-{i}"
            pod = share_manager_pod(volume)
            decision = decide_together(found, f"VM {NS}/vm{i}", "node node-x is cordoned", required=True, spread=volume)
            created = await api.create(jsonpatch.apply_patch(pod, patch_for(pod, decision, Settings())))
            made.append(created)
            firsts.append(decision.preferences[0][0])
            landed.append(await outcome(api, created))
        assert landed == firsts
        assert len(set(firsts)) > 1, firsts
    finally:
        for obj in reversed(made):
            await api.delete(obj)
