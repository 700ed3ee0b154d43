"""Objects and moments for the tests of the keeper's pure rules (tests/rules/keeping/test_running.py,
test_apart.py, test_migrations.py, test_keep.py): a VMI after a migration, our migration of it,
the facts of its disks, at a fixed now."""
import copy
from datetime import UTC, datetime, timedelta

from tests.support.kube import load, set_or_remove

from webhook.keeper.kubevirt_api import KubeVirtWatch
from webhook.cluster.reflector import Event, EventType
from webhook.config import Settings
from webhook.rules.shared.facts import Fact
from webhook.rules.keeping.migrations import Migration
from webhook.rules.keeping.running import read_vmi
from webhook.rules.shared.times import parse_time

SETTINGS = Settings()
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"


def at(text):
    return parse_time(text)


def ago(**span):
    return NOW - timedelta(**span)


def stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def vmi_obj(**status):
    obj = copy.deepcopy(load("vmi-migrated.yaml"))
    set_or_remove(obj["status"], status)
    return obj


def fact(claim, node_name):
    return Fact(claim, node_name, f"share-manager of {claim} runs on {node_name}" if node_name
                else f"share-manager of {claim} is stopped")


def vmim(phase="Running", *, ours=True, created=None, name="vm1-colocate-abcde", vmi="vm1", transitions=(), end=None):
    obj = copy.deepcopy(load("vmim-to-storage.yaml"))
    obj["metadata"].pop("generateName")
    obj["metadata"].update(name=name, creationTimestamp=stamp(created or ago(minutes=5)))
    if not ours:
        obj["metadata"]["labels"] = {}
        obj["spec"].pop("addedNodeSelector")
    else:
        obj["metadata"]["annotations"] = {"kubevirt-scheduler/node": "node-b"}
    obj["spec"]["vmiName"] = vmi
    if phase is not None:
        obj["status"] = {"phase": phase}
        if transitions:
            obj["status"]["phaseTransitionTimestamps"] = [
                {"phase": p, "phaseTransitionTimestamp": stamp(t)} for p, t in transitions]
        if end:
            obj["status"]["migrationState"] = {"endTimestamp": stamp(end), "completed": phase == "Succeeded"}
    return obj


def evacuation(priority="system-maintenance", **changes):
    """KubeVirt's evacuation that brought vm1 from node-b to node-a (vmim-evacuation.yaml), which
    the VMI names; by default made for the descheduler's eviction (system-maintenance), with
    `priority="system-critical"` a drain's. `changes` replace metadata fields."""
    obj = copy.deepcopy(load("vmim-evacuation.yaml"))
    obj["spec"]["priority"] = priority
    obj["metadata"].update(changes)
    return obj


def cached(obj, settings=SETTINGS):
    """`obj` as production keeps it: listed into the keeper's VMI cache (the shape and encoding every
    cache of VMIs uses) and read back; a rule reading what no declaration keeps sees it gone."""
    watch = KubeVirtWatch(None, settings)
    for event in (Event(EventType.LISTED, copy.deepcopy(obj)), Event(EventType.SYNCED, seconds=0.01)):
        watch.vmis.apply(event)
    [kept] = [watch.vmis.table.get(key) for key in watch.vmis.table.objects]
    return kept


def view(obj=None, settings=SETTINGS):
    """The keeper's view of the VMI as the production cache keeps it."""
    return read_vmi(cached(obj or vmi_obj(), settings), settings)


def attempt(created, ended=None, phase="Running", recovers=False):
    """A migration of ours of vm1."""
    return Migration(namespace="default", name=f"vm1-colocate-{created.timestamp():.0f}", vmi="vm1", phase=phase,
                     ours=True, created=created, ended=ended, recovers="stale-mount" if recovers else "")


def refusals(state):
    """Every refusal the keeper's state holds."""
    return tuple(h for r in state.vms.values() for h in r.refusals)


def failed(end, recovers=False):
    return attempt(end - timedelta(minutes=1), end, "Failed", recovers)


def succeeded(end, recovers=False):
    return attempt(end - timedelta(minutes=1), end, "Succeeded", recovers)


def in_flight_state(**changes):
    state = {"migrationUid": "u2", "sourceNode": "node-a", "targetNode": "node-c",
             "targetPod": "virt-launcher-vm1-zzzzz", "startTimestamp": "2026-11-20T11:59:00Z", "completed": False}
    state.update(changes)
    return {k: v for k, v in state.items() if v is not None}


def apart_vmi():
    """vm1 on node-a, migrated there from node-b (where its disk is served)."""
    return view()
