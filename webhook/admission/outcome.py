"""What the rules made of one pod: the domain answer that `review` turns into an AdmissionReview."""
from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ..rules.shared.alone import Alone
from ..rules.placement.decide import AIMED, AMONG, PINNED, Decision
from ..rules.shared.facts import Fact


class Rule(enum.StrEnum):
    VM = "vm"
    SHARE_MANAGER = "share-manager"
    EVACUATION = "evacuation"  # a drain's evacuation migration (`--aim-evacuations on`)
    NONE = "none"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decision and its patch, or why the pod was left alone."""

    rule: Rule
    decision: Decision | None = None
    skipped: Alone | None = None  # why the pod was left untouched (a metric label)
    detail: str | None = None  # the specifics, for logs
    facts: tuple[Fact, ...] = ()  # what the decision followed
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()


def skip(rule: Rule, why: Alone, warning: str | None = None, detail: str | None = None, **kwargs: Any) -> Outcome:
    return Outcome(rule, skipped=why, detail=detail, warnings=(warning,) if warning else (), **kwargs)


def decision_event(decision: Decision) -> tuple[str, str, bool]:
    """The Event a decision leaves on the object an admin looks at: reason, message, and whether a warning."""
    if decision.outcome == AIMED:  # said on the VMI of the evacuation
        return "EvacuationAimed", decision.reason, False
    if decision.outcome == AMONG:  # a share-manager sent where its leaving VM can follow
        return "PlacedForVM", decision.reason, False
    pinned = decision.outcome == PINNED
    return "CoLocated" if pinned else "NotCoLocated", decision.reason, not pinned
