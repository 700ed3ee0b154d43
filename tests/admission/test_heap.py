"""What a cache has listed leaves the garbage collector's walk once it has synced, so that a full
collection stops admission for what came after, not for the whole cluster."""
import asyncio
import gc
import logging

import pytest
from tests.cluster.test_informer import feed, informer_for, listed
from tests.support.kube import running_vm

from webhook.admission.heap import FreezeListed
from webhook.process.heap import collect_young_less, paused
from webhook.kinds import NODE, POD


@pytest.fixture(autouse=True)
def thawed():
    """Each test starts and ends with nothing frozen (the suite's own objects stay collectable)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def walked(obj) -> bool:
    """Whether a full collection walks `obj`."""
    return any(o is obj for o in gc.get_objects())


def launcher_pods(count):
    return [running_vm(f"vm-{i}", f"node-{i % 3}", f"disk-{i}") for i in range(count)]


async def test_what_a_cache_listed_is_frozen_once_it_has_synced(caplog):
    pods = informer_for(POD)
    feed(pods, listed(*launcher_pods(50))[:-1])
    kept = pods.table.read("default/virt-launcher-vm-7-x7k2p")
    companion = FreezeListed([pods])
    caplog.set_level(logging.INFO, "webhook.cache")
    await companion.step()
    assert kept is not None and walked(kept) and not companion.frozen  # listing, not synced: nothing frozen

    feed(pods, listed()[-1:])  # the list is complete
    await companion.step()

    assert companion.frozen == [pods.name]
    assert not walked(kept) and gc.get_freeze_count() > 0
    (line,) = [r for r in caplog.records if r.getMessage() == "cache frozen"]
    assert line.fields["resource"] == pods.name and line.fields["objects_frozen"] >= gc.get_freeze_count()  # a freed one leaves the count


async def test_each_cache_is_frozen_once_its_first_list_is_complete():
    nodes, pods = informer_for(NODE), informer_for(POD)
    companion = FreezeListed([nodes, pods])
    feed(nodes, listed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}}))
    await companion.step()
    feed(nodes, listed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}))  # a relist
    feed(pods, listed(*launcher_pods(2)))
    await companion.step()
    await companion.step()
    assert companion.frozen == [nodes.name, pods.name]


async def test_a_cache_that_never_syncs_freezes_nothing_and_stopping_ends_the_wait():
    pods = informer_for(POD)
    feed(pods, listed(*launcher_pods(2))[:-1])
    companion = FreezeListed([pods])
    companion.start()
    await companion.step()
    await companion.stop()
    assert companion.frozen == [] and gc.get_freeze_count() == 0
    assert companion.task.name not in {task.get_name() for task in asyncio.all_tasks()}


@pytest.fixture
def young_less():
    before = gc.get_threshold()
    collect_young_less()
    yield
    gc.set_threshold(*before)


def test_a_bursts_objects_held_at_once_set_off_no_collection_of_the_older_generations(young_less):
    """A drain's reviews in flight together hold tens of thousands of objects: held, they are walked
    by no collection of the older generations (each one a pass over everything not frozen)."""
    collected = []

    def seen(phase, info):
        if phase == "start":
            collected.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        held = [{"pod": {"metadata": {"name": f"pod-{i}"}}} for i in range(15_000)]  # 45,000 objects
    finally:
        gc.callbacks.remove(seen)
    assert len(held) == 15_000 and [generation for generation in collected if generation > 0] == []


def test_work_whose_objects_live_until_it_ends_sets_off_no_collection_and_the_collector_is_as_before():
    """A review being read (or a keeper's pass) holds what it makes until it ends: no collection walks
    it meanwhile, and the collector is on again after, or left off where it was off."""
    collected = []

    def seen(phase, info):
        if phase == "start":
            collected.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with paused():
            held = [{"pod": {"metadata": {"name": f"pod-{i}"}}} for i in range(15_000)]
            within = list(collected)
        assert within == [] and gc.isenabled() and len(held) == 15_000
        gc.disable()
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.remove(seen)
