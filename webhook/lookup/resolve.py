"""Drive the pure fact look-ups over a Store: memory first, the API within the deadline."""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from .. import kinds
from ..config import Settings
from ..deadline import Deadline
from ..kinds import NODE, PV, PVC, VMI, Resource
from ..rules import fit
from ..rules.fit.fields import pod_key
from ..rules.fit.memo import Memo
from ..rules.shared.alone import Alone
from ..rules.shared.facts import Fact, Lookup, disk_fact
from ..rules.placement.patch import as_created
from ..rules.shared.reading import Malformed
from ..rules.keeping.running import read_target_vmi, vm_pods
from ..rules.kubevirt.target import TargetPod, TargetUnknown, Vmi, source_cpu, target_pod
from ..stores.shapes import pod_to_place
from ..stores.store import Store, StoreError


# Objects one admission has read from the API, by (kind, namespace, name): the scheduler checks see
# the claims and volumes the facts just read, even those the caches have not caught up with.
JustRead = dict[tuple[str, str | None, str], Any]


def unresolved(claim: str, why: str) -> Fact:
    """A disk the store could not establish (API error, timeout): unknown, not absent."""
    return Fact(claim, None, f"disk {claim}: {why}", known=False)


async def resolve_io(store: Store, settings: Settings, namespace: str, claim: str, deadline: Deadline,
                     seen: JustRead | None = None) -> Fact:
    """The disk's fact, each object memory cannot tell read once through the store within the deadline."""
    read_so_far: dict[Lookup, Any] = {}
    missing: list[Lookup] = []

    def peek(resource: Resource, namespace: str | None, name: str) -> tuple[bool, Any]:
        lookup = (resource, namespace, name)
        if lookup in read_so_far:
            return True, read_so_far[lookup]
        missing.append(lookup)
        return False, None

    try:
        while (fact := disk_fact(settings, namespace, claim, peek)) is None:
            resource, ns, name = lookup = missing.pop()
            obj = await deadline.call(store.get, resource, ns, name)
            read_so_far[lookup] = obj
            if seen is not None:
                seen[resource.kind, ns, name] = obj
        return fact
    except StoreError as exc:
        return unresolved(claim, str(exc))
    except TimeoutError:
        return unresolved(claim, "no answer before the deadline")


# Claims one admission may read through the API (each a PVC and a PV) when the caches lack them: a
# VM created a moment after its disks has one or two such; more is no VM's creation.
FALLBACK_CLAIMS = 4


async def resolve_disks(
    store: Store, settings: Settings, namespace: str, claims: Sequence[str], deadline: Deadline,
    seen: JustRead | None = None,
) -> list[Fact]:
    """Disks known in memory are resolved at once (no task, no I/O), the others concurrently through
    the API within the deadline, what it answered going into `seen` when given."""
    peek = store.peek
    facts: list[Fact | None] = [disk_fact(settings, namespace, c, peek) for c in claims]
    missing = [i for i, fact in enumerate(facts) if fact is None]
    for i in missing[FALLBACK_CLAIMS:]:  # a pod of thousands of unknown claims is not thousands of GETs
        facts[i] = unresolved(claims[i], f"not in the caches, and one admission reads at most {FALLBACK_CLAIMS} "
                                         "claims from the API")
    missing = missing[:FALLBACK_CLAIMS]
    # Each read is held to the deadline (`resolve_io`): all are done by then.
    found = await asyncio.gather(*(resolve_io(store, settings, namespace, claims[i], deadline, seen)
                                   for i in missing), return_exceptions=True)
    for i, fact in zip(missing, found):
        facts[i] = fact if isinstance(fact, Fact) else unresolved(claims[i], type(fact).__name__)
    return [fact for fact in facts if fact is not None]


@dataclasses.dataclass(frozen=True, slots=True)
class Consumers:
    """The opted-in VMs that use a volume: a fact per VM and its pod, why the other pods did not
    count, and the migration target pods not scheduled yet, by VMI uid (the VM is leaving)."""

    facts: list[Fact]
    pods: list[dict[str, Any]]
    others: list[str]
    leaving: dict[str, dict[str, Any]]


async def resolve_consumers(store: Store, settings: Settings, volume: str, deadline: Deadline) -> Consumers:
    """Where the opted-in VMs that use a volume run now: PV(volumeHandle) → claimRef → launcher pods → one pod per VM
    (`rules.keeping.running.vm_pods`; a migration target not scheduled yet says the VM is leaving)."""
    candidates: list[dict[str, Any]] = []
    for pv in await deadline.call(store.pvs_by_volume_handle, volume):
        spec = pv.get("spec") or {}
        if ((spec.get("csi") or {}).get("driver")) != settings.csi_driver:
            continue
        ref = spec.get("claimRef") or {}
        namespace, claim = ref.get("namespace"), ref.get("name")
        if not namespace or not claim:
            continue
        candidates += await deadline.call(store.pods_by_claim, namespace, claim)
    found = vm_pods(candidates, settings)
    facts = []
    for pod in found.running:
        name, node = pod_key(pod), pod["spec"]["nodeName"]
        facts.append(Fact(f"VM pod {name}", node, f"VM pod {name} runs on {node}", volume=volume))
    leaving = {uid: pod for pod, why in found.skipped
               if why is Alone.NOT_SCHEDULED and kinds.MIGRATION_JOB_LABEL in kinds.labels(pod)
               and isinstance(uid := kinds.labels(pod).get(kinds.CREATED_BY_LABEL), str) and uid}
    return Consumers(facts=facts, pods=found.running, others=[f"{pod_key(pod)}: {why}" for pod, why in found.skipped],
                     leaving=leaving)


