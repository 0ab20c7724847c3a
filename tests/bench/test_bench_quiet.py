"""A measured loop waits until the started processes the target does not use are quiet."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from coordinator_server.tools.bench.processes import QUIET_WINDOW_S, wait_until_quiet

# Busy for 3 s, then idle, as a JVM's compiler is once its queue is empty.
BUSY_THEN_IDLE = (
    "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass\ntime.sleep(60)"
)


def test_a_busy_process_is_waited_out_and_an_idle_one_is_not() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY_THEN_IDLE])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    never = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        # Quiet only once the spinning is over (2.5 s from here) and a window has passed.
        waited = asyncio.run(wait_until_quiet([busy.pid], timeout_s=30))
        assert 2.0 <= waited <= 20
        assert asyncio.run(wait_until_quiet([idle.pid], timeout_s=30)) < QUIET_WINDOW_S * 3
        # A process that never quiets down is reported after the timeout, not waited out.
        assert 2 <= asyncio.run(wait_until_quiet([never.pid], timeout_s=2)) < 10
    finally:
        for process in (busy, idle, never):
            process.kill()
            process.wait(10)
