"""Any failure about one VM holds that VM alone: its create, its cancel, its unpause or the dry run of
its migration answered 500 (what kube-apiserver answers when a tenant's webhook with failurePolicy
Fail is down), also after longer than its request timeout (it waits as long as a webhook may take),
holds that VM with a backoff of its own, and the same pass moves another VM. The VM is tried again, backing off as client-go's per-item rate
limiter does; two of one namespace failing hold its other VMs for the pass; only several causes failing
in a row (the API lost) stop a pass; a bucket bounds the keeper's writes as a whole (webhook/keeper/writes.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import re

import kmock as kmocklib
import pytest
from tests.support.clock import Clock
from tests.support.kubevirt_api import TIMING, ago, apart_vm, eventually, three_nodes
from tests.support.stale import drained_node_cluster, restart_storage, volumes
from tests.support.stores import api_host, for_host, in_cache

from kubefake.kubevirt import GROUP
from kubefake.virt_handler import io_error_pause
from webhook import kinds
from webhook.config import Settings
from webhook.keeper.writes import LOST, Writes
from webhook.rules.keeping.record import Action
from webhook.rules.shared.alone import Alone
from webhook.stores.direct import ClusterStore
from webhook.tools import status

from .test_kubevirt_targets import stuck_target
from .test_passes import record, vm1_then_vm2
from .test_recovery_kubevirt import evacuated, kinds_time, seen

TIMEOUT = 1.0
FAST = dataclasses.replace(TIMING, request_timeout=TIMEOUT)
MIGRATIONS = kmocklib.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")
WEBHOOK_DOWN = ('Internal error occurred: failed calling webhook "migrations.tenant.example.com": failed to call '
                'webhook: Post "https://127.0.0.1:1/validate?timeout=2s": dial tcp 127.0.0.1:1: connect: connection refused')
VIRT_API_DOWN = ('Internal error occurred: failed calling webhook "migration-create-validator.kubevirt.io": failed to '
                 'call webhook: Post "https://virt-api.kubevirt.svc:443/migration-validate-create?timeout=10s": '
                 'dial tcp 10.96.0.12:443: connect: connection refused')
ETCD_DOWN = "etcdserver: request timed out"
UNPAUSE = re.compile(rf"/apis/{re.escape(GROUP)}/v1/namespaces/default/virtualmachineinstances/vm1/unpause")


def failing(how, mine, message=WEBHOOK_DOWN):
    """A reaction: each request `mine` picks answered 500 with the apiserver's words (by default, for a
    tenant's webhook that is down), or (`how` "timeout") so after longer than the keeper's request timeout:
    a write waits as long as an admission webhook may take. The others are left to the emulator."""
    async def react(request):
        if not mine(request):
            raise NotImplementedError  # the emulator answers (None would spend the reaction)
        if how == "timeout":
            await asyncio.sleep(TIMEOUT + 0.5)
        return kmocklib.KubernetesError(status=500, reason="InternalError", message=message)
    return react


def creates_of(vm, *, dry_run=False):
    """Picks the (dry-run) creates of `vm`'s migrations."""
    return lambda r: (r.params.get("dryRun") == "All") is dry_run and (r.data or {}).get("spec", {}).get("vmiName") == vm


def vm_of(created):
    """The VM a created migration (namespace/name) moves."""
    return created.split("/")[1].split("-colocate-")[0]


def said(how):
    """The keeper's words: the apiserver's, a slow answer waited for as long as an admission webhook may take."""
    return "API answered 500: " + WEBHOOK_DOWN


# --------------------------------------------------------------------------- vm1 due for each action, vm2 to move


async def create_due(kmock, cluster, make_keeper):
    """vm1 and vm2 apart, vm1 the longer: the pass creates vm1's migration first."""
    cluster.seed(three_nodes() + vm1_then_vm2())
    return await make_keeper(timing=FAST), "vm2"


