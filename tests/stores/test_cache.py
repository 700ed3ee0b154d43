"""The watch caches on the kmock emulator: changes made through the API reach the next admission."""
import asyncio
import contextlib
import copy
import json

import aiohttp
import pytest
from tests.support.stores import TEST_TIMING, api_host, for_host, requests_since, seed, watched_store
from tests.support.kube import answer, LONGHORN_NS, fixture_cluster, nodes, review, rwx_disk, vm_pod, workload_pod

from webhook.admission.review import parse_review
from webhook.stores.cache import WatchedClusterStore
from webhook.stores.shapes import shapes
from webhook.cluster.reflector import Timing
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.admission.admit import admit
from webhook.kinds import NODE, POD, PV, PVC

PODS = "/api/v1/namespaces/longhorn-system/pods"
ALL_PODS = "/api/v1/pods"
SHARE_MANAGERS = "/apis/longhorn.io/v1beta2/namespaces/longhorn-system/sharemanagers"


async def decision(store, *claims, timeout=5.0):
    outcome = await admit(parse_review(review(vm_pod(*claims))), store, Settings(), Deadline.after(timeout, 0.5))
    return outcome.decision


async def eventually(check, want, timeout=3.0):
    """Poll `check()` until its value is `want` (or `want(value)` holds); return the last value.
    Watch events arrive asynchronously: a change is seen within milliseconds, not instantly."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await check()
        if (want(got) if callable(want) else got == want) or loop.time() > deadline:
            return got
        await asyncio.sleep(0.01)


async def pinned_node(store, *claims):
    found = await decision(store, *claims)
    return found.node if found.outcome == "pinned" else f"{found.outcome}: {found.reason}"


@contextlib.asynccontextmanager
async def api(kmock):
    """The emulator's HTTP API, as kubectl or a controller would use it."""
    async with aiohttp.ClientSession(api_host(kmock), raise_for_status=True) as session:
        yield session


# --------------------------------------------------------------------------- memory and shape


def test_what_no_rule_reads_is_dropped_on_arrival():
    """Every pod of the cluster is held in memory: its bulk goes on arrival. (That the rules read
    the same from what is kept is the differential property of test_shapes.py.)"""
    pod = vm_pod()
    pod["metadata"]["managedFields"] = [{"manager": "virt-controller", "fieldsV1": {"f:spec": {}}}]
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    pod["spec"]["nodeName"] = "node-b"
    pod["status"] = {"phase": "Running", "containerStatuses": [{"name": "compute", "ready": True, "imageID": "x"}]}
    kept = shapes(Settings())[POD.kind](pod)
    text = json.dumps(kept)
    for dropped in ("managedFields", "last-applied-configuration", "containerStatuses", "image", "command",
                    "volumeMounts", "securityContext", '"env"'):
        assert dropped not in text, dropped
    # What stays of a launcher: what it takes from its node, and what its migration target is
    # rendered from (its node selection and tolerations); the fixture has little bulk to lose.
    assert len(text) < len(json.dumps(pod)) / 2
    worker = workload_pod(1, "node-b")
    worker["spec"]["containers"][0].update(env=[{"name": "A", "value": "x" * 200}], image="registry.example/app:1")
    assert len(json.dumps(shapes(Settings())[POD.kind](worker))) < len(json.dumps(worker)) / 3

    node = nodes("node-a")[0]
    node["status"]["conditions"][0].update(reason="KubeletReady", lastHeartbeatTime="2026-01-01T00:00:00Z")
    node["status"]["images"] = [{"names": ["registry.example/image:1"] * 50, "sizeBytes": 10 ** 9}]
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    text = json.dumps(shapes(Settings())[NODE.kind](node))
    for dropped in ("images", "lastHeartbeatTime", "KubeletReady", "managedFields"):
        assert dropped not in text, dropped


def test_a_custom_opt_in_annotation_is_kept():
    pod = vm_pod()
    pod["metadata"]["annotations"]["example.com/colocate"] = "true"
    kept = shapes(Settings(opt_in_annotation="example.com/colocate"))[POD.kind](pod)
    assert kept["metadata"]["annotations"]["example.com/colocate"] == "true"


async def test_admission_is_answered_from_memory(kmock):
    seed(kmock, fixture_cluster())
    store = await watched_store(kmock)
    try:
        mark = len(list(kmock))
        assert (await decision(store)).node == "node-b"
        assert requests_since(kmock, mark) == []  # no GET, no list: only the open watches
    finally:
        await store.close()


