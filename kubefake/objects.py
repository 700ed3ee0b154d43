"""Kubernetes, Longhorn and KubeVirt objects as a real cluster stores them (KubeVirt 1.8,
Longhorn 1.9; the shapes of tests/fixtures), one builder per kind and state.

Identifiers are stable (derived from names), so two runs build the same cluster. No object
carries finalizers unless it is being deleted (kmock honours them: a DELETE would only mark
it), and a pod's start is its creationTimestamp alone (status.startTime left out), so a test
moves it with one field.
"""
from __future__ import annotations

import copy
import datetime
import functools
import random
import uuid
from pathlib import Path
from typing import Any

import orjson
import yaml

__all__ = [
    "set_or_remove",
    "ALLOCATABLE", "ARCH", "LARGE_ALLOCATABLE", "CPU_FEATURE", "CPU_GENERATIONS", "CPU_MODEL", "CPU_VENDOR", "FIXTURES", "HOST_MODEL",
    "HOST_MODEL_CPU", "HOST_MODEL_FEATURE", "LONGHORN_NS", "MACHINE_ALIAS", "MACHINE_TYPE", "MIGRATION_CPU",
    "NEW_CPU", "OLD_CPU", "SCHEDULABLE", "STAMP", "VM1_UID", "VM_NS",
    "ago", "fixture_cluster", "labeller", "launcher_node_selector", "launcher_pod", "launcher_pod_of", "load",
    "load_all", "longhorn_settings", "machine_type", "migration", "migration_node_selector", "migration_target", "node", "nodes", "placement",
    "pv", "pvc", "review", "running_vm", "rwx_disk", "share_manager", "share_manager_pod", "stable_uid", "stamp",
    "vm_pod", "vmi", "vmi_uid", "workload_pod", "VIRT_CONTROLLER", "evacuation", "migration_review",
]

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
LONGHORN_NS = "longhorn-system"
VM_NS = "default"
VM1_UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"  # the VMI uid in the fixtures
STAMP = "2026-01-01T00:00:00Z"  # when the objects of a cluster built here were created
SM_IMAGE = "longhornio/longhorn-share-manager:v1.9.1"
# What the PV controller records of its writes to claims and volumes.
MANAGED = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
            "time": STAMP, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/bind-completed": {}}},
                         "f:spec": {"f:volumeName": {}}, "f:status": {"f:phase": {}, "f:capacity": {}}}}]


