"""A live migration's end as virt-handler and virt-controller write it, played on kubefake's
apiserver: `complete_migration`, `fail_migration`, and the garbage collection of finished
migrations that follows either (`collect_finished_migrations`). The same for any
VirtualMachineInstanceMigration: one a test's client created, or a drain's evacuation.

KubeVirt v1.9.0:
- on success virt-handler hands the VMI to the target node (`pkg/virt-handler/migration-source.go`,
  `updateStatus`): status.nodeName and the kubevirt.io/nodeName label become the target's, and
  status.migrationState (migrationUid, source and target node and pod, start and end timestamps,
  completed) says so; the source pod's virt-launcher exits (the pod Succeeded), the VM runs in the
  target pod. The VMI's conditions stay as they were: the target keeps a VM that came paused
  paused (`pkg/virt-launcher/virtwrap/live-migration-target.go`, `prepareMigrationTarget`: any
  Paused condition puts it in the launcher's paused set, which `SyncVMI` never resumes), and
  virt-handler adds a Paused condition only when there is none (`updatePausedConditions`), so the
  VMI keeps the one it had, its reason and lastTransitionTime too;
- on failure (`setMigrationProgressStatus`) migrationState says completed and failed, with the
  failureReason (libvirt's error, `live-migration-source.go`, `setMigrationResult`); the VMI stays;
- virt-controller (`pkg/virt-controller/watch/migration/migration.go`) sets the migration's phase
  (Succeeded or Failed) with a phaseTransitionTimestamp, copies the VMI's migrationState into the
  migration's status, and once a migration is final runs `garbageCollectFinalizedMigrations`: of
  the VMI's migrations (by spec.vmiName) that are final and not being deleted, oldest creation
  first, all but the newest `defaultFinalizedMigrationGarbageCollectionBuffer` (5) are deleted,
  each with its defunct pod (a failed one's target pod, a completed one's source pod). Ties in
  creationTimestamp (seconds) fall in store order here; Go's `sort.Sort` keeps no order for them.
"""
from __future__ import annotations

import datetime
import json
import secrets
import uuid
from typing import Any

import kmock

from .objects import stamp
from .virt_handler import VMIS, launcher_pods, stored_vmi

VMIMS = kmock.resource("kubevirt.io", "v1", "virtualmachineinstancemigrations")
FINISHED = ("Succeeded", "Failed")
GARBAGE_COLLECTION_BUFFER = 5  # defaultFinalizedMigrationGarbageCollectionBuffer
PHASES = ("Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
FAILURE = "virError(Code=9, Domain=10, Message='operation failed: migration out job: unexpectedly failed')"


def _version(apiserver: Any) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(next(apiserver.versions))}}


