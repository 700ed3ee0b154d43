"""A drain as KubeVirt 1.9 and Longhorn carry it out, played over plain objects on a clock of its
own (seconds from the cordon), the webhook's admission of each migration and share-manager pod
plugged in, kube-scheduler simulated (`kubefake.scheduler`).

KubeVirt v1.9.0, as its source does it:
- `kubectl drain` evicts every pod of the node: virt-api's eviction webhook refuses a VM's launcher
  pod and marks its VMI instead (status.evacuationNodeName, pkg/virt-api/webhooks/validating-webhook/
  admitters/pod-eviction-admitter.go); any other pod goes, and its controller creates it again,
  unbound, a moment later (kube-scheduler places it where it fits, maybe where a VM was aimed);
- the evacuation controller (pkg/virt-controller/watch/drain/evacuation/evacuation.go, `execute`,
  `sync`, `GenerateNewMigration`) creates a migration for every marked VMI still on the drained node
  that has no unfinished one and no pod of an earlier migration left, all in one sync, one goroutine
  each (the cap of 1.8 went with the MigrationPriorityQueue gate's GA): generateName
  kubevirt-evacuation-, annotation kubevirt.io/evacuationMigration, spec.priority system-critical, no
  addedNodeSelector. The apiserver runs mutating admission on each (`admit_migration`) at the same
  moment, so every admission of one sync sees the cluster as it was before the sync: none sees
  another's migration;
- the migration controller (pkg/virt-controller/watch/migration/migration.go) gives a Pending
  migration its target pod only while fewer than parallelMigrationsPerCluster (5) have one and
  fewer than parallelOutboundMigrationsPerNode (2) leave its VM's node (`handleTargetPodCreation`),
  system-critical first, then by age; an evacuation after failed ones waits its backoff: 20 s,
  doubling for each failure since the last success, from the last failure (`handleMigrationBackoff`);
  the target pod selects as `objects.migration_node_selector` renders it, addedNodeSelector merged
  under the VM's own keys (`createTargetPod`), with the required anti-affinity to the VMI's pods;
  a target pod unschedulable for 300 s from its creation (`defaultUnschedulablePendingTimeoutSeconds`,
  or the migration's kubevirt.io/migrationUnschedulablePodTimeoutSeconds) is deleted and the migration
  fails (`handlePendingPodTimeout`), having held its slots all along; kube-scheduler tries a target pod
  as it is created (a node cordoned after that does not undo its binding); a placed one runs, then the VMI is
  on the target and its mark is cleared (virt-handler, pkg/virt-handler/vm.go).
A node may be cordoned while the drain runs (`Pace.cordon`): no new pod goes there after.
Longhorn (longhorn-manager controller/share_manager_controller.go): an evicted share-manager pod is
created again, unbound, only once the old pod is gone (`GetPod` returns nothing); the apiserver runs
mutating admission on it (`admit_pod`), kube-scheduler places it, and the ShareManager runs there.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
from collections.abc import Awaitable, Callable
from typing import Any

from .objects import LONGHORN_NS, launcher_pod_of, migration_node_selector, share_manager_pod, stamp
from .scheduler import Scheduler

Admit = Callable[[dict[str, Any], list[dict[str, Any]]], Awaitable[dict[str, Any]]]
EVACUATION = "kubevirt.io/evacuationMigration"
UNSCHEDULABLE_TIMEOUT = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
PRIORITY = {"system-critical": 100, "user-triggered": 50, "system-maintenance": 20}
START = datetime.datetime(2026, 11, 27, 8, 0, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Pace:
    """KubeVirt's and Longhorn's settings and timings for one drain."""

    outbound: int = 2  # parallelOutboundMigrationsPerNode
    cluster: int = 5  # parallelMigrationsPerCluster
    migration: float = 30.0  # seconds a placed migration runs
    unschedulable: float = 300.0  # defaultUnschedulablePendingTimeoutSeconds
    backoff: float = 20.0  # the first evacuation backoff (then doubling)
    gone: tuple[float, float] = (2.0, 6.0)  # seconds until an evicted share-manager pod is gone
    again: tuple[float, float] = (1.0, 3.0)  # then until longhorn-manager creates it again
    fail_once: frozenset[str] = frozenset()  # VMs whose first migration fails under way (libvirt)
    recreated: tuple[float, float] = (1.0, 4.0)  # seconds until an evicted ordinary pod's controller creates it again
    cordon: tuple[tuple[float, str], ...] = ()  # (second, node): another node cordoned while the drain runs
    limit: float = 3600.0


@dataclasses.dataclass
class Played:
    """What the drain did: the migrations as stored, target pods that stayed unschedulable, when it ended."""

    migrations: list[dict[str, Any]]
    unschedulable: list[str]
    ended: float | None
    objects: list[dict[str, Any]]
    log: list[tuple[float, str, str]]  # (second, what happened, to which object)
    peaks: dict[str, int]  # the most migrations with a target pod at once: in the cluster, off one node
    stuck: float = 0.0  # the longest any target pod stayed unschedulable, in seconds

    def vm_nodes(self) -> dict[str, str]:
        return {o["metadata"]["name"]: o["status"]["nodeName"] for o in self.objects
                if o["kind"] == "VirtualMachineInstance"}

    def storage_nodes(self) -> dict[str, set[str | None]]:
        """Each VM's NFS servers' nodes (None: not serving)."""
        serving = {o["metadata"]["name"]: (o["status"].get("ownerID") if o["status"].get("state") == "running" else None)
                   for o in self.objects if o["kind"] == "ShareManager"}
        claims = {o["metadata"]["name"]: o["spec"].get("volumeName") for o in self.objects
                  if o["kind"] == "PersistentVolumeClaim"}
        return {o["metadata"]["name"]: {serving.get(claims.get(v["persistentVolumeClaim"]["claimName"]))
                                        for v in o["spec"]["volumes"] if "persistentVolumeClaim" in v}
                for o in self.objects if o["kind"] == "VirtualMachineInstance"}

    def apart(self) -> list[str]:
        """The VMs not beside all their storage."""
        nodes, storage = self.vm_nodes(), self.storage_nodes()
        return sorted(vm for vm, where in nodes.items() if storage[vm] != {where})


class Drain:
    """One drain of `drained`: cordoned and tainted at 0, its share-managers evicted, its VMIs evacuated."""

    def __init__(self, objects: list[dict[str, Any]], drained: str, admit_migration: Admit, admit_pod: Admit,
                 pace: Pace = Pace(), seed: int = 7) -> None:
        self.objects = {self._key(o): o for o in objects}
        self.drained, self.pace = drained, pace
        self.admit_migration, self.admit_pod = admit_migration, admit_pod
        self.rng, self.scheduler = random.Random(seed), Scheduler(random.Random(seed))
        self.now = 0.0
        self.returning: dict[str, float] = {}  # volume -> when its share-manager pod is created again
        self.evicted: dict[str, tuple[float, dict[str, Any]]] = {}  # ordinary pods: when created again, and as what
        self.gone: dict[str, float] = {}  # volume -> when its evicted pod is gone
        self.unschedulable: list[str] = []
        self.failed_once: set[str] = set()
        self.count = 0
        # The migration controller's own bookkeeping, by migration: its target pod, source node, times.
        self.runs: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[float, str, str]] = []
        self.peaks = {"cluster": 0, "outbound": 0}

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return obj["kind"], meta.get("namespace") or "", meta["name"]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]

    def stamp(self) -> str:
        return stamp(START + datetime.timedelta(seconds=self.now))

    async def run(self) -> Played:
        self._cordon()
        ended = None
        while self.now <= self.pace.limit:
            self._cordons()
            self._controllers()
            await self._longhorn()
            await self._evacuation()
            self._migrations()
            if self._done():
                ended = self.now
                break
            self.now += 1.0
        return Played(self.of("VirtualMachineInstanceMigration"), self.unschedulable, ended, list(self.objects.values()),
                      self.log, self.peaks, max((r.get("stuck", 0.0) for r in self.runs.values()), default=0.0))

    def _done(self) -> bool:
        return not any(v["status"]["nodeName"] == self.drained for v in self.of("VirtualMachineInstance")) \
            and not self.returning and not self.gone and all(
                o["status"].get("state") == "running" for o in self.of("ShareManager"))

    def _cordon(self) -> None:
        node = self.objects["Node", "", self.drained]
        node["spec"] = {**node["spec"], "unschedulable": True, "taints": [*(node["spec"].get("taints") or []), DRAIN_TAINT]}
        for vmi in self.of("VirtualMachineInstance"):
            if vmi["status"]["nodeName"] == self.drained:  # its launcher pod's eviction refused, the VMI marked
                vmi["status"]["evacuationNodeName"] = self.drained
        for pod in self.of("Pod"):
            labels = pod["metadata"].get("labels") or {}
            if pod["spec"].get("nodeName") != self.drained or "kubevirt.io/created-by" in labels:
                continue
            if labels.get("longhorn.io/component") == "share-manager":
                volume = labels["longhorn.io/share-manager"]
                pod["metadata"]["deletionTimestamp"] = self.stamp()  # kubectl drain evicts it at once
                self.gone[volume] = self.rng.uniform(*self.pace.gone)
                self.objects["ShareManager", LONGHORN_NS, volume]["status"] = {"state": "error", "ownerID": self.drained}
            else:  # evicted; its ReplicaSet creates another, kube-scheduler places it
                del self.objects[self._key(pod)]
                again = {**pod, "metadata": {**pod["metadata"], "name": pod["metadata"]["name"] + "-r"},
                         "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}, "status": {"phase": "Pending"}}
                self.evicted[again["metadata"]["name"]] = (self.rng.uniform(*self.pace.recreated), again)

    def _cordons(self) -> None:
        for when, name in self.pace.cordon:
            if when == self.now:
                node = self.objects["Node", "", name]
                node["spec"] = {**node["spec"], "unschedulable": True}
                self.log.append((self.now, "cordoned", name))

    def _controllers(self) -> None:
        """The evicted ordinary pods created again by their controllers, and placed."""
        for name, (when, pod) in sorted(self.evicted.items()):
            if self.now >= when:
                self.objects.setdefault(self._key(pod), pod)
                if self._place(pod):
                    del self.evicted[name]
                    self.log.append((self.now, "pod placed again", f"{name} on {pod['spec']['nodeName']}"))

    async def _longhorn(self) -> None:
        for volume, when in sorted(self.gone.items()):
            if self.now >= when:
                del self.gone[volume], self.objects["Pod", LONGHORN_NS, f"share-manager-{volume}"]
                self.log.append((self.now, "share-manager pod gone", volume))
                self.returning[volume] = self.now + self.rng.uniform(*self.pace.again)
        for volume, when in sorted(self.returning.items()):
            key = ("Pod", LONGHORN_NS, f"share-manager-{volume}")
            if key not in self.objects and self.now >= when:
                self.objects[key] = await self.admit_pod(share_manager_pod(volume), list(self.objects.values()))
                self.log.append((self.now, "share-manager pod created", volume))
            pod = self.objects.get(key)
            if pod is not None and self._place(pod):
                self.objects["ShareManager", LONGHORN_NS, volume]["status"] = {
                    "state": "running", "ownerID": pod["spec"]["nodeName"]}
                del self.returning[volume]

    def _place(self, pod: dict[str, Any]) -> bool:
        """kube-scheduler's turn for an unbound pod; whether it is bound."""
        if pod["spec"].get("nodeName"):
            return True
        placed = self.scheduler.place(pod, self.of("Node"), self.of("Pod"))
        if placed.node is None:
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                                 "reason": "Unschedulable", "message": placed.message}]}
            return False
        pod["spec"]["nodeName"] = placed.node
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        return True

    def _unfinished(self, vmi: str) -> list[dict[str, Any]]:
        return [m for m in self.of("VirtualMachineInstanceMigration") if m["spec"]["vmiName"] == vmi
                and m["status"].get("phase") not in ("Succeeded", "Failed")]

    def _active_pods(self, vmi: dict[str, Any]) -> int:
        """`VMIActivePodsCount`: the VMI's pods neither Succeeded nor Failed."""
        return sum(1 for p in self.of("Pod") if (p["metadata"].get("labels") or {}).get("kubevirt.io/created-by")
                   == vmi["metadata"]["uid"] and p["status"].get("phase") not in ("Succeeded", "Failed"))

    async def _evacuation(self) -> None:
        """One sync: every marked VMI on the drained node without an unfinished migration or a pod of an
        earlier one gets a migration, all created at once, each admitted over the cluster as it was
        before the sync (`filterRunningNonMigratingVMIs`, `sync`'s goroutines)."""
        candidates = [vmi for vmi in sorted(self.of("VirtualMachineInstance"), key=lambda v: v["metadata"]["name"])
                      if vmi["status"]["nodeName"] == self.drained == vmi["status"].get("evacuationNodeName")
                      and not self._unfinished(vmi["metadata"]["name"]) and self._active_pods(vmi) <= 1]
        before = list(self.objects.values())
        created = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                    "metadata": {"generateName": "kubevirt-evacuation-", "namespace": vmi["metadata"]["namespace"],
                                 "annotations": {EVACUATION: self.drained}},
                    "spec": {"vmiName": vmi["metadata"]["name"], "priority": "system-critical"}} for vmi in candidates]
        for stored in await asyncio.gather(*(self.admit_migration(c, before) for c in created)):
            self.count += 1
            stored["metadata"].update(name=f"kubevirt-evacuation-{self.count:05d}", uid=f"vmim-{self.count:05d}",
                                      creationTimestamp=self.stamp())
            stored["status"] = {"phase": "Pending"}
            self.objects[self._key(stored)] = stored
            self.log.append((self.now, "evacuation created", stored["metadata"]["name"]))

    def _migrations(self) -> None:
        """The migration controller's pass: the running ones advance, then the waiting ones in queue order."""
        for migration in self.of("VirtualMachineInstanceMigration"):
            if migration["metadata"]["name"] in self.runs:
                self._advance(migration)
        queue = sorted((m for m in self.of("VirtualMachineInstanceMigration")
                        if m["status"].get("phase") == "Pending" and m["metadata"]["name"] not in self.runs),
                       key=lambda m: (-PRIORITY.get(m["spec"].get("priority") or "", 0), m["metadata"]["name"]))
        for migration in queue:
            if self._may_start(migration):
                self._target(migration)
        running = [self.runs[m["metadata"]["name"]]["source"] for m in self._running()]
        self.peaks["cluster"] = max(self.peaks["cluster"], len(running))
        self.peaks["outbound"] = max([self.peaks["outbound"], *(running.count(n) for n in set(running))])

    def _running(self) -> list[dict[str, Any]]:
        return [m for m in self.of("VirtualMachineInstanceMigration")
                if m["metadata"]["name"] in self.runs and m["status"].get("phase") not in ("Succeeded", "Failed")]

    def _may_start(self, migration: dict[str, Any]) -> bool:
        vmi = self.objects["VirtualMachineInstance", migration["metadata"]["namespace"], migration["spec"]["vmiName"]]
        running = self._running()
        leaving = [m for m in running if self.runs[m["metadata"]["name"]]["source"] == vmi["status"]["nodeName"]]
        return len(running) < self.pace.cluster and len(leaving) < self.pace.outbound \
            and self.now >= self._backoff_until(migration)

    def _backoff_until(self, migration: dict[str, Any]) -> float:
        """handleMigrationBackoff: 20 s after the last failure, doubling per failure since the last success."""
        earlier = sorted((m for m in self.of("VirtualMachineInstanceMigration")
                          if m["spec"]["vmiName"] == migration["spec"]["vmiName"]
                          and m["metadata"]["name"] < migration["metadata"]["name"]),
                         key=lambda m: m["metadata"]["name"], reverse=True)
        failures, last = 0, None
        for m in earlier:
            if m["status"].get("phase") == "Succeeded":
                break
            if m["status"].get("phase") == "Failed":
                failures += 1
                last = self.runs[m["metadata"]["name"]]["failed"] if last is None else last
        return 0.0 if last is None else last + self.pace.backoff * 2 ** (failures - 1)

    def _target(self, migration: dict[str, Any]) -> None:
        namespace, name = migration["metadata"]["namespace"], migration["spec"]["vmiName"]
        vmi = self.objects["VirtualMachineInstance", namespace, name]
        source = next(p for p in self.of("Pod") if (p["metadata"].get("labels") or {}).get("kubevirt.io/created-by")
                      == vmi["metadata"]["uid"] and p["status"].get("phase") == "Running")
        node = self.objects["Node", "", vmi["status"]["nodeName"]]
        selector = migration_node_selector(vmi, source["spec"]["nodeSelector"], node["metadata"]["labels"],
                                           migration["spec"].get("addedNodeSelector"))
        pod = launcher_pod_of(vmi, name=f"virt-launcher-{name}-{migration['metadata']['uid'][-5:]}",
                              migration_uid=migration["metadata"]["uid"], node_selector=selector)
        del pod["spec"]["nodeName"]
        pod["metadata"]["labels"].pop("kubevirt.io/nodeName", None)
        pod["status"] = {"phase": "Pending"}
        self.objects[self._key(pod)] = pod
        self._place(pod)  # kube-scheduler's first try, milliseconds after the create
        self.runs[migration["metadata"]["name"]] = {"pod": pod["metadata"]["name"], "source": vmi["status"]["nodeName"],
                                                    "started": self.now}
        migration["status"]["phase"] = "Scheduling"
        self.log.append((self.now, "target pod created", migration["metadata"]["name"]))

    def _advance(self, migration: dict[str, Any]) -> None:
        run = self.runs[migration["metadata"]["name"]]
        if migration["status"].get("phase") in ("Succeeded", "Failed"):
            return
        pod = self.objects["Pod", migration["metadata"]["namespace"], run["pod"]]
        if not self._place(pod):
            run["stuck"] = self.now - run["started"]
            timeout = (migration["metadata"].get("annotations") or {}).get(UNSCHEDULABLE_TIMEOUT)
            if self.now - run["started"] >= (float(timeout) if timeout else self.pace.unschedulable):
                self.unschedulable.append(pod["metadata"]["name"])
                self._fail(migration, pod)
            return
        run.setdefault("placed", self.now)
        migration["status"]["phase"] = "Running"
        if self.now - run["placed"] < self.pace.migration:
            return
        name = migration["spec"]["vmiName"]
        if name in self.pace.fail_once and name not in self.failed_once:
            self.failed_once.add(name)
            self._fail(migration, pod)
        else:
            self._succeed(migration, pod)

    def _fail(self, migration: dict[str, Any], pod: dict[str, Any]) -> None:
        del self.objects[self._key(pod)]
        vmi = self.objects["VirtualMachineInstance", migration["metadata"]["namespace"], migration["spec"]["vmiName"]]
        vmi["status"]["migrationState"] = {"migrationUid": migration["metadata"]["uid"], "completed": True,
                                           "failed": True, "sourceNode": vmi["status"]["nodeName"],
                                           "startTimestamp": self.stamp(), "endTimestamp": self.stamp()}
        self.runs[migration["metadata"]["name"]]["failed"] = self.now
        migration["status"]["phase"] = "Failed"
        self.log.append((self.now, "failed", migration["metadata"]["name"]))

    def _succeed(self, migration: dict[str, Any], pod: dict[str, Any]) -> None:
        vmi = self.objects["VirtualMachineInstance", migration["metadata"]["namespace"], migration["spec"]["vmiName"]]
        target = pod["spec"]["nodeName"]
        for source in self.of("Pod"):
            if (source["metadata"].get("labels") or {}).get("kubevirt.io/created-by") == vmi["metadata"]["uid"] \
                    and source is not pod and source["status"].get("phase") == "Running":
                source["status"] = {"phase": "Succeeded"}
        pod["metadata"]["labels"]["kubevirt.io/nodeName"] = target
        vmi["metadata"]["labels"]["kubevirt.io/nodeName"] = target
        vmi["status"].pop("evacuationNodeName", None)
        vmi["status"].update(nodeName=target, migrationState={
            "migrationUid": migration["metadata"]["uid"], "completed": True, "sourceNode": self.runs[migration["metadata"]["name"]]["source"],
            "targetNode": target, "targetPod": pod["metadata"]["name"], "startTimestamp": self.stamp(),
            "endTimestamp": self.stamp()})
        migration["status"].update(phase="Succeeded")
        self.log.append((self.now, "succeeded", migration["metadata"]["name"]))
