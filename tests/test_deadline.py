"""One Deadline per review: each read is given what is left of it, and held to it."""
import asyncio
import time

import pytest

from webhook.deadline import Deadline


async def test_a_read_is_given_what_is_left_of_the_deadline():
    given = []

    async def read(name, *, timeout):
        given.append((name, timeout))
        return name

    deadline = Deadline(time.monotonic() + 5)
    assert await deadline.call(read, "pvc") == "pvc"
    [(name, timeout)] = given
    assert name == "pvc" and 4 < timeout <= 5


async def test_a_read_that_ignores_its_timeout_is_held_to_the_deadline():
    async def hanging(*, timeout):
        await asyncio.sleep(60)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await Deadline.after(0.3, 0).call(hanging)
    assert time.monotonic() - started < 1


async def test_a_deadline_already_passed_gives_no_time():
    async def read(*, timeout):
        await asyncio.sleep(0.05)
        return timeout

    with pytest.raises(TimeoutError):
        await Deadline(time.monotonic() - 1).call(read)
    with pytest.raises(TimeoutError):
        async with Deadline(time.monotonic() - 1).timeout():
            await asyncio.sleep(0.05)