def stamp(moment: datetime.datetime | None = None) -> str:
    """An RFC 3339 time as the apiserver writes it (now by default)."""
    return (moment or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(**span: float) -> str:
    return stamp(datetime.datetime.now(datetime.UTC) - datetime.timedelta(**span))


def stable_uid(*parts: str) -> str:
    """A uid that is the same on every run for the same object."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def load_all(name: str) -> list[dict[str, Any]]:
    """The documents of a fixture, a fresh copy each call (the file is parsed once): through JSON where it holds
    only what JSON does (a tenth of a deep copy's time: a cluster of 75,000 VMs is built from them)."""
    parsed = _parsed(name)
    try:
        return orjson.loads(orjson.dumps(parsed, option=orjson.OPT_PASSTHROUGH_DATETIME))  # type: ignore[no-any-return]
    except TypeError:  # a YAML timestamp, a key that is not a string
        return copy.deepcopy(parsed)


@functools.cache
def _parsed(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def load(name: str) -> dict[str, Any]:
    return load_all(name)[0]


def fixture_cluster() -> list[dict[str, Any]]:
    return load_all("longhorn-rwx.yaml")


# --------------------------------------------------------------------------- nodes

# CPU generations as virt-handler's node labeller labels their nodes (kubevirt/kubevirt
# pkg/virt-handler/node-labeller): the host-model CPU and the features it requires, the models a
# migration target may select, the vendor, and the machine types of the node's QEMU (the alias
# first, then the canonical ones, newest first).
NEW_CPU, OLD_CPU = "Skylake-Client-IBRS", "Broadwell-IBRS"
CPU_GENERATIONS = {
    NEW_CPU: {"models": (NEW_CPU, OLD_CPU), "features": ("vmx", "ssbd"),
              "vendor": "Intel", "machines": ("q35", "pc-q35-rhel9.6.0", "pc-q35-rhel9.4.0")},
    OLD_CPU: {"models": (OLD_CPU,), "features": ("vmx",),
              "vendor": "Intel", "machines": ("q35", "pc-q35-rhel9.4.0")},
    "EPYC-Milan": {"models": ("EPYC-Milan",), "features": ("svm",),
                   "vendor": "AMD", "machines": ("q35", "pc-q35-rhel9.6.0")},
}
# Node label prefixes of the labeller, and what virt-controller selects by (kubevirt.io/api core/v1).
HOST_MODEL_CPU = "host-model-cpu.node.kubevirt.io/"
HOST_MODEL_FEATURE = "host-model-required-features.node.kubevirt.io/"
MIGRATION_CPU = "cpu-model-migration.node.kubevirt.io/"
CPU_FEATURE = "cpu-feature.node.kubevirt.io/"
CPU_VENDOR = "cpu-vendor.node.kubevirt.io/"
CPU_MODEL = "cpu-model.node.kubevirt.io/"
MACHINE_TYPE = "machine-type.node.kubevirt.io/"
SCHEDULABLE = "kubevirt.io/schedulable"
ARCH = "kubernetes.io/arch"
HOST_MODEL = "host-model"
MACHINE_ALIAS = "q35"  # spec.domain.machine.type as virt-api defaults it

# What a 16-core, 64 GiB KubeVirt node offers after system reservations.
ALLOCATABLE = {"cpu": "15800m", "memory": "62Gi", "ephemeral-storage": "190Gi", "pods": "110",
               "devices.kubevirt.io/kvm": "1k", "hugepages-2Mi": "0"}
# What a 64-core, 256 GiB node offers: room for a benchmark's hundreds of pods per node.
LARGE_ALLOCATABLE = {"cpu": "63800m", "memory": "250Gi", "ephemeral-storage": "900Gi", "pods": "1000",
                     "devices.kubevirt.io/kvm": "1k"}


def labeller(cpu: str | None) -> dict[str, str]:
    """The node labeller's labels of a node of CPU generation `cpu` (none for None)."""
    if cpu is None:
        return {}
    generation = CPU_GENERATIONS[cpu]
    found = {f"{HOST_MODEL_CPU}{cpu}": "true", f"{CPU_VENDOR}{generation['vendor']}": "true"}
    found |= {f"{MIGRATION_CPU}{m}": "true" for m in generation["models"]}
    found |= {f"{HOST_MODEL_FEATURE}{f}": "true" for f in generation["features"]}
    found |= {f"{CPU_FEATURE}{f}": "true" for f in generation["features"]}
    found |= {f"{MACHINE_TYPE}{m}": "true" for m in generation["machines"]}
    return found


# The rest of what a node of a production cluster carries, about 170 labels in all: virt-handler's
# node labeller labels every CPU model the host can run and every feature it offers beyond the oldest
# usable model's (`cpu-model.`, `cpu-feature.`), its Hyper-V enlightenments and TSC frequency; the
# kubelet and the cloud provider add their well-known labels. `node(..., full=True)`: what the
# caches, the rooms of a drain and the keeper hold per node at Kubernetes' limit.
HOST_FEATURES = tuple("""3dnowprefetch abm adx aes amd-psfd amd-ssbd amd-stibp apic arat arch-capabilities avx avx2
    avx512bw avx512cd avx512dq avx512f avx512ifma avx512vbmi avx512vbmi2 avx512vl avx512vnni avx512-vpopcntdq
    bmi1 bmi2 clflush clflushopt clwb cmov cx16 cx8 de erms f16c fma fpu fsgsbase fsrm fxsr gfni hle hypervisor
    ibpb ibrs invpcid invtsc lahf_lm lm mca mce md-clear mmx movbe mpx msr mtrr nx pae pat pcid pclmuldq
    pdpe1gb pge pku pni popcnt pschange-mc-no pse pse36 rdctl-no rdpid rdrand rdseed rdtscp rtm sep sha-ni
    skip-l1dfl-vmentry smap smep spec-ctrl ss ssbd sse sse2 sse4.1 sse4.2 ssse3 stibp syscall tsc tsc-deadline
    tsc_adjust tsx-ctrl umip vaes vme vpclmulqdq x2apic xgetbv1 xsave xsavec xsaveopt xsaves""".split())
HOST_MODELS = ("Broadwell", "Broadwell-IBRS", "Broadwell-noTSX", "Broadwell-noTSX-IBRS", "Cascadelake-Server",
               "Cascadelake-Server-noTSX", "Haswell", "Haswell-IBRS", "Haswell-noTSX", "Haswell-noTSX-IBRS",
               "Icelake-Server", "Icelake-Server-noTSX", "IvyBridge", "IvyBridge-IBRS", "Nehalem", "Nehalem-IBRS",
               "Penryn", "SandyBridge", "SandyBridge-IBRS", "Skylake-Client", "Skylake-Client-IBRS",
               "Skylake-Server", "Skylake-Server-IBRS", "Westmere", "Westmere-IBRS")
HYPERV = ("base", "frequencies", "ipi", "reenlightenment", "reset", "runtime", "synic", "synic2", "synictimer",
          "time", "tlbflush", "vpindex", "evmcs")


def in_full(name: str) -> dict[str, str]:
    """The labels of a production node besides the labeller's labels of its CPU generation (`labeller`)."""
    found = {f"{CPU_FEATURE}{f}": "true" for f in HOST_FEATURES}
    found |= {f"{CPU_MODEL}{m}": "true" for m in HOST_MODELS}
    found |= {f"hyperv.node.kubevirt.io/{h}": "true" for h in HYPERV}
    found |= {"cpu-timer.node.kubevirt.io/tsc-frequency": "2593906000", "cpu-timer.node.kubevirt.io/tsc-scalable": "true",
              "scheduling.node.kubevirt.io/tsc-frequency-2593906000": "true", "kubevirt.io/ksm-enabled": "false",
              "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
              "beta.kubernetes.io/instance-type": "m6i.4xlarge", "node.kubernetes.io/instance-type": "m6i.4xlarge",
              "failure-domain.beta.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/region": "eu-west-1",
              "failure-domain.beta.kubernetes.io/zone": "eu-west-1a", "topology.kubernetes.io/zone": "eu-west-1a",
              "node-role.kubernetes.io/worker": "", "node.longhorn.io/create-default-disk": "true",
              "topology.longhorn.io/region": "eu-west-1", "topology.longhorn.io/zone": "eu-west-1a",
              "kubevirt.io/nodeName": name}
    return found


def machine_type(cpu: str) -> str:
    """The canonical machine type a VM started on a node of generation `cpu` runs with: what the
    alias resolves to in that node's QEMU (its newest)."""
    return CPU_GENERATIONS[cpu]["machines"][1]


def node(name: str, *, ready: bool = True, unschedulable: bool = False, taints: list | None = None,
         schedulable_label: bool = True, allocatable: dict[str, str] | None = None,
         cpu: str | None = NEW_CPU, full: bool = False, **labels: str) -> dict[str, Any]:
    """A KubeVirt node, labelled by virt-handler's node labeller for CPU generation `cpu`; with `full`,
    every label a production node carries (`in_full`)."""
    all_labels = {"kubernetes.io/hostname": name, ARCH: "amd64", "kubernetes.io/os": "linux",
                  **(in_full(name) if full else {}), **labeller(cpu), **labels}
    if schedulable_label:
        all_labels[SCHEDULABLE] = "true"
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    ready_condition = ({"type": "Ready", "status": "True", "reason": "KubeletReady"} if ready else
                       {"type": "Ready", "status": "False", "reason": "KubeletNotReady"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"conditions": [ready_condition], "allocatable": dict(allocatable or ALLOCATABLE)},
    }


def nodes(*names: str, **labels: str) -> list[dict[str, Any]]:
    return [node(n, **labels) for n in names]


# --------------------------------------------------------------------------- Longhorn RWX disks


def pvc(claim: str, volume: str | None, *, namespace: str = VM_NS, access: str = "ReadWriteMany",
        driver: str = "driver.longhorn.io") -> dict[str, Any]:
    """A claim as CDI and the PV controller leave it: bound to `volume`, or Pending for None."""
    metadata: dict[str, Any] = {
        "name": claim, "namespace": namespace, "uid": stable_uid("pvc", namespace, claim), "resourceVersion": "1",
        "creationTimestamp": STAMP,
        "labels": {"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"},
        "annotations": {"volume.beta.kubernetes.io/storage-provisioner": driver,
                        "volume.kubernetes.io/storage-provisioner": driver}}
    spec: dict[str, Any] = {"accessModes": [access], "storageClassName": "longhorn-rwx", "volumeMode": "Filesystem",
                            "resources": {"requests": {"storage": "20Gi"}}}
    status: dict[str, Any] = {"phase": "Pending"}
    if volume is not None:
        metadata["annotations"] |= {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
        metadata["managedFields"] = copy.deepcopy(MANAGED)
        spec["volumeName"] = volume
        status = {"phase": "Bound", "accessModes": [access], "capacity": {"storage": "20Gi"}}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec, "status": status}


def pv(claim: str, name: str, *, namespace: str = VM_NS, volume: str | None = None, access: str = "ReadWriteMany",
       driver: str = "driver.longhorn.io") -> dict[str, Any]:
    """The PersistentVolume `name` the CSI provisioner made for `claim`, its handle `volume`
    (the Longhorn volume; `name` by default)."""
    handle = volume or name
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": stable_uid("pv", name), "resourceVersion": "1", "creationTimestamp": STAMP,
                     "annotations": {"pv.kubernetes.io/provisioned-by": driver,
                                     "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                     "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""},
                     "managedFields": copy.deepcopy(MANAGED)},
        "spec": {"accessModes": [access], "capacity": {"storage": "20Gi"},
                 "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim,
                              "namespace": namespace, "uid": stable_uid("pvc", namespace, claim), "resourceVersion": "1"},
                 "csi": {"driver": driver, "fsType": "ext4", "volumeHandle": handle,
                         "volumeAttributes": {"dataLocality": "disabled", "fromBackup": "", "fsType": "ext4",
                                              "migratable": "false", "numberOfReplicas": "3",
                                              "share": "true", "staleReplicaTimeout": "30",
                                              "storage.kubernetes.io/csiProvisionerIdentity": f"1700000000000-8081-{driver}"}},
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "longhorn-rwx",
                 "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "lastPhaseTransitionTime": STAMP},
    }


def longhorn_settings(version: str | None = "v1.12.0", blacklist: str | None = "", **values: str | None) -> list[dict[str, Any]]:
    """Longhorn's Setting objects as its install keeps them: `current-longhorn-version`, the owner
    kinds whose pods are never deleted on a remount (`blacklist`), the other deletion and network
    Settings at their defaults, `values` (Setting name with `_` for `-`) over them; a value of None
    leaves its Setting out."""
    defaults = {"current-longhorn-version": version, "auto-delete-pod-when-volume-detached-unexpectedly": "true",
                "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly": blacklist, "endpoint-network-for-rwx-volume": "",
                "storage-network": "", "storage-network-for-rwx-volume-enabled": "false"}
    defaults |= {name.replace("_", "-"): value for name, value in values.items()}
    return [{"apiVersion": "longhorn.io/v1beta2", "kind": "Setting",
             "metadata": {"name": name, "namespace": LONGHORN_NS, "uid": stable_uid("setting", name),
                          "resourceVersion": "1", "creationTimestamp": STAMP},
             "value": value, "status": {"applied": True}}
            for name, value in defaults.items() if value is not None]


def share_manager(volume: str, node: str | None, *, state: str = "running", owner: str | None = None) -> dict[str, Any]:
    """Longhorn's ShareManager of `volume`: `state`, owned by `owner` (the node serving it by default)."""
    status: dict[str, Any] = {"ownerID": owner if owner is not None else (node or ""), "state": state}
    if state == "running" and node:
        status["endpoint"] = f"nfs://10.43.0.1/{volume}"
    return {
        "apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager",
        "metadata": {"name": volume, "namespace": LONGHORN_NS, "uid": stable_uid("sharemanager", volume),
                     "resourceVersion": "1",
                     "labels": {"longhorn.io/component": "share-manager", "longhorn.io/managed-by": "longhorn-manager"},
                     "ownerReferences": [{"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "name": volume,
                                          "uid": stable_uid("volume", volume)}]},
        "spec": {"image": SM_IMAGE},
        "status": status,
    }


def share_manager_pod(volume: str, node_name: str | None = None, *, topology_zone: str | None = None,
                      tolerations: list | None = None, terminating: bool = False) -> dict[str, Any]:
    """The share-manager pod of `volume` as longhorn-manager creates it (createPodManifest):
    before scheduling, or running on `node_name`."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"share-manager-{volume}",
            "namespace": LONGHORN_NS,
            "labels": {
                "longhorn.io/managed-by": "longhorn-manager",
                "longhorn.io/component": "share-manager",
                "longhorn.io/share-manager": volume,
                "longhorn.io/share-manager-image": "smi-4b1c2d3e",
            },
            "annotations": {"longhorn.io/last-applied-tolerations": "[]"},
            "ownerReferences": [{"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager", "name": volume,
                                 "uid": stable_uid("sharemanager", volume), "controller": True}],
        },
        "spec": {
            "serviceAccountName": "longhorn-service-account",
            "priorityClassName": "longhorn-critical",
            "restartPolicy": "Never",
            "tolerations": tolerations or [],
            "containers": [{
                "name": "share-manager",
                "image": SM_IMAGE,
                "args": ["--debug", "daemon", "--volume", volume],
                "env": [{"name": "NFS_LOG_LEVEL", "value": "INFO"}],
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "DAC_READ_SEARCH"]}},
                "readinessProbe": {"exec": {"command": ["cat", "/var/run/ganesha.pid"]}, "periodSeconds": 5},
                "volumeMounts": [{"name": "host-dev", "mountPath": "/dev"},
                                 {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True}],
            }],
            "volumes": [{"name": "host-dev", "hostPath": {"path": "/dev"}},
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}],
        },
    }
    if topology_zone:
        # Longhorn >= 1.7 turns the StorageClass allowedTopologies into a required term.
        pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [topology_zone]}]}]}}}
    if node_name:
        pod["metadata"] |= {"uid": stable_uid("pod", LONGHORN_NS, pod["metadata"]["name"]), "resourceVersion": "1"}
        pod["spec"]["nodeName"] = node_name
        pod["status"] = {"phase": "Running", "podIP": "10.42.0.10", "hostIP": "192.168.1.10",
                         "conditions": [{"type": "Ready", "status": "True"}]}
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
        pod["metadata"]["finalizers"] = ["longhorn.io"]
    return pod


def rwx_disk(
    claim: str,
    node: str | None,
    *,
    volume: str | None = None,
    pv_name: str | None = None,
    state: str = "running",
    owner: str | None = None,
    pod: bool = True,
    terminating: bool = False,
    access: str = "ReadWriteMany",
    bound: bool = True,
    driver: str = "driver.longhorn.io",
    share_manager: bool = True,
    namespace: str = VM_NS,
) -> list[dict[str, Any]]:
    """PVC, PV, ShareManager and share-manager pod of one Longhorn volume served from `node`,
    as Longhorn makes them (the PV when `bound`, the pod when `pod` and `node`)."""
    volume = volume or f"pvc-{claim}"
    pv_name = pv_name or volume
    objects = [pvc(claim, pv_name if bound else None, namespace=namespace, access=access, driver=driver)]
    if bound:
        objects.append(pv(claim, pv_name, namespace=namespace, volume=volume, access=access, driver=driver))
    if share_manager:
        objects.append(_share_manager(volume, node, state=state, owner=owner))
    if pod and node:
        objects.append(share_manager_pod(volume, node, terminating=terminating))
    return objects


_share_manager = share_manager  # rwx_disk's flag of the same name hides the builder


# --------------------------------------------------------------------------- pods of VMs and others


def vm_pod(*claims: str, **spec_overrides: Any) -> dict[str, Any]:
    """The fixture virt-launcher pod being created, optionally with other PVC disks and spec fields."""
    pod = load("virt-launcher-pod.yaml")
    if claims:
        # Each disk mounted where virt-launcher reads it, as KubeVirt renders a filesystem PVC
        # (the apiserver refuses a mount of a volume the pod does not have).
        dropped = {v["name"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
        pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] not in dropped]
        pod["spec"]["volumes"] += [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
        compute = pod["spec"]["containers"][0]
        compute["volumeMounts"] = [m for m in compute["volumeMounts"] if m["name"] not in dropped] + [
            {"name": f"disk{i}", "mountPath": f"/var/run/kubevirt-private/vmi-disks/disk{i}"} for i in range(len(claims))]
    set_or_remove(pod["spec"], spec_overrides)
    return pod


def set_or_remove(mapping: dict[str, Any], fields: dict[str, Any]) -> None:
    """Each field set to its value, or removed where the value is None."""
    for key, value in fields.items():
        if value is None:
            mapping.pop(key, None)
        else:
            mapping[key] = value


def migration_target() -> dict[str, Any]:
    return load("migration-target-pod.yaml")


def vmi_uid(name: str, namespace: str = VM_NS) -> str:
    """The uid of a VMI: the fixtures' for default/vm1, a stable one for the others."""
    if (namespace, name) == (VM_NS, "vm1"):
        return VM1_UID
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"vmi/{namespace}/{name}"))


