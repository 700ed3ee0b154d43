"""The checks together, in the scheduler's order: rows that pass or that no single check owns,
every check needed by some row, and no input that makes them raise; and the node-level checks of
a pin in order (cordon, readiness, KubeVirt's label, taints, the pod's own affinity), each both ways."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.support.fitting import (
    BUSY, CASES, DB, HOSTNAME, NS, PARAMS, ROOTDISK, ZONE, assert_row, init_container, judged, local_volume, on, rows,
    sized, term, three_nodes, view_of, vm, workload,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.kube import migration_target, node, paths, vm_pod

from webhook.rules.fit import checks
from webhook.rules.fit.checks import node_unschedulable, why_not_fit, why_not_run
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.fields import CannotTell
from webhook.rules.fit.memo import Memo
from webhook.rules.fit.resources import node_resources_fit
from webhook.rules.fit.view import StaticView
from webhook.rules.fit.volumes import volumes


@pytest.mark.parametrize(PARAMS, rows(None, "*"))
def test_why_not_fit(pod, node_name, objects, nodes, check, fragment):
    assert_row(pod, node_name, objects, nodes, check, fragment)


@pytest.mark.parametrize("check", checks.CHECKS, ids=lambda c: c.__name__)
def test_every_check_decides_some_row(check, monkeypatch):
    flipped = []
    for case in CASES:
        pod, node_name, objects, nodes, expected, _ = case.values
        if expected in (None, "*"):
            continue
        monkeypatch.setattr(checks, "CHECKS", tuple(c for c in checks.CHECKS if c is not check))
        without = judged(pod, node_name, objects, nodes)[2]
        monkeypatch.undo()
        if without is None:
            flipped.append(case.id)
    assert flipped, f"no row needs {check.__name__}"


@pytest.mark.parametrize("subject", ["the VM", "the pod"])
def test_subject_names_who_asks(subject):
    view = view_of(workload("busy", "node-a", requests=BUSY))
    reason = why_not_fit(vm(), NS, on(view, "node-a"), view, subject)
    assert reason == f"node node-a has no room: cpu 3950m of 4 requested, {subject} asks 100m"


def test_demand_is_read_once_for_many_nodes():
    view = view_of(workload("busy", "node-a", requests=BUSY))
    demand = Demand.of(vm(), NS)
    assert [why_not_fit(None, NS, n, view, demand=demand) is None for n in view.nodes()] == [False, True, True]


def test_the_namespace_comes_from_the_request():
    """A pod under admission may have no metadata.namespace: the request's namespace counts."""
    pod = vm(anti=[term(matchLabels=DB)])
    view = view_of(workload("db-0", "node-b", labels=DB, namespace="prod"))
    assert why_not_fit(pod, "prod", on(view, "node-b"), view) is not None
    assert why_not_fit(pod, NS, on(view, "node-b"), view) is None


@pytest.mark.parametrize("pod, the_node", [
    ("not a pod", sized("node-b")),
    ({"spec": {"containers": [{"name": "c", "resources": {"requests": ["cpu"]}}]}}, sized("node-b")),
    ({"spec": {"containers": [{"name": "c", "ports": [{"hostPort": "8080"}]}]}}, sized("node-b")),
    ({"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}},
     sized("node-b")),
    (vm(), "not a node"),
    (vm(), {"metadata": {"name": "node-b", "labels": []}, "status": {"allocatable": {"cpu": "4"}}}),
    (vm(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]), sized("node-b")),
], ids=["pod-not-object", "requests-not-object", "host-port-string", "term-without-topology-key",
        "node-not-object", "labels-not-object", "ephemeral-volume"])
def test_malformed_input_never_raises_and_never_fits(pod, the_node):
    reason = why_not_fit(pod, NS, the_node, view_of())
    assert reason is not None and reason.startswith(("cannot tell", "node ")), reason



json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def _everything() -> list[dict[str, Any]]:
    """A pod using every feature the checks read, and a cluster with something for each check."""
    pod = vm(claims=("vm1-rootdisk", "scratch"), labels={"app": "web"},
             anti=[term(matchLabels=DB)], affinity=[term(ZONE, matchLabels={"app": "cache"})],
             spread=[{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {"app": "web"}}}],
             ports=[{"containerPort": 8080, "hostPort": 8080}],
             initContainers=[init_container("proxy", "100m", sidecar=True), init_container("prep", "1")],
             overhead={"memory": "100Mi"})
    return [pod, sized("node-b"), *local_volume("scratch", "zone-a", key=ZONE),
            workload("guard", "node-b", anti=[term(matchLabels={"kubevirt.io": "virt-launcher"})]),
            workload("cache-0", "node-a", labels={"app": "cache"})]


