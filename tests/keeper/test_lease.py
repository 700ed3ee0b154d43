"""Leader election on the emulator: one keeper acts; losing the lease stops it at once."""
import asyncio
import dataclasses
import datetime
import logging
import threading
import time

import pytest
from tests.support.kube import kubeconfig_for
from tests.support.stores import api_host, for_host, watched_store
from tests.support.kubevirt_api import TIMING, VMIS, apart_vm, eventually, three_nodes

from webhook.cluster.events import identity
from webhook.config import Settings
from webhook.keeper import keeper as keeper_module
from webhook.keeper.elected import ElectedKeeper
from webhook.keeper.lease import LeaseTiming, lease_namespace
from webhook.keeper.keeper import Keeper
from webhook.keeper.lease import Elector
from webhook.kinds import LEASE

NS = "kubevirt-colocate"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kubevirt-colocate-keeper"
# The library wants whole seconds: renew_deadline > 1.2 × retry_period >= 1.2 s.
QUICK = LeaseTiming(lease_duration=3, renew_deadline=2, retry_period=1, request_timeout=0.5)
PASSES = dataclasses.replace(TIMING, request_timeout=0.5)


class KeeperService:
    """A replica's campaign and keeper on caches the test started, in the test's process (as
    `keep` runs them, keeper/elected.py), so that its log records reach caplog."""

    def __init__(self, api, store, settings, *, namespace, identity, timing, lease_timing):
        self.keeper = Keeper(api, store, settings, timing=timing, authority=lambda within: self.elector.may_act(within))
        self.elector = Elector(api, namespace=namespace, name=settings.lease_name, identity=identity,
                               lead=self.keeper.run, timing=lease_timing)

    def start(self):
        self.elector.start()

    async def stop(self):
        await self.elector.stop()

    def degraded(self):
        notes = [f"lease: {self.elector.error}"] if self.elector.error else []
        return [f"keeper: {note}" for note in notes + (self.keeper.degraded() if self.elector.leading else [])]


@pytest.fixture
async def replicas(kmock):
    """A factory: an identity → a started KeeperService on the emulator (a replica of `keep`)."""
    made = []

    async def start(name, settings=None, lease_timing=QUICK, campaign=True):
        settings = settings or Settings(keep="migrate", keep_after=0, keep_max_inflight=1)
        store = await watched_store(kmock, settings)
        api = for_host(api_host(kmock))
        service = KeeperService(api, store, settings, namespace=NS, identity=name, timing=PASSES,
                                lease_timing=lease_timing)
        if campaign:
            service.start()
        made.append((service, store, api))
        return service

    yield start
    for service, store, api in made:
        await service.stop()
        await store.close()
        await api.close()


async def tries(*services, count):
    """Until each replica has tried the Lease `count` times more (a retry period each): what a
    replica does over a span is read off its own tries, not off a clock."""
    start = [service.elector.reads for service in services]
    await eventually(lambda: all(s.elector.reads >= n + count for s, n in zip(services, start)),
                     timeout=3 * count * QUICK.retry_period + 2)


def terms(caplog, identity=None):
    """Times a replica (any, by default) became the leader, as its log says."""
    return sum(1 for r in caplog.records if r.getMessage() == "keeper leading" and identity in (None, r.fields["identity"]))


def holder(kmock):
    lease = kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"]
    return None if lease.deleted else lease.raw["spec"].get("holderIdentity")


async def test_one_replica_leads_and_the_other_creates_nothing(cluster, replicas, kmock, caplog):
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    # Two VMs apart and one migration allowed in flight: two leaders would make two.
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2"))
    first = await replicas("replica-a")
    assert await eventually(lambda: first.elector.leading)
    second = await replicas("replica-b")

    assert await eventually(lambda: len(cluster.migrations()) == 1)
    await tries(second, count=QUICK.lease_duration + 1)  # longer than a lease: the follower keeps following

    assert len(cluster.migrations()) == 1
    assert first.elector.leading and not second.elector.leading and terms(caplog, "replica-b") == 0
    assert holder(kmock) == "replica-a"
    assert second.degraded() == [] and second.keeper.watch is None  # a follower watches nothing
    decided = [(r.fields["vm"], r.fields["hold"]) for r in caplog.records if r.getMessage() == "keeper decision"]
    assert {vm for vm, _ in decided} == {"default/vm1", "default/vm2"}  # the leader looked at both
    # Each decision was said once: a second keeper deciding too would have said them again.
    assert len(decided) == len(set(decided)), decided


