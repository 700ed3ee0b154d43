"""kubefake playing KubeVirt v1.9.0 over HTTP: virt-handler's I/O error retry, a live migration's
end and virt-controller's garbage collection of finished migrations, virt-api's pause and unpause
refusals and virt-api out of reach. Each test names the KubeVirt source it holds the emulator to."""
from __future__ import annotations

import datetime
from typing import Any

import pytest
from tests.support.kube import launcher_pod_of, load, migration, nodes, vmi
from tests.support.kubevirt_api import Cluster, KubeVirtApi

from kubefake.io_error_retry import IoErrorRetry
from kubefake.kubevirt import VMS, unavailable
from kubefake.migration import collect_finished_migrations, complete_migration, fail_migration
from kubefake.virt_handler import UNPAUSED, io_error_pause, io_retry_resume, play_io_errors

T0 = datetime.datetime(2026, 11, 20, 12, 0, tzinfo=datetime.UTC)
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
VMIMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"
PODS = "/api/v1/namespaces/default/pods"
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances"


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    return {**kmock_options, "cls": KubeVirtApi}


@pytest.fixture
def cluster(kmock: Any) -> Cluster:
    """vm1 and vm2 running on node-a, each in its launcher pod."""
    cluster = Cluster(kmock)
    vms = [vmi(name, "node-a", f"{name}-disk") for name in ("vm1", "vm2")]
    cluster.seed(nodes("node-a", "node-b", "node-c") + vms + [launcher_pod_of(v) for v in vms])
    return cluster


async def get(cluster: Cluster, path: str) -> tuple[int, dict[str, Any]]:
    async with cluster.api() as session:
        async with session.get(path, raise_for_status=False) as response:
            return response.status, await response.json()


async def put(cluster: Cluster, path: str) -> tuple[int, Any]:
    async with cluster.api() as session:
        async with session.put(path, json={}, raise_for_status=False) as response:
            return response.status, await response.json(content_type=None) if await response.read() else None


def paused_condition(vmi_obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in vmi_obj["status"].get("conditions") or [] if c["type"] == "Paused"), None)


async def pods_of(cluster: Cluster, vm: str) -> dict[str, dict[str, Any]]:
    _, listed = await get(cluster, f"{PODS}?labelSelector=kubevirt.io/vm={vm}")
    return {p["metadata"]["name"]: p for p in listed["items"]}


# --------------------------------------------------------------------------- the I/O error retry

def test_the_retry_resumes_at_once_then_after_10_s_doubling_to_3_min_while_each_resume_fails_within_30_s():
    """`pkg/virt-handler/retry_manager.go`, `ShouldDelay`, with vm.go's `NewFailRetryManager("io-error-retry",
    10*time.Second, 3*time.Minute, 30*time.Second)`: a first failure is not delayed; a failure within 30 s of
    the last run waits for `nextRun`; the wait doubles to the 3 min cap; a later failure starts afresh."""
    retry = IoErrorRetry()
    fast = retry.fast_failing(T0, 9)
    assert [(p - T0).seconds for p, _ in fast] == [0, 0, 10, 30, 70, 150, 310, 490, 670]
    assert [(r - T0).seconds for _, r in fast] == [0, 10, 30, 70, 150, 310, 490, 670, 850]
    # Paused again 5 s after a resume: that resume failed, the next is due 10 s after it; 29 s: failed too,
    # but due already, so at once; 31 s: a new failure, at once.
    assert retry.resumes([T0, at(5)]) == [T0, at(10)]
    assert retry.resumes([T0, at(29)]) == [T0, at(29)]
    assert retry.resumes([T0, at(31)]) == [T0, at(31)]
    # The backoff starts again at 10 s after a pause more than 30 s after the last resume.
    assert retry.resumes([T0, at(0), at(10), at(30), at(100), at(100)]) == [T0, at(10), at(30), at(70), at(100), at(110)]
    slow = retry.slowly_failing(T0, [datetime.timedelta(minutes=m) for m in (1, 3, 2)])
    assert slow == [(T0, T0), (at(60), at(60)), (at(240), at(240)), (at(360), at(360))]  # each resumed at once
    with pytest.raises(ValueError, match="before virt-handler resumed it"):
        retry.resumes([T0, at(1), at(5)])