EVERYTHING = _everything()
GARBAGE_PATHS = [(i, p) for i, obj in enumerate(EVERYTHING) for p in paths(obj) if p]


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_garbage_never_raises(data):
    objects = copy.deepcopy(EVERYTHING)
    for _ in range(data.draw(st.integers(1, 3))):
        index, path = data.draw(st.sampled_from(GARBAGE_PATHS))
        parent = objects[index]
        try:
            for step in path[:-1]:
                parent = parent[step]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed this path
    pod, the_node, claim, volume, *pods = objects
    view = StaticView([three_nodes()[0], the_node, three_nodes()[2]], [*pods, ROOTDISK[3]], [claim, ROOTDISK[0]],
                      [volume, ROOTDISK[1]])
    reason = why_not_fit(pod, NS, the_node, view)
    assert reason is None or isinstance(reason, str)


# --------------------------------------------------------------------------- the node-level checks

NO_SCHEDULE = {"key": "dedicated", "value": "storage", "effect": "NoSchedule"}
PREFER_NO = {"key": "busy", "value": "yes", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize("the_node, needs_kubevirt, fragment", [
    (node("node-b"), True, None),
    (None, True, "not found"),
    (node("node-b", unschedulable=True), True, "cordoned"),
    (node("node-b", ready=False), True, "not Ready"),
    (node("node-b", schedulable_label=False), True, "lacks kubevirt.io/schedulable=true"),
    (node("node-b", schedulable_label=False), False, None),  # share-manager pods don't need it
    (node("node-b", taints=[NO_SCHEDULE]), True, "untolerated taint dedicated=storage:NoSchedule"),
    (node("node-b", taints=[PREFER_NO]), True, None),
    (node("node-b", **{"kubernetes.io/arch": "arm64"}), True, "nodeSelector/affinity"),
], ids=["fine", "missing", "cordoned", "not-ready", "no-kubevirt-label", "label-not-needed", "tainted",
        "prefer-no-schedule", "selector"])
def test_why_not_run(the_node, needs_kubevirt, fragment):
    pod = vm_pod() if needs_kubevirt else {"spec": {}}  # a share-manager pod has no KubeVirt nodeSelector
    reason = why_not_run("node-b", the_node, pod, needs_kubevirt=needs_kubevirt)
    assert (reason is None) if fragment is None else (fragment in reason)


def test_node_without_ready_condition_is_not_ready():
    bare = node("node-b")
    bare["status"] = {}
    assert "not Ready" in why_not_run("node-b", bare, vm_pod(), needs_kubevirt=True)


def test_a_node_read_afresh_is_answered_afresh():
    """A direct GET hands out a new node object each time: its answer is its own (a node
    cordoned meanwhile is seen)."""
    pod = vm_pod()
    assert why_not_run("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None
    cordoned = node("node-fresh")
    cordoned["spec"] = {"unschedulable": True}
    assert why_not_run("node-fresh", cordoned, pod, needs_kubevirt=True) == "node node-fresh is cordoned"
    for _ in range(50):
        assert why_not_run("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None


def test_with_the_stores_memo_a_node_or_pod_that_changed_is_answered_as_it_is_now():
    """A drain judges pods of a few kinds on the same nodes one after another, and the store's memo
    keeps the node-level answer; a node that changed since (cordoned, tainted, relabelled), or a
    pod that reads differently (tolerations, nodeSelector, node affinity), is answered afresh,
    each as without the memo, and a node takes one place in the memo whatever happened to it."""
    memo = Memo()
    tolerant = vm_pod()
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    picky = vm_pod()
    picky["spec"]["nodeSelector"] = {**picky["spec"].get("nodeSelector", {}), "disk": "ssd"}
    far = vm_pod()
    far["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-c"]}]}]}}}
    steps = [
        (node("node-b"), vm_pod(), None),
        (node("node-b", unschedulable=True), vm_pod(), "cordoned"),
        (node("node-b"), vm_pod(), None),
        (node("node-b", taints=[NO_SCHEDULE]), vm_pod(), "untolerated taint"),
        (node("node-b", taints=[NO_SCHEDULE]), tolerant, None),
        (node("node-b", taints=[NO_SCHEDULE]), vm_pod(), "untolerated taint"),
        (node("node-b"), picky, "nodeSelector/affinity"),
        (node("node-b", disk="ssd"), picky, None),
        (node("node-b", disk="ssd"), far, "nodeSelector/affinity"),
        (node("node-b", ready=False), vm_pod(), "not Ready"),
        (node("node-b"), vm_pod(), None),
    ]
    for the_node, pod, fragment in steps:
        with_memo = why_not_run("node-b", the_node, pod, needs_kubevirt=True, memo=memo,
                                demand=Demand.of(pod, "default"))
        assert with_memo == why_not_run("node-b", the_node, pod, needs_kubevirt=True)
        assert (with_memo is None) if fragment is None else (fragment in with_memo)
    assert len(memo) == 1


