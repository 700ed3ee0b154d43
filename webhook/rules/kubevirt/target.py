"""The pod KubeVirt will create for a migration, so the keeper judges the target node by it.

virt-controller renders it from the VMI, not as the launcher pod again, adding what the source node
and the running VM require (kubevirt/kubevirt `pkg/virt-controller/watch/migration/migration.go`:
`createTargetPod`, `prepareNodeSelectorForHostCpuModel`, `getCPUVendorLabelKey`;
`pkg/virt-controller/services/nodeselectorrenderer.go`):
- the VM's own nodeSelector, affinity and tolerations, as on the launcher pod;
- the machine type as `machine-type.node.kubevirt.io/<vmi.status.machine.type>` (canonical,
  e.g. `pc-q35-rhel9.6.0`, where the launcher pod had the alias `q35`), else
  `spec.domain.machine.type`, else no machine-type selector at all
  (`pkg/virt-controller/services/template.go`, `newNodeSelectorRenderer`);
- for a `host-model` CPU: `cpu-model-migration.node.kubevirt.io/<model>` from the source
  node's `host-model-cpu.node.kubevirt.io/<model>` label, and
  `cpu-feature.node.kubevirt.io/<f>` per `host-model-required-features.node.kubevirt.io/<f>`
  label; a VM that migrated before keeps the ones its current pod carries instead;
- the source node's `cpu-vendor.node.kubevirt.io/<vendor>` unless the pod names a vendor;
- `spec.addedNodeSelector` under all of it (the VM's own selectors win on a clash);
- a required anti-affinity to the VMI's own pods (`kubevirt.io/created-by`) per hostname.
Nodes carry those labels from virt-handler's node labeller: on a cluster of mixed CPU generations
or QEMU versions a node can take the VM's new pod and not its migration. Pure: the launcher pod as
KubeVirt created it is `lookup.resolve.migration_target_pod`'s to make.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from ... import kinds
from ...kinds import (CPU_FEATURE, CPU_VENDOR, HOST_MODEL, HOST_MODEL_CPU, HOST_MODEL_FEATURE, MACHINE_TYPE,
                      MIGRATION_CPU, REQUIRED, STATUS_MACHINE)
from .pods import as_started, own_pods


# Why KubeVirt requires a label of the target node (the words of a hold's reason).
FROM_MACHINE = "machine type of the running VM"
FROM_SPEC_MACHINE = "machine type of the VM's spec"
FROM_HOST_MODEL = "host-model CPU of the source node"
FROM_HOST_FEATURE = "CPU feature of the source node's host model"
FROM_EARLIER = "CPU the VM has kept since an earlier migration"
FROM_VENDOR = "CPU vendor of the source node"
FROM_ADDED = "the migration's addedNodeSelector"
# The order a hold names a missing label in: the CPU first, the most telling reason.
_FIRST = (FROM_HOST_MODEL, FROM_EARLIER, FROM_VENDOR, FROM_HOST_FEATURE, FROM_MACHINE, FROM_SPEC_MACHINE, FROM_ADDED)


class Vmi(Protocol):
    """What the target pod is rendered from of the VMI (the keeper reads it: `rules.keeping.running.VmiView`)."""

    @property
    def uid(self) -> str: ...
    @property
    def node(self) -> str | None: ...  # status.nodeName: the source node
    @property
    def node_selector(self) -> dict[str, Any]: ...  # the VMI's own spec.nodeSelector
    @property
    def cpu_model(self) -> str: ...
    @property
    def machine_type(self) -> str: ...
    @property
    def machine_from(self) -> str: ...  # kinds.STATUS_MACHINE, kinds.SPEC_MACHINE or ""


class TargetUnknown(str):
    """The target pod cannot be built from what the cluster shows: hold, and say what is missing."""


@dataclasses.dataclass(frozen=True, slots=True)
class TargetPod:
    """The migration target pod (for the never-strand checks), and why each node label it
    requires beyond the launcher pod's own is required."""

    pod: dict[str, Any]
    required: dict[str, str]  # nodeSelector key -> where the requirement comes from
    # (key, value, where it comes from) of each required label, in the order `lacking` names them: a
    # drain's share-manager asks it of every node.
    wanted: tuple[tuple[str, Any, str], ...] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        selector = kinds.spec(self.pod).get("nodeSelector") or {}
        order = sorted(self.required, key=lambda k: (_FIRST.index(self.required[k]), k))
        object.__setattr__(self, "wanted", tuple((key, selector.get(key), self.required[key]) for key in order))


@dataclasses.dataclass(frozen=True, slots=True)
class SourceCpu:
    """What a target needs of the source node's CPU labels (virt-handler's node labeller), each kind
    the first by name: read once per version of the node (`source_cpu`), as the share-managers of a
    drain all render migrations off one node, whose labels run to a hundred or more."""

    host_model: tuple[str, str] | None  # (the model, as its host-model-cpu label names it; the label's value)
    features: tuple[tuple[str, str], ...]  # (feature, value) of each host-model-required-features label
    vendor: str | None  # its cpu-vendor label