# --------------------------------------------------------------------------- changes through the API


@pytest.fixture
async def live(kmock):
    """A disk on node-a (share-manager pod) whose ShareManager names node-c, a synced store,
    and direct GETs that fail: whatever the store answers comes from its watches."""
    seed(kmock, rwx_disk("d1", "node-a", owner="node-c") + nodes("node-a", "node-b", "node-c"))
    store = await watched_store(kmock)
    kmock["fetch"] << 500
    yield store
    await store.close()


async def test_a_share_manager_pod_that_moves_is_followed(kmock, live):
    assert await pinned_node(live, "d1") == "node-a"
    async with api(kmock) as session:
        await session.patch(f"{PODS}/share-manager-pvc-d1", json={"spec": {"nodeName": "node-b"}})
    assert await eventually(lambda: pinned_node(live, "d1"), "node-b") == "node-b"


async def test_a_deleted_share_manager_pod_and_a_stopped_share_manager(kmock, live):
    async with api(kmock) as session:
        await session.delete(f"{PODS}/share-manager-pvc-d1")
        # Without its pod, a running ShareManager's ownerID is the node.
        assert await eventually(lambda: pinned_node(live, "d1"), "node-c") == "node-c"
        await session.patch(f"{SHARE_MANAGERS}/pvc-d1", json={"status": {"state": "stopped"}})
    got = await eventually(lambda: pinned_node(live, "d1"), "not-pinned: share-manager of pvc-d1 is stopped")
    assert got == "not-pinned: share-manager of pvc-d1 is stopped"


async def test_a_disk_created_after_start_is_pinned_and_a_deleted_claim_is_forgotten(kmock, live):
    assert (await pinned_node(live, "d2")).startswith("not-pinned")
    async with api(kmock) as session:
        for obj in rwx_disk("d2", "node-b"):
            path = {"PersistentVolumeClaim": "/api/v1/namespaces/default/persistentvolumeclaims",
                    "PersistentVolume": "/api/v1/persistentvolumes", "ShareManager": SHARE_MANAGERS, "Pod": PODS}[obj["kind"]]
            await session.post(path, json=obj)
        assert await eventually(lambda: pinned_node(live, "d2"), "node-b") == "node-b"
        await session.delete("/api/v1/namespaces/default/persistentvolumeclaims/d2")
    # The miss falls back to a GET, which fails here: the disk is unknown, never pinned on stale facts.
    got = await eventually(lambda: pinned_node(live, "d2"), lambda got: got != "node-b")
    assert got.startswith("not-pinned") and "API answered 500" in got


async def test_look_ups_follow_changes(kmock, live):
    mine = vm_pod("d1")
    mine["metadata"].update(name="virt-launcher-vm1-x", namespace="default")
    hotplug = copy.deepcopy(mine)
    hotplug["metadata"].update(name="hp-volume-x", labels={"kubevirt.io": "hotplug-disk"})
    async with api(kmock) as session:
        await session.post("/api/v1/namespaces/default/pods", json=mine)
        await session.post("/api/v1/namespaces/default/pods", json=hotplug)

        async def claimants():
            return [p["metadata"]["name"] for p in await live.pods_by_claim("default", "d1", timeout=1)]

        assert await eventually(claimants, ["virt-launcher-vm1-x"]) == ["virt-launcher-vm1-x"]
        await session.delete("/api/v1/namespaces/default/pods/virt-launcher-vm1-x")
        assert await eventually(claimants, []) == []
        await session.delete("/api/v1/persistentvolumes/pvc-d1")

        async def pvs():
            return [pv["metadata"]["name"] for pv in await live.pvs_by_volume_handle("pvc-d1", timeout=1)]

        assert await eventually(pvs, []) == []


# --------------------------------------------------------------------------- misses and fallbacks


async def test_a_claim_missing_from_the_cache_is_read_from_the_api(kmock):
    claim, volume, share_manager, sm_pod = rwx_disk("late", "node-a")
    seed(kmock, [share_manager, sm_pod] + nodes("node-a"))
    store = await watched_store(kmock)
    try:
        async def open_watches():
            return len([r for r in kmock if r.params.get("watch") == "true"])

        assert await eventually(open_watches, len(store.informers)) == len(store.informers)
        # Written behind the open watches' back: only a direct GET can find the PVC and its PV.
        kmock.objects[PVC, "default", "late"] = claim
        kmock.objects[PV, None, volume["metadata"]["name"]] = volume
        mark = len(list(kmock))
        assert await pinned_node(store, "late") == "node-a"
        assert [r.url.path for r in requests_since(kmock, mark)] == [
            "/api/v1/namespaces/default/persistentvolumeclaims/late", "/api/v1/persistentvolumes/pvc-late"]
    finally:
        await store.close()


