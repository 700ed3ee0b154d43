"""The bytes of bodies held at once (budget.py): a body that does not fit waits its turn, first
come first served; one larger than the budget goes alone; a wait ends at its deadline without
taking room, and a wait cancelled as room was given hands the room on."""
import asyncio

import pytest

from webhook import metrics
from webhook.admission.budget import Budget, NoRoom


def waiting():
    """The bodies waiting for room, as /metrics says."""
    return metrics.REGISTRY.get_sample_value("colocate_admission_requests_waiting")


async def holding(budget, size, entered, leave, within=5.0):
    await budget.take(size, within)
    try:
        entered.append(size)
        await leave.wait()
    finally:
        budget.release(size)


async def settled():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_bodies_that_fit_go_at_once_and_the_next_waits_for_room():
    budget, entered, leave = Budget(10), [], asyncio.Event()
    first = asyncio.create_task(holding(budget, 6, entered, leave))
    second = asyncio.create_task(holding(budget, 4, entered, leave))
    third = asyncio.create_task(holding(budget, 3, entered, asyncio.Event()))
    await settled()
    assert (entered, budget.held, waiting()) == ([6, 4], 10, 1)
    leave.set()
    await asyncio.gather(first, second)
    await settled()
    assert (entered, budget.held, waiting()) == ([6, 4, 3], 3, 0)
    third.cancel()
    await asyncio.gather(third, return_exceptions=True)
    assert budget.held == 0


async def test_first_come_first_served_a_small_body_does_not_pass_a_large_one_waiting():
    budget, entered = Budget(10), []
    hold = asyncio.Event()
    big = asyncio.create_task(holding(budget, 8, entered, hold))
    await settled()
    larger = asyncio.create_task(holding(budget, 9, entered, asyncio.Event()))
    await settled()
    small = asyncio.create_task(holding(budget, 1, entered, asyncio.Event()))  # would fit, but comes after
    await settled()
    assert entered == [8] and waiting() == 2
    hold.set()
    await big
    await settled()
    assert entered == [8, 9, 1] and budget.held == 10
    for task in (larger, small):
        task.cancel()
    await asyncio.gather(larger, small, return_exceptions=True)
    assert budget.held == 0


async def test_a_body_larger_than_the_budget_goes_alone():
    budget, entered, leave = Budget(10), [], asyncio.Event()
    alone = asyncio.create_task(holding(budget, 25, entered, leave))
    await settled()
    after = asyncio.create_task(holding(budget, 1, entered, leave))
    await settled()
    assert entered == [25] and waiting() == 1
    leave.set()
    await asyncio.gather(alone, after)
    assert entered == [25, 1] and budget.held == 0


async def test_a_wait_ends_at_its_deadline_with_no_room_taken():
    budget, entered, leave = Budget(10), [], asyncio.Event()
    first = asyncio.create_task(holding(budget, 10, entered, leave))
    await settled()
    with pytest.raises(NoRoom, match="no room for a body of 5 bytes before the deadline \\(10 of 10 held\\)"):
        await budget.take(5, 0.05)
    assert (budget.held, waiting()) == (10, 0)
    leave.set()
    await first
    assert budget.held == 0


async def test_a_wait_cancelled_as_room_is_given_hands_the_room_on():
    budget, entered, leave = Budget(10), [], asyncio.Event()
    first = asyncio.create_task(holding(budget, 10, entered, leave))
    await settled()
    cancelled = asyncio.create_task(holding(budget, 5, entered, asyncio.Event()))
    await settled()
    leave.set()
    await first  # room given to the waiting one as it is cancelled, before it runs
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert (budget.held, waiting(), entered) == (0, 0, [10])
