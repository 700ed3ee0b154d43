"""A drain's share-managers answered while their evicted pods terminate: the pods longhorn-manager
creates again get the same answers as without it, at once, and get them judged anew whenever
something those answers rest on changed; the VMs they send stay counted meanwhile."""
import asyncio
import json
import time

import pytest
from tests.support.kube import (LONGHORN_NS, OLD_CPU, annotations, apply_valid, decode_patch, launcher_pod_of, node, review,
                                rwx_disk, share_manager_pod, vmi, workload_pod)
from tests.support.fitting import term, workload
from tests.support.stores import listed_store

from webhook.admission import server
from webhook.admission.prepare import Preparer
from webhook.cluster.reflector import Event, EventType
from webhook.config import PinMode, Settings
from webhook.rules.placement.prepared import PREPARED_SECONDS

VMS = 6
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
# What the apiserver's DefaultTolerationSeconds adds to every pod before the webhooks see it.
DEFAULTED = [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
              "tolerationSeconds": 300} for taint in ("not-ready", "unreachable")]


def promised(promises):
    """How many VMs are promised a node, in all."""
    return sum(promises.to(node).vms for node in list(promises.nodes()))



def sm(volume, node_name=None, *, extra=(), **kw):
    """A share-manager pod as the apiserver holds it (running) or sends it to the webhook (new)."""
    return share_manager_pod(volume, node_name, tolerations=[*extra, *DEFAULTED], **kw)


def drained_cluster():
    """node-a drained with VMS VMs still on it, their share-managers evicted, terminating there."""
    vms = [vmi(f"vm{i}", "node-a", f"d{i}") for i in range(VMS)]
    disks = [obj for i in range(VMS) for obj in rwx_disk(f"d{i}", None, state="stopped", owner="node-a")]
    evicted = [sm(f"pvc-d{i}", "node-a", terminating=True) for i in range(VMS)]
    nodes = [node("node-a", unschedulable=True, taints=[DRAIN_TAINT]), *(node(f"node-{x}") for x in "bcde")]
    return [*nodes, *vms, *map(launcher_pod_of, vms), *disks, *evicted, workload_pod(1, "node-b")]


class Clock:
    def __init__(self):
        self.now = time.monotonic()

    def __call__(self):
        return self.now


def apply(store, kind, event, obj):
    (informer,) = [i for i in store.informers if i.resource.kind == kind]
    informer.apply(Event(event, obj))


def gone(store):
    """The kubelet has confirmed each evicted pod's end: the caches see it deleted."""
    for i in range(VMS):
        apply(store, "Pod", EventType.DELETED, sm(f"pvc-d{i}", "node-a", terminating=True))


async def admitted(admissions, volume, *, pod=None, dry_run=False):
    pod = pod or sm(volume)
    sent = review(pod, namespace=LONGHORN_NS)
    sent["request"]["dryRun"] = dry_run
    raw = await admissions.answer(json.dumps(sent).encode(), admissions.deadline(10.0), 0.0)
    envelope = json.loads(raw)
    assert envelope["response"]["allowed"] is True
    return apply_valid(pod, decode_patch(envelope))


def placement(pod):
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    return affinity, annotations(pod)["kubevirt-scheduler/decision"]


async def prepared_server(settings=None, clock=None):
    store = listed_store(drained_cluster(), settings)
    admissions = server.Admissions(store, settings or Settings())
    preparer = Preparer(store, settings or Settings(), admissions, clock=clock or Clock())
    return store, admissions, preparer


async def test_the_pods_created_again_get_the_answers_they_would_have_got_prepared_before():
    """Each the answer it would have got arriving in the order they were prepared in (a drain's
    share-managers arrive in no order of their own: each counts the VMs sent before it)."""
    store, admissions, preparer = await prepared_server()
    order = [p["metadata"]["labels"]["longhorn.io/share-manager"] for p in store.share_managers_leaving()]
    live_store = listed_store(drained_cluster())
    gone(live_store)
    live = server.Admissions(live_store, Settings())
    expected = {volume: placement(await admitted(live, volume)) for volume in order}
    assert await preparer.look() == VMS and len(admissions.shared.answers) == VMS and promised(admissions.shared.promises) == VMS
    assert await preparer.look() == 0  # each answered once while it is recent
    gone(store)
    found = {f"pvc-d{i}": await admitted(admissions, f"pvc-d{i}") for i in range(VMS)}
    assert {volume: placement(pod) for volume, pod in found.items()} == expected
    assert all(decision == "pinned-among" for _, decision in expected.values())
    assert len({placement(pod)[0]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchFields"][0]
                ["values"][0] for pod in found.values()}) >= 3  # spread, as live answers are
    assert all("worked out" in annotations(pod)["kubevirt-scheduler/reason"] for pod in found.values())
    assert len(admissions.shared.answers) == 0 and promised(admissions.shared.promises) == VMS  # used up; the VMs still counted


