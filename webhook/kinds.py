"""Every resource, label and annotation the project reads or writes, defined once (sources: KubeVirt
`pkg/virt-controller/services/template.go`, longhorn-manager `controller/share_manager_controller.go`)."""
from __future__ import annotations

import dataclasses
import re
import urllib.parse
from typing import Any


@dataclasses.dataclass(frozen=True)
class Resource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The API path; names are escaped, so a name from a pod can never step into another path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        return f"{base}/{_segment(name)}" if name else base


class BadName(ValueError):
    """A name that must never be put into an API path ('.' or '..')."""


def _segment(value: str) -> str:
    if value in (".", ".."):
        raise BadName(f"{value!r} is not an object name")
    return urllib.parse.quote(value, safe="")


# Kubernetes names: a namespace is a DNS-1123 label; PVCs, PVs, pods, nodes and most objects are named
# by DNS-1123 subdomains; an annotation key is an optional subdomain and '/', then a name of at most 63.
DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
DNS_SUBDOMAIN = re.compile(rf"(?=.{{1,253}}$){_SUBDOMAIN}")
QUALIFIED_NAME = re.compile(rf"(?:(?=.{{1,253}}/){_SUBDOMAIN}/)?"
                            r"(?=.{1,63}$)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


def valid_name(name: object) -> bool:
    return isinstance(name, str) and DNS_SUBDOMAIN.fullmatch(name) is not None


# --------------------------------------------------------------------------- resources

PVC = Resource(kind="PersistentVolumeClaim", group="", version="v1", plural="persistentvolumeclaims", namespaced=True)
PV = Resource(kind="PersistentVolume", group="", version="v1", plural="persistentvolumes", namespaced=False)
POD = Resource(kind="Pod", group="", version="v1", plural="pods", namespaced=True)
NODE = Resource(kind="Node", group="", version="v1", plural="nodes", namespaced=False)
EVENT = Resource(kind="Event", group="", version="v1", plural="events", namespaced=True)
SECRET = Resource(kind="Secret", group="", version="v1", plural="secrets", namespaced=True)
MUTATING_WEBHOOK = Resource(kind="MutatingWebhookConfiguration", group="admissionregistration.k8s.io", version="v1",
                            plural="mutatingwebhookconfigurations", namespaced=False)
# Longhorn serves only v1beta2 since 1.9/1.10 (longhorn-manager k8s/crds.yaml).
SHARE_MANAGER = Resource(kind="ShareManager", group="longhorn.io", version="v1beta2", plural="sharemanagers",
                         namespaced=True)
# Read by `explain` and `status` only (the I/O path), with the admin's credentials.
LONGHORN_VOLUME = Resource(kind="Volume", group="longhorn.io", version="v1beta2", plural="volumes", namespaced=True)
LONGHORN_REPLICA = Resource(kind="Replica", group="longhorn.io", version="v1beta2", plural="replicas", namespaced=True)
LONGHORN_SETTING = Resource(kind="Setting", group="longhorn.io", version="v1beta2", plural="settings", namespaced=True)
VM = Resource(kind="VirtualMachine", group="kubevirt.io", version="v1", plural="virtualmachines", namespaced=True)
VMI = Resource(kind="VirtualMachineInstance", group="kubevirt.io", version="v1", plural="virtualmachineinstances",
               namespaced=True)
VMIM = Resource(kind="VirtualMachineInstanceMigration", group="kubevirt.io", version="v1",
                plural="virtualmachineinstancemigrations", namespaced=True)
LEASE = Resource(kind="Lease", group="coordination.k8s.io", version="v1", plural="leases", namespaced=True)
# The keeper's state (`rules.keeping.record`): one ConfigMap beside its Lease.
CONFIGMAP = Resource(kind="ConfigMap", group="", version="v1", plural="configmaps", namespaced=True)
# Read by `status` alone.
DEPLOYMENT = Resource(kind="Deployment", group="apps", version="v1", plural="deployments", namespaced=True)
# What the admission rules read and a snapshot (`--state`) holds (VMIs one at a time: where a migration lands).
RULE_RESOURCES = (PVC, PV, POD, NODE, SHARE_MANAGER, VMI)

# --------------------------------------------------------------------------- KubeVirt

VIRT_LAUNCHER = ("kubevirt.io", "virt-launcher")  # label of every launcher pod
# Set on a migration target pod and never removed: "created as a target", not "not the VM's pod".
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
CREATED_BY_LABEL = "kubevirt.io/created-by"  # the VMI's uid, on each of its pods
# A launcher pod's `vm.kubevirt.io/name` is the VMI's hostname (spec.hostname, else its name up to
# the first dot), not its name: the VMI of a pod is its controlling ownerReference (`vmi_owner`).
VM_NAME_LABELS = ("vm.kubevirt.io/name", "kubevirt.io/vm")
# The temporary pod that triggers WaitForFirstConsumer provisioning: never touched.
EPHEMERAL_PROVISIONING = "kubevirt.io/ephemeral-provisioning"
KUBEVIRT_SCHEDULABLE = "kubevirt.io/schedulable"  # node label set by virt-handler
LIVE_MIGRATABLE = "LiveMigratable"  # VMI condition
PAUSED = "Paused"  # VMI condition
PAUSED_IO_ERROR = "PausedIOError"  # its reason (virt-handler's) when QEMU stopped the VM on a disk I/O error
# On a migration: how long KubeVirt lets its target pod stay unschedulable (default 5 minutes).
UNSCHEDULABLE_TIMEOUT_ANNOTATION = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
# Node labels of virt-handler's node labeller, which migration target pods select on
# (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go); each is a prefix.
HOST_MODEL_CPU = "host-model-cpu.node.kubevirt.io/"
HOST_MODEL_FEATURE = "host-model-required-features.node.kubevirt.io/"
MIGRATION_CPU = "cpu-model-migration.node.kubevirt.io/"
CPU_FEATURE = "cpu-feature.node.kubevirt.io/"
CPU_VENDOR = "cpu-vendor.node.kubevirt.io/"
MACHINE_TYPE = "machine-type.node.kubevirt.io/"
HOST_MODEL = "host-model"  # spec.domain.cpu.model: the host's CPU, as the node labeller names it
# Where virt-controller reads the machine type a VM's next pod selects nodes by, in order.
STATUS_MACHINE, SPEC_MACHINE = "status.machine.type", "spec.domain.machine.type"
# A drain's or an eviction's migration (pkg/virt-controller/watch/drain/evacuation/evacuation.go,
# `GenerateNewMigration`): generateName kubevirt-evacuation-, this annotation naming the node it
# leaves, spec.priority system-critical, or system-maintenance when the VMI's
# kubevirt.io/eviction-source is "descheduler" (KubeVirt >= 1.7; virt-handler removes that
# annotation from the VMI once the migration completes, so only the migration tells afterwards).
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"
DESCHEDULER_PRIORITY = "system-maintenance"
DRAIN_PRIORITY = "system-critical"
EVACUATION_PREFIX = "kubevirt-evacuation-"
# The account virt-controller runs as (`system:serviceaccount:<KubeVirt's namespace>:kubevirt-controller`):
# virt-api lets only it set spec.priority (migration-create-admitter.go, hasRequestOriginatedFromVirtController).
VIRT_CONTROLLER_ACCOUNT = "kubevirt-controller"
# spec.addedNodeSelector of a migration (KubeVirt >= 1.6): merged into its target pod's nodeSelector, the
# VM's own keys winning (pkg/virt-controller/watch/migration/migration.go, createTargetPod).
ADDED_NODE_SELECTOR = "addedNodeSelector"

# --------------------------------------------------------------------------- Longhorn

DEFAULT_LONGHORN_NAMESPACE = "longhorn-system"
DEFAULT_CSI_DRIVER = "driver.longhorn.io"
SHARE_MANAGER_COMPONENT = ("longhorn.io/component", "share-manager")
SHARE_MANAGER_VOLUME_LABEL = "longhorn.io/share-manager"  # value: the volume name
SHARE_MANAGER_POD_PREFIX = "share-manager-"  # + the volume name

# --------------------------------------------------------------------------- Kubernetes

HOSTNAME_LABEL = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"  # a node or pod (anti-)affinity's hard part
PREFERRED_TERMS = "preferredDuringSchedulingIgnoredDuringExecution"  # a node affinity's weighted terms
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"

# --------------------------------------------------------------------------- ours

COMPONENT = "kubevirt-colocate"
DEFAULT_OPT_IN = "kubevirt-scheduler/co-schedule"  # on the VM template; propagates to the pod
# On the VM template (so on the VMI): "false" keeps the keeper from ever migrating the VM.
KEEP_ANNOTATION = "kubevirt-scheduler/keep"
DEFAULT_DECISION_PREFIX = "kubevirt-scheduler/"  # decision, node, reason annotations on the pod
DECISION, NODE_KEY, REASON = "decision", "node", "reason"  # after the prefix; also audit annotation keys
# The decisions (values of DECISION) that add a required term: such a pod waits for a node we named
# (rules/placement/decide.py PINNED and AMONG; the caches index such pods for the stranded-pod report).
REQUIRING_DECISIONS = ("pinned", "pinned-among")
# After the prefix, on a migration of ours that recovers a VM from a stale NFS mount: what it is
# (RECOVERS_STALE_MOUNT); the evidence that the keeper may unpause the VM once the migration is done.
RECOVERS, RECOVERS_STALE_MOUNT = "recovers", "stale-mount"
# The apiserver caps all annotations of an object at 256 KiB; a reason naming many disks must not
# be the thing that makes a pod or a migration invalid.
MAX_REASON = 1024


def clip_reason(text: str, limit: int = MAX_REASON) -> str:
    """A reason annotation's value, cut to `limit` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- reading objects


def _object(obj: Any, key: str) -> dict[str, Any]:
    """`obj[key]` when both are objects, else {}: a malformed object reads as an empty one."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def meta(obj: Any) -> dict[str, Any]:
    return _object(obj, "metadata")


def labels(obj: Any) -> dict[str, Any]:
    return _object(meta(obj), "labels")


def labels_match(obj: Any, wanted: dict[str, str] | None) -> bool:
    """Whether `obj` carries every label of `wanted` (a label selector of exact values)."""
    have = labels(obj)
    return all(have.get(k) == v for k, v in (wanted or {}).items())


def annotations(obj: Any) -> dict[str, Any]:
    return _object(meta(obj), "annotations")


def spec(obj: Any) -> dict[str, Any]:
    return _object(obj, "spec")


def status(obj: Any) -> dict[str, Any]:
    return _object(obj, "status")


def pod_name(pod: Any) -> str:
    """The pod's name, else its generateName (a pod under creation may have only that), else "?"."""
    metadata = meta(pod)
    name = metadata.get("name") or metadata.get("generateName")
    return name if isinstance(name, str) else "?"


def is_launcher(pod: Any) -> bool:
    return labels(pod).get(VIRT_LAUNCHER[0]) == VIRT_LAUNCHER[1]


def controller(obj: Any, of_kinds: tuple[str, ...]) -> dict[str, Any] | None:
    """The object's controlling ownerReference, when it names an object of one of `of_kinds`."""
    refs = meta(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if (isinstance(ref, dict) and ref.get("kind") in of_kinds and ref.get("controller") is True
                and isinstance(ref.get("name"), str) and ref["name"]):
            return ref
    return None


def vmi_owner(pod: Any) -> dict[str, Any] | None:
    """The pod's controlling ownerReference of kind VirtualMachineInstance: the VMI it runs."""
    return controller(pod, (VMI.kind,))


def vm_name(pod: Any) -> str | None:
    """The name of the VMI a launcher pod runs (its controlling owner), never a label's."""
    return (vmi_owner(pod) or {}).get("name")


def terminating(obj: Any) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finished(pod: Any) -> bool:
    return status(pod).get("phase") in ("Succeeded", "Failed")


def is_ready(node: Any) -> bool:
    """The node's Ready condition is True (no condition: not Ready)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False