async def migration_target(store: Store, settings: Settings, vm_pod: dict[str, Any],
                           waiting: dict[str, Any] | None, deadline: Deadline, memo: Memo | None = None) \
        -> TargetPod | str:
    """The pod KubeVirt creates (`waiting`) or will create to migrate the VM of `vm_pod` off its node, or why not."""
    namespace = kinds.meta(vm_pod).get("namespace") or ""
    if waiting is not None and not kinds.spec(waiting).get("nodeName"):
        return TargetPod(pod_to_place(waiting), {})
    owner = kinds.vmi_owner(vm_pod)
    try:
        vmi = None if owner is None else await read_through(store, VMI, namespace, owner["name"], deadline)
        source = await read_through(store, NODE, None, kinds.spec(vm_pod).get("nodeName") or "", deadline)
    except StoreError as exc:
        return f"an object could not be read ({exc})"
    except TimeoutError:
        return "no answer before the deadline"
    if vmi is None:
        return f"VMI of {pod_key(vm_pod)}: not found"
    view = read_target_vmi(vmi)
    if isinstance(view, Malformed):
        return str(view)
    return migration_target_pod(migration_source(vm_pod, settings), view, source, {}, memo)


async def read_through(store: Store, resource: Resource, namespace: str | None, name: str,
                deadline: Deadline) -> dict[str, Any] | None:
    """From memory when the store can tell (shared: read only), else from the API within the deadline."""
    known, obj = store.peek(resource, namespace, name)
    return obj if known else await deadline.call(store.get, resource, namespace, name)


def migration_source(launcher: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """What a VM's migration target is rendered from: its launcher pod as KubeVirt created it,
    without our pin, reduced to what the never-strand checks read of it (`pod_to_place`); the keeper
    keeps it per VM apart instead of copying the pod at every pass."""
    # Reduced first, so that only what the checks read is copied: `as_created` reads our annotations.
    placed = pod_to_place(launcher)
    placed["metadata"]["annotations"] = kinds.annotations(launcher)
    made = as_created(placed, settings)
    kinds.meta(made).pop("annotations", None)
    return made


def migration_target_pod(made: dict[str, Any], vmi: Vmi, source: dict[str, Any] | None, added: dict[str, str],
                         memo: Memo | None = None) -> TargetPod | TargetUnknown:
    """`rules.kubevirt.target.target_pod` from `migration_source`'s pod: the one recipe a drain's share-manager rule
    and the keeper both judge nodes by."""
    cpu = None if memo is None or source is None else \
        memo.latest(source_cpu, ("source cpu", kinds.meta(source).get("name")), (source,), source)
    return target_pod(made, vmi, source, added, cpu)


async def node_obstacle(store: Store, name: str, pod: dict[str, Any], namespace: str, deadline: Deadline, *,
                        needs_kubevirt: bool, seen: JustRead | None = None) -> str | None:
    """Why `pod` cannot run on node `name` now (the never-strand checks: the node itself, then
    kube-scheduler's filters), or None; a node or a view that cannot be read cannot take it."""
    try:
        node = await read_through(store, NODE, None, name, deadline)
    except StoreError as exc:
        return f"node {name} could not be checked ({exc})"
    except TimeoutError:
        return f"node {name} could not be checked before the deadline"
    return await obstacle_on(store, name, node, pod, namespace, deadline, needs_kubevirt=needs_kubevirt, seen=seen)


async def obstacle_on(store: Store, name: str, node: dict[str, Any] | None, pod: dict[str, Any], namespace: str,
                      deadline: Deadline, *, needs_kubevirt: bool, seen: JustRead | None = None) -> str | None:
    """`node_obstacle` on node `name` as the caller read it (None: there is none): the keeper reads each node
    once a pass, not once for each of the 15 VMs a node's storage serves."""
    why = fit.why_not_run(name, node, pod, needs_kubevirt=needs_kubevirt)
    if why is not None or node is None:
        return why
    subject = "the VM" if needs_kubevirt else "the pod"
    view = await fit_view(store, namespace, deadline)
    if isinstance(view, str):
        return f"cannot tell whether node {name} fits {subject}: {view}"
    return fit.why_not_fit(pod, namespace, node, JustReadFirst(view, seen) if seen else view, subject)


async def fit_view(store: Store, namespace: str, deadline: Deadline) -> fit.View | str:
    try:
        view = await deadline.call(store.fit_view, namespace)
    except TimeoutError:
        return "no answer before the deadline"
    return "the pods of the cluster are not loaded yet" if view is None else view


class JustReadFirst:
    """A checks' view that answers claims and volumes from what this admission just read, and
    everything else (nodes, pods, their record of changes) from `view`."""

    def __init__(self, view: fit.View, seen: JustRead):
        self._view, self._seen = view, seen
        self.memo = view.memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def pvc(self, namespace: str, name: str) -> Any:
        found = self._seen.get((PVC.kind, namespace, name))
        return found if found is not None else self._view.pvc(namespace, name)

    def pv(self, name: str) -> Any:
        found = self._seen.get((PV.kind, None, name))
        return found if found is not None else self._view.pv(name)