async def cancel_due(kmock, cluster, make_keeper):
    """vm1's migration of ours whose target pod has not been placed for long (the pass cancels it first),
    and vm2, apart since 9 minutes before with --keep-after 10m, apart long enough by then."""
    vm2 = apart_vm("vm2", node="node-c")
    vm2[-1]["metadata"]["creationTimestamp"] = ago(minutes=9)
    vm2[-1]["status"].pop("startTime", None)
    cluster.seed(three_nodes() + apart_vm("vm1") + vm2)
    clock = Clock()
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600), timing=FAST, clock=clock)
    assert [vm_of(name) for name in (await keeper.run_pass()).created] == ["vm1"]
    [made] = cluster.migrations()
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]))
    await stuck_target(cluster, keeper, made, seconds=90)
    clock.advance(120)
    return keeper, "vm2"


async def unpause_due(kmock, cluster, make_keeper):
    """vm1 paused on its stale mount and carried onto a fresh one by a drain's evacuation (the pass unpauses
    it first: it is beside its storage), and vm4 apart from its storage for days."""
    cluster.seed(drained_node_cluster(spared=True) + apart_vm("vm4", node="node-c", storage="node-a"))
    volumes(kmock)
    clock = Clock()
    keeper = await make_keeper(Settings(keep="migrate", keep_after=600), timing=FAST, clock=clock)
    await restart_storage(kmock, cluster, "vm1", "node-b", datetime.timedelta(0))
    clock.now = t0 = kinds_time(kmock.objects[kinds.LONGHORN_VOLUME, "longhorn-system", "pvc-vm1-disk"].raw["status"]
                                ["remountRequestedAt"])
    await io_error_pause(kmock.apiserver, "default", "vm1", t0 + datetime.timedelta(seconds=5))
    await evacuated(kmock, cluster, "vm1", t0 + datetime.timedelta(seconds=40))
    clock.advance(60)
    await seen(keeper, kmock)
    return keeper, "vm4"


CASES = {  # what is due for vm1, its requests, where to react to them, what it holds
    "create": (create_due, creates_of("vm1"), lambda k: k["create", MIGRATIONS], Action.MIGRATE),
    "probe": (create_due, creates_of("vm1", dry_run=True), lambda k: k["create", MIGRATIONS], Action.MIGRATE),
    "cancel": (cancel_due, lambda r: str(r.name or "").startswith("vm1-colocate-"), lambda k: k["delete", MIGRATIONS],
               Action.CANCEL),
    "unpause": (unpause_due, lambda r: bool(UNPAUSE.fullmatch(r.url.path)), lambda k: k[kmocklib.method.PUT, UNPAUSE],
                Action.UNPAUSE),
}


@pytest.mark.parametrize("how", [500, "timeout"])
@pytest.mark.parametrize("action", CASES)
async def test_one_vms_failed_request_holds_it_alone_and_the_pass_moves_another(kmock, cluster, make_keeper, action,
                                                                               how):
    due, mine, where, held = CASES[action]
    keeper, other = await due(kmock, cluster, make_keeper)
    where(kmock) << failing(how, mine)

    report = await keeper.run_pass()

    assert [r for r in kmock if mine(r)], "vm1's request was not made"
    assert [vm_of(name) for name in report.created] == [other]  # in the same pass
    refusal = keeper.state.refusal("default", "vm1", held)
    assert refusal is not None and said(how) in refusal.words and refusal.count == 1
    assert not keeper.degraded()  # one VM's failure: the keeper is fine
    assert not [c for c in cluster.migrations() if c["spec"]["vmiName"] == "vm1" and action != "cancel"]
    report = await keeper.run_pass()  # at once: vm1 waits its backoff, saying why
    what = {"create": "its migration failed once (creating a migration", "unpause": "its unpause failed once (unpausing",
            "probe": "its migration failed once (the dry run of its migration",
            "cancel": "cancelling its migration failed once (cancelling migration default/vm1-colocate-"}[action]
    assert record(report).decision.startswith(what)
    assert f" failed: {said(how)}); retrying after " in record(report).decision


