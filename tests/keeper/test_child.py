"""The keeper's process acts only before the last deadline `serve` sent it, and not at all
once told to stop or once `serve` is gone."""
import asyncio
import time

from tests.support.kubevirt_api import eventually

from webhook.keeper.child import Authority, _listen
from webhook.keeper.pipe import STOP, frame


async def listening():
    orders, authority = asyncio.StreamReader(), Authority()
    return orders, authority, asyncio.create_task(_listen(orders, authority))


async def sent(orders, message, authority=None):
    """`message` written to the pipe; a deadline waited for until the listener has read it."""
    orders.feed_data(frame(message))
    if authority is not None:
        await eventually(lambda: authority.until == message)


async def test_the_child_acts_only_before_the_last_deadline_it_was_sent():
    orders, authority, task = await listening()
    assert not authority.may_act(0.0)  # nothing sent yet
    await sent(orders, time.monotonic() + 5.0, authority)
    assert authority.may_act(4.0)
    assert not authority.may_act(5.5)  # a request that could end after the deadline is not made
    await sent(orders, time.monotonic() - 1.0, authority)  # the Lease was not renewed in time
    assert not authority.may_act(0.0)
    await sent(orders, time.monotonic() + 5.0, authority)  # renewed after all
    assert authority.may_act(0.0)
    await sent(orders, STOP)
    await asyncio.wait_for(task, 1)
    assert not authority.may_act(0.0)  # told to stop: however long the last deadline had to run


async def test_the_child_acts_no_more_once_serve_is_gone():
    orders, authority, task = await listening()
    await sent(orders, time.monotonic() + 5.0, authority)
    orders.feed_data(frame(time.monotonic() + 5.0)[:3])  # serve died while writing
    orders.feed_eof()
    await asyncio.wait_for(task, 1)
    assert not authority.may_act(0.0)
