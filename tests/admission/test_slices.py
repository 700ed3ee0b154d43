"""A drain's share-managers judge the nodes in slices, giving the loop back between them."""
from __future__ import annotations

import asyncio
import time

from webhook.admission.slices import in_slices
from webhook.deadline import Deadline


def steps(name, n, seconds, trace):
    for i in range(n):
        time.sleep(seconds)
        trace.append(name)
        yield i


async def test_a_vm_start_is_answered_between_the_slices_of_two_judgings_side_by_side():
    """Two share-managers judge 20 ms of nodes each at once: a VM start arriving meanwhile runs
    after a few slices of them, not after both are done."""
    trace = []

    async def vm_start():
        await asyncio.sleep(0.004)
        trace.append("vm")

    results = await asyncio.gather(in_slices(steps("a", 20, 0.001, trace), Deadline.after(10, 1), 0.002),
                                   in_slices(steps("b", 20, 0.001, trace), Deadline.after(10, 1), 0.002), vm_start())
    assert results[:2] == [True, True]
    assert sorted(t for t in trace if t != "vm") == ["a"] * 20 + ["b"] * 20
    assert 0 < trace.index("vm") < len(trace) / 2  # answered between slices, not after the storm


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
    assert await in_slices(steps(5, 0.003), Deadline.after(10, 1), slice_seconds=0.002) is True
    assert ran == ["other"]  # it ran between two slices, not after all of them
    assert await in_slices(steps(1000, 0.001), Deadline(time.monotonic() + 0.02), slice_seconds=0.002) is False
