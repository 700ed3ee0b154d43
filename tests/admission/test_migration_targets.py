"""`--migration-targets prefer`: the target pod of a migration that names no node (KubeVirt's
evacuations, the descheduler's, a plain `virtctl migrate`) gets a preference toward the node
serving its disks, never a requirement; every other target stays untouched, with the reason."""
import asyncio
import json
import logging
import time

import pytest
from tests.support.kube import (answer, annotations, apply_valid, decode_patch, load, metric_sample,
                  migration_target, nodes, preferred_terms, required_terms, review, rwx_disk)

from webhook import metrics
from webhook.admission.admit import admit
from webhook.admission.outcome import Rule
from webhook.admission.review import clip, parse_review
from webhook.admission.server import Admissions
from webhook.cluster.direct import ClusterStore
from webhook.cluster.events import decision_event
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.kinds import VMIM
from webhook.rules.shared.alone import Alone
from webhook.rules.placement.patch import as_created

PREFER = Settings(migration_targets="prefer")
NS = "default"
VM1_UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"


def evacuation(name="kubevirt-evacuation-8xq2m", uid="6b1f0d5e-2c3a-4e7b-9f10-3a4b5c6d7e8f", *, source="node-a",
               added=None, vmi="vm1"):
    """A migration as KubeVirt's evacuation controller creates it for a VMI on a drained node
    (pkg/virt-controller/watch/drain/evacuation/evacuation.go, GenerateNewMigration), as stored:
    no addedNodeSelector, unless `added` (then it is someone's targeted migration)."""
    obj = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "generateName": "kubevirt-evacuation-", "namespace": NS, "uid": uid,
                     "creationTimestamp": "2026-11-23T00:50:02Z", "generation": 1, "resourceVersion": "701",
                     "labels": {"kubevirt.io/vmi-name": vmi},
                     "annotations": {"kubevirt.io/evacuationMigration": source,
                                     "kubevirt.io/latest-observed-api-version": "v1",
                                     "kubevirt.io/storage-observed-api-version": "v1"}},
        "spec": {"vmiName": vmi, "priority": "system-critical"},
        "status": {"phase": "Scheduling", "migrationState": {"sourcePod": "virt-launcher-vm1-x7k2p"}},
    }
    if added:
        obj["spec"]["addedNodeSelector"] = added
    return obj


def target_of(migration, *claims, source="node-a"):
    """vm1's migration target pod for `migration` as virt-controller creates it (no name, no
    node): labelled with the migration's uid, annotated with its name, on its way from `source`."""
    pod = migration_target()
    meta = pod["metadata"]
    meta["labels"].update({"kubevirt.io/migrationJobUID": migration["metadata"]["uid"], "kubevirt.io/nodeName": source})
    meta["annotations"]["kubevirt.io/migrationJobName"] = migration["metadata"]["name"]
    if claims:
        pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v] + [
            {"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return pod


# vm1 runs on the drained node-a; its share-manager has been re-created on node-b.
def drained_cluster():
    return rwx_disk("vm1-rootdisk", "node-b", volume="pvc-7c1d2e3f-0a4b-4c5d-8e6f-9a0b1c2d3e4f") + \
        nodes("node-a", "node-b", "node-c")


@pytest.fixture
async def cluster(make_store, emulator):
    """A factory: cluster objects and migrations → a store holding them (the migrations where
    the API serves them: custom objects, read from the API by every store but the snapshot)."""
    async def factory(objects, migrations=(), settings=PREFER):
        if emulator is None:
            return await make_store(list(objects) + list(migrations), settings)
        store = await make_store(objects, settings)
        emulator.resources[VMIM] = {}
        for migration in migrations:
            emulator.objects[VMIM, migration["metadata"]["namespace"], migration["metadata"]["name"]] = migration
        return store

    return factory


async def admitted(store, pod, settings=PREFER, deadline=None, namespace=NS):
    return await admit(parse_review(review(pod, namespace)), store, settings, deadline or Deadline.after(10, 1))


def untouched(outcome):
    envelope = answer(outcome)
    assert envelope["response"]["allowed"] is True
    assert "patch" not in envelope["response"] and "auditAnnotations" not in envelope["response"]
    return envelope["response"].get("warnings", [])


async def test_an_evacuation_target_is_preferred_toward_its_storage_node_and_nothing_more(cluster):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration])
    pod = target_of(migration)
    outcome = await admitted(store, pod)
    assert outcome.rule is Rule.MIGRATION_TARGET
    envelope = answer(outcome)
    result = apply_valid(pod, decode_patch(envelope))  # applies, and validates against 1.30 and the newest schema
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}}]
    assert required_terms(result) == required_terms(pod)  # KubeVirt's own term, no requirement of ours
    # The target keeps everything KubeVirt gave it: its anti-affinity to the VM's node, its selectors.
    assert result["spec"]["affinity"]["podAntiAffinity"] == pod["spec"]["affinity"]["podAntiAffinity"]
    assert {k: v for k, v in result["spec"].items() if k != "affinity"} == \
        {k: v for k, v in pod["spec"].items() if k != "affinity"}
    said = annotations(result)
    assert (said["kubevirt-scheduler/decision"], said["kubevirt-scheduler/node"]) == ("preferred", "node-b")
    assert said["kubevirt-scheduler/reason"] == (
        "preferred node-b for the target of migration kubevirt-evacuation-8xq2m (evacuating node-a), "
        "where the share-manager of vm1-rootdisk runs")
    assert envelope["response"]["auditAnnotations"]["decision"] == "preferred"
    assert "warnings" not in envelope["response"]
    # KubeVirt >= 1.8 may review the pod again: nothing more is added.
    assert decode_patch(answer(await admitted(store, result))) == []
    # After the migration this pod is the VM's: `explain` judges it as created, without our term.
    assert as_created(result, PREFER)["spec"] == pod["spec"]


