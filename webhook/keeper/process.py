"""The keeper in a process of its own, beside `serve`.

A pass reads every VMI and keeps a record of each VM: at tens of thousands of VMs that is
seconds of CPU and hundreds of thousands of objects, and in the serving process Python's
garbage collections over them would stop the event loop for 100 ms and more, which every
admission reaching the leader would wait out. So `serve` only campaigns for the Lease
(`lease.Elector`: light, and never held up by a pass); for as long as it leads, the keeper
runs in a child process (`python -m webhook.keeper`, child.py) at a lower CPU priority, with
caches of its own. A follower runs no child and holds no keeper caches; a term's child, its
caches and its memory end with the term.

The child acts only while the Lease lets the leader act: every half second `serve` sends it
the moment that ends, and when the term ends it is told to stop, then stopped (pipe.py). The
child reports every second: its readiness notes and the metrics it keeps, which `serve` shows
in /readyz and /metrics (`metrics.Relay`). A child that fails (dies, cannot start, goes silent,
sends what is no report) ends the term; `serve` hands the Lease over and holds off before it
campaigns again, so that another replica can lead.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

from .. import metrics
from .lease import Elector, LeaseTiming
from .pipe import STOP, Assignment, Report, frame, read_frame

log = logging.getLogger("webhook.keeper")

FEED_EVERY = 0.5  # seconds between two sendings of the Lease's deadline
BACKOFF = (5.0, 300.0)  # no campaign after a keeper process failed: first, at most (doubling)
STEADY = 600.0  # this long after the last failure, the backoff starts afresh


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
        try:
            child = await asyncio.create_subprocess_exec(sys.executable, "-m", "webhook.keeper",
                                                         stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        except OSError as exc:
            return await self._failed(f"its process could not start: {exc}")
        log.info("keeper process started", extra={"fields": {"pid": child.pid}})
        self._running, self._heard = True, time.monotonic()
        try:
            why = await self._follow_fed(child)
        except Exception as exc:  # whatever it was, the term ends as for a child that failed
            why = f"could not be followed ({type(exc).__name__}: {exc}) and was ended"
        finally:
            self._running, self.last = False, None
            metrics.RELAY.families = []
            await self._stop(child)
        log.warning("keeper process ended", extra={"fields": {"pid": child.pid, "exitcode": child.returncode,
                                                               "why": why}})
        await self._failed(f"its process {why} (exit code {child.returncode})")

    async def _follow_fed(self, child: asyncio.subprocess.Process) -> str:
        """The assignment given, then the deadline fed while the reports are followed; how it ended."""
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(frame(self.assignment))
        feeding = asyncio.create_task(self._feed(child.stdin), name="keeper deadline")
        try:
            return await self._follow(child.stdout)
        finally:
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)

    async def _failed(self, what: str) -> None:
        """Say it, step down, hand the Lease over and hold off: 5 s, doubling to 5 minutes for
        failures in a row (afresh 10 minutes after the last one), so that another replica can lead."""
        now = time.monotonic()
        self.failures = 1 if now - self._ended_at > STEADY else self.failures + 1
        pause = min(self.backoff[1], self.backoff[0] * 2 ** (self.failures - 1))
        self.ended, self._ended_at = f"{what}; campaigning again in {pause:g}s", now
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
            except Exception as exc:  # a frame too long, or no pickle of ours (another version of the package)
                return f"sent what is no report ({type(exc).__name__}: {exc}) and was ended"
            if not isinstance(report, Report):
                return f"sent what is no report (a {type(report).__name__}) and was ended"
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
