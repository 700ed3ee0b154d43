"""Pin / prefer / skip from resolved facts: all known nodes equal → pin, differ → prefer each."""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from ..shared.facts import Fact

PIN_WEIGHT = 100


class Placement(enum.StrEnum):
    PINNED = "pinned"
    # Required to be among a set of nodes: a share-manager whose VM is leaving its node goes
    # where the VM's migration can follow (`rules/placement/together.py`).
    AMONG = "pinned-among"
    PREFERRED = "preferred"
    NOT_PINNED = "not-pinned"
    # A drain's evacuation migration sent to one node by its spec.addedNodeSelector (`rules/placement/aim.py`).
    AIMED = "aimed"


PINNED, AMONG, PREFERRED, NOT_PINNED = Placement.PINNED, Placement.AMONG, Placement.PREFERRED, Placement.NOT_PINNED
AIMED = Placement.AIMED


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: Placement
    node: str | None = None  # the required node when pinned
    preferences: tuple[tuple[str, int], ...] = ()  # (node, weight) preferred terms
    reason: str = ""
    warnings: tuple[str, ...] = ()
    among: tuple[str, ...] = ()  # the required nodes when pinned among several

    @property
    def required(self) -> tuple[str, ...]:
        """The nodes the pod is required to be on (one of), or () when nothing is required."""
        if self.outcome in (PINNED, AIMED) and self.node:
            return (self.node,)
        return self.among if self.outcome == AMONG else ()

    @property
    def nodes(self) -> list[str]:
        return [node for node, _ in self.preferences]


# What a pod follows, and what runs where it is pinned: the share-manager of its disks, or its consumers.
DISKS = ("disk", "the share-manager of ")
CONSUMERS = ("consumer", "")


def decide(facts: Sequence[Fact], blocked: str | None = None, subject: tuple[str, str] = DISKS, *,
           required: bool = True) -> Decision:
    """All known nodes equal → pin; differ → prefer each; none → skip. With `blocked` (why the one node cannot take
    the pod now) or `required` False (`--pin preferred`) it is only preferred, so a pod is never stranded."""
    what, runs = subject
    if not facts:
        return Decision(NOT_PINNED, reason=f"no {what}s to follow", warnings=(f"not pinned: no {what}s to follow",))
    problems: list[str] = []
    served: list[str] = []  # what has a node, in order
    counts: dict[str, int] = {}  # disks (or consumers) per node, in the order first seen
    for fact in facts:
        if fact.node is None:
            problems.append(fact.reason)
        else:
            served.append(fact.subject)
            counts[fact.node] = counts.get(fact.node, 0) + 1
    if not counts:
        reason = "; ".join(problems)
        return Decision(NOT_PINNED, reason=reason, warnings=tuple(f"not pinned: {p}" for p in problems))
    if len(counts) == 1:
        (node,) = counts
        if not required:
            reason = f"preferred {node} (pins are preferences only: --pin preferred)"
            return Decision(PREFERRED, preferences=((node, PIN_WEIGHT),), reason=reason, warnings=tuple(problems))
        if blocked is None:
            return Decision(PINNED, node=node, preferences=((node, PIN_WEIGHT),),
                            reason=f"pinned to {node}, where {runs}{', '.join(served)} runs",
                            warnings=tuple(f"ignored: {p}" for p in problems))
        reason = f"preferred {node}, not pinned: {blocked}"
        return Decision(PREFERRED, preferences=((node, PIN_WEIGHT),), reason=reason, warnings=(reason, *problems))
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))  # most first
    preferences = tuple((node, max(1, min(100, round(100 * n / total)))) for node, n in ordered)
    spread = ", ".join(f"{node} ({counts[node]})" for node, _ in preferences)
    reason = f"{what}s on different nodes, preferred {spread}"
    return Decision(PREFERRED, preferences=preferences, reason=reason, warnings=(f"not pinned: {reason}", *problems))

