"""Whether a running VM is apart from its storage, and since when."""
from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Iterable, Sequence
from datetime import datetime
from sys import intern

from ..shared.facts import Fact


class VmState(enum.StrEnum):
    CO_LOCATED = "co-located"  # every resolved disk is served from the VM's node
    APART = "apart"  # all resolved disks are served from one other node
    SPLIT = "split"  # disks served from several nodes
    UNRESOLVED = "unresolved"  # not running, no disks, or no disk resolved


CO_LOCATED, APART, SPLIT, UNRESOLVED = VmState.CO_LOCATED, VmState.APART, VmState.SPLIT, VmState.UNRESOLVED


@dataclasses.dataclass(frozen=True, slots=True)
class Locality:
    """A VM's node against the nodes serving its disks."""

    state: VmState
    node: str | None  # where the VM runs
    storage: tuple[str, ...] = ()  # nodes serving resolved disks, most disks first
    why: str = ""

    @property
    def target(self) -> str | None:
        """The node to move the VM to: the one storage node of a VM that is apart."""
        return self.storage[0] if self.state is APART else None


def locality(node: str | None, facts: Sequence[Fact]) -> Locality:
    """Co-located, apart, split or unresolved, as the pin sees it: disks that did not resolve
    (not Longhorn, share-manager stopped, a read failed) are ignored when others did."""
    if not node:
        return Locality(state=UNRESOLVED, node=None, why="not running on a node")
    if not facts:
        return Locality(state=UNRESOLVED, node=node, why="no disks to follow")
    problems = [f.reason for f in facts if f.node is None]
    counts = collections.Counter(f.node for f in facts if f.node is not None)
    if not counts:
        return Locality(state=UNRESOLVED, node=node, why="; ".join(problems))
    # The names and words of every VM on a node alike are one string each (`sys.intern`): a pass holds every VM's.
    storage = tuple(intern(n) for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    ignored = "".join(f"; ignored: {p}" for p in problems)
    if storage == (node,):
        return Locality(state=CO_LOCATED, node=node, storage=storage,
                        why=intern(f"disks served from {node}, where the VM runs{ignored}"))
    if len(storage) == 1:
        return Locality(state=APART, node=node, storage=storage,
                        why=intern(f"disks served from {storage[0]}, the VM runs on {node}{ignored}"))
    spread = ", ".join(f"{n} ({counts[n]})" for n in storage)
    return Locality(state=SPLIT, node=node, storage=storage, why=f"disks served from {spread}, the VM runs on {node}{ignored}")


def apart_since(moments: Iterable[datetime | None], now: datetime) -> datetime | None:
    """Since when a VM has been apart, read from the cluster alone so that a new leader and
    `status` agree: the latest of the moments that could have made it so (its last migration's
    end, its launcher pod's start, the start of the share-manager pods serving it from
    elsewhere), never later than `now`. None when none is known."""
    latest = max((m for m in moments if m is not None), default=None)
    return min(latest, now) if latest is not None else None
