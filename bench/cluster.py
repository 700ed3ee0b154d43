"""Synthetic Kubernetes objects shaped like those of a KubeVirt + Longhorn cluster."""
from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LONGHORN_NS = "longhorn-system"
EXAMPLE_REVIEW = Path(__file__).resolve().parent.parent / "examples" / "admission-review.json"
MANAGED = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/bind-completed": {}}},
                         "f:spec": {"f:volumeName": {}}, "f:status": {"f:phase": {}, "f:capacity": {}}}}]


def volume_name(i: int) -> str:
    """pvc-<uuid>, as the CSI provisioner names volumes (random, but the same on every run)."""
    return f"pvc-{uuid.UUID(int=random.Random(i).getrandbits(128), version=4)}"


def node_name(i: int, nodes: int) -> str:
    return f"node-{i % nodes:03d}"


def pvc(claim: str, namespace: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"},
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                     "pv.kubernetes.io/bound-by-controller": "yes",
                                     "volume.beta.kubernetes.io/storage-provisioner": "driver.longhorn.io",
                                     "volume.kubernetes.io/storage-provisioner": "driver.longhorn.io"},
                     "finalizers": ["kubernetes.io/pvc-protection"], "managedFields": copy.deepcopy(MANAGED)},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "longhorn-rwx", "volumeMode": "Filesystem",
                 "volumeName": volume, "resources": {"requests": {"storage": "20Gi"}}},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"], "capacity": {"storage": "20Gi"}},
    }


def pv(claim: str, namespace: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"pv.kubernetes.io/provisioned-by": "driver.longhorn.io",
                                     "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                     "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""},
                     "finalizers": ["kubernetes.io/pv-protection", "external-attacher/driver-longhorn-io"],
                     "managedFields": copy.deepcopy(MANAGED)},
        "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "20Gi"},
                 "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim,
                              "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "1"},
                 "csi": {"driver": "driver.longhorn.io", "fsType": "ext4", "volumeHandle": volume,
                         "volumeAttributes": {"dataLocality": "disabled", "fromBackup": "", "fsType": "ext4",
                                              "migratable": "false", "numberOfReplicas": "3",
                                              "share": "true", "staleReplicaTimeout": "30",
                                              "storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-driver.longhorn.io"}},
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "longhorn-rwx",
                 "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "lastPhaseTransitionTime": "2026-01-01T00:00:00Z"},
    }


def share_manager(volume: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager",
        "metadata": {"name": volume, "namespace": LONGHORN_NS, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                     "labels": {"longhorn.io/component": "share-manager", "longhorn.io/managed-by": "longhorn-manager"},
                     "finalizers": ["longhorn.io"],
                     "ownerReferences": [{"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "name": volume,
                                          "uid": str(uuid.uuid4())}]},
        "spec": {"image": "longhornio/longhorn-share-manager:v1.9.1"},
        "status": {"endpoint": f"nfs://10.43.0.1/{volume}", "ownerID": node, "state": "running"},
    }


