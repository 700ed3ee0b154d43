"""One running opted-in VM as a pass (or `status`) observed it, and the migration a plan's move makes
of it: shared by observing, probing and acting, which never import each other."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..rules.keeping.keep import KeepDecision, VmFacts
from ..rules.keeping.migrations import migration_manifest, MIGRATION_PRIORITY
from ..rules.keeping.running import VmiView
from ..rules.shared.facts import Fact


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """What the VM's decision goes by, its disks (when the observer keeps them), and the node its
    migration would name, as read (a migration there names the node's hostname label)."""

    facts: VmFacts
    disks: tuple[Fact, ...] = ()
    target_node: dict[str, Any] | None = None
    derived: bool = False  # `facts.apart_since` was read from the cluster, not first seen by this reader

    @property
    def vmi(self) -> VmiView:
        return self.facts.vmi

    @property
    def key(self) -> tuple[str, str]:
        return self.facts.vmi.namespace, self.facts.vmi.name


def manifest(vm: Observed, decision: KeepDecision, *, priority: bool) -> dict[str, Any] | str:
    """The migration that moves the VM to its storage node (or, to recover a stale VM beside it, to
    another node), with spec.priority when `priority`; one that recovers a stale mount says so."""
    if vm.target_node is None:
        return f"node {decision.target} not found"
    return migration_manifest(vm.vmi, vm.target_node, decision.reason, MIGRATION_PRIORITY if priority else None,
                              recovers=bool(decision.stale))
