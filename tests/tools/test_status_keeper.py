"""`status` and the keeper give the same answer: each of the keeper's scenarios on one emulated
cluster, `status` first (it creates nothing), then a keeper pass; for every VM the same hold and
the same reason. And what `status` says of each hold, as an admin reads it; over generated
clusters whose limits bind, the VMs `status` says move are the ones the pass moves."""
import asyncio
import contextlib
import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import kmock as kmocklib
import pytest
from hypothesis import event, given, settings as examples
from hypothesis import strategies as st
from tests.support.stores import api_host, for_host, watched_store
from tests.support.kube import node, rwx_disk
from tests.support.kubevirt_api import TIMING, Cluster, KubeVirtApi, ago, apart_vm, evacuated_vm, migration, three_nodes, vmi

from webhook.stores.direct import ClusterStore
from webhook.config import Settings
from webhook.kinds import HOSTNAME_LABEL, LEASE
from webhook.keeper.keeper import Keeper
from webhook.rules.shared.alone import Alone
from webhook.tools import status

MIGRATE = Settings(keep="migrate", keep_after=0)


@pytest.fixture
def kmock_options(kmock_options):
    return {**kmock_options, "cls": KubeVirtApi}


@pytest.fixture
def cluster(kmock):
    return Cluster(kmock)


async def status_of(kmock, settings):
    """`status` in-process, as `python -m webhook status` runs it, with the keeper's settings."""
    api = for_host(api_host(kmock))
    try:
        return await status.status(ClusterStore(api), settings, datetime.now(UTC), timeout=2.0, api=api)
    finally:
        await api.close()


async def keeper_pass(kmock, settings):
    """One pass of a keeper on the same cluster: its record of each VM."""
    store = await watched_store(kmock, settings)
    api = for_host(api_host(kmock))
    keeper = Keeper(api, store, settings, timing=TIMING)
    try:
        async with keeper.watching() as watch:
            await asyncio.wait_for(watch.wait_synced(), 5)
            report = await keeper.run_pass()
        return {r.name: r for r in report.vms}
    finally:
        await store.close()
        await api.close()


def seconds_blurred(text):
    """A reason without its counts of seconds: the two read the clock a moment apart."""
    return re.sub(r"\d+s\b", "Ns", text)


async def same_answer(kmock, settings):
    """Status, then the keeper: the same VMs, holds and reasons. Status's report."""
    report = await status_of(kmock, settings)
    records = await keeper_pass(kmock, settings)
    assert sorted(vm.name for vm in report.vms) == sorted(records)
    for vm in report.vms:
        record = records[vm.name]
        assert vm.decision.hold == record.hold, (vm.name, vm.decision.reason, record.decision)
        assert seconds_blurred(vm.decision.reason) == seconds_blurred(record.decision), vm.name
        assert (vm.state, vm.facts.vmi.node) == (record.state, record.node)
    return report


def untargeted(kmock):
    """KubeVirt < 1.6: a dry run's spec.addedNodeSelector is pruned."""
    def pruned(request):
        if request.params.get("dryRun") == "All":
            return dict(request.data, spec={"vmiName": request.data["spec"]["vmiName"]})
        return None
    kmock["create", kmocklib.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << pruned


def briefly_apart():
    """Its launcher pod started six and a half minutes ago on a node away from its storage."""
    objects = three_nodes() + apart_vm()
    objects[-1]["metadata"]["creationTimestamp"] = ago(minutes=6, seconds=30)
    objects[-1].setdefault("status", {}).pop("startTime", None)
    return objects


def descheduled():
    """The descheduler's eviction moved the VM off node-b (its storage) an hour ago."""
    return three_nodes() + evacuated_vm(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1))