async def test_a_hanging_fallback_get_is_bounded_by_the_deadline(kmock):
    seed(kmock, nodes("node-a"))
    store = await watched_store(kmock)
    kmock["fetch"] << (lambda: asyncio.sleep(10))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        found = await decision(store, "missing", timeout=0.6)
    finally:
        await store.close()
    assert loop.time() - started < 1.0
    assert found.outcome == "not-pinned" and "missing" in found.reason


async def test_before_sync_reads_go_to_the_api(kmock):
    seed(kmock, fixture_cluster())
    released, listing = asyncio.Event(), asyncio.Event()

    async def slow_list():
        listing.set()
        await released.wait()  # then fall through to the emulator's own list

    kmock["list", kmock.resource("longhorn.io", "v1beta2", "sharemanagers")] << slow_list
    store = WatchedClusterStore(for_host(api_host(kmock)), Settings(), TEST_TIMING)
    store.start()
    try:
        await asyncio.wait_for(listing.wait(), 5)  # the store is listing share-managers, stuck there
        assert not store.synced()
        assert (await decision(store)).node == "node-b"  # answered at once, from GETs
        released.set()
        await store.wait_synced(timeout=5)
        mark = len(list(kmock))
        assert (await decision(store)).node == "node-b"
        assert requests_since(kmock, mark) == []
    finally:
        await store.close()


# --------------------------------------------------------------------------- watch protocol


def with_versions(objects):
    """Objects as a real apiserver serves them: each with a resourceVersion."""
    for i, obj in enumerate(objects, start=1):
        obj["metadata"]["resourceVersion"] = str(i)
    return objects


def all_pods(request):
    return request.url.path == ALL_PODS


def pod_watches(kmock):
    return [r for r in kmock if r.params.get("watch") == "true" and r.url.path == ALL_PODS]


def lists_of(kmock, path):
    """The list requests (not watches) the emulator has seen for `path`."""
    return len([r for r in kmock if r.params.get("watch") != "true" and r.url.path == path])


async def test_410_gone_relists(kmock):
    """History lost (410): only a fresh list can show that the pod went away meanwhile."""
    seed(kmock, with_versions(rwx_disk("d1", "node-a", owner="node-c") + nodes("node-a", "node-c")))
    watches = []

    def first_watch_is_gone():
        if watches:
            return None  # a reaction that answers nothing is spent: the emulator's own watch follows
        watches.append(True)
        del kmock.objects[POD, LONGHORN_NS, "share-manager-pvc-d1"]  # deleted while history is compacted
        return ({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410,
                                             "reason": "Expired", "message": "too old resource version: 1 (9)"}},)

    kmock["watch"][all_pods] << first_watch_is_gone
    store = await watched_store(kmock)
    try:
        assert await eventually(lambda: pinned_node(store, "d1"), "node-c") == "node-c"
        assert lists_of(kmock, ALL_PODS) == 2
        assert lists_of(kmock, PVC.path()) == 1  # the other caches carry on
    finally:
        await store.close()


