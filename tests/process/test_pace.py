"""Long work paced on the event loop: the loop given back every slice, and only then."""
import asyncio
import time

from webhook.process import pace
from webhook.process.pace import AfterReviews, Pacer


async def busy_steps(pacer: Pacer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        await pacer()


async def turns_beside(pacer: Pacer, seconds: float) -> int:
    """How often another task ran while the work held the loop for `seconds`."""
    turns = 0
    done = False

    async def other():
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)  # it starts
    started = turns
    await busy_steps(pacer, seconds)
    done = True
    await task
    return turns - started


async def test_long_work_gives_the_loop_back_every_slice():
    assert await turns_beside(Pacer(), 0.2) >= 10  # about 100 slices of 2 ms in 200 ms


async def test_work_within_its_slice_keeps_the_loop(monkeypatch):
    monkeypatch.setattr(pace, "SLICE", 10.0)
    assert await turns_beside(Pacer(), 0.02) == 0


async def test_work_after_reviews_waits_until_they_are_answered():
    after, in_flight = AfterReviews(hold=5.0, look_again=0.005), [1]
    after.busy = lambda: bool(in_flight)
    waiting = asyncio.create_task(after.wait())
    await asyncio.sleep(0.1)
    assert not waiting.done()
    in_flight.clear()
    await asyncio.wait_for(waiting, 0.05)  # answered: at once
    began = time.monotonic()
    await after.wait()
    assert time.monotonic() - began < 0.01  # nothing in flight: no wait


async def test_work_after_reviews_waits_no_longer_than_the_hold_under_a_sustained_load():
    """Held for the hold, then free for as long again before a new hold: the load delays the work,
    it never stops it."""
    after = AfterReviews(hold=0.2, look_again=0.005)
    after.busy = lambda: True
    began = time.monotonic()
    await after.wait()
    assert 0.2 <= time.monotonic() - began < 0.3  # the whole hold
    began = time.monotonic()
    await after.wait()
    assert time.monotonic() - began < 0.01  # then free
    await asyncio.sleep(0.25)
    began = time.monotonic()
    await after.wait()
    assert 0.2 <= time.monotonic() - began < 0.3  # a new hold
