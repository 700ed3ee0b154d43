"""Pure: the nodes in the order of the room they leave one size of pod, kept up to date node by node.

A drain's share-manager looks for nodes where its VM can follow, most room first (NodeResourcesFit's
score, `fit.least_allocated`). Scoring every node costs tens of milliseconds at 1,000 nodes; kept per
size of pod in the view's memo, the order is brought up to date from the nodes the view says changed
(`View.nodes_changed`), so a drain's share-managers pay for those, not for the size of the cluster.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .. import fit
from ..fit.demand import Demand
from ..fit.fields import name_of
from ..fit.resources import least_allocated

Scored = tuple[float | None, Mapping[str, Any]]  # (room, node); room None when it cannot be read


class Rooms:
    """Every node of a view with the room it leaves one size of pod, most room first, unreadable
    last (`order`), as of the view's position `position`."""

    __slots__ = ("position", "scores", "order")

    def __init__(self) -> None:
        self.position: int | None = None
        self.scores: dict[str, Scored] = {}
        self.order: tuple[Scored, ...] = ()

    def update(self, demand: Demand, view: fit.View) -> Iterator[str]:
        """Bring `order` up to date, yielding each node's name as it is scored; nothing changes
        until every step is taken."""
        position, changed = view.nodes_changed(self.position)
        if position is not None and position == self.position:
            return
        if changed is None:  # every node, scored again
            scores: dict[str, Scored] = {}
            for node in view.nodes():
                name = name_of(node)
                if isinstance(name, str) and name:
                    scores[name] = (least_allocated(demand, node, view), node)
                    yield name
        else:
            rescored: dict[str, Scored | None] = {}  # None: the node is gone
            for name in changed:
                node = view.node(name)
                rescored[name] = None if node is None else (least_allocated(demand, node, view), node)
                yield name
            scores = self.scores
            for name, pair in rescored.items():
                if pair is None:
                    scores.pop(name, None)
                else:
                    scores[name] = pair
        self.scores, self.position = scores, position
        self.order = tuple(sorted(scores.values(), key=lambda pair: 1.0 if pair[0] is None else -pair[0]))


def _new(_: object) -> Rooms:
    return Rooms()


def rooms_for(demand: Demand, view: fit.View) -> Rooms:
    """The Rooms of `demand`'s size, kept in the view's memo (a new one where there is none)."""
    return view.memo.latest(_new, ("rooms", tuple(sorted(demand.requests.items()))), True, None)