SCENARIOS = {
    # name: (objects, settings, cluster change, hold, what status says)
    "moves": (lambda: three_nodes() + apart_vm(), MIGRATE, None, None, "moves to node-b at the keeper's next pass"),
    "report-only": (lambda: three_nodes() + apart_vm(), Settings(keep="report", keep_after=0), None, Alone.REPORT_ONLY,
                    "would migrate from node-a to node-b"),
    "apart-briefly": (briefly_apart, Settings(keep="migrate", keep_after=600), None, Alone.APART_BRIEFLY,
                      "moves in 3m (apart since "),
    "backing-off": (lambda: three_nodes() + apart_vm() + [migration("vm1-colocate-aaaaa", "vm1", phase="Failed",
                                                                    ours=True, created=ago(minutes=2))],
                    MIGRATE, None, Alone.BACKING_OFF, "backing off until "),
    "untargeted": (lambda: three_nodes() + apart_vm(), MIGRATE, untargeted, Alone.UNTARGETED,
                   "held: targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"),
    "target-unfit": (lambda: [node("node-a"), node("node-b", unschedulable=True)] + apart_vm(), MIGRATE, None,
                     Alone.TARGET_UNFIT, "held: cannot move to node-b: "),
    "not-migratable": (lambda: three_nodes() + apart_vm(migratable=False), MIGRATE, None, Alone.NOT_MIGRATABLE,
                       "held: not live-migratable: "),
    "cluster-limit": (lambda: three_nodes() + apart_vm() + [migration(f"drain-{i}", f"other-{i}") for i in range(5)],
                      MIGRATE, None, Alone.CLUSTER_LIMIT, "held: 5 migrations in flight cluster-wide (limit 5)"),
    "daily-limit": (lambda: three_nodes() + apart_vm() + [
        migration(f"vm1-colocate-{i}", "vm1", phase="Succeeded", ours=True, created=ago(hours=hours))
        for i, hours in enumerate((3, 5))], MIGRATE, None, Alone.DAILY_LIMIT,
        "held: migrated 2 times in the last 24h (limit 2)"),
    "descheduled": (descheduled, MIGRATE, None, Alone.DESCHEDULED,
                    "held: moved off node-b by the descheduler (migration kubevirt-evacuation-x7k2p ended "),
    "co-located": (lambda: three_nodes() + apart_vm(storage="node-a"), MIGRATE, None, Alone.NOT_APART,
                   "stays: co-located"),
    "split": (lambda: three_nodes() + [*apart_vm(), *rwx_disk("vm1-other", "node-c")], MIGRATE, None, Alone.NOT_APART,
              "held: split: "),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_status_and_the_keeper_give_the_same_answer(cluster, kmock, scenario):
    objects, settings, change, hold, said = SCENARIOS[scenario]
    seeded = objects()
    if scenario == "split":  # the VM's second disk
        vm1 = next(o for o in seeded if o["kind"] == "VirtualMachineInstance")
        vm1["spec"]["volumes"].append({"name": "other", "persistentVolumeClaim": {"claimName": "vm1-other"}})
    cluster.seed(seeded)
    if change is not None:
        change(kmock)

    report = await same_answer(kmock, settings)

    [vm] = report.vms
    assert vm.decision.hold == hold and vm.decision.act == (hold is None)
    assert said in vm.next, vm.next
    assert said in status.render(report)


async def test_the_header_says_what_the_keeper_goes_by(cluster, kmock):
    """Mode and leader (the Lease), targeted migration and priority (a dry run), migrations in flight."""
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "kubevirt-colocate-keeper", "namespace": "kubevirt-colocate"},
             "spec": {"holderIdentity": "kubevirt-colocate-7d9f-abcde", "leaseDurationSeconds": 15,
                      "renewTime": ago(seconds=3)}}
    flying = [migration("drain-1", "other-1"), migration("drain-2", "other-2"),
              migration("vm2-colocate-bbbbb", "vm2", ours=True)]
    cluster.seed(three_nodes() + apart_vm() + flying)
    kmock.objects[LEASE, "kubevirt-colocate", "kubevirt-colocate-keeper"] = lease

    report = await status_of(kmock, Settings(keep="migrate", keep_after=600))

    header = status.render(report).splitlines()[:4]
    assert re.fullmatch(r"keeper: migrate, leader kubevirt-colocate-7d9f-abcde \(renewed \d+s ago\), --keep-after 10m",
                        header[0]), header
    assert header[1:] == [
        "targeted migration: available: spec.addedNodeSelector is kept: targeted migration works",
        "migration priority: available: spec.priority is kept: our migrations queue as system-maintenance",
        "migrations in flight: 1 ours (limit 2), 3 in all (limit 5)",
    ]


