"""Ownership fencing: a producer per partition from InitProducerId with a transactional id,
and a stale owner that can never get a write into the log once a new owner has appended.

Apache Kafka decides the fencing itself; the broker answers a healthy broker gives no test on
demand (a fenced producer after a lost sequence, silence) come from the scripted broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from scripted_produce_broker import (
    ScriptedBroker,
    answering,
    read_batches,
    stamps,
    start_sender,
    submit,
)

from coordinator_server.storage.api import AppendError
from coordinator_server.storage.error_codes import (
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
)
from coordinator_server.storage.kafka.idempotence import IdempotentProducer, ProducerIdAndEpoch
from coordinator_server.storage.kafka.log import KafkaLog, OwnershipError
from coordinator_server.storage.kafka.produce import ProduceSender
from coordinator_server.storage.kafka.producer_fencing import PartitionProducers

pytestmark = pytest.mark.timeout(120)

Loaded = list[tuple[int, bytes, bytes | None]]


async def load(log: KafkaLog, partition: int) -> Loaded:
    loaded: Loaded = []
    await log.load(partition, lambda o, k, v: loaded.append((o, k, v)))
    return loaded


async def refused(append: asyncio.Future[int]) -> AppendError:
    with pytest.raises(AppendError) as raised:
        await asyncio.wait_for(append, 30)
    return raised.value


@pytest.fixture
async def fenced_logs(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> AsyncIterator[Callable[..., asyncio.Future[KafkaLog]]]:
    """Starts KafkaLogs in ownership fencing mode on the test's topic, all with the same
    transactional id prefix (as the nodes of one cluster have); closes them after."""
    async with AsyncExitStack() as stack:

        async def start(**options: Any) -> KafkaLog:
            log = KafkaLog(
                kafka_broker.bootstrap,
                unique_topic,
                2,
                1,
                ownership_transactional_id_prefix=f"{unique_topic}/",
                **options,
            )
            stack.push_async_callback(log.close)
            await log.start()
            return log

        yield start  # type: ignore[misc]


async def test_a_new_owner_fences_the_old_one_out_of_the_log(
    fenced_logs: Callable[..., asyncio.Future[KafkaLog]],
) -> None:
    a = await fenced_logs()
    b = await fenced_logs()
    epoch_a = await a.acquire(0)
    assert await a.append(0, [(b"a", b"1")]) == 1
    assert await a.append(0, [(b"a", b"2"), (b"a", b"3")]) == 3

    epoch_b = await b.acquire(0)
    assert epoch_b > epoch_a
    assert await b.append(0, [(b"b", b"1")]) == 4

    fenced = await refused(a.append(0, [(b"a", b"late")]))
    assert fenced.error_code == PRODUCER_FENCED
    # Stopped: the next append fails at once, with the same code, never reaching a broker.
    again = a.append(0, [(b"a", b"later")])
    assert again.done() and (await refused(again)).error_code == PRODUCER_FENCED
    # The other partition was never A's to lose, nor acquired: it refuses as not owned.
    assert (await refused(a.append(1, [(b"a", b"x")]))).error_code == NOT_COORDINATOR

    assert await b.append(0, [(b"b", b"2")]) == 5
    assert await load(b, 0) == [
        (0, b"a", b"1"),
        (1, b"a", b"2"),
        (2, b"a", b"3"),
        (3, b"b", b"1"),
        (4, b"b", b"2"),
    ]
    # A takes the partition back: a newer epoch still, and B is the stale one now.
    assert await a.acquire(0) > epoch_b
    assert await a.append(0, [(b"a", b"back")]) == 6
    assert (await refused(b.append(0, [(b"b", b"3")]))).error_code == PRODUCER_FENCED


async def test_the_batches_carry_the_partitions_producer_and_sequences_from_0(
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
    fenced_logs: Callable[..., asyncio.Future[KafkaLog]],
) -> None:
    log = await fenced_logs()
    first = await log.acquire(0)
    assert await log.append(0, [(b"k", b"1"), (b"k", b"2")]) == 2
    assert await log.append(0, [(b"k", b"3")]) == 3
    second = await log.acquire(0)
    assert second == first + 1
    assert await log.append(0, [(b"k", b"4")]) == 4
    batches = await read_batches(kafka_broker.bootstrap, unique_topic, 0)
    producer_ids = {batch[0] for batch in batches}
    assert len(producer_ids) == 1 and producer_ids.pop() >= 0
    assert [batch[1:3] for batch in batches] == [(first, 0), (first, 2), (second, 0)]


async def test_an_old_owners_append_during_a_takeover_lands_before_the_new_owners_record_or_fails(
    fenced_logs: Callable[..., asyncio.Future[KafkaLog]],
) -> None:
    """A keeps appending while B acquires and appends: each of A's appends is written before
    B's record or not at all, and what A was told matches the log."""
    a = await fenced_logs()
    b = await fenced_logs()
    for partition in (0, 1):
        await a.acquire(partition)
        assert await a.append(partition, [(b"a", b"first")]) == 1
        appends: list[tuple[bytes, asyncio.Future[int]]] = []
        acquiring = asyncio.ensure_future(b.acquire(partition))
        taken_over = None
        count = 0
        while taken_over is None or not taken_over.done():
            if acquiring.done() and taken_over is None:
                await acquiring
                taken_over = b.append(partition, [(b"b", b"owner")])
            value = f"{count}".encode()
            appends.append((value, a.append(partition, [(b"a", value)])))
            count += 1
            await asyncio.sleep(0.001)
        assert taken_over is not None
        b_end = await taken_over
        outcomes = await asyncio.gather(*(append for _, append in appends), return_exceptions=True)

        loaded = await load(b, partition)
        assert loaded[b_end - 1] == (b_end - 1, b"b", b"owner")
        assert loaded[b_end:] == []
        written = {value: offset for offset, key, value in loaded if key == b"a"}
        for (value, _), outcome in zip(appends, outcomes, strict=True):
            if isinstance(outcome, AppendError):
                assert outcome.error_code == PRODUCER_FENCED, outcome
                assert value not in written
            else:
                assert not isinstance(outcome, BaseException), outcome
                assert written[value] == outcome - 1 < b_end - 1
        # Once B's record is in, nothing of A's goes.
        after = await refused(a.append(partition, [(b"a", b"after")]))
        assert after.error_code == PRODUCER_FENCED


