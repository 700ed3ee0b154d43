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


@pytest.fixture
def timers_armed(monkeypatch):
    """The timers the deadline arms (asyncio.timeout, counted)."""
    armed, real = [], asyncio.timeout
    monkeypatch.setattr(asyncio, "timeout", lambda delay: armed.append(delay) or real(delay))
    return armed


async def test_a_read_answered_from_memory_arms_no_timer_and_one_that_waits_does(timers_armed):
    """The caches answer a drain's share-manager four reads without waiting: no timer to arm and
    cancel for each. A read that waits for the API is held to the deadline as before."""

    async def from_memory(name, *, timeout):
        return name

    async def from_the_api(name, *, timeout):
        await asyncio.sleep(0.01)
        return name

    deadline = Deadline(time.monotonic() + 5)
    assert await deadline.call(from_memory, "pv") == "pv" and len(timers_armed) == 0
    assert await deadline.call(from_the_api, "pv") == "pv" and len(timers_armed) == 1


async def test_a_read_that_waits_gets_what_it_waited_for_and_raises_what_it_raises():
    """After its first step the read is awaited as it would be directly: the values it is sent, an
    error it raises, and its own handling of an error thrown into what it waits for."""
    loop = asyncio.get_running_loop()

    async def read(*, timeout):
        first = loop.create_future()
        loop.call_later(0.01, first.set_result, "listed")
        second = loop.create_future()
        loop.call_later(0.01, second.set_exception, OSError("reset"))
        try:
            await second
        except OSError as error:
            return f"{await first} after {error}"

    assert await Deadline.after(5, 0).call(read) == "listed after reset"

    async def failing(*, timeout):
        await asyncio.sleep(0)
        raise LookupError("gone")

    with pytest.raises(LookupError, match="gone"):
        await Deadline.after(5, 0).call(failing)


def waiting_read(cleaned):
    """A read that waits a minute for its answer, and notes its clean-up."""
    async def read(*, timeout):
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append(True)

    return read


async def test_a_read_cancelled_while_it_waits_is_cancelled_and_cleans_up():
    """A review whose handler is cancelled (the apiserver hung up) cancels the read it waits on,
    which runs its own clean-up; the deadline's timer goes with it."""
    cleaned = []
    task = asyncio.ensure_future(Deadline.after(30, 0).call(waiting_read(cleaned)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_a_read_past_the_deadline_is_cancelled_and_cleans_up():
    cleaned = []
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await Deadline.after(0.1, 0).call(waiting_read(cleaned))
    assert cleaned == [True] and time.monotonic() - started < 1
