"""The admission rules end to end: pod → facts → decision → patch, as an Outcome; whatever happens, the pod is
admitted."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from .. import kinds
from ..lookup import recorded
from ..lookup.recorded import Recording
from ..lookup.resolve import (Consumers, JustRead, fit_view, migration_target, node_obstacle, read_through,
                               resolve_consumers, resolve_disks)
from ..stores.store import Store, StoreError
from ..config import AdmissionSettings, PinMode
from ..deadline import Deadline
from ..kinds import POD, VMI, VMIM
from ..process.pace import in_slices
from ..rules import fit
from ..rules.fit.usage import PodUsage
from ..rules.placement import bounds, decide, patch, prepared, together
from ..rules.placement.prepared import PreparedAnswers
from ..rules.placement.promised import Promises
from ..rules.kubevirt.target import TargetPod
from ..rules.shared.alone import Alone
from ..rules.shared.classify import is_share_manager_pod, vm_exemption
from ..rules.placement.decide import Decision
from ..rules.shared.facts import Fact, disks_of
from .evacuation import evacuation_rule, followed
from .outcome import Outcome, Rule, skip
from .review import AdmissionRequest

log = logging.getLogger("webhook.mutate")


async def admit(request: AdmissionRequest, store: Store, settings: AdmissionSettings, deadline: Deadline,
                shared: Shared | None = None) -> Outcome:
    """What the rules make of the request's pod (or, `--aim-evacuations on`, migration); `shared`: a server's, else
    a lane of its own and nothing kept."""
    if request.kind == VMIM.kind and request.group == VMIM.group:
        return await _migration_rule(request, store, settings, deadline)
    if request.kind != "Pod" or request.group != "" or request.operation != "CREATE":
        return skip(Rule.NONE, Alone.NOT_POD_CREATION)
    pod = request.object
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        return skip(Rule.NONE, Alone.NOT_A_POD, "co-location skipped: the object is not a Pod manifest")
    if settings.pin is PinMode.OFF:  # the switch that stops the webhook without uninstalling it
        return skip(Rule.NONE, Alone.PINNING_OFF)
    share_manager = is_share_manager_pod(pod, request.namespace, settings)
    if share_manager and not settings.share_manager_rule:
        return skip(Rule.SHARE_MANAGER, Alone.RULE_OFF)
    large = bounds.too_large(pod)
    if large is not None:  # before anything grows with it: read, looked up or written
        return skip(Rule.SHARE_MANAGER if share_manager else Rule.NONE, Alone.TOO_LARGE,
                    f"co-location skipped: {large}", large)
    try:  # every read that goes to the API is bounded by the deadline where it is made
        if share_manager:
            outcome = await share_manager_rule(request.namespace, pod, store, settings, deadline,
                                               dataclasses.replace(shared or Shared(), keep=not request.dry_run))
        else:
            outcome = await _vm_rule(request.namespace, pod, store, settings, deadline)
        if outcome.decision is not None and outcome.decision.required and deadline.remaining() <= 0:
            # The apiserver has stopped waiting, or is about to: a late requirement is never sent.
            return skip(outcome.rule, Alone.DEADLINE, "co-location skipped: no decision before the deadline",
                        facts=outcome.facts)
        return outcome
    except Exception as exc:  # a bug must never fail pod creation
        log.exception("rule failed for %s/%s", request.namespace, kinds.pod_name(pod))
        return skip(Rule.NONE, Alone.INTERNAL_ERROR, f"co-location skipped: internal error ({type(exc).__name__})")


async def _migration_rule(request: AdmissionRequest, store: Store, settings: AdmissionSettings,
                          deadline: Deadline) -> Outcome:
    """A migration's CREATE: a drain's evacuation aimed at its VM's storage, when that is on."""
    if request.operation != "CREATE":
        return skip(Rule.EVACUATION, Alone.NOT_MIGRATION_CREATION)
    if not settings.aim_evacuations:
        return skip(Rule.EVACUATION, Alone.AIM_OFF)
    if settings.pin is PinMode.OFF:
        return skip(Rule.EVACUATION, Alone.PINNING_OFF)
    try:
        return await evacuation_rule(request.object, request.namespace, request.user, store, settings, deadline)
    except Exception as exc:  # a bug must never fail a drain's migration
        log.exception("evacuation rule failed in %s", request.namespace)
        return skip(Rule.EVACUATION, Alone.INTERNAL_ERROR, f"aim skipped: internal error ({type(exc).__name__})")