async def test_a_target_whose_disks_are_on_several_nodes_gets_the_weighted_preferences(cluster):
    migration = evacuation()
    objects = rwx_disk("d1", "node-b") + rwx_disk("d2", "node-c") + rwx_disk("d3", "node-c") + nodes("node-a", "node-b",
                                                                                                         "node-c")
    store = await cluster(objects, [migration])
    pod = target_of(migration, "d1", "d2", "d3")
    result = apply_valid(pod, decode_patch(answer(await admitted(store, pod))))
    got = {t["preference"]["matchFields"][0]["values"][0]: t["weight"] for t in preferred_terms(result)}
    assert got == {"node-c": 67, "node-b": 33}
    assert required_terms(result) == required_terms(pod)
    assert annotations(result)["kubevirt-scheduler/reason"] == (
        "preferred node-c (2), node-b (1) for the target of migration kubevirt-evacuation-8xq2m (evacuating node-a): "
        "disks on different nodes")


async def test_a_plain_untargeted_migration_is_steered_too(cluster):
    """`virtctl migrate vm1` (no --addedNodeSelector), or the workload updater's: no evacuation annotation."""
    migration = evacuation("kubevirt-migrate-vm-x7k2p", "0d9c2b7e-1111-4a2b-9c3d-44e5f6a7b8c9")
    del migration["metadata"]["annotations"]["kubevirt.io/evacuationMigration"]
    migration["spec"].pop("priority")
    migration["spec"]["addedNodeSelector"] = {}  # empty: names no node
    store = await cluster(drained_cluster(), [migration])
    pod = target_of(migration)
    result = apply_valid(pod, decode_patch(answer(await admitted(store, pod))))
    assert annotations(result)["kubevirt-scheduler/reason"].startswith(
        "preferred node-b for the target of migration kubevirt-migrate-vm-x7k2p, where")


async def test_the_target_of_a_migration_that_names_its_node_is_untouched(cluster):
    """KubeVirt 1.8's own objects: a migration to kv-old (addedNodeSelector) and its target pod."""
    migration, pod = load("kubevirt-1.8/vmim.yaml"), load("kubevirt-1.8/migration-target-pod-host-model.yaml")
    pod["metadata"].pop("name")
    pod.pop("status")
    store = await cluster(rwx_disk("disk-e", "kv-a", namespace="vms") + nodes("kv-a", "kv-old"), [migration])
    outcome = await admitted(store, pod, namespace="vms")
    assert (outcome.rule, outcome.skipped) == (Rule.MIGRATION_TARGET, Alone.MIGRATION_NAMES_NODE)
    assert outcome.detail == "migration hetero-colocate-mk2gj names its node (addedNodeSelector kubernetes.io/hostname=kv-old)"
    assert untouched(outcome) == []  # the keeper's own migrations are targeted: no warning for them


async def test_by_default_migration_targets_are_untouched(cluster):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration], Settings())
    outcome = await admitted(store, target_of(migration), Settings())
    assert (outcome.rule, outcome.skipped) == (Rule.VM, Alone.MIGRATION_TARGET)
    assert untouched(outcome) == []


