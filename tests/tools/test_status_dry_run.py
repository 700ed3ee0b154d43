"""`status` says up front whether the keeper can migrate here: one dry-run migration a run
(none with the keeper off), whether or not a VM is due to move, as an admin runs it."""
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import kmock as kmocklib
import pytest
from tests.support.stores import api_host, for_host, seed
from tests.support.kube import longhorn_settings, run_verb
from tests.support.kubevirt_api import Cluster, KubeVirtApi, ago, apart_vm, three_nodes

from webhook.stores.direct import ClusterStore
from webhook.config import Settings
from webhook.kinds import VMI
from webhook.tools import status as tool

ROOT = Path(__file__).resolve().parents[2]
VMIMS = kmocklib.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")
WEBHOOK = 'admission webhook "migration-create-validator.kubevirt.io" denied the request: '
NEEDS = "spec.addedNodeSelector needs KubeVirt 1.6 or newer"
WITHOUT = "our migrations are created without it and queue at KubeVirt's default priority, the lowest"
FORBIDDEN = ('virtualmachineinstancemigrations.kubevirt.io is forbidden: User "jane" cannot create resource '
             '"virtualmachineinstancemigrations" in API group "kubevirt.io" in the namespace "default"')
MIGRATE = Settings(keep="migrate")
NEVER = f"never: targeted migration unavailable ({NEEDS})"


@pytest.fixture
def kmock_options(kmock_options):
    return {**kmock_options, "cls": KubeVirtApi}


@pytest.fixture
def cluster(kmock):
    """The emulated cluster, with Longhorn 1.12's Settings sparing VMIs (no warning in the header)."""
    seed(kmock, longhorn_settings(blacklist="kubevirt.io/VirtualMachineInstance"))
    return Cluster(kmock)


def briefly_apart(**vmi_options):
    """vm1 on node-a, its disk served from node-b, its launcher pod started 6m30s ago: with
    --keep-after 10m no VM is due to move."""
    objects = three_nodes() + apart_vm(**vmi_options)
    objects[-1]["metadata"]["creationTimestamp"] = ago(minutes=6, seconds=30)
    objects[-1].setdefault("status", {}).pop("startTime", None)
    return objects


def pruning(request):
    """A KubeVirt < 1.6 schema behind an apiserver that prunes unknown fields."""
    if request.params.get("dryRun") == "All":
        return dict(request.data, spec={"vmiName": request.data["spec"]["vmiName"]})
    raise NotImplementedError  # the emulator answers (None would spend the reaction)


def rejecting(request):
    """The same schema under fieldValidation=Strict: one 400 naming every unknown field."""
    unknown = ", ".join(f'unknown field "spec.{field}"' for field in ("addedNodeSelector", "priority")
                        if field in request.data["spec"])
    raise kmocklib.KubernetesError(status=400, reason="BadRequest", message=(
        'VirtualMachineInstanceMigration in version "v1" cannot be handled as a VirtualMachineInstanceMigration: '
        f"strict decoding error: {unknown}"))


def forbidding(request):
    raise kmocklib.KubernetesError(status=403, reason="Forbidden", message=FORBIDDEN)


def kubevirt_1_8(kmock):
    """virt-api 1.8's migration-create admitter: spec.priority refused from anyone but
    virt-controller (422), then the VMI must exist (400)."""
    def admit(request):
        spec, namespace = request.data["spec"], request.data["metadata"]["namespace"]
        if "priority" in spec:
            raise kmocklib.KubernetesError(status=422, reason="Invalid", message=(
                WEBHOOK + "Migration priority queue, only virt-controller is allowed to set priority field"))
        if not any(resource.plural == VMI.plural and (ns, name) == (namespace, spec["vmiName"]) and not obj.deleted
                   for (resource, ns, name), obj in kmock.objects.items()):
            raise kmocklib.KubernetesError(status=400, reason="BadRequest", message=(
                WEBHOOK + f'the VMI "{namespace}/{spec["vmiName"]}" does not exist'))
        raise NotImplementedError  # admitted: the emulator answers (None would spend the reaction)
    return admit


def dry_runs(kmock):
    return [r.data for r in kmock if r.method == "POST" and r.params.get("dryRun") == "All"]