async def test_a_vmi_retried_and_paused_again_gets_a_new_paused_condition(kmock, cluster):
    """virt-handler (`pkg/virt-handler/vm.go`, `updatePausedConditions`, `calculatePausedCondition`)
    removes the Paused condition when it sees the domain running and adds a new one at the next pause;
    virt-controller mirrors it on the launcher pod (`syncPausedConditionToPod`). A fast-failing mount,
    scripted with the retry's model: paused throughout but for instants, each pause a new condition."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    _, vm1 = await get(cluster, f"{VMIS}/vm1")
    assert paused_condition(vm1) == {"type": "Paused", "status": "True", "reason": "PausedIOError",
                                     "message": "VMI was paused, low-level IO error detected",
                                     "lastProbeTime": rfc3339(T0), "lastTransitionTime": rfc3339(T0)}
    [pod] = (await pods_of(cluster, "vm1")).values()
    assert [(c["status"], c["reason"]) for c in pod["status"]["conditions"] if c["type"] == UNPAUSED] == [("False", "Paused")]
    with pytest.raises(ValueError, match="paused already"):
        await io_error_pause(kmock.apiserver, "default", "vm1", at(1))

    transitions = []
    for i, (pause, resume) in enumerate(IoErrorRetry().fast_failing(T0, 3)):
        if i:  # the first pause is the one above
            await io_error_pause(kmock.apiserver, "default", "vm1", pause)
        _, vm1 = await get(cluster, f"{VMIS}/vm1")
        transitions.append(paused_condition(vm1)["lastTransitionTime"])
        await io_retry_resume(kmock.apiserver, "default", "vm1", resume)
        _, vm1 = await get(cluster, f"{VMIS}/vm1")
        assert paused_condition(vm1) is None and vm1["status"]["phase"] == "Running"
    assert transitions == [rfc3339(T0), rfc3339(T0), rfc3339(at(10))]
    [pod] = (await pods_of(cluster, "vm1")).values()
    assert [(c["status"], c["lastTransitionTime"]) for c in pod["status"]["conditions"]
            if c["type"] == UNPAUSED] == [("True", rfc3339(at(30)))]
    with pytest.raises(ValueError, match="it is not paused"):
        await io_retry_resume(kmock.apiserver, "default", "vm1", at(40))


async def test_a_fast_failing_mount_shows_a_paused_condition_at_most_3_min_old_or_its_first_one(kmock, cluster):
    """Five minutes into a mount that fails at once, virt-handler's retry resumed vm1 at 0, 10, 30, 70
    and 150 s: when it saw each resume, the Paused condition it shows is the one of 150 s; when each
    re-pause came before it noticed (`notify-client/client.go`, `eventCallback` reads the state when it
    handles the event), the first one, of 0 s. A slowly failing mount shows vm1 running then."""
    retry, five_minutes = IoErrorRetry(), at(300)
    vm1 = await play_io_errors(kmock.apiserver, "default", "vm1", retry.fast_failing(T0, 10), five_minutes)
    assert paused_condition(vm1)["lastTransitionTime"] == rfc3339(at(150))
    vm2 = await play_io_errors(kmock.apiserver, "default", "vm2", retry.fast_failing(T0, 10), five_minutes, seen=False)
    assert paused_condition(vm2)["lastTransitionTime"] == rfc3339(T0)
    _, listed = await get(cluster, VMIS)
    assert [paused_condition(v)["lastTransitionTime"] for v in listed["items"]] == [rfc3339(at(150)), rfc3339(T0)]

    for name in ("vm1", "vm2"):
        await put(cluster, f"{SUBRESOURCES}/{name}/unpause")
    slow = retry.slowly_failing(at(400), [datetime.timedelta(minutes=m) for m in (1, 3, 2)])
    vm1 = await play_io_errors(kmock.apiserver, "default", "vm1", slow, at(700))
    assert paused_condition(vm1) is None and vm1["status"]["phase"] == "Running"


async def test_the_retry_resumes_no_vm_its_user_paused(kmock, cluster):
    """`SyncVMI` (`pkg/virt-launcher/virtwrap/manager.go`) resumes no domain in the paused set, which
    a user's pause fills; the retry applies to a domain paused with reason IOError alone."""
    assert await put(cluster, f"{SUBRESOURCES}/vm1/pause") == (200, {})
    with pytest.raises(ValueError, match="paused for PausedByUser"):
        await io_retry_resume(kmock.apiserver, "default", "vm1", at(10))


# --------------------------------------------------------------------------- migrations