def source_cpu(node: Mapping[str, Any]) -> SourceCpu:
    labels = kinds.labels(node)
    ordered = sorted(labels)
    model = next((k for k in ordered if k.startswith(HOST_MODEL_CPU)), None)
    return SourceCpu(
        host_model=None if model is None else (model[len(HOST_MODEL_CPU):], str(labels[model])),
        features=tuple((k[len(HOST_MODEL_FEATURE):], str(labels[k]))
                       for k in ordered if k.startswith(HOST_MODEL_FEATURE)),
        vendor=next((k for k in ordered if k.startswith(CPU_VENDOR)), None))


def target_pod(launcher: Mapping[str, Any], vmi: Vmi, source: Mapping[str, Any] | None,
               added: Mapping[str, str], cpu: SourceCpu | None = None) -> TargetPod | TargetUnknown:
    """The pod virt-controller will create to migrate `vmi` off its node (`source`) with `spec.addedNodeSelector`
    `added`, from the VM's launcher pod without our pin; `cpu`: `source_cpu(source)`, when the caller keeps it."""
    source_name = vmi.node or "(none)"
    if source is None:
        return TargetUnknown(f"source node {source_name} is not known")
    if cpu is None:
        cpu = source_cpu(source)
    pod = dict(as_started(dict(launcher), vmi.node_selector))  # the launcher itself is never changed:
    spec = pod["spec"] = dict(kinds.spec(pod))  # only the spec's own members are replaced below
    selector = spec.get("nodeSelector")
    selector = dict(selector) if isinstance(selector, dict) else {}
    required: dict[str, str] = {}

    # The machine type as the running VM reports it, not the alias the launcher pod was made with;
    # else the spec's; a VMI with neither gets no machine-type selector.
    for key in [k for k in selector if k.startswith(MACHINE_TYPE) and k not in vmi.node_selector]:
        del selector[key]
    if vmi.machine_type:
        key = MACHINE_TYPE + vmi.machine_type
        selector[key] = "true"
        required[key] = FROM_MACHINE if vmi.machine_from == STATUS_MACHINE else FROM_SPEC_MACHINE

    if vmi.cpu_model == HOST_MODEL:
        unknown = _host_model_cpu(selector, required, cpu, source_name)
        if unknown is not None:
            return unknown

    if cpu.vendor is not None and not any(k.startswith(CPU_VENDOR) for k in selector):
        selector[cpu.vendor] = "true"
        required[cpu.vendor] = FROM_VENDOR

    for key, value in added.items():
        if key not in selector:
            selector[key] = value
            required[key] = FROM_ADDED
    spec["nodeSelector"] = selector
    _apart_from_own_pods(spec, vmi.uid)
    return TargetPod(pod, required)


def _host_model_cpu(selector: dict[str, Any], required: dict[str, str], cpu: SourceCpu,
                    source_name: str) -> TargetUnknown | None:
    """A host-model CPU: the selector of an earlier migration, else the source node's host-model
    CPU and features as virt-handler labels them (added to `selector` and `required`)."""
    earlier = {k: v for k, v in selector.items() if CPU_FEATURE in k or MIGRATION_CPU in k}
    if earlier:
        required.update((k, FROM_EARLIER) for k in earlier)
        return None
    if cpu.host_model is None:
        return TargetUnknown(f"source node {source_name} has no {HOST_MODEL_CPU}* label (virt-handler's node "
                          f"labeller): cannot tell the host-model CPU its target needs")
    model, value = cpu.host_model
    selector[MIGRATION_CPU + model] = value
    required[MIGRATION_CPU + model] = FROM_HOST_MODEL
    for feature, value in cpu.features:
        selector[CPU_FEATURE + feature] = value
        required[CPU_FEATURE + feature] = FROM_HOST_FEATURE
    return None


def _apart_from_own_pods(spec: dict[str, Any], vmi_uid: str) -> None:
    """The required anti-affinity every migration target gets: not beside the VMI's own pods."""
    if not vmi_uid:
        return
    term = {"labelSelector": own_pods(vmi_uid), "topologyKey": kinds.HOSTNAME_LABEL}
    affinity = spec.get("affinity")
    affinity = spec["affinity"] = dict(affinity) if isinstance(affinity, dict) else {}
    anti = affinity.get("podAntiAffinity")
    anti = affinity["podAntiAffinity"] = dict(anti) if isinstance(anti, dict) else {}
    terms = anti.get(REQUIRED)
    anti[REQUIRED] = [*(terms if isinstance(terms, list) else ()), term]


def lacking(target: TargetPod, node_name: str, node: Mapping[str, Any] | None) -> str | None:
    """The first label KubeVirt will require of the target node that `node` lacks, in words."""
    if node is None:
        return None  # the node checks say so
    labels = kinds.labels(node)
    for key, value, where in target.wanted:
        if labels.get(key) != value:
            shown = key if value == "true" else f"{key}={value}"
            return f"node {node_name} lacks {shown} ({where})"
    return None