async def _vm_rule(namespace: str, pod: dict[str, Any], store: Store, settings: AdmissionSettings,
                   deadline: Deadline) -> Outcome:
    exemption = vm_exemption(pod, settings)
    if exemption is not None:
        # Only a pod that is no launcher is exempt as NOT_LAUNCHER: every other exemption is a launcher's.
        return skip(Rule.NONE if exemption is Alone.NOT_LAUNCHER else Rule.VM, exemption)
    seen: JustRead = {}
    vmi, unknown = await _vmi_of(store, namespace, pod, deadline)
    facts = await resolve_disks(store, settings, namespace, disks_of(pod, vmi), deadline, seen)
    # The one node we might pin to, which the never-strand checks must clear; none for several
    # nodes, or when pins are preferences anyway: nothing to strand on.
    nodes = {fact.node for fact in facts if fact.node}
    name = next(iter(nodes)) if len(nodes) == 1 and settings.pin is PinMode.REQUIRED else None
    blocked = None if name is None else await node_obstacle(store, name, pod, namespace, deadline,
                                                            needs_kubevirt=True, seen=seen)
    decision = decide.decide(facts, blocked, required=settings.pin is PinMode.REQUIRED)
    if unknown is not None:
        decision = dataclasses.replace(decision, warnings=(*decision.warnings, unknown))
    return _decided(pod, decision, settings, Rule.VM, facts)


async def _vmi_of(store: Store, namespace: str, pod: dict[str, Any],
                  deadline: Deadline) -> tuple[dict[str, Any] | None, str | None]:
    """The VMI the pod runs (its hotplugged disks), read through within the deadline; when it cannot
    be read, the pod's own disks are followed and a warning says the hotplugged ones are unknown."""
    owner = kinds.vmi_owner(pod)
    if owner is None:
        return None, None
    try:
        return await read_through(store, VMI, namespace, owner["name"], deadline), None
    except (StoreError, TimeoutError) as exc:
        return None, (f"hotplugged disks unknown: VMI {namespace}/{owner['name']} could not be read "
                      f"({str(exc) or 'no answer before the deadline'})")


@dataclasses.dataclass(frozen=True, slots=True)
class Shared:
    """What a server's share-manager admissions share (`Admissions`); `keep`: adds its promise, uses up a prepared
    answer (a dry run's pod is never created); `preparing`: where an answer for a pod not created yet goes."""

    lane: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)  # one per server (its loop)
    promises: Promises = dataclasses.field(default_factory=Promises)
    answers: PreparedAnswers | None = None
    keep: bool = True
    preparing: list[prepared.Prepared] | None = None
    at_once: bool = False  # only a prepared answer that holds, outside the lane; None for anything longer


async def share_manager_rule(
    namespace: str, pod: dict[str, Any], store: Store, settings: AdmissionSettings, deadline: Deadline, shared: Shared
) -> Outcome:
    """Cold start: Longhorn starts the share-manager only after its first consumer is scheduled,
    so the share-manager follows the VM; every later VM start then follows the share-manager."""
    volume = kinds.labels(pod).get(kinds.SHARE_MANAGER_VOLUME_LABEL)
    if not volume:
        return skip(Rule.SHARE_MANAGER, Alone.NO_VOLUME_LABEL)
    if kinds.spec(pod).get("nodeName"):
        # Some longhorn-manager releases create the pod with NodeName = ShareManager ownerID
        # (controller/share_manager_controller.go createPodManifest): the scheduler never sees
        # it, and a required affinity would only get it rejected by the kubelet, in a loop.
        return skip(Rule.SHARE_MANAGER, Alone.ALREADY_BOUND)
    # An answer prepared while its evicted pod terminated, where it holds: at once, out of turn.
    if shared.answers is not None and shared.preparing is None and not settings.aim_evacuations and \
            (namespace, str(kinds.meta(pod).get("name") or "")) in shared.answers:
        outcome = await _share_manager_turn(namespace, pod, store, settings, deadline,
                                            dataclasses.replace(shared, at_once=True), volume)
        if outcome is not None:
            return outcome
    # One share-manager at a time, from here to its answer, its long loops in slices (`pace.in_slices`): a drain's tens
    # of them, arriving together, would otherwise each hold the loop for a stretch at every step of every VM start.
    try:
        async with asyncio.timeout(deadline.remaining()):
            await shared.lane.acquire()
    except TimeoutError:
        return skip(Rule.SHARE_MANAGER, Alone.DEADLINE, "co-location skipped: no decision before the deadline")
    try:
        return await _share_manager_turn(namespace, pod, store, settings, deadline, shared, volume)
    finally:
        shared.lane.release()


