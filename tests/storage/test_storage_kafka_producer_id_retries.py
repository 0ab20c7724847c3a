"""InitProducerId for a transactional id (the fencing of the log's partitions) waits out a
coordinator that does not answer, after FindCoordinator found it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.coordination import FindCoordinatorRequest

from coordinator_server.storage.error_codes import REQUEST_TIMED_OUT
from coordinator_server.storage.kafka.producer_fencing import (
    OwnershipError,
    init_transactional_producer_id,
)


class SilentCoordinator:
    """A cluster whose transaction coordinator (node 1) leaves the first `silent`
    InitProducerId requests unanswered, then answers producer id 7, epoch 3."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.init_requests = 0

    def get_random_node(self) -> int:
        return 1

    def force_metadata_update(self) -> asyncio.Future[bool]:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    async def send(self, node_id: int, request: Any, group: Any = None) -> Any:
        if isinstance(request, FindCoordinatorRequest):
            return SimpleNamespace(error_code=0, coordinator_id=1)
        self.init_requests += 1
        if self.init_requests <= self.silent:
            raise TimeoutError
        return SimpleNamespace(error_code=0, producer_id=7, producer_epoch=3)


async def test_a_coordinator_found_but_silent_is_asked_again() -> None:
    cluster = SilentCoordinator(silent=2)
    producer = await init_transactional_producer_id(cluster, "t", 10)  # type: ignore[arg-type]
    assert (producer.producer_id, producer.epoch) == (7, 3)
    assert cluster.init_requests == 3


async def test_a_coordinator_silent_past_the_deadline_is_a_timeout_not_a_refusal() -> None:
    cluster = SilentCoordinator(silent=1_000)
    with pytest.raises(OwnershipError) as raised:
        await init_transactional_producer_id(cluster, "t", 0.3)  # type: ignore[arg-type]
    assert raised.value.error_code == REQUEST_TIMED_OUT
