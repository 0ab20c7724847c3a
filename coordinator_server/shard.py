"""GroupCoordinatorShard: the state machine of one partition of the coordinator log.

It composes the managers and owns the single `replay` dispatch on record type, the one
path through which both live writes and loads change the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator_server.offsets.manager import OffsetMetadataManager, OffsetsConfig
from coordinator_server.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from coordinator_server.runtime.api import ShardContext
from coordinator_server.timeline import TimelineDict


@dataclass(frozen=True, slots=True)
class ShardConfig:
    offsets: OffsetsConfig = field(default_factory=OffsetsConfig)


class GroupCoordinatorShard:
    def __init__(self, context: ShardContext, config: ShardConfig) -> None:
        self.context = context
        self.offsets = OffsetMetadataManager(
            context.snapshot_registry, context.clock, config.offsets
        )
        # Group metadata records as last written, per group. Group membership itself (the
        # classic protocol's state machine) is rebuilt from these by the group manager.
        self.group_metadata: TimelineDict[str, GroupMetadataValue] = TimelineDict(
            context.snapshot_registry
        )

    def replay(self, offset: int, record: CoordinatorRecord) -> None:
        key = record.key
        if type(key) is OffsetCommitKey:
            value = record.value
            assert value is None or type(value) is OffsetCommitValue
            self.offsets.replay(key, value)
        elif type(key) is GroupMetadataKey:
            value = record.value
            assert value is None or type(value) is GroupMetadataValue
            if value is None:
                self.group_metadata.pop(key.group)
            else:
                self.group_metadata[key.group] = value
        else:
            raise ValueError(f"unknown record key {key!r} at offset {offset}")

    def apply(self, update: object) -> None:
        raise ValueError(f"unknown in-memory update {update!r}")

    def on_loaded(self) -> None:
        """Nothing to re-arm yet: offsets have no timers until expiration is served."""

    def on_unloaded(self) -> None:
        """Nothing held outside the timeline state."""
