"""Migration target pods under `--migration-targets prefer`: which are steered toward the node
serving their disks, and the preference they get.

KubeVirt builds a migration target pod from the VMI (kubevirt/kubevirt
`pkg/virt-controller/watch/migration/migration.go`, `createTargetPod`): label
`kubevirt.io/migrationJobUID` = the migration's uid, annotation `kubevirt.io/migrationJobName` =
its name, and the migration's `spec.addedNodeSelector` merged into the pod's nodeSelector, under
the VM's own selectors. Nothing on the pod tells those keys from the VM's own, so the migration
itself is read. A migration that names no node (`spec.addedNodeSelector` empty or absent) leaves
the choice to kube-scheduler: KubeVirt's evacuations of drained nodes and of evicted pods, the
descheduler's among them (`pkg/virt-controller/watch/drain/evacuation/evacuation.go`:
`generateName: kubevirt-evacuation-`, annotation `kubevirt.io/evacuationMigration: <node>`), the
workload updater's, a user's plain `virtctl migrate`. Such a target gets preferred terms toward
the node(s) serving its disks, as a VM's pod would; never a required one: the target keeps its
own selectors and anti-affinity, and a preference cannot keep it from being placed. A migration
that names its node (the keeper's, a user's `--addedNodeSelector`) is someone's choice: untouched.
Pure: callers pass the pod, the migration and the disks' facts.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import kinds
from ..shared.alone import Alone
from .decide import PREFERRED, Decision, decide
from ..shared.facts import Fact


def migration_of(pod: dict[str, Any]) -> tuple[str, str] | str:
    """The name and uid of the migration a target pod was created for, or why the pod names none."""
    name = kinds.annotations(pod).get(kinds.MIGRATION_JOB_NAME_ANNOTATION)
    uid = kinds.labels(pod).get(kinds.MIGRATION_JOB_LABEL)
    if not kinds.valid_name(name):
        return f"the pod names no migration (annotation {kinds.MIGRATION_JOB_NAME_ANNOTATION})"
    if not isinstance(uid, str) or not uid:
        return f"the pod names no migration uid (label {kinds.MIGRATION_JOB_LABEL})"
    return name, uid


def why_not_steered(migration: dict[str, Any] | None, name: str, uid: str) -> tuple[Alone, str] | None:
    """Why the target of migration `name` (uid `uid`, from the pod) is left untouched, or None
    when its migration names no node."""
    if migration is None:
        return Alone.MIGRATION_UNKNOWN, f"migration {name} not found"
    found = kinds.meta(migration).get("uid")
    if found != uid:
        return Alone.MIGRATION_UNKNOWN, f"migration {name} is another one than the pod's (uid {found}, not {uid})"
    added = kinds.spec(migration).get("addedNodeSelector")
    if added:
        shown = ", ".join(f"{k}={v}" for k, v in added.items()) if isinstance(added, dict) else str(added)
        return Alone.MIGRATION_NAMES_NODE, f"migration {name} names its node (addedNodeSelector {shown})"
    return None


def describe(migration: Any, name: str) -> str:
    """The migration in words: `migration X`, with the node it evacuates when KubeVirt says so."""
    evacuating = kinds.annotations(migration).get(kinds.EVACUATION_ANNOTATION)
    return f"migration {name} (evacuating {evacuating})" if isinstance(evacuating, str) and evacuating else \
        f"migration {name}"


def prefer(facts: Sequence[Fact], migration: str) -> Decision | str:
    """The target's preferences, weighted as a VM pod's are (`decide`: all disks on one node →
    weight 100, several nodes → by disks per node), never a requirement; or why there is none
    (no disk has a node). `migration` is the migration in words (`describe`)."""
    base = decide(facts, required=False)
    if not base.preferences:
        return base.reason
    served: dict[str, list[str]] = {}
    for fact in facts:
        if fact.node is not None:
            served.setdefault(fact.node, []).append(fact.subject)
    if len(base.preferences) == 1:
        node = base.preferences[0][0]
        reason = f"preferred {node} for the target of {migration}, where the share-manager of " \
                 f"{', '.join(served[node])} runs"
    else:
        spread = ", ".join(f"{node} ({len(served[node])})" for node, _ in base.preferences)
        reason = f"preferred {spread} for the target of {migration}: disks on different nodes"
    problems = tuple(f"ignored: {fact.reason}" for fact in facts if fact.node is None)
    return Decision(PREFERRED, preferences=base.preferences, reason=reason, warnings=problems)