async def test_the_header_without_targeted_migration_nor_a_leader(cluster, kmock):
    cluster.seed(three_nodes() + apart_vm())
    untargeted(kmock)

    report = await status_of(kmock, MIGRATE)

    header = status.render(report).splitlines()[:3]
    assert header[0] == "keeper: migrate, leader none (no Lease kubevirt-colocate/kubevirt-colocate-keeper), --keep-after 0s"
    assert header[1] == ("targeted migration: unavailable: the cluster prunes spec.addedNodeSelector "
                         "(spec.addedNodeSelector needs KubeVirt 1.6 or newer): no migration is created")
    assert report.to_json()["cluster"]["targeted_migration"]["available"] is False


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_with_the_in_flight_limit_binding_status_says_which_vms_the_pass_moves_and_which_it_holds(
        kmock, cluster, limit):
    """Three VMs apart and due, on one node, our in-flight limit `limit`: `status` says the first
    `limit` move at the next pass (2 at most: KubeVirt runs 2 migrations per source node, whose
    slots the keeper leaves to a drain) and the others are held by the limit, as the pass then
    does, VM by VM (the VMs apart longest first)."""
    objects = [node("node-a"), node("node-b")]
    for age, name in ((3, "vm1"), (2, "vm2"), (1, "vm3")):
        vm = apart_vm(name)
        vm[-1]["metadata"]["creationTimestamp"] = ago(hours=age)
        objects += vm
    cluster.seed(objects)
    settings = Settings(keep="migrate", keep_after=0, keep_max_inflight=limit)
    report = await status_of(kmock, settings)
    said = {vm.name: vm.next for vm in report.vms}
    moving = sorted(name for name, text in said.items() if text == "moves to node-b at the keeper's next pass")
    assert moving == ["vm1", "vm2", "vm3"][:min(limit, 2)], said
    for name in sorted(set(said) - set(moving)):
        assert said[name].startswith("held: ") and "in flight" in said[name], said[name]
    records = await keeper_pass(kmock, settings)
    assert sorted(m["spec"]["vmiName"] for m in cluster.migrations()) == moving
    for name in said:
        assert (records[name].hold is None) == (name in moving), (name, records[name].decision)


NODES = ("node-a", "node-b", "node-c", "node-d", "node-e")
MOVES = re.compile(r"moves to (\S+) at the keeper's next pass")


class Vm(NamedTuple):
    """A running opted-in VM on `node`, its disk served from `storage`, its launcher pod started
    `hours` ago; our migrations of it that succeeded, so many hours ago each."""
    name: str
    node: str
    storage: str
    hours: int
    migrated: tuple[int, ...] = ()


class Flight(NamedTuple):
    """A migration in flight of `vmi` (one of ours, or a VM we do not keep running on `node`)."""
    vmi: str
    ours: bool
    node: str | None = None


