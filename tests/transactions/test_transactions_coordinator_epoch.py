"""The coordinator epoch of the transactions' markers, counted from the partition's takeovers
in the log: it only grows, whatever Kafka's producer epoch of the takeover does."""

from __future__ import annotations

from shard_context import ShardTestContext

from coordinator_server.records import new_partition_ownership_record
from coordinator_server.shard import ShardConfig, takeover_coordinator_epoch
from coordinator_server.shard.load_replay import COORDINATOR_EPOCH_ORIGIN_MS

DAY_MS = 86_400_000


def takeover(ctx: ShardTestContext, node: int, producer_epoch: int, at_ms: int) -> int:
    ctx.replay_all([new_partition_ownership_record(node, 7, producer_epoch, at_ms)])
    ctx.commit()
    return ctx.shard.coordinator_epoch


def test_a_log_no_cluster_took_over_has_epoch_zero() -> None:
    assert ShardTestContext(ShardConfig()).shard.coordinator_epoch == 0


def test_each_takeover_counts_on_even_when_kafkas_producer_epoch_starts_again() -> None:
    ctx = ShardTestContext(ShardConfig())
    start = COORDINATOR_EPOCH_ORIGIN_MS + 300 * DAY_MS
    first = takeover(ctx, 1, producer_epoch=12, at_ms=start)
    assert first == 300 * 86_400
    # A week later: Kafka gave the fencing id a new producer id, at epoch 0.
    second = takeover(ctx, 2, producer_epoch=0, at_ms=start + 7 * DAY_MS)
    assert second > first
    # A node whose clock is behind still counts on.
    third = takeover(ctx, 1, producer_epoch=1, at_ms=start + 7 * DAY_MS - 5_000)
    assert third == second + 1


def test_a_compacted_log_keeps_counting_from_the_latest_takeovers_time() -> None:
    """Compaction keeps the latest ownership record only: its time alone gives an epoch above
    every earlier takeover's, as long as the takeovers are seconds apart."""
    at = COORDINATOR_EPOCH_ORIGIN_MS + 10 * DAY_MS
    full = ShardTestContext(ShardConfig())
    for index in range(5):
        epoch = takeover(full, index % 2, producer_epoch=index, at_ms=at + index * 10_000)
    compacted = ShardTestContext(ShardConfig())
    assert takeover(compacted, 0, producer_epoch=4, at_ms=at + 4 * 10_000) == epoch
    # The next takeover, after either load, is above what the last owner used.
    assert takeover_coordinator_epoch(compacted.shard.coordinator_epoch, at + 50_000) > epoch