async def _share_manager_turn(namespace: str, pod: dict[str, Any], store: Store, settings: AdmissionSettings,
                              deadline: Deadline, shared: Shared, volume: str) -> Outcome | None:
    """The share-manager rule in its turn in the lane (`shared.at_once`: out of turn, None where it takes a search)."""
    store = Recording(store)  # what the rule reads, for an answer prepared (`rules.placement.prepared`)
    try:
        consumers = await resolve_consumers(store, settings, volume, deadline)
    except (StoreError, TimeoutError) as exc:
        why = f"consumers of {volume} unknown: {str(exc) or 'no answer before the deadline'}"
        return skip(Rule.SHARE_MANAGER, Alone.CONSUMERS_UNKNOWN, f"co-location skipped: {why}", why)
    facts = consumers.facts
    if not facts:
        others = consumers.others
        why = f"no running opted-in VM uses {volume}" + (f" ({'; '.join(others)})" if others else "")
        return skip(Rule.SHARE_MANAGER, Alone.NO_CONSUMER, detail=why)
    required = settings.pin is PinMode.REQUIRED
    if required and settings.aim_evacuations:
        follow = await followed(consumers, pod, namespace, store, deadline)
        if follow is not None:  # its VMs' evacuation is aimed where it can run
            return _decided(pod, follow, settings, Rule.SHARE_MANAGER, facts)
    name = facts[0].node if len({f.node for f in facts}) == 1 else None
    blocked = None if name is None else await node_obstacle(store, name, pod, namespace, deadline, needs_kubevirt=False)
    decision = decide.decide(facts, blocked if required else None, decide.CONSUMERS, required=required)
    if len(facts) == 1:
        # Whether the one VM cannot be followed to its node now: the node cannot take the share-manager
        # (cordoned, a drain's taint, not Ready, full), or the VM is migrating, its target pod not scheduled yet.
        waiting = consumers.leaving.get(kinds.labels(consumers.pods[0]).get(kinds.CREATED_BY_LABEL) or "")
        why = blocked if waiting is None else \
            f"its VM is migrating: target pod {kinds.meta(waiting).get('name')} is not scheduled yet"
        if why is not None:
            among = await _where_vm_can_follow(namespace, pod, store, settings, deadline, consumers, why, shared)
            if among is None:  # at once, no answer prepared that holds
                return None
            # When no node takes both, or that cannot be told: placed as before, saying why.
            decision = among if isinstance(among, Decision) else dataclasses.replace(
                decision, reason=f"{decision.reason}; {among}", warnings=(*decision.warnings, among))
    return _decided(pod, decision, settings, Rule.SHARE_MANAGER, facts)


@dataclasses.dataclass(frozen=True, slots=True)
class _Leaving:
    """The one VM of a share-manager's volume, leaving its node (`why`), as the rule found it."""

    pod: dict[str, Any]
    namespace: str
    vm: str  # "VM namespace/name", for a reason
    uid: str
    source: str
    why: str
    waiting: dict[str, Any] | None  # its migration target pod, not scheduled yet


async def _where_vm_can_follow(namespace: str, pod: dict[str, Any], store: Recording, settings: AdmissionSettings,
                               deadline: Deadline, consumers: Consumers, leaving: str,
                               shared: Shared) -> Decision | str | None:
    """The share-manager of a VM leaving its node (`leaving`: why) goes among the nodes where the VM's migration can
    land too, beside the VMs sent to each (`rules.placement.together`), the VM then sent to the first; else why not."""
    vm_pod = consumers.pods[0]
    uid = str(kinds.labels(vm_pod).get(kinds.CREATED_BY_LABEL) or "")
    vm_namespace = kinds.meta(vm_pod).get("namespace") or ""
    vm = f"VM {vm_namespace}/{kinds.vm_name(vm_pod) or kinds.pod_name(vm_pod)}"
    it = _Leaving(pod=vm_pod, namespace=vm_namespace, vm=vm, uid=uid, source=consumers.facts[0].node or "",
                  why=leaving, waiting=consumers.leaving.get(uid))
    if not shared.at_once:  # the loop given back before a long stretch: a VM start arrived meanwhile goes first
        await asyncio.sleep(0)
    # The VM's namespace: its claims are checked; the share-manager mounts none (host paths only).
    view = await fit_view(store, it.namespace, deadline)
    if isinstance(view, str):
        return f"cannot tell where the migration of its VM can land: {view}"
    position = view.nodes_changed(None)[0]  # before anything the search reads: what changes after is seen as changed
    target = await _prepared_or_target(namespace, pod, store, settings, deadline, view, shared, it)
    if target is None or isinstance(target, Decision):
        return target
    if isinstance(target, str):
        return f"cannot tell where the migration of {vm} can land: {target}"
    ask, reads = prepared.ask_of(pod, namespace, view.memo), tuple(store.reads)
    await asyncio.sleep(0)
    now = time.monotonic()
    shared.promises.review(now, view, store.store.peek, shared.answers or ())
    search = together.DestinationSearch(pod, namespace, target, it.namespace, it.source, view, shared.promises, uid)
    if not await in_slices(search, deadline):
        return (f"cannot tell where the migration of {vm} can land: no answer before the deadline "
                f"({len(search.taking) + len(search.refused)} of {len(search.nodes)} nodes judged)")
    found = search.found
    decision = together.decide_together(found, vm, leaving, required=settings.pin is PinMode.REQUIRED,
                                        most=together.among_at_most(pod),
                                        spread=str(kinds.labels(pod).get(kinds.SHARE_MANAGER_VOLUME_LABEL)))
    if decision is None:
        return together.nowhere(found, vm)
    if shared.keep and decision.preferences and kinds.meta(pod).get("name"):
        shared.promises.make(uid, it.source, decision.preferences[0][0], (namespace, str(kinds.meta(pod)["name"])),
                             PodUsage.of(target.pod), now)
        if shared.preparing is not None and ask is not None:
            shared.preparing.append(prepared.Prepared(
                decision=decision, ask=ask, leaving=leaving, reads=reads, position=position, made=now, vm=uid,
                target=target, moved=search.demand_for_room(),
                found=dataclasses.replace(found, nodes=found.nodes[:together.among_at_most(pod)], refused={})))
    return decision