async def test_a_migrated_paused_vmi_stays_paused_with_its_original_condition(kmock, cluster):
    """virt-handler hands the VMI to the target (`pkg/virt-handler/migration-source.go`, `updateStatus`);
    the target keeps a VM that came paused paused (`live-migration-target.go`, `prepareMigrationTarget`:
    any Paused condition puts it in the paused set), so the VMI keeps its condition, reason and time;
    virt-handler's retry no longer resumes it, only an unpause does."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    _, before = await get(cluster, f"{VMIS}/vm1")
    await cluster.create(VMIMS, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                 "metadata": {"generateName": "vm1-colocate-", "namespace": "default"},
                                 "spec": {"vmiName": "vm1"}})
    [made] = cluster.migrations(ours=False)
    name, uid = made["metadata"]["name"], made["metadata"]["uid"]
    done = await complete_migration(kmock.apiserver, "default", name, "node-b", at(60))

    _, vm1 = await get(cluster, f"{VMIS}/vm1")
    assert vm1["status"]["conditions"] == before["status"]["conditions"]
    assert paused_condition(vm1)["lastTransitionTime"] == rfc3339(T0)
    assert (vm1["status"]["nodeName"], vm1["metadata"]["labels"]["kubevirt.io/nodeName"]) == ("node-b", "node-b")
    state = vm1["status"]["migrationState"]
    pods = await pods_of(cluster, "vm1")
    assert state["migrationUid"] == uid and state["completed"] is True and (state["sourceNode"], state["targetNode"]) == (
        "node-a", "node-b") and state["startTimestamp"] == state["endTimestamp"] == rfc3339(at(60))
    assert pods[state["sourcePod"]]["status"]["phase"] == "Succeeded"
    target = pods[state["targetPod"]]
    assert (target["spec"]["nodeName"], target["metadata"]["creationTimestamp"], target["status"]["startTime"]) == (
        "node-b", rfc3339(at(60)), rfc3339(at(60)))
    assert target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == uid
    assert list(vm1["status"]["activePods"].items()) == [(target["metadata"]["uid"], "node-b")]
    _, stored = await get(cluster, f"{VMIMS}/{name}")
    assert stored == done and stored["status"]["phase"] == "Succeeded"
    assert [t["phase"] for t in stored["status"]["phaseTransitionTimestamps"]][-1] == "Succeeded"
    assert stored["status"]["migrationState"] == state

    with pytest.raises(ValueError, match="its target keeps it paused"):
        await io_retry_resume(kmock.apiserver, "default", "vm1", at(70))
    with pytest.raises(ValueError, match="finished already"):
        await complete_migration(kmock.apiserver, "default", name, "node-c", at(80))
    assert await put(cluster, f"{SUBRESOURCES}/vm1/unpause") == (200, {})
    _, vm1 = await get(cluster, f"{VMIS}/vm1")
    assert paused_condition(vm1) is None


async def test_a_drains_evacuation_completes_alike_and_a_failed_migration_leaves_the_vm(kmock, cluster):
    """virt-controller's evacuation (tests/fixtures/vmim-evacuation.yaml) ends like any migration; a
    failed one (`setMigrationProgressStatus`) leaves the VMI where it runs, its migrationState
    completed and failed with libvirt's reason, the migration Failed."""
    evacuation = load("vmim-evacuation.yaml")
    evacuation["status"] = {"phase": "Running"}
    await cluster.create(VMIMS, evacuation)
    await complete_migration(kmock.apiserver, "default", "kubevirt-evacuation-x7k2p", "node-c", at(30))
    _, vm1 = await get(cluster, f"{VMIS}/vm1")
    assert vm1["status"]["nodeName"] == "node-c"

    await cluster.create(VMIMS, migration("vm2-away", "vm2"))
    failed = await fail_migration(kmock.apiserver, "default", "vm2-away", at(40), node="node-b", reason="timed out")
    _, vm2 = await get(cluster, f"{VMIS}/vm2")
    assert vm2["status"]["nodeName"] == "node-a" and list(await pods_of(cluster, "vm2")) == ["virt-launcher-vm2-x7k2p"]
    state = vm2["status"]["migrationState"]
    assert (state["completed"], state["failed"], state["failureReason"], state["targetNode"]) == (True, True, "timed out",
                                                                                                   "node-b")
    assert failed["status"]["phase"] == "Failed" and failed["status"]["phaseTransitionTimestamps"][-1] == {
        "phase": "Failed", "phaseTransitionTimestamp": rfc3339(at(40))}
    await cluster.create(VMIMS, migration("vm2-again", "vm2"))  # a new migration: a migrationState of its own
    await complete_migration(kmock.apiserver, "default", "vm2-again", "node-b", at(50))
    state = (await get(cluster, f"{VMIS}/vm2"))[1]["status"]["migrationState"]
    assert "failed" not in state and "failureReason" not in state and state["targetNode"] == "node-b"


