"""The nemesis's schedule: a seed replays it, one node is always up, every fault is undone."""

from __future__ import annotations

import pytest
from nemesis import KILL, PAUSE, RESUME, START, Timing, schedule

NODES = (1, 2, 3)


@pytest.mark.parametrize("seed", range(50))
def test_a_schedule_keeps_a_node_up_and_ends_with_every_node_back(seed: int) -> None:
    timing = Timing(duration_s=90)
    faults = schedule(seed, NODES, timing)
    assert faults == schedule(seed, NODES, timing)
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    down: dict[int, str] = {}
    started: dict[int, float] = {}
    undo = {KILL: START, PAUSE: RESUME}
    for fault in faults:
        assert 0 <= fault.at_s <= timing.duration_s
        if fault.action in undo:
            assert fault.node not in down, fault
            assert fault.at_s >= started.get(fault.node, -timing.ready_s) + timing.ready_s, fault
            down[fault.node] = fault.action
            not_ready = {n for n, at in started.items() if fault.at_s < at + timing.ready_s}
            assert len(down.keys() | not_ready) < len(NODES), f"no node up at {fault.at_s}"
        else:
            assert undo[down.pop(fault.node)] == fault.action, fault
            if fault.action == START:
                started[fault.node] = fault.at_s
    assert down == {}
    actions = {f.action for f in faults}
    assert actions & {KILL, PAUSE}


def test_pauses_outlast_the_session_timeout_and_seeds_differ() -> None:
    timing = Timing(duration_s=90, pause_s=(7.0, 14.0))
    faults = schedule(7, NODES, timing)
    paused = {}
    for fault in faults:
        if fault.action == PAUSE:
            paused[fault.node] = fault.at_s
        elif fault.action == RESUME:
            held = fault.at_s - paused.pop(fault.node)
            assert held >= 7.0 or fault.at_s == timing.duration_s
    assert schedule(8, NODES, timing) != faults
