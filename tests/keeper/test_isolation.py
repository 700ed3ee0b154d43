"""One tenant's outage takes nothing from anyone else. The tenant's validating webhook for migrations is
down for its whole namespace (failurePolicy Fail: kube-apiserver answers 500 "failed calling webhook", or
answers only after the keeper gave up): 24 of its VMs, apart from their storage the longest, come first in
every pass. A VM of another namespace is still moved in the keeper's first pass — on a new leader, that
does not know yet whether targeted migration works, and on one that does — the tenant's failures never
count as the API lost, and `status` names no limit that does not bind. And a frozen VM never waits behind
our own drift migrations: a recovery has a slot of its own."""
from __future__ import annotations

import asyncio
import collections
import datetime
import re

import kmock as kmocklib
import pytest
from tests.support.kube import ago
from tests.support.kubevirt_api import apart_vm, eventually, three_nodes
from tests.support.stale import (LONG_AGO, drained_node_cluster, pause_on_io_error, paused_again_after_the_keepers_resume,
                                 restart_storage, resumed_by_the_keeper, volumes)

from webhook.config import Settings
from webhook.keeper.writes import SHARED
from webhook.rules.shared.alone import Alone

from .test_failures import ETCD_DOWN, FAST, MIGRATIONS, failing, four_apart, migration_creates, status_now, vm_of
from .test_recovery_kubevirt import seen

TENANT = "tenant"
LIMITS = (Alone.OUR_LIMIT, Alone.CLUSTER_LIMIT, Alone.SOURCE_BUSY)


def tenant_vm(number: int) -> list[dict]:
    """A VM of TENANT on node-a, its disk served from node-b, apart for days (the lower `number`, the longer)."""
    objects = apart_vm(f"t{number:02}", namespace=TENANT)
    objects[-1]["metadata"]["creationTimestamp"] = ago(days=3, minutes=number)
    return objects


def tenant_and_another(count: int = 24) -> list[dict]:
    """`count` VMs of TENANT, and vm1 of `default`, apart for an hour: the tenant's are tried first."""
    other = apart_vm("vm1", node="node-c", storage="node-a")
    other[-1]["metadata"]["creationTimestamp"] = ago(hours=1)
    return three_nodes() + [obj for number in range(1, count + 1) for obj in tenant_vm(number)] + other


def of_tenant(request) -> bool:
    return request.namespace == TENANT


async def knowing_targeted(keeper) -> None:
    """The keeper learnt that targeted migration works before the tenant's webhook went down."""
    await keeper.targeted.dry_run({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                   "metadata": {"generateName": "probe-", "namespace": "default"},
                                   "spec": {"vmiName": "vm1", "addedNodeSelector": {"x": "y"}}})
    assert keeper.targeted.available


@pytest.mark.parametrize("how", [500, "timeout"])
@pytest.mark.parametrize("leader", ["new", "knowing targeted migration"])
async def test_a_tenants_webhook_down_leaves_another_namespaces_vm_moved_in_the_first_pass(kmock, cluster, make_keeper,
                                                                                         how, leader):
    kmock["create", MIGRATIONS] << failing(how, of_tenant)
    cluster.seed(tenant_and_another())
    keeper = await make_keeper(timing=FAST)
    if leader != "new":
        await knowing_targeted(keeper)

    report = await keeper.run_pass()

    assert [vm_of(name) for name in report.created] == ["vm1"]
    # one tenant's webhook: the API is not lost, nor the keeper's trouble (its log line and the VMs' holds say it)
    assert keeper.degraded() == []
    assert any(r.decision.startswith("not tried in this pass: the keeper's requests for ") and
               f"of namespace {TENANT} failed" in r.decision for r in report.vms if r.namespace == TENANT)
    assert {r.hold for r in report.vms if r.namespace == TENANT} == {Alone.REFUSED}
    assert not [r for r in report.vms if r.hold in LIMITS or r.hold is Alone.UNTARGETED]
    tried = {r.data["spec"]["vmiName"] for r in kmock if of_tenant(r) and r.method == "POST"}
    assert len(tried) <= 2  # the tenant's namespace waits for the next pass after two of its VMs failed

    said = await status_now(kmock)
    [made] = cluster.migrations()
    for vm in said.vms:
        if vm.decision.hold is Alone.OUR_LIMIT:  # its slots held by our migration in flight and one this plan makes
            assert f"default/{made['metadata']['name']}" in vm.decision.reason, vm.decision.reason
            assert f"{TENANT}/t" in vm.decision.reason, vm.decision.reason
        assert vm.decision.hold not in (Alone.CLUSTER_LIMIT, Alone.SOURCE_BUSY, Alone.UNTARGETED), vm.decision.reason


