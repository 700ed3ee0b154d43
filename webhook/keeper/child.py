"""`python -m webhook.keeper`: the keeper's process, as `serve` starts it for a term as leader
(process.py). It reads its `Assignment` and the Lease's deadlines from stdin (pipe.py), lists
and watches caches of its own, makes the keeper's passes, and reports on stdout; it acts only
before the last deadline it was sent, and stops when told to or when `serve` is gone.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from typing import IO

from .. import logs, metrics
from ..cluster import client
from ..cluster.cache import WatchedClusterStore
from ..cluster.events import NO_EVENTS, EventSink
from .keeper import Keeper
from .pipe import STOP, Assignment, Report, frame, read_frame

log = logging.getLogger("webhook.keeper")


class Authority:
    """What the child knows of the Lease: until when its leader may act (time.monotonic())."""

    def __init__(self) -> None:
        self.until = 0.0

    def may_act(self, within: float) -> bool:
        return time.monotonic() + within < self.until


def child_main() -> None:
    """`python -m webhook.keeper`: the keeper, for the term of the `serve` that started it."""
    logs.setup("info", process="keeper")  # until the assignment gives the level
    # serve's two pipes kept apart, where nothing else reads or writes them: whatever else is
    # printed goes to the log, and a credential plugin the client starts reads no orders.
    reports = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    orders = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with open(os.devnull, "rb") as nothing:
        os.dup2(nothing.fileno(), sys.stdin.fileno())
    try:
        asyncio.run(_keep(orders, reports))
    except Exception:  # said as a log line like any other; serve's term ends and another starts
        log.exception("keeper process failed")
        raise SystemExit(1) from None


async def _keep(pipe: IO[bytes], reports: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    orders = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(orders), pipe)
    assignment: Assignment = await read_frame(orders)
    logs.setup(assignment.log_level, process="keeper")
    authority = Authority()
    api = await client.connect(assignment.kubeconfig)
    # The term's caches (closing them closes `api`); its VMIs are the KubeVirt watch's.
    store = WatchedClusterStore(api, assignment.settings, vmis=False)
    events = EventSink(api) if assignment.events else NO_EVENTS
    store.start()
    try:
        keeper = Keeper(api, store, assignment.settings, events=events, timing=assignment.timing,
                        authority=authority.may_act)
        await _lead(keeper, orders, authority, reports, assignment.report_every)
    finally:
        await events.close()
        await store.close()


async def _lead(keeper: Keeper, orders: asyncio.StreamReader, authority: Authority, reports: IO[bytes],
                every: float) -> None:
    """The keeper's passes and the reports, until told to stop (or serve is gone); raises if
    the keeper itself fails."""
    running = asyncio.create_task(keeper.run(), name="keeper")
    listening = asyncio.create_task(_listen(orders, authority), name="keeper orders")
    reporting = asyncio.create_task(_report_every(keeper, reports, every), name="keeper reports")
    try:
        await asyncio.wait({running, listening, reporting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        authority.until = 0.0
        for task in (running, listening, reporting):
            task.cancel()
        await asyncio.gather(running, listening, reporting, return_exceptions=True)
        _send(reports, keeper)
    if running.done() and not running.cancelled() and running.exception() is not None:
        raise running.exception()  # type: ignore[misc]


async def _listen(orders: asyncio.StreamReader, authority: Authority) -> None:
    """The Lease's deadlines, until STOP or the end of serve's pipe: from then on, nothing is done."""
    with contextlib.suppress(asyncio.IncompleteReadError):
        while (order := await read_frame(orders)) != STOP:
            authority.until = order
    authority.until = 0.0


async def _report_every(keeper: Keeper, reports: IO[bytes], every: float) -> None:
    while _send(reports, keeper):
        await asyncio.sleep(every)


def _send(reports: IO[bytes], keeper: Keeper) -> bool:
    """A report to serve; False when it is gone."""
    # Its own caches' notes too: one failing leaves the keeper a partial view, and it creates nothing.
    report = Report(keeper.store.degraded() + keeper.degraded(), metrics.keeper_families(), keeper.passes,
                    keeper.last_pass)
    try:
        reports.write(frame(report))
        reports.flush()
    except (BrokenPipeError, ValueError):  # ValueError: already closed
        return False
    return True
