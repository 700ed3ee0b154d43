"""A drain's share-manager judges the nodes in slices, giving the event loop back between them.

A drain's share-manager finds its VM, renders the VM's migration target pod and judges nodes for
both pods (milliseconds on hundreds of nodes), and a drain re-creates tens of them at once. Judged
in one piece, each would hold the loop for all of it, and anything else waiting for the loop (a
VM start's TLS handshake, its headers, its answer) would wait behind it. In slices, at most a
slice of each stands between two steps of everything else: VM starts keep their pace beside a
drain.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from ..deadline import Deadline

# The longest the rules hold the event loop at a stretch before everything else waiting for it runs.
SLICE = 0.002


async def in_slices(steps: Iterable[Any], deadline: Deadline, slice_seconds: float = SLICE) -> bool:
    """Take `steps` one by one, giving the event loop back every `slice_seconds` so that other
    admissions are answered meanwhile; False when the deadline came first."""
    until = time.monotonic() + slice_seconds
    for _ in steps:
        if time.monotonic() >= until:
            if deadline.remaining() <= 0:
                return False
            await asyncio.sleep(0)
            until = time.monotonic() + slice_seconds
    return True
