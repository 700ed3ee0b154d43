"""A serving process stops on SIGTERM or SIGINT, and only while it says so."""
import asyncio
import os
import signal

import pytest

from webhook.process.loop import new_event_loop, stop_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_the_first_stop_signal_sets_the_event(sig):
    with stop_signals() as stop:
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stop.wait(), 5)
    loop = asyncio.get_running_loop()
    assert loop.remove_signal_handler(sig) is False  # none left installed


def test_the_loop_is_uvloops_where_it_is_installed():
    loop = new_event_loop()
    try:
        try:
            import uvloop
        except ImportError:
            assert isinstance(loop, asyncio.AbstractEventLoop)
        else:
            assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
