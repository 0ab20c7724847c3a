"""The shard: the state of one partition of the coordinator log (`log_partition`), and the
doors through which the services see it (`doors`)."""

from coordinator_server.shard.doors import GroupShard, SecurityShard, TransactionShard
from coordinator_server.shard.log_partition import (
    LogPartitionShard,
    ShardConfig,
    ShardLoadReplay,
    ShardManagers,
    takeover_coordinator_epoch,
)

__all__ = [
    "GroupShard",
    "LogPartitionShard",
    "SecurityShard",
    "ShardConfig",
    "ShardLoadReplay",
    "ShardManagers",
    "TransactionShard",
    "takeover_coordinator_epoch",
]
