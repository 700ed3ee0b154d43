"""The keeper in a process of its own, beside `serve`.

A pass reads every VMI and keeps a record of each VM: at tens of thousands of VMs that is
seconds of CPU and hundreds of thousands of objects, and in the serving process Python's
garbage collections over them would stop the event loop for 100 ms and more, which every
admission reaching the leader would wait out. So `serve` starts the keeper as a child process
(multiprocessing's spawn: a fresh interpreter) at a lower CPU priority: it campaigns for the
Lease and, while it leads, lists and watches caches of its own (a follower holds none). Its
heap, its collections and its CPU are its own; admission never waits on them.

The child reports over a pipe every second: its readiness notes and the metrics it keeps,
which `serve` shows in /readyz and /metrics as its own (`metrics.Relay`). A child that dies is
started again; a child whose `serve` is gone (the pipe closed) stops. On shutdown `serve` asks
the child to stop (the keeper stops, the Lease is released) and waits for it.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from .. import logs, metrics
from ..background import Background
from ..cluster import client
from ..cluster.cache import WatchedClusterStore
from ..cluster.events import NO_EVENTS, EventSink
from ..cluster.store import WatchedStore
from ..config import Settings
from .keeper import KeeperTiming, PassTime
from .lease import LeaseTiming
from .service import KeeperService

log = logging.getLogger("webhook.keeper")

STOP = "stop"


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What the keeper's process is given (pickled to it): how to reach the API, what to keep by."""

    settings: Settings
    namespace: str  # of the Lease
    identity: str
    kubeconfig: str | None = None  # None: found as every verb finds it (client.connect)
    events: bool = True
    log_level: str = "info"
    timing: KeeperTiming = KeeperTiming()
    lease_timing: LeaseTiming = LeaseTiming()
    niceness: int = 10  # added to serve's: the keeper's work yields the CPU to admission
    report_every: float = 1.0


@dataclasses.dataclass(frozen=True)
class Report:
    """What the keeper's process says of itself, every `report_every` seconds and as it stops."""

    notes: list[str]  # readiness notes, "keeper: ..."
    families: list[Metric]  # metrics.keeper_families()
    passes: int = 0  # passes of the current term
    last_pass: PassTime | None = None


