"""Time as Kubernetes writes it (RFC 3339, whole seconds), for the keeper's rules."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime.min.replace(tzinfo=UTC)  # before anything: sorts what has no time first


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it; None when absent or unreadable (no zone, a bare date)."""
    if not isinstance(value, str) or "T" not in value.upper():
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def whole_seconds(span: timedelta) -> int:
    return max(0, int(span.total_seconds()))


def ago(span: timedelta) -> str:
    """A duration as people read it in a table: 45s, 12m, 5h, 3d."""
    seconds = whole_seconds(span)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
