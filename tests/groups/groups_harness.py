"""Helpers for the classic group tests: requests, and a context that drives members through
the shard test context (join in two steps, sync, heartbeat, leave, commit)."""

from __future__ import annotations

from typing import Any

from shard_context import Parked, ShardTestContext

from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupRequestMember,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchResponseGroup,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupState
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.records import GroupMetadataKey, GroupMetadataValue
from coordinator_server.runtime.api import RequestContext
from coordinator_server.shard import ShardConfig

RC = RequestContext(client_id="client", client_host="/127.0.0.1")
GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 60_000
DELAY_MS = 3_000


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=list(topics)).encode()


def assignment(topic: str, *partitions: int) -> bytes:
    return ConsumerProtocolAssignment(
        partitions=[TopicPartitions(topic, list(partitions))]
    ).encode()


def protocols(*names: str, topics: tuple[str, ...] = ("t",)) -> list[tuple[str, bytes]]:
    return [(name, subscription(*topics)) for name in (names or ("range",))]


def join_request(
    member_id: str = "",
    *,
    group: str = GROUP,
    instance: str | None = None,
    protocol_type: str = "consumer",
    protos: list[tuple[str, bytes]] | None = None,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=[
            JoinGroupRequestProtocol(name=name, metadata=metadata)
            for name, metadata in (protocols() if protos is None else protos)
        ],
    )


def heartbeat_request(
    member_id: str, generation: int, *, group: str = GROUP, instance: str | None = None
) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
    )


def leave_request(*members: tuple[str, str | None], group: str = GROUP) -> LeaveGroupRequest:
    return LeaveGroupRequest(
        group_id=group,
        members=[LeaveGroupRequestMember(member_id=m, group_instance_id=i) for m, i in members],
    )


def commit_request(
    offsets: dict[tuple[str, int], int],
    *,
    group: str = GROUP,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
) -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance,
        topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )


def fetch_request(
    topics: dict[str, list[int]] | None = None, *, group: str = GROUP
) -> OffsetFetchRequestGroup:
    return OffsetFetchRequestGroup(
        group_id=group,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )


def fetched(group: OffsetFetchResponseGroup) -> dict[tuple[str, int], int]:
    """A fetched group's offsets by (topic, partition)."""
    return {
        (topic.name, p.partition_index): p.committed_offset
        for topic in group.topics
        for p in topic.partitions
    }


def shard_config(**groups: Any) -> ShardConfig:
    return ShardConfig(offsets=OffsetsConfig(), groups=GroupsConfig(**groups))


class GroupsContext(ShardTestContext):
    """A ShardTestContext with the classic protocol's calls."""

    def __init__(self, config: ShardConfig | None = None, **groups: Any) -> None:
        super().__init__(config or shard_config(**groups))

    def close(self) -> None:
        """Nothing to release: the shard lives in memory only."""

    # State.

    def group(self, group_id: str = GROUP) -> ClassicGroup:
        group = self.shard.managers.groups.group(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def state(self, group_id: str = GROUP) -> ClassicGroupState:
        return self.group(group_id).state

    def find_group(self, group_id: str) -> ClassicGroup | None:
        return self.shard.managers.groups.group(group_id)

    def all_groups(self) -> list[ClassicGroup]:
        return self.shard.managers.groups.groups()

    def group_records(self, since: int = 0) -> list[tuple[str, GroupMetadataValue | None]]:
        return [
            (r.key.group, r.value)  # type: ignore[misc]
            for r in self.records_written(since)
            if type(r.key) is GroupMetadataKey
        ]

    # Calls.

    def join(self, request: JoinGroupRequest) -> Parked:
        return self.write_parkable(lambda s, h: s.join_group(RC, request, h))

    def join_new(self, **kwargs: Any) -> tuple[str, Parked]:
        """A dynamic member's two-step join: the member id it is given, and its parked
        second JoinGroup."""
        first = self.join(join_request(**kwargs))
        response = first.response
        assert isinstance(response, JoinGroupResponse), response
        assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED, response
        member_id = response.member_id
        return member_id, self.join(join_request(member_id, **kwargs))

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = GROUP,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Parked:
        request = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self.sync_group(request)

    def sync_group(self, request: SyncGroupRequest) -> Parked:
        return self.write_parkable(lambda s, h: s.sync_group(RC, request, h))

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = GROUP, instance: str | None = None
    ) -> int:
        request = heartbeat_request(member_id, generation, group=group, instance=instance)
        response: HeartbeatResponse = self.write(lambda s: s.heartbeat(RC, request))
        return response.error_code

    def leave(self, *members: tuple[str, str | None], group: str = GROUP) -> LeaveGroupResponse:
        request = leave_request(*members, group=group)
        return self.write(lambda s: s.leave_group(RC, request))

    def commit_offsets(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        group: str = GROUP,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
    ) -> OffsetCommitResponse:
        request = commit_request(
            offsets, group=group, generation=generation, member_id=member_id, instance=instance
        )
        response: OffsetCommitResponse = self.write(lambda s: s.commit_offset(request))
        return response

    def fetch(
        self,
        topics: dict[str, list[int]] | None = None,
        *,
        group: str = GROUP,
        latest: bool = False,
    ) -> dict[tuple[str, int], int]:
        at = None if latest else self.registry.committed_offset
        return fetched(self.shard.fetch_offsets(fetch_request(topics, group=group), at))

    # Scenarios.

    def sleep_until_done(self, parked: list[Parked], step_ms: int = DELAY_MS) -> int:
        """Move time on by `step_ms` until every parked call is answered; the time taken."""
        waited = 0
        while not all(p.done for p in parked):
            assert waited < 3_600_000, "still parked after an hour"
            self.sleep(step_ms)
            waited += step_ms
        return waited

    def stable_group(self, n: int, *, group: str = GROUP, **kwargs: Any) -> tuple[list[str], int]:
        """n dynamic members joined, the initial delay passed, the leader (the first) synced
        with an assignment per member: the member ids and the generation."""
        members: list[str] = []
        joins: list[Parked] = []
        for _ in range(n):
            member_id, parked = self.join_new(group=group, **kwargs)
            members.append(member_id)
            joins.append(parked)
        self.sleep_until_done(joins)
        for parked in joins:
            assert parked.done, parked
            assert parked.response.error_code == ErrorCode.NONE, parked.response
        generation = joins[0].response.generation_id
        leader = joins[0].response.leader
        assert leader == members[0]
        followers = [self.sync(m, generation, group=group) for m in members[1:]]
        self.sync(
            leader,
            generation,
            {m: assignment("t", i) for i, m in enumerate(members)},
            group=group,
        )
        for parked in followers:
            assert parked.done and parked.response.error_code == ErrorCode.NONE
        assert self.state(group) is ClassicGroupState.STABLE
        return members, generation


def response_of(parked: Parked) -> Any:
    assert parked.done, "still parked"
    return parked.response


def join_response(parked: Parked) -> JoinGroupResponse:
    response = response_of(parked)
    assert isinstance(response, JoinGroupResponse), response
    return response


def sync_response(parked: Parked) -> SyncGroupResponse:
    response = response_of(parked)
    assert isinstance(response, SyncGroupResponse), response
    return response
