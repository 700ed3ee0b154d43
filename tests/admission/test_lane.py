"""The lane: a drain's share-managers judge one at a time, giving the loop back between slices."""
from __future__ import annotations

import asyncio
import time

from webhook.admission.lane import Lane
from webhook.process.pace import in_slices
from webhook.deadline import Deadline


async def in_turn(lane, work, deadline):
    """A share-manager's judging as the rule runs it: its turn, then its steps in slices."""
    async with lane.turn(deadline) as mine:
        return mine and await in_slices(work, deadline)


def steps(name, n, seconds, trace):
    for i in range(n):
        time.sleep(seconds)
        trace.append(name)
        yield i


async def test_two_judgings_take_turns_whole_and_everything_else_runs_between_their_slices():
    """Side by side, each judging would get a turn in every round of the loop; in the lane the
    second starts once the first is done, and a VM start arriving meanwhile runs between slices."""
    lane, trace = Lane(), []

    async def vm_start():
        await asyncio.sleep(0.004)
        trace.append("vm")

    results = await asyncio.gather(in_turn(lane, steps("a", 6, 0.001, trace), Deadline.after(10, 1)),
                                   in_turn(lane, steps("b", 6, 0.001, trace), Deadline.after(10, 1)), vm_start())
    assert results[:2] == [True, True]
    judged = [t for t in trace if t != "vm"]
    assert judged == ["a"] * 6 + ["b"] * 6  # one at a time, never interleaved
    assert 0 < trace.index("vm") < len(trace) - 1  # answered between slices, not after the storm


async def test_a_judging_whose_deadline_passes_while_it_waits_its_turn_gives_up():
    """The apiserver has stopped waiting: the rule answers without a requirement (saying so)."""
    lane, trace = Lane(), []
    first = asyncio.ensure_future(in_turn(lane, steps("a", 40, 0.001, trace), Deadline.after(10, 1)))
    await asyncio.sleep(0)
    assert await in_turn(lane, steps("b", 1, 0, trace), Deadline(time.monotonic() + 0.01)) is False
    assert "b" not in trace
    assert await first is True


async def test_judging_stops_at_the_deadline_and_gives_the_loop_back_as_it_goes():
    """The nodes are judged in slices: between them the loop runs other work; past the deadline
    the judging stops (the rule then answers without a requirement, saying so)."""
    ran = []

    def steps(n, seconds):
        for i in range(n):
            time.sleep(seconds)
            yield i

    async def other():
        ran.append("other")

    asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(other()))
    assert await in_slices(steps(5, 0.003), Deadline.after(10, 1)) is True
    assert ran == ["other"]  # it ran between two slices, not after all of them
    assert await in_slices(steps(1000, 0.001), Deadline(time.monotonic() + 0.02)) is False


async def test_a_share_manager_holds_its_turn_across_its_awaits_and_one_that_cannot_get_it_says_so():
    """The whole of a share-manager's work is its turn, reads and pauses included: another waits
    until it is done, and one whose deadline comes first is told so (it answers without a decision)."""
    lane, trace = Lane(), []

    async def share_manager(name, deadline):
        async with lane.turn(deadline) as mine:
            if not mine:
                trace.append(f"{name}: no turn")
                return
            for step in range(3):
                trace.append(f"{name}{step}")
                await asyncio.sleep(0.002)  # a pause in its work: the loop runs others, not its peers

    await asyncio.gather(share_manager("a", Deadline.after(10, 1)), share_manager("b", Deadline.after(10, 1)),
                         share_manager("c", Deadline(time.monotonic() + 0.001)))
    assert "c: no turn" in trace and trace.index("c: no turn") < trace.index("b0")
    assert [t for t in trace if t[0] in "ab"] == ["a0", "a1", "a2", "b0", "b1", "b2"]  # never interleaved
