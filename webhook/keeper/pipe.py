"""What `serve` and the keeper's process say to each other (process.py, child.py), over the
child's stdin and stdout: frames of a 4-byte length, then a pickle (both ends are this package).

`serve` → child: the `Assignment`, then the moment (CLOCK_MONOTONIC, the same clock in every
process) at which the leader must stop acting, every half second, then STOP. Child → `serve`:
a `Report` every `report_every` seconds and as it stops.
"""
from __future__ import annotations

import asyncio
import dataclasses
import pickle
import struct
from typing import Any

from prometheus_client.metrics_core import Metric

from ..config import Settings
from .keeper import KeeperTiming, PassTime

STOP = "stop"
MAX_FRAME = 64 << 20  # a longer frame is no report of ours: the child is ended


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What the keeper's process is given: how to reach the API, what to keep by."""

    settings: Settings
    kubeconfig: str | None = None  # None: found as every verb finds it (client.connect)
    events: bool = True
    log_level: str = "info"
    timing: KeeperTiming = KeeperTiming()
    report_every: float = 1.0


@dataclasses.dataclass(frozen=True)
class Report:
    """What the keeper's process says of itself, every `report_every` seconds and as it stops."""

    notes: list[str]  # what keeps it from seeing or acting on the whole cluster
    families: list[Metric]  # metrics.keeper_families()
    passes: int = 0  # passes made over synced caches
    last_pass: PassTime | None = None


def frame(message: Any) -> bytes:
    data = pickle.dumps(message)
    return struct.pack(">I", len(data)) + data


async def read_frame(stream: asyncio.StreamReader) -> Any:
    """The next message; asyncio.IncompleteReadError once the other end has closed, ValueError
    for a frame longer than MAX_FRAME."""
    (size,) = struct.unpack(">I", await stream.readexactly(4))
    if size > MAX_FRAME:
        raise ValueError(f"a frame of {size} bytes")
    return pickle.loads(await stream.readexactly(size))
