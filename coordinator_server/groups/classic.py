"""The classic group protocol's group and member, as immutable snapshots.

Kafka's `ClassicGroup` and `ClassicGroupMember` are mutable objects changed in place by the
request handlers. Here a group is a frozen value: every change returns a new snapshot (the
member map is copied when it changes), so a handler can build the next state without
touching the current one, and the shard stores snapshots in a timeline collection that a
failed append reverts. The methods mirror Kafka's, with the same names where the concept is
the same; the ones that change something return the new group instead.

Parked callers (a JoinGroup waiting for the join phase to end, a SyncGroup waiting for the
leader's assignment) are kept as `ResponseHandle`s in the member they belong to.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from coordinator_protocol.consumer import ConsumerProtocolSubscription, InvalidConsumerProtocolError
from coordinator_protocol.errors import (
    ApiError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator_protocol.messages import JoinGroupResponseMember
from coordinator_server.groups.answer_sizes import join_member_bytes, utf8_length
from coordinator_server.records import GroupMemberValue, GroupMetadataValue, OffsetCommitValue
from coordinator_server.runtime.api import ResponseHandle

CONSUMER_PROTOCOL_TYPE = "consumer"

ProtocolMetadata = tuple[str, bytes]
"""One protocol a member supports: its name (the assignor) and the member's metadata for it."""


class ClassicGroupState(StrEnum):
    """A classic group's state; the values are Kafka's display names."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def lower_name(self) -> str:
        """The form ListGroups' states filter is compared with ("preparingrebalance", ...)."""
        return _LOWER_NAMES[self]

    @property
    def valid_previous_states(self) -> frozenset[ClassicGroupState]:
        return _VALID_PREVIOUS_STATES[self]


_LOWER_NAMES = {state: state.value.lower() for state in ClassicGroupState}

_VALID_PREVIOUS_STATES: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {
            ClassicGroupState.STABLE,
            ClassicGroupState.COMPLETING_REBALANCE,
            ClassicGroupState.EMPTY,
        }
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(ClassicGroupState),
}


