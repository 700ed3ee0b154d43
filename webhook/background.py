"""Work that runs in a task of its own, again and again, until stopped, in either process (reports, reloads, Events,
the keeper's Lease and passes, the informers): nothing that answers waits on it, and it never dies of a failure."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


class Background:
    """`step` again and again in a task named `name`: `period` seconds after each step (and before the first with
    `wait_first`), `retry` seconds after one that raised (default: the period)."""

    def __init__(self, name: str, step: Callable[[], Awaitable[object]], *, log: logging.Logger, failure: str,
                 period: float = 0.0, retry: float | None = None, wait_first: bool = False,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep):
        self.name, self.step, self.log, self.failure = name, step, log, failure
        self.period, self.retry, self.wait_first = period, period if retry is None else retry, wait_first
        self.sleep = sleep
        self.error: str | None = None  # why the last step failed, until one succeeds
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run in the background (from the running loop); a second call does nothing."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended; a second call does nothing."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def degraded(self) -> list[str]:
        """A readiness note while the last step failed."""
        return [f"{self.failure}: {self.error}"] if self.error is not None else []

    async def _run(self) -> None:
        pause = self.period if self.wait_first else 0.0
        while True:
            if pause:
                await self.sleep(pause)
            try:
                await self.step()
            except Exception as exc:  # logged and said; the next step may succeed
                self.log.exception(self.failure)
                self.error, pause = f"{type(exc).__name__}: {exc}", self.retry
            else:
                self.error, pause = None, self.period


class Companion:
    """Something that runs beside admission as one Background `task` (admission/service.py):
    started, stopped and said degraded as that task is."""

    task: Background

    def start(self) -> None:
        self.task.start()

    async def stop(self) -> None:
        await self.task.stop()

    def degraded(self) -> list[str]:
        return self.task.degraded()
