"""The live side of the audit: what the server answers about every group (OffsetFetch of
every offset, DescribeGroups), and, beside it, the transactional part's answers
(`audit_transactions`), as rows for Spark."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.consumer import ConsumerProtocolAssignment, InvalidConsumerProtocolError
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    DescribeGroupsRequest,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)

__all__ = [
    "LIVE_GROUPS_SCHEMA",
    "LIVE_OFFSETS_SCHEMA",
    "LiveState",
    "fetch_live_state",
    "list_live_groups",
]

FETCH_CHUNK_GROUPS: Final = 256

LIVE_OFFSETS_SCHEMA: Final = StructType(
    [
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("committed_offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
    ]
)

LIVE_GROUPS_SCHEMA: Final = StructType(
    [
        StructField("group", StringType(), False),
        StructField("state", StringType(), False),
        StructField("protocol_type", StringType(), True),
        StructField("protocol", StringType(), True),
        StructField(
            "members",
            ArrayType(
                StructType(
                    [
                        StructField("member_id", StringType(), False),
                        StructField("group_instance_id", StringType(), True),
                        StructField("client_id", StringType(), True),
                        StructField("client_host", StringType(), True),
                        StructField("member_metadata", BinaryType(), True),
                        StructField("member_assignment", BinaryType(), True),
                        StructField("assignment_text", StringType(), True),
                    ]
                )
            ),
            False,
        ),
    ]
)


@dataclass
class LiveState:
    """What the server answered, as rows of LIVE_OFFSETS_SCHEMA and LIVE_GROUPS_SCHEMA."""

    offsets: list[tuple[Any, ...]] = field(default_factory=list)
    groups: list[tuple[Any, ...]] = field(default_factory=list)
    # Groups whose calls failed, with the error: neither side of them can be compared.
    errors: dict[str, str] = field(default_factory=dict)
    # OffsetFetch with require_stable: (group, topic, partition, unstable) of each partition
    # asked (audit_transactions.STABLE_PARTITIONS_SCHEMA).
    stable: list[tuple[Any, ...]] = field(default_factory=list)
    # DescribeTransactions: (transactional_id, state, producer_id, producer_epoch) of each
    # id the server knows, the ids asked, and those whose calls failed.
    transactions: list[tuple[Any, ...]] = field(default_factory=list)
    described: set[str] = field(default_factory=set)
    transaction_errors: dict[str, str] = field(default_factory=dict)

    def merged(self, more: LiveState) -> LiveState:
        return LiveState(
            self.offsets + more.offsets,
            self.groups + more.groups,
            {**self.errors, **more.errors},
            self.stable + more.stable,
            self.transactions + more.transactions,
            self.described | more.described,
            {**self.transaction_errors, **more.transaction_errors},
        )


def _assignment_text(data: bytes) -> str:
    """A member's assignment as `topic:0,1;other:3` when it is the consumer protocol's."""
    try:
        decoded = ConsumerProtocolAssignment.decode(data)
    except InvalidConsumerProtocolError:
        return "0x" + data.hex()
    return ";".join(
        f"{tp.topic}:{','.join(str(p) for p in sorted(tp.partitions))}"
        for tp in sorted(decoded.partitions, key=lambda tp: tp.topic)
    )


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def list_live_groups(client: CoordinatorClient) -> list[str]:
    return [group.group_id for group in await client.list_all_groups()]


async def fetch_live_state(client: CoordinatorClient, groups: Iterable[str]) -> LiveState:
    """OffsetFetch (every offset) and DescribeGroups of each of `groups`."""
    state = LiveState()
    for chunk in _chunks(sorted(set(groups)), FETCH_CHUNK_GROUPS):
        fetched, described = await asyncio.gather(
            client.offset_fetch(
                OffsetFetchRequest(
                    groups=[OffsetFetchRequestGroup(group_id=group) for group in chunk]
                )
            ),
            client.describe_groups(DescribeGroupsRequest(groups=list(chunk))),
        )
        for group in fetched.groups:
            if group.error_code != 0:
                state.errors[group.group_id] = f"OffsetFetch error {group.error_code}"
                continue
            for topic in group.topics:
                for partition in topic.partitions:
                    if partition.error_code != 0:
                        state.errors[group.group_id] = (
                            f"OffsetFetch error {partition.error_code} for "
                            f"{topic.name}-{partition.partition_index}"
                        )
                    elif partition.committed_offset >= 0:
                        state.offsets.append(
                            (
                                group.group_id,
                                topic.name,
                                partition.partition_index,
                                partition.committed_offset,
                                partition.committed_leader_epoch,
                                partition.metadata,
                            )
                        )
        for described_group in described.groups:
            if described_group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                continue
            if described_group.error_code != 0:
                state.errors[described_group.group_id] = (
                    f"DescribeGroups error {described_group.error_code}"
                )
                continue
            state.groups.append(
                (
                    described_group.group_id,
                    described_group.group_state,
                    described_group.protocol_type,
                    described_group.protocol_data,
                    [
                        (
                            member.member_id,
                            member.group_instance_id,
                            member.client_id,
                            member.client_host,
                            member.member_metadata,
                            member.member_assignment,
                            _assignment_text(member.member_assignment),
                        )
                        for member in described_group.members
                    ],
                )
            )
    errored = set(state.errors)
    state.offsets = [row for row in state.offsets if row[0] not in errored]
    state.groups = [row for row in state.groups if row[0] not in errored]
    return state