async def _prepared_or_target(namespace: str, pod: dict[str, Any], store: Recording, settings: AdmissionSettings,
                              deadline: Deadline, view: fit.View, shared: Shared,
                              it: _Leaving) -> Decision | TargetPod | str | None:
    """The answer prepared for the pod where it holds (`prepared.check`, its reads answer the same), used up; else the
    VM's migration target pod to judge the nodes for, or why it cannot be told; None `at_once` (judged in its turn)."""
    key = (namespace, str(kinds.meta(pod).get("name") or ""))
    answers = None if shared.preparing is not None or not key[1] else shared.answers
    held = None if answers is None else answers.get(key)
    if answers is not None and held is not None:
        checked = prepared.check(held, prepared.ask_of(pod, namespace, view.memo), it.why, view, time.monotonic())
        why = checked.why or await recorded.changed(store.store, held.reads, deadline)
        answer = why or _left_of(held, checked, pod, namespace, view, shared.promises, settings, it)
        if isinstance(answer, Decision):  # its preferred node kept: where its VM was sent
            if shared.keep:  # a dry run's pod is never created
                answers.pop(key, None)
            return prepared.as_answer(dataclasses.replace(held, decision=answer), time.monotonic())
        if not shared.at_once:  # let go, and its promise with it (the one judging makes, if any, replaces it)
            log.info("prepared answer not used", extra={"fields": {"namespace": key[0], "pod": key[1], "why": answer}})
            if shared.keep:
                answers.pop(key, None)
                shared.promises.end(held.vm, made=held.made)
            if why is None:
                return held.target
    if shared.at_once:
        return None
    return await migration_target(store, settings, it.pod, it.waiting, deadline, view.memo)


def _left_of(held: prepared.Prepared, checked: prepared.Check, pod: dict[str, Any], namespace: str, view: fit.View,
             promises: Promises, settings: AdmissionSettings, it: _Leaving) -> Decision | str:
    """The prepared decision, its preferred node kept, those of its nodes that changed since judged again beside the
    VMs sent there (for room alone where only room changed) and left out if they no longer take both; else why not."""
    refused = {} if held.moved is None or not checked.room else \
        together.room_again(held.moved, checked.room, view, promises, it.uid)
    if checked.again:
        again = together.DestinationSearch(pod, namespace, held.target, it.namespace, it.source, view, promises,
                                           it.uid).judge_again(checked.again)
        if isinstance(again, str):
            return again
        refused = {**refused, **again}
    if not refused:
        return held.decision
    why = refused[min(refused)]
    left = None if held.found is None else together.left_of(held.found, held.decision, refused)
    decision = None if left is None else together.decide_together(
        left, it.vm, it.why, required=settings.pin is PinMode.REQUIRED,
        most=together.among_at_most(pod), prefer=held.decision.preferences[0][0])
    if decision is None:
        return why
    out = sorted(refused)
    return dataclasses.replace(decision, reason=f"{decision.reason}; left out since: {together.named(out)} ({why})")


def _decided(pod: dict[str, Any], decision: Decision, settings: AdmissionSettings, rule: Rule,
             facts: list[Fact]) -> Outcome:
    # Not applied to the pod first: the patch only adds, each where the pod has the parent
    # (tests/rules/placement/test_patch.py applies it to generated pods of every shape).
    ops = patch.patch_for(pod, decision, settings)
    return Outcome(rule, decision=decision, facts=tuple(facts), patch=tuple(ops), warnings=decision.warnings)

