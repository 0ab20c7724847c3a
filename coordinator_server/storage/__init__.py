"""The coordinator log: its interfaces and its implementations.

`KafkaLog` is imported on first use, so that code needing only the interfaces (the
runtime, the pure layers' tests) does not pay for importing aiokafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator_server.storage.api import (
    AppendError,
    CoordinatorLoader,
    CoordinatorLog,
    FollowResult,
    FollowSink,
    HighWatermarkListener,
    LatestRecords,
    LoadError,
    LoadSummary,
    LogFailureListener,
    LogFollower,
    PartitionWriter,
    RawRecord,
    RecordSink,
)
from coordinator_server.storage.memory import InMemoryLog
from coordinator_server.storage.sqlite import PartitionCountMismatchError, SqliteLog, SqliteLogError

if TYPE_CHECKING:
    from coordinator_server.storage.kafka.log import KafkaLog, KafkaLogError, OwnershipError

__all__ = [
    "AppendError",
    "CoordinatorLoader",
    "CoordinatorLog",
    "FollowResult",
    "FollowSink",
    "HighWatermarkListener",
    "InMemoryLog",
    "KafkaLog",
    "KafkaLogError",
    "LatestRecords",
    "LoadError",
    "LoadSummary",
    "LogFailureListener",
    "LogFollower",
    "OwnershipError",
    "PartitionCountMismatchError",
    "PartitionWriter",
    "RawRecord",
    "RecordSink",
    "SqliteLog",
    "SqliteLogError",
]

_LAZY_FROM_KAFKA = frozenset({"KafkaLog", "KafkaLogError", "OwnershipError"})


def __getattr__(name: str) -> Any:
    if name in _LAZY_FROM_KAFKA:
        from coordinator_server.storage.kafka import log

        return getattr(log, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
