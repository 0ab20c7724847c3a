"""Members on the classic protocol in a consumer group: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup answered by the consumer group (Kafka's `classicGroupJoinToConsumerGroup`,
`classicGroupSyncToConsumerGroup`, `classicGroupHeartbeatToConsumerGroup` and
`classicGroupLeaveToConsumerGroup`).

A classic member of a consumer group is one of its members, assigned by the coordinator
like the others; its JoinGroup is its way to change its subscription and to reconcile:

- JoinGroup: a new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394); the
  member joins or rejoins with its subscription (the "consumer" embedded protocol), the
  group moves on as for a heartbeat (`ConsumerGroupManager.apply_member`), and the member
  is reconciled with its target, given the partitions its subscription says it still owns
  (none for an eager consumer, which revoked them all before joining). The answer's
  generation is its member epoch; nobody leads, nobody assigns.
- SyncGroup hands out its assigned partitions in the embedded protocol.
- Heartbeat keeps its session (its JoinGroup's session timeout), and answers
  REBALANCE_IN_PROGRESS when a rejoin would move it on: a newer target, partitions it must
  give up, or partitions it waited for that are free now. It then has its rebalance timeout
  to rejoin (the join timeout); once joined, as long to sync (the sync timeout).
- LeaveGroup fences the members it names (any member, as Kafka's): the group's epoch moves
  on, or, when only classic members are left, the group goes back to a classic group; so
  does a static member's JoinGroup that takes the place of the last member on the consumer
  protocol.

Kafka reads "a newer target" as a group epoch above the member's. Here the target of a busy
group may be computed a little after the group's epoch moved (KIP-1263's batching), and a
rejoin before it would find nothing new: the member is told to rejoin once the target it
would reconcile with is newer than its epoch. Pure, like the manager it is a part of.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from coordinator_protocol.errors import (
    ApiError,
    ErrorCode,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownServerError,
)
from coordinator_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_server.consumer_groups.current_assignment import NO_OWNER_EPOCH
from coordinator_server.consumer_groups.group import CONSUMER_PROTOCOL_TYPE, ConsumerGroup
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopics,
    member_removal_records,
    replace_member,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ConsumerGroupMember, ReconciliationState
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.consumer_groups.migration import (
    MigrationError,
    ReplacementDowngrade,
    assignment_bytes,
    classic_member_metadata,
    downgrade_allowed_with_replaced_member,
    parse_subscription,
    partitions_by_id,
)
from coordinator_server.consumer_groups.regex import unused_regex_tombstones
from coordinator_server.consumer_groups.subscriptions import subscribed_names_without
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_metadata_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupMetadataValue,
)
from coordinator_server.runtime.api import CoordinatorResult, RecordRun


class ClassicMembers:
    """The classic protocol's requests to the consumer groups of `manager`, each to a group
    that has members (an empty one is the classic groups' to take: the shard's routing)."""

    def __init__(
        self,
        manager: ConsumerGroupManager,
        downgrade_replacing: ReplacementDowngrade | None = None,
    ) -> None:
        """`downgrade_replacing` converts a group back into a classic group when a classic
        static member takes the place of its last consumer-protocol member (None: no group
        is, whatever the migration policy)."""
        self._manager = manager
        self._downgrade_replacing = downgrade_replacing

    # JoinGroup.

    def join_group(
        self,
        group: ConsumerGroup,
        request: JoinGroupRequest,
        *,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
        now_ms: int,
    ) -> CoordinatorResult[JoinGroupResponse]:
        """A classic member joins or rejoins: the records of its change, and the answer to
        give once they are committed."""
        manager = self._manager
        group_id = group.group_id
        unknown = not request.member_id
        member_id = str(uuid.uuid4()) if unknown else request.member_id
        try:
            max_size = min(manager.max_size, manager.config.max_size)
            if group.num_members() >= max_size and (unknown or group.member(member_id) is None):
                raise GroupMaxSizeReachedError(
                    f"The consumer group has reached its maximum capacity of {max_size} members."
                )
            protocols = [(protocol.name, protocol.metadata) for protocol in request.protocols]
            if not group.supports_classic_protocols(
                request.protocol_type, [name for name, _ in protocols]
            ):
                raise InconsistentGroupProtocolError(
                    f"Member {member_id}'s protocols are not supported."
                )
            if unknown and request.group_instance_id is None:
                # KIP-394: the member comes back with its id, so that a JoinGroup retried
                # after a timeout leaves no member behind.
                return CoordinatorResult(
                    response=JoinGroupResponse(
                        error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id
                    )
                )
            try:
                subscription = parse_subscription(protocols)
            except MigrationError as error:
                raise UnknownServerError(
                    f"Malformed embedded consumer protocol in subscription: {error}."
                ) from error
            records: list[CoordinatorRecord] = []
            member, replaced_member_id = self._member_of_join(
                group, request, member_id, unknown, records
            )
            rebalance_timeout_ms = request.rebalance_timeout_ms
            if rebalance_timeout_ms == -1:
                # JoinGroup v0's rule: the rebalance timeout is the session timeout.
                rebalance_timeout_ms = request.session_timeout_ms
            updated = member.maybe_update(
                instance_id=request.group_instance_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=subscription.topics,
            ).replace(
                client_id=client_id,
                client_host=client_host,
                classic_member_metadata=classic_member_metadata(
                    request.session_timeout_ms, protocols
                ),
            )
            reconciled, _ = manager.apply_member(
                group,
                member,
                updated,
                replaced_member_id,
                partitions_by_id(subscription.owned_partitions, topics),
                topics,
                now_ms,
                records,
                # Kafka resolves a group's regular expressions for its consumer members'
                # heartbeats only, each with that member's permissions.
                denied_topics=None,
            )
        except ApiError as error:
            return CoordinatorResult(
                response=JoinGroupResponse(
                    error_code=error.code,
                    error_message=error.message,
                    member_id=request.member_id,
                )
            )
        downgraded = self._maybe_downgrade_replacing(group, replaced_member_id, reconciled, now_ms)
        if downgraded is not None:
            assert not isinstance(downgraded.records, RecordRun), "group writes are records"
            # The member goes on in the classic group, whose generation its SyncGroup and
            # Heartbeat are checked against: that is the one it is told.
            return CoordinatorResult(
                [*records, *downgraded.records],
                JoinGroupResponse(
                    member_id=member_id,
                    generation_id=group.group_epoch(),
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocol_name=protocols[0][0],
                ),
                updates=downgraded.updates,
            )
        timeouts = manager.timeouts
        if replaced_member_id is not None:
            timeouts.cancel(group_id, replaced_member_id)
        timeouts.cancel_join(group_id, member_id)
        timeouts.session(group_id, member_id, request.session_timeout_ms)
        timeouts.sync(group_id, member_id, rebalance_timeout_ms)
        return CoordinatorResult(
            records,
            JoinGroupResponse(
                member_id=member_id,
                generation_id=reconciled.member_epoch,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=protocols[0][0],
            ),
        )

    def _maybe_downgrade_replacing(
        self,
        group: ConsumerGroup,
        replaced_member_id: str | None,
        joining: ConsumerGroupMember,
        now_ms: int,
    ) -> CoordinatorResult[None] | None:
        """The group converted to a classic group when the static member `joining` took the
        place of its last member on the consumer protocol and the migration policy allows it
        (Kafka's `validateOnlineDowngradeWithReplacedMember`, then `convertToClassicGroup`);
        None when it stays a consumer group."""
        downgrade = self._downgrade_replacing
        replaced = None if replaced_member_id is None else group.member(replaced_member_id)
        manager = self._manager
        if (
            downgrade is None
            or replaced is None
            or not downgrade_allowed_with_replaced_member(
                group, replaced, manager.config.migration_policy, manager.max_size
            )
        ):
            return None
        return downgrade(group, replaced, joining, now_ms)

    def _member_of_join(
        self,
        group: ConsumerGroup,
        request: JoinGroupRequest,
        member_id: str,
        unknown: bool,
        records: list[CoordinatorRecord],
    ) -> tuple[ConsumerGroupMember, str | None]:
        """The member the JoinGroup is from, created when new, and the member id of the
        static member it replaces, if any (Kafka's `getOrMaybeSubscribe{Dynamic,Static}
        ConsumerGroupMember` for the classic protocol: a static member's instance is taken
        over at once, whatever the member that held it)."""
        instance_id = request.group_instance_id
        if instance_id is None:
            return group.member(member_id) or ConsumerGroupMember(member_id), None
        static_member_id = group.static_member_id(instance_id)
        static = None if static_member_id is None else group.member(static_member_id)
        if not unknown:
            if static is None:
                raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
            if static.member_id != member_id:
                raise FencedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} was fenced by "
                    f"member {static.member_id}."
                )
            return static, None
        if static is None:
            return ConsumerGroupMember(member_id), None
        # The instance comes back under the new member id, in its departed self's place.
        member = replace_member(
            group.group_id,
            static,
            member_id,
            group.target_assignment(static.member_id),
            records,
        )
        return member, static.member_id

    # SyncGroup.

    def sync_group(
        self, group: ConsumerGroup, request: SyncGroupRequest, topics: ClusterTopics
    ) -> CoordinatorResult[SyncGroupResponse]:
        """A classic member collects its assignment: what it is assigned now, in the
        embedded protocol. Writes nothing: the answer waits for the writes before it."""
        try:
            member = _validated_member(group, request.member_id, request.group_instance_id)
            _check_generation(member, request.generation_id)
            protocol_name = _protocol_name(member)
            protocol_type = request.protocol_type
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise InconsistentGroupProtocolError(
                    f"The protocol type {protocol_type} from member {member.member_id} "
                    f"request is not equal to the group protocol type {CONSUMER_PROTOCOL_TYPE}."
                )
            if request.protocol_name is not None and request.protocol_name != protocol_name:
                raise InconsistentGroupProtocolError(
                    f"The protocol name {request.protocol_name} from member {member.member_id} "
                    f"request is not equal to the protocol name {protocol_name} returned in "
                    "the join response."
                )
            # A rejoin would move it on: told now, rather than after it started consuming.
            if self._must_rejoin(group, member, waiting_counts=False):
                raise RebalanceInProgressError(
                    f"A new rebalance is triggered in group {group.group_id} and member "
                    f"{member.member_id} should rejoin to catch up."
                )
        except ApiError as error:
            return CoordinatorResult(
                response=SyncGroupResponse(error_code=error.code, error_message=error.message)
            )
        timeouts = self._manager.timeouts
        timeouts.cancel_sync(group.group_id, member.member_id)
        timeouts.session(group.group_id, member.member_id, _session_timeout_ms(member))
        return CoordinatorResult(
            response=SyncGroupResponse(
                protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
                assignment=assignment_bytes(member.assigned_partitions, topics),
            )
        )

    # Heartbeat.

    def heartbeat(
        self, group: ConsumerGroup, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        """A classic member's heartbeat: its session kept, REBALANCE_IN_PROGRESS when it
        should rejoin."""
        try:
            member = _validated_member(group, request.member_id, request.group_instance_id)
            _check_generation(member, request.generation_id)
        except ApiError as error:
            return CoordinatorResult(
                response=HeartbeatResponse(error_code=error.code, error_message=error.message)
            )
        self._manager.timeouts.session(
            group.group_id, member.member_id, _session_timeout_ms(member)
        )
        if self._must_rejoin(group, member, waiting_counts=True):
            return CoordinatorResult(
                response=HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
            )
        return CoordinatorResult(response=HeartbeatResponse())

    def _must_rejoin(
        self, group: ConsumerGroup, member: ConsumerGroupMember, *, waiting_counts: bool
    ) -> bool:
        """Whether the member should rejoin now (and from now on has its rebalance timeout
        to): a newer target than its epoch (unless it is still giving partitions up, which
        its next JoinGroup says it has done), partitions to give up, or, at a heartbeat
        (`waiting_counts`), partitions it waited for that nobody holds any more."""
        state = member.state
        if waiting_counts:
            rejoin = (
                member.member_epoch < group.target_assignment_epoch()
                or state is ReconciliationState.UNREVOKED_PARTITIONS
                or (
                    state is ReconciliationState.UNRELEASED_PARTITIONS
                    and not _waiting_on_unreleased_partition(group, member)
                )
            )
        else:
            rejoin = (
                member.member_epoch < group.target_assignment_epoch()
                and state is not ReconciliationState.UNREVOKED_PARTITIONS
            )
        if rejoin:
            self._manager.timeouts.join(
                group.group_id, member.member_id, member.rebalance_timeout_ms
            )
        return rejoin

    # LeaveGroup.

    def leave_group(
        self, group: ConsumerGroup, request: LeaveGroupRequest, topics: ClusterTopics, now_ms: int
    ) -> CoordinatorResult[LeaveGroupResponse]:
        """The named members leave (by member id, or by instance id alone for an admin's
        removal of a static member): each is answered, and those found are fenced together
        (Kafka's `consumerGroupFenceMembers`)."""
        answers: list[LeaveGroupResponseMember] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for identity in request.members:
            instance_id = identity.group_instance_id
            try:
                if instance_id is None:
                    member = group.member(identity.member_id)
                    if member is None:
                        raise UnknownMemberIdError(
                            f"Member {identity.member_id} is not a member of group "
                            f"{group.group_id}."
                        )
                else:
                    member = _static_member(group, instance_id)
                    if identity.member_id and member.member_id != identity.member_id:
                        raise _fenced_instance(group, identity.member_id, instance_id, member)
            except ApiError as error:
                answers.append(
                    LeaveGroupResponseMember(
                        member_id=identity.member_id,
                        group_instance_id=instance_id,
                        error_code=error.code,
                    )
                )
                continue
            answers.append(
                LeaveGroupResponseMember(
                    member_id=identity.member_id, group_instance_id=instance_id
                )
            )
            leaving[member.member_id] = member
        response = LeaveGroupResponse(members=answers)
        if not leaving:
            return CoordinatorResult(response=response)
        fenced = self._fence(group, list(leaving.values()), topics, now_ms)
        return CoordinatorResult(fenced.records, response, updates=fenced.updates)

    def _fence(
        self,
        group: ConsumerGroup,
        leaving: Sequence[ConsumerGroupMember],
        topics: ClusterTopics,
        now_ms: int,
    ) -> CoordinatorResult[None]:
        """The members removed and the group's epoch bumped, its next target left to the
        deferred computation (Kafka's `consumerGroupFenceMembers`, which computes none
        either); or the group downgraded when only classic members stay."""
        manager = self._manager
        downgraded = manager.maybe_downgrade(group, leaving, now_ms)
        if downgraded is not None:
            return downgraded
        group_id = group.group_id
        timeouts = manager.timeouts
        records: list[CoordinatorRecord] = []
        for member in leaving:
            records.extend(member_removal_records(group_id, member.member_id))
            timeouts.cancel(group_id, member.member_id)
        records.extend(unused_regex_tombstones(group, leaving))
        records.append(
            new_consumer_group_metadata_record(
                group_id,
                ConsumerGroupMetadataValue(
                    group.group_epoch() + 1,
                    subscribed_topics_hash(subscribed_names_without(group, leaving), topics),
                ),
            )
        )
        if group.num_members() > len(leaving):
            interval_ms = manager.config.assignment_interval_ms
            timeouts.assignment(group_id, group.assignment_timestamp_ms() + interval_ms - now_ms)
        return CoordinatorResult(records)


def _validated_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerGroupMember:
    """The classic member a SyncGroup or Heartbeat is from (Kafka's
    `validateConsumerGroupMember`, then `throwIfMemberDoesNotUseClassicProtocol`)."""
    if instance_id is None:
        member = group.member(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}."
            )
    else:
        member = _static_member(group, instance_id)
        if member.member_id != member_id:
            raise _fenced_instance(group, member_id, instance_id, member)
    if not member.use_classic_protocol:
        raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
    return member


def _static_member(group: ConsumerGroup, instance_id: str) -> ConsumerGroupMember:
    member_id = group.static_member_id(instance_id)
    member = None if member_id is None else group.member(member_id)
    if member is None:
        raise UnknownMemberIdError(
            f"Member with instance id {instance_id} is not a member of group {group.group_id}."
        )
    return member


def _fenced_instance(
    group: ConsumerGroup, member_id: str, instance_id: str, static: ConsumerGroupMember
) -> FencedInstanceIdError:
    return FencedInstanceIdError(
        f"Static member {member_id} with instance id {instance_id} was fenced by member "
        f"{static.member_id} of group {group.group_id}."
    )


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    if generation_id != member.member_epoch:
        raise IllegalGenerationError(
            f"The request generation id {generation_id} is not equal to the member epoch "
            f"{member.member_epoch} of member {member.member_id}."
        )


def _protocol_name(member: ConsumerGroupMember) -> str:
    """The protocol a classic member was answered at its JoinGroup: its first."""
    classic = member.classic_member_metadata
    assert classic is not None and classic.supported_protocols, "a classic member has protocols"
    return classic.supported_protocols[0].name


def _session_timeout_ms(member: ConsumerGroupMember) -> int:
    classic = member.classic_member_metadata
    assert classic is not None, "a classic member"
    return classic.session_timeout_ms


def _waiting_on_unreleased_partition(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Whether a partition of the member's target that it lacks is still held by another
    member (Kafka's `waitingOnUnreleasedPartition`)."""
    for topic_id, partitions in group.target_assignment(member.member_id).items():
        assigned = member.assigned_partitions.get(topic_id, frozenset())
        for partition in partitions - assigned:
            if group.current_partition_epoch(topic_id, partition) != NO_OWNER_EPOCH:
                return True
    return False


__all__ = ["ClassicMembers"]
