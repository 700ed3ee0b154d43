"""A drain's evacuation aimed at its VM's storage (`--aim-evacuations on`), and the share-manager that follows: the
reads for `rules.placement.aim`, from the caches (replicas aim alike), a failed read leaving it untouched, saying why;
the first of a drain's evacuations plans the drain, kept in the view's memo while its inputs are as they were."""
from __future__ import annotations

from typing import Any

from .. import kinds
from ..config import AdmissionSettings
from ..deadline import Deadline
from ..kinds import NODE, POD, VMI
from ..lookup.resolve import (Consumers, fit_view, migration_source, migration_target_pod, node_obstacle, read_through,
                              resolve_disks)
from ..rules import fit
from ..rules.keeping.running import read_target_vmi, read_vmi, vm_pods, VmiView
from ..rules.kubevirt.target import TargetPod
from ..rules.placement import aim
from ..rules.placement.decide import PIN_WEIGHT, PINNED, Decision
from ..rules.placement.promised import Promises
from ..rules.shared import declared
from ..rules.shared.alone import Alone
from ..rules.shared.classify import opted_in
from ..rules.shared.facts import Fact, claims_of, disks_of
from ..rules.shared.reading import Malformed
from ..rules.shared.times import rfc3339
from ..stores.store import Store, StoreError
from .outcome import Outcome, Rule, skip

Key = tuple[str, str]  # (namespace, VMI)


class Untouched(Exception):
    """The evacuation is left as KubeVirt made it: why (a metric label), and the specifics."""

    def __init__(self, why: Alone, detail: str | None = None):
        super().__init__(detail or why)
        self.why, self.detail = why, detail


async def evacuation_rule(migration: Any, namespace: str, user: str, store: Store, settings: AdmissionSettings,
                          deadline: Deadline) -> Outcome:
    """Aim the evacuation, or say why it is left untouched."""
    exempt = aim.exemption(migration, user, settings.kubevirt_namespace)
    if exempt is not None:
        return skip(Rule.EVACUATION, exempt)
    evacuation = aim.read_evacuation(migration, namespace)
    try:
        decision, hostname, facts = await _aim(evacuation, store, settings, deadline)
    except Untouched as untouched:
        return skip(Rule.EVACUATION, untouched.why, detail=untouched.detail)
    except StoreError as exc:
        return skip(Rule.EVACUATION, Alone.VM_UNKNOWN, detail=f"an object could not be read ({exc})")
    except TimeoutError:
        return skip(Rule.EVACUATION, Alone.DEADLINE)
    if deadline.remaining() <= 0:
        return skip(Rule.EVACUATION, Alone.DEADLINE)
    return Outcome(Rule.EVACUATION, decision=decision, facts=tuple(facts),
                   patch=tuple(aim.aim_patch(migration, hostname)))


async def _aim(evacuation: aim.Evacuation, store: Store, settings: AdmissionSettings,
               deadline: Deadline) -> tuple[Decision, str, list[Fact]]:
    """This VM's place in the plan of the whole drain of its node."""
    vmi = await read_through(store, VMI, evacuation.namespace, evacuation.vmi, deadline)
    if vmi is None:
        raise Untouched(Alone.VM_UNKNOWN, f"VMI {evacuation.namespace}/{evacuation.vmi} not found")
    if not opted_in(kinds.annotations(vmi), settings):
        raise Untouched(Alone.NOT_OPTED_IN)
    source = await read_through(store, NODE, None, evacuation.source, deadline)
    if not kinds.spec(source).get("unschedulable"):
        raise Untouched(Alone.NOT_DRAINED, f"node {evacuation.source} is not cordoned: no drain")
    every = tuple(aim.read_evacuation(m) for m in await deadline.call(store.migrations))
    view = await fit_view(store, evacuation.namespace, deadline)
    if isinstance(view, str):
        raise Untouched(Alone.VM_UNKNOWN, view)
    marked = await _marked(evacuation, vmi, store, settings, view, deadline)
    position = view.nodes_changed(None)[0]
    drain = view.memo.latest(dict, ("drain", evacuation.source), None if position is None else
                             (position, tuple(marked), every), ())
    if not drain:  # the first of a burst reads and plans the drain: the same answer for the others
        drain.update(await _read(evacuation.source, source, marked, every, store, settings, view, deadline))
    member, facts, chosen = drain[evacuation.namespace, evacuation.vmi]
    if isinstance(member, Untouched):
        raise member
    if isinstance(chosen, str):
        raise Untouched(Alone.NO_TARGET, chosen)
    return aim.aimed(*chosen, evacuation, member.candidates.why), chosen[1], facts


