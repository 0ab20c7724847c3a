"""Event-loop lag: a callback that holds the loop shows up as a timer that fired that late."""

from __future__ import annotations

import asyncio
import time

from coordinator_server.loop_lag import EventLoopLag
from coordinator_server.metrics import LATENCY_BUCKETS_S, Histogram


async def test_a_loop_held_for_300_ms_is_observed_about_that_late() -> None:
    histogram = Histogram(LATENCY_BUCKETS_S)
    probe = EventLoopLag(histogram, interval_s=0.05)
    probe.start()
    try:
        await asyncio.sleep(0.2)
        quiet = histogram.count
        assert quiet >= 2
        # Nothing held the loop yet: no timer was a quarter of a second late.
        assert sum(histogram.counts[LATENCY_BUCKETS_S.index(0.25) + 1 :]) == 0
        # A callback that holds the loop for 0.3 s.
        asyncio.get_running_loop().call_soon(time.sleep, 0.3)
        await asyncio.sleep(0.4)
    finally:
        await probe.stop()
    late = sum(histogram.counts[LATENCY_BUCKETS_S.index(0.25) + 1 :])
    assert late == 1
    # Due at most 0.05 s into the 0.3 s stall: at least 0.25 s late, at most 0.3 s and change.
    assert histogram.counts[LATENCY_BUCKETS_S.index(0.5)] == 1
    assert histogram.count > quiet