class Example(NamedTuple):
    """A generated cluster (its first `nodes` of NODES) and the keeper's limits: in-flight, per
    VM a day, KubeVirt's outbound slots per source node."""
    nodes: int
    vms: tuple[Vm, ...]
    flights: tuple[Flight, ...]
    max_inflight: int
    max_per_day: int
    max_outbound: int

    def objects(self):
        objects = [node(name) for name in NODES[:self.nodes]]
        for vm in self.vms:
            objects += apart_vm(vm.name, node=vm.node, storage=vm.storage)
            objects[-1]["metadata"]["creationTimestamp"] = ago(hours=vm.hours)  # its launcher pod
            objects += [migration(f"{vm.name}-colocate-d{i}", vm.name, phase="Succeeded", ours=True,
                                  created=ago(hours=hours)) for i, hours in enumerate(vm.migrated)]
        for i, flight in enumerate(self.flights):
            if flight.node is not None:
                objects.append(vmi(flight.vmi, flight.node, opted_in=False))
            objects.append(migration(f"{flight.vmi}-colocate-f{i}" if flight.ours else f"drain-{i}", flight.vmi,
                                     ours=flight.ours))
        return objects

    def settings(self):
        return Settings(keep="migrate", keep_after=0, keep_max_inflight=self.max_inflight,
                        keep_max_per_day=self.max_per_day, keep_max_outbound_per_node=self.max_outbound)


@st.composite
def examples_binding(draw):
    """A cluster where the pass's limits bind: 3–5 nodes; 2–7 running opted-in VMs, each apart
    from its storage or with it, most on two source nodes (KubeVirt's outbound slots per node),
    the first two apart on the first, apart since a drawn hour, some of the others migrated by
    us in the last day (the daily limit); 0–3 migrations in flight, ours or others', of our VMs
    or of VMs we do not keep on drawn nodes; our in-flight limit 1–3, the daily limit 1–2,
    KubeVirt's outbound slots 1–2."""
    names = NODES[:draw(st.integers(3, 5))]
    sources = st.sampled_from(names[:2]) | st.sampled_from(names)  # mostly two: their slots bind
    vms = []
    for i in range(draw(st.integers(2, 7))):
        if i < 2:  # apart on the first node, never moved: at least two vie for its slots
            vm = Vm(f"vm{i + 1}", names[0], draw(st.sampled_from(names[1:])), draw(st.integers(1, 48)))
        else:
            migrated = tuple(draw(st.integers(2, 30)) for _ in range(draw(st.sampled_from((0, 0, 1, 2)))))
            vm = Vm(f"vm{i + 1}", draw(sources), draw(st.sampled_from(names)), draw(st.integers(1, 48)), migrated)
        vms.append(vm)
    flights = []
    for i in range(draw(st.integers(0, 3))):
        of = draw(st.sampled_from([vm.name for vm in vms]) | st.none())
        flights.append(Flight(of or f"other{i}", draw(st.booleans()), None if of else draw(sources)))
    return Example(len(names), tuple(vms), tuple(flights), draw(st.integers(1, 3)), draw(st.integers(1, 2)),
                   draw(st.integers(1, 2)))


@contextlib.asynccontextmanager
async def emulated():
    """A fresh emulated cluster, served: an example's own (kmock keeps every request it has
    served and matches each new one against them all)."""
    async with KubeVirtApi() as emulator, kmocklib.Server(emulator):
        yield emulator


@examples(max_examples=25, deadline=None)
@given(example=examples_binding())
async def test_status_says_what_the_pass_then_does_vm_by_vm_with_the_limits_binding(example):
    """Over generated clusters: the VMs `status` says move at the keeper's next pass are the
    ones the pass then creates a migration of, each to the node it said; every VM has the same
    hold and reason in both (`same_answer`)."""
    async with emulated() as kmock:
        cluster = Cluster(kmock)
        cluster.seed(example.objects())
        before = {m["metadata"]["name"] for m in cluster.migrations()}

        report = await same_answer(kmock, example.settings())

        said = {vm.name: found[1] for vm in report.vms if (found := MOVES.fullmatch(vm.next))}
        created = {m["spec"]["vmiName"]: m["spec"]["addedNodeSelector"][HOSTNAME_LABEL]
                   for m in cluster.migrations() if m["metadata"]["name"] not in before}
    assert said == created, {vm.name: vm.next for vm in report.vms}
    for vm in report.vms:
        event(str(vm.decision.hold or "moves"))
