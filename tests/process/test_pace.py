"""Long work paced on the event loop: the loop given back every slice, and only then."""
import asyncio
import time

from webhook.process.pace import Pacer


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
    assert await turns_beside(Pacer(0.002), 0.2) >= 10  # about 100 slices in 200 ms


async def test_work_within_its_slice_keeps_the_loop():
    assert await turns_beside(Pacer(10.0), 0.02) == 0