async def test_a_node_the_answer_names_that_changed_since_is_judged_again():
    """A pod bound there since: the node still takes both, and the answer holds."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    first = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d0")).decision.preferences[0][0]
    apply(store, "Pod", EventType.ADDED, workload_pod(7, first))
    assert "worked out" in annotations(await admitted(admissions, "pvc-d0"))["kubevirt-scheduler/reason"]


async def test_share_managers_bound_since_to_a_node_the_answer_names_leave_it_as_judged_but_for_its_room(caplog):
    """The drain's other share-managers bound where it prefers: the answer holds while the node has
    room for the VM; filled to its last pod slot by them, the pod is judged as it arrives, away from it."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    first = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d0")).decision.preferences[0][0]
    apply(store, "Pod", EventType.ADDED, sm("pvc-z0", first))
    assert "worked out" in annotations(await admitted(admissions, "pvc-d0"))["kubevirt-scheduler/reason"]
    first = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d1")).decision.preferences[0][0]
    for i in range(1, 110 - len(list((await store.fit_view("default")).pods_on(first)))):
        apply(store, "Pod", EventType.ADDED, sm(f"pvc-z{i}", first))
    with caplog.at_level("INFO", "webhook.mutate"):
        pod = await admitted(admissions, "pvc-d1")
    assert "worked out" not in annotations(pod)["kubevirt-scheduler/reason"]
    assert first not in annotations(pod)["kubevirt-scheduler/node"]
    (said,) = [r.fields for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert f"node {first} has no room" in said["why"], said


async def test_a_pod_turning_the_vm_away_bound_since_to_a_node_the_answer_names_voids_it(caplog):
    """A pod whose anti-affinity keeps VMs off its node, bound where the answer prefers since: the
    node is judged again in full, and the pod judged as it arrives, away from it."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    first = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d0")).decision.preferences[0][0]
    guard = workload("guard", first, anti=[term(matchLabels={"kubevirt.io": "virt-launcher"})])
    apply(store, "Pod", EventType.ADDED, guard)
    with caplog.at_level("INFO", "webhook.mutate"):
        pod = await admitted(admissions, "pvc-d0")
    assert "worked out" not in annotations(pod)["kubevirt-scheduler/reason"]
    assert first not in annotations(pod)["kubevirt-scheduler/node"]
    (said,) = [r.fields for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert first in said["why"] and "anti-affinity" in said["why"], said


async def test_an_answer_naming_a_node_that_no_longer_takes_both_is_not_used(caplog):
    """The node it prefers cordoned since: the pod is judged as it arrives, away from it."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    first = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d0")).decision.preferences[0][0]
    apply(store, "Node", EventType.MODIFIED, node(first, unschedulable=True))
    with caplog.at_level("INFO", "webhook.mutate"):
        pod = await admitted(admissions, "pvc-d0")
    assert "worked out" not in annotations(pod)["kubevirt-scheduler/reason"]
    assert placement(pod)[1] == "pinned-among" and first not in annotations(pod)["kubevirt-scheduler/node"]
    (said,) = [r.fields for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert said["pod"] == "share-manager-pvc-d0" and f"node {first} is cordoned" in said["why"], said
    assert (LONGHORN_NS, "share-manager-pvc-d0") not in admissions.shared.answers


async def test_a_named_node_other_than_the_preferred_that_no_longer_takes_both_is_left_out(caplog):
    """Another node the answer names cordoned since: the answer holds without it, its preferred node
    the same (where its VM was sent), and says so; the pod is never required where it cannot land."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    held = admissions.shared.answers.get((LONGHORN_NS, "share-manager-pvc-d0")).decision
    first, other = held.preferences[0][0], next(name for name in held.among if name != held.preferences[0][0])
    apply(store, "Node", EventType.MODIFIED, node(other, unschedulable=True))
    with caplog.at_level("INFO", "webhook.mutate"):
        pod = await admitted(admissions, "pvc-d0")
    reason = annotations(pod)["kubevirt-scheduler/reason"]
    assert "worked out" in reason and f"left out since: {other} (node {other} is cordoned" in reason, reason
    affinity, outcome = placement(pod)
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert outcome == "pinned-among"
    assert {value for term in required for field in term["matchFields"] for value in field["values"]} == \
        set(held.among) - {other}
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchFields"][0]["values"] \
        == [first]
    assert not [r for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert promised(admissions.shared.promises) == VMS and admissions.shared.promises.to(first).vms >= 1  # its VM still sent there


async def test_a_pod_that_asks_the_nodes_otherwise_is_judged_anew():
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    pod = sm("pvc-d0", extra=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    assert "worked out" not in annotations(await admitted(admissions, "pvc-d0", pod=pod))["kubevirt-scheduler/reason"]


async def test_a_dry_run_leaves_the_answer_for_the_pod():
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    dry = await admitted(admissions, "pvc-d0", dry_run=True)
    assert "worked out" in annotations(dry)["kubevirt-scheduler/reason"]
    assert (LONGHORN_NS, "share-manager-pvc-d0") in admissions.shared.answers
    assert placement(await admitted(admissions, "pvc-d0")) == placement(dry)


async def test_a_vm_sent_by_an_answer_prepared_stays_counted_until_its_pod_comes_or_the_answer_is_let_go():
    clock = Clock()
    store, admissions, preparer = await prepared_server(clock=clock)
    await preparer.look()
    gone(store)
    view = await store.fit_view("default")
    promises = admissions.shared.promises
    promises.review(clock.now + 3, view, store.peek, admissions.shared.answers)
    assert promised(promises) == VMS  # their pods are not created yet, but are coming
    clock.now += PREPARED_SECONDS + 1
    await preparer.look()  # not created again in time: let go, and their VMs no longer counted
    assert len(admissions.shared.answers) == 0 and promised(promises) == 0


async def test_without_a_prepared_answer_a_promise_of_a_pod_not_there_ends():
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    view = await store.fit_view("default")
    admissions.shared.promises.review(time.monotonic() + 3, view, store.peek)
    assert promised(admissions.shared.promises) == 0


@pytest.mark.parametrize("settings", [Settings(pin=PinMode.OFF), Settings(share_manager_rule=False)],
                         ids=["pins off", "share-manager rule off"])
async def test_nothing_is_prepared_where_the_rule_would_not_answer(settings):
    _, admissions, preparer = await prepared_server(settings)
    assert await preparer.look() == 0 and len(admissions.shared.answers) == 0 and promised(admissions.shared.promises) == 0


async def test_so_many_answers_held_at_most_the_others_said(monkeypatch, caplog):
    monkeypatch.setattr("webhook.admission.prepare.MOST_HELD", 2)
    _, admissions, preparer = await prepared_server()
    with caplog.at_level("INFO", "webhook.prepare"):
        assert await preparer.look() == 2 and len(admissions.shared.answers) == 2
    [said] = [r.fields for r in caplog.records if r.getMessage() == "share-managers' answers prepared"]
    assert list(said["not_prepared"].values()) == ["too many answers held"] * (VMS - 2)
    assert promised(admissions.shared.promises) == 2  # the VMs of the answers not held are not counted


async def test_the_caches_keep_what_the_checks_read_of_a_share_manager_only_while_it_terminates():
    store = listed_store(drained_cluster() + [sm("pvc-z", "node-b")])
    leaving = store.share_managers_leaving()
    assert sorted(p["metadata"]["name"] for p in leaving) == [f"share-manager-pvc-d{i}" for i in range(VMS)]
    assert all("tolerations" in p["spec"] for p in leaving)
    assert "tolerations" not in store.peek(store.pods.resource, LONGHORN_NS, "share-manager-pvc-z")[1]["spec"]
    gone(store)
    assert store.share_managers_leaving() == []


async def test_a_share_manager_leaving_with_no_vm_to_follow_gets_no_answer_said_once(caplog):
    """A share-manager of a volume no running VM uses (its VM stopped) terminates: nothing to prepare,
    and the log says why once, not at every look while it terminates."""
    store = listed_store([node("node-b"), sm("pvc-unused", "node-b", terminating=True)])
    admissions = server.Admissions(store, Settings())
    preparer = Preparer(store, Settings(), admissions)
    with caplog.at_level("INFO", "webhook.prepare"):
        assert await preparer.look() == 0 and await preparer.look() == 0
    said = [r.fields for r in caplog.records if r.getMessage() == "share-managers' answers prepared"]
    assert len(said) == 1 and "no running opted-in VM uses pvc-unused" in said[0]["not_prepared"]["share-manager-pvc-unused"]
    assert len(admissions.shared.answers) == 0 and promised(admissions.shared.promises) == 0


async def test_a_prepared_answer_is_given_out_of_turn_while_a_share_manager_without_one_holds_the_lane():
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    async with admissions.shared.lane:  # another share-manager judging the nodes
        pod = await asyncio.wait_for(admitted(admissions, "pvc-d0"), 2.0)
    assert "worked out" in annotations(pod)["kubevirt-scheduler/reason"]
    assert placement(pod)[1] == "pinned-among"


async def test_an_answer_let_go_keeps_its_promise_where_another_replica_answered_the_pod():
    """The apiserver sent the new pod to the other replica: this one's answer is never used, but
    the VM is still coming to follow it, and stays counted here."""
    clock = Clock()
    store, admissions, preparer = await prepared_server(clock=clock)
    await preparer.look()
    gone(store)
    apply(store, "Pod", EventType.ADDED, sm("pvc-d0", "node-c"))  # created, and bound, through the other
    clock.now += PREPARED_SECONDS + 1
    await preparer.look()
    assert len(admissions.shared.answers) == 0 and promised(admissions.shared.promises) == 1


async def test_an_answer_is_not_used_once_the_vms_node_is_labelled_otherwise():
    """Its VM's migration target was rendered from the node's CPU labels, and is kept with it."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    relabelled = node("node-a", unschedulable=True, taints=[DRAIN_TAINT], cpu=OLD_CPU)
    apply(store, "Node", EventType.MODIFIED, relabelled)
    pod = await admitted(admissions, "pvc-d0")
    assert "worked out" not in annotations(pod)["kubevirt-scheduler/reason"]


def pv_of(volume):
    (pv,) = [o for o in drained_cluster() if o["kind"] == "PersistentVolume" and o["metadata"]["name"] == volume]
    return pv


async def test_an_answer_is_not_used_once_anything_the_rule_read_changed(caplog):
    """The PV its consumers were found through, labelled since (no list names it): judged anew."""
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    pv = pv_of("pvc-d0")
    pv["metadata"].setdefault("labels", {})["topology.kubernetes.io/zone"] = "z2"
    apply(store, "PersistentVolume", EventType.MODIFIED, pv)
    with caplog.at_level("INFO", "webhook.mutate"):
        pod = await admitted(admissions, "pvc-d0")
    assert "worked out" not in annotations(pod)["kubevirt-scheduler/reason"]
    (said,) = [r.fields for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert "what it read of" in said["why"] and "pvc-d0 changed since" in said["why"], said
    assert "worked out" in annotations(await admitted(admissions, "pvc-d1"))["kubevirt-scheduler/reason"]


async def test_a_read_added_to_the_rule_is_part_of_what_its_answer_rests_on(monkeypatch, caplog):
    """A rule that reads one more object (here the VM's claim, beside its node's obstacles) needs no
    other change for a prepared answer to hold only while that object is unchanged."""
    from webhook.admission import admit
    from webhook.kinds import PVC
    from webhook.lookup.resolve import read_through

    async def obstacle_and_claim(store, name, pod, namespace, deadline, **kw):
        volume = pod["metadata"]["labels"]["longhorn.io/share-manager"]  # pvc-dN, of claim dN
        await read_through(store, PVC, "default", volume.removeprefix("pvc-"), deadline)
        return await node_obstacle(store, name, pod, namespace, deadline, **kw)

    node_obstacle = admit.node_obstacle
    monkeypatch.setattr(admit, "node_obstacle", obstacle_and_claim)
    store, admissions, preparer = await prepared_server()
    await preparer.look()
    gone(store)
    (claim,) = [o for o in drained_cluster() if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == "d0"]
    claim["spec"]["accessModes"] = ["ReadWriteOnce"]
    apply(store, "PersistentVolumeClaim", EventType.MODIFIED, claim)
    with caplog.at_level("INFO", "webhook.mutate"):
        assert "worked out" not in annotations(await admitted(admissions, "pvc-d0"))["kubevirt-scheduler/reason"]
        assert "worked out" in annotations(await admitted(admissions, "pvc-d1"))["kubevirt-scheduler/reason"]
    (said,) = [r.fields for r in caplog.records if r.getMessage() == "prepared answer not used"]
    assert "what it read of PersistentVolumeClaim default d0 changed since" in said["why"], said


async def test_an_answer_whose_reads_changed_is_worked_out_again_at_the_next_look():
    """Not 15 s later: the pod created meanwhile would be judged as it arrives."""
    store, admissions, preparer = await prepared_server()
    assert await preparer.look() == VMS and await preparer.look() == 0
    pv = pv_of("pvc-d0")
    pv["metadata"].setdefault("labels", {})["topology.kubernetes.io/zone"] = "z2"
    apply(store, "PersistentVolume", EventType.MODIFIED, pv)
    assert await preparer.look() == 1
    gone(store)
    assert "worked out" in annotations(await admitted(admissions, "pvc-d0"))["kubevirt-scheduler/reason"]
    assert promised(admissions.shared.promises) == VMS  # its VM counted once
