"""Helpers for the transactional offset tests: TxnOffsetCommit, the end of a transaction,
plain commits and stable fetches through the shard test context, and the state a context
holds (committed and pending offsets) to compare two contexts with."""

from __future__ import annotations

from typing import Any

from shard_context import ShardTestContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
)
from coordinator_server.offsets.transactional import (
    TransactionalCommit,
    TransactionalCommitAnswer,
    TransactionalCommitPartition,
    TransactionalCommitTopic,
)
from coordinator_server.records import OffsetCommitValue

Offsets = dict[tuple[str, int], int]


def txn_request(
    group: str,
    producer_id: int,
    offsets: Offsets,
    *,
    producer_epoch: int = 0,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
    metadata: str | None = "metadata",
    leader_epoch: int = 1,
) -> TransactionalCommit:
    by_topic: dict[str, list[TransactionalCommitPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            TransactionalCommitPartition(partition, offset, leader_epoch, metadata)
        )
    return TransactionalCommit(
        group_id=group,
        transactional_id=f"txn-{producer_id}",
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        topics=[TransactionalCommitTopic(name, parts) for name, parts in by_topic.items()],
    )


def answers(response: TransactionalCommitAnswer) -> dict[tuple[str, int], ErrorCode]:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
    }


def txn_commit(
    ctx: ShardTestContext, group: str, producer_id: int, offsets: Offsets, **kwargs: Any
) -> dict[tuple[str, int], ErrorCode]:
    request = txn_request(group, producer_id, offsets, **kwargs)
    response: TransactionalCommitAnswer = ctx.write(lambda s: s.txn_offset_commit(request))
    return answers(response)


def end_txn(
    ctx: ShardTestContext, producer_id: int, committed: bool, producer_epoch: int = 0
) -> ErrorCode:
    code: ErrorCode = ctx.write(
        lambda s: s.complete_transaction_offsets(producer_id, producer_epoch, committed)
    )
    return code


def plain_commit(ctx: ShardTestContext, group: str, offsets: Offsets) -> None:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=1,
                committed_metadata="metadata",
            )
        )
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )
    response: OffsetCommitResponse = ctx.write(lambda s: s.commit_offset(request))
    assert all(p.error_code == ErrorCode.NONE for t in response.topics for p in t.partitions)


def fetch_stable(
    ctx: ShardTestContext, group: str, topics: dict[str, list[int]] | None = None
) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    """(offset, error) per partition, as a require_stable fetch sees them (the latest
    state); `topics` None: every committed offset of the group."""
    return fetch_at(ctx, group, topics, None)


def fetch_committed(
    ctx: ShardTestContext, group: str, topics: dict[str, list[int]] | None = None
) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    """As a fetch without require_stable sees them (the committed state)."""
    return fetch_at(ctx, group, topics, ctx.registry.committed_offset)


def fetch_at(
    ctx: ShardTestContext,
    group: str,
    topics: dict[str, list[int]] | None,
    committed_offset: int | None,
) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    request = OffsetFetchRequestGroup(
        group_id=group,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )
    response = ctx.shard.fetch_offsets(request, committed_offset)
    return {
        (topic.name, p.partition_index): (p.committed_offset, ErrorCode(p.error_code))
        for topic in response.topics
        for p in topic.partitions
    }


def committed_state(ctx: ShardTestContext) -> dict[tuple[str, str, int], OffsetCommitValue]:
    offsets = ctx.shard.managers.offsets
    return {
        (group, topic, partition): value
        for group in offsets.groups()
        for (topic, partition), value in (offsets.group_offsets(group) or {}).items()
    }


def pending_state(
    ctx: ShardTestContext,
) -> dict[tuple[str, str, int], list[tuple[int, int, OffsetCommitValue, bool]]]:
    """Per partition, its pending offsets in record order: (producer id, producer epoch,
    value, superseded)."""
    state = {}
    for group, offsets in ctx.shard.managers.offsets.pending.by_group.items():
        for (topic, partition), entries in offsets.items():
            if entries:
                state[(group, topic, partition)] = [
                    (e.producer_id, e.producer_epoch, e.value, e.superseded) for e in entries
                ]
    return state