class KeeperProcess:
    """In `serve`: the child started, followed and started again; what it reports shown as ours.
    A companion of the admission service: start(), async stop(), degraded()."""

    def __init__(self, assignment: Assignment, *, restart_after: float = 5.0, stop_timeout: float = 15.0,
                 silent_after: float = 10.0):
        self.assignment, self.stop_timeout, self.silent_after = assignment, stop_timeout, silent_after
        self.last: Report | None = None  # the child's last report, while it runs
        self._heard = 0.0  # when it came (time.monotonic())
        self.ended: str | None = None  # how the last child ended unasked, until the next one reports
        self._child: Any = None  # multiprocessing's Process
        self._pipe: Connection | None = None
        self._stopping = False
        self._supervisor = Background("keeper process", self._run_child, log=log, failure="the keeper's process",
                                      period=restart_after)

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> None:
        self._stopping = False
        self._supervisor.start()

    async def stop(self) -> None:
        """Ask the child to stop (it releases the Lease) and wait for it; then stop following it."""
        self._stopping = True
        child, pipe = self._child, self._pipe
        if child is not None and pipe is not None:
            with contextlib.suppress(OSError):
                pipe.send(STOP)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, child.join, self.stop_timeout)
            if child.is_alive():
                log.warning("keeper process did not stop in time", extra={"fields": {"pid": child.pid}})
                child.kill()
        await self._supervisor.stop()

    def degraded(self) -> list[str]:
        """The child's own notes; that it ended, or has gone silent (hung, or starved of CPU)."""
        notes = self._supervisor.degraded() + ([self.ended] if self.ended else [])
        silent = time.monotonic() - self._heard
        if self.last is not None and silent > self.silent_after:
            notes.append(f"its process has not reported for {silent:.0f}s")
        return [f"keeper: {note}" for note in notes] + (self.last.notes if self.last is not None else [])

    async def _run_child(self) -> None:
        """One child, from its start to its end."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=child_main, args=(self.assignment, theirs), name="keeper", daemon=True)
        child.start()
        theirs.close()
        self._child, self._pipe = child, ours
        log.info("keeper process started", extra={"fields": {"pid": child.pid}})
        try:
            await self._follow(ours)
            await asyncio.get_running_loop().run_in_executor(None, child.join, self.stop_timeout)
        finally:
            self._forget()
            ours.close()
            if child.is_alive():  # cancelled (stop() timed out) or the pipe broke
                child.kill()
        if not self._stopping:
            self.ended = f"its process exited with code {child.exitcode}; started again in {self._supervisor.period:g}s"
            log.warning("keeper process ended", extra={"fields": {"pid": child.pid, "exitcode": child.exitcode}})

    async def _follow(self, pipe: Connection) -> None:
        """The child's reports until its end of the pipe closes."""
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(pipe.fileno(), readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                while pipe.poll():
                    try:
                        report = pipe.recv()
                    except (EOFError, OSError):
                        return
                    self.last, self.ended, self._heard = report, None, time.monotonic()
                    metrics.RELAY.families = report.families
        finally:
            loop.remove_reader(pipe.fileno())

    def _forget(self) -> None:
        """No child: nothing of it shown, and this replica leads no keeper."""
        self._child = self._pipe = self.last = None
        [leader] = metrics.KEEPER_LEADER.describe()
        metrics.RELAY.families = [GaugeMetricFamily(leader.name, leader.documentation, value=0)]


# --------------------------------------------------------------------------- the child


def child_main(assignment: Assignment, pipe: Connection) -> None:
    """The keeper's process: `serve`'s keeper until told to stop or `serve` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches serve, which stops us in turn
    with contextlib.suppress(OSError):
        os.nice(assignment.niceness)
    logs.setup(assignment.log_level)
    try:
        asyncio.run(_keep(assignment, pipe))
    except Exception:  # said as a log line like any other; serve starts another
        log.exception("keeper process failed")
        raise SystemExit(1) from None


async def _keep(assignment: Assignment, pipe: Connection) -> None:
    api = await client.connect(assignment.kubeconfig)
    events = EventSink(api) if assignment.events else NO_EVENTS
    service = KeeperService(api, lambda: own_caches(assignment.kubeconfig, assignment.settings), assignment.settings,
                            namespace=assignment.namespace, identity=assignment.identity, events=events,
                            timing=assignment.timing, lease_timing=assignment.lease_timing)
    told = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(pipe.fileno(), told.set)  # "stop", or serve gone: either way we stop
    service.start()
    try:
        while not told.is_set():
            if not _report(pipe, service):
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(assignment.report_every):
                    await told.wait()
    finally:
        loop.remove_reader(pipe.fileno())
        await service.stop()
        _report(pipe, service)
        await events.close()
        await api.close()


def _report(pipe: Connection, service: KeeperService) -> bool:
    """Send a report; False when `serve` is gone."""
    keeper = service.keeper if service.elector.leading else None
    report = Report(service.degraded(), metrics.keeper_families(), keeper.passes if keeper else 0,
                    keeper.last_pass if keeper else None)
    try:
        pipe.send(report)
    except OSError:
        return False
    return True


@contextlib.asynccontextmanager
async def own_caches(kubeconfig: str | None, settings: Settings) -> AsyncIterator[WatchedStore]:
    """The caches of one term: listed when it begins, closed (and their memory freed) when it ends."""
    store = WatchedClusterStore(await client.connect(kubeconfig), settings)
    store.start()
    try:
        yield store
    finally:
        await store.close()
