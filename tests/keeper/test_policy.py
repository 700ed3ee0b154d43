"""The keeper's writes to migrations as the install's ValidatingAdmissionPolicy sees them: every
create and cancel it sends passes the policy, and a cancel names the migration's uid, so that
another migration that took the name is never cancelled."""
import copy

import pytest
from tests.support.admission_policy import PASSED, admit, create_request, delete_request, policy, service_account_user
from tests.support.kubevirt_api import VMIMS

from webhook.kinds import VMIM
from webhook.rules.shared.alone import Alone

from .test_kubevirt_targets import a_stuck_migration_of_ours
from .test_passes import record


def migration_requests(kmock):
    return [r for r in kmock if r.resource is not None and r.resource.plural == VMIM.plural
            and r.method in ("POST", "DELETE")]


async def test_every_migration_request_the_keeper_sends_passes_the_install_policy(cluster, make_keeper, kmock):
    """Its dry run, its create and its cancel, as sent, made into the AdmissionRequests the
    apiserver builds for its ServiceAccount."""
    keeper, made = await a_stuck_migration_of_ours(cluster, make_keeper)
    stored = copy.deepcopy(made)
    await keeper.run_pass()
    assert cluster.migrations() == []  # cancelled

    sent = migration_requests(kmock)
    assert [(r.method, r.params.get("dryRun")) for r in sent] == [
        ("POST", "All"), ("POST", None), ("DELETE", None)]
    keeper_user = service_account_user()
    for request in sent[:2]:
        admission = create_request(request.data, keeper_user, dry_run=request.params.get("dryRun") == "All",
                                   field_validation=request.params.get("fieldValidation"))
        assert admit(policy(), admission) == PASSED
    cancel = sent[2]
    assert cancel.data["preconditions"] == {"uid": stored["metadata"]["uid"]}
    assert admit(policy(), delete_request(stored, keeper_user, cancel.data)) == PASSED


@pytest.mark.parametrize("newcomer_ours", [False, True], ids=["someone-elses", "another-of-ours"])
async def test_a_migration_whose_name_another_took_is_not_cancelled(cluster, make_keeper, kmock, newcomer_ours):
    """Ours deleted and another created under its name before the keeper's watch shows it: the
    cancel (by uid) is answered 409 Conflict; the newcomer stays, ours counts as gone."""
    keeper, made = await a_stuck_migration_of_ours(cluster, make_keeper)
    name = made["metadata"]["name"]
    newcomer = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": "default", "uid": "uid-of-the-newcomer",
                             "creationTimestamp": made["metadata"]["creationTimestamp"],
                             "labels": dict(made["metadata"]["labels"]) if newcomer_ours else {}},
                "spec": {"vmiName": "vm1"}, "status": {"phase": "Pending"}}

    def swapped_just_before(request):
        """The race, played where the DELETE arrives: the apiserver now holds the newcomer."""
        if request.resource.plural == VMIM.plural and request.name == name:
            kmock.objects[VMIM, "default", name] = copy.deepcopy(newcomer)
        return None

    kmock.refuse_delete = swapped_just_before
    report = await keeper.run_pass()

    [cancel] = [r for r in migration_requests(kmock) if r.method == "DELETE"]
    assert cancel.data["preconditions"] == {"uid": made["metadata"]["uid"]}
    stays = kmock.objects[VMIM, "default", name]
    assert not stays.deleted and stays.raw["metadata"]["uid"] == "uid-of-the-newcomer"
    report = await keeper.run_pass()
    assert record(report).hold == Alone.BACKING_OFF  # ours is gone: it failed, the VM backs off
    assert not keeper.degraded()
    async with cluster.api() as session:
        async with session.get(f"{VMIMS}/{name}") as response:
            assert (await response.json())["metadata"]["uid"] == "uid-of-the-newcomer"