async def _read(name: str, source: dict[str, Any] | None, marked: dict[Key, dict[str, Any]],
                every: tuple[aim.Evacuation, ...], store: Store, settings: AdmissionSettings, view: fit.View,
                deadline: Deadline) -> dict[Key, tuple[aim.Member | Untouched, list[Fact], tuple[str, str] | str | None]]:
    """Each VM of the drain off node `name` as the plan reads it (or why it is not aimed), and its place."""
    members: dict[Key, tuple[aim.Member | Untouched, list[Fact]]] = {}
    for (namespace, vm), vmi in marked.items():
        try:
            members[namespace, vm] = await _member(aim.Evacuation(name="", namespace=namespace, vmi=vm, source=name),
                                                   vmi, source, every, store, settings, view, deadline)
        except Untouched as untouched:  # not aimed: KubeVirt's target goes where kube-scheduler puts it
            members[namespace, vm] = untouched, []
        except StoreError as exc:
            members[namespace, vm] = Untouched(Alone.VM_UNKNOWN, f"an object could not be read ({exc})"), []
    chosen = aim.plan([m for m, _ in members.values() if isinstance(m, aim.Member)], name,
                      await _kept(every, store, settings, view, deadline), view)
    return {key: (member, facts, chosen.get(key)) for key, (member, facts) in members.items()}


async def _marked(evacuation: aim.Evacuation, vmi: dict[str, Any], store: Store, settings: AdmissionSettings,
                  view: fit.View, deadline: Deadline) -> dict[Key, dict[str, Any]]:
    """This VM's VMI and those of the other opted-in VMs KubeVirt is evacuating off the node (marked,
    status.evacuationNodeName; their launcher pods still there), in order."""
    found = {(evacuation.namespace, evacuation.vmi): vmi}
    for pod in view.pods_on(evacuation.source):
        owner, namespace = kinds.vmi_owner(pod), kinds.meta(pod).get("namespace") or ""
        if owner is None or kinds.labels(pod).get(kinds.CREATED_BY_LABEL) is None or (namespace, owner.get("name")) in found:
            continue
        other = await read_through(store, VMI, namespace, str(owner.get("name") or ""), deadline)
        status = kinds.status(other)
        if other is not None and opted_in(kinds.annotations(other), settings) and \
                declared.EVACUATION_NODE.value(status) == status.get("nodeName") == evacuation.source:
            found[namespace, kinds.meta(other)["name"]] = other
    return dict(sorted(found.items()))


async def _member(evacuation: aim.Evacuation, vmi: dict[str, Any], source: dict[str, Any] | None,
                  every: tuple[aim.Evacuation, ...], store: Store, settings: AdmissionSettings, view: fit.View,
                  deadline: Deadline) -> tuple[aim.Member, list[Fact]]:
    """The VM as the plan reads it (and its disks' facts), or Untouched: why it is not aimed."""
    if any((e.namespace, e.vmi) == (evacuation.namespace, evacuation.vmi) and not e.finished for e in every):
        raise Untouched(Alone.ALREADY_AIMED)  # one under way: where it goes is settled (`_kept`)
    moved = read_vmi(vmi, settings)  # the drain began after the VM's last completed migration
    state = moved.migration if isinstance(moved, VmiView) else None
    ended = rfc3339(state.ended) if state is not None and state.completed and not state.failed and state.ended else None
    failed = aim.failed_aim(evacuation, every, ended)
    if failed is not None:
        raise Untouched(failed)
    vm_pod = await _launcher(store, settings, evacuation, vmi, deadline)
    if vm_pod is None:
        raise Untouched(Alone.VM_UNKNOWN, f"no running launcher pod of VMI {evacuation.namespace}/{evacuation.vmi}")
    facts = await resolve_disks(store, settings, evacuation.namespace, disks_of(vm_pod, vmi), deadline)
    storage = aim.storage_of(facts, evacuation.source)
    if isinstance(storage, Alone):
        raise Untouched(storage)
    candidates = storage if isinstance(storage, aim.Candidates) else \
        await _candidates(storage, evacuation, every, store, settings, view, deadline)
    read = read_target_vmi(vmi)
    target = read if isinstance(read, Malformed) else migration_target_pod(
        migration_source(vm_pod, settings), read, source, {}, view.memo)
    if not isinstance(target, TargetPod):
        raise Untouched(Alone.VM_UNKNOWN, str(target))
    if kinds.HOSTNAME_LABEL in (kinds.spec(target.pod).get("nodeSelector") or {}):
        raise Untouched(Alone.OWN_HOST)  # its own key wins over an addedNodeSelector's
    return aim.Member(namespace=evacuation.namespace, vmi=evacuation.vmi, uid=str(kinds.meta(vmi).get("uid") or ""),
                      target=target, claims=frozenset(claims_of(vmi)), candidates=candidates), facts


