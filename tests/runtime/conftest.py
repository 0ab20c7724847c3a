from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from runtime_harness import Harness

from coordinator_server.runtime.config import RuntimeConfig


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    """Three partitions, the server's config, partition 0 loaded with epoch 0."""
    h = Harness()
    await h.load(0)
    yield h
    await h.close()


@pytest.fixture
async def queued_harness() -> AsyncIterator[Harness]:
    """As `harness`, but every write waits its turn in the queue (run_when_idle off): for
    tests of the queue itself."""
    h = Harness(config=RuntimeConfig(run_when_idle=False))
    await h.load(0)
    yield h
    await h.close()


@pytest.fixture
async def make_harness() -> AsyncIterator[Callable[..., Harness]]:
    """A factory for harnesses with their own config; each is closed at the end."""
    made: list[Harness] = []

    def make(**kwargs: Any) -> Harness:
        h = Harness(**kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.close()
