"""Idempotent appends seen from clients, against the real server process and Apache Kafka:
a broker that stops (SIGSTOP) with commits on their way, for less than an append's delivery
timeout (the batch goes again and is written once: nothing reloads) and for longer (the
append fails, its fate unknown, and the partition serves again as soon as it knows); and a
producer the broker fences, which gets a new id.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.records import (
    OffsetCommitKey,
    decode_record,
    encode_record,
    new_offset_commit_record,
)
from coordinator_server.storage.kafka.idempotence import IdempotentProducer, ProducerIdAndEpoch
from coordinator_server.storage.kafka.produce import Leader, ProduceSender

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 4
GROUPS = [f"group-{i}" for i in range(8)]
TOPIC = "orders"
# What the server logs when the log and the state diverged and a partition reloads.
RELOADING = re.compile(r"partition=(\d+) .*reloading")
# Another group of the same partition as GROUPS[0].
OTHER_GROUP = next(
    f"other-{i}"
    for i in range(1000)
    if partition_for(f"other-{i}", PARTITIONS) == partition_for(GROUPS[0], PARTITIONS)
)
PRODUCER = re.compile(r"appends are idempotent with producer id (\d+) epoch (\d+)")


def server_args(broker: ApacheKafkaBroker, topic: str, *extra: str) -> list[str]:
    """A node alone (`--cluster off`): these are the whole log's producer's ways. A cluster
    node's producer per partition, fenced to its owner, stops the partition instead where
    this one moves to a new epoch (tests/storage/test_storage_kafka_fencing.py,
    tests/cluster/)."""
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        "--cluster", "off",
        *extra,
    ]  # fmt: skip


async def commit_all(client: WireClient, offset: int) -> dict[str, int]:
    """Commit `offset` for every group at once; each group's answer."""
    futures = {
        group: client.send(ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): offset}))
        for group in GROUPS
    }
    return {
        group: commit_errors(await asyncio.wait_for(future, 60))[(TOPIC, 0)]
        for group, future in futures.items()
    }


async def committed(client: WireClient) -> dict[str, int]:
    offsets = {}
    for group in GROUPS:
        response = await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, {TOPIC: [0]}))
        offsets[group] = fetched_offsets(response)[(TOPIC, 0)]
    return offsets