async def test_release_makes_the_partitions_appends_fail_at_once_until_it_is_acquired_again(
    fenced_logs: Callable[..., asyncio.Future[KafkaLog]],
) -> None:
    log = await fenced_logs()
    never = log.append(0, [(b"k", b"never acquired")])
    assert never.done() and (await refused(never)).error_code == NOT_COORDINATOR
    epoch = await log.acquire(0)
    assert await log.append(0, [(b"k", b"1")]) == 1
    log.release(0)
    released = log.append(0, [(b"k", b"2")])
    assert released.done() and (await refused(released)).error_code == NOT_COORDINATOR
    assert await log.acquire(0) > epoch
    assert await log.append(0, [(b"k", b"3")]) == 2
    assert [value for _, _, value in await load(log, 0)] == [b"1", b"3"]


async def test_the_log_without_a_prefix_appends_with_one_producer_and_cannot_acquire(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 1, 1)
    await log.start()
    try:
        assert await log.append(0, [(b"k", b"v")]) == 1
        with pytest.raises(RuntimeError, match="ownership_transactional_id_prefix"):
            await log.acquire(0)
        with pytest.raises(RuntimeError, match="ownership_transactional_id_prefix"):
            log.release(0)
    finally:
        await log.close()


def test_fencing_needs_idempotent_appends_and_a_prefix_that_says_something() -> None:
    with pytest.raises(ValueError, match="idempotent"):
        KafkaLog(
            "localhost:9092", "t", 1, 1, idempotent=False, ownership_transactional_id_prefix="c/"
        )
    with pytest.raises(ValueError, match="empty"):
        KafkaLog("localhost:9092", "t", 1, 1, ownership_transactional_id_prefix="")
    owners = PartitionProducers("t", 1)

    async def leaders() -> dict[int, Any]:
        return {}

    with pytest.raises(ValueError, match="not both"):
        ProduceSender(
            "t",
            leaders,
            client_id="c",
            request_timeout_ms=1000,
            max_inflight_requests=1,
            max_request_bytes=1 << 20,
            producer=IdempotentProducer(ProducerIdAndEpoch(1, 0)),
            owners=owners,
        )


