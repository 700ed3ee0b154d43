"""Migration target pods under `--migration-targets prefer`: which migration a target pod names,
whether its migration leaves the node to kube-scheduler (steered) or names it (untouched), and the
preference it gets from the disks' facts, over KubeVirt's own objects."""
import copy

import pytest
from tests.support.kube import load, migration_target, rwx_disk

from webhook.config import Settings
from webhook.kinds import Resource
from webhook.rules.shared.alone import Alone
from webhook.rules.placement.decide import PREFERRED
from webhook.rules.shared.facts import disk_fact
from webhook.rules.placement.steer import describe, migration_of, prefer, why_not_steered

NAME, UID = "kubevirt-evacuation-x7k2p", "0d9c2b7e-1111-4a2b-9c3d-44e5f6a7b8c9"  # vmim-evacuation.yaml


def evacuation(**spec):
    """KubeVirt's evacuation of vm1 off node-b (no addedNodeSelector), with `spec` fields set."""
    migration = copy.deepcopy(load("vmim-evacuation.yaml"))
    migration["spec"].update(spec)
    return migration


def target(name=NAME, uid=UID):
    """vm1's migration target pod as virt-controller creates it for migration `name` (uid `uid`)."""
    pod = migration_target()
    for part, key, value in (("annotations", "kubevirt.io/migrationJobName", name),
                             ("labels", "kubevirt.io/migrationJobUID", uid)):
        if value is None:
            del pod["metadata"][part][key]
        else:
            pod["metadata"][part][key] = value
    return pod


@pytest.mark.parametrize("pod, named", [
    (target(), (NAME, UID)),
    (migration_target(), ("kubevirt-migrate-vm-x7k2p", UID)),
    (target(name=None), "the pod names no migration (annotation kubevirt.io/migrationJobName)"),
    (target(name="Not_A_Name"), "the pod names no migration (annotation kubevirt.io/migrationJobName)"),
    (target(uid=None), "the pod names no migration uid (label kubevirt.io/migrationJobUID)"),
    (target(uid=""), "the pod names no migration uid (label kubevirt.io/migrationJobUID)"),
], ids=["evacuation", "virtctl-migrate", "no-name", "invalid-name", "no-uid", "empty-uid"])
def test_migration_of(pod, named):
    assert migration_of(pod) == named


@pytest.mark.parametrize("migration, why", [
    (evacuation(), None),
    (evacuation(addedNodeSelector={}), None),  # empty: names no node
    (None, (Alone.MIGRATION_UNKNOWN, f"migration {NAME} not found")),
    (dict(evacuation(), metadata=dict(evacuation()["metadata"], uid="another-uid")),
     (Alone.MIGRATION_UNKNOWN, f"migration {NAME} is another one than the pod's (uid another-uid, not {UID})")),
    (evacuation(addedNodeSelector={"kubernetes.io/hostname": "node-b"}),
     (Alone.MIGRATION_NAMES_NODE, f"migration {NAME} names its node (addedNodeSelector kubernetes.io/hostname=node-b)")),
], ids=["evacuation", "empty-selector", "not-found", "recreated-under-the-same-name", "names-its-node"])
def test_why_not_steered(migration, why):
    assert why_not_steered(migration, NAME, UID) == why


def test_the_keepers_own_migration_names_its_node():
    """The keeper's migrations are targeted (vmim-to-storage.yaml): their targets are never steered."""
    ours = load("vmim-to-storage.yaml")
    ours["metadata"] |= {"name": "colocate-vm1-abcde", "uid": UID}
    skip, detail = why_not_steered(ours, "colocate-vm1-abcde", UID)
    assert skip is Alone.MIGRATION_NAMES_NODE and "kubernetes.io/hostname=node-b" in detail


@pytest.mark.parametrize("migration, words", [
    (evacuation(), f"migration {NAME} (evacuating node-b)"),
    (load("vmim-to-storage.yaml"), f"migration {NAME}"),
    (None, f"migration {NAME}"),
], ids=["evacuation", "not-an-evacuation", "unknown"])
def test_describe(migration, words):
    assert describe(migration, NAME) == words


def facts(objects, *claims):
    """The facts of vm1's disks as the rules find them in `objects` (PVC → PV → share-manager)."""
    def peek(resource: Resource, namespace, name):
        for obj in objects:
            meta = obj["metadata"]
            if obj["kind"] == resource.kind and meta["name"] == name and meta.get("namespace") == namespace:
                return True, obj
        return True, None
    return [disk_fact(Settings(), "default", claim, peek) for claim in claims]


EVACUATING = f"migration {NAME} (evacuating node-b)"


@pytest.mark.parametrize("objects, claims, preferences, reason, warnings", [
    (rwx_disk("d1", "node-a"), ["d1"], (("node-a", 100),),
     f"preferred node-a for the target of {EVACUATING}, where the share-manager of d1 runs", ()),
    (rwx_disk("d1", "node-a") + rwx_disk("d2", "node-a"), ["d1", "d2"], (("node-a", 100),),
     f"preferred node-a for the target of {EVACUATING}, where the share-manager of d1, d2 runs", ()),
    (rwx_disk("d1", "node-a") + rwx_disk("d2", "node-c") + rwx_disk("d3", "node-c"), ["d1", "d2", "d3"],
     (("node-c", 67), ("node-a", 33)),
     f"preferred node-c (2), node-a (1) for the target of {EVACUATING}: disks on different nodes", ()),
    (rwx_disk("d1", "node-a") + rwx_disk("d2", None, state="stopped"), ["d1", "d2"], (("node-a", 100),),
     f"preferred node-a for the target of {EVACUATING}, where the share-manager of d1 runs",
     ("ignored: share-manager of pvc-d2 is stopped",)),
], ids=["one-disk", "two-disks-one-node", "weighted", "one-disk-without-node"])
def test_a_steered_target_is_preferred_toward_its_disks_never_required(objects, claims, preferences, reason, warnings):
    decision = prefer(facts(objects, *claims), EVACUATING)
    assert decision.outcome == PREFERRED and decision.required == ()
    assert (decision.preferences, decision.reason, decision.warnings) == (preferences, reason, warnings)


def test_a_target_whose_disks_have_no_node_gets_no_preference_and_says_why():
    assert prefer(facts(rwx_disk("d1", None, state="stopped"), "d1", "d9"), EVACUATING) == \
        "share-manager of pvc-d1 is stopped; PVC default/d9 not found"
