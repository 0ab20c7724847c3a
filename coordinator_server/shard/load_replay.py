"""A partition's load and takeovers: the log's records handed to the shard's `replay` as a
load reads them (`ShardLoadReplay`), and the coordinator epoch each takeover in the log
counts on (`takeover_coordinator_epoch`)."""

from __future__ import annotations

from typing import Protocol

from coordinator_server.offsets.manager import OffsetCommitRun, OffsetMetadataManager
from coordinator_server.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit,
    decode_record,
)
from coordinator_server.runtime.api import RecordRun

LOAD_RUN_LIMIT = 1024
"""Offset commits a load holds before replaying them (see ShardLoadReplay)."""


class Replays(Protocol):
    """What a load hands the records to: the shard's `replay`."""

    def replay(self, offset: int, record: CoordinatorRecord | RecordRun) -> None: ...


COORDINATOR_EPOCH_ORIGIN_MS = 1_735_689_600_000
"""2025-01-01 UTC: the coordinator epoch counts seconds from here (an int32 lasts 68 years)."""


def takeover_coordinator_epoch(previous: int, timestamp_ms: int) -> int:
    """The coordinator epoch of a takeover after one of epoch `previous`: one more, or the
    seconds since COORDINATOR_EPOCH_ORIGIN_MS at the takeover if that is more.

    The brokers refuse a marker whose coordinator epoch is below the last one a producer's
    markers carried (Kafka's fence of older transaction coordinators), so the epoch of a
    partition's owners must only grow, across nodes and restarts, for as long as the log
    lasts. Kafka's producer epoch of the takeover does not: it starts again at 0 when Kafka
    gives the partition's fencing transactional id a new producer id (after
    transactional.id.expiration.ms without a takeover). Counting takeovers in the log grows,
    but compaction keeps only the latest ownership record, so a later load may see that one
    alone: its time keeps the count going, as long as the nodes' clocks are within a
    second of each other's order of takeovers (the takeovers themselves are a session
    timeout apart)."""
    return max(previous + 1, max(timestamp_ms - COORDINATOR_EPOCH_ORIGIN_MS, 0) // 1000)


class ShardLoadReplay:
    """The shard's LoadReplay: the log's records decoded into what the shard's `replay`
    takes, and handed to it in log order; offset commits decoded without the key and record
    objects that `decode_record` builds.

    An OffsetCommit writes one record per partition, one after the other, so a log is runs
    of one group's commits: a run is held (up to LOAD_RUN_LIMIT records) and replayed as one
    OffsetCommitRun, as the live write that made it was. Any other record replays what is
    held first, so the state sees every record in log order. `close` replays the rest: the
    runtime calls it when the load has read everything, before the partition becomes ACTIVE.
    """

    __slots__ = ("_commits", "_group", "_offset", "_offsets", "_shard", "_topic", "_topic_name")

    def __init__(self, shard: Replays, offsets: OffsetMetadataManager) -> None:
        self._shard = shard
        self._offsets = offsets
        self._group = ""
        self._offset = 0
        self._commits: list[tuple[tuple[str, int], OffsetCommitValue]] = []
        self._topic = ""
        self._topic_name = ""

    def __call__(self, offset: int, key: bytes, value: bytes | None) -> None:
        commit = decode_offset_commit(key, value)
        if commit is not None:
            group, topic, partition, commit_value = commit
            if commit_value is not None:
                if group != self._group or len(self._commits) >= LOAD_RUN_LIMIT:
                    self.close()
                    self._group = group
                if not self._commits:
                    self._offset = offset
                if topic != self._topic:
                    self._topic = topic
                    self._topic_name = self._offsets.topic_name(topic)
                self._commits.append(((self._topic_name, partition), commit_value))
                return
            self.close()
            self._shard.replay(
                offset, CoordinatorRecord(OffsetCommitKey(group, topic, partition), None)
            )
            return
        self.close()
        self._shard.replay(offset, decode_record(key, value))

    @property
    def held(self) -> int:
        """How many offset commits are held, not replayed yet (at most LOAD_RUN_LIMIT)."""
        return len(self._commits)

    def close(self) -> None:
        commits = self._commits
        if commits:
            self._commits = []
            self._shard.replay(self._offset, OffsetCommitRun(self._group, commits))


__all__ = [
    "COORDINATOR_EPOCH_ORIGIN_MS",
    "LOAD_RUN_LIMIT",
    "ShardLoadReplay",
    "takeover_coordinator_epoch",
]
