"""Where the classic and the consumer groups of a partition meet: the doors of the APIs that
may reach either kind of group, and the online migration between them (Kafka's
GroupMetadataManager, whose one map holds both kinds: here each kind has its manager, and
only the shard, above both, joins them).

- ConsumerGroupHeartbeat: a join to an empty classic group deletes it (its offsets stay); a
  join to a classic group with members upgrades it to a consumer group under
  `group.consumer.migration.policy` (consumer_groups/migration.py for the consumer group's
  records, groups/migration.py for the classic group's end), or is refused
  GROUP_ID_NOT_FOUND, as any other heartbeat to a classic group is.
- JoinGroup, SyncGroup, Heartbeat and LeaveGroup on a consumer group with members are its
  classic members' (consumer_groups/classic_members.py); a JoinGroup to an empty consumer
  group deletes it (its offsets stay) and makes a classic group, as Kafka's does.
- A consumer group whose last member on the consumer protocol leaves, while classic members
  stay, downgrades (`downgrade`, which the consumer groups' manager calls when its policy
  allows it): its tombstones, then the classic group's record, the classic group
  rebalancing. So does one whose last such member has its instance taken by a classic
  static member's JoinGroup (after the join's records; rebalancing only for a new
  subscription).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coordinator_protocol.consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_server.consumer_groups.classic_members import ClassicMembers
from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.heartbeat import ClusterTopics
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.migration import (
    MigrationError,
    converted_group,
    downgraded_members,
    replacement_tombstone_records,
    upgrade_records,
    upgrade_refusal,
)
from coordinator_server.consumer_groups.regex import DeniedTopics, nothing_denied
from coordinator_server.consumer_groups.tombstones import group_tombstone_records
from coordinator_server.groups.classic import ClassicGroup
from coordinator_server.groups.manager import GroupMetadataManager
from coordinator_server.groups.store import join_error, sync_error
from coordinator_server.records import CoordinatorRecord
from coordinator_server.runtime.api import (
    Clock,
    CoordinatorResult,
    RecordRun,
    RequestContext,
    ResponseHandle,
)

HeartbeatResult = CoordinatorResult[ConsumerGroupHeartbeatResponse]


class GroupMigration:
    """The doors both kinds of group answer behind, over a partition's two managers."""

    def __init__(
        self,
        groups: GroupMetadataManager,
        consumer_groups: ConsumerGroupManager,
        clock: Clock,
        cluster_topics: Callable[[], ClusterTopics],
    ) -> None:
        self._groups = groups
        self._consumer_groups = consumer_groups
        self._classic_members = ClassicMembers(consumer_groups, self._downgrade_replacing)
        self._clock = clock
        self._topics = cluster_topics

    # ConsumerGroupHeartbeat.

    def consumer_group_heartbeat(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        denied_topics: DeniedTopics = nothing_denied,
    ) -> HeartbeatResult:
        """`denied_topics`: the topics the request's principal may not describe, which the
        group's regular expressions resolve without (the default: no authorizer is set)."""
        group_id = request.group_id or ""
        joining = request.member_epoch == 0
        records: list[CoordinatorRecord] = []
        classic = self._groups.group(group_id)
        if classic is None and joining:
            refusal = (
                None
                if self._consumer_groups.group(group_id) is not None
                else self._groups.new_group_refusal()
            )
            if refusal is not None:
                return _heartbeat_error(ErrorCode.POLICY_VIOLATION, refusal)
        elif classic is not None:
            if not joining:
                return _heartbeat_error(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
            if classic.members:
                return self._upgrade(ctx, request, classic, denied_topics)
            # An Empty classic group (one that only kept offsets) becomes a consumer group
            # when a member joins it (Kafka's `maybeDeleteEmptyClassicGroup`): its offsets
            # stay.
            self._groups.create_group_tombstone_records(group_id, records)
        result = self._heartbeat(ctx, request, denied_topics)
        if not records or not result.records:
            return result
        return CoordinatorResult([*records, *_records(result)], result.response)

    def _upgrade(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        classic: ClassicGroup,
        denied_topics: DeniedTopics,
    ) -> HeartbeatResult:
        """A member joins a classic group with members: the group becomes a consumer group,
        if the policy and the group allow it (Kafka's `validateOnlineUpgrade` and
        `convertToConsumerGroup`), and the member joins that."""
        consumer_groups = self._consumer_groups
        group_id = classic.group_id
        max_size = min(consumer_groups.max_size, consumer_groups.config.max_size)
        refusal = upgrade_refusal(classic, consumer_groups.config.migration_policy, max_size)
        topics = self._topics()
        if refusal is None:
            try:
                conversion = upgrade_records(classic, topics)
                converted = converted_group(group_id, conversion)
            except MigrationError as error:
                refusal = f"Cannot upgrade classic group {group_id} to consumer group: {error}."
        if refusal is not None:
            return _heartbeat_error(ErrorCode.GROUP_ID_NOT_FOUND, refusal)
        result = self._heartbeat(ctx, request, denied_topics, topics, converted)
        response = result.response
        if response is None or response.error_code != ErrorCode.NONE:
            return result
        tombstones, completions = self._groups.migration.upgrade(group_id)
        # Each member's session is its JoinGroup's, from now.
        timeouts = consumer_groups.timeouts
        for member in converted.members().values():
            classic_metadata = member.classic_member_metadata
            assert classic_metadata is not None
            timeouts.session(group_id, member.member_id, classic_metadata.session_timeout_ms)
        return CoordinatorResult(
            [*tombstones, *conversion, *_records(result)], response, completions=completions
        )

    def _heartbeat(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        denied_topics: DeniedTopics,
        topics: ClusterTopics | None = None,
        converted: ConsumerGroup | None = None,
    ) -> HeartbeatResult:
        return self._consumer_groups.heartbeat(
            request,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            topics=self._topics() if topics is None else topics,
            now_ms=self._clock.now_ms(),
            converted=converted,
            denied_topics=denied_topics,
        )

    # The classic protocol's APIs.

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[JoinGroupResponse]:
        consumer = self._consumer_group(request.group_id)
        if consumer is None:
            return self._groups.join_group(ctx, request, handle)
        if not consumer.num_members():
            # Kafka's `maybeDeleteEmptyConsumerGroup`: the classic group the join makes
            # takes the id, the offsets stay.
            result = self._groups.join_group(ctx, request, handle)
            if not result.records:
                return result
            result.records = [*group_tombstone_records(consumer), *_records(result)]
            return result
        config = self._groups.config
        if not (
            config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            return CoordinatorResult(
                response=join_error(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)
            )
        return self._classic_members.join_group(
            consumer,
            request,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            topics=self._topics(),
            now_ms=self._clock.now_ms(),
        )

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[SyncGroupResponse]:
        consumer = self._consumer_group(request.group_id)
        if consumer is None:
            return self._groups.sync_group(ctx, request, handle)
        if not consumer.num_members():
            return CoordinatorResult(response=sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        return self._classic_members.sync_group(consumer, request, self._topics())

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        consumer = self._consumer_group(request.group_id)
        if consumer is None:
            return self._groups.heartbeat(ctx, request)
        return self._classic_members.heartbeat(consumer, request)

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        consumer = self._consumer_group(request.group_id)
        if consumer is None:
            return self._groups.leave_group(ctx, request)
        return self._classic_members.leave_group(
            consumer, request, self._topics(), self._clock.now_ms()
        )

    def _consumer_group(self, group_id: str | None) -> ConsumerGroup | None:
        return self._consumer_groups.group(group_id) if group_id else None

    # Downgrade.

    def downgrade(
        self,
        group: ConsumerGroup,
        leaving: Sequence[ConsumerGroupMember],
        now_ms: int,
        *,
        joining: ConsumerGroupMember | None = None,
    ) -> CoordinatorResult[None]:
        """The consumer group converted back into a classic group as `leaving` go (Kafka's
        `convertToClassicGroup`): the group's tombstones, the classic group's record, and
        the classic group, rebalancing, as the update that follows them. `joining`: a
        classic static member whose JoinGroup's records, written just before these, took
        the place of the one member of `leaving`; the classic group keeps it, and rebalances
        only when it subscribes to other topics than the member it replaced (Kafka's)."""
        group_id = group.group_id
        leaving_ids = {member.member_id for member in leaving}
        timeouts = self._consumer_groups.timeouts
        for member_id in group.members():
            if member_id in leaving_ids:
                timeouts.cancel(group_id, member_id)
            else:
                # Their sessions go on in the classic group, which arms its own; a wait to
                # join or to sync the consumer group ends here.
                timeouts.cancel_join(group_id, member_id)
                timeouts.cancel_sync(group_id, member_id)
        kept = downgraded_members(group, leaving_ids, self._topics(), joining)
        if joining is None:
            tombstones = group_tombstone_records(group)
            rebalance = True
        else:
            (replaced,) = leaving
            tombstones = replacement_tombstone_records(group, replaced.member_id, joining.member_id)
            rebalance = (joining.subscribed_topic_names, joining.subscribed_topic_regex) != (
                replaced.subscribed_topic_names,
                replaced.subscribed_topic_regex,
            )
        classic = self._groups.migration.downgrade(
            group_id, group.group_epoch(), kept, now_ms, rebalance=rebalance
        )
        return CoordinatorResult([*tombstones, *_records(classic)], updates=classic.updates)

    def _downgrade_replacing(
        self,
        group: ConsumerGroup,
        replaced: ConsumerGroupMember,
        joining: ConsumerGroupMember,
        now_ms: int,
    ) -> CoordinatorResult[None]:
        return self.downgrade(group, (replaced,), now_ms, joining=joining)


def _heartbeat_error(code: ErrorCode, message: str) -> HeartbeatResult:
    return CoordinatorResult(
        response=ConsumerGroupHeartbeatResponse(error_code=code, error_message=message)
    )


def _records(result: CoordinatorResult[Any]) -> Sequence[CoordinatorRecord]:
    records = result.records
    assert not isinstance(records, RecordRun), "group writes are record objects"
    return records


__all__ = ["GroupMigration"]