def running_vm(name: str, node: str | None, *claims: str, namespace: str = VM_NS, opted_in: bool = True,
               terminating: bool = False, uid: str | None = None) -> dict[str, Any]:
    """A virt-launcher pod of VM `name` (VMI `uid`) as the API shows it once created (named, maybe scheduled)."""
    pod = vm_pod(*claims)
    pod["metadata"]["name"] = f"virt-launcher-{name}-x7k2p"
    pod["metadata"]["namespace"] = namespace
    labels = pod["metadata"]["labels"]
    labels.update({"vm.kubevirt.io/name": name, "kubevirt.io/vm": name, "vmi.kubevirt.io/id": name,
                   "kubevirt.io/created-by": uid or vmi_uid(name, namespace)})
    if not opted_in:
        del pod["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running" if node else "Pending"}
    return pod


def launcher_pod(fixture: str, name: str, node: str | None, created: str, phase: str = "Running", *,
                 terminating: bool = False, namespace: str = VM_NS) -> dict[str, Any]:
    """A launcher pod from a fixture as the API shows it: named, created at `created`, maybe
    scheduled, in `phase`, maybe being deleted."""
    pod = load(fixture)
    pod["metadata"].pop("generateName", None)
    pod["metadata"].update(name=name, namespace=namespace, creationTimestamp=created)
    if node:
        pod["spec"]["nodeName"] = node
    else:
        pod["spec"].pop("nodeName", None)
    pod["status"] = {"phase": phase}
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-20T09:59:00Z"
    return pod


