"""Work beside admission: one task however often it is started, gone once stopped, and a
failure said until a later step succeeds."""
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


async def test_started_twice_it_runs_once_and_stopped_it_runs_no_more():
    steps = Steps()
    work = Background("work", steps, log=log, failure="working failed", period=0.05)
    work.start()
    work.start()
    await asyncio.sleep(0.22)
    assert 3 <= steps.calls <= 6  # one task: about one step per period
    await work.stop()
    assert not work.running
    stopped_at = steps.calls
    await asyncio.sleep(0.15)
    assert steps.calls == stopped_at
    work.start()  # started again after a stop: it works again
    await asyncio.sleep(0.12)
    assert steps.calls > stopped_at
    await work.stop()
    await work.stop()  # a second stop does nothing


async def test_a_failure_is_logged_and_said_until_a_step_succeeds(caplog):
    steps = Steps(failing=2)
    work = Background("work", steps, log=log, failure="working failed", period=0.2, retry=0.01)
    with caplog.at_level(logging.ERROR, logger="test.background"):
        work.start()
        for _ in range(100):
            if steps.calls >= 2:
                break
            await asyncio.sleep(0.002)
        assert work.degraded() == ["working failed: RuntimeError: attempt 2 failed"]
        await asyncio.sleep(0.05)  # retried soon, and it works: nothing more to say
        assert steps.calls == 3 and work.degraded() == []
    await work.stop()
    assert [r.getMessage() for r in caplog.records] == ["working failed", "working failed"]
    assert all(r.exc_info for r in caplog.records)  # with the traceback


async def test_wait_first_waits_a_period_before_the_first_step():
    steps = Steps()
    work = Background("work", steps, log=log, failure="working failed", period=0.1, wait_first=True)
    work.start()
    await asyncio.sleep(0.05)
    assert steps.calls == 0
    await asyncio.sleep(0.1)
    assert steps.calls == 1
    await work.stop()