async def test_replicas_starting_together_elect_one(cluster, replicas, kmock, caplog):
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    cluster.seed(three_nodes())
    started = [await replicas(f"replica-{i}", campaign=False) for i in range(3)]
    for service in started:
        service.start()

    assert await eventually(lambda: any(s.elector.leading for s in started))
    creates = [r for r in kmock if r.method == "POST" and r.url.path.endswith("/leases")]
    assert len(creates) == 3  # all three found no Lease and raced to create it
    await tries(*started, count=QUICK.lease_duration + 1)  # each has tried for longer than a lease
    assert sum(s.elector.leading for s in started) == 1
    assert terms(caplog) == 1
    assert not [r for r in caplog.records if r.exc_info]  # losing a race is no error


async def test_losing_the_lease_stops_the_keeper_at_once(cluster, replicas, caplog):
    """Another holder shows up in the Lease: the keeper stops at the next read of the Lease, not
    when the library's renewal loop gives up (the renew deadline, 4 s here)."""
    cluster.seed(three_nodes() + apart_vm(migratable=False))
    service = await replicas("replica-a", lease_timing=LeaseTiming(lease_duration=6, renew_deadline=4,
                                                                   retry_period=1, request_timeout=0.5))
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    assert await eventually(lambda: service.elector.leading and any(
        r.getMessage() == "keeper decision" for r in caplog.records))  # a pass has looked at the VM
    loop = asyncio.get_running_loop()

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await cluster.patch(LEASE_PATH, {"spec": {"holderIdentity": "replica-b", "renewTime": now, "acquireTime": now}})
    taken = loop.time()

    assert await eventually(lambda: not service.elector.leading, timeout=3)
    assert loop.time() - taken < 1.6  # one retry period
    assert await eventually(lambda: service.keeper.watch is None, timeout=0.2)  # the keeper cancelled, its watches closed
    # The VM becomes movable while the library would still be trying to renew: nothing happens.
    await cluster.patch(f"{VMIS}/vm1", {"status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "LiveMigratable", "status": "True"}]}})
    await tries(service, count=2)
    assert cluster.migrations(ours=False) == []
    assert not service.elector.leading
    assert [r.fields["why"] for r in caplog.records if r.getMessage() == "keeper stopped leading"] == [
        "the lease is held by replica-b"]


async def test_a_renewal_that_hangs_stops_the_keeper_at_the_renew_deadline(cluster, replicas, kmock):
    """The API stops answering the Lease reads: the library would keep its leader until its
    renewal loop gives up; the keeper stops when the renew deadline since the last renewal passes."""
    cluster.seed(three_nodes())
    timing = LeaseTiming(lease_duration=6, renew_deadline=4, retry_period=1, request_timeout=3.5)
    service = await replicas("replica-a", lease_timing=timing)
    assert await eventually(lambda: service.elector.leading)
    loop = asyncio.get_running_loop()

    kmock[f"get {LEASE_PATH}"] << (lambda: asyncio.sleep(30))
    hung = loop.time()

    assert await eventually(lambda: not service.elector.leading, timeout=6)
    # The last renewal was at most one retry period before the hang: stopped by hung + 4 s. The
    # library alone would wait out a 3.5 s read after the next retry, then one more retry period.
    assert loop.time() - hung < 4.3
    assert await eventually(lambda: service.keeper.watch is None, timeout=0.2)


async def test_shutdown_hands_the_lease_over(cluster, replicas, kmock):
    cluster.seed(three_nodes())
    timing = LeaseTiming(lease_duration=30, renew_deadline=4, retry_period=1, request_timeout=0.5)
    first = await replicas("replica-a", lease_timing=timing)
    assert await eventually(lambda: first.elector.leading)
    second = await replicas("replica-b", lease_timing=timing)
    await tries(second, count=2)  # it found the Lease held, and tried again
    assert not second.elector.leading

    loop = asyncio.get_running_loop()
    stopping = loop.time()
    await first.stop()

    assert not first.elector.leading
    # Released, not left to expire (30 s): the follower takes it at its next try.
    assert await eventually(lambda: second.elector.leading, timeout=4)
    assert loop.time() - stopping < 3
    assert holder(kmock) == "replica-b"


def test_the_lease_namespace_is_the_pods_own_unless_given(tmp_path, monkeypatch):
    mounted = tmp_path / "namespace"
    mounted.write_text("colocate-ns\n")
    assert lease_namespace(Settings(), {}, mounted) == "colocate-ns"
    assert lease_namespace(Settings(), {"POD_NAMESPACE": "from-env"}, tmp_path / "absent") == "from-env"
    assert lease_namespace(Settings(lease_namespace="given"), {"POD_NAMESPACE": "x"}, mounted) == "given"
    with pytest.raises(ValueError, match="--lease-namespace"):
        lease_namespace(Settings(), {}, tmp_path / "absent")
    monkeypatch.setenv("POD_NAME", "kubevirt-colocate-7d9f-x2")
    assert identity() == "kubevirt-colocate-7d9f-x2"
    monkeypatch.delenv("POD_NAME")
    assert identity()  # the host name


async def test_a_lease_the_replica_may_not_touch_is_a_readiness_note_never_a_crash(cluster, replicas, kmock):
    import kmock as kmocklib

    def forbidden():
        raise kmocklib.KubernetesError(status=403, reason="Forbidden", message="leases is forbidden")

    kmock[f"get {LEASE_PATH}"] << forbidden
    cluster.seed(three_nodes() + apart_vm())
    service = await replicas("replica-a")

    assert await eventually(lambda: service.degraded())
    assert service.degraded() == ["keeper: lease: reading the Lease: API answered 403"]
    await tries(service, count=2)
    assert not service.elector.leading and cluster.migrations(ours=False) == []


def slow_plan(monkeypatch, seconds):
    """The keeper's first plan held `seconds` at a stretch (as over 75,000 VMs, only longer); `started` is set
    when it begins."""
    started, made = threading.Event(), keeper_module.plan

    def slow(*args, **kwargs):
        if not started.is_set():
            started.set()
            time.sleep(seconds)
        return made(*args, **kwargs)

    monkeypatch.setattr(keeper_module, "plan", slow)
    return started


async def test_a_pass_held_long_keeps_the_lease_renewed(cluster, replicas, monkeypatch, caplog):
    """A plan that takes longer than the renew deadline (2 s here; 10 s in a cluster) at a stretch: the Lease
    is renewed all along, the leader never steps down, and the pass goes on to its end."""
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    cluster.seed(three_nodes() + apart_vm())
    started = slow_plan(monkeypatch, 3 * QUICK.renew_deadline)
    service = await replicas("replica-a")
    assert await eventually(lambda: service.elector.leading)
    await eventually(started.is_set, timeout=10)
    renewed = service.elector.renewed_at

    await asyncio.sleep(2 * QUICK.renew_deadline)  # the plan still being made

    assert service.elector.leading and terms(caplog) == 1
    assert service.elector.renewed_at > renewed + QUICK.retry_period / 2  # renewed meanwhile
    assert await eventually(lambda: len(cluster.migrations()) == 1, timeout=4 * QUICK.renew_deadline)
    assert terms(caplog) == 1


def lists(kmock):
    """The lists of the caches and watches the process made (not their watches, not one object's read, not a
    term's look at Longhorn's settings)."""
    return [r.url.path for r in kmock if r.method == "GET" and r.resource is not None and not r.name
            and r.params.get("watch") != "true" and r.resource.plural not in ("leases", "settings")]


async def test_a_lease_lost_mid_pass_stops_its_writes_and_keeps_the_caches(cluster, kmock, tmp_path, monkeypatch,
                                                                            caplog):
    """Another replica takes the Lease while the pass is planning: nothing of that pass is written, and when this
    replica leads again it goes on with the caches it holds (at 75,000 VMs, a list of every one again on top
    of them cost minutes and the memory limit)."""
    caplog.set_level(logging.INFO, logger="webhook.keeper")
    cluster.seed(three_nodes() + apart_vm())
    started = slow_plan(monkeypatch, 2 * QUICK.renew_deadline)
    api = for_host(api_host(kmock))
    elected = ElectedKeeper(api, Settings(keep="migrate", keep_after=0, keep_max_inflight=1), namespace=NS,
                            identity="replica-a", kubeconfig=kubeconfig_for(tmp_path, api_host(kmock)), events=False,
                            timing=PASSES, lease_timing=QUICK)
    elected.start()
    try:
        await eventually(started.is_set, timeout=10)
        listed = lists(kmock)
        assert listed  # the caches' and the watches' first lists
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await cluster.patch(LEASE_PATH, {"spec": {"holderIdentity": "replica-b", "renewTime": now, "acquireTime": now,
                                                  "leaseDurationSeconds": QUICK.lease_duration}})
        assert await eventually(lambda: not elected.elector.leading, timeout=2 * QUICK.retry_period)
        await asyncio.sleep(2 * QUICK.renew_deadline)  # past the plan's end: what it came to is not written

        assert cluster.migrations(ours=False) == []
        # replica-b is gone: its Lease runs out, this replica leads again and acts on the caches it held.
        assert await eventually(lambda: terms(caplog) == 2, timeout=QUICK.lease_duration + 4)
        assert await eventually(lambda: len(cluster.migrations()) == 1, timeout=10 * QUICK.renew_deadline)
        assert lists(kmock) == listed
    finally:
        await elected.stop()
        await api.close()