APPS = ["web", "api", "worker", "cache", "db", "ingest", "metrics", "search"]


def workload_pod(i: int, node: str) -> dict[str, Any]:
    """The `i`-th pod of some Deployment, as the API shows it: what the scheduler checks keep in
    memory. One in twenty has required anti-affinity (an HA pair), one in a hundred a host port."""
    app, namespace = APPS[i % len(APPS)], f"apps-{i % 50:02d}"
    name = f"{app}-{i:06d}-7d9f8b6c5d-x{i % 997:03d}"
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.UUID(int=i, version=4)),
                     "resourceVersion": "1", "creationTimestamp": STAMP,
                     "generateName": f"{app}-{i:06d}-7d9f8b6c5d-",
                     "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": f"{app}-{i % 40}",
                                "pod-template-hash": "7d9f8b6c5d"},
                     "annotations": {"kubectl.kubernetes.io/restartedAt": STAMP},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{i:06d}-7d9f8b6c5d",
                                          "uid": str(uuid.UUID(int=i + 1, version=4)), "controller": True}],
                     "managedFields": MANAGED},
        "spec": {"nodeName": node, "serviceAccountName": app, "restartPolicy": "Always",
                 "containers": [{"name": app, "image": f"registry.example/{app}:1.{i % 9}",
                                 "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                               "limits": {"cpu": "1", "memory": "512Mi"}},
                                 "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                                   "readOnly": True}]}],
                 "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300}]},
        "status": {"phase": "Running", "podIP": f"10.42.{i // 250 % 250}.{i % 250}", "hostIP": "192.168.1.10",
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]},
    }
    if i % 20 == 0:
        pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app.kubernetes.io/instance": f"{app}-{i % 40}"}},
             "topologyKey": "kubernetes.io/hostname"}]}}
    if i % 100 == 0:
        pod["spec"]["containers"][0]["ports"].append({"containerPort": 9100, "hostPort": 9100, "protocol": "TCP"})
    return pod


