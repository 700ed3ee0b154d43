"""One tenant's outage takes nothing from anyone else. The tenant's validating webhook for migrations is
down for its whole namespace (failurePolicy Fail: kube-apiserver answers 500 "failed calling webhook", or
answers only after the keeper gave up): 24 of its VMs, apart from their storage the longest, come first in
every pass. A VM of another namespace is still moved in the keeper's first pass — on a new leader, that
does not know yet whether targeted migration works, and on one that does — the tenant's failures never
count as the API lost, and `status` names no limit that does not bind. And a frozen VM never waits behind
our own drift migrations: a recovery has a slot of its own."""
from __future__ import annotations

import pytest
from tests.support.kube import ago
from tests.support.kubevirt_api import apart_vm, three_nodes
from tests.support.stale import (LONG_AGO, drained_node_cluster, pause_on_io_error, paused_again_after_the_keepers_resume,
                                 restart_storage, volumes)

from webhook.config import Settings
from webhook.rules.shared.alone import Alone

from .test_failures import FAST, MIGRATIONS, failing, status_now, vm_of
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
    assert await keeper.targeted.check({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                        "metadata": {"generateName": "probe-", "namespace": "default"},
                                        "spec": {"vmiName": "vm1", "addedNodeSelector": {"x": "y"}}})


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
