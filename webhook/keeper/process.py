"""The keeper in a process of its own, beside `serve`.

A pass reads every VMI and keeps a record of each VM: at tens of thousands of VMs that is
seconds of CPU and hundreds of thousands of objects, and in the serving process Python's
garbage collections over them would stop the event loop for 100 ms and more, which every
admission reaching the leader would wait out. So `serve` only campaigns for the Lease
(`lease.Elector`: light, and never held up by a pass); for as long as it leads, the keeper
runs in a child process (`python -m webhook.keeper`) at a lower CPU priority, with caches of
its own. A follower runs no child and holds no keeper caches; a term's child, its caches and
its memory end with the term.

The child acts only while the Lease lets the leader act: every half second `serve` sends it
the moment that ends (on CLOCK_MONOTONIC, the same clock in every process), and when the term
ends it is told to stop, then stopped. The child reports every second on its stdout: its
readiness notes and the metrics it keeps, which `serve` shows in /readyz and /metrics
(`metrics.Relay`). A child that ends on its own ends the term, as a keeper that fails does;
the next campaign starts another. A child whose `serve` is gone (its stdin closed) stops.

Frames both ways: a 4-byte length, then a pickle (both ends are this package).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import IO, Any

from prometheus_client.metrics_core import Metric

from .. import logs, metrics
from ..cluster import client
from ..cluster.cache import WatchedClusterStore
from ..cluster.events import NO_EVENTS, EventSink
from ..cluster.store import WatchedStore
from ..config import Settings
from .keeper import Keeper, KeeperTiming, PassTime
from .lease import Elector, LeaseTiming

log = logging.getLogger("webhook.keeper")

STOP = "stop"
FEED_EVERY = 0.5  # seconds between two sendings of the Lease's deadline
NICENESS = 10  # added to serve's: the keeper's work yields the CPU to admission
MAX_FRAME = 64 << 20  # a longer frame is no report of ours: the child is ended
BACKOFF = (5.0, 300.0)  # no campaign after a keeper process failed: first, at most (doubling)
STEADY = 600.0  # a child that lived this long starts the backoff afresh


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


class KeeperProcess:
    """In `serve`: the campaign for the Lease, and the keeper's process for as long as it leads.
    A companion of the admission service: start(), async stop(), degraded()."""

    def __init__(self, api: Any, assignment: Assignment, *, namespace: str, identity: str,
                 lease_timing: LeaseTiming = LeaseTiming(), stop_timeout: float = 5.0, silent_after: float = 10.0,
                 backoff: tuple[float, float] = BACKOFF):
        if assignment.timing.request_timeout >= lease_timing.renew_deadline:
            # A migration is created only if its request ends within the renew deadline.
            raise ValueError("the keeper's request timeout must be shorter than the lease's renew deadline")
        self.assignment, self.stop_timeout, self.silent_after = assignment, stop_timeout, silent_after
        self.backoff = backoff
        self.elector = Elector(api, namespace=namespace, name=assignment.settings.lease_name, identity=identity,
                               lead=self._term, timing=lease_timing)
        self.last: Report | None = None  # the current child's last report
        self.ended: str | None = None  # how the last child failed, until another reports
        self.failures = 0  # children that failed in a row
        self._running = False  # a child of this term runs
        self._heard = self._ended_at = 0.0  # when it last reported (or started), when one failed

    def start(self) -> None:
        self.elector.start()

    async def stop(self) -> None:
        """The child stopped first, then the campaign; the Lease handed over (Elector.stop)."""
        await self.elector.stop()

    def degraded(self) -> list[str]:
        """Readiness notes: the Lease cannot be read or written; the keeper's process failed or
        went silent (hung, or starved of CPU); what the leading keeper cannot see or do."""
        notes = [f"lease: {self.elector.error}"] if self.elector.error else []
        if self.ended and (self.elector.leading or time.monotonic() - self._ended_at < self.backoff[1]):
            notes.append(self.ended)  # until another reports; a follower forgets it
        silent = time.monotonic() - self._heard
        if self._running and silent > self.silent_after:
            notes.append(f"its process has not reported for {silent:.0f}s")
        notes += self.last.notes if self.last is not None else []
        return [f"keeper: {note}" for note in notes]

    async def _term(self) -> None:
        """One term's keeper: its process started, fed the Lease's deadline and followed until
        it ends (or goes silent: then ended); stopped when the term ends first. A child that
        fails ends the term and hands the Lease over, and this replica holds off (backoff)."""
        began = time.monotonic()
        try:
            child = await asyncio.create_subprocess_exec(sys.executable, "-m", "webhook.keeper",
                                                         stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        except OSError as exc:
            return await self._failed(f"its process could not start: {exc}", began)
        log.info("keeper process started", extra={"fields": {"pid": child.pid}})
        self._running, self._heard = True, began
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write(frame(self.assignment))
            feeding = asyncio.create_task(self._feed(child.stdin), name="keeper deadline")
            try:
                why = await self._follow(child.stdout)
            finally:
                feeding.cancel()
                await asyncio.gather(feeding, return_exceptions=True)
        finally:
            self._running, self.last = False, None
            metrics.RELAY.families = []
            await self._stop(child)
        log.warning("keeper process ended", extra={"fields": {"pid": child.pid, "exitcode": child.returncode,
                                                               "why": why}})
        await self._failed(f"its process {why} (exit code {child.returncode})", began)

    async def _failed(self, what: str, began: float) -> None:
        """Say it, step down, hand the Lease over and hold off: 5 s, doubling to 5 minutes
        (afresh after a child that lived 10 minutes), so that another replica can lead."""
        self.failures = 1 if time.monotonic() - began > STEADY else self.failures + 1
        pause = min(self.backoff[1], self.backoff[0] * 2 ** (self.failures - 1))
        self.ended, self._ended_at = f"{what}; campaigning again in {pause:g}s", time.monotonic()
        self.elector.hold_off(pause)
        self.elector.step_down(what)
        await self.elector.release()

    async def _feed(self, pipe: asyncio.StreamWriter) -> None:
        """The moment the child must stop acting, on CLOCK_MONOTONIC, every FEED_EVERY seconds."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ConnectionError, RuntimeError):  # RuntimeError: uvloop's, on a closed pipe
            while not pipe.is_closing():
                until = self.elector.acting_until()
                pipe.write(frame(0.0 if until is None else time.monotonic() + until - loop.time()))
                await pipe.drain()
                await asyncio.sleep(FEED_EVERY)

    async def _follow(self, pipe: asyncio.StreamReader) -> str:
        """The child's reports until it closes its stdout, sends what is no report, or says
        nothing for three times `silent_after`; returns which."""
        while True:
            try:
                async with asyncio.timeout(3 * self.silent_after):
                    report = await read_frame(pipe)
            except asyncio.IncompleteReadError:
                return "ended"
            except TimeoutError:
                return f"said nothing for {3 * self.silent_after:g}s and was ended"
            except (ValueError, pickle.UnpicklingError, EOFError) as exc:
                return f"sent what is no report ({exc}) and was ended"
            self.last, self.ended, self._heard = report, None, time.monotonic()
            metrics.RELAY.families = report.families

    async def _stop(self, child: asyncio.subprocess.Process) -> None:
        """Told to stop at once (it acts no more), then waited for; killed if it does not end in time."""
        if child.returncode is None and child.stdin is not None and not child.stdin.is_closing():
            with contextlib.suppress(ConnectionError, RuntimeError):
                child.stdin.write(frame(STOP))
            child.stdin.close()
        try:
            async with asyncio.timeout(self.stop_timeout):
                await child.wait()
        except TimeoutError:
            log.warning("keeper process did not stop in time", extra={"fields": {"pid": child.pid}})
            child.kill()
            await child.wait()  # at once, after SIGKILL
        finally:
            if child.returncode is None:  # cancelled while waiting
                child.kill()