async def read_log(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of the topic: (partition, key, value)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 60
        while [p for p in partitions if await consumer.position(p) < ends[p]]:
            assert time.monotonic() < deadline, "the log could not be read back"
            for tp, batch in (await consumer.getmany(timeout_ms=500)).items():
                records += [(tp.partition, r.key, r.value) for r in batch if r.key is not None]
        return records
    finally:
        await consumer.stop()


def commits_of(records: list[tuple[int, bytes, bytes | None]], offset: int) -> Counter[str]:
    """How many records of the log commit `offset`, by group."""
    counts: Counter[str] = Counter()
    for _, key, value in records:
        record = decode_record(key, value)
        if (
            isinstance(record.key, OffsetCommitKey)
            and getattr(record.value, "offset", None) == offset
        ):
            counts[record.key.group] += 1
    return counts


def reloads(server: ServerProcess) -> Counter[int]:
    """Partitions the server reloaded after a divergence, and how often."""
    return Counter(int(m[1]) for line in server.lines if (m := RELOADING.search(line)))


def tail(server: ServerProcess, lines: int = 60) -> str:
    return "".join(server.lines[-lines:])


async def test_commits_sent_again_while_the_broker_is_paused_are_written_once_and_nothing_reloads(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    """The broker stops with commits on their way, for longer than the request timeout
    (the commits time out for their clients) but less than the delivery timeout. Their
    batches go again on new connections; once the broker runs again it writes each once,
    where the server expects it: no partition reloads, the next commits are acknowledged
    at once, and the log holds every batch once."""
    args = server_args(pausable_kafka_broker, unique_topic, "--offsets-commit-timeout-ms", "2000")
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        assert set((await commit_all(client, 1)).values()) == {0}
        pausable_kafka_broker.pause()
        try:
            during = asyncio.ensure_future(commit_all(client, 2))
            # Past the request timeout (2 s), well within the delivery timeout (6 s).
            await asyncio.sleep(3.0)
        finally:
            pausable_kafka_broker.resume()
        # Timed out for their clients (COORDINATOR_NOT_AVAILABLE), their fate unknown to
        # them; written all the same.
        assert set((await during).values()) <= {0, ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert set((await commit_all(client, 3)).values()) == {0}, tail(server)
        assert await committed(client) == dict.fromkeys(GROUPS, 3)
        assert not reloads(server), tail(server)
        await client.close()
    records = await read_log(pausable_kafka_broker.bootstrap, unique_topic)
    assert commits_of(records, 2) == dict.fromkeys(GROUPS, 1)
    assert len(records) == len(set(records)), "a batch was written twice"


async def test_an_append_whose_fate_stays_unknown_leaves_no_not_coordinator_after_its_reload(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    """The broker stops for longer than the delivery timeout: appends fail, their fate
    unknown, and the producer's epoch moves on. When it runs again, the lost batches it
    still had either land before the next one (the partition finds the log ahead of its
    state and reloads, once) or are refused for their old epoch. Either way each group sees
    at most the reload itself: COORDINATOR_LOAD_IN_PROGRESS (for its commit parked when the
    partition reloaded, then while it loads; never NOT_COORDINATOR, which would send its
    clients looking for another coordinator), then every commit acknowledged; and every
    acknowledged commit is there."""
    args = server_args(pausable_kafka_broker, unique_topic, "--offsets-commit-timeout-ms", "1000")
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        acknowledged = {g: 1 for g, error in (await commit_all(client, 1)).items() if error == 0}
        assert len(acknowledged) == len(GROUPS)
        offset = 2
        pausable_kafka_broker.pause()
        paused_at = time.monotonic()
        try:
            # Clients keep committing while the broker is stopped, past the delivery
            # timeout (3 s) of the first appends.
            while time.monotonic() - paused_at < 4.5:
                for group, error in (await commit_all(client, offset)).items():
                    if error == 0:
                        acknowledged[group] = offset
                offset += 1
        finally:
            pausable_kafka_broker.resume()
        resumed_at = time.monotonic()
        answers: dict[str, list[int]] = {group: [] for group in GROUPS}
        # Until every group had ten commits acknowledged in a row.
        while not all(a[-10:] == [0] * 10 for a in answers.values()):
            assert time.monotonic() - resumed_at < 30, (answers, tail(server))
            for group, error in (await commit_all(client, offset)).items():
                answers[group].append(error)
                if error == 0:
                    acknowledged[group] = offset
            offset += 1
        # The answers of the commits that were on their way when the broker came back, of
        # the reload, then acknowledgements only.
        pattern = re.compile(r"(15,)*(14,)*(0,)+")
        for group, seen in answers.items():
            assert pattern.fullmatch("".join(f"{e}," for e in seen)), (group, seen, tail(server))
        assert all(count <= 1 for count in reloads(server).values()), tail(server)
        assert await committed(client) == acknowledged
        await client.close()


async def test_a_fenced_producer_gets_a_new_id_and_its_partition_serves_again_at_once(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    """Someone writes to the log's partition (a commit of another group) with the server's
    producer id and a newer epoch: the broker refuses the server's next batch
    (INVALID_PRODUCER_EPOCH). The server gets a new producer id, sends the batch again with
    it, finds the log ahead of its state (the other batch) and reloads the partition; its
    groups are served again at once, the other's commit among them."""
    group = GROUPS[0]
    partition = partition_for(group, PARTITIONS)
    assert partition_for(OTHER_GROUP, PARTITIONS) == partition
    with ServerProcess(server_args(pausable_kafka_broker, unique_topic)) as server:
        client = await WireClient.connect(server.host, server.port)
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): 1}))
        assert commit_errors(response) == {(TOPIC, 0): 0}
        (match,) = [m for line in server.lines if (m := PRODUCER.search(line))]
        producer_id, epoch = int(match[1]), int(match[2])
        await write_with(pausable_kafka_broker, unique_topic, partition, producer_id, epoch + 1)

        answers: list[int] = []
        started = time.monotonic()
        while not answers or answers[-1] != 0:
            assert time.monotonic() - started < 15, (answers, tail(server))
            response = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): 2 + len(answers)})
            )
            answers.append(commit_errors(response)[(TOPIC, 0)])
        # At most the commit the reload caught, and those that came while it loaded.
        assert re.fullmatch(r"(16,)?(14,)*0,", "".join(f"{e}," for e in answers)), answers
        assert any("refused a batch" in line and "new producer id" in line for line in server.lines)
        assert any("produces with producer id" in line for line in server.lines), tail(server)
        assert reloads(server) == {partition: 1}, tail(server)
        for offset in range(100, 110):
            response = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): offset})
            )
            assert commit_errors(response) == {(TOPIC, 0): 0}
        await client.close()


async def write_with(
    broker: ApacheKafkaBroker, topic: str, partition: int, producer_id: int, epoch: int
) -> None:
    """Write a commit of OTHER_GROUP (which must belong to the partition) with another's
    producer id and epoch."""
    host, port = broker.bootstrap.split(":")

    async def metadata() -> dict[int, Leader]:
        return {partition: Leader(1, host, int(port))}

    sender = ProduceSender(
        topic,
        metadata,
        client_id="intruder",
        request_timeout_ms=10_000,
        max_inflight_requests=1,
        max_request_bytes=1 << 20,
        producer=IdempotentProducer(ProducerIdAndEpoch(producer_id, epoch)),
    )
    await sender.start()
    try:
        builder = DefaultRecordBatchBuilder(2, 0, 0, producer_id, epoch, 0, 1 << 20)
        now_ms = int(time.time() * 1000)
        key, value = encode_record(
            new_offset_commit_record(OTHER_GROUP, TOPIC, 0, 77, -1, "", now_ms)
        )
        builder.append(0, now_ms, key, value, [])
        await asyncio.wait_for(sender.submit(partition, bytes(builder.build()), 1), 30)
    finally:
        await sender.close()