def review(obj: Any, namespace: str = VM_NS, operation: str = "CREATE", kind: str = "Pod", uid: str = "uid-1") -> dict[str, Any]:
    """The AdmissionReview the apiserver sends about `obj`."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "name": "",
            "operation": operation,
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


# --------------------------------------------------------------------------- KubeVirt


def vmi(name: str, node: str | None, *claims: str, namespace: str = VM_NS, uid: str | None = None,
        opted_in: bool = True, migratable: bool = True, keep: str | None = None, migrated_from: str | None = None,
        migration_end: str | None = None, machine: str = machine_type(NEW_CPU)) -> dict[str, Any]:
    """A running VirtualMachineInstance as virt-controller and virt-handler write it (KubeVirt
    1.8; tests/fixtures/kubevirt-1.8/vmi-running.yaml), each claim a disk: a host-model CPU,
    machine type q35, which the QEMU of the node it started on resolved to `machine`
    (status.machine.type). With `migrated_from` or `migration_end`, its last live migration
    brought it from that node (a drain; "node-x" when not said) and ended then (STAMP when not said)."""
    uid = uid or f"uid-{name}"
    annotations = {"kubevirt.io/latest-observed-api-version": "v1", "kubevirt.io/storage-observed-api-version": "v1",
                   "kubevirt.io/vm-generation": "1"}
    if opted_in:
        annotations["kubevirt-scheduler/co-schedule"] = "true"
    if keep is not None:
        annotations["kubevirt-scheduler/keep"] = keep
    pod_uid = str(uuid.UUID(int=random.Random(uid).getrandbits(128), version=4))
    disks = [{"name": f"disk{i}", "disk": {"bus": "virtio"}, **({"bootOrder": 1} if i == 0 else {})}
             for i in range(len(claims))] + [{"name": "cloudinitdisk", "disk": {"bus": "virtio"}}]
    volumes = [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    volumes.append({"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": f"#cloud-config\nhostname: {name}\n"}})
    conditions = [
        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP},
        {"type": "LiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
        if migratable else
        {"type": "LiveMigratable", "status": "False", "lastProbeTime": None, "lastTransitionTime": STAMP,
         "reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI: PVC vm-local is not shared"},
        {"type": "StorageLiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP},
        {"type": "AgentConnected", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP},
    ]
    obj: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1", "generation": 12,
            "creationTimestamp": STAMP,
            "labels": {"kubevirt.io/nodeName": node, "kubevirt.io/vm": name, "vm.kubevirt.io/name": name},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
                                 "uid": str(uuid.UUID(int=random.Random(name).getrandbits(128), version=4)),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"cores": 2, "sockets": 1, "threads": 1, "model": HOST_MODEL, "maxSockets": 4},
                "memory": {"guest": "2Gi", "maxGuest": "8Gi"},
                "devices": {"disks": disks, "interfaces": [{"name": "default", "masquerade": {},
                                                             "macAddress": "02:42:ac:11:00:02"}],
                            "rng": {}},
                "features": {"acpi": {"enabled": True}},
                "firmware": {"uuid": str(uuid.UUID(int=random.Random(f"fw-{uid}").getrandbits(128), version=4)),
                             "serial": uid},
                "machine": {"type": MACHINE_ALIAS},
                "resources": {"requests": {"memory": "2Gi"}},
            },
            "evictionStrategy": "LiveMigrate",
            "networks": [{"name": "default", "pod": {}}],
            "nodeSelector": {SCHEDULABLE: "true"},
            "terminationGracePeriodSeconds": 180,
            "volumes": volumes,
        },
        "status": {
            "phase": "Running", "nodeName": node, "qosClass": "Burstable",
            "activePods": {pod_uid: node},
            "conditions": conditions,
            "currentCPUTopology": {"cores": 2, "sockets": 1, "threads": 1},
            "guestOSInfo": {"id": "ubuntu", "kernelRelease": "6.8.0-45-generic", "name": "Ubuntu",
                            "prettyName": "Ubuntu 24.04.1 LTS", "version": "24.04", "versionId": "24.04"},
            "interfaces": [{"name": "default", "interfaceName": "enp1s0", "infoSource": "domain, guest-agent",
                            "ipAddress": "10.0.2.2", "ipAddresses": ["10.0.2.2"], "mac": "02:42:ac:11:00:02",
                            "podInterfaceName": "eth0", "queueCount": 1, "linkState": "up"}],
            "launcherContainerImageVersion": "quay.io/kubevirt/virt-launcher:v1.8.2",
            "machine": {"type": machine},
            "memory": {"guestAtBoot": "2Gi", "guestCurrent": "2Gi", "guestRequested": "2Gi"},
            "migrationMethod": "LiveMigration", "migrationTransport": "Unix",
            "phaseTransitionTimestamps": [{"phase": p, "phaseTransitionTimestamp": STAMP}
                                          for p in ("Pending", "Scheduling", "Scheduled", "Running")],
            "selinuxContext": "system_u:object_r:container_file_t:s0:c120,c845",
            "virtualMachineRevisionName": f"revision-start-vm-{uid}-1",
            "volumeStatus": [{"name": v["name"], "target": f"vd{chr(97 + i)}",
                              **({"persistentVolumeClaimInfo": {
                                  "accessModes": ["ReadWriteMany"], "capacity": {"storage": "20Gi"},
                                  "claimName": v["persistentVolumeClaim"]["claimName"],
                                  "filesystemOverhead": "0.055", "requests": {"storage": "20Gi"},
                                  "volumeMode": "Filesystem"}} if "persistentVolumeClaim" in v else {"size": 1048576})}
                             for i, v in enumerate(volumes)],
        },
    }
    if migrated_from or migration_end:
        migration_end = migration_end or STAMP
        obj["status"]["migrationState"] = {
            "migrationUid": str(uuid.UUID(int=random.Random(f"m-{uid}").getrandbits(128), version=4)),
            "sourceNode": migrated_from or "node-x", "targetNode": node, "targetPod": f"virt-launcher-{name}-drain",
            "startTimestamp": migration_end, "endTimestamp": migration_end, "completed": True, "mode": "PreCopy",
            "migrationConfiguration": {"allowAutoConverge": False, "bandwidthPerMigration": "0Mi",
                                       "completionTimeoutPerGiB": 150, "parallelMigrationsPerCluster": 5,
                                       "progressTimeout": 150},
        }
    return obj


def placement(machine: str, cpu_model: str = HOST_MODEL) -> dict[str, Any]:
    """What virt-controller reads of a VMI like `vmi()`'s to place its pods: its nodeSelector,
    architecture, CPU model and machine type (spec), and the machine type it runs (status)."""
    return {"spec": {"architecture": "amd64", "nodeSelector": {SCHEDULABLE: "true"},
                     "domain": {"cpu": {"model": cpu_model}, "machine": {"type": MACHINE_ALIAS}}},
            "status": {"machine": {"type": machine}}}


def launcher_node_selector(vmi_obj: dict[str, Any]) -> dict[str, str]:
    """The nodeSelector virt-controller renders for the VM's pod (kubevirt/kubevirt
    pkg/virt-controller/services/nodeselectorrenderer.go): kubevirt.io/schedulable, the
    architecture, the VMI's own nodeSelector, the machine type as the VM asks for it (the alias),
    a named CPU model (not host-model: that one is an affinity against obsolete host models)."""
    spec = vmi_obj.get("spec") or {}
    domain = spec.get("domain") or {}
    selector = {SCHEDULABLE: "true"}
    if spec.get("architecture"):
        selector[ARCH] = str(spec["architecture"]).lower()
    selector |= spec.get("nodeSelector") or {}
    model = (domain.get("cpu") or {}).get("model")
    if model and model not in (HOST_MODEL, "host-passthrough"):
        selector[CPU_MODEL + model] = "true"
    machine = (domain.get("machine") or {}).get("type")
    if machine:
        selector[MACHINE_TYPE + machine] = "true"
    return selector


def migration_node_selector(vmi_obj: dict[str, Any], pod_selector: dict[str, str], source_labels: dict[str, str],
                            added: dict[str, str] | None = None) -> dict[str, str]:
    """The nodeSelector of the pod virt-controller creates to migrate the VM away from the node
    labelled `source_labels`, its current pod selecting `pod_selector` (kubevirt/kubevirt
    pkg/virt-controller/watch/migration/migration.go, createTargetPod and
    prepareNodeSelectorForHostCpuModel): rendered from the VMI again with the machine type it
    runs (the canonical one, for the alias); for a host-model CPU the CPU keys the current pod
    carries when it was a migration target already, else cpu-model-migration.node.kubevirt.io/
    of the source's host model and cpu-feature.node.kubevirt.io/ per feature that host model
    requires; the source's CPU vendor; the migration's addedNodeSelector under it all.
    ValueError when the source node has no host-model label (KubeVirt fails the migration)."""
    selector = launcher_node_selector(vmi_obj)
    running = ((vmi_obj.get("status") or {}).get("machine") or {}).get("type")
    if running:
        for key in [k for k in selector if k.startswith(MACHINE_TYPE)]:
            del selector[key]
        selector[MACHINE_TYPE + running] = "true"
    cpu = ((vmi_obj.get("spec") or {}).get("domain") or {}).get("cpu") or {}
    if cpu.get("model") == HOST_MODEL:
        earlier = {k: v for k, v in pod_selector.items() if CPU_FEATURE in k or MIGRATION_CPU in k}
        if earlier:
            selector |= earlier
        else:
            models = [k for k in source_labels if k.startswith(HOST_MODEL_CPU)]
            if not models:
                raise ValueError(f"the source node has no {HOST_MODEL_CPU}* label")
            selector[MIGRATION_CPU + models[0][len(HOST_MODEL_CPU):]] = source_labels[models[0]]
            selector |= {CPU_FEATURE + k[len(HOST_MODEL_FEATURE):]: v for k, v in source_labels.items()
                         if k.startswith(HOST_MODEL_FEATURE)}
    if not any(k.startswith(CPU_VENDOR) for k in selector):
        selector |= {k: "true" for k in source_labels if k.startswith(CPU_VENDOR)}
    for key, value in (added or {}).items():
        selector.setdefault(key, value)
    return selector


def launcher_pod_of(vmi_obj: dict[str, Any], node: str | None = None, *, name: str | None = None,
                    started: str | None = None, migration_uid: str | None = None, migration_name: str | None = None,
                    node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """The VMI's virt-launcher pod on `node` (the VMI's node by default; a migration target when
    `migration_uid` is given, of the migration `migration_name` when given: its annotation
    kubevirt.io/migrationJobName), running since `started` (three days ago by default), selecting
    nodes as `node_selector` says (by default as virt-controller renders the pod of a VM started
    from `vmi_obj`: `launcher_node_selector`; a migration target selects as
    `migration_node_selector` says)."""
    meta = vmi_obj["metadata"]
    node = node or vmi_obj["status"]["nodeName"]
    started = started or ago(days=3)
    claims = [v["persistentVolumeClaim"]["claimName"] for v in vmi_obj["spec"]["volumes"] if "persistentVolumeClaim" in v]
    pod = running_vm(meta["name"], node, *claims, namespace=meta["namespace"], uid=meta["uid"],
                     opted_in="kubevirt-scheduler/co-schedule" in meta.get("annotations", {}))
    pod["metadata"].pop("generateName", None)
    pod["metadata"].update(name=name or pod["metadata"]["name"], creationTimestamp=started,
                           uid=str(uuid.UUID(int=random.Random(name or meta["uid"]).getrandbits(128), version=4)))
    labels = pod["metadata"]["labels"]
    labels["kubevirt.io/nodeName"] = node
    pod["spec"]["nodeSelector"] = dict(node_selector) if node_selector is not None else launcher_node_selector(vmi_obj)
    if migration_uid:  # a migration target: labelled for life, and kept off the node of the VMI's other pods
        labels["kubevirt.io/migrationJobUID"] = migration_uid
        pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": meta["uid"]}},
             "topologyKey": "kubernetes.io/hostname"}]}
        if migration_name:
            pod["metadata"]["annotations"]["kubevirt.io/migrationJobName"] = migration_name
    pod["metadata"]["ownerReferences"][0].update(name=meta["name"], uid=meta["uid"])
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}  # started: creationTimestamp
    return pod


def migration(name: str, vmi_name: str, *, phase: str = "Running", ours: bool = False, created: str | None = None,
              namespace: str = VM_NS) -> dict[str, Any]:
    """A VirtualMachineInstanceMigration, someone else's unless `ours`."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created or ago(minutes=1),
                     "labels": {"app.kubernetes.io/managed-by": "kubevirt-colocate"} if ours else {}},
        "spec": {"vmiName": vmi_name},
        "status": {"phase": phase},
    }


