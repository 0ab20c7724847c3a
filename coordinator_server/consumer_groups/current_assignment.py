"""A member's reconciliation toward its target assignment: Kafka's `CurrentAssignmentBuilder`.

The coordinator never gives a partition to a member while another member may still hold it.
So a member moves toward its target in two steps, one heartbeat at a time:

1. Revoke. Partitions it holds but that are no longer in its target are taken from it first.
   While its heartbeats still report any of them, it stays UNREVOKED_PARTITIONS at its old
   epoch: its old epoch is what fences the commits of a member that has not caught up.
2. Assign. Once it has let them go, it moves to the target's epoch and receives the target's
   partitions that nobody else holds; those another member still holds are withheld
   (UNRELEASED_PARTITIONS) and given at a later heartbeat, once they are released.

A member whose assignment matches its target at the target's epoch is STABLE. Partitions of
topics the member no longer subscribes to, deleted topics among them, count as outside its
target, whatever the target says, since a target is computed only now and then.

Pure: the caller says who holds what (`current_partition_epoch`) and which topics the
member's subscription resolves to today (`subscribed_topic_ids`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Set
from dataclasses import dataclass

from coordinator_protocol.errors import FencedMemberEpochError
from coordinator_server.consumer_groups.member import (
    EMPTY_TOPIC_PARTITIONS,
    ConsumerGroupMember,
    ReconciliationState,
    topic_partitions,
)
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions

NO_OWNER_EPOCH = -1
"""What `current_partition_epoch` answers for a partition that no member holds."""

CurrentPartitionEpoch = Callable[[TopicId, int], int]
"""The epoch of the member that holds a partition, NO_OWNER_EPOCH when none does."""


@dataclass(frozen=True)
class CurrentAssignmentBuilder:
    """The next state of `member`, given the group's view at one heartbeat.

    `owned_topic_partitions` are the partitions the member's heartbeat says it holds, None
    when the heartbeat did not carry them (then the member is taken to hold everything it
    was given). `has_subscription_changed` asks, for a member already at the target's
    epoch, to drop at once the partitions of topics it no longer subscribes to.
    """

    member: ConsumerGroupMember
    target_assignment_epoch: int
    target_assignment: TopicPartitions
    current_partition_epoch: CurrentPartitionEpoch
    subscribed_topic_ids: Set[TopicId]
    owned_topic_partitions: Mapping[TopicId, Collection[int]] | None = None
    has_subscription_changed: bool = False

    def build(self) -> ConsumerGroupMember:
        """The member's next state, or the member itself when it cannot move on yet.

        Raises FencedMemberEpochError for a member in a state this version does not know
        that still claims partitions: it must give them all up and join again.
        """
        member = self.member
        state = member.state
        if state is ReconciliationState.STABLE:
            if member.member_epoch != self.target_assignment_epoch:
                return self._next_assignment(member.member_epoch)
            if self.has_subscription_changed:
                return self._without_unsubscribed_topics()
            return member
        if state is ReconciliationState.UNREVOKED_PARTITIONS:
            if self._still_owns_any(member.partitions_pending_revocation):
                if self.has_subscription_changed:
                    return self._without_unsubscribed_topics()
                return member
            return self._next_assignment(member.member_epoch)
        if state is ReconciliationState.UNRELEASED_PARTITIONS:
            return self._next_assignment(member.member_epoch)
        # UNKNOWN: written by a newer coordinator. Starting over from nothing is the only
        # safe way, so the member is fenced until it comes back holding no partition.
        # As Kafka: a heartbeat naming any topic, even with no partition, is not "nothing".
        if self.owned_topic_partitions is None or self.owned_topic_partitions:
            raise FencedMemberEpochError(
                "The consumer group member is in an unknown state; it must give up all its "
                "partitions and join again."
            )
        return self._next_assignment(self.target_assignment_epoch)

    def _still_owns_any(self, partitions: TopicPartitions) -> bool:
        """Whether the heartbeat reports any of `partitions`; True when the heartbeat did
        not say what the member holds, since it may then hold all of them still."""
        owned = self.owned_topic_partitions
        if owned is None:
            return True
        return any(
            not partitions.get(topic_id, frozenset()).isdisjoint(indexes)
            for topic_id, indexes in owned.items()
        )

    def _without_unsubscribed_topics(self) -> ConsumerGroupMember:
        """The member without the partitions of topics it no longer subscribes to, at its
        own epoch: the quick path for a subscription change, with no new target."""
        member = self.member
        removed = {
            topic_id: indexes
            for topic_id, indexes in member.assigned_partitions.items()
            if topic_id not in self.subscribed_topic_ids
        }
        if not removed:
            return member
        assigned = {
            topic_id: indexes
            for topic_id, indexes in member.assigned_partitions.items()
            if topic_id not in removed
        }
        pending = dict(member.partitions_pending_revocation)
        for topic_id, indexes in removed.items():
            pending[topic_id] = pending.get(topic_id, frozenset()) | indexes
        pending_revocation = topic_partitions(pending)
        if self._still_owns_any(pending_revocation):
            return member.with_member_epoch(member.member_epoch).replace(
                state=ReconciliationState.UNREVOKED_PARTITIONS,
                assigned_partitions=assigned,
                partitions_pending_revocation=pending_revocation,
            )
        # The member has already let them go (its heartbeat no longer reports them): it
        # keeps its state and only its assignment shrinks.
        return member.with_member_epoch(member.member_epoch).replace(assigned_partitions=assigned)

    def _next_assignment(self, member_epoch: int) -> ConsumerGroupMember:
        """The member moved as far toward the target as it may go now, from `member_epoch`."""
        member = self.member
        kept: dict[TopicId, frozenset[int]] = {}
        to_revoke: dict[TopicId, frozenset[int]] = {}
        to_assign: dict[TopicId, frozenset[int]] = {}
        has_unreleased = False
        for topic_id in self.target_assignment.keys() | member.assigned_partitions.keys():
            if topic_id in self.subscribed_topic_ids:
                target = self.target_assignment.get(topic_id, frozenset())
            else:
                target = frozenset()
            current = member.assigned_partitions.get(topic_id, frozenset())
            pending_revocation = member.partitions_pending_revocation.get(topic_id, frozenset())
            kept[topic_id] = current & target
            to_revoke[topic_id] = current - target
            free: set[int] = set()
            for partition in target - current:
                # A partition this very member is still revoking is not held by another
                # member: only one member holds a partition at a time.
                if (
                    self.current_partition_epoch(topic_id, partition) == NO_OWNER_EPOCH
                    or partition in pending_revocation
                ):
                    free.add(partition)
                else:
                    has_unreleased = True
            to_assign[topic_id] = frozenset(free)

        revoking = topic_partitions(to_revoke)
        if revoking and self._still_owns_any(revoking):
            # Revoke before assigning: the member stays at its epoch until it lets them go.
            return member.with_member_epoch(member_epoch).replace(
                state=ReconciliationState.UNREVOKED_PARTITIONS,
                assigned_partitions=kept,
                partitions_pending_revocation=revoking,
            )
        assigning = topic_partitions(to_assign)
        if assigning:
            assigned = {
                topic_id: kept.get(topic_id, frozenset()) | assigning.get(topic_id, frozenset())
                for topic_id in kept.keys() | assigning.keys()
            }
        else:
            assigned = kept
        return member.with_member_epoch(self.target_assignment_epoch).replace(
            state=ReconciliationState.UNRELEASED_PARTITIONS
            if has_unreleased
            else ReconciliationState.STABLE,
            assigned_partitions=assigned,
            partitions_pending_revocation=EMPTY_TOPIC_PARTITIONS,
        )