async def test_the_sixth_finished_migration_of_a_vmi_deletes_the_oldest_with_its_source_pod(kmock, cluster):
    """`pkg/virt-controller/watch/migration/migration.go`, `garbageCollectFinalizedMigrations`: once a
    migration is final, the VMI's final migrations beyond the newest
    `defaultFinalizedMigrationGarbageCollectionBuffer` (5), oldest creation first, are deleted, a
    completed one's source pod with it; a running one and another VMI's are not counted."""
    for i in range(7):
        await cluster.create(VMIMS, migration(f"vm1-m{i}", "vm1", created=rfc3339(at(i))))
    await cluster.create(VMIMS, migration("vm2-m0", "vm2", phase="Succeeded", created=rfc3339(T0 - datetime.timedelta(days=1))))
    first_source = None
    for i in range(5):
        node = ("node-b", "node-a")[i % 2]
        done = await complete_migration(kmock.apiserver, "default", f"vm1-m{i}", node, at(100 + i))
        first_source = first_source or done["status"]["migrationState"]["sourcePod"]
    assert len(cluster.migrations(ours=False)) == 8 and first_source in await pods_of(cluster, "vm1")

    await fail_migration(kmock.apiserver, "default", "vm1-m5", at(200))  # the sixth finished: the oldest goes
    assert (await get(cluster, f"{VMIMS}/vm1-m0"))[0] == 404
    assert first_source not in await pods_of(cluster, "vm1")
    names = sorted(m["metadata"]["name"] for m in cluster.migrations(ours=False))
    assert names == ["vm1-m1", "vm1-m2", "vm1-m3", "vm1-m4", "vm1-m5", "vm1-m6", "vm2-m0"]  # m6 still running
    assert await collect_finished_migrations(kmock.apiserver, "default", "vm1") == []


# --------------------------------------------------------------------------- virt-api

async def test_pause_and_unpause_are_refused_in_virt_apis_words(kmock, cluster):
    """`pkg/virt-api/rest/lifecycle.go`, `PauseVMIRequestHandler` and `UnpauseVMIRequestHandler`, with the
    messages of `pkg/virt-api/rest/subresource.go` (`vmNotRunning`, `vmiNotRunning`, `vmiNotPaused`,
    `vmSnapshotInprogress`), as the apiserver's `NewConflict` and `NewForbidden` word them."""
    on = 'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "vm1": '
    status, body = await put(cluster, f"{SUBRESOURCES}/vm1/unpause")
    assert (status, body["reason"], body["message"]) == (409, "Conflict", on + "VMI is not paused")
    assert await put(cluster, f"{SUBRESOURCES}/vm1/pause") == (200, {})
    status, body = await put(cluster, f"{SUBRESOURCES}/vm1/pause")
    assert (status, body["message"]) == (409, on + "VMI is already paused")
    kmock.resources[VMS] = {}
    kmock.objects[VMS, "default", "vm1"] = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                            "metadata": {"name": "vm1", "namespace": "default"},
                                            "status": {"snapshotInProgress": "vm1-snap"}}
    status, body = await put(cluster, f"{SUBRESOURCES}/vm1/unpause")
    assert (status, body["message"]) == (
        409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": VM snapshot is in progress')

    await cluster.patch(f"{VMIS}/vm2", {"spec": {"livenessProbe": {"httpGet": {"port": 1500}}}})
    status, body = await put(cluster, f"{SUBRESOURCES}/vm2/pause")
    assert (status, body["message"]) == (403, 'virtualmachineinstance.kubevirt.io "vm2" is forbidden: '
                                              "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported")
    await cluster.patch(f"{VMIS}/vm2", {"status": {"phase": "Succeeded"}})
    on2 = on.replace('"vm1"', '"vm2"')
    assert (await put(cluster, f"{SUBRESOURCES}/vm2/pause"))[1]["message"] == on2 + "VM is not running"
    assert (await put(cluster, f"{SUBRESOURCES}/vm2/unpause"))[1]["message"] == on2 + "VMI is not running"
    status, body = await put(cluster, f"{SUBRESOURCES}/vm3/unpause")
    assert (status, body["message"]) == (404, 'virtualmachineinstance.kubevirt.io "vm3" not found')


async def test_the_next_unpauses_fail_with_503_and_change_nothing(kmock, cluster):
    """virt-api out of reach for the next two unpauses of vm1: each 503, the VMI still paused; the
    third is virt-api's again."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    await put(cluster, f"{SUBRESOURCES}/vm2/unpause")  # seen before: not one of the next
    failing = unavailable(kmock, 2, namespace="default", name="vm1")
    for _ in range(2):
        status, body = await put(cluster, f"{SUBRESOURCES}/vm1/unpause")
        assert (status, body["reason"]) == (503, "ServiceUnavailable")
        assert paused_condition((await get(cluster, f"{VMIS}/vm1"))[1]) is not None
    assert await put(cluster, f"{SUBRESOURCES}/vm1/unpause") == (200, {})
    assert paused_condition((await get(cluster, f"{VMIS}/vm1"))[1]) is None
    assert len(list(failing)) == 2
