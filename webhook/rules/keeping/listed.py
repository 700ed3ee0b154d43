"""The VMIs, migrations and the keeper's Lease as the keeper and `status` read them: one reader, so
that `status` shows what the keeper goes by. Pure: the callers list or watch the objects."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ... import kinds
from ...config import Settings
from ..shared.classify import opted_in
from ..shared.reading import Malformed
from ..shared.times import ago, parse_time
from .migrations import Migration, read_migration
from .running import Alike, VmiView, read_vmi


@dataclasses.dataclass(frozen=True)
class Listed:
    """The VMIs and migrations as read, and the objects of unexpected shape left out: every
    migration, and the VMIs that are opted in (the others are none of ours)."""

    views: list[VmiView]
    migrations: list[Migration]
    malformed: list[Malformed]

    @property
    def running(self) -> list[VmiView]:
        """The running opted-in VMs: the ones the keeper looks at (the others it never touches)."""
        return [view for view in self.views if view.running and view.opted_in]


def read_kubevirt(vmis: Iterable[Any], migrations: Iterable[Any], settings: Settings, *,
                  alike: Alike | None = None) -> Listed:
    """Each object read once, in the order given (`vmis` may be a generator decoding one at a time),
    what the VMIs carry alike one object for all (`alike`: across calls, too)."""
    seen, alike = Listed([], [], []), Alike() if alike is None else alike
    for obj in migrations:
        migration = read_migration(obj)
        (seen.malformed if isinstance(migration, Malformed) else seen.migrations).append(migration)
    for obj in vmis:
        view = read_vmi(obj, settings, alike)
        if not isinstance(view, Malformed):
            seen.views.append(view)
        elif opted_in(kinds.annotations(obj), settings):
            seen.malformed.append(view)
    return seen


@dataclasses.dataclass(frozen=True)
class Leader:
    """Who holds the keeper's Lease, as its object says: the holder ("" when released), its last
    renewal and how long the Lease lasts past it."""

    holder: str
    renewed: datetime | None = None
    duration: timedelta | None = None

    def words(self, now: datetime) -> str:
        """"pod-x (renewed 5s ago)", or "none" and why (released, or ran out without a renewal)."""
        if not self.holder:
            return "none (the Lease is released)"
        if self.renewed is not None and self.duration is not None and now - self.renewed > self.duration:
            return f"none ({self.holder}'s Lease ran out {ago(now - self.renewed - self.duration)} ago)"
        return self.holder + (f" (renewed {ago(now - self.renewed)} ago)" if self.renewed is not None else "")


def read_lease(obj: Any) -> Leader:
    spec = kinds.spec(obj)
    holder, duration = spec.get("holderIdentity"), spec.get("leaseDurationSeconds")
    return Leader(holder if isinstance(holder, str) else "", parse_time(spec.get("renewTime")),
                  timedelta(seconds=duration) if isinstance(duration, int) and not isinstance(duration, bool) else None)
