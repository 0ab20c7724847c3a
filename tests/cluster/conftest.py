"""Fixtures of the cluster's tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from server_process import ServerProcess


@pytest.fixture
def nodes() -> Iterator[list[ServerProcess]]:
    """The test's nodes: each killed at the end (a paused one resumed first), by its PID."""
    started: list[ServerProcess] = []
    yield started
    for process in started:
        if process.proc is not None and process.proc.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        process.kill()
