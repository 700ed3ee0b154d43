"""The caches applying reflector events, without an API: what a watch event does to an admission."""
import copy
import logging

import pytest
from tests.support.stores import for_host, in_cache
from tests.support.kube import LONGHORN_NS, fixture_cluster, nodes, review, running_vm, rwx_disk, vm_pod

from webhook import kinds, metrics
from webhook.admission.admit import admit
from webhook.admission.review import parse_review
from webhook.stores.cache import NOT_FINISHED, WatchedClusterStore
from webhook.cluster.informer import Informer
from webhook.stores.shapes import shapes
from webhook.cluster.reflector import Event, EventType
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.kinds import NODE, POD, PV, PVC, SHARE_MANAGER

# Nothing listens here: a test that reached for the API would fail, not pass by luck.
NOWHERE = "http://127.0.0.1:9"


def listed(*objects):
    return [Event(EventType.LISTED, copy.deepcopy(o)) for o in objects] + [Event(EventType.SYNCED, seconds=0.01)]


def informer_for(resource, **kwargs):
    return Informer(resource, shapes(Settings())[resource.kind], **kwargs)


def feed(informer, events):
    for event in events:
        informer.apply(event)


@pytest.fixture
async def store():
    made = WatchedClusterStore(for_host(NOWHERE), Settings())
    yield made
    await made.close()


def load(store, objects):
    """Every cache of the store fed the objects it would list, as its reflector would."""
    for informer in store.informers:
        kind = [o for o in objects if o["kind"] == informer.resource.kind]
        feed(informer, listed(*kind))


async def decision(store, *claims):
    outcome = await admit(parse_review(review(vm_pod(*claims))), store, Settings(), Deadline.after(2, 0.5))
    return outcome.decision


# --------------------------------------------------------------------------- one informer


def test_a_list_fills_the_table_and_a_relist_drops_what_is_gone():
    pvcs = informer_for(PVC)
    a, b = rwx_disk("a", "node-a")[0], rwx_disk("b", "node-b")[0]
    feed(pvcs, listed(a, b))
    assert pvcs.synced and set(pvcs.table.objects) == {"default/a", "default/b"}
    feed(pvcs, [Event(EventType.RELISTING, error="410 Gone")] + listed(b))
    assert set(pvcs.table.objects) == {"default/b"}
    assert pvcs.error is None  # a relist is routine, not a failure


@pytest.mark.parametrize("cut", [Event(EventType.FAILED, error="TimeoutError: page 2", retry_in=0.1),
                                 Event(EventType.RELISTING, error="410: the continue token expired")],
                         ids=["page-failed", "token-expired"])
def test_a_list_cut_short_does_not_keep_what_the_next_list_lacks(cut):
    """Deleted between two lists, with the first cut off after its first page: gone all the same."""
    pvcs = informer_for(PVC)
    a, b = rwx_disk("a", "node-a")[0], rwx_disk("b", "node-b")[0]
    feed(pvcs, listed(a, b))
    feed(pvcs, [Event(EventType.LISTED, copy.deepcopy(a)), Event(EventType.LISTED, copy.deepcopy(b)), cut])
    feed(pvcs, listed(a))  # b was deleted meanwhile
    assert set(pvcs.table.objects) == {"default/a"}