async def test_a_closed_watch_resumes_from_the_last_version_without_relisting(kmock):
    seed(kmock, with_versions(rwx_disk("d1", "node-a") + nodes("node-a", "node-b")))
    moved = copy.deepcopy(rwx_disk("d1", "node-b")[-1])
    moved["metadata"]["resourceVersion"] = "41"
    served = []

    def one_short_watch():
        if served:
            return None
        served.append(True)
        kmock.objects[POD, LONGHORN_NS, "share-manager-pvc-d1"] = moved  # what the server now holds
        bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}}}
        return ({"type": "MODIFIED", "object": moved}, bookmark)  # then the server closes the watch

    kmock["watch"][all_pods] << one_short_watch
    store = await watched_store(kmock)
    try:
        assert await eventually(lambda: pinned_node(store, "d1"), "node-b") == "node-b"

        async def watches():
            return len(pod_watches(kmock))

        assert await eventually(watches, 2) == 2
        second = pod_watches(kmock)[1].params
        assert second["resourceVersion"] == "42" and second["allowWatchBookmarks"] == "true"
        assert pod_watches(kmock)[0].params["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
        assert lists_of(kmock, ALL_PODS) == 1
    finally:
        await store.close()


class Proxy:
    """A TCP proxy on loopback that can cut every connection and refuse new ones: a network outage."""

    def __init__(self, port):
        self.port, self.up, self.connections, self.links = port, True, 0, set()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.cut()
        self.server.close()
        await self.server.wait_closed()

    def cut(self):
        for writer in list(self.links):
            writer.transport.abort()
        self.links.clear()

    async def _serve(self, reader, writer):
        self.connections += 1
        if not self.up:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.links |= {writer, up_writer}

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_a_dropped_connection_reconnects_and_catches_up(kmock):
    seed(kmock, rwx_disk("d1", "node-a") + nodes("node-a", "node-b"))
    async with Proxy(kmock.url.port) as proxy:
        store = WatchedClusterStore(for_host(proxy.url), Settings(), TEST_TIMING)
        store.start()
        try:
            await store.wait_synced(timeout=5)
            assert await pinned_node(store, "d1") == "node-a"
            proxy.up = False
            proxy.cut()
            before = proxy.connections
            async with api(kmock) as session:  # changed while the webhook cannot see the API
                await session.patch(f"{PODS}/share-manager-pvc-d1", json={"spec": {"nodeName": "node-b"}})
            await eventually(lambda: asyncio.sleep(0, proxy.connections), lambda n: n > before + 1)
            assert proxy.connections > before + 1  # it kept trying, with backoff
            assert await pinned_node(store, "d1") == "node-a"  # the cache still answers, stale
            proxy.up = True
            assert await eventually(lambda: pinned_node(store, "d1"), "node-b") == "node-b"
        finally:
            await store.close()


async def test_field_selectors_are_also_applied_on_our_side(kmock):
    """kmock, like a proxy that drops the query, ignores fieldSelector; finished pods stay out."""
    done = copy.deepcopy(rwx_disk("d1", "node-a")[-1])
    done["metadata"]["name"] = "job-x"
    done["status"] = {"phase": "Succeeded"}
    failed = copy.deepcopy(done)
    failed["metadata"]["name"] = "job-y"
    failed["status"] = {"phase": "Failed"}
    seed(kmock, rwx_disk("d1", "node-a") + [done, failed])
    store = await watched_store(kmock)
    try:
        assert list(store.pods.table.objects) == ["longhorn-system/share-manager-pvc-d1"]
        assert store.usage.of("node-a").pods == 1  # finished pods take nothing from the node
    finally:
        await store.close()


# --------------------------------------------------------------------------- lifecycle


async def test_close_stops_every_task_even_while_retrying(kmock):
    kmock["list", kmock.resource("", "v1", "nodes")] << 500  # one cache keeps failing and backing off
    kmock["list", kmock.resource("", "v1", "persistentvolumes")] << (lambda: asyncio.sleep(30))  # one hangs
    seed(kmock, fixture_cluster())
    store = WatchedClusterStore(for_host(api_host(kmock)), Settings(), Timing(backoff_initial=0.05))
    store.start()
    failed = lambda: sum(1 for r in kmock if r.method == "GET" and r.url.path == "/api/v1/nodes")  # noqa: E731
    await eventually(lambda: asyncio.sleep(0, store.pvcs.synced and failed() >= 2), True)  # listed; retried
    assert not store.synced() and store.pvcs.synced
    tasks = [task for task in asyncio.all_tasks() if task.get_name().startswith(f"{store.task_prefix} ")]
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.close()
    assert loop.time() - started < 1
    assert tasks and all(task.done() for task in tasks)
    assert store._api.rest_client.pool_manager.closed


async def test_a_proxy_from_the_environment_is_used(kmock, monkeypatch):
    """HTTP(S)_PROXY still reaches the API, though it is looked up once rather than per request."""
    seed(kmock, fixture_cluster())
    async with Proxy(kmock.url.port) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        store = await watched_store(kmock)
        try:
            assert proxy.connections > 0
            assert (await decision(store)).node == "node-b"
        finally:
            await store.close()


# --------------------------------------------------------------------------- API faults


def cache_healthy(store, name):
    from webhook import metrics
    return metrics.REGISTRY.get_sample_value("colocate_cache_healthy", {"cache": name})


async def test_403_on_one_resource_keeps_the_rest_serving_says_so_and_recovers(kmock):
    """RBAC lost for nodes after start: the node cache keeps what it has and reports it."""
    import kmock as kmocklib

    seed(kmock, fixture_cluster())
    # Short watches, so the node cache lists again soon, as it does every few minutes for real.
    store = await watched_store(kmock, timing=Timing(watch_seconds=(0.2, 0.3), backoff_initial=0.02,
                                                     backoff_cap=0.2, short_watch=0.1))
    denied = {"on": True}

    def forbidden():
        if denied["on"]:
            raise kmocklib.KubernetesError(status=403, reason="Forbidden", message="nodes is forbidden")
        return None  # spent: the emulator serves again

    kmock["/api/v1/nodes"] << forbidden
    try:
        assert await eventually(lambda: asyncio.sleep(0, store.degraded()), lambda d: any("403" in x for x in d))
        assert cache_healthy(store, "nodes") == 0
        assert (await decision(store)).node == "node-b"  # still answered, from what the caches hold
        denied["on"] = False
        assert await eventually(lambda: asyncio.sleep(0, store.degraded()), []) == []
        assert cache_healthy(store, "nodes") == 1
    finally:
        await store.close()


@pytest.mark.parametrize("fault", ["500", "hang"])
async def test_an_api_that_fails_from_the_start_still_gets_answers_in_time(kmock, fault):
    """Never synced (the API answers 500, or nothing): every admission is allowed unpinned before its deadline."""
    seed(kmock, fixture_cluster())
    if fault == "500":
        kmock["get"] << 500
    else:
        kmock["get"] << (lambda: asyncio.sleep(30))
    store = WatchedClusterStore(for_host(api_host(kmock)), Settings(), TEST_TIMING)
    store.start()
    loop = asyncio.get_running_loop()
    try:
        for _ in range(3):
            started = loop.time()
            outcome = await admit(parse_review(review(vm_pod())), store, Settings(), Deadline.after(1.0, 0.2))
            assert loop.time() - started < 1.0
            response = answer(outcome)["response"]
            assert response["allowed"] is True and outcome.decision.outcome == "not-pinned"
            assert any("vm1-rootdisk" in w for w in response["warnings"])
        assert not store.synced()
    finally:
        await store.close()


def test_the_journal_of_changed_nodes_says_when_it_cannot_tell():
    """A reader further behind than the changed_nodes keeps, or with no position, reads every node again."""
    from webhook.stores.cache import ChangedNodes

    changed_nodes = ChangedNodes()
    changed_nodes.LIMIT = 4
    start, everything = changed_nodes.since(None)
    assert everything is None
    for name in ("a", "b", "a", "c"):
        changed_nodes.note(name)
    now, changed = changed_nodes.since(start)
    assert changed == {"a", "b", "c"} and changed_nodes.since(now) == (now, frozenset())
    changed_nodes.note("d")  # over the limit: the oldest half goes
    assert changed_nodes.since(start)[1] is None and changed_nodes.among({"a", "d"}, start) is None
    assert changed_nodes.since(now)[1] == {"d"} and changed_nodes.among({"a", "d"}, now) == ({"d"}, {"d"})


async def test_the_caches_say_which_nodes_changed_by_more_than_pods_that_take_only_room():
    """A share-manager bound to node-b changes only its room; a VM's pod on node-c, or node-d itself
    updated, change more (what a drain's prepared answers are checked again for)."""
    from tests.support.kube import launcher_pod_of, node, share_manager_pod, vmi
    from tests.support.stores import listed_store
    from webhook.cluster.reflector import Event, EventType

    store = listed_store([node(f"node-{x}") for x in "bcde"])
    view = await store.fit_view("default")
    (pods,) = [i for i in store.informers if i.resource.kind == "Pod"]
    (nodes_informer,) = [i for i in store.informers if i.resource.kind == "Node"]
    named = {"node-b", "node-c", "node-d", "node-e"}
    position, _ = view.nodes_changed(None)
    pods.apply(Event(EventType.ADDED, share_manager_pod("pvc-d1", "node-b")))
    assert view.changes_among(named, position) == ({"node-b"}, set())
    pods.apply(Event(EventType.ADDED, launcher_pod_of(vmi("vm2", "node-c", "d2"))))
    nodes_informer.apply(Event(EventType.MODIFIED, node("node-d", unschedulable=True)))
    pods.apply(Event(EventType.DELETED, share_manager_pod("pvc-d1", "node-b")))
    assert view.changes_among(named, position) == ({"node-b", "node-c", "node-d"}, {"node-c", "node-d"})
    assert view.nodes_changed(position)[1] == {"node-b", "node-c", "node-d"}
    later, _ = view.nodes_changed(None)
    assert view.changes_among(named, later) == (set(), set()) and view.changes_among(named, None) is None
