"""The keeper's record helps, never gates: not JSON, of a wrong type, of another version, refused or
deleted, the keeper still moves a VM apart long enough, says so (readiness note, metric, `status`), and
writes a valid record again (unless writing is refused too); an admin's edit or delete of it takes
effect at the next pass."""
from __future__ import annotations

import base64
import datetime
import gzip
import json

import kmock as kmocklib
import pytest
from tests.support.kube import run_verb
from tests.support.kubevirt_api import apart_vm, eventually, sample, three_nodes

from webhook import kinds
from webhook.rules.keeping.record import KEY, load
from webhook.rules.keeping.record import Action

from .test_passes import record

NAME = "kubevirt-colocate-keeper-state"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
FLAGS = ("--lease-namespace", "default", "--keep", "migrate", "--keep-after", "0")
PROBLEMS = "colocate_keeper_record_problems_total"
# A migration of vm1 KubeVirt no longer shows (3 hours ago), and a refusal whose count an admin made a string: that
# entry is dropped alone.
HOURS_AGO = int((datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=3)).timestamp())
WRONG_TYPE = json.dumps({"version": 3, "vms": {"default": {"vm1": {
    "m": [["old01", "Succeeded", HOURS_AGO, HOURS_AGO]], "r": {"migrate": ["2", 32503680000, 403, "no"]}}}}})


def configmap(text):
    """The ConfigMap holding `text` as the keeper keeps it: gzipped, base64 in binaryData."""
    packed = base64.b64encode(gzip.compress(text.encode())).decode()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": "default"},
            "binaryData": {KEY: packed}}


def stored_bytes(kmock):
    return base64.b64decode(kmock.objects[kinds.CONFIGMAP, "default", NAME].raw["binaryData"][KEY])


def stored(kmock):
    """The record as the cluster holds it, and what of it could not be read."""
    return load(stored_bytes(kmock))


async def status_of(tmp_path, kmock):
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", *FLAGS)
    assert code == 0, err
    return json.loads(out)["cluster"]


def refuse_vm1(request):
    """A tenant's admission policy: no migration of vm1 (reason Forbidden)."""
    if (request.data.get("spec") or {}).get("vmiName") == "vm1":
        return kmocklib.KubernetesError(status=403, reason="Forbidden", message="migrations of vm1 are not allowed")
    return None


@pytest.mark.parametrize("text, problem", [("{not json", "unreadable"), ('{"version": 99, "vms": {}}', "other version"),
                                           (WRONG_TYPE, "malformed")], ids=["not-json", "version-99", "wrong-type"])
async def test_a_record_it_cannot_read_is_said_rebuilt_and_written_again_and_the_keeper_acts(
        tmp_path, kmock, cluster, make_keeper, caplog, text, problem):
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    await cluster.create(CONFIGMAPS, configmap(text))
    before = sample(PROBLEMS, problem=problem)

    report = await keeper.run_pass()
    assert len(report.created) == 1 and cluster.migrations()  # it acts: vm1 is apart long enough
    assert sample(PROBLEMS, problem=problem) == before + 1
    [said] = [r for r in caplog.records if r.getMessage() == "keeper record problem"]
    assert said.fields["problem"] == problem
    assert said.fields["then"] == "what this leader knows kept, the rest rebuilt from the cluster"
    [note] = [n for n in keeper.degraded() if n.startswith("the keeper's record was rebuilt at ")]
    assert f": {problem}: " in note
    state, loss = stored(kmock)  # a valid record again, saying it was rebuilt
    assert loss is None and state.lost[1].startswith(f"{problem}: ")
    if problem == "malformed":  # the rest of it kept
        assert "vm1-colocate-old01" in {m.name for m in state.migrations}
    said = await status_of(tmp_path, kmock)
    assert said["state_warning"].startswith("rebuilt by the keeper at ") and problem in said["state_warning"]


async def test_a_record_it_may_not_read_is_said_and_the_keeper_acts_on_its_own_view(
        tmp_path, kmock, cluster, make_keeper):
    """A 403 on the record: its refusals cannot be known, so a VM apart long enough is moved all the
    same; its write is refused too, and each is said."""
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    await cluster.create(CONFIGMAPS, configmap('{"version": 2, "vms": {}}'))

    def forbidden():
        raise kmocklib.KubernetesError(status=403, reason="Forbidden", message="configmaps is forbidden")

    kmock[f"get {CONFIGMAPS}/{NAME}"] << forbidden
    before = sample(PROBLEMS, problem="not read"), sample(PROBLEMS, problem="not written")
    report = await keeper.run_pass()
    assert len(report.created) == 1
    assert (sample(PROBLEMS, problem="not read"), sample(PROBLEMS, problem="not written")) == (
        before[0] + 1, before[1] + 1)
    notes = keeper.degraded()
    assert any(n.startswith("the keeper's record could not be read: ") and "403" in n for n in notes)
    assert any(n.startswith("the keeper's record could not be written: ") for n in notes)
    said = await status_of(tmp_path, kmock)
    assert said["state"].startswith("not read (") and "403" in said["state"]


async def held_by_a_refusal(kmock, cluster, make_keeper):
    """vm1 apart, its migration refused once by a tenant's policy (then the policy is lifted): held a
    minute, as the record in the cluster says."""
    kmock.refuse = refuse_vm1
    cluster.seed(three_nodes() + apart_vm())
    keeper = await make_keeper()
    assert (await keeper.run_pass()).created == ()
    kmock.refuse = None
    assert stored(kmock)[0].refusal("default", "vm1", Action.MIGRATE) is not None
    report = await keeper.run_pass()
    assert report.created == () and "its migration was refused once" in record(report).decision
    return keeper


async def test_a_record_deleted_erases_no_backoff_the_leader_had_and_is_written_again_at_the_next_pass(
        tmp_path, kmock, cluster, make_keeper):
    keeper = await held_by_a_refusal(kmock, cluster, make_keeper)
    before = sample(PROBLEMS, problem="deleted")
    async with cluster.api() as session:
        await session.delete(f"{CONFIGMAPS}/{NAME}")
    await eventually(lambda: (kinds.CONFIGMAP, "default", NAME) not in kmock.objects
                     or kmock.objects[kinds.CONFIGMAP, "default", NAME].deleted)

    report = await keeper.run_pass()
    assert report.created == () and "its migration was refused once" in record(report).decision  # still backing off
    assert sample(PROBLEMS, problem="deleted") == before + 1
    assert any(": deleted: " in n for n in keeper.degraded())
    state, loss = stored(kmock)
    assert loss is None and state.lost[1].startswith("deleted: ")
    assert state.refusal("default", "vm1", Action.MIGRATE) is not None  # written again with what the leader knew
    said = await status_of(tmp_path, kmock)
    assert "deleted" in said["state_warning"]


async def test_an_admins_edit_of_the_record_takes_effect_at_the_next_pass(kmock, cluster, make_keeper):
    """The admin removes vm1's refusal from the record: the next pass moves it, and nothing was lost."""
    keeper = await held_by_a_refusal(kmock, cluster, make_keeper)
    edited = json.loads(gzip.decompress(stored_bytes(kmock)))
    del edited["vms"]["default"]["vm1"]["r"]
    current = kmock.objects[kinds.CONFIGMAP, "default", NAME].raw
    async with cluster.api() as session:
        await session.put(f"{CONFIGMAPS}/{NAME}", json=configmap(json.dumps(edited)) | {
            "metadata": {**current["metadata"]}})

    report = await keeper.run_pass()
    assert len(report.created) == 1
    assert keeper.state.lost is None and not any("record" in n for n in keeper.degraded())
