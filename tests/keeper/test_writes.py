"""The keeper's writes as a whole (webhook/keeper/writes.py): the bucket over them, and when a run of
failures means the API is lost rather than one VM's object."""
from __future__ import annotations

import pytest

from webhook.keeper.writes import BURST, LOST, RATE, Result, Writes
from webhook.rules.keeping.record import Action


class Time:
    """A monotonic clock that moves when the bucket sleeps, or when a test says so."""

    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def writes():
    time = Time()
    return Writes(clock=time, sleep=time.sleep), time


def failed(vm, status=500):
    return Result(key=("default", vm), action=Action.MIGRATE, words=f"API answered {status}", holds=True, status=status)


async def test_a_burst_goes_at_once_then_one_write_a_second():
    made, time = writes()
    for _ in range(BURST):
        assert await made.take()
    assert time.slept == []  # a pass's handful of writes (a frozen VM's unpause among them) never waits
    assert await made.take() and time.slept == [pytest.approx(1 / RATE)]
    time.now += 3.5 / RATE  # tokens come back as time passes, up to the burst
    for _ in range(3):
        assert await made.take()
    assert len(time.slept) == 1
    time.now += 1000
    for _ in range(BURST):
        assert await made.take()
    assert len(time.slept) == 1


@pytest.mark.parametrize("status", [0, 500, 503, 429])
async def test_different_vms_failing_in_a_row_without_an_answer_about_them_mean_the_api_is_lost(status):
    made, _ = writes()
    for i in range(1, LOST):
        made.came(failed(f"vm{i}", status))
        assert not made.lost and await made.take()
    made.came(failed(f"vm{LOST}", status))
    assert f"the API failed for {LOST} different VMs in a row" in made.lost
    assert not await made.take()  # the pass writes nothing more
    made.begin()  # the next pass gives the API a fresh chance
    assert not made.lost and await made.take()


@pytest.mark.parametrize("between", [
    Result(key=("default", "vm9"), action=Action.UNPAUSE, done=True),  # one went through
    failed("vm9", 403),  # the API answered about that object: it is there
    failed("vm9", 422),
])
async def test_an_answer_about_an_object_in_between_starts_the_count_again(between):
    made, _ = writes()
    for i in range(1, LOST):
        made.came(failed(f"vm{i}"))
    made.came(between)
    for i in range(1, LOST):
        made.came(failed(f"vm{i + LOST}"))
    assert not made.lost


async def test_one_vm_failing_again_and_refusals_never_mean_the_api_is_lost():
    made, _ = writes()
    for _ in range(LOST + 2):
        made.came(failed("vm1"))  # its dry run, its cancel, …: one VM's
    for i in range(LOST + 2):
        made.came(failed(f"vm{i + 2}", 403))
    assert not made.lost