def test_watch_events_add_change_and_remove_objects_trimmed():
    pvcs = informer_for(PVC)
    feed(pvcs, listed())
    claim = rwx_disk("a", "node-a")[0]
    claim["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    pvcs.apply(Event(EventType.ADDED, claim))
    assert in_cache(pvcs, "default", "a") == shapes(Settings())[PVC.kind](claim)
    assert "managedFields" not in in_cache(pvcs, "default", "a")["metadata"]
    changed = copy.deepcopy(claim)
    changed["spec"]["accessModes"] = ["ReadWriteOnce"]
    pvcs.apply(Event(EventType.MODIFIED, changed))
    assert in_cache(pvcs, "default", "a")["spec"]["accessModes"] == ["ReadWriteOnce"]
    pvcs.apply(Event(EventType.DELETED, changed))
    assert in_cache(pvcs, "default", "a") is None


def test_objects_outside_the_scope_are_not_kept_even_if_the_api_sends_them():
    pods = informer_for(POD, namespace=LONGHORN_NS, fields=NOT_FINISHED, wanted=lambda pod: not kinds.finished(pod))
    share_manager_pod = [o for o in rwx_disk("a", "node-a") if o["kind"] == "Pod"][0]
    elsewhere = copy.deepcopy(share_manager_pod)
    elsewhere["metadata"]["namespace"] = "default"
    finished = copy.deepcopy(share_manager_pod)
    finished["metadata"]["name"] = "other"
    finished["status"] = {"phase": "Succeeded"}
    feed(pods, listed(share_manager_pod, elsewhere, finished))
    assert set(pods.table.objects) == {f"{LONGHORN_NS}/share-manager-pvc-a"}
    failed = copy.deepcopy(share_manager_pod)
    failed["status"] = {"phase": "Failed"}
    pods.apply(Event(EventType.MODIFIED, failed))  # no longer ours: forgotten
    assert not pods.table.objects


def test_a_failure_is_reported_until_the_next_good_event(caplog):
    pvcs = informer_for(PVC)
    feed(pvcs, listed())
    errors = metrics.WATCH_ERRORS.labels(pvcs.name)._value.get()
    with caplog.at_level(logging.WARNING, logger="webhook.cache"):
        pvcs.apply(Event(EventType.FAILED, error="WatchError: API answered 403", retry_in=0.8))
    assert pvcs.error == "WatchError: API answered 403"
    assert metrics.CACHE_HEALTHY.labels(pvcs.name)._value.get() == 0
    assert metrics.WATCH_ERRORS.labels(pvcs.name)._value.get() == errors + 1
    assert any(r.getMessage() == "watch failed" for r in caplog.records)
    pvcs.apply(Event(EventType.BOOKMARK, {"metadata": {"resourceVersion": "9"}}))
    assert pvcs.error is None and metrics.CACHE_HEALTHY.labels(pvcs.name)._value.get() == 1


def test_synced_is_logged_once(caplog):
    nodes_informer = informer_for(NODE)
    with caplog.at_level(logging.INFO, logger="webhook.cache"):
        feed(nodes_informer, listed(*nodes("node-a", "node-b")))
        feed(nodes_informer, listed(*nodes("node-a")))
    synced = [r for r in caplog.records if r.getMessage() == "cache synced"]
    assert len(synced) == 1 and synced[0].fields["objects"] == 2


# --------------------------------------------------------------------------- the store


async def test_admission_is_answered_from_events_alone(store):
    load(store, fixture_cluster())
    assert store.synced()
    found = await decision(store)
    assert (found.outcome, found.node) == ("pinned", "node-b")


async def test_a_share_manager_pod_event_moves_the_pin(store):
    load(store, fixture_cluster())
    moved = copy.deepcopy(next(o for o in fixture_cluster() if o["kind"] == "Pod"))
    moved["spec"]["nodeName"] = "node-c"
    store.pods.apply(Event(EventType.MODIFIED, moved))
    assert (await decision(store)).node == "node-c"
    store.pods.apply(Event(EventType.DELETED, moved))
    store.share_managers.apply(Event(EventType.MODIFIED, {
        "metadata": {"name": moved["metadata"]["labels"]["longhorn.io/share-manager"], "namespace": LONGHORN_NS},
        "status": {"state": "stopped", "ownerID": "node-c"}}))
    assert (await decision(store)).outcome == "not-pinned"  # a stopped share-manager's owner is stale


async def test_misses_the_cache_can_answer_and_misses_it_cannot(store):
    load(store, fixture_cluster())
    assert store.peek(SHARE_MANAGER, LONGHORN_NS, "nope") == (True, None)
    assert store.peek(POD, LONGHORN_NS, "share-manager-nope") == (True, None)  # every live pod is held: a miss is an answer
    # A PVC, PV or node may be newer than the watch: only the API can tell.
    assert store.peek(PVC, "default", "nope") == (False, None)
    assert store.peek(PV, None, "nope") == (False, None)
    assert store.peek(NODE, None, "nope") == (False, None)


async def test_the_claim_and_volume_indexes_follow_events(store):
    objects = rwx_disk("a", "node-a") + nodes("node-a")
    load(store, objects)
    pod = running_vm("vm1", "node-a", "a")
    store.pods.apply(Event(EventType.ADDED, pod))
    assert [p["metadata"]["name"] for p in await store.pods_by_claim("default", "a")] == [pod["metadata"]["name"]]
    moved = copy.deepcopy(pod)
    moved["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "b"}}]
    store.pods.apply(Event(EventType.MODIFIED, moved))
    assert await store.pods_by_claim("default", "a") == []
    assert len(await store.pods_by_claim("default", "b")) == 1
    assert [pv["metadata"]["name"] for pv in await store.pvs_by_volume_handle("pvc-a")] == ["pvc-a"]
    store.pvs.apply(Event(EventType.DELETED, next(o for o in objects if o["kind"] == "PersistentVolume")))
    assert await store.pvs_by_volume_handle("pvc-a") == []


async def test_a_failing_cache_is_degraded_but_keeps_serving(store):
    load(store, fixture_cluster())
    store.nodes.apply(Event(EventType.FAILED, error="WatchError: API answered 403", retry_in=1.0))
    assert store.degraded() == ["nodes: WatchError: API answered 403"]
    assert (await decision(store)).node == "node-b"
    objects, last_sync = store.stats()["nodes"]
    assert objects == 3 and last_sync is not None


async def test_what_each_node_takes_follows_its_pods(store):
    load(store, nodes("node-a", "node-b"))
    vm = running_vm("vm1", "node-a", "a")  # cpu 100m, memory 2294Mi, one kvm device
    store.pods.apply(Event(EventType.ADDED, vm))
    assert store.usage.of("node-a").requested == {"cpu": 100, "memory": 2294 * 2**20, "devices.kubevirt.io/kvm": 1}
    assert store.usage.of("node-a").pods == 1
    moved = copy.deepcopy(vm)
    moved["spec"]["nodeName"] = "node-b"
    moved["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    store.pods.apply(Event(EventType.MODIFIED, moved))
    assert store.usage.of("node-a").pods == 0 and store.usage.of("node-a").requested == {}
    assert store.usage.of("node-b").requested["cpu"] == 2000
    finished = copy.deepcopy(moved)
    finished["status"]["phase"] = "Succeeded"
    store.pods.apply(Event(EventType.MODIFIED, finished))  # a finished pod leaves the cache, and the node
    assert store.usage.of("node-b").pods == 0 and not store.pods.table.objects


def test_a_pod_resized_in_place_counts_what_the_scheduler_counts():
    """A resize down still pending: the scheduler counts what is allocated, not the new spec."""
    from webhook.stores.cache import NodeUsage

    pod = {"metadata": {"name": "db-0", "namespace": "shop"},
           "spec": {"nodeName": "node-a", "containers": [{"name": "db", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "db", "ready": True, "allocatedResources": {"cpu": "4"}, "resources": {"requests": {"cpu": "4"}}}],
               "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]}}
    usage = NodeUsage()
    usage(None, shapes(Settings())[POD.kind](pod))
    assert usage.of("node-a").requested["cpu"] == 4000
    plain = copy.deepcopy(pod)
    plain["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "db", "ready": True, "allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}}]}
    assert "containerStatuses" not in shapes(Settings())[POD.kind](plain)["status"]  # nothing kept when nothing differs
