"""The load scenario: a log of R committed offsets written first (to a Kafka topic, or to the
embedded SQLite log's file), then a cold start over it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator_client import ClientSecurity
from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.hashing import partition_for
from coordinator_server.records import encode_record, new_offset_commit_record
from coordinator_server.tools.bench.ours import WireConnection
from coordinator_server.tools.bench.processes import ServerProcess, resident_bytes

if TYPE_CHECKING:
    from coordinator_server.storage.kafka.security import KafkaSecurity

PRODUCE_BATCH_BYTES = 1024 * 1024
# Records per SQLite transaction while writing the log, unless told (a million records in
# batches of this size write in seconds).
SQLITE_BATCH_RECORDS = 10_000
# Record batches handed to the producer before waiting for them to be written.
MAX_PENDING_SENDS = 1000


def dataset_groups(records: int, topics: int, partitions: int) -> int:
    per_group = topics * partitions
    return -(-records // per_group)


def group_name(index: int) -> str:
    return f"bench-load-{index}"


async def write_log(
    bootstrap_servers: str,
    topic: str,
    num_partitions: int,
    records: int,
    topics: int,
    partitions: int,
    batch_records: int = 0,
    *,
    security: KafkaSecurity | None = None,
) -> float:
    """Write `records` offset commits (groups of `topics` x `partitions` offsets each, on the
    log partition that owns each group) to a new compacted topic, in record batches of
    `batch_records` (0: as many as fit 1 MiB); the seconds it took."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from coordinator_server.storage.kafka.log import offsets_topic_configs

    options = {} if security is None else security.aiokafka_options()
    started = time.perf_counter()
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=30000, **options
    )
    forbid_auto_topic_creation(admin._client)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, num_partitions, 1, topic_configs=offsets_topic_configs())]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        acks="all",
        enable_idempotence=False,
        linger_ms=0,
        max_batch_size=PRODUCE_BATCH_BYTES,
        max_request_size=PRODUCE_BATCH_BYTES + 64 * 1024,
        request_timeout_ms=60000,
        **options,
    )
    forbid_auto_topic_creation(producer.client)
    await producer.start()
    try:
        by_partition = dataset(num_partitions, records, topics, partitions)
        sends: list[asyncio.Future[Any]] = []
        for partition, raw in by_partition.items():
            batch = producer.create_batch()
            in_batch = 0
            for key, value in raw:
                full = batch_records and in_batch == batch_records
                if full or batch.append(key=key, value=value, timestamp=None) is None:
                    batch.close()
                    sends.append(await producer.send_batch(batch, topic, partition=partition))
                    if len(sends) >= MAX_PENDING_SENDS:
                        await asyncio.gather(*sends)
                        sends.clear()
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None)
                    in_batch = 0
                in_batch += 1
            batch.close()
            sends.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return time.perf_counter() - started


def dataset(
    num_partitions: int, records: int, topics: int, partitions: int
) -> dict[int, list[tuple[bytes, bytes | None]]]:
    """`records` offset commits, groups of `topics` x `partitions` offsets each, by the log
    partition that owns each group."""
    now_ms = int(time.time() * 1000)
    topic_names = [f"topic-{t}" for t in range(topics)]
    by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
    written = 0
    group = 0
    while written < records:
        group_id = group_name(group)
        sink = by_partition.setdefault(partition_for(group_id, num_partitions), [])
        for name in topic_names:
            for p in range(partitions):
                if written == records:
                    break
                sink.append(
                    encode_record(
                        new_offset_commit_record(group_id, name, p, 1000 + p, -1, "", now_ms)
                    )
                )
                written += 1
        group += 1
    return by_partition


async def write_sqlite_log(
    data_dir: Path,
    num_partitions: int,
    records: int,
    topics: int,
    partitions: int,
    batch_records: int = 0,
    *,
    security: KafkaSecurity | None = None,
) -> float:
    """Write the same offset commits as `write_log` to a new SQLite log in `data_dir` (the
    file `serve --data-dir` opens), a transaction per `batch_records` (0: 10,000) as the
    server appends a batch per transaction; the seconds it took."""
    from coordinator_server.storage.sqlite import SqliteLog

    started = time.perf_counter()
    # Durability is the server's business, not the bench's: no fsync per transaction.
    log = SqliteLog(data_dir / "coordinator.db", num_partitions, synchronous="OFF")
    await log.start()
    try:
        size = batch_records or SQLITE_BATCH_RECORDS
        for partition, raw in dataset(num_partitions, records, topics, partitions).items():
            for start in range(0, len(raw), size):
                await log.append(partition, raw[start : start + size])
    finally:
        await log.close()
    return time.perf_counter() - started


async def count_loaded_offsets(
    address: str, group_id: str, security: ClientSecurity | None = None
) -> int:
    host, _, port = address.rpartition(":")
    connection = await WireConnection.open(host, int(port), security)
    try:
        body = await connection.request(
            9, {"groups": [{"group_id": group_id, "topics": None}], "require_stable": False}
        )
    finally:
        connection.close()
    groups = body.get("groups") or []
    if not groups:
        return 0
    return sum(
        1
        for topic in groups[0].get("topics") or ()
        for partition in topic.get("partitions") or ()
        if partition.get("committed_offset", -1) >= 0
    )


async def cold_start(
    server_args: list[str], cpu: int | None, settle_s: float
) -> tuple[ServerProcess, dict[str, Any]]:
    """Start the server over the written log; time to ready and resident memory after it."""
    server = ServerProcess(server_args, cpu)
    await asyncio.get_running_loop().run_in_executor(None, server.start)
    ready_s = server.ready_at - server.started_at
    rss_ready = resident_bytes(server.pid)
    await asyncio.sleep(settle_s)
    rss = max(rss_ready, resident_bytes(server.pid))
    return server, {
        "ready_s": round(ready_s, 3),
        "server_load_s": server.reported_load_s,
        "records_per_s": server.reported_records_per_s,
        "rss_mb": round(rss / 1024 / 1024, 1),
    }
