"""The lane: a drain's share-managers judge one at a time, giving the loop back between slices."""
from __future__ import annotations

import asyncio
import time

from tests.support.kube import LONGHORN_NS, review, share_manager_pod
from webhook.admission.admit import Shared, admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.process.pace import in_slices
from webhook.stores.snapshot import SnapshotStore


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


class Tracing(SnapshotStore):
    """No PVs of any volume, each read taking three pauses, traced: a share-manager's work in its turn."""

    def __init__(self, trace):
        super().__init__([])
        self.trace = trace

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        for step in range(3):
            self.trace.append(f"{handle}{step}")
            await asyncio.sleep(0.002)  # a pause in its work: the loop runs others, not its peers
        return []


async def test_share_managers_take_turns_whole_and_one_that_cannot_get_its_turn_says_so():
    """The whole of a share-manager's work is its turn, reads and pauses included: another waits until it is done, a
    VM start arriving meanwhile runs at once, and one whose deadline comes first is answered without a decision."""
    trace, shared = [], Shared()

    async def share_manager(volume, deadline):
        request = parse_review(review(share_manager_pod(volume), namespace=LONGHORN_NS))
        outcome = await admit(request, Tracing(trace), Settings(), deadline, shared)
        trace.append(f"{volume}: {outcome.skipped}")

    async def vm_start():
        await asyncio.sleep(0.003)
        trace.append("vm")

    await asyncio.gather(share_manager("a", Deadline.after(10, 1)), share_manager("b", Deadline.after(10, 1)),
                         share_manager("c", Deadline(time.monotonic() + 0.001)), vm_start())
    assert trace.index("c: no decision before the deadline") < trace.index("b0")
    assert [t for t in trace if t[:2] in ("a0", "a1", "a2", "b0", "b1", "b2")] == ["a0", "a1", "a2", "b0", "b1", "b2"]
    assert trace.index("a0") < trace.index("vm") < trace.index("b2")  # never after the whole storm
