"""The node every test of the folder runs its requests on (see authorization_harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from authorization_harness import Node, running_node


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    async with running_node() as running:
        yield running
