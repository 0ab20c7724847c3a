"""Transaction markers written from outside the brokers onto Apache Kafka's data partitions:
what read_committed and read_uncommitted consumers see after them, retries through a broker
that stops answering or restarts, the fencing answers, and the start-up check."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from apache_kafka import ApacheKafkaBroker
from transactional_batches import (
    create_topic,
    kafka_client,
    last_stable_offset,
    new_producer_id,
    produce_transactional,
    read_values,
)

from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers import (
    VERIFICATION_SETTING,
    KafkaTransactionsCheckError,
    KafkaTxnMarkerWriter,
    MarkerWriterStopped,
    check_kafka_for_transactions,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


@contextlib.asynccontextmanager
async def marker_writer(bootstrap: str, **options: int) -> AsyncIterator[KafkaTxnMarkerWriter]:
    writer = KafkaTxnMarkerWriter(bootstrap, **options)
    await writer.start()
    try:
        yield writer
    finally:
        await writer.stop()


async def test_commit_markers_make_the_records_visible_to_read_committed(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic, partitions=2)
    producer_id = new_producer_id()
    async with kafka_client(bootstrap) as client:
        for partition in (0, 1):
            values = [f"committed-{partition}-{i}".encode() for i in range(3)]
            assert (
                await produce_transactional(
                    client, unique_topic, partition, producer_id, 0, 0, values
                )
                == 0
            )
    # Open, the transaction holds back the last stable offset: nothing to read committed.
    assert await last_stable_offset(bootstrap, unique_topic, 0) == 0
    assert await read_values(bootstrap, unique_topic, 2, "read_committed") == []

    async with marker_writer(bootstrap) as writer:
        outcome = await writer.write(producer_id, 0, 0, True, {unique_topic: [0, 1]})

    assert outcome.written == {(unique_topic, 0), (unique_topic, 1)}
    assert outcome.errors == {}
    assert outcome.complete and not outcome.fenced
    assert await read_values(bootstrap, unique_topic, 2, "read_committed") == sorted(
        f"committed-{p}-{i}".encode() for p in (0, 1) for i in range(3)
    )


async def test_abort_markers_hide_the_records_from_read_committed_only(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic)
    committing, aborting = new_producer_id(), new_producer_id()
    async with kafka_client(bootstrap) as client:
        assert (
            await produce_transactional(client, unique_topic, 0, committing, 0, 0, [b"kept"]) == 0
        )
        assert await produce_transactional(client, unique_topic, 0, aborting, 0, 0, [b"gone"]) == 0

    async with marker_writer(bootstrap) as writer:
        aborted, committed = await asyncio.gather(
            writer.write(aborting, 0, 0, False, {unique_topic: [0]}),
            writer.write(committing, 0, 0, True, {unique_topic: [0]}),
        )

    assert aborted.complete and committed.complete
    assert await read_values(bootstrap, unique_topic, 1, "read_committed") == [b"kept"]
    assert await read_values(bootstrap, unique_topic, 1, "read_uncommitted") == [b"gone", b"kept"]


async def test_markers_of_concurrent_transactions_share_the_requests_to_a_broker(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic, partitions=3)
    producers = [new_producer_id() for _ in range(6)]
    async with kafka_client(bootstrap) as client:
        for n, producer_id in enumerate(producers):
            value = f"txn-{n}".encode()
            assert (
                await produce_transactional(client, unique_topic, n % 3, producer_id, 0, 0, [value])
                == 0
            )

    async with marker_writer(bootstrap) as writer:
        outcomes = await asyncio.gather(
            *(
                writer.write(producer_id, 0, 0, n % 2 == 0, {unique_topic: [n % 3]})
                for n, producer_id in enumerate(producers)
            )
        )
        # One broker, one request on the way at a time: the markers that came while the
        # first request was out leave together in the next.
        assert writer.requests_sent < len(producers)
        assert writer.queued_markers == 0

    assert all(outcome.complete for outcome in outcomes)
    assert await read_values(bootstrap, unique_topic, 3, "read_committed") == [
        b"txn-0",
        b"txn-2",
        b"txn-4",
    ]


async def test_markers_for_a_topic_created_after_them_are_retried_and_land(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    async with marker_writer(bootstrap, retry_backoff_ms=50) as writer:
        write = asyncio.ensure_future(
            writer.write(new_producer_id(), 0, 0, True, {unique_topic: [0, 1]})
        )
        await asyncio.sleep(1.0)
        assert not write.done()
        await create_topic(bootstrap, unique_topic, partitions=2)
        outcome = await asyncio.wait_for(write, 30)
        assert writer.retries > 0

    assert outcome.written == {(unique_topic, 0), (unique_topic, 1)}
    assert outcome.complete


async def test_markers_for_a_partition_that_stays_unknown_are_dropped_after_the_bound(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic, partitions=1)
    async with marker_writer(bootstrap, unknown_partition_timeout_ms=1000) as writer:
        outcome = await asyncio.wait_for(
            writer.write(
                new_producer_id(),
                0,
                0,
                False,
                {unique_topic: [0, 7], f"{unique_topic}-never-created": [0]},
            ),
            30,
        )

    unknown = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert outcome.written == {(unique_topic, 0)}
    assert outcome.errors == {
        (unique_topic, 7): unknown,
        (f"{unique_topic}-never-created", 0): unknown,
    }
    # Kafka's coordinator completes a transaction whose partitions were deleted.
    assert outcome.complete and not outcome.fenced


async def test_a_stale_coordinator_epoch_is_fenced_and_reported(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic)
    producer_id = new_producer_id()
    async with kafka_client(bootstrap) as client, marker_writer(bootstrap) as writer:
        assert await produce_transactional(client, unique_topic, 0, producer_id, 0, 0, [b"a"]) == 0
        first = await writer.write(producer_id, 0, 5, True, {unique_topic: [0]})
        assert first.complete
        # The next transaction of the producer, completed by a coordinator of an older epoch.
        assert await produce_transactional(client, unique_topic, 0, producer_id, 0, 1, [b"b"]) == 0
        stale = await writer.write(producer_id, 0, 4, True, {unique_topic: [0]})
        assert stale.errors == {(unique_topic, 0): int(ErrorCode.TRANSACTION_COORDINATOR_FENCED)}
        assert stale.fenced and not stale.complete
        assert stale.written == frozenset()
        assert await read_values(bootstrap, unique_topic, 1, "read_committed") == [b"a"]
        # The coordinator of the current epoch completes it.
        current = await writer.write(producer_id, 0, 5, True, {unique_topic: [0]})
        assert current.complete

    assert await read_values(bootstrap, unique_topic, 1, "read_committed") == [b"a", b"b"]


async def test_a_stale_producer_epoch_is_fenced_and_stops_the_other_markers(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    await create_topic(bootstrap, unique_topic)
    producer_id = new_producer_id()
    async with kafka_client(bootstrap) as client, marker_writer(bootstrap) as writer:
        assert await produce_transactional(client, unique_topic, 0, producer_id, 3, 0, [b"x"]) == 0
        outcome = await writer.write(producer_id, 2, 0, True, {unique_topic: [0]})

    assert outcome.errors == {(unique_topic, 0): int(ErrorCode.INVALID_PRODUCER_EPOCH)}
    assert outcome.fenced and not outcome.complete


async def test_markers_wait_out_a_silent_broker_and_a_restart(
    fresh_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    broker = fresh_kafka_broker
    bootstrap = broker.bootstrap
    await create_topic(bootstrap, unique_topic)
    first, second, third = new_producer_id(), new_producer_id(), new_producer_id()
    async with kafka_client(bootstrap) as client:
        for n, producer_id in enumerate((first, second, third)):
            value = f"v{n}".encode()
            assert (
                await produce_transactional(client, unique_topic, 0, producer_id, 0, 0, [value])
                == 0
            )

    async with marker_writer(
        bootstrap, request_timeout_ms=1500, retry_backoff_ms=50, max_queued_markers=1
    ) as writer:
        # A broker that answers nothing: the request times out and is sent again.
        broker.pause()
        try:
            paused = asyncio.ensure_future(writer.write(first, 0, 0, True, {unique_topic: [0]}))
            waiting = asyncio.ensure_future(writer.write(second, 0, 0, True, {unique_topic: [0]}))
            await asyncio.sleep(3.5)
            assert not paused.done() and not waiting.done()
            # Room for one marker: the second write waits for the first.
            assert writer.queued_markers == 1
            assert writer.retries >= 1
        finally:
            broker.resume()
        assert (await asyncio.wait_for(paused, 30)).complete
        assert (await asyncio.wait_for(waiting, 30)).complete

        # A broker that goes away and comes back: lost connections, then no leader for a
        # while, then the markers land.
        restart = asyncio.ensure_future(asyncio.to_thread(broker.restart))
        await asyncio.sleep(0.5)
        restarted = asyncio.ensure_future(writer.write(third, 0, 0, False, {unique_topic: [0]}))
        await restart
        outcome = await asyncio.wait_for(restarted, 60)
        assert outcome.complete and outcome.written == {(unique_topic, 0)}

    assert await read_values(bootstrap, unique_topic, 1, "read_committed") == [b"v0", b"v1"]
    assert await read_values(bootstrap, unique_topic, 1, "read_uncommitted") == [
        b"v0",
        b"v1",
        b"v2",
    ]


async def test_a_cancelled_write_leaves_the_queues_and_a_stopped_writer_refuses(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    writer = KafkaTxnMarkerWriter(bootstrap, retry_backoff_ms=50)
    await writer.start()
    try:
        # The topic does not exist: the write keeps trying until it is cancelled.
        write = asyncio.ensure_future(
            writer.write(new_producer_id(), 0, 0, True, {unique_topic: [0, 1, 2]})
        )
        await asyncio.sleep(0.5)
        assert writer.queued_markers == 3
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert writer.queued_markers == 0
        pending = asyncio.ensure_future(
            writer.write(new_producer_id(), 0, 0, True, {unique_topic: [0]})
        )
        await asyncio.sleep(0.2)
    finally:
        await writer.stop()
    with pytest.raises(MarkerWriterStopped):
        await pending
    with pytest.raises(MarkerWriterStopped):
        await writer.write(new_producer_id(), 0, 0, True, {unique_topic: [0]})


async def test_the_start_up_check_passes_on_the_default_test_broker(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    await check_kafka_for_transactions(kafka_broker.bootstrap, timeout_s=30)


async def test_the_start_up_check_fails_on_a_broker_that_verifies_transactions(
    unique_topic: str,
) -> None:
    broker = ApacheKafkaBroker(config={VERIFICATION_SETTING: "true"}, sasl_ssl_listener=False)
    await asyncio.to_thread(broker.start)
    try:
        bootstrap = broker.bootstrap
        with pytest.raises(KafkaTransactionsCheckError) as raised:
            await check_kafka_for_transactions(bootstrap, timeout_s=30)
        message = str(raised.value)
        assert f"{VERIFICATION_SETTING}=true" in message
        assert "--entity-default" in message and "server.properties" in message

        # Why: the broker asks its own transaction coordinator, which does not know ours.
        await create_topic(bootstrap, unique_topic)
        async with kafka_client(bootstrap) as client:
            refused = await produce_transactional(
                client, unique_topic, 0, new_producer_id(), 0, 0, [b"refused"]
            )
        assert refused == int(ErrorCode.NOT_ENOUGH_REPLICAS)
    finally:
        await asyncio.to_thread(broker.stop)


async def test_the_start_up_check_fails_clearly_when_no_broker_answers() -> None:
    with pytest.raises(KafkaTransactionsCheckError, match="cannot check the Kafka cluster"):
        await check_kafka_for_transactions("127.0.0.1:1", timeout_s=3)
