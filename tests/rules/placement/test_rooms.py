"""The nodes by room for a drain's share-managers: kept up to date from the nodes that changed,
on the production caches, so a decision costs the nodes that changed, not the cluster's size."""
import asyncio

from tests.support.kube import ALLOCATABLE, launcher_pod_of, node, vmi, workload_pod

from tests.support.stores import listed_store
from webhook.cluster.reflector import Event, EventType
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.fields import name_of
from webhook.rules.fit.view import StaticView
from webhook.rules.placement.rooms import rooms_for

NODES = [node(f"node-{i:02d}") for i in range(1, 21)]


def cached(*objects):
    """The production caches holding `objects`, synced; (store, informers by kind)."""
    store = listed_store(objects)
    return store, {informer.resource.kind: informer for informer in store.informers}


def vm_demand(view):
    return Demand.of(launcher_pod_of(vmi("vm1", "node-01", "d1")), "default", view.memo)


def names(order):
    return [name for _, name in order]


def test_only_the_nodes_that_changed_are_scored_again():
    store, informers = cached(*NODES)
    view = asyncio.run(store.fit_view("default"))
    demand = vm_demand(view)
    rooms = rooms_for(demand, view)
    assert len(list(rooms.update(demand, view))) == len(NODES)  # the first time: every node
    assert names(rooms.order) == [name_of(n) for n in NODES]  # all alike
    assert list(rooms.update(demand, view)) == []  # nothing changed: nothing scored
    busy = workload_pod(1, "node-05")
    informers["Pod"].apply(Event(EventType.ADDED, busy))
    assert list(rooms_for(demand, view).update(demand, view)) == ["node-05"]  # the same Rooms, kept by the view
    assert names(rooms.order)[-1] == "node-05"  # least room now
    informers["Node"].apply(Event(EventType.MODIFIED, node("node-09", allocatable={**ALLOCATABLE, "memory": "512Gi"})))
    informers["Node"].apply(Event(EventType.DELETED, node("node-12")))
    assert sorted(rooms.update(demand, view)) == ["node-09", "node-12"]
    assert names(rooms.order)[0] == "node-09" and "node-12" not in names(rooms.order)
    informers["Pod"].apply(Event(EventType.DELETED, busy))
    assert list(rooms.update(demand, view)) == ["node-05"]
    assert names(rooms.order)[-1] == "node-20"  # node-05 back among its peers, in their order


def test_an_order_left_unfinished_is_finished_by_the_next():
    """A share-manager whose deadline came while the order was brought up to date leaves it as
    it was; the next one brings it up to date from there."""
    store, informers = cached(*NODES)
    view = asyncio.run(store.fit_view("default"))
    demand = vm_demand(view)
    rooms = rooms_for(demand, view)
    list(rooms.update(demand, view))
    informers["Pod"].apply(Event(EventType.ADDED, workload_pod(1, "node-03")))
    informers["Pod"].apply(Event(EventType.ADDED, workload_pod(2, "node-04")))
    steps = rooms.update(demand, view)
    next(steps)
    steps.close()  # given up after one node
    assert names(rooms.order)[-2:] != ["node-03", "node-04"] and names(rooms.order)[-1] != "node-04"
    assert sorted(rooms.update(demand, view)) == ["node-03", "node-04"]
    assert sorted(names(rooms.order)[-2:]) == ["node-03", "node-04"]


def test_a_view_that_keeps_no_record_has_every_node_scored_each_time():
    view = StaticView(NODES)
    demand = vm_demand(view)
    rooms = rooms_for(demand, view)
    assert len(list(rooms.update(demand, view))) == len(NODES)
    assert len(list(rooms.update(demand, view))) == len(NODES)


def test_the_order_kept_node_by_node_is_the_order_sorted_afresh():
    """Nodes moved to their place one by one, through pods bound and gone, nodes grown, lost and
    added: the same nodes, with the same room, most room first, as scoring every node again."""
    import random

    from webhook.rules.placement.rooms import Rooms

    store, informers = cached(*NODES)
    view = asyncio.run(store.fit_view("default"))
    demand = vm_demand(view)
    rooms = rooms_for(demand, view)
    list(rooms.update(demand, view))
    chance, placed = random.Random(7), []
    for step in range(200):
        where = f"node-{chance.randint(1, 24):02d}"
        kind = chance.choice(["bind", "bind", "gone", "grow", "node"])
        if kind == "bind":
            placed.append(workload_pod(step, where))
            informers["Pod"].apply(Event(EventType.ADDED, placed[-1]))
        elif kind == "gone" and placed:
            informers["Pod"].apply(Event(EventType.DELETED, placed.pop(chance.randrange(len(placed)))))
        elif kind == "grow":
            informers["Node"].apply(Event(EventType.MODIFIED, node(where, allocatable={
                **ALLOCATABLE, "memory": f"{chance.randint(64, 512)}Gi"})))
        else:
            informers["Node"].apply(Event(EventType.DELETED if chance.random() < 0.5 else EventType.ADDED, node(where)))
        list(rooms.update(demand, view))
        afresh = Rooms()
        list(afresh.update(demand, view))
        rank = [(-room if room is not None else 1.0) for room, _ in rooms.order]
        assert rank == sorted(rank), step
        assert sorted((n, room) for room, n in rooms.order) == sorted((n, room) for room, n in afresh.order)
