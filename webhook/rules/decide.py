"""Pin / prefer / skip from resolved facts: all known nodes equal → pin, differ → prefer each."""
from __future__ import annotations

import enum
from collections.abc import Sequence

from .facts import Fact
from .record import record

PIN_WEIGHT = 100


class Placement(enum.StrEnum):
    PINNED = "pinned"
    PREFERRED = "preferred"
    NOT_PINNED = "not-pinned"


PINNED, PREFERRED, NOT_PINNED = Placement.PINNED, Placement.PREFERRED, Placement.NOT_PINNED


@record
class Decision:
    outcome: Placement
    node: str | None = None  # the required node when pinned
    preferences: tuple[tuple[str, int], ...] = ()  # (node, weight) preferred terms
    reason: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def nodes(self) -> list[str]:
        return [node for node, _ in self.preferences]


DISKS = ("disk", "pinned to {node}, where the share-manager of {served} runs")
CONSUMERS = ("consumer", "pinned to {node}, where {served} runs")


def decide(facts: Sequence[Fact], blocked: str | None = None, subject: tuple[str, str] = DISKS, *,
           required: bool = True) -> Decision:
    """All known nodes equal → pin (if the node can take the pod); differ → prefer each; none → skip.

    `blocked` says why the single candidate node cannot take the pod now; then the
    preference stays and the requirement goes, so a pod is never stranded. With
    `required` False (`--pin preferred`) the one node is only ever preferred.
    """
    what, pinned = subject
    if not facts:
        return Decision(NOT_PINNED, reason=f"no {what}s to follow", warnings=(f"not pinned: no {what}s to follow",))
    problems: list[str] = []
    counts: dict[str, int] = {}  # disks (or consumers) per node, in the order first seen
    for fact in facts:
        if fact.node is None:
            problems.append(fact.reason)
        else:
            counts[fact.node] = counts.get(fact.node, 0) + 1
    if not counts:
        reason = "; ".join(problems)
        return Decision(NOT_PINNED, reason=reason, warnings=tuple([f"not pinned: {p}" for p in problems]))
    if len(counts) == 1:
        (node,) = counts
        if not required:
            reason = f"preferred {node} (pins are preferences only: --pin preferred)"
            return Decision(PREFERRED, preferences=((node, PIN_WEIGHT),), reason=reason, warnings=tuple(problems))
        if blocked is None:
            return Decision(
                PINNED,
                node,
                ((node, PIN_WEIGHT),),
                pinned.format(node=node, served=_served(facts)),
                tuple([f"ignored: {p}" for p in problems]) if problems else (),
            )
        reason = f"preferred {node}, not pinned: {blocked}"
        return Decision(PREFERRED, preferences=((node, PIN_WEIGHT),), reason=reason, warnings=(reason, *problems))
    total = sum(counts.values())
    preferences = tuple(
        (node, max(1, min(100, round(100 * n / total)))) for node, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    spread = ", ".join(f"{node} ({counts[node]})" for node, _ in preferences)
    reason = f"{what}s on different nodes, preferred {spread}"
    return Decision(PREFERRED, preferences=preferences, reason=reason, warnings=(f"not pinned: {reason}", *problems))


def _served(facts: Sequence[Fact]) -> str:
    return ", ".join([f.subject for f in facts if f.node is not None])