async def test_acquire_with_the_broker_unreachable_fails_within_the_timeout(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    request_timeout_ms = 1000
    log = KafkaLog(
        pausable_kafka_broker.bootstrap,
        unique_topic,
        2,
        1,
        request_timeout_ms=request_timeout_ms,
        ownership_transactional_id_prefix=f"{unique_topic}/",
    )
    await log.start()
    try:
        pausable_kafka_broker.pause()
        try:
            started = time.monotonic()
            with pytest.raises(OwnershipError) as raised:
                await log.acquire(1)
            elapsed = time.monotonic() - started
        finally:
            pausable_kafka_broker.resume()
        # The log's longest timeout: 8 request timeouts.
        assert elapsed < 8 * request_timeout_ms / 1000 + 2
        assert raised.value.error_code == REQUEST_TIMED_OUT
        assert f"transactional id {unique_topic}/1" in str(raised.value)
        assert (await refused(log.append(1, [(b"k", b"v")]))).error_code == NOT_COORDINATOR
    finally:
        await log.close()


# The sender with a producer per partition, against the scripted broker.


@pytest.fixture
async def owned_sender() -> AsyncIterator[Callable[..., asyncio.Future[ProduceSender]]]:
    made: list[tuple[ScriptedBroker, ProduceSender]] = []

    async def make(
        broker: ScriptedBroker, owners: PartitionProducers, **options: Any
    ) -> ProduceSender:
        sender = await start_sender(broker, owners=owners, **options)
        made.append((broker, sender))
        return sender

    yield make  # type: ignore[misc]
    for broker, sender in made:
        await sender.close()
        if broker.server is not None:
            broker.server.close()


def owning(
    partition: int, producer_id: int, epoch: int, owners: PartitionProducers | None = None
) -> PartitionProducers:
    owners = owners or PartitionProducers("log", 4)
    assert owners.acquired(
        partition, owners.begin(partition), ProducerIdAndEpoch(producer_id, epoch)
    )
    return owners


@pytest.mark.parametrize("error_code", [47, 90, 45, 59])
async def test_a_batch_refused_for_its_producer_stops_the_partition_without_a_new_epoch(
    owned_sender: Callable[..., asyncio.Future[ProduceSender]], error_code: int
) -> None:
    broker = ScriptedBroker(answering({0: (0, 0)}, {0: (error_code, -1)}))
    owners = owning(0, 7, 3)
    owning(1, 9, 0, owners)
    sender = await owned_sender(broker, owners)
    assert await submit(sender, 0, (b"k", b"1")) == 1
    refused_now = submit(sender, 0, (b"k", b"2"))
    queued = submit(sender, 0, (b"k", b"3"))
    assert (await refused(refused_now)).error_code == PRODUCER_FENCED
    assert (await refused(queued)).error_code == PRODUCER_FENCED
    # Neither sent again with a new epoch nor with a new id: the broker saw two batches.
    assert stamps(broker) == [(7, 3, 0, 1), (7, 3, 1, 1)]
    assert owners.refusal(0) is not None and owners.epoch(0) is None
    # Another partition's producer goes on.
    broker.script = lambda request: dict.fromkeys(request.batches, (0, 10))
    assert await submit(sender, 1, (b"x", b"1")) == 11
    # The next acquire starts the partition again, sequences from 0.
    owning(0, 7, 4, owners)
    assert await submit(sender, 0, (b"k", b"4")) == 11
    assert stamps(broker)[-1] == (7, 4, 0, 1)


async def test_an_append_whose_fate_stays_unknown_stops_the_partition_with_its_timeout(
    owned_sender: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    broker = ScriptedBroker(lambda request: None)
    owners = owning(0, 7, 0)
    sender = await owned_sender(broker, owners, request_timeout_ms=200, delivery_timeout_ms=500)
    lost = submit(sender, 0, (b"k", b"v"))
    behind = submit(sender, 0, (b"k", b"w"))
    assert (await refused(lost)).error_code == REQUEST_TIMED_OUT
    assert (await refused(behind)).error_code == REQUEST_TIMED_OUT
    # Sent again, as it was, until its delivery timeout; the one behind it never left.
    assert len(broker.requests) >= 2 and set(stamps(broker)) == {(7, 0, 0, 1)}
    later = submit(sender, 0, (b"k", b"x"))
    assert (await refused(later)).error_code == REQUEST_TIMED_OUT
    assert set(stamps(broker)) == {(7, 0, 0, 1)}


async def test_a_batch_of_an_earlier_acquire_that_fails_leaves_the_new_one_alone(
    owned_sender: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    answer = asyncio.Event()
    broker = ScriptedBroker(
        lambda request: (
            {0: (47, -1) if stamps_of(request)[1] == 0 else (0, 5)} if answer.is_set() else None
        )
    )
    owners = owning(0, 7, 0)
    sender = await owned_sender(broker, owners)
    old = submit(sender, 0, (b"k", b"old"))
    await asyncio.sleep(0.05)
    owning(0, 7, 1, owners)
    new = submit(sender, 0, (b"k", b"new"))
    answer.set()
    # The old batch's first request went unanswered: its copy, sent again after the request
    # timeout, is refused as fenced; the new epoch's batch follows it and is written.
    assert (await refused(old)).error_code == PRODUCER_FENCED
    assert await asyncio.wait_for(new, 30) == 6
    assert owners.epoch(0) == 1
    assert stamps(broker)[-1] == (7, 1, 0, 1)


def stamps_of(request: Any) -> tuple[int, int, int]:
    producer_id, epoch, sequence, *_ = request.batches[0]
    return producer_id, epoch, sequence
