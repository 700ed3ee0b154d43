"""What the nodes told a drain's share-managers of one shape, kept for the next one on the
production caches: never what a node said before it changed, nor what a VM of another shape was told."""
import asyncio

import pytest
from tests.support.kube import (ALLOCATABLE, LONGHORN_NS, launcher_pod_of, node, rwx_disk, share_manager_pod, vmi,
                                workload_pod)

from tests.support.stores import listed_store
from webhook.cluster.reflector import Event, EventType
from webhook.config import Settings
from webhook.rules.fit.view import StaticView
from webhook.rules.keeping.running import read_vmi
from webhook.rules.kubevirt.target import target_pod
from webhook.rules.placement import judged, together
from webhook.rules.placement.together import destinations

SOURCE = node("node-a", unschedulable=True)
OTHERS = [node(f"node-{name}") for name in "bcd"]


def cached():
    disks = [obj for name in ("vm1", "vm2") for obj in rwx_disk(f"disk-{name}", None, state="stopped", owner="node-a")]
    store = listed_store([SOURCE, *OTHERS, *disks])
    return store, {informer.resource.kind: informer for informer in store.informers}


def drained_vm(name, memory=None):
    """A VM on the drained node-a: its launcher pod and migration target (`memory`: what it asks)."""
    the_vmi = vmi(name, "node-a", f"disk-{name}")
    launcher = launcher_pod_of(the_vmi)
    if memory is not None:
        launcher["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
    return target_pod(launcher, read_vmi(the_vmi, Settings()), SOURCE, {})


def search(view, name, memory=None):
    return destinations(share_manager_pod(f"pvc-disk-{name}"), LONGHORN_NS, drained_vm(name, memory), "default",
                        "node-a", view)


@pytest.fixture
def counted(monkeypatch):
    """The nodes asked for the labels KubeVirt requires of the target node, in order: the checks
    every pair of one shape is told alike."""
    asked = []
    lacking = together.lacking

    def counting(target, name, node_):
        asked.append(name)
        return lacking(target, name, node_)

    monkeypatch.setattr(together, "lacking", counting)
    return asked


def test_the_next_share_manager_of_a_drain_is_told_what_the_nodes_said(counted):
    store, _ = cached()
    view = asyncio.run(store.fit_view("default", ""))
    first = search(view, "vm1")
    assert sorted(counted) == ["node-b", "node-c", "node-d"]
    counted.clear()
    second = search(view, "vm2")
    assert counted == []  # nothing changed: every node's answer kept
    assert [d.node for d in second.nodes] == [d.node for d in first.nodes] and len(second.nodes) == 3


@pytest.mark.parametrize("change", ["a pod bound to it", "its object"])
def test_a_node_that_changed_is_judged_again(counted, change):
    store, informers = cached()
    view = asyncio.run(store.fit_view("default", ""))
    search(view, "vm1")
    counted.clear()
    if change == "its object":
        informers["Node"].apply(Event(EventType.MODIFIED, node("node-c", taints=[
            {"key": "dedicated", "value": "db", "effect": "NoSchedule"}])))
    else:
        full = workload_pod(1, "node-c")
        full["spec"]["containers"][0]["resources"] = {"requests": {"memory": ALLOCATABLE["memory"]}}
        informers["Pod"].apply(Event(EventType.ADDED, full))
    second = search(view, "vm2")
    assert "node-c" in second.refused and [d.node for d in second.nodes] == ["node-b", "node-d"]
    assert ("untolerated taint" if change == "its object" else "has no room") in second.refused["node-c"]
    assert counted == ([] if change == "its object" else ["node-c"])  # the taint refuses it before the labels are asked


def test_a_vm_of_another_shape_is_not_told_what_another_was():
    store, _ = cached()
    view = asyncio.run(store.fit_view("default", ""))
    assert len(search(view, "vm1").nodes) == 3
    bigger = search(view, "vm2", memory="100Gi")  # more than any node has
    assert bigger.nodes == () and all("too small" in bigger.refused[n] for n in ("node-b", "node-c", "node-d"))


def test_a_view_that_keeps_no_record_keeps_nothing(counted):
    view = StaticView([SOURCE, *OTHERS])
    search(view, "vm1")
    counted.clear()
    search(view, "vm2")
    assert sorted(counted) == ["node-b", "node-c", "node-d"]
    assert judged.judged_for(("any",), view) is None


def test_an_answer_is_kept_for_its_node_object_alone_and_so_many_at_most():
    kept = judged.Judged()
    one, other = node("node-b"), node("node-b")
    kept.keep("node-b", one, None)
    assert kept.get("node-b", one) == (True, None)
    assert kept.get("node-b", other) == (False, None)  # another version of the node
    for i in range(judged.LIMIT * 2):
        kept.keep(f"n{i}", one, "no")
    assert len(kept.said) == judged.LIMIT
    # The newest kept, the oldest let go: a drain's later searches judge nodes further down.
    assert kept.get(f"n{judged.LIMIT * 2 - 1}", one) == (True, "no")
    assert kept.get("node-b", one) == (False, None)
