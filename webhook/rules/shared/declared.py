"""What the rules read of the KubeVirt objects the keeper watches, and of pods' annotations, each declared once
(`declaring.Fields`, which the caches keep): a rule that starts reading a field or an annotation declares it here."""
from __future__ import annotations

from operator import attrgetter

from ... import kinds
from .declaring import Fields

_opt_in = attrgetter("opt_in_annotation")  # a key the settings name

# --------------------------------------------------------------------------- VirtualMachineInstance
# Admission reads the VM's disks (hotplugged ones included) and what its migration target pod is
# rendered from (`rules.kubevirt.target`); the keeper and `status` the rest. Every cache keeps it all.

VMI = Fields("VMI")
VMI_NAME = VMI.field("metadata.name")
VMI_NAMESPACE = VMI.field("metadata.namespace")
VMI_UID = VMI.field("metadata.uid")
VMI_OPT_IN = VMI.annotation(_opt_in)  # reached the VMI from the VM template
VMI_KEEP = VMI.annotation(kinds.KEEP_ANNOTATION)
# The descheduler's: a VM that nothing is to evict is held where it runs (rules/keeping/keep.py).
VMI_NO_EVICTION = VMI.annotation("descheduler.alpha.kubernetes.io/prefer-no-eviction")
VMI_SPEC = VMI.field("spec")
VMI_STATUS = VMI.field("status")
VMI_PHASE = VMI.field("status.phase")
VMI_NODE = VMI.field("status.nodeName")
EVACUATION_NODE = VMI.field("status.evacuationNodeName")  # virt-api's mark: a drain evacuates it
VMI_CONDITIONS = VMI.field("status.conditions[]")
CONDITION_TYPE = VMI.field("status.conditions[].type")
CONDITION_STATUS = VMI.field("status.conditions[].status")
CONDITION_REASON = VMI.field("status.conditions[].reason")
CONDITION_MESSAGE = VMI.field("status.conditions[].message")
CONDITION_SINCE = VMI.field("status.conditions[].lastTransitionTime")
VMI_MIGRATION = VMI.field("status.migrationState")
SOURCE_NODE = VMI.field("status.migrationState.sourceNode")
TARGET_NODE = VMI.field("status.migrationState.targetNode")
TARGET_POD = VMI.field("status.migrationState.targetPod")
ENDED = VMI.field("status.migrationState.endTimestamp")
COMPLETED = VMI.field("status.migrationState.completed")
FAILED = VMI.field("status.migrationState.failed")
MIGRATION_UID = VMI.field("status.migrationState.migrationUid")
FAILURE_REASON = VMI.field("status.migrationState.failureReason")  # libvirt's words, when one failed under way
STATUS_MACHINE = VMI.field("status.machine")
STATUS_MACHINE_TYPE = VMI.field("status.machine.type")
# The claims of its volumes (`rules.shared.facts.claims_of`): a DataVolume's PVC has its name.
# claims_of, which reads pods' volumes too, asks either source for either key (the other pair
# is never there: the schema has no such field).
VMI_CLAIMS = tuple(VMI.field(f"spec.volumes[].{source}.{key}")
                   for source in ("persistentVolumeClaim", "dataVolume") for key in ("claimName", "name"))
# Which of them are hotplugged (`virtctl addvolume`, or marked so in the VM): mounted by an attachment
# pod that the launcher pod owns, which Longhorn's remount deletes whatever its blacklist says.
VMI_HOTPLUGGABLE = tuple(VMI.field(f"spec.volumes[].{source}.hotpluggable")
                         for source in ("persistentVolumeClaim", "dataVolume"))
VMI_NODE_SELECTOR = VMI.field("spec.nodeSelector")
# Each disk's cache mode, by its volume: whether a migration off a stale NFS mount can finish (`rules.keeping.recovery`).
VMI_SPEC_VOLUMES = VMI.field("spec.volumes[]")
VOLUME_NAME = VMI.field("spec.volumes[].name")
DEVICES = VMI.field("spec.domain.devices")
DISKS = VMI.field("spec.domain.devices.disks[]")
DISK_NAME = VMI.field("spec.domain.devices.disks[].name")
DISK_CACHE = VMI.field("spec.domain.devices.disks[].cache")
DOMAIN = VMI.field("spec.domain")
CPU = VMI.field("spec.domain.cpu")
CPU_MODEL = VMI.field("spec.domain.cpu.model")
SPEC_MACHINE = VMI.field("spec.domain.machine")
SPEC_MACHINE_TYPE = VMI.field("spec.domain.machine.type")

# --------------------------------------------------------------------------- VirtualMachineInstanceMigration

VMIM = Fields("VMIM")
VMIM_NAME = VMIM.field("metadata.name")
VMIM_NAMESPACE = VMIM.field("metadata.namespace")
VMIM_UID = VMIM.field("metadata.uid")
VMIM_CREATED = VMIM.field("metadata.creationTimestamp")
VMIM_MANAGED_BY = VMIM.label(kinds.MANAGED_BY_LABEL)  # ours
VMIM_TARGET = VMIM.annotation(kinds.DEFAULT_DECISION_PREFIX + kinds.NODE_KEY)  # the node we asked for
VMIM_EVACUATION = VMIM.annotation(kinds.EVACUATION_ANNOTATION)  # a drain's or an eviction's
VMIM_RECOVERS = VMIM.annotation(kinds.DEFAULT_DECISION_PREFIX + kinds.RECOVERS)  # ours, recovering a stale mount
VMIM_SPEC = VMIM.field("spec")
VMI_NAME_OF = VMIM.field("spec.vmiName")
PRIORITY = VMIM.field("spec.priority")
# Where an evacuation was aimed (`rules.placement.aim`): the record the share-manager rule follows.
ADDED_NODE_SELECTOR = VMIM.field("spec.addedNodeSelector")
VMIM_STATUS = VMIM.field("status")
VMIM_PHASE = VMIM.field("status.phase")
TRANSITIONS = VMIM.field("status.phaseTransitionTimestamps[]")
TRANSITION_PHASE = VMIM.field("status.phaseTransitionTimestamps[].phase")
TRANSITION_AT = VMIM.field("status.phaseTransitionTimestamps[].phaseTransitionTimestamp")
VMIM_STATE = VMIM.field("status.migrationState")
VMIM_ENDED = VMIM.field("status.migrationState.endTimestamp")

# --------------------------------------------------------------------------- Pod
# Every pod of the cluster is kept, and what is worth keeping of one depends on what it is
# (`stores.shapes.shape_pod` writes that out); its annotations and its launcher's claims are declared.
# A pod read from the cache raises `Undeclared` for any other annotation (`stores.shapes.pod_read`): a
# rule that starts reading one of a launcher pod declares it here, `POD.annotation(key)`, or beside it.

POD = Fields("Pod", "POD")
POD_OPT_IN = POD.annotation(_opt_in)
POD_PROVISIONING = POD.annotation(kinds.EPHEMERAL_PROVISIONING)  # WaitForFirstConsumer's temporary pod
POD.annotation_prefix(attrgetter("decision_prefix"))  # our decision, node and reason
POD_CLAIM = POD.field("spec.volumes[].persistentVolumeClaim.claimName")