async def test_a_frozen_vm_gets_its_migration_while_our_drift_migrations_fill_the_limit(kmock, cluster, make_keeper):
    """Our drift migrations of vm4 and vm5 hold every slot of --keep-max-inflight 2 (vm6 waits for one)
    when vm1 freezes on its stale mount: the next pass creates vm1's recovery in the slot kept for
    recoveries, and vm6 still waits, told which migrations hold the slots."""
    drift = [*apart_vm("vm4", node="node-b", storage="node-c"), *apart_vm("vm5", node="node-c", storage="node-b"),
             *apart_vm("vm6", node="node-b", storage="node-c")]
    cluster.seed(drained_node_cluster(spared=True) + drift)
    volumes(kmock)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=2))
    first = await keeper.run_pass()
    assert [vm_of(name) for name in first.created] == ["vm4", "vm5"]

    await restart_storage(kmock, cluster, "vm1", "node-b", LONG_AGO)
    await pause_on_io_error(kmock, cluster, "vm1", LONG_AGO)
    await paused_again_after_the_keepers_resume(kmock, keeper)
    report = await keeper.run_pass()

    [recovery] = [m for m in cluster.migrations() if m["spec"]["vmiName"] == "vm1"]
    assert report.created == (f"default/{recovery['metadata']['name']}",)
    assert recovery["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert not any((m.get("status") or {}).get("phase") in ("Succeeded", "Failed") for m in cluster.migrations())
    vm6 = next(r for r in report.vms if r.name == "vm6")
    assert vm6.hold == Alone.OUR_LIMIT and vm6.decision == (
        f"3 of our migrations in flight (limit 2): {', '.join(first.created)}, default/vm1 (moved in this pass)")


# --------------------------------------------------------------------------- many tenants down at once

TIMEOUT_SECONDS = 10  # the tenants' webhook's timeoutSeconds (admissionregistration.k8s.io/v1: 10 by default)


def hanging(mine, name="validate.kyverno.svc-fail"):
    """A reaction: a tenant's policy engine (failurePolicy Fail) accepts each request `mine` picks and never answers.
    kube-apiserver waits for it as long as its `timeoutSeconds`, then answers 500 naming it (k8s.io/apiserver
    `pkg/admission/plugin/webhook/errors`: "failed calling webhook %q: %v", the call's context deadline exceeded);
    the other requests meanwhile go on, each in its own goroutine."""
    async def react(request):
        if not mine(request):
            raise NotImplementedError  # the emulator answers
        await asyncio.sleep(TIMEOUT_SECONDS)
        return kmocklib.KubernetesError(status=500, reason="InternalError", message=(
            f'Internal error occurred: failed calling webhook "{name}": failed to call webhook: Post '
            f'"https://kyverno-svc.kyverno.svc:443/validate/fail?timeout={TIMEOUT_SECONDS}s": context deadline exceeded'))
    return react


def tenants_a_healthy_vm_and_a_frozen_one(namespaces: int, vms: int) -> list[dict]:
    """`vms` VMs in each of `namespaces` tenant namespaces on node-b, their disks served from node-c, apart for days
    (tried first); vm4 of `default` on node-c, apart for an hour; and the drained-node cluster whose vm1 (`default`)
    is to freeze on its stale mount. Nodes big enough for all."""
    tenants = []
    for n in range(1, namespaces + 1):
        for v in range(1, vms + 1):
            objects = apart_vm(f"t{n:03}-{v:02}", node="node-b", storage="node-c", namespace=f"tenant-{n:03}")
            objects[-1]["metadata"]["creationTimestamp"] = ago(days=3, minutes=v)
            tenants += objects
    healthy = apart_vm("vm4", node="node-c", storage="node-a")
    healthy[-1]["metadata"]["creationTimestamp"] = ago(hours=1)
    cluster = drained_node_cluster(spared=True) + tenants + healthy
    for node in (obj for obj in cluster if obj["kind"] == "Node"):
        node["status"]["allocatable"].update(cpu="1000", memory="4000Gi", pods="1000")
    return cluster


def moved_in_this_pass(report) -> set[str]:
    """The VMs a report's limits name as "moved in this pass"."""
    return {name for r in report.vms for name in re.findall(r"([\w.-]+/[\w.-]+) \(moved in this pass\)", r.decision)}


def of_tenants(request) -> bool:
    return str(request.namespace or "").startswith("tenant-")


@pytest.mark.parametrize("namespaces, vms, how", [(5, 24, "hanging"), (100, 2, 500)])
async def test_tenants_down_hold_no_recovery_nor_a_healthy_namespaces_vm_on_a_new_leader(kmock, cluster, make_keeper,
                                                                                       namespaces, vms, how):
    """On a new leader, with the tenants' VMs apart the longest: 5 namespaces x 24 VMs whose webhook hangs until its
    timeoutSeconds (10 s), or 100 namespaces whose webhook answers 500 at once. vm1, frozen on its stale mount and
    proven so, gets its recovery and vm4 (apart) its migration at once, as if the tenants were not there: within
    60 s of the keeper's start, and before any hanging tenant's answer came. Each tenant namespace costs the pass
    one wait at most (its requests: one if it hangs, at most SHARED if it fails fast); none is the API lost, nor
    the keeper's trouble; a second pass waits for no hanging tenant (each backs off)."""
    cluster.seed(tenants_a_healthy_vm_and_a_frozen_one(namespaces, vms))
    volumes(kmock)
    kmock["create", MIGRATIONS] << (hanging(of_tenants) if how == "hanging" else failing(500, of_tenants))
    loop = asyncio.get_running_loop()
    started = loop.time()
    keeper = await make_keeper(Settings(keep="migrate"))
    await restart_storage(kmock, cluster, "vm1", "node-b", LONG_AGO)
    await pause_on_io_error(kmock, cluster, "vm1", LONG_AGO)
    await resumed_by_the_keeper(kmock, cluster, "vm1", datetime.timedelta(seconds=30))

    passing = asyncio.ensure_future(keeper.run_pass())
    moved = await eventually(lambda: {m["spec"]["vmiName"] for m in cluster.migrations()} >= {"vm1", "vm4"},
                             timeout=60)
    took = loop.time() - started
    assert moved and took < (TIMEOUT_SECONDS if how == "hanging" else 60), took
    report = await passing

    assert sorted(vm_of(name) for name in report.created) == ["vm1", "vm4"]
    [recovery] = [m for m in cluster.migrations() if m["spec"]["vmiName"] == "vm1"]
    assert recovery["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    tried = collections.Counter(r.namespace for r in kmock if of_tenants(r) and r.method == "POST")
    assert len(tried) == namespaces and max(tried.values()) <= (1 if how == "hanging" else SHARED)
    assert keeper.degraded() == [] and not report.note
    assert {r.hold for r in report.vms if r.namespace.startswith("tenant-")} == {Alone.REFUSED}
    assert moved_in_this_pass(report) <= {f"default/{vm}" for vm in ("vm1", "vm4")}

    if how == "hanging":
        began = loop.time()
        await keeper.run_pass()
        assert loop.time() - began < TIMEOUT_SECONDS and sum(1 for r in kmock if of_tenants(r)) == sum(tried.values())


async def test_a_pass_that_stops_names_no_migration_it_did_not_create(kmock, cluster, make_keeper):
    """etcd times out every create of ns-1..ns-3 (no webhook named: the API lost): the pass stops after the third
    namespace in a row, before vm4 and vm5 of ns-4. Nothing names a migration that was not created: vm4 is not
    tried in this pass, and says so, and vm5 is held by no limit of ours "moved in this pass"."""
    kmock["create", MIGRATIONS] << failing(500, lambda r: r.params.get("dryRun") != "All" and r.namespace != "ns-4",
                                           ETCD_DOWN)
    vm5 = apart_vm("vm5", node="node-c", storage="node-b", namespace="ns-4")
    vm5[-1]["metadata"]["creationTimestamp"] = ago(minutes=20)
    cluster.seed(four_apart(("ns-1", "ns-2", "ns-3", "ns-4")) + vm5)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=1))

    report = await keeper.run_pass()

    assert migration_creates(kmock) == ["vm1", "vm2", "vm3"] and report.created == () and cluster.migrations() == []
    by_name = {r.name: r for r in report.vms}
    assert by_name["vm4"].hold is by_name["vm5"].hold is Alone.REFUSED
    assert by_name["vm4"].decision.startswith("not tried in this pass: the API failed in 3 namespaces in a row")
    assert moved_in_this_pass(report) == set()