def share_manager_pod(volume: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"share-manager-{volume}", "namespace": LONGHORN_NS, "uid": str(uuid.uuid4()),
                     "resourceVersion": "1",
                     "labels": {"longhorn.io/component": "share-manager", "longhorn.io/managed-by": "longhorn-manager",
                                "longhorn.io/share-manager": volume},
                     "annotations": {"longhorn.io/last-applied-tolerations": "[]"},
                     "ownerReferences": [{"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager", "name": volume,
                                          "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": {"nodeName": node, "serviceAccountName": "longhorn-service-account", "priorityClassName": "longhorn-critical",
                 "containers": [{"name": "share-manager", "image": "longhornio/longhorn-share-manager:v1.9.1",
                                 "args": ["--debug", "daemon", "--volume", volume],
                                 "env": [{"name": "NFS_LOG_LEVEL", "value": "INFO"}],
                                 "securityContext": {"privileged": True},
                                 "volumeMounts": [{"name": "host-dev", "mountPath": "/dev"},
                                                  {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True}]}],
                 "volumes": [{"name": "host-dev", "hostPath": {"path": "/dev"}},
                             {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}]},
        "status": {"phase": "Running", "podIP": "10.42.0.10", "hostIP": "192.168.1.10",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def virt_launcher_pod(vm: str, namespace: str, claims: list[str], node: str) -> dict[str, Any]:
    review = json.loads(EXAMPLE_REVIEW.read_text())
    pod = review["request"]["object"]
    vmi_uid = str(uuid.uuid4())
    pod["metadata"].update(name=f"virt-launcher-{vm}-abcde", namespace=namespace, uid=str(uuid.uuid4()),
                           resourceVersion="1")
    pod["metadata"]["labels"].update({"vm.kubevirt.io/name": vm, "kubevirt.io/vm": vm, "vmi.kubevirt.io/id": vm,
                                      "kubevirt.io/created-by": vmi_uid})
    pod["metadata"]["ownerReferences"][0].update(name=vm, uid=vmi_uid)
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    pod["spec"]["volumes"] += [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    pod["spec"]["nodeName"] = node
    pod["spec"]["nodeSelector"] = {SCHEDULABLE: "true", ARCH: "amd64", MACHINE_TYPE + MACHINE_ALIAS: "true"}
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


# CPU generations as virt-handler's node labeller labels their nodes (kubevirt/kubevirt
# pkg/virt-handler/node-labeller): the host-model CPU and the features it requires, the models a
# migration target may select, the vendor, and the machine types of the node's QEMU (the alias
# first, then the canonical ones, newest first). The same shapes as tests/kube.py.
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


def machine_type(cpu: str) -> str:
    """The canonical machine type a VM started on a node of generation `cpu` runs with: what the
    alias resolves to in that node's QEMU (its newest)."""
    return CPU_GENERATIONS[cpu]["machines"][1]


def node(name: str, cpu: str | None = NEW_CPU) -> dict[str, Any]:
    """A Ready KubeVirt node, labelled by virt-handler's node labeller for CPU generation `cpu`."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, ARCH: "amd64",
                                              "kubernetes.io/os": "linux", SCHEDULABLE: "true", **labeller(cpu)}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "allocatable": {"cpu": "63800m", "memory": "250Gi", "ephemeral-storage": "900Gi", "pods": "1000",
                                   "devices.kubevirt.io/kvm": "1k"}},
    }


APPS = ["web", "api", "worker", "cache", "db", "ingest", "metrics", "search"]


def other_pod(i: int, node: str) -> dict[str, Any]:
    """A pod of some Deployment, as the API shows it: what the scheduler checks keep in memory.
    One in twenty has required anti-affinity (an HA pair), one in a hundred a host port."""
    app, namespace = APPS[i % len(APPS)], f"apps-{i % 50:02d}"
    name = f"{app}-{i:06d}-7d9f8b6c5d-x{i % 997:03d}"
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.UUID(int=i, version=4)),
                     "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "generateName": f"{app}-{i:06d}-7d9f8b6c5d-",
                     "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": f"{app}-{i % 40}",
                                "pod-template-hash": "7d9f8b6c5d"},
                     "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
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


def cluster(pvcs: int, share_managers: int, pods: int, nodes: int = 20, other_pods: int = 0) -> Iterator[dict[str, Any]]:
    """`pvcs` bound Longhorn claims (each with its PV); the first `share_managers` volumes are
    shared, each with a ShareManager and, for half of `pods`, a share-manager pod; the other
    half are virt-launcher pods mounting two claims each; and `other_pods` pods of other
    workloads spread over the nodes."""
    for i in range(nodes):
        yield node(node_name(i, nodes))
    for i in range(pvcs):
        namespace, claim, volume = f"vms-{i % 100:02d}", f"disk-{i:06d}", volume_name(i)
        yield pvc(claim, namespace, volume)
        yield pv(claim, namespace, volume)
        if i < share_managers:
            yield share_manager(volume, node_name(i, nodes))
        if i < min(share_managers, pods // 2):
            yield share_manager_pod(volume, node_name(i, nodes))
    for j in range(pods - min(share_managers, pods // 2)):
        a = j % max(1, pvcs - 100)
        b = a + 100 if a + 100 < pvcs else a  # same namespace (i % 100)
        yield virt_launcher_pod(f"vm-{j:06d}", f"vms-{a % 100:02d}", [f"disk-{a:06d}", f"disk-{b:06d}"], node_name(j, nodes))
    for k in range(other_pods):
        yield other_pod(k, node_name(k, nodes))


def two_disk_review(namespace: str, claims: list[str], uid: str = "bench") -> dict[str, Any]:
    """The example AdmissionReview (a virt-launcher pod being created) with two RWX disks."""
    review = json.loads(EXAMPLE_REVIEW.read_text())
    pod = review["request"]["object"]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    pod["spec"]["volumes"] += [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    review["request"].update(uid=uid, namespace=namespace)
    return review


# --------------------------------------------------------------------------- KubeVirt

STAMP = "2026-01-01T00:00:00Z"


def vmi(name: str, namespace: str, claims: list[str], node: str, uid: str, *, opted_in: bool = True,
        migratable: bool = True, keep: str | None = None, migrated_from: str | None = None,
        migration_end: str = STAMP, machine: str = machine_type(NEW_CPU)) -> dict[str, Any]:
    """A running VirtualMachineInstance as virt-controller and virt-handler write it (the shape of
    tests/fixtures/vmi-migrated.yaml, with the status fields a real one carries), each claim a
    disk: a host-model CPU, machine type q35, which the QEMU of the node it started on resolved
    to `machine` (status.machine.type). With `migrated_from`, its last live migration brought it
    from that node (a drain)."""
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
         "reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI: PVC scratch is not shared"},
        {"type": "StorageLiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP},
        {"type": "AgentConnected", "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP},
    ]
    obj: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1", "generation": 12,
            "creationTimestamp": STAMP,
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize", "foregroundDeleteVirtualMachine"],
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
    if migrated_from:
        obj["status"]["migrationState"] = {
            "migrationUid": str(uuid.UUID(int=random.Random(f"m-{uid}").getrandbits(128), version=4)),
            "sourceNode": migrated_from, "targetNode": node, "targetPod": f"virt-launcher-{name}-drain",
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


def launcher_pod_of(vmi_obj: dict[str, Any], node: str, *, name: str | None = None, started: str = STAMP,
                    migration_uid: str | None = None, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """The VMI's virt-launcher pod on `node` (a migration target when `migration_uid` is given),
    running since `started`, selecting nodes as `node_selector` says (by default as virt-controller
    renders the pod of a VM started from `vmi_obj`: `launcher_node_selector`; a migration target
    selects as `migration_node_selector` says)."""
    meta = vmi_obj["metadata"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in vmi_obj["spec"]["volumes"] if "persistentVolumeClaim" in v]
    pod = virt_launcher_pod(meta["name"], meta["namespace"], claims, node)
    pod["metadata"].update(name=name or f"virt-launcher-{meta['name']}-abcde", creationTimestamp=started,
                           uid=str(uuid.UUID(int=random.Random(name or meta["uid"]).getrandbits(128), version=4)))
    labels = pod["metadata"]["labels"]
    labels.update({"kubevirt.io/created-by": meta["uid"], "kubevirt.io/nodeName": node})
    if "kubevirt-scheduler/co-schedule" not in meta.get("annotations", {}):
        pod["metadata"]["annotations"].pop("kubevirt-scheduler/co-schedule", None)
    pod["spec"]["nodeSelector"] = dict(node_selector) if node_selector is not None else launcher_node_selector(vmi_obj)
    if migration_uid:  # a migration target: labelled for life, and kept off the node of the VMI's other pods
        labels["kubevirt.io/migrationJobUID"] = migration_uid
        pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": meta["uid"]}},
             "topologyKey": "kubernetes.io/hostname"}]}
    pod["metadata"]["ownerReferences"][0].update(name=meta["name"], uid=meta["uid"])
    pod["status"] = {"phase": "Running", "startTime": started, "conditions": [{"type": "Ready", "status": "True"}]}
    return pod