def test_a_pod_whose_node_level_reads_are_too_large_to_hold_is_answered_without_the_memo():
    """The memo holds what the checks read of a pod as JSON, at most KEY_BYTES of it: a pod of
    thousands of tolerations is answered as without the memo, and leaves nothing in it."""
    memo = Memo()
    crowded = vm_pod()
    crowded["spec"]["tolerations"] = [{"key": f"t{i}", "operator": "Exists"} for i in range(2000)]
    tainted = node("node-b", taints=[NO_SCHEDULE])
    assert "untolerated taint" in why_not_run("node-b", tainted, crowded, needs_kubevirt=True, memo=memo,
                                              demand=Demand.of(crowded, "default"))
    assert len(memo) == 0
    crowded["spec"]["tolerations"].append({"key": "dedicated", "operator": "Exists"})
    assert why_not_run("node-b", tainted, crowded, needs_kubevirt=True, memo=memo,
                       demand=Demand.of(crowded, "default")) is None
    assert len(memo) == 0


# What every check shares: its answer passed on, and "cannot tell" (which counts as not fitting)
# in place of an exception, saying which node, for whom and why.
def judged_alone(check, pod, subject="the VM"):
    """`check` alone, as `why_not_fit` runs every check."""
    view = view_of(nodes=[sized("node-b", cpu="2")])
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(checks, "CHECKS", (check,))
        return checks.why_not_fit(pod, NS, view.node("node-b"), view, subject, demand=Demand.of(pod, NS, view.memo))


def test_a_checks_answer_is_passed_on():
    assert judged_alone(node_resources_fit, vm()) is None
    assert judged_alone(node_resources_fit, vm(requests={"cpu": "3"})) == \
        "node node-b is too small: the VM asks cpu 3, the node has 2 in all"


def test_a_check_the_objects_do_not_let_decide_cannot_tell():
    """The VM's disk is a claim the view does not hold."""
    assert judged_alone(volumes, vm(claims=("vm1-rootdisk", "missing")), "the share-manager") == \
        "cannot tell whether node node-b fits the share-manager: claim missing is not known"


def raising(error):
    def node_ports(demand, node, view, subject):
        raise error
    return node_ports


@pytest.mark.parametrize("error, detail", [
    (CannotTell("a namespaceSelector needs the Namespace objects"), "a namespaceSelector needs the Namespace objects"),
    (KeyError("hostPort"), "the node ports check could not read the objects (KeyError)"),
    (TypeError("'int' object is not iterable"), "the node ports check could not read the objects (TypeError)"),
], ids=["cannot-tell", "unforeseen-key", "unforeseen-type"])
def test_a_check_that_raises_still_answers_cannot_tell(error, detail):
    assert judged_alone(raising(error), vm()) == f"cannot tell whether node node-b fits the VM: {detail}"


SPREAD = {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
          "labelSelector": {"matchLabels": {"app": "web"}}}


@pytest.mark.parametrize("pod, by_room", [
    (migration_target(), True),  # KubeVirt's anti-affinity selects its own VMI's pods by KubeVirt's label
    (vm(), True),
    (vm(anti=[term(matchLabels={"app": "db"})]), False),  # may select a pod that takes only room
    (vm(affinity=[term(matchLabels={"app": "db"})]), False),
    (vm(spread=[SPREAD]), False),
], ids=["migration target", "no terms", "anti-affinity by another label", "affinity", "spread"])
def test_a_pod_judged_by_room_alone_where_only_pods_that_take_room_come_and_go(pod, by_room):
    """Whether a node judged for the pod stays so, but for its room, while pods that take only room
    (no host ports, no anti-affinity, no KubeVirt label) come and go there."""
    assert checks.judged_by_room(Demand.of(pod, "default")) is by_room


# NodeUnschedulable: a cordoned node (`kubectl cordon`, a drain) takes no new pod of ours.
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}


@pytest.mark.parametrize("the_node, why", [
    (node("node-b"), None),
    (node("node-b", unschedulable=True), "node node-b is cordoned"),
    (node("node-b", unschedulable=True, taints=[DRAIN_TAINT]), "node node-b is cordoned"),
    (node("node-b", taints=[DRAIN_TAINT]), None),  # the taint is TaintToleration's to judge
    (node("node-b", ready=False), None),  # readiness is another check's
    ({"metadata": {"name": "node-b"}, "spec": None}, None),
    ({"metadata": {"name": "node-b"}, "spec": {"unschedulable": False}}, None),
], ids=["schedulable", "cordoned", "drained", "tainted-only", "not-ready", "no-spec", "uncordoned"])
def test_node_unschedulable(the_node, why):
    assert node_unschedulable("node-b", the_node) == why
