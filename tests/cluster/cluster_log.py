"""The log of a coordinator cluster as the checker reads it: every partition's ownership and
offset commit records, in offset order, read with the server's own loader."""

from __future__ import annotations

from checker import Commit, LogEntry, Ownership

from coordinator_server.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionOwnershipKey,
    PartitionOwnershipValue,
    decode_key,
    decode_value,
)
from coordinator_server.storage.kafka.log import KafkaLog


def decode_entry(offset: int, key: bytes, value: bytes | None) -> LogEntry | None:
    """The record as the checker sees it; None for what it does not check (groups)."""
    record_key = decode_key(key)
    record_value = decode_value(record_key, value)
    if isinstance(record_key, PartitionOwnershipKey):
        assert isinstance(record_value, PartitionOwnershipValue), record_value
        return (
            offset,
            Ownership(record_value.node_id, record_value.producer_id, record_value.producer_epoch),
        )
    if isinstance(record_key, OffsetCommitKey):
        offset_value = record_value.offset if isinstance(record_value, OffsetCommitValue) else None
        return (
            offset,
            Commit(record_key.group, record_key.topic, record_key.partition, offset_value),
        )
    return None


async def read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[LogEntry]]:
    """Every partition of the log topic, up to its high watermark now."""
    log = KafkaLog(bootstrap, topic, partitions, 1, idempotent=False)
    await log.start()
    entries: dict[int, list[LogEntry]] = {}
    try:
        for partition in range(log.num_partitions):
            found: list[LogEntry] = []

            def sink(offset: int, key: bytes, value: bytes | None, into=found) -> None:
                entry = decode_entry(offset, key, value)
                if entry is not None:
                    into.append(entry)

            await log.load(partition, sink)
            entries[partition] = found
    finally:
        await log.close()
    return entries