def migration_creates(kmock, vm=None):
    return [r.data["spec"]["vmiName"] for r in kmock if r.method == "POST" and r.params.get("dryRun") != "All"
            and r.resource is not None and r.resource.plural == MIGRATIONS.plural
            and (vm is None or r.data["spec"]["vmiName"] == vm)]


async def test_a_vm_whose_migration_keeps_failing_backs_off_exponentially_and_is_tried_again(cluster, make_keeper,
                                                                                            kmock):
    """Passes every 30 s: vm1's create answered 500 each time is tried after 1, 2, then 4 minutes
    (client-go's per-item exponential, from `rules.keeping.record.FIRST`), each time with the count in
    a row; once the API takes it, the migration is made."""
    down = {"on": True}
    kmock["create", MIGRATIONS] << failing(500, lambda r: down["on"] and creates_of("vm1")(r))
    cluster.seed(three_nodes() + apart_vm("vm1"))
    clock = Clock()
    keeper = await make_keeper(clock=clock)
    start, tried = clock.now, []
    while clock.now - start <= datetime.timedelta(minutes=8):
        before = len(migration_creates(kmock))
        report = await keeper.run_pass()
        if len(migration_creates(kmock)) > before:
            tried.append(int((clock.now - start).total_seconds()))
        clock.advance(30)
    assert tried == [0, 60, 180, 420]
    assert record(report).hold == Alone.REFUSED
    assert record(report).decision.startswith(f"its migration failed 4 times in a row (creating a migration failed: "
                                              f"{said(500)}); retrying after ")
    down["on"] = False
    while not report.created:
        assert clock.now - start <= datetime.timedelta(minutes=15), "not tried again after 8 minutes"
        report = await keeper.run_pass()
        clock.advance(30)
    assert clock.now - start == datetime.timedelta(seconds=930)  # tried at 900 s: 420 s + 8 minutes
    assert keeper.state.refusal("default", "vm1", Action.MIGRATE) is None  # it went through: forgotten


def four_apart(namespaces=("default",) * 4):
    """Four VMs apart, leaving three nodes (no node's outbound slots bind), vm1 first, in `namespaces`."""
    return three_nodes() + [*apart_vm("vm1", node="node-a", storage="node-b", namespace=namespaces[0]),
                            *apart_vm("vm2", node="node-a", storage="node-c", namespace=namespaces[1]),
                            *apart_vm("vm3", node="node-b", storage="node-a", namespace=namespaces[2]),
                            *apart_vm("vm4", node="node-c", storage="node-a", namespace=namespaces[3])]


@pytest.mark.parametrize("message", [ETCD_DOWN, VIRT_API_DOWN, WEBHOOK_DOWN])
async def test_three_namespaces_failing_in_a_row_stop_the_pass_as_the_api_lost_but_not_one_webhook(cluster, make_keeper,
                                                                                                 kmock, message):
    """Every create answered 500, a VM in each of four namespaces. With no webhook named, or KubeVirt's own
    (virt-api down), the third namespace failing in a row stops the pass (the fourth is not tried) and
    /readyz says why; the next pass starts afresh, the three held, and tries the fourth. A tenant's webhook
    named in each is one cause outside the API: all four are tried, and the keeper is fine."""
    kmock["create", MIGRATIONS] << failing(500, lambda r: r.params.get("dryRun") != "All", message)
    cluster.seed(four_apart(("ns-1", "ns-2", "ns-3", "ns-4")))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=4))

    report = await keeper.run_pass()

    first = migration_creates(kmock)
    if message == WEBHOOK_DOWN:
        assert first == ["vm1", "vm2", "vm3", "vm4"] and not keeper.degraded()
        return
    assert first == ["vm1", "vm2", "vm3"] and LOST == 3
    [note] = keeper.degraded()
    assert note.startswith("the API failed in 3 namespaces in a row (ns-1, ns-2, ns-3), the pass stopped: creating a "
                           "migration failed: API answered 500") and report.note == note
    await keeper.run_pass()
    assert migration_creates(kmock)[3:] == ["vm4"]
    assert not keeper.degraded()  # one VM failing: the API is not lost