async def test_a_target_of_a_vm_that_is_not_opted_in_is_untouched(cluster):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration])
    pod = target_of(migration)
    del pod["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    outcome = await admitted(store, pod)
    assert (outcome.rule, outcome.skipped) == (Rule.VM, Alone.NOT_OPTED_IN)
    assert untouched(outcome) == []


async def test_a_target_whose_disks_have_no_node_is_untouched_and_says_why(cluster):
    migration = evacuation()
    objects = rwx_disk("vm1-rootdisk", None, state="stopped", owner="node-b") + nodes("node-a", "node-b")
    store = await cluster(objects, [migration])
    outcome = await admitted(store, target_of(migration))
    assert (outcome.rule, outcome.skipped) == (Rule.MIGRATION_TARGET, Alone.NO_STORAGE_NODE)
    assert outcome.detail == "share-manager of pvc-vm1-rootdisk is stopped"
    assert untouched(outcome) == ["target untouched: share-manager of pvc-vm1-rootdisk is stopped"]


UNKNOWN = [
    ("not-found", lambda m: [], "migration kubevirt-evacuation-8xq2m not found"),
    ("another-of-the-same-name", lambda m: [dict(m, metadata=dict(m["metadata"], uid="0000-recreated"))],
     "migration kubevirt-evacuation-8xq2m is another one than the pod's (uid 0000-recreated, not "
     "6b1f0d5e-2c3a-4e7b-9f10-3a4b5c6d7e8f)"),
]


@pytest.mark.parametrize("name, migrations, why", UNKNOWN, ids=[u[0] for u in UNKNOWN])
async def test_a_target_whose_migration_is_not_there_is_untouched_and_says_why(cluster, name, migrations, why):
    migration = evacuation()
    store = await cluster(drained_cluster(), migrations(migration))
    outcome = await admitted(store, target_of(migration))
    assert (outcome.rule, outcome.skipped, outcome.detail) == (Rule.MIGRATION_TARGET, Alone.MIGRATION_UNKNOWN, why)
    assert untouched(outcome) == [clip(f"target untouched: {why}")]


async def test_a_target_that_names_no_migration_is_untouched(cluster):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration])
    pod = target_of(migration)
    del pod["metadata"]["annotations"]["kubevirt.io/migrationJobName"]
    outcome = await admitted(store, pod)
    assert (outcome.skipped, outcome.detail) == (
        Alone.MIGRATION_UNKNOWN, "the pod names no migration (annotation kubevirt.io/migrationJobName)")
    assert untouched(outcome)


@pytest.mark.parametrize("store_kind", ["cluster", "watched"])
async def test_a_target_whose_migration_cannot_be_read_is_untouched_and_says_why(cluster, kmock, store_kind):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration])
    kmock["get", kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << 500
    outcome = await admitted(store, target_of(migration))
    why = (f"migration {migration['metadata']['name']} unknown: API answered 500 for "
           f"/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations/{migration['metadata']['name']}")
    assert (outcome.rule, outcome.skipped, outcome.detail) == (Rule.MIGRATION_TARGET, Alone.MIGRATION_UNKNOWN, why)
    assert untouched(outcome) == [clip(f"target untouched: {why}")]


async def test_a_migration_that_does_not_answer_in_time_leaves_the_target_untouched(kmock):
    from tests.support.stores import api_host, seed

    seed(kmock, drained_cluster())
    kmock["get", kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")] << (
        lambda: asyncio.sleep(30))
    store = ClusterStore.for_host(api_host(kmock))
    try:
        started = time.monotonic()
        outcome = await admitted(store, target_of(evacuation()), deadline=Deadline.after(0.5, 0.1))
    finally:
        await store.close()
    assert time.monotonic() - started < 1.5
    assert (outcome.skipped, outcome.rule) == (Alone.MIGRATION_UNKNOWN, Rule.MIGRATION_TARGET)
    assert outcome.detail.startswith("migration kubevirt-evacuation-8xq2m unknown: ")
    assert untouched(outcome)


async def test_a_target_already_bound_to_a_node_is_untouched(cluster):
    migration = evacuation()
    store = await cluster(drained_cluster(), [migration])
    pod = target_of(migration)
    pod["spec"]["nodeName"] = "node-c"
    outcome = await admitted(store, pod)
    assert (outcome.rule, outcome.skipped) == (Rule.MIGRATION_TARGET, Alone.ALREADY_BOUND)
    assert untouched(outcome) == []


async def test_a_steered_target_is_counted_logged_and_told_on_the_vmi_as_a_normal_event(caplog):
    """Through the endpoint itself (what the HTTPS handler calls): the metric, the log line, the Event."""
    from webhook.cluster.snapshot import SnapshotStore

    migration = evacuation()
    sent = []

    class Events:
        def emit(self, pod, namespace, decision, *, migration_target=False):
            sent.append(decision_event({"kind": "VirtualMachineInstance", "name": "vm1", "namespace": namespace},
                                       decision, "test", migration_target=migration_target))

    endpoint = Admissions(SnapshotStore(drained_cluster() + [migration]), PREFER, Events())
    labels = {"rule": "migration-target", "outcome": "preferred", "reason": ""}
    before = metric_sample(metrics.render().decode(), "colocate_admissions_total", 0, **labels)
    with caplog.at_level(logging.INFO, logger="webhook.server"):
        raw = await endpoint.answer(json.dumps(review(target_of(migration))).encode(), endpoint.deadline(10),
                                    time.monotonic())
    assert decode_patch(json.loads(raw))
    assert metric_sample(metrics.render().decode(), "colocate_admissions_total", 0, **labels) == before + 1
    line = next(r.fields for r in caplog.records if r.getMessage() == "admission")
    assert (line["rule"], line["decision"], line["nodes"], line["vm"]) == ("migration-target", "preferred", ["node-b"],
                                                                           "vm1")
    assert line["disks"] == {"vm1-rootdisk": "node-b"}
    [event] = sent
    assert (event["reason"], event["type"]) == ("MigrationTargetPreferred", "Normal")
    assert event["message"].startswith("preferred node-b for the target of migration kubevirt-evacuation-8xq2m")

