"""The keeper's record as its ConfigMap keeps it: read back as written, read leniently (what is not the
keeper's reads as empty, an entry of an unexpected shape is dropped alone, each saying what was lost),
version 1 read as well, and bounded in size whatever the number of VMs and the length of their names."""
import dataclasses
import json
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago

from webhook.rules.keeping.migrations import Migration
from webhook.rules.keeping.recovery import Sighting
from webhook.rules.keeping.record import BUDGET, dump, load, Loss
from webhook.rules.keeping.record import Action, Evidence, KeeperState, Refusal, VmRecord

REFUSED = "creating a migration failed: API answered 403: no"


def state_of(migrations=(), refusals=(), lost=None, vmis=()):
    """A state of flat lists: each VM's record made of its entries (`vmis`: whole records of what it keeps of its VMI)."""
    records = {r.key: r for r in vmis}
    for m in migrations:
        r = records.get((m.namespace, m.vmi)) or VmRecord(namespace=m.namespace, name=m.vmi)
        records[r.key] = dataclasses.replace(r, migrations=(*r.migrations, m))
    for h in refusals:
        r = records.get((h.namespace, h.name)) or VmRecord(namespace=h.namespace, name=h.name)
        records[r.key] = dataclasses.replace(r, refusals=(*r.refusals, h))
    return KeeperState.of(records.values(), lost)


def ours(name, created, phase="Succeeded", vmi="vm1", namespace="default", **fields):
    ended = created + timedelta(minutes=1) if phase in ("Succeeded", "Failed") else None
    return Migration(namespace=namespace, name=name, vmi=vmi, phase=phase, ours=True, created=created, ended=ended,
                     **fields)


def test_the_record_reads_back_as_it_was_written():
    vm2 = VmRecord(namespace="default", name="vm2", uid="uid-vm2", unpaused=(ago(minutes=2), ago(minutes=1)),
                   said=(("NeedsRestart", ago(minutes=1)),),
                   seen=(("pvc-d", Sighting(ago(minutes=5), ago(minutes=4))), ("pvc-e", Sighting(ago(minutes=1)))),
                   full="paused because its disk rootdisk is full …",
                   stale=Evidence(requested=ago(minutes=4), last=ago(minutes=3),
                                  words="paused 2 times on I/O errors of disk rootdisk …: KubeVirt's retry did not bring it back"))
    state = state_of(migrations=(ours("vm1-colocate-abcde", ago(hours=2)),
                                 ours("vm1-colocate-fghij", ago(minutes=5), phase="Running", target="node-b",
                                      uid="uid-r", recovers="stale-mount")),
                     lost=(ago(minutes=3), "unreadable: not JSON"), vmis=(vm2,))
    state = state.refused("default", "vm1", Action.MIGRATE, 403, REFUSED, NOW)
    assert load(dump(state)) == (state, None)
    assert load(None) == load("") == (KeeperState(), None)


def test_a_finished_migration_keeps_its_suffix_and_times_only():
    """Its node and uid are read from the watch while KubeVirt keeps it; the generated name of a VM
    with a 63-character name is cut to 58 characters before its suffix, as the apiserver cuts it."""
    vm = "v" * 63
    name = f"{vm}-colocate-"[:58] + "x7k2p"
    finished = ours(name, ago(hours=3), vmi=vm, target="node-b", uid="uid-1")
    assert json.loads(dump(state_of(migrations=(finished,))))["vms"]["default"][vm]["m"] == [
        ["x7k2p", "Succeeded", int(ago(hours=3).timestamp()), int(ago(hours=3, minutes=-1).timestamp())]]
    assert load(dump(state_of(migrations=(finished,))))[0].migrations == (
        dataclasses.replace(finished, target=None, uid=""),)


@pytest.mark.parametrize("text, kind", [("{", "unreadable"), ("[]", "other version"), ('{"version": 99}', "other version"),
                                        ('{"version": "2"}', "other version")])
