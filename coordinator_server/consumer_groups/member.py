"""A member of a consumer group (KIP-848) and where it stands in its reconciliation.

A member is a value: every change makes a new member, so that the group can compare the
member before and after a heartbeat and write a record only for what changed, and so that a
member replayed from the log is equal to the member that was written. Its fields are Kafka's
(`ConsumerGroupMember`), with Kafka's defaults for a member that has just been created.

Partitions are kept as `TopicPartitions`: topic id to a frozenset of partition indexes, topics
without partitions left out, so that two members with the same partitions compare equal
however their partitions were given.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions
from coordinator_server.records.consumer_groups import ClassicMemberMetadata


class ReconciliationState(enum.Enum):
    """Where a member stands between its current and its target assignment (Kafka's
    MemberState; named for what it says, the client library having a MemberState of its own).

    The values are Kafka's, as the current member assignment record stores them.
    """

    STABLE = 0
    """The member owns its whole target assignment, at the target's epoch."""

    UNREVOKED_PARTITIONS = 1
    """The member must give up partitions before it may move to the target's epoch."""

    UNRELEASED_PARTITIONS = 2
    """The member is at the target's epoch but waits for partitions others still own."""

    UNKNOWN = 127
    """A state written by a newer coordinator: the member is fenced and starts over."""

    @classmethod
    def from_value(cls, value: int) -> ReconciliationState:
        """The state stored as `value`; UNKNOWN for a value this version does not know."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


EMPTY_TOPIC_PARTITIONS: TopicPartitions = MappingProxyType({})


def topic_partitions(partitions: Mapping[TopicId, Iterable[int]]) -> TopicPartitions:
    """`partitions` in the members' normal form: read-only, frozensets, no empty topic."""
    return MappingProxyType(
        {topic: indexes for topic, given in partitions.items() if (indexes := frozenset(given))}
    )


@dataclass(frozen=True)
class ConsumerGroupMember:
    """One member of a consumer group, as the group's records describe it.

    `member_epoch` is the epoch of the assignment the member has reached; the previous epoch
    is the one it held before the last change, which a member may still commit offsets
    with while its heartbeat's answer is on its way. `assigned_partitions` are those the
    member owns or is being given; `partitions_pending_revocation` are those it still owns
    but must give up before it moves on.
    """

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: ReconciliationState = ReconciliationState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str = ""
    server_assignor: str | None = None
    # A read-only mapping does not hash, which dataclasses take for mutable: hence factories.
    assigned_partitions: TopicPartitions = field(default_factory=lambda: EMPTY_TOPIC_PARTITIONS)
    partitions_pending_revocation: TopicPartitions = field(
        default_factory=lambda: EMPTY_TOPIC_PARTITIONS
    )
    # What the JoinGroup of a member still on the classic protocol said (its session timeout
    # and its protocols, each with its subscription): None for a member that joined with
    # ConsumerGroupHeartbeat.
    classic_member_metadata: ClassicMemberMetadata | None = None

    def __post_init__(self) -> None:
        # Normalized here, once, so that equality never depends on how partitions were given
        # (a list of names, a dict of lists, a topic with no partition).
        object.__setattr__(self, "subscribed_topic_names", frozenset(self.subscribed_topic_names))
        object.__setattr__(self, "assigned_partitions", topic_partitions(self.assigned_partitions))
        object.__setattr__(
            self,
            "partitions_pending_revocation",
            topic_partitions(self.partitions_pending_revocation),
        )

    # A member holds mappings, which do not hash; members are compared, never hashed.
    __hash__ = None  # type: ignore[assignment]

    @property
    def use_classic_protocol(self) -> bool:
        """Whether the member speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat,
        LeaveGroup) to its consumer group (Kafka's `useClassicProtocol`)."""
        return self.classic_member_metadata is not None

    def replace(self, **changes: object) -> ConsumerGroupMember:
        """This member with `changes` set (Kafka's `Builder(member).setX(...)`)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_member_epoch(self, member_epoch: int) -> ConsumerGroupMember:
        """This member at `member_epoch`, its current epoch becoming the previous one
        (Kafka's `updateMemberEpoch`)."""
        return dataclasses.replace(
            self, member_epoch=member_epoch, previous_member_epoch=self.member_epoch
        )

    def maybe_update(
        self,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int | None = None,
        subscribed_topic_names: Iterable[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
    ) -> ConsumerGroupMember:
        """This member updated from a heartbeat, where a field left out (None) means
        "unchanged" (Kafka's `maybeUpdate...`): a heartbeat carries only what changed."""
        return dataclasses.replace(
            self,
            instance_id=self.instance_id if instance_id is None else instance_id,
            rack_id=self.rack_id if rack_id is None else rack_id,
            rebalance_timeout_ms=(
                self.rebalance_timeout_ms if rebalance_timeout_ms is None else rebalance_timeout_ms
            ),
            subscribed_topic_names=(
                self.subscribed_topic_names
                if subscribed_topic_names is None
                else frozenset(subscribed_topic_names)
            ),
            subscribed_topic_regex=(
                self.subscribed_topic_regex
                if subscribed_topic_regex is None
                else subscribed_topic_regex
            ),
            server_assignor=self.server_assignor if server_assignor is None else server_assignor,
        )

    def owns_partition(self, topic_id: TopicId, partition: int) -> bool:
        """Whether the member holds the partition: assigned or still to be revoked."""
        return partition in self.assigned_partitions.get(
            topic_id, frozenset()
        ) or partition in self.partitions_pending_revocation.get(topic_id, frozenset())
