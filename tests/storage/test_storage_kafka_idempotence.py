"""Idempotent appends: every batch carries the log's producer id, epoch and a sequence, a
batch sent again is written once, and the broker's answers about the producer are handled
as Kafka's idempotent producer handles them.

The answers no healthy broker gives on demand (OUT_OF_ORDER_SEQUENCE_NUMBER, a fenced
producer, silence) come from a scripted broker on a real socket; the rest from Apache Kafka
itself, paused (SIGSTOP) while an append is on its way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka.record.memory_records import MemoryRecords
from apache_kafka import ApacheKafkaBroker
from scripted_produce_broker import (
    ScriptedBroker,
    Sent,
    answering,
    batch_of,
    keys,
    read_batches,
    stamps,
    start_sender,
    submit,
)
from tansu_broker import TansuBroker

from coordinator_server.storage.api import AppendError
from coordinator_server.storage.kafka.idempotence import (
    IdempotentProducer,
    ProducerIdAndEpoch,
    choose_produce_version,
    restamp,
    stamp_of,
)
from coordinator_server.storage.kafka.log import KafkaLog
from coordinator_server.storage.kafka.produce import ProduceSender

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[..., asyncio.Future[ProduceSender]]]:
    made: list[tuple[ScriptedBroker, ProduceSender]] = []

    async def make(
        broker: ScriptedBroker,
        *,
        producer: IdempotentProducer,
        new_ids: list[ProducerIdAndEpoch] | None = None,
        request_timeout_ms: int = 2000,
        delivery_timeout_ms: int = 6000,
    ) -> ProduceSender:
        async def new_producer_id() -> ProducerIdAndEpoch | None:
            assert new_ids, "no producer id was expected to be asked for"
            return new_ids.pop(0)

        sender = await start_sender(
            broker,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            producer=producer,
            new_producer_id=new_producer_id,
        )
        made.append((broker, sender))
        return sender

    yield make  # type: ignore[misc]
    for broker, sender in made:
        await sender.close()
        if broker.server is not None:
            broker.server.close()


async def test_sequences_follow_each_partitions_records_from_the_producers_epoch(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    ends: dict[int, int] = {}

    def log_end(request: Sent) -> dict[int, tuple[int, int]]:
        results = {}
        for partition, (*_, count, _raw) in request.batches.items():
            results[partition] = (0, ends.get(partition, 0))
            ends[partition] = results[partition][1] + count
        return results

    broker = ScriptedBroker(log_end)
    sender = await scripted(broker, producer=IdempotentProducer(ProducerIdAndEpoch(7, 3)))
    assert await submit(sender, 0, (b"a", b"1"), (b"b", b"1")) == 2
    assert await submit(sender, 0, (b"a", b"2"), (b"b", b"2"), (b"c", b"2")) == 5
    assert await submit(sender, 1, (b"x", b"1")) == 1
    assert await submit(sender, 0, (b"a", b"3")) == 6
    # The builder's guess (producer 4000) is restamped with the producer's id and epoch.
    assert stamps(broker, 0) == [(7, 3, 0, 2), (7, 3, 2, 3), (7, 3, 5, 1)]
    assert stamps(broker, 1) == [(7, 3, 0, 1)]


async def test_a_batch_unanswered_goes_again_as_it_was_and_the_copy_counts_as_written(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    """The first request times out (its connection closes); the same bytes go again, and
    the broker's answer for the copy (NONE or DUPLICATE_SEQUENCE_NUMBER, with the offset of
    the batch it has) completes the append."""
    for duplicate_answer in (0, 46):
        broker = ScriptedBroker(answering(None, {0: (duplicate_answer, 40)}))
        sender = await scripted(
            broker, producer=IdempotentProducer(ProducerIdAndEpoch(7, 0)), request_timeout_ms=300
        )
        assert await asyncio.wait_for(submit(sender, 0, (b"k", b"v")), 10) == 41
        first, second = broker.requests
        assert first.batches[0] == second.batches[0]
        assert sender.resent == 1
        # Nothing was lost track of: the next batch follows in the same epoch.
        broker.script = lambda request: {0: (0, 41)}
        assert await submit(sender, 0, (b"k", b"w")) == 42
        assert stamps(broker)[-1] == (7, 0, 1, 1)


async def test_out_of_order_sequence_sends_the_batch_again_in_a_new_epoch(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    broker = ScriptedBroker(answering({0: (45, -1)}, {0: (0, 12)}))
    sender = await scripted(broker, producer=IdempotentProducer(ProducerIdAndEpoch(7, 0)))
    assert await submit(sender, 0, (b"k", b"v"), (b"l", b"v")) == 14
    assert stamps(broker) == [(7, 0, 0, 2), (7, 1, 0, 2)]
    assert sender.producer is not None and sender.producer.epoch_bumps == 1


async def test_a_fenced_producer_gets_a_new_id_and_the_batch_goes_again_with_it(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    for fenced in (47, 90):
        broker = ScriptedBroker(answering({0: (fenced, -1)}, {0: (0, 3)}))
        sender = await scripted(
            broker,
            producer=IdempotentProducer(ProducerIdAndEpoch(7, 0)),
            new_ids=[ProducerIdAndEpoch(8, 0)],
        )
        assert await asyncio.wait_for(submit(sender, 0, (b"k", b"v")), 10) == 4
        assert stamps(broker) == [(7, 0, 0, 1), (8, 0, 0, 1)]


async def test_an_append_unanswered_past_its_delivery_timeout_fails_and_the_next_starts_a_new_epoch(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    """Its fate unknown, the lost batch's sequence must never be used by other records:
    the next batch is the first of a new epoch, which the broker refuses the lost one after."""
    broker = ScriptedBroker(lambda request: None)
    sender = await scripted(
        broker,
        producer=IdempotentProducer(ProducerIdAndEpoch(7, 0)),
        request_timeout_ms=200,
        delivery_timeout_ms=500,
    )
    with pytest.raises(AppendError) as raised:
        await asyncio.wait_for(submit(sender, 0, (b"k", b"v")), 10)
    assert raised.value.error_code == 7
    # Sent more than once, always as it was.
    assert len(broker.requests) >= 2
    assert len({r.batches[0][4] for r in broker.requests}) == 1
    broker.script = lambda request: {0: (0, 5)}
    assert await submit(sender, 0, (b"k", b"w")) == 6
    assert stamps(broker)[-1] == (7, 1, 0, 1)


async def test_a_producer_whose_epochs_are_used_up_gets_a_new_id(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    broker = ScriptedBroker(answering(None, None, None, None))
    sender = await scripted(
        broker,
        producer=IdempotentProducer(ProducerIdAndEpoch(7, 32767)),
        new_ids=[ProducerIdAndEpoch(8, 0)],
        request_timeout_ms=200,
        delivery_timeout_ms=400,
    )
    with pytest.raises(AppendError):
        await asyncio.wait_for(submit(sender, 0, (b"k", b"v")), 10)
    broker.script = lambda request: {0: (0, 9)}
    assert await asyncio.wait_for(submit(sender, 0, (b"k", b"w")), 10) == 10
    assert stamps(broker)[0] == (7, 32767, 0, 1)
    assert stamps(broker)[-1] == (8, 0, 0, 1)


async def test_a_batch_its_caller_dropped_before_it_left_is_never_sent(
    scripted: Callable[..., asyncio.Future[ProduceSender]],
) -> None:
    """The runtime drops a partition's appends when it throws its state away: one that has
    not left by then must not be written (one on its way goes on to its answer)."""
    answered = asyncio.Event()
    broker = ScriptedBroker(
        lambda request: dict.fromkeys(request.batches, (0, 0)) if answered.is_set() else None
    )
    sender = await scripted(broker, producer=IdempotentProducer(ProducerIdAndEpoch(7, 0)))
    first = submit(sender, 0, (b"first", b"1"))
    dropped = submit(sender, 0, (b"dropped", b"1"))
    await asyncio.sleep(0.1)
    dropped.cancel()
    answered.set()
    # The first request's answer never comes: the batch goes again after its timeout.
    assert await asyncio.wait_for(first, 10) == 1
    assert await submit(sender, 0, (b"next", b"1")) == 1
    assert [keys(r.batches[0][4]) for r in broker.requests] == [[b"first"], [b"first"], [b"next"]]
    # The next batch follows the first: the dropped one took no sequence.
    assert stamps(broker)[-1] == (7, 0, 1, 1)


def test_restamping_keeps_the_batch_valid() -> None:
    batch = batch_of((b"k", b"v"), (b"l", b"w"))
    stamped = restamp(batch, 99, 5, 1234)
    assert stamp_of(stamped) == (99, 5, 1234)
    parsed = MemoryRecords(stamped).next_batch()
    assert parsed is not None and parsed.validate_crc()
    assert [(r.key, r.value) for r in parsed] == [(b"k", b"v"), (b"l", b"w")]


def test_the_produce_version_is_the_newest_both_sides_speak() -> None:
    assert choose_produce_version({0: (0, 13)}) == 8
    assert choose_produce_version({0: (3, 5)}) == 5
    assert choose_produce_version({0: (0, 2)}) is None
    assert choose_produce_version({0: (9, 13)}) is None
    assert choose_produce_version({}) is None


# Against real brokers.


async def test_batches_carry_the_producer_id_and_consecutive_sequences(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 2, 1)
    await log.start()
    try:
        assert await log.append(0, [(b"a", b"1"), (b"b", b"1")]) == 2
        assert await log.append(0, [(b"a", b"2")]) == 3
        assert await log.append(1, [(b"c", b"1")]) == 1
    finally:
        await log.close()
    batches = await read_batches(kafka_broker.bootstrap, unique_topic, 0)
    (producer_id, epoch, _, _), _ = batches
    assert producer_id >= 0 and epoch >= 0
    assert [(b[0], b[1], b[2]) for b in batches] == [
        (producer_id, epoch, 0),
        (producer_id, epoch, 2),
    ]
    (other,) = await read_batches(kafka_broker.bootstrap, unique_topic, 1)
    assert other[:3] == (producer_id, epoch, 0)


async def test_an_append_sent_again_while_the_broker_is_paused_is_written_once(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    """The broker stops (SIGSTOP) with an append on its way; the request times out, the
    connection closes and the batch goes again on a new one; once the broker runs again it
    has two copies to write and writes one. The append succeeds at the offset it would have
    had, and the next one follows it."""
    request_timeout_ms = 1000
    log = KafkaLog(
        pausable_kafka_broker.bootstrap, unique_topic, 1, 1, request_timeout_ms=request_timeout_ms
    )
    await log.start()
    try:
        assert await log.append(0, [(b"before", b"1")]) == 1
        pausable_kafka_broker.pause()
        try:
            during = log.append(0, [(b"during", b"1"), (b"during", b"2")])
            # Past one request timeout, within the delivery timeout (three).
            await asyncio.sleep(1.7 * request_timeout_ms / 1000)
            assert not during.done()
        finally:
            pausable_kafka_broker.resume()
        assert await asyncio.wait_for(during, 30) == 3
        assert log.sender is not None and log.sender.resent >= 1
        assert await log.append(0, [(b"after", b"1")]) == 4
    finally:
        await log.close()
    records = [
        r
        for b in await read_batches(pausable_kafka_broker.bootstrap, unique_topic, 0)
        for r in b[3]
    ]
    assert records == [
        (b"before", b"1"),
        (b"during", b"1"),
        (b"during", b"2"),
        (b"after", b"1"),
    ]


@pytest.mark.kafka
async def test_a_broker_that_hands_out_no_producer_ids_gets_batches_without_one(
    tansu_broker: TansuBroker, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    log = KafkaLog(tansu_broker.bootstrap, unique_topic, 1, 1)
    await log.start()
    try:
        assert log.sender is not None and not log.sender.idempotent
        assert await log.append(0, [(b"k", b"v")]) == 1
        assert await log.append(0, [(b"k", b"w")]) == 2
    finally:
        await log.close()
    warnings = [r.getMessage() for r in caplog.records if "no producer ids" in r.getMessage()]
    assert len(warnings) == 1, warnings