def test_what_is_not_the_keepers_record_reads_as_empty_and_says_so(text, kind):
    state, loss = load(text)
    assert state == KeeperState() and loss.kind == kind


def test_an_entry_of_a_wrong_type_is_dropped_alone():
    record = json.loads(dump(state_of(migrations=(ours("vm1-colocate-abcde", ago(hours=2)),)).refused(
        "default", "vm1", Action.MIGRATE, 403, REFUSED, NOW).refused("default", "vm2", Action.UNPAUSE, 409, "no", NOW)))
    record["vms"]["default"]["vm2"]["r"]["unpause"][0] = "2"
    state, loss = load(json.dumps(record))
    assert loss == Loss(kind="malformed", why="an entry dropped (a refusal's count '2' is not a number)")
    assert [m.name for m in state.migrations] == ["vm1-colocate-abcde"]
    assert [(h.name, h.action) for h in state.refusals] == [("vm1", Action.MIGRATE)]
    record["vms"]["other"] = "x"
    record["vms"]["default"]["vm1"]["r"]["reboot"] = [1, 0, 0, ""]
    assert load(json.dumps(record))[1].why.startswith("3 entries dropped")


@pytest.mark.parametrize("version", [1, 2, 99], ids=["never-released-1", "never-released-2", "a-later-release"])
def test_a_record_of_another_version_is_rebuilt_and_said(version):
    """Versions 1 and 2 were never released; a later release's record (a rollback) reads as empty, said so."""
    state, loss = load(json.dumps({"version": version, "vms": {"default": {"vm1": {"u": "uid-vm1"}}}}))
    assert state == KeeperState() and loss == Loss(kind="other version", why=f"version {version}, where this keeper reads 3")


def many(vms, per_namespace):
    """5,000 VMs with 63-character names, 4,000 of our migrations the watch no longer shows (one per
    VM), and a refusal with the API's words for every VM, the newest last."""
    names = [(f"ns-{i // per_namespace:05d}-".ljust(63, "n"), f"vm-{i:05d}-".ljust(63, "v")) for i in range(vms)]
    words = ("creating a migration failed: API answered 403: virtualmachineinstancemigrations.kubevirt.io is "
             "forbidden: ValidatingAdmissionPolicy 'tenant-no-migrations' with binding 'tenant' denied request: "
             "migrations are not allowed in this namespace")
    migrations = tuple(ours(f"{vm}-colocate-"[:58] + "x7k2p", ago(hours=20, seconds=-i), vmi=vm, namespace=ns)
                       for i, (ns, vm) in enumerate(names[:4000]))
    refusals = tuple(Refusal(namespace=ns, name=vm, action=Action.MIGRATE, count=3, retry=ago(seconds=-i),
                             words=words, status=403) for i, (ns, vm) in enumerate(names))
    return state_of(migrations=migrations, refusals=refusals)


@pytest.mark.parametrize("per_namespace", [100, 1])
def test_the_record_stays_under_512_kib_at_any_cluster_size(per_namespace):
    """Unbounded, this record would be 1.9 to 2.3 MB; it keeps the newest migrations first (they hold a VM
    to its daily limit and backoff), then the newest refusals."""
    state = many(5000, per_namespace)
    assert len(dump(state, budget=10 ** 9)) > 1_900_000
    text = dump(state)
    assert len(text.encode()) <= BUDGET < 512 * 1024
    kept, loss = load(text)
    assert loss is None
    if per_namespace == 100:
        assert len(kept.migrations) == 4000 and kept.refusals
        newest = sorted(state.refusals, key=lambda h: h.retry)[-len(kept.refusals):]
        assert {h.name for h in kept.refusals} == {h.name for h in newest}
    else:
        assert len(kept.migrations) > 2000
        assert {m.vmi for m in kept.migrations} == {m.vmi for m in state.migrations[-len(kept.migrations):]}


