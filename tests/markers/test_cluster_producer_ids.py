"""The pool of producer ids handed out by the Kafka cluster (`ClusterProducerIds`), with the
cluster's InitProducerId replaced by a counter the test controls."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from coordinator_server.markers.producer_ids import ClusterProducerIds, ProducerIdsUnavailable


class Cluster:
    def __init__(self) -> None:
        self.next_ids = itertools.count(100)
        self.refusing: Exception | None = None
        self.asked = 0

    async def ask(self) -> int:
        self.asked += 1
        await asyncio.sleep(0)
        if self.refusing is not None:
            raise self.refusing
        return next(self.next_ids)


async def test_ids_are_kept_ready_and_each_handed_out_once() -> None:
    cluster = Cluster()
    pool = ClusterProducerIds(cluster.ask, ready=4, timeout_s=1)
    pool.start()
    taken = [await pool.take() for _ in range(10)]
    assert sorted(taken) == list(range(100, 110))
    assert pool.take_now() is not None
    # Refilled ahead of need: at most the pool's size asked beyond what was taken.
    await asyncio.sleep(0.01)
    assert pool.in_hand >= 2 and cluster.asked <= 11 + 4
    await pool.stop()


async def test_an_id_given_back_is_handed_out_again_and_none_waits_for_the_cluster() -> None:
    cluster = Cluster()
    pool = ClusterProducerIds(cluster.ask, ready=2, timeout_s=1)
    assert pool.take_now() is None  # nothing yet: the fill starts
    first = await pool.take()
    pool.give_back(first)
    assert pool.take_now() == first
    await pool.stop()


async def test_a_cluster_that_hands_out_none_is_said_in_time() -> None:
    cluster = Cluster()
    cluster.refusing = RuntimeError("COORDINATOR_LOAD_IN_PROGRESS")
    pool = ClusterProducerIds(
        cluster.ask, ready=2, timeout_s=0.3, backoff_s=0.01, backoff_max_s=0.05
    )
    started = asyncio.get_running_loop().time()
    with pytest.raises(ProducerIdsUnavailable, match="COORDINATOR_LOAD_IN_PROGRESS"):
        await pool.take()
    assert asyncio.get_running_loop().time() - started < 1
    # Once it answers again, the pool fills without being asked (its retries come at most
    # 0.05 s apart, well inside the next take's 0.3 s however long the refusals went on).
    cluster.refusing = None
    assert await pool.take() == 100
    await pool.stop()
    stopped = ClusterProducerIds(cluster.ask, ready=2, timeout_s=5)
    await stopped.stop()
    with pytest.raises(ProducerIdsUnavailable, match="stopping"):
        await stopped.take()