# --------------------------------------------------------------------------- the child


class Authority:
    """What the child knows of the Lease: until when its leader may act (time.monotonic())."""

    def __init__(self) -> None:
        self.until = 0.0

    def may_act(self, within: float) -> bool:
        return time.monotonic() + within < self.until


def child_main() -> None:
    """`python -m webhook.keeper`: the keeper, for the term of the `serve` that started it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches serve, which stops us in turn
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    logs.setup("info", process="keeper")  # until the assignment gives the level
    reports = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever else is printed goes to the log, not the frames
    try:
        asyncio.run(_keep(reports))
    except Exception:  # said as a log line like any other; serve's term ends and another starts
        log.exception("keeper process failed")
        raise SystemExit(1) from None


async def _keep(reports: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    orders = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(orders), sys.stdin)
    assignment: Assignment = await read_frame(orders)
    logs.setup(assignment.log_level, process="keeper")
    authority = Authority()
    api = await client.connect(assignment.kubeconfig)
    events = EventSink(api) if assignment.events else NO_EVENTS
    try:
        async with own_caches(assignment.kubeconfig, assignment.settings) as store:
            keeper = Keeper(api, store, assignment.settings, events=events, timing=assignment.timing,
                            authority=authority.may_act)
            await _lead(keeper, orders, authority, reports, assignment.report_every)
    finally:
        await events.close()
        await api.close()


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
    report = Report(keeper.degraded(), metrics.keeper_families(), keeper.passes, keeper.last_pass)
    try:
        reports.write(frame(report))
        reports.flush()
    except (BrokenPipeError, ValueError):  # ValueError: already closed
        return False
    return True


@contextlib.asynccontextmanager
async def own_caches(kubeconfig: str | None, settings: Settings) -> AsyncIterator[WatchedStore]:
    """The term's caches: listed when it begins, closed when it ends."""
    store = WatchedClusterStore(await client.connect(kubeconfig), settings)
    store.start()
    try:
        yield store
    finally:
        await store.close()
