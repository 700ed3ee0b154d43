"""Why a pod admission leaves a pod untouched, or the keeper holds a VM where it is, in one type. Each
is a short fixed phrase: a metric label (`colocate_admissions_total{skipped}`, `colocate_vms_held{hold}`),
a log field, the words `status` and `explain` show."""
from __future__ import annotations

import enum


class Alone(enum.StrEnum):
    """Why a pod or a VM is left alone."""

    # A pod admission leaves untouched (`rules.shared.classify`, `admission.admit`).
    NOT_POD_CREATION = "not a pod creation"
    NOT_A_POD = "object is not a Pod"
    RULE_OFF = "share-manager rule is off"
    PINNING_OFF = "pinning is off"
    NO_VOLUME_LABEL = "no volume label"
    ALREADY_BOUND = "already bound to a node"
    CONSUMERS_UNKNOWN = "consumers unknown"
    NO_CONSUMER = "no running consumer"
    INTERNAL_ERROR = "internal error"
    NOT_LAUNCHER = "not a virt-launcher pod"
    NOT_OPTED_IN = "not opted in"
    MIGRATION_TARGET = "migration target"
    EPHEMERAL = "ephemeral provisioning pod"
    TERMINATING = "terminating"
    FINISHED = "finished"
    NOT_SCHEDULED = "not scheduled yet"
    SUPERSEDED = "an older pod of the same VMI"
    TOO_LARGE = "larger than any VM's pod"
    DEADLINE = "no decision before the deadline"

    # An evacuation migration left untouched (`rules.placement.aim`, `admission.evacuation`).
    NOT_MIGRATION_CREATION = "not a migration creation"
    AIM_OFF = "aiming evacuations is off"
    NOT_EVACUATION = "not a drain's evacuation"
    NOT_VIRT_CONTROLLER = "not created by virt-controller"
    DESCHEDULER_EVACUATION = "a descheduler's evacuation"
    ALREADY_AIMED = "already aimed"
    NOT_DRAINED = "its node is not cordoned"
    AIMED_FAILED = "its aimed evacuation failed"  # the one before it: what the metric counts as aimed-but-failed
    AIMED_FAILED_EARLIER = "an earlier aimed evacuation failed"
    OWN_HOST = "its VM names its host"
    NO_STORAGE = "no storage to follow"
    SPLIT_STORAGE = "storage on several nodes"
    NO_TARGET = "no node fits"
    VM_UNKNOWN = "its VM cannot be read"

    # A VM the keeper holds where it is (`rules.keeping.keep.CHECKS`, in the order it checks them;
    # "not opted in" above is the first).
    OPTED_OUT = "keep disabled"
    NO_EVICTION = "prefer no eviction"
    NOT_RUNNING = "not running"
    NOT_APART = "not apart"
    # Its NFS mount is stale and no live migration of it can recover it, or an unpause did not hold (`rules.keeping`).
    NEEDS_RESTART = "needs a restart"
    DISK_FULL = "disk full"  # paused on a full disk (KubeVirt's words): no move or unpause frees space
    TARGET_UNFIT = "target unfit"
    NOT_MIGRATABLE = "not live-migratable"
    MIGRATING = "migration in flight"
    # The descheduler moved it off a loaded node on purpose: not taken back for --keep-after-descheduled.
    DESCHEDULED = "moved by the descheduler"
    APART_BRIEFLY = "apart too briefly"
    MIGRATED_RECENTLY = "migrated recently"
    BACKING_OFF = "backing off"
    DAILY_LIMIT = "daily limit"
    UNTARGETED = "targeted migration unavailable"
    OUR_LIMIT = "our migrations in flight"
    CLUSTER_LIMIT = "migrations in flight cluster-wide"
    SOURCE_BUSY = "migrations in flight from its node"
    # A Longhorn disk of the VM whose share-manager is not running (starting, stopped): where it
    # comes back may change the answer, and "apart since" would not know when it began.
    SETTLING = "storage settling"
    REFUSED = "migration refused"  # the API refused this VM's last migration: it waits its backoff
    VIEW_INCOMPLETE = "view incomplete"  # a cache failing or not synced: nothing is acted on
    REPORT_ONLY = "report only"
    NO_LEASE = "lease not surely held"  # the lease might run out before the migration is created