@dataclass(frozen=True, slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # By the member's preference, first is preferred.
    protocols: tuple[ProtocolMetadata, ...]
    assignment: bytes = b""
    # The member's parked JoinGroup (join phase) and SyncGroup (waiting for the leader).
    join_handle: ResponseHandle | None = None
    sync_handle: ResponseHandle | None = None
    # Added during the current join phase: governed by the new-member join timeout, not by
    # its session timeout, until the phase ends.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_handle is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_handle is not None

    def has_satisfied_heartbeat(self) -> bool:
        """An existing member with a parked JoinGroup or SyncGroup is alive by definition;
        a new one can still expire while its JoinGroup is parked."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def join_answer_bytes(self) -> int:
        """What this member adds to the leader's JoinGroup answer: its ids and, the protocol
        not being selected yet, the largest of its metadata."""
        metadata = max((len(metadata) for _, metadata in self.protocols), default=0)
        return join_member_bytes(utf8_length(self.member_id), self.group_instance_id, metadata)

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name!r}")

    def matches(self, protocols: tuple[ProtocolMetadata, ...]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: Iterable[str]) -> str:
        """The first protocol of this member's preference that is a candidate."""
        allowed = set(candidates)
        for name, _ in self.protocols:
            if name in allowed:
                return name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols")


@dataclass(frozen=True, slots=True)
class OffsetExpirationCondition:
    """When an offset of a group expires (Kafka's OffsetExpirationConditionImpl).

    `base_timestamp_ms` is the time retention counts from: the time the group became Empty,
    or None for the commit time of each offset.
    """

    base_timestamp_ms: int | None = None

    def base_of(self, offset: OffsetCommitValue) -> int:
        if self.base_timestamp_ms is None:
            return offset.commit_timestamp_ms
        return self.base_timestamp_ms

    def is_offset_expired(
        self, offset: OffsetCommitValue, now_ms: int, offsets_retention_ms: int
    ) -> bool:
        if offset.expire_timestamp_ms is not None:
            # An explicit expire timestamp (per-request retention of old clients) wins.
            return now_ms >= offset.expire_timestamp_ms
        return now_ms - self.base_of(offset) >= offsets_retention_ms


def compute_subscribed_topics(
    protocol_type: str | None,
    protocol_name: str | None,
    members: Iterable[ClassicGroupMember],
) -> frozenset[str] | None:
    """The topics a "consumer" group's members subscribe to, or None when unknown: another
    protocol type, no protocol selected yet, or a subscription that does not parse."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    topics: set[str] = set()
    any_member = False
    for member in members:
        any_member = True
        if protocol_name is None:
            return None
        try:
            topics.update(
                ConsumerProtocolSubscription.decode(member.metadata(protocol_name)).topics
            )
        except (InvalidConsumerProtocolError, ValueError):
            return None
    if not any_member:
        return frozenset()
    return frozenset(topics)


@dataclass(frozen=True, slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicGroupState
    # When the group entered its state; None when a loaded record did not say.
    current_state_timestamp_ms: int | None
    previous_state: ClassicGroupState = ClassicGroupState.DEAD
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # Insertion-ordered; never mutated once the snapshot exists.
    members: Mapping[str, ClassicGroupMember] = field(default_factory=dict)
    # group instance id -> member id.
    static_members: Mapping[str, str] = field(default_factory=dict)
    # Dynamic members given an id with MEMBER_ID_REQUIRED that have not joined with it yet.
    pending_join_members: frozenset[str] = frozenset()
    # Members of the current generation that have not sent their SyncGroup yet.
    pending_sync_members: frozenset[str] = frozenset()
    # A member joined during the initial rebalance delay, which may then be extended.
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    # When the current (or last) rebalance started, for the rebalance duration metric.
    rebalance_started_ms: int | None = None
    # Protocol name -> how many members support it: derived from `members`, computed on first
    # use and carried over by the changes that add, remove or replace one member, so that the
    # N-th member's join costs O(its protocols), not O(N) (a join of 1,000 members at once
    # would otherwise be quadratic). None: not computed yet. Never mutated once set.
    protocol_counts_cache: dict[str, int] | None = field(default=None, compare=False, repr=False)
    # The members' `join_answer_bytes` summed: derived from `members` and carried over the
    # same way, so that checking a join against the largest answer costs O(1).
    join_answer_bytes_cache: int | None = field(default=None, compare=False, repr=False)
    # How many members hold a JoinGroup answer still to come (Kafka's
    # numMembersAwaitingJoinResponse), carried over the same way: every join asks whether all
    # members have joined, which would otherwise be a scan of the members each time.
    awaiting_join_count_cache: int | None = field(default=None, compare=False, repr=False)

    @classmethod
    def create(cls, group_id: str, now_ms: int) -> ClassicGroup:
        """A new group: Empty, generation 0, no protocol type (a simple group until a
        member joins)."""
        return cls(group_id, ClassicGroupState.EMPTY, now_ms)

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group a GroupMetadata record describes, as Kafka loads it: Stable with
        members, Empty without; each member supports only the selected protocol."""
        protocol_type = value.protocol_type or None
        members: dict[str, ClassicGroupMember] = {}
        static_members: dict[str, str] = {}
        for stored in value.members:
            rebalance_timeout_ms = (
                stored.session_timeout_ms
                if stored.rebalance_timeout_ms == -1
                else stored.rebalance_timeout_ms
            )
            protocols: tuple[ProtocolMetadata, ...] = (
                () if value.protocol_name is None else ((value.protocol_name, stored.subscription),)
            )
            members[stored.member_id] = ClassicGroupMember(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=stored.assignment,
            )
            if stored.group_instance_id is not None:
                static_members[stored.group_instance_id] = stored.member_id
        leader_id = value.leader
        if leader_id is None and members:
            leader_id = next(iter(members))
        return cls(
            group_id=group_id,
            state=ClassicGroupState.STABLE if members else ClassicGroupState.EMPTY,
            current_state_timestamp_ms=(
                None if value.current_state_timestamp_ms == -1 else value.current_state_timestamp_ms
            ),
            generation_id=value.generation,
            protocol_type=protocol_type,
            protocol_name=value.protocol_name,
            leader_id=leader_id,
            members=members,
            static_members=static_members,
            subscribed_topics=compute_subscribed_topics(
                protocol_type, value.protocol_name, members.values()
            ),
        )

    def to_record_value(self) -> GroupMetadataValue:
        """The GroupMetadata record of this group: every member with its subscription for
        the selected protocol and its assignment."""
        protocol_name = self.protocol_name
        members = tuple(
            GroupMemberValue(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.session_timeout_ms,
                subscription=b"" if protocol_name is None else member.metadata(protocol_name),
                assignment=member.assignment,
            )
            for member in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol_name=protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.current_state_timestamp_or_default(),
            members=members,
        )

    # Queries.

    def is_in_state(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def current_state_timestamp_or_default(self) -> int:
        return -1 if self.current_state_timestamp_ms is None else self.current_state_timestamp_ms

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def num_members(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def has_static_member(self, group_instance_id: str) -> bool:
        return group_instance_id in self.static_members

    def num_awaiting_join_response(self) -> int:
        count = self.awaiting_join_count_cache
        if count is None:
            count = sum(1 for member in self.members.values() if member.join_handle is not None)
            # A cache of a value derived from immutable fields, like the protocol counts.
            object.__setattr__(self, "awaiting_join_count_cache", count)
        return count

    def _awaiting_with(
        self, added: Iterable[ClassicGroupMember], removed: Iterable[ClassicGroupMember]
    ) -> int | None:
        count = self.awaiting_join_count_cache
        if count is None:
            return None
        return (
            count
            + sum(1 for member in added if member.join_handle is not None)
            - sum(1 for member in removed if member.join_handle is not None)
        )

    def has_all_members_joined(self) -> bool:
        return (
            len(self.members) == self.num_awaiting_join_response() and not self.pending_join_members
        )

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in ClassicGroupState.PREPARING_REBALANCE.valid_previous_states

    def uses_consumer_group_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def _protocol_counts(self) -> dict[str, int]:
        counts = self.protocol_counts_cache
        if counts is None:
            counts = {}
            for member in self.members.values():
                for name in member.protocol_names():
                    counts[name] = counts.get(name, 0) + 1
            # A cache of a value derived from immutable fields: setting it changes nothing
            # anyone can observe.
            object.__setattr__(self, "protocol_counts_cache", counts)
        return counts

    def _counts_with(
        self, added: Iterable[ClassicGroupMember], removed: Iterable[ClassicGroupMember]
    ) -> dict[str, int] | None:
        """The protocol counts after a change of a few members (None: compute them later)."""
        counts = self.protocol_counts_cache
        if counts is None:
            return None
        counts = dict(counts)
        for member in removed:
            for name in member.protocol_names():
                left = counts[name] - 1
                if left:
                    counts[name] = left
                else:
                    del counts[name]
        for member in added:
            for name in member.protocol_names():
                counts[name] = counts.get(name, 0) + 1
        return counts

    def join_answer_members_bytes(self) -> int:
        """The members' part of the leader's JoinGroup answer, at most (see
        `ClassicGroupMember.join_answer_bytes`)."""
        total = self.join_answer_bytes_cache
        if total is None:
            total = sum(member.join_answer_bytes() for member in self.members.values())
            # A cache of a value derived from immutable fields, like the protocol counts.
            object.__setattr__(self, "join_answer_bytes_cache", total)
        return total

    def _join_bytes_with(
        self, added: Iterable[ClassicGroupMember], removed: Iterable[ClassicGroupMember]
    ) -> int | None:
        total = self.join_answer_bytes_cache
        if total is None:
            return None
        return (
            total
            + sum(member.join_answer_bytes() for member in added)
            - sum(member.join_answer_bytes() for member in removed)
        )

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        size = len(self.members)
        return {name for name, count in self._protocol_counts().items() if count == size}

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        """Whether a member with these protocols can be in the group: an Empty group takes
        any non-empty protocol type and list; otherwise the type must be the group's and at
        least one protocol must be supported by every current member."""
        if self.state is ClassicGroupState.EMPTY:
            return bool(member_protocol_type) and bool(member_protocols)
        if self.protocol_type != member_protocol_type:
            return False
        counts = self._protocol_counts()
        size = len(self.members)
        return any(counts.get(name, 0) == size for name in member_protocols)

    def select_protocol(self) -> str:
        """Each member votes for its preferred candidate; the most votes win (ties go to the
        protocol voted for first, so the choice is deterministic)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(member.vote(candidates) for member in self.members.values())
        return max(votes, key=lambda name: votes[name])

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Whether a member subscribes to `topic`; when the subscriptions are unknown a
        "consumer" group counts as subscribed to every topic, any other group to none."""
        if self.subscribed_topics is None:
            return self.uses_consumer_group_protocol()
        return topic in self.subscribed_topics

    def offset_expiration_condition(self) -> OffsetExpirationCondition | None:
        """How this group's offsets expire, or None when they do not (Kafka's rules)."""
        if self.protocol_type is None:
            # A simple group: offsets expire a retention period after their commit.
            return OffsetExpirationCondition()
        if self.state is ClassicGroupState.EMPTY:
            # Retention counts from the time the group became Empty (from the commit when
            # the record did not say when that was).
            return OffsetExpirationCondition(self.current_state_timestamp_ms)
        if (
            self.uses_consumer_group_protocol()
            and self.subscribed_topics is not None
            and self.state is ClassicGroupState.STABLE
        ):
            # Only offsets of topics nobody subscribes to, from their commit.
            return OffsetExpirationCondition()
        return None

    def current_members_for_join(self) -> list[JoinGroupResponseMember]:
        """The member list the leader receives: each member's metadata for the selected
        protocol."""
        protocol_name = self.protocol_name
        assert protocol_name is not None, "a group with members has a protocol"
        return [
            JoinGroupResponseMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                metadata=member.metadata(protocol_name),
            )
            for member in self.members.values()
        ]

    # Validation (None when the request may go on).

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ApiError | None:
        """A static member's instance id must map to this member id; the member must exist."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return UnknownMemberIdError(
                    f"instance {group_instance_id} is not a member of group {self.group_id}"
                )
            if existing != member_id:
                return FencedInstanceIdError(
                    f"instance {group_instance_id} of group {self.group_id} is held by "
                    f"member {existing}, not {member_id}"
                )
        if member_id not in self.members:
            return UnknownMemberIdError(f"member {member_id} is not in group {self.group_id}")
        return None

    def validate_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ApiError | None:
        if self.state is ClassicGroupState.DEAD:
            return CoordinatorNotAvailableError(f"group {self.group_id} is dead")
        if generation_id < 0 and self.state is ClassicGroupState.EMPTY:
            # An admin client or a consumer that assigns partitions itself: allowed while
            # the group has no members.
            return None
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return IllegalGenerationError(
                    f"generation {generation_id} is not group {self.group_id}'s "
                    f"generation {self.generation_id}"
                )
        elif self.state is not ClassicGroupState.EMPTY:
            return UnknownMemberIdError(
                f"a commit without member id to group {self.group_id}, which has members"
            )
        if self.state is ClassicGroupState.COMPLETING_REBALANCE:
            # The member knows the new generation from its JoinGroup answer but has no
            # assignment yet: let it finish the rebalance first.
            return RebalanceInProgressError(f"group {self.group_id} is completing a rebalance")
        return None

    def validate_offset_delete(self) -> ApiError | None:
        if self.state is ClassicGroupState.DEAD:
            return GroupIdNotFoundError(f"group {self.group_id} is dead")
        if self.state is not ClassicGroupState.EMPTY and not self.uses_consumer_group_protocol():
            return NonEmptyGroupError(f"group {self.group_id} has members")
        return None

    def validate_delete_group(self) -> ApiError | None:
        if self.state is ClassicGroupState.DEAD:
            return GroupIdNotFoundError(f"group {self.group_id} is dead")
        if self.state is not ClassicGroupState.EMPTY:
            return NonEmptyGroupError(f"group {self.group_id} has members")
        return None

    # Changes: each returns the new snapshot.

    def _replace(self, **changes: object) -> ClassicGroup:
        # The caches derived from the members carry over unless the members change without
        # the change saying what they become.
        for cache in (
            "protocol_counts_cache",
            "join_answer_bytes_cache",
            "awaiting_join_count_cache",
        ):
            if "members" not in changes:
                changes[cache] = getattr(self, cache)
            elif cache not in changes:
                changes[cache] = None
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def transition_to(self, state: ClassicGroupState, now_ms: int) -> ClassicGroup:
        if self.state not in state.valid_previous_states:
            raise ValueError(
                f"group {self.group_id} cannot go from {self.state.value} to {state.value}"
            )
        rebalance_started_ms = self.rebalance_started_ms
        if state is ClassicGroupState.PREPARING_REBALANCE:
            rebalance_started_ms = now_ms
        return self._replace(
            state=state,
            previous_state=self.state,
            current_state_timestamp_ms=now_ms,
            rebalance_started_ms=rebalance_started_ms,
        )

    def with_new_member_added(self, value: bool) -> ClassicGroup:
        if self.new_member_added is value:
            return self
        return self._replace(new_member_added=value)

    def add_member(self, member: ClassicGroupMember) -> ClassicGroup:
        """Kafka's `add`: the first member sets the protocol type and becomes leader."""
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members, (
                f"instance {member.group_instance_id} is already in group {self.group_id}"
            )
        protocol_type = member.protocol_type if not self.members else self.protocol_type
        assert protocol_type == member.protocol_type, "the member's protocol type is the group's"
        members = dict(self.members)
        members[member.member_id] = member
        static_members = self.static_members
        if member.group_instance_id is not None:
            static_members = {**static_members, member.group_instance_id: member.member_id}
        replaced = self.members.get(member.member_id)
        return self._replace(
            protocol_type=protocol_type,
            leader_id=self.leader_id if self.leader_id is not None else member.member_id,
            members=members,
            static_members=static_members,
            pending_join_members=self.pending_join_members - {member.member_id},
            protocol_counts_cache=self._counts_with(
                (member,), () if replaced is None else (replaced,)
            ),
            join_answer_bytes_cache=self._join_bytes_with(
                (member,), () if replaced is None else (replaced,)
            ),
            awaiting_join_count_cache=self._awaiting_with(
                (member,), () if replaced is None else (replaced,)
            ),
        )

    def remove_members(self, member_ids: Iterable[str]) -> ClassicGroup:
        """Kafka's `remove` for each id: members, pending members and pending syncs; a
        removed leader is replaced by the first remaining member."""
        ids = set(member_ids)
        if not ids:
            return self
        members = {mid: m for mid, m in self.members.items() if mid not in ids}
        static_members: Mapping[str, str] = self.static_members
        removed_static = [
            m.group_instance_id
            for mid, m in self.members.items()
            if mid in ids and m.group_instance_id is not None
        ]
        if removed_static:
            static_members = {
                instance: mid
                for instance, mid in self.static_members.items()
                if instance not in removed_static
            }
        leader_id = self.leader_id
        if leader_id is not None and leader_id in ids:
            leader_id = next(iter(members), None)
        removed = [m for mid, m in self.members.items() if mid in ids]
        return self._replace(
            members=members,
            static_members=static_members,
            leader_id=leader_id,
            pending_join_members=self.pending_join_members - ids,
            pending_sync_members=self.pending_sync_members - ids,
            protocol_counts_cache=self._counts_with((), removed),
            join_answer_bytes_cache=self._join_bytes_with((), removed),
            awaiting_join_count_cache=self._awaiting_with((), removed),
        )

    def remove_member(self, member_id: str) -> ClassicGroup:
        if (
            member_id not in self.members
            and member_id not in self.pending_join_members
            and member_id not in self.pending_sync_members
        ):
            return self
        return self.remove_members((member_id,))

    def update_member(self, member: ClassicGroupMember) -> ClassicGroup:
        """Put a changed member in place of the one with its id, keeping the order."""
        previous = self.members[member.member_id]
        members = dict(self.members)
        members[member.member_id] = member
        if previous.protocols == member.protocols:
            counts = self.protocol_counts_cache
            join_bytes = self.join_answer_bytes_cache
        else:
            counts = self._counts_with((member,), (previous,))
            join_bytes = self._join_bytes_with((member,), (previous,))
        return self._replace(
            members=members,
            protocol_counts_cache=counts,
            join_answer_bytes_cache=join_bytes,
            awaiting_join_count_cache=self._awaiting_with((member,), (previous,)),
        )

    def update_members(
        self, change: Callable[[ClassicGroupMember], ClassicGroupMember]
    ) -> ClassicGroup:
        """Apply `change` to every member at once."""
        return self._replace(members={mid: change(m) for mid, m in self.members.items()})

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member: ClassicGroupMember
    ) -> ClassicGroup:
        """The instance's member id changes to `new_member`'s; leadership follows."""
        assert self.static_members.get(group_instance_id) == old_member_id
        members = {mid: m for mid, m in self.members.items() if mid != old_member_id}
        members[new_member.member_id] = new_member
        return self._replace(
            protocol_counts_cache=self._counts_with((new_member,), (self.members[old_member_id],)),
            join_answer_bytes_cache=self._join_bytes_with(
                (new_member,), (self.members[old_member_id],)
            ),
            awaiting_join_count_cache=self._awaiting_with(
                (new_member,), (self.members[old_member_id],)
            ),
            members=members,
            static_members={**self.static_members, group_instance_id: new_member.member_id},
            leader_id=new_member.member_id if self.is_leader(old_member_id) else self.leader_id,
        )

    def add_pending_member(self, member_id: str) -> ClassicGroup:
        assert member_id not in self.members
        return self._replace(pending_join_members=self.pending_join_members | {member_id})

    def with_pending_sync_members(self, member_ids: frozenset[str]) -> ClassicGroup:
        if member_ids == self.pending_sync_members:
            return self
        return self._replace(pending_sync_members=member_ids)

    def maybe_elect_new_joined_leader(self) -> tuple[ClassicGroup, bool]:
        """Keep a leader that rejoined, else pick any rejoined member. False when the group
        has no leader or nobody rejoined."""
        if self.leader_id is None:
            return self, False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return self, True
        for member in self.members.values():
            if member.is_awaiting_join:
                return self._replace(leader_id=member.member_id), True
        return self, False

    def init_next_generation(self, now_ms: int) -> ClassicGroup:
        """Bump the generation; select the protocol and go CompletingRebalance, or Empty
        when no member is left."""
        if self.members:
            protocol_name: str | None = self.select_protocol()
            state = ClassicGroupState.COMPLETING_REBALANCE
        else:
            protocol_name = None
            state = ClassicGroupState.EMPTY
        group = self._replace(
            generation_id=self.generation_id + 1,
            protocol_name=protocol_name,
            subscribed_topics=compute_subscribed_topics(
                self.protocol_type, protocol_name, self.members.values()
            ),
            pending_sync_members=frozenset(),
        )
        return group.transition_to(state, now_ms)

    def persisted_view(self) -> tuple[object, ...]:
        """What a GroupMetadata record of this group keeps, for comparisons: state (as
        loading shows it), generation, protocol type and name, leader, and each member with
        its subscription and assignment."""
        protocol_name = self.protocol_name
        return (
            self.group_id,
            ClassicGroupState.STABLE if self.members else ClassicGroupState.EMPTY,
            self.generation_id,
            self.protocol_type,
            protocol_name,
            self.leader_id,
            tuple(
                (
                    m.member_id,
                    m.group_instance_id,
                    b"" if protocol_name is None else m.metadata(protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )
