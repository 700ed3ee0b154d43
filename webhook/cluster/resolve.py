"""Drive the pure fact look-ups over a Store: memory first, the API within the deadline."""
from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from typing import Any

from ..config import Settings
from ..deadline import Deadline
from ..kinds import NODE
from ..rules import nodes
from ..rules.classify import consumer_exemption
from ..rules.facts import Fact, Lookup, disk_steps
from .store import Store, StoreError


def unresolved(claim: str, why: str) -> Fact:
    """A disk the store could not establish (API error, timeout): unknown, not absent."""
    return Fact(claim, None, f"disk {claim}: {why}")


def unsure(fact: Fact) -> bool:
    """Whether a fact is `unresolved` (the API could not tell) rather than a finding."""
    return fact.node is None and fact.reason.startswith(f"disk {fact.subject}: ")


def resolve_now(store: Store, steps: Generator[Lookup, Any, Fact]) -> Fact | None:
    """Run the steps from the store's memory only; None as soon as a look-up would need the API."""
    try:
        lookup = next(steps)
        while True:
            known, obj = store.peek(*lookup)
            if not known:
                return None
            lookup = steps.send(obj)
    except StopIteration as done:
        return done.value


async def resolve_io(store: Store, steps: Generator[Lookup, Any, Fact], claim: str, deadline: Deadline) -> Fact:
    """Run the steps through the store's reads, each within what is left of the deadline."""
    try:
        async with asyncio.timeout(deadline.remaining()):  # also bounds a store that ignores `timeout`
            lookup = next(steps)
            while True:
                obj = await store.get(*lookup, timeout=deadline.remaining())
                lookup = steps.send(obj)
    except StopIteration as done:
        return done.value
    except StoreError as exc:
        return unresolved(claim, str(exc))
    except TimeoutError:
        return unresolved(claim, "no answer before the deadline")


async def resolve_disks(
    store: Store, settings: Settings, namespace: str, claims: Sequence[str], deadline: Deadline
) -> list[Fact]:
    """Disks known in memory are resolved at once (no task, no I/O); the others concurrently
    through the API. Whatever is unfinished at the deadline is reported as such."""
    facts: list[Fact | None] = [resolve_now(store, disk_steps(settings, namespace, c)) for c in claims]
    missing = [i for i, fact in enumerate(facts) if fact is None]
    if len(missing) == 1:
        (i,) = missing
        facts[i] = await resolve_io(store, disk_steps(settings, namespace, claims[i]), claims[i], deadline)
    elif missing:
        tasks = {i: asyncio.ensure_future(resolve_io(store, disk_steps(settings, namespace, claims[i]), claims[i], deadline))
                 for i in missing}
        done, pending = await asyncio.wait(tasks.values(), timeout=deadline.remaining())
        for task in pending:
            task.cancel()
        for i, task in tasks.items():
            if task in done and task.exception() is None:
                facts[i] = task.result()
            elif task in done:
                facts[i] = unresolved(claims[i], type(task.exception()).__name__)
            else:
                facts[i] = unresolved(claims[i], "no answer before the deadline")
    return [fact for fact in facts if fact is not None]


async def resolve_consumers(
    store: Store, settings: Settings, volume: str, deadline: Deadline
) -> tuple[list[Fact], list[str]]:
    """The nodes of the running opted-in VMs that use a volume: PV(volumeHandle) → claimRef → pods.

    Returns one fact per consuming pod, and why the other pods did not count. Raises
    StoreError when the API cannot tell.
    """
    facts: list[Fact] = []
    skipped: list[str] = []
    seen: set[tuple[str, str]] = set()
    for pv in await store.pvs_by_volume_handle(volume, timeout=deadline.remaining()):
        spec = pv.get("spec") or {}
        if ((spec.get("csi") or {}).get("driver")) != settings.csi_driver:
            continue
        ref = spec.get("claimRef") or {}
        namespace, claim = ref.get("namespace"), ref.get("name")
        if not namespace or not claim:
            continue
        for pod in await store.pods_by_claim(namespace, claim, timeout=deadline.remaining()):
            meta = pod.get("metadata") or {}
            key = (namespace, meta.get("name") or "")
            if key in seen:
                continue
            seen.add(key)
            name = f"{namespace}/{key[1]}"
            why = consumer_exemption(pod, settings)
            if why is None:
                node = pod["spec"]["nodeName"]
                facts.append(Fact(f"VM pod {name}", node, f"VM pod {name} runs on {node}", volume=volume))
            else:
                skipped.append(f"{name}: {why}")
    return facts, skipped


async def node_obstacle(store: Store, name: str, pod: dict[str, Any], namespace: str, deadline: Deadline, *,
                        needs_kubevirt: bool) -> str | None:
    """Why `pod` cannot run on node `name` now (the never-strand checks), or None when it can.

    A node that cannot be read counts as one that cannot take the pod. The same checks serve
    the pin at admission and the keeper's choice of a migration target.
    """
    known, node = store.peek(NODE, None, name)
    if not known:
        try:
            async with asyncio.timeout(deadline.remaining()):
                node = await store.get(NODE, None, name, timeout=deadline.remaining())
        except StoreError as exc:
            return f"node {name} could not be checked ({exc})"
        except TimeoutError:
            return f"node {name} could not be checked before the deadline"
    return nodes.why_not(name, node, pod, needs_kubevirt=needs_kubevirt)
