"""The event loop a serving process runs on, and how it is told to stop."""
from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (a dependency on Linux), else asyncio's: asyncio.Runner's loop_factory."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@contextlib.contextmanager
def stop_signals() -> Iterator[asyncio.Event]:
    """An Event set by the first SIGTERM (the kubelet stopping the pod) or SIGINT while the block runs."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
