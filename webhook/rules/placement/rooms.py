"""Pure: the nodes in the order of the room they leave one size of pod, kept up to date node by node."""
from __future__ import annotations

import bisect
from collections.abc import Iterator

from .. import fit
from ..fit.demand import Demand
from ..fit.fields import name_of
from ..fit.resources import least_allocated

Scored = tuple[float | None, str]  # (room, node name); room None when it cannot be read


class Rooms:
    """Every node of a view with the room it leaves one size of pod, most room first, unreadable last, nodes of equal
    room in the order they were first scored (`order`), as of the view's position `position`."""

    __slots__ = ("position", "scores", "order", "_keys", "_entries", "_ranks", "_next")

    def __init__(self) -> None:
        self.position: int | None = None
        self.scores: dict[str, Scored] = {}
        self.order: tuple[Scored, ...] = ()
        self._keys: list[tuple[float, int]] = []  # the sort key of each entry of `order`, in its order
        self._entries: list[Scored] = []
        self._ranks: dict[str, int] = {}  # when each node was first scored: the order among equals
        self._next = 0

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
                    scores[name] = (least_allocated(demand, node, view), name)
                    yield name
            self._ranks = {name: rank for rank, name in enumerate(scores)}
            self._next = len(scores)
            ordered = sorted(((_key(pair[0], self._ranks[name]), pair) for name, pair in scores.items()),
                             key=lambda keyed: keyed[0])
            self._keys, self._entries = [key for key, _ in ordered], [pair for _, pair in ordered]
        else:
            rescored: dict[str, Scored | None] = {}  # None: the node is gone
            for name in changed:
                node = view.node(name)
                rescored[name] = None if node is None else (least_allocated(demand, node, view), name)
                yield name
            scores = self.scores
            for name, pair in rescored.items():
                self._move(name, scores.get(name), pair)
                if pair is None:
                    scores.pop(name, None)
                else:
                    scores[name] = pair
        self.scores, self.position = scores, position
        self.order = tuple(self._entries)

    def _move(self, name: str, old: Scored | None, new: Scored | None) -> None:
        if old is not None:
            at = bisect.bisect_left(self._keys, _key(old[0], self._ranks[name]))
            del self._keys[at], self._entries[at]
        if new is None:
            self._ranks.pop(name, None)
            return
        if name not in self._ranks:
            self._ranks[name], self._next = self._next, self._next + 1
        key = _key(new[0], self._ranks[name])
        at = bisect.bisect_left(self._keys, key)
        self._keys.insert(at, key)
        self._entries.insert(at, new)


def _key(room: float | None, rank: int) -> tuple[float, int]:
    return 1.0 if room is None else -room, rank


def _new(_: object) -> Rooms:
    return Rooms()


def rooms_for(demand: Demand, view: fit.View) -> Rooms:
    """The Rooms of `demand`'s size, kept in the view's memo (a new one where there is none)."""
    return view.memo.latest(_new, ("rooms", tuple(sorted(demand.requests.items()))), True, None)
