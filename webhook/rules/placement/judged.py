"""Pure: what each node said to a drain's pair of pods of one shape, kept while the node stays the same.

A drain re-creates tens of share-managers at once, and each is judged with its VM's migration target
on the same nodes, most room first (`together`). For pods of one shape, all of that but the VM's own
pod (anti-)affinity, ports, volumes and spread reads only the node, what its pods take and what the
two pods ask, which is the same for each: the node-level checks of both pods, the labels KubeVirt
requires of the target node, and NodeResourcesFit. Kept per shape in the view's memo and dropped
node by node as the view says they changed (`View.nodes_changed`, as `rooms.Rooms` does), those are
worked out once a drain, not once a share-manager.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from .. import fit

LIMIT = 64  # answers kept per shape at most, the oldest let go first (a drain's searches move down the nodes)


class Judged:
    """The answers of one shape of pods, node by node (None: the node takes both), as of the
    view's position `position`; each with the node object it was worked out from."""

    __slots__ = ("position", "said")

    def __init__(self) -> None:
        self.position: int | None = None
        self.said: dict[str, tuple[Mapping[str, Any], str | None]] = {}

    def update(self, view: fit.View) -> bool:
        """Drop what the nodes changed since said; False where the view keeps no record of changes
        (nothing is kept then)."""
        position, changed = view.nodes_changed(self.position)
        if changed is None:  # every node may have changed (or no record is kept)
            self.said.clear()
        else:
            for name in changed:
                self.said.pop(name, None)
        self.position = position
        return position is not None

    def get(self, name: str, node: Mapping[str, Any]) -> tuple[bool, str | None]:
        """(known, why not): known only for the same node object (the caches hand out one per version)."""
        held = self.said.get(name)
        if held is None or held[0] is not node:
            return False, None
        return True, held[1]

    def keep(self, name: str, node: Mapping[str, Any], why: str | None) -> None:
        """Keep an answer worked out just now (in the same step, no await between): whatever changes
        after it is noted past `position` and dropped by the next `update`."""
        if name not in self.said and len(self.said) >= LIMIT:
            del self.said[next(iter(self.said))]
        self.said[name] = (node, why)


def _new(_: object) -> Judged:
    return Judged()


def judged_for(shape: Hashable | None, view: fit.View) -> Judged | None:
    """The Judged of `shape` in the view's memo (a new one where there is none), brought up to date;
    None without a shape, or where the view keeps no record of changes."""
    if shape is None:
        return None
    judged = view.memo.latest(_new, ("judged", shape), True, None)
    return judged if judged.update(view) else None
