"""What a keeper's pass observes of each VM, on the emulator: what the hold table needs of it, read
as the table reaches it, and kept by the caches however new the check."""
import copy

from tests.support.kubevirt_api import apart_vm, three_nodes

from webhook.rules.keeping import keep
from webhook.rules.shared.alone import Alone
from webhook.rules.keeping.keep import Check
from webhook.rules.shared import declared

FROZEN = "example.com/frozen"


def record(report, name):
    return next(r for r in report.vms if r.name == name)


async def test_a_hold_on_an_annotation_no_rule_read_before_holds_the_vm(cluster, make_keeper, monkeypatch):
    """"Never move a VM annotated example.com/frozen": the annotation declared where the rules'
    reads are (`declared.VMI`), the check added to the table. The keeper's VMI cache keeps what is
    declared, so the pass sees the annotation and leaves that VM where it is."""
    vmi_fields = copy.deepcopy(declared.VMI)
    vmi_fields.shaped = False  # as it is before any cache takes its shape
    vmi_fields.annotation(FROZEN)
    monkeypatch.setattr(declared, "VMI", vmi_fields)
    frozen = Check(Alone.OPTED_OUT, lambda vm, p: vm.vmi.annotations.get(FROZEN) == "true",
                   lambda vm, p: f'annotated {FROZEN}: "true"')
    monkeypatch.setattr(keep, "CHECKS", (frozen, *keep.CHECKS))
    objects = apart_vm("cold") + apart_vm("warm")
    cold = next(o for o in objects if o["kind"] == "VirtualMachineInstance" and o["metadata"]["name"] == "cold")
    cold["metadata"]["annotations"][FROZEN] = "true"
    cluster.seed(three_nodes() + objects)
    keeper = await make_keeper()

    report = await keeper.run_pass()

    assert record(report, "cold").hold == Alone.OPTED_OUT, record(report, "cold").decision
    assert FROZEN in record(report, "cold").decision
    assert [m["spec"]["vmiName"] for m in cluster.migrations()] == ["warm"]


def pod_reads(kmock, vm):
    """The GETs of one pod by name the pass made about `vm`: its launcher pod, its share-manager's."""
    return [r.name for r in kmock if r.method == "GET" and r.resource is not None and r.resource.plural == "pods"
            and r.name and vm in r.name]


async def test_a_vm_held_before_its_move_is_weighed_is_read_no_further(cluster, make_keeper, kmock, monkeypatch):
    """The hold table drives what a pass reads: a VM an own check holds ahead of the one that
    needs its storage node is not read further (no span apart taken, no target weighed); the VM
    beside it, which may move, is. Neither costs a read of a pod from the API: the caches hold the
    launcher pods and share-managers (75,000 VMs apart at a first install: 150,000 GETs a pass otherwise)."""
    frozen = Check(Alone.OPTED_OUT, lambda vm, p: vm.vmi.name == "cold", lambda vm, p: "cold", ("vmi",), own=True)
    monkeypatch.setattr(keep, "CHECKS", (frozen, *keep.CHECKS))
    cluster.seed(three_nodes() + apart_vm("cold") + apart_vm("warm"))
    keeper = await make_keeper()

    report = await keeper.run_pass()

    assert record(report, "cold").hold == Alone.OPTED_OUT and record(report, "warm").hold is None
    assert [key[1] for key in keeper.records.spans] == ["warm"]
    assert pod_reads(kmock, "cold") == pod_reads(kmock, "warm") == []
