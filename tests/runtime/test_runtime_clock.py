"""The runtime's clocks."""

from __future__ import annotations

import asyncio
import time

import pytest

from coordinator_server.runtime.clock import ManualClock, SystemClock


def test_manual_clock_runs_due_callbacks_in_due_time_order() -> None:
    clock = ManualClock(start_ms=100)
    ran: list[tuple[str, int]] = []
    clock.call_later(30, lambda: ran.append(("c", clock.now_ms())))
    clock.call_later(10, lambda: ran.append(("a", clock.now_ms())))
    clock.call_later(10, lambda: ran.append(("b", clock.now_ms())))
    clock.call_later(31, lambda: ran.append(("late", clock.now_ms())))
    clock.advance(30)
    assert ran == [("a", 110), ("b", 110), ("c", 130)]
    assert clock.now_ms() == 130
    clock.advance(1)
    assert ran[-1] == ("late", 131)


def test_manual_clock_runs_callbacks_set_by_callbacks_when_due() -> None:
    clock = ManualClock()
    ran: list[int] = []

    def first() -> None:
        ran.append(clock.now_ms())
        clock.call_later(5, lambda: ran.append(clock.now_ms()))
        clock.call_later(50, lambda: ran.append(clock.now_ms()))

    clock.call_later(10, first)
    clock.advance(20)
    assert ran == [10, 15]
    assert clock.pending_timers == 1
    assert clock.next_due_ms() == 60


def test_manual_clock_skips_cancelled_callbacks() -> None:
    clock = ManualClock()
    ran: list[str] = []
    handle = clock.call_later(10, lambda: ran.append("cancelled"))
    clock.call_later(10, lambda: ran.append("kept"))
    handle.cancel()
    assert clock.pending_timers == 1
    clock.advance(10)
    assert ran == ["kept"]
    assert clock.next_due_ms() is None


def test_manual_clock_treats_a_negative_delay_as_now_and_refuses_to_go_back() -> None:
    clock = ManualClock(start_ms=5)
    ran: list[int] = []
    clock.call_later(-3, lambda: ran.append(clock.now_ms()))
    clock.advance(0)
    assert ran == [5]
    with pytest.raises(ValueError, match="back"):
        clock.advance(-1)


async def test_system_clock_uses_wall_time_and_the_running_loop() -> None:
    clock = SystemClock()
    assert abs(clock.now_ms() - time.time() * 1000) < 1000
    fired = asyncio.get_running_loop().create_future()
    clock.call_later(0, lambda: fired.set_result(True))
    cancelled = clock.call_later(0, lambda: fired.set_result(False))
    cancelled.cancel()
    assert await fired is True