def replaced(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch's value that replaces the map `old` with `new` (a key `new` lacks set null)."""
    return {**{key: None for key in old or {}}, **new}


def stored_migration(apiserver: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = apiserver.stored((VMIMS, namespace, name))
    if obj is None:
        raise LookupError(f"no VirtualMachineInstanceMigration {namespace}/{name}")
    migration = obj.raw
    if (migration.get("status") or {}).get("phase") in FINISHED:
        raise ValueError(f"migration {namespace}/{name} has finished already")
    return migration


def transitions(migration: dict[str, Any], phase: str, at: datetime.datetime) -> list[dict[str, Any]]:
    """The migration's phaseTransitionTimestamps with the phases it went through before `phase`
    (those it has not recorded: at `at`) and `phase` at `at`."""
    kept = list((migration.get("status") or {}).get("phaseTransitionTimestamps") or [])
    seen = {t.get("phase") for t in kept}
    when = stamp(at)
    return kept + [{"phase": p, "phaseTransitionTimestamp": when} for p in PHASES if p not in seen] + [
        {"phase": phase, "phaseTransitionTimestamp": when}]


def target_pod_of(source: dict[str, Any], vmi_name: str, node: str, migration: dict[str, Any],
                  at: datetime.datetime, name: str | None) -> dict[str, Any]:
    """The migration's target pod: the source pod's spec on `node`, labelled for the migration,
    started at `at`, under a new name (or `name`)."""
    pod = json.loads(json.dumps(source))
    meta = pod["metadata"]
    keep = ("namespace", "labels", "annotations", "ownerReferences", "generateName")
    pod["metadata"] = {k: v for k, v in meta.items() if k in keep}
    pod["metadata"]["name"] = name or f"virt-launcher-{vmi_name}-{secrets.token_hex(3)[:5]}"
    pod["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=stamp(at))
    labels = pod["metadata"].setdefault("labels", {})
    labels["kubevirt.io/nodeName"] = node
    labels["kubevirt.io/migrationJobUID"] = (migration.get("metadata") or {}).get("uid", "")
    pod["metadata"].setdefault("annotations", {})["kubevirt.io/migrationJobName"] = migration["metadata"]["name"]
    pod["spec"]["nodeName"] = node
    pod["status"] = {**(pod.get("status") or {}), "phase": "Running", "startTime": stamp(at)}
    return pod


async def complete_migration(apiserver: Any, namespace: str, migration_name: str, node: str,
                             at: datetime.datetime | None = None, *, target_pod: str | None = None) -> dict[str, Any]:
    """The migration succeeded at `at` (now): the VMI on `node` in a new launcher pod started then
    (named `target_pod` if given; a name the source pod holds replaces it), the source pod ended,
    the VMI's conditions as they were; the migration Succeeded; then the garbage collection. The
    migration as stored. LookupError without the migration, its VMI or its launcher pod; ValueError
    for a migration finished already."""
    at = at or datetime.datetime.now(datetime.UTC)
    async with apiserver.lock:
        migration = stored_migration(apiserver, namespace, migration_name)
        vmi_name = migration["spec"]["vmiName"]
        vmi = stored_vmi(apiserver, namespace, vmi_name)
        status = vmi.get("status") or {}
        sources = launcher_pods(apiserver, vmi)
        if not sources:
            raise LookupError(f"no running launcher pod of {namespace}/{vmi_name}")
        source_key, source = next(((k, p) for k, p in sources
                                   if (p.get("spec") or {}).get("nodeName") == status.get("nodeName")), sources[0])
        pod = target_pod_of(source, vmi_name, node, migration, at, target_pod)
        if pod["metadata"]["name"] == source_key[2]:
            await apiserver.drop(source_key)
        else:
            await apiserver.merge(source_key, {"status": {"phase": "Succeeded"}, **_version(apiserver)})
        pod["metadata"]["resourceVersion"] = str(next(apiserver.versions))
        added = await apiserver.insert((source_key[0], namespace, pod["metadata"]["name"]), pod)
        state = {"migrationUid": migration["metadata"].get("uid"), "sourceNode": status.get("nodeName"),
                 "targetNode": node, "sourcePod": source_key[2], "targetPod": pod["metadata"]["name"],
                 "startTimestamp": stamp(at), "endTimestamp": stamp(at), "completed": True, "mode": "PreCopy"}
        await apiserver.merge((VMIS, namespace, vmi_name), {
            "metadata": {"labels": {"kubevirt.io/nodeName": node}, **_version(apiserver)["metadata"]},
            "status": {"nodeName": node, "migrationState": replaced(status.get("migrationState"), state),
                       "activePods": replaced(status.get("activePods"), {added["metadata"]["uid"]: node})}})
        return await finish(apiserver, migration, "Succeeded", state, at)


async def fail_migration(apiserver: Any, namespace: str, migration_name: str, at: datetime.datetime | None = None, *,
                         node: str | None = None, reason: str = FAILURE) -> dict[str, Any]:
    """The migration failed at `at` (now) for `reason` (libvirt's words): the VMI stays where it
    runs, its migrationState completed and failed; the migration Failed; then the garbage
    collection. `node`, the target it was headed to, if any. The migration as stored."""
    at = at or datetime.datetime.now(datetime.UTC)
    async with apiserver.lock:
        migration = stored_migration(apiserver, namespace, migration_name)
        vmi_name = migration["spec"]["vmiName"]
        vmi = stored_vmi(apiserver, namespace, vmi_name)
        state = {"migrationUid": migration["metadata"].get("uid"), "sourceNode": (vmi.get("status") or {}).get("nodeName"),
                 **({"targetNode": node} if node else {}), "startTimestamp": stamp(at), "endTimestamp": stamp(at),
                 "completed": True, "failed": True, "failureReason": reason, "mode": "PreCopy"}
        await apiserver.merge((VMIS, namespace, vmi_name), {
            "status": {"migrationState": replaced((vmi.get("status") or {}).get("migrationState"), state)},
            **_version(apiserver)})
        return await finish(apiserver, migration, "Failed", state, at)


async def finish(apiserver: Any, migration: dict[str, Any], phase: str, state: dict[str, Any],
                 at: datetime.datetime) -> dict[str, Any]:
    """virt-controller's part (under the lock): the migration's phase and migrationState, then the
    garbage collection of the VMI's finished migrations."""
    meta = migration["metadata"]
    key = (VMIMS, meta["namespace"], meta["name"])
    await apiserver.merge(key, {"status": {"phase": phase, "phaseTransitionTimestamps": transitions(migration, phase, at),
                                           "migrationState": replaced((migration.get("status") or {}).get("migrationState"), state)},
                                **_version(apiserver)})
    finished = apiserver.stored(key).raw
    await collect(apiserver, meta["namespace"], migration["spec"]["vmiName"])
    return finished


async def collect_finished_migrations(apiserver: Any, namespace: str, vmi: str) -> list[str]:
    """virt-controller's `garbageCollectFinalizedMigrations` for the VMI named `vmi`: the names of
    the migrations deleted."""
    async with apiserver.lock:
        return await collect(apiserver, namespace, vmi)


async def collect(apiserver: Any, namespace: str, vmi: str) -> list[str]:
    """`collect_finished_migrations`, under the lock."""
    finished = [(key, obj.raw) for key, obj in list(apiserver.objects.items())
                if getattr(key[0], "plural", None) == VMIMS.plural and getattr(key[0], "group", None) == VMIMS.group
                and key[1] == namespace and not obj.deleted and (obj.raw.get("spec") or {}).get("vmiName") == vmi
                and (obj.raw.get("status") or {}).get("phase") in FINISHED
                and not (obj.raw.get("metadata") or {}).get("deletionTimestamp")]
    finished.sort(key=lambda found: str((found[1].get("metadata") or {}).get("creationTimestamp") or ""))
    deleted = []
    for key, migration in finished[:max(0, len(finished) - GARBAGE_COLLECTION_BUFFER)]:
        state = (migration.get("status") or {}).get("migrationState") or {}
        defunct = state.get("targetPod") if state.get("failed") else state.get("sourcePod") if state.get("completed") else None
        for pod_key, pod in list(apiserver.objects.items()):
            if defunct and getattr(pod_key[0], "plural", None) == "pods" and getattr(pod_key[0], "group", None) == "" \
                    and pod_key[1:] == (namespace, defunct) and not pod.deleted:
                await apiserver.drop(pod_key)
        await apiserver.drop(key)
        deleted.append(key[2])
    return deleted