VIRT_CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"  # the account virt-controller runs as


def evacuation(vmi_name: str, node: str, *, namespace: str = VM_NS, priority: str = "system-critical",
               added: dict[str, str] | None = None) -> dict[str, Any]:
    """A drain's migration as KubeVirt 1.9's evacuation controller creates it
    (pkg/virt-controller/watch/drain/evacuation/evacuation.go, `GenerateNewMigration`): no name yet,
    generateName kubevirt-evacuation-, the annotation naming the node it leaves, spec.priority
    system-critical (system-maintenance for the descheduler's), no addedNodeSelector (`added`: one anyway)."""
    spec: dict[str, Any] = {"vmiName": vmi_name, "priority": priority}
    if added is not None:
        spec["addedNodeSelector"] = dict(added)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-evacuation-", "namespace": namespace,
                         "annotations": {"kubevirt.io/evacuationMigration": node}},
            "spec": spec}


def migration_review(obj: Any, user: str = VIRT_CONTROLLER, namespace: str = VM_NS, operation: str = "CREATE",
                     uid: str = "uid-1") -> dict[str, Any]:
    """The AdmissionReview the apiserver sends about a migration created by `user`."""
    found = review(obj, namespace, operation, "VirtualMachineInstanceMigration", uid)
    request = found["request"]
    request["kind"] = {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstanceMigration"}
    request["resource"] = {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstancemigrations"}
    request["userInfo"] = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    return found
