"""The shard: the state of one partition of the coordinator log (`log_partition`), the
doors through which the services see it (`doors`), and its load (`load_replay`)."""

from coordinator_server.shard.doors import GroupShard, SecurityShard, TransactionShard
from coordinator_server.shard.load_replay import ShardLoadReplay, takeover_coordinator_epoch
from coordinator_server.shard.log_partition import LogPartitionShard, ShardConfig, ShardManagers

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
