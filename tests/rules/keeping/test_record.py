"""The keeper's record as its ConfigMap keeps it: read back as written, read leniently (what is not the
keeper's reads as empty, an entry of an unexpected shape is dropped alone, each saying what was lost),
version 1 read as well, and bounded in size whatever the number of VMs and the length of their names."""
import dataclasses
import gzip
import json
import uuid
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago, refusals

from webhook.rules.keeping.migrations import Migration
from webhook.rules.keeping.recovery import Sighting, Stale
from webhook.rules.keeping.record import BUDGET, dump, load, Loss
from webhook.rules.keeping.record import Action, KeeperState, Refusal, VmRecord

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


def packed(data):
    return gzip.compress(json.dumps(data).encode())


def unpacked(record):
    return json.loads(gzip.decompress(record))


def ours(name, created, phase="Succeeded", vmi="vm1", namespace="default", **fields):
    ended = created + timedelta(minutes=1) if phase in ("Succeeded", "Failed") else None
    return Migration(namespace=namespace, name=name, vmi=vmi, phase=phase, ours=True, created=created, ended=ended,
                     **fields)


def test_the_record_reads_back_as_it_was_written():
    vm2 = VmRecord(namespace="default", name="vm2", uid="uid-vm2", unpaused=(ago(minutes=2), ago(minutes=1)),
                   said=(("NeedsRestart", ago(minutes=1)),),
                   seen=(("pvc-d", Sighting(ago(minutes=5), ago(minutes=4))), ("pvc-e", Sighting(ago(minutes=1)))),
                   full="paused because its disk rootdisk is full …",
                   stale=Stale(requested=ago(minutes=4), last=ago(minutes=3),
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
    assert unpacked(dump(state_of(migrations=(finished,))))["vms"]["default"][vm]["m"] == [
        ["x7k2p", "Succeeded", int(ago(hours=3).timestamp()), int(ago(hours=3, minutes=-1).timestamp())]]
    assert load(dump(state_of(migrations=(finished,))))[0].migrations == (
        dataclasses.replace(finished, target=None, uid=""),)


@pytest.mark.parametrize("text, kind", [("{", "unreadable"), ("[]", "other version"), ('{"version": 99}', "other version"),
                                        ('{"version": "2"}', "other version")])
def test_what_is_not_the_keepers_record_reads_as_empty_and_says_so(text, kind):
    state, loss = load(gzip.compress(text.encode()))
    assert load(text.encode())[1].kind == "unreadable"  # not gzipped
    assert state == KeeperState() and loss.kind == kind


def test_an_entry_of_a_wrong_type_is_dropped_alone():
    record = unpacked(dump(state_of(migrations=(ours("vm1-colocate-abcde", ago(hours=2)),)).refused(
        "default", "vm1", Action.MIGRATE, 403, REFUSED, NOW).refused("default", "vm2", Action.UNPAUSE, 409, "no", NOW)))
    record["vms"]["default"]["vm2"]["r"]["unpause"][0] = "2"
    state, loss = load(packed(record))
    assert loss == Loss(kind="malformed", why="an entry dropped (a refusal's count '2' is not a number)")
    assert [m.name for m in state.migrations] == ["vm1-colocate-abcde"]
    assert [(h.name, h.action) for h in refusals(state)] == [("vm1", Action.MIGRATE)]
    record["vms"]["other"] = "x"
    record["vms"]["default"]["vm1"]["r"]["reboot"] = [1, 0, 0, ""]
    assert load(packed(record))[1].why.startswith("3 entries dropped")


@pytest.mark.parametrize("version", [1, 2, 99], ids=["never-released-1", "never-released-2", "a-later-release"])
def test_a_record_of_another_version_is_rebuilt_and_said(version):
    """Versions 1 and 2 were never released; a later release's record (a rollback) reads as empty, said so."""
    state, loss = load(packed({"version": version, "vms": {"default": {"vm1": {"u": "uid-vm1"}}}}))
    assert state == KeeperState() and loss == Loss(kind="other version", why=f"version {version}, where this keeper reads 3")


def incident(recovered=1500, refused=200):
    """75,000 VMs, of which `recovered` were recovered in an incident (each with its uid, the keeper's resume and
    unpause, the pause it saw, the evidence in words and two migrations of ours) and `refused` are held by a
    refusal with a policy engine's words; the others keep nothing."""
    words = ("paused on an I/O error of disk rootdisk at 2026-11-20T11:31:15Z, after the keeper resumed it at "
             "2026-11-20T11:31:00Z, once share-manager share-manager-pvc-0b9c1d2e-aaaa-bbbb-cccc-1234567890ab served "
             "again on node-0042 at 2026-11-20T11:30:00Z: a resume did not bring it back")
    records = []
    for i in range(recovered):
        ns, vm = f"tenant-{i % 300:04d}", f"vm-{i:05d}-database-primary"
        records.append(VmRecord(
            namespace=ns, name=vm, uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, vm)), unpaused=(ago(minutes=31), ago(minutes=20)),
            said=(("NeedsRestart", ago(minutes=1)),) if i % 10 == 0 else (),
            seen=((f"pvc-{uuid.uuid5(uuid.NAMESPACE_URL, vm)}", Sighting(ago(minutes=32), ago(minutes=31))),),
            stale=Stale(requested=ago(minutes=40), words=words, last=ago(minutes=31)),
            migrations=tuple(ours(f"{vm}-colocate-{j}x7k2p", ago(minutes=30 - 5 * j), vmi=vm, namespace=ns)
                             for j in range(2))))
    state = KeeperState.of(records)
    for i in range(refused):
        state = state.refused(f"tenant-{i % 300:04d}", f"vm-{i + 2000:05d}-web", Action.MIGRATE, 403, REFUSED, NOW)
    return state


def test_the_record_at_75000_vms_after_an_incident_loses_no_bound():
    """1,500 VMs recovered and 200 refused: about 900 KiB of JSON, 90 KiB as kept."""
    state = incident()
    assert len(gzip.decompress(dump(state, budget=10 ** 9))) > 850_000
    record = dump(state)
    assert len(record) <= 128 * 1024 < BUDGET
    assert load(record) == (state, None)


def test_what_does_not_fit_is_said_when_read_the_newest_kept():
    """A record over its bound keeps what it keeps of each VMI first, then the newest migrations and refusals,
    and says how many entries it left out."""
    state = incident(recovered=300, refused=300)
    record = dump(state, budget=4 * 1024)
    assert len(record) <= 4 * 1024
    kept, loss = load(record)
    assert loss.kind == "left out" and loss.why.endswith(f"did not fit in {BUDGET // 1024} KiB")
    left = int(loss.why.split()[0])
    assert 0 < left and len(refusals(kept)) < 300
    newest = sorted(refusals(state), key=lambda h: h.retry)[-len(refusals(kept)):] if refusals(kept) else []
    assert {h.name for h in refusals(kept)} == {h.name for h in newest}