async def status(kmock, settings=Settings()):
    """`status` in-process, as `python -m webhook status` runs it: its text's lines, and its JSON's
    cluster facts and VMs."""
    api = for_host(api_host(kmock))
    try:
        report = await tool.status(ClusterStore(api), settings, datetime.now(UTC), timeout=2.0, api=api)
    finally:
        await api.close()
    as_json = json.loads(json.dumps(report.to_json()))
    return tool.render(report).splitlines(), as_json["cluster"], as_json["vms"]


SCHEMAS = {
    # name: (the cluster's answer to a dry run, targeted migration, migration priority, NEXT of vm1)
    "keeps": (None, ("available", "spec.addedNodeSelector is kept: targeted migration works"),
              ("available", "spec.priority is kept: our migrations queue as system-maintenance"), "moves in 3m "),
    "prunes": (pruning, ("unavailable", f"the cluster prunes spec.addedNodeSelector ({NEEDS}): no migration is created"),
               ("unavailable", f"the cluster prunes spec.priority (KubeVirt < 1.7): {WITHOUT}"), NEVER),
    "rejects": (rejecting,
                ("unavailable", f"the cluster rejects spec.addedNodeSelector as unknown ({NEEDS}): no migration is created"),
                ("unavailable", f"the cluster rejects spec.priority as unknown (KubeVirt < 1.7): {WITHOUT}"), NEVER),
    "forbidden": (forbidding, ("could not check", f"API answered 403: {FORBIDDEN}"),
                  ("could not check", f"API answered 403: {FORBIDDEN}"), "moves in 3m "),
}


@pytest.mark.parametrize("schema", SCHEMAS)
async def test_the_header_answers_before_any_vm_is_due_to_move(kmock, cluster, schema):
    answer, targeted, priority, next_step = SCHEMAS[schema]
    cluster.seed(briefly_apart())
    if answer is not None:
        kmock["create", VMIMS] << answer

    lines, facts, [vm1] = await status(kmock, MIGRATE)

    assert lines[1:3] == [f"targeted migration: {targeted[0]}: {targeted[1]}",
                          f"migration priority: {priority[0]}: {priority[1]}"], lines
    available = {"available": True, "unavailable": False, "could not check": None}
    assert facts["targeted_migration"] == {
        "available": available[targeted[0]], "answer": targeted[0], "why": targeted[1],
        "priority": available[priority[0]], "priority_answer": priority[0], "priority_why": priority[1]}
    # vm1 waits out --keep-after; NEXT says what comes after: a move, or never
    assert vm1["hold"] == "apart too briefly" and vm1["next"].startswith(next_step), vm1
    assert re.split(r"\s{2,}", lines[6])[5] == vm1["next"], lines
    assert len(dry_runs(kmock)) == 1
    made = dry_runs(kmock)[0]
    assert made["spec"]["vmiName"] == "vm1" and made["spec"]["priority"] == "system-maintenance"
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-a"}


@pytest.mark.parametrize("forbidden", [False, True], ids=["answered", "forbidden"])
async def test_one_dry_run_a_run_when_vms_are_due_to_move(kmock, cluster, forbidden):
    """The answer up front is the one the VMs due to move are decided with, conclusive or not (as
    the keeper decides after a dry run that proved nothing): no second dry run for them."""
    cluster.seed(three_nodes() + apart_vm() + apart_vm("vm2", node="node-c", storage="node-a"))
    if forbidden:
        kmock["create", VMIMS] << forbidding
    lines, facts, vms = await status(kmock, Settings(keep="migrate", keep_after=0))
    assert [vm["next"] for vm in vms] == (
        [f"held: targeted migration could not be checked: API answered 403: {FORBIDDEN}"] * 2 if forbidden else
        ["moves to node-b at the keeper's next pass", "moves to node-a at the keeper's next pass"])
    assert facts["targeted_migration"]["answer"] == ("could not check" if forbidden else "available")
    assert len(dry_runs(kmock)) == 1


async def test_a_vm_long_apart_on_a_pruning_schema_is_held(kmock, cluster):
    """Past --keep-after the keeper's own hold shows (the same as a keeper pass records)."""
    cluster.seed(three_nodes() + apart_vm())
    kmock["create", VMIMS] << pruning
    lines, facts, [vm1] = await status(kmock, Settings(keep="report", keep_after=0))
    assert vm1["hold"] == "targeted migration unavailable"
    assert vm1["next"] == "held: targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"


