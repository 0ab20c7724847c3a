from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from runtime_harness import Harness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    """Three partitions, default config, partition 0 loaded with epoch 0."""
    h = Harness()
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
