"""The event loop's lag: what a request arriving while the loop is held waits before its handler."""
from __future__ import annotations

import asyncio
import time

from webhook import metrics
from webhook.admission.looplag import LoopLag


async def test_a_held_loop_shows_as_lag_in_the_metrics_and_for_the_log_lines(monkeypatch):
    monkeypatch.setattr("webhook.admission.looplag.PERIOD", 0.02)
    lag = LoopLag()
    lag.start()
    try:
        await asyncio.sleep(0.1)
        assert lag.recent() < 0.2  # an idle loop
        time.sleep(0.3)  # the loop held, as by a long computation
        await asyncio.sleep(0.1)
        assert lag.recent() >= 0.2
        assert metrics.LOOP_LAG_MAX._value.get() >= 0.2
        assert metrics.REGISTRY.get_sample_value("colocate_event_loop_lag_seconds_count") > 0
    finally:
        await lag.stop()


def test_the_largest_lag_is_kept_for_its_window_only():
    lag = LoopLag()  # a window of 60 s
    lag.record(2.0, now=100.0)
    lag.record(0.01, now=130.0)
    assert lag.recent(now=130.0) == 0.01  # the log line's: the last second
    assert metrics.LOOP_LAG_MAX._value.get() == 2.0  # the alert's: the last minute
    lag.record(0.02, now=161.0)
    assert metrics.LOOP_LAG_MAX._value.get() == 0.02  # two seconds of lag a minute ago: forgotten