async def test_the_dry_run_names_a_vm_kubevirt_would_admit_a_migration_of(kmock, cluster):
    """virt-api refuses a migration of a VMI that is not live-migratable before the answer could
    say anything of the selector: the dry run names another opted-in VM."""
    cluster.seed(three_nodes() + apart_vm("vm0", migratable=False) + apart_vm("vm1", node="node-c"))
    await status(kmock)
    assert {made["spec"]["vmiName"] for made in dry_runs(kmock)} == {"vm1"}


def readme_header():
    """The header lines of the status example in README.md."""
    text = (ROOT / "README.md").read_text()
    return [line.strip() for line in text.splitlines()
            if line.startswith(("    targeted migration:", "    migration priority:"))]


async def test_on_current_kubevirt_status_says_what_the_readme_shows(kmock, cluster):
    """KubeVirt 1.8 keeps the selector but refuses spec.priority from us: our migrations queue at
    the default priority. The README's example is that answer."""
    cluster.seed(briefly_apart())
    kmock["create", VMIMS] << kubevirt_1_8(kmock)

    lines, facts, [vm1] = await status(kmock)

    assert lines[1:3] == readme_header() == [
        "targeted migration: available: spec.addedNodeSelector is kept: targeted migration works",
        "migration priority: unavailable: KubeVirt refuses spec.priority from us (only virt-controller may set it): "
        + WITHOUT]
    assert facts["targeted_migration"]["priority"] is False
    assert vm1["next"].startswith("moves in 3m ")
    assert [("priority" in made["spec"]) for made in dry_runs(kmock)] == [True, False]


async def test_without_an_opted_in_vm_a_made_up_migration_is_dry_run(kmock, cluster):
    """No VM to name: on a current KubeVirt the priority is answered and the selector is not (virt-api
    wants the VMI to exist), and the header says why; on an older schema both are answered."""
    cluster.seed(three_nodes())
    kmock["create", VMIMS] << kubevirt_1_8(kmock)

    lines, facts, vms = await status(kmock)

    assert vms == [] and lines[1:3] == [
        "targeted migration: could not check: API answered 400: " + WEBHOOK
        + 'the VMI "default/kubevirt-colocate-dry-run" does not exist',
        "migration priority: unavailable: KubeVirt refuses spec.priority from us (only virt-controller may set it): "
        + WITHOUT]
    assert facts["targeted_migration"]["answer"] == "could not check"
    assert {made["metadata"]["namespace"] for made in dry_runs(kmock)} == {"default"}


async def test_without_an_opted_in_vm_an_older_schema_is_still_found_out(kmock, cluster):
    cluster.seed(three_nodes())
    kmock["create", VMIMS] << rejecting
    lines, facts, vms = await status(kmock)
    assert facts["targeted_migration"]["answer"] == facts["targeted_migration"]["priority_answer"] == "unavailable"


async def test_the_command_says_it_in_its_output_alone(tmp_path, kmock, cluster):
    """`kubevirt-colocate status` on a pruning schema: the header and NEXT say it, as text and as
    JSON; nothing on stderr (the keeper would log it)."""
    cluster.seed(briefly_apart())
    kmock["create", VMIMS] << pruning
    code, out, err = await run_verb(tmp_path, kmock, "status", "--keep", "migrate")
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[1] == f"targeted migration: unavailable: the cluster prunes spec.addedNodeSelector ({NEEDS}): no " \
                       "migration is created", out
    assert re.split(r"\s{2,}", lines[6])[5] == NEVER, out
    code, out, err = await run_verb(tmp_path, kmock, "status", "--keep", "migrate", "-o", "json")
    assert (code, err) == (0, ""), err
    report = json.loads(out)
    assert report["cluster"]["targeted_migration"]["answer"] == "unavailable"
    assert [vm["next"] for vm in report["vms"]] == [NEVER]


async def test_with_the_keeper_off_nothing_is_dry_run(kmock, cluster):
    cluster.seed(briefly_apart() + apart_vm("vm2", node="node-c", storage="node-c"))
    lines, facts, vms = await status(kmock, Settings(keep="off"))
    off = "not checked: the keeper is off (--keep off)"
    assert lines[0].startswith("keeper: off, ") and lines[1:3] == [f"targeted migration: {off}",
                                                                   f"migration priority: {off}"], lines
    assert facts["mode"] == "off" and facts["targeted_migration"]["answer"] == "not checked"
    assert [vm["next"] for vm in vms] == ["nothing: the keeper is off (--keep off)", "stays: co-located"]
    assert dry_runs(kmock) == []