async def _launcher(store: Store, settings: AdmissionSettings, evacuation: aim.Evacuation, vmi: dict[str, Any],
                    deadline: Deadline) -> dict[str, Any] | None:
    """The launcher pod the VM runs in now (KubeVirt renders its target pod from the VMI and it), if any."""
    claims = claims_of(vmi)
    pods = await deadline.call(store.pods_by_claim, evacuation.namespace, claims[0]) if claims else []
    return next((pod for pod in vm_pods(pods, settings, any_vm=True).running
                 if kinds.labels(pod).get(kinds.CREATED_BY_LABEL) == kinds.meta(vmi).get("uid")), None)


async def _candidates(moving: tuple[Fact, ...], evacuation: aim.Evacuation, every: tuple[aim.Evacuation, ...],
                      store: Store, settings: AdmissionSettings, view: fit.View, deadline: Deadline) -> aim.Candidates:
    """Where the VM whose disks leave with it may be aimed: where a VM of the same disk was aimed; else
    where its share-manager came back; else every node, most room first."""
    claims = {fact.subject for fact in moving}
    for other in aim.unfinished_aims(every):
        if other.namespace != evacuation.namespace or other.vmi == evacuation.vmi:
            continue
        node, vmi = aim.node_of(view, other.aimed), await read_through(store, VMI, other.namespace, other.vmi, deadline)
        shared = sorted(claims & set(claims_of(vmi))) if vmi and node else []
        if shared:
            return aim.Candidates((node,), f"where the evacuation of VM {other.namespace}/{other.vmi}, "
                                           f"which shares disk {shared[0]}, is aimed")
    for fact in moving:
        pod = await read_through(store, POD, settings.longhorn_namespace,
                                 kinds.SHARE_MANAGER_POD_PREFIX + (fact.volume or ""), deadline)
        bound = kinds.spec(pod).get("nodeName") if pod else None
        if bound and bound != evacuation.source:
            return aim.Candidates((bound,), f"where the share-manager of disk {fact.subject} came back")
        named = kinds.annotations(pod).get(settings.node_annotation) if pod else None
        if not bound and named and kinds.annotations(pod).get(settings.decision_annotation) in kinds.REQUIRING_DECISIONS:
            return aim.Candidates(tuple(str(named).split(",")), f"among the nodes the share-manager of disk "
                                                                f"{fact.subject} is pinned to", ranked=True)
    disks = ", ".join(f.subject for f in moving)
    return aim.Candidates(None, f"the node with most room for it, where the NFS server of disk {disks} "
                                f"(leaving {evacuation.source} too) will follow it", ranked=True)


async def _kept(every: tuple[aim.Evacuation, ...], store: Store, settings: AdmissionSettings, view: fit.View,
                deadline: Deadline) -> Promises:
    """The aimed evacuations under way whose target pods have not landed: each VM promised to its node."""
    promises = Promises()
    for other in aim.unfinished_aims(every):
        node = aim.node_of(view, other.aimed)  # landed, its target pod takes its room there
        landed = node is None or any(kinds.labels(p).get(kinds.MIGRATION_JOB_LABEL) == other.uid for p in view.pods_on(node))
        vmi = None if landed else await read_through(store, VMI, other.namespace, other.vmi, deadline)
        pod = await _launcher(store, settings, other, vmi, deadline) if vmi is not None else None
        if pod is not None:
            promises.make(str(kinds.meta(vmi).get("uid") or other.vmi), other.source, node, ("", ""),
                          fit.PodUsage.of(pod), 0.0)
    return promises


async def followed(consumers: Consumers, pod: dict[str, Any], namespace: str, store: Store,
                   deadline: Deadline) -> Decision | None:
    """A share-manager whose VMs' evacuation is aimed goes where it is aimed, where that node can take it now; None
    when none of its VMs' is, or that node cannot (it is then placed as before)."""
    vmis = {(kinds.meta(p).get("namespace") or "", (kinds.vmi_owner(p) or {}).get("name") or "") for p in consumers.pods}
    try:
        every = [aim.read_evacuation(m) for m in await deadline.call(store.migrations)]
    except (StoreError, TimeoutError):
        return None
    leading = next((a for a in aim.unfinished_aims(every) if (a.namespace, a.vmi) in vmis), None)  # the oldest
    view = await fit_view(store, namespace, deadline) if leading is not None else "none aimed"
    node = aim.node_of(view, leading.aimed) if leading is not None and not isinstance(view, str) else None
    if leading is None or node is None or await node_obstacle(store, node, pod, namespace, deadline,
                                                              needs_kubevirt=False) is not None:
        return None
    reason = (f"pinned to {node}, where the evacuation {leading.name} of its VM {leading.namespace}/{leading.vmi} "
              f"is aimed")
    return Decision(PINNED, node=node, preferences=((node, PIN_WEIGHT),), reason=reason)
