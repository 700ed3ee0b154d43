"""What every check shares: its signature, and "cannot tell" (which counts as not fitting) in
place of an exception."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .demand import Demand
from .fields import Unreadable, name_of
from .view import View

Filter = Callable[[Demand, Mapping[str, Any], View, str], "str | None"]  # one of kube-scheduler's filter plugins


class CannotTell(Exception):
    """The objects do not let us decide (a claim not in the cache, a selector over Namespace labels)."""


def cannot_tell(node: Any, subject: str, detail: str) -> str:
    return f"cannot tell whether node {name_of(node)} fits {subject}: {detail}"


def failed(check: Filter, node: Any, subject: str, error: Exception) -> str:
    """The answer of a check that raised: "cannot tell", saying why."""
    if isinstance(error, (CannotTell, Unreadable)):
        return cannot_tell(node, subject, str(error))
    # A shape nobody foresaw: still an answer, never a crash.
    return cannot_tell(node, subject, f"the {check.__name__.replace('_', ' ')} check could not read "
                                       f"the objects ({type(error).__name__})")