async def test_the_dry_run_rotates_over_the_vms_not_held_and_a_failing_namespace_waits_a_pass(cluster, make_keeper,
                                                                                           kmock):
    """With one migration in flight allowed, the plan would move vm1 alone; its dry run and vm2's answered
    500 hold each of them, and the other VMs of their namespace wait for the next pass, which is not stopped;
    the next pass probes with vm3 (500: held), then vm4, which moves."""
    kmock["create", MIGRATIONS] << failing(500, lambda r: r.params.get("dryRun") == "All"
                                           and r.data["spec"]["vmiName"] != "vm4")
    cluster.seed(four_apart())
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=1))

    report = await keeper.run_pass()
    dry_runs = [r.data["spec"]["vmiName"] for r in kmock if r.method == "POST" and r.params.get("dryRun") == "All"]
    assert dry_runs == ["vm1", "vm2"] and report.created == ()
    assert keeper.degraded() == []  # a tenant's webhook: the API is not lost, nor is it the keeper's trouble
    assert all(keeper.state.refusal("default", vm, Action.MIGRATE) for vm in dry_runs)
    assert record(report, "vm3").decision.startswith("not tried in this pass: the keeper's requests for vm1, vm2 of "
                                                     "namespace default failed (the dry run of its migration failed: ")

    report = await keeper.run_pass()
    assert [vm_of(name) for name in report.created] == ["vm4"]
    assert {r.name: r.hold for r in report.vms if r.name != "vm4"} == dict.fromkeys(("vm1", "vm2", "vm3"), Alone.REFUSED)


async def status_now(kmock):
    """What `status --keep migrate --keep-after 0` shows now, the keeper's record read from `default`."""
    api = for_host(api_host(kmock))
    try:
        return await status.status(ClusterStore(api), Settings(keep="migrate", keep_after=0, lease_namespace="default"),
                                   datetime.datetime.now(datetime.UTC), timeout=2.0, api=api)
    finally:
        await api.close()


async def test_status_names_the_held_vm_with_the_apis_words_and_probes_another(cluster, make_keeper, kmock):
    """vm1's migrations, dry runs included, answered 500: `status` after the keeper's pass says
    vm1 is held with the API's words, and its own dry run, made of a VM not held (vm3, beside its
    storage; vm2's migration is in flight), finds targeted migration available."""
    kmock["create", MIGRATIONS] << failing(500, lambda r: r.data["spec"]["vmiName"] == "vm1")
    cluster.seed(three_nodes() + vm1_then_vm2() + apart_vm("vm3", node="node-c", storage="node-c"))
    keeper = await make_keeper()
    assert [vm_of(name) for name in (await keeper.run_pass()).created] == ["vm2"]

    report = await status_now(kmock)
    assert report.cluster.answers()[0][0] == "available"
    [vm1] = [vm for vm in report.vms if vm.name == "vm1"]
    assert vm1.decision.hold == Alone.REFUSED
    assert vm1.decision.reason.startswith(f"its migration failed once (the dry run of its migration failed: {said(500)})")


# --------------------------------------------------------------------------- the bucket


async def test_the_bucket_spreads_writes_past_its_burst_and_drops_none(cluster, make_keeper):
    """A bucket of 2 at 1 a second: the pass's dry run and three creates, the last two a second
    apart each; the keeper's own bucket (BURST 10) lets the same pass through at once."""
    cluster.seed(three_nodes() + [*apart_vm("vm1", node="node-a", storage="node-b"),
                                  *apart_vm("vm2", node="node-b", storage="node-c"),
                                  *apart_vm("vm3", node="node-c", storage="node-a")])
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=3))
    now, slept = [0.0], []

    async def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    keeper.writes = Writes(rate=1.0, burst=2, clock=lambda: now[0], sleep=sleep)
    report = await keeper.run_pass()
    assert len(report.created) == 3 and slept == [1.0, 1.0]
