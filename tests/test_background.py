"""Work beside admission: one task however often it is started, gone once stopped, and a
failure said until a later step succeeds. Its pauses run on a clock the test drives."""
import asyncio
import logging

from webhook.background import Background

log = logging.getLogger("test.background")


class Steps:
    """A step that fails while `failing`, and counts its calls."""

    def __init__(self, failing=0):
        self.calls, self.failing = 0, failing

    async def __call__(self):
        self.calls += 1
        if self.calls <= self.failing:
            raise RuntimeError(f"attempt {self.calls} failed")


class Clock:
    """Pauses that last until the test lets them end: `paused()` waits until a task is in one,
    `advance()` ends every pause under way. `asked` is every pause asked for, in seconds."""

    def __init__(self):
        self.asked, self._pauses, self._changed = [], [], asyncio.Event()

    async def sleep(self, seconds):
        pause = asyncio.get_running_loop().create_future()
        self.asked.append(seconds)
        self._pauses.append(pause)
        self._changed.set()
        try:
            await pause
        finally:
            self._pauses.remove(pause)

    async def paused(self, count=1):
        while len(self._pauses) < count:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 5)

    async def advance(self):
        """End the pauses under way, and wait until the task is in its next one."""
        ending = list(self._pauses)
        for pause in ending:
            pause.set_result(None)
        while any(pause in self._pauses for pause in ending):
            await asyncio.sleep(0)
        await self.paused()


def tasks(name):
    return [task for task in asyncio.all_tasks() if task.get_name() == name and not task.done()]


async def test_started_twice_it_runs_once_and_stopped_it_runs_no_more():
    clock, steps = Clock(), Steps()
    work = Background("work", steps, log=log, failure="working failed", period=0.05, sleep=clock.sleep)
    work.start()
    work.start()
    await clock.paused()
    assert len(tasks("work")) == 1 and steps.calls == 1  # one task: the first step, then its pause
    await clock.advance()
    await clock.advance()
    assert steps.calls == 3 and clock.asked == [0.05, 0.05, 0.05]
    await work.stop()
    assert tasks("work") == []
    work.start()  # started again after a stop: it works again
    await clock.paused()
    assert steps.calls == 4
    await work.stop()
    await work.stop()  # a second stop does nothing
    assert steps.calls == 4


async def test_a_failure_is_logged_and_said_until_a_step_succeeds(caplog):
    clock, steps = Clock(), Steps(failing=2)
    work = Background("work", steps, log=log, failure="working failed", period=0.2, retry=0.01, sleep=clock.sleep)
    with caplog.at_level(logging.ERROR, logger="test.background"):
        work.start()
        await clock.paused()
        assert work.degraded() == ["working failed: RuntimeError: attempt 1 failed"]
        await clock.advance()
        assert work.degraded() == ["working failed: RuntimeError: attempt 2 failed"]
        await clock.advance()  # retried soon, and it works: nothing more to say
        assert steps.calls == 3 and work.degraded() == []
        assert clock.asked == [0.01, 0.01, 0.2]  # the retry after each failure, then the period
    await work.stop()
    assert [r.getMessage() for r in caplog.records] == ["working failed", "working failed"]
    assert all(r.exc_info for r in caplog.records)  # with the traceback


async def test_wait_first_waits_a_period_before_the_first_step():
    clock, steps = Clock(), Steps()
    work = Background("work", steps, log=log, failure="working failed", period=0.1, wait_first=True, sleep=clock.sleep)
    work.start()
    await clock.paused()
    assert steps.calls == 0 and clock.asked == [0.1]
    await clock.advance()
    assert steps.calls == 1 and clock.asked == [0.1, 0.1]
    await work.stop()
