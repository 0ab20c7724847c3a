"""Reconciliation across a whole group, driven at random: no partition has two owners.

Several members are driven through random target assignments, heartbeats with and without
the partitions they hold, clients slow to apply what they were told (revoking first, then
assigning, or not yet at all), members leaving or crashing, and topics deleted. After every
step: no partition is held by two members, neither in the coordinator's view (assigned or
pending revocation) nor in what the clients really hold, and every partition a client holds
is one the coordinator knows it holds. Whenever every client keeps heartbeating with what it
holds, every member reaches its target, STABLE at the target's epoch.

The clients are modelled as Kafka's: answers arrive in order, and a client applies only the
latest assignment it was given (Kafka's client drops a reconciliation made stale by a newer
epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator_server.consumer_groups.current_assignment import (
    NO_OWNER_EPOCH,
    CurrentAssignmentBuilder,
)
from coordinator_server.consumer_groups.member import ConsumerGroupMember, ReconciliationState
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions

TOPICS: tuple[TopicId, ...] = (b"\x01" * 16, b"\x02" * 16)
PARTITIONS_PER_TOPIC = 3
ALL_PARTITIONS: tuple[tuple[TopicId, int], ...] = tuple(
    (topic_id, partition) for topic_id in TOPICS for partition in range(PARTITIONS_PER_TOPIC)
)
MAX_MEMBERS = 4

Partition = tuple[TopicId, int]


def flat(partitions: TopicPartitions) -> set[Partition]:
    return {(topic_id, index) for topic_id, indexes in partitions.items() for index in indexes}


def grouped(partitions: set[Partition]) -> dict[TopicId, frozenset[int]]:
    by_topic: dict[TopicId, set[int]] = {}
    for topic_id, index in partitions:
        by_topic.setdefault(topic_id, set()).add(index)
    return {topic_id: frozenset(indexes) for topic_id, indexes in by_topic.items()}


@dataclass
class Client:
    """What a member's client really holds, and the latest assignment it has not applied."""

    held: set[Partition]
    to_apply: set[Partition] | None = None


class GroupReconciliation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.members: dict[str, ConsumerGroupMember] = {}
        self.clients: dict[str, Client] = {}
        self.target_epoch = 1
        self.target: dict[str, set[Partition]] = {}
        self.subscribed: set[TopicId] = set(TOPICS)
        self.next_member = 0

    def _pick(self, index: int) -> str:
        ids = sorted(self.members)
        return ids[index % len(ids)]

    def _current_partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        # The group's view, every member included, as Kafka's group keeps it.
        for member in self.members.values():
            if member.owns_partition(topic_id, partition):
                return member.member_epoch
        return NO_OWNER_EPOCH

    def _heartbeat(self, member_id: str, *, with_owned: bool) -> None:
        member = self.members[member_id]
        client = self.clients[member_id]
        owned = grouped(client.held) if with_owned else None
        updated = CurrentAssignmentBuilder(
            member=member,
            target_assignment_epoch=self.target_epoch,
            target_assignment=grouped(self.target.get(member_id, set())),
            current_partition_epoch=self._current_partition_epoch,
            subscribed_topic_ids=frozenset(self.subscribed),
            owned_topic_partitions=owned,
        ).build()
        # The epoch never goes back, and moves only when nothing is left to revoke.
        assert updated.member_epoch >= member.member_epoch
        if updated.state is ReconciliationState.UNREVOKED_PARTITIONS:
            assert updated.member_epoch == member.member_epoch
        else:
            assert updated.member_epoch == self.target_epoch
            assert not updated.partitions_pending_revocation
        self.members[member_id] = updated
        client.to_apply = flat(updated.assigned_partitions)

    @precondition(lambda self: len(self.members) < MAX_MEMBERS)
    @rule()
    def join(self) -> None:
        member_id = f"member-{self.next_member}"
        self.next_member += 1
        self.members[member_id] = ConsumerGroupMember(member_id)
        self.clients[member_id] = Client(held=set())

    @precondition(lambda self: self.members)
    @rule(index=st.integers(0, MAX_MEMBERS - 1))
    def leave_or_crash(self, index: int) -> None:
        # Either way the coordinator forgets the member and what it held at once; a client
        # that crashed holds nothing any more, one that left gave everything up.
        member_id = self._pick(index)
        del self.members[member_id]
        del self.clients[member_id]

    @rule(
        owners=st.lists(
            st.integers(0, MAX_MEMBERS), min_size=len(ALL_PARTITIONS), max_size=len(ALL_PARTITIONS)
        )
    )
    def new_target(self, owners: list[int]) -> None:
        # Any assignment of partitions to the current members, some left unassigned; a new
        # target has a new epoch.
        ids = sorted(self.members)
        self.target = {member_id: set() for member_id in ids}
        for partition, owner in zip(ALL_PARTITIONS, owners, strict=True):
            if owner < len(ids):
                self.target[ids[owner]].add(partition)
        self.target_epoch += 1

    @precondition(lambda self: self.members)
    @rule(index=st.integers(0, MAX_MEMBERS - 1), with_owned=st.booleans())
    def heartbeat(self, index: int, with_owned: bool) -> None:
        self._heartbeat(self._pick(index), with_owned=with_owned)

    @precondition(lambda self: self.members)
    @rule(index=st.integers(0, MAX_MEMBERS - 1))
    def client_revokes(self, index: int) -> None:
        # The first half of a client's reconciliation: it lets go of what it lost.
        client = self.clients[self._pick(index)]
        if client.to_apply is not None:
            client.held &= client.to_apply

    @precondition(lambda self: self.members)
    @rule(index=st.integers(0, MAX_MEMBERS - 1))
    def client_applies(self, index: int) -> None:
        client = self.clients[self._pick(index)]
        if client.to_apply is not None:
            client.held = set(client.to_apply)
            client.to_apply = None

    @precondition(lambda self: len(self.subscribed) > 1)
    @rule(index=st.integers(0, len(TOPICS) - 1))
    def delete_topic(self, index: int) -> None:
        # A deleted topic makes a new group epoch, as in Kafka; the target is left naming it,
        # as a target computed before the deletion would.
        self.subscribed.discard(TOPICS[index])
        self.target_epoch += 1

    @rule()
    def settle(self) -> None:
        """Every client applies what it was told and heartbeats with what it holds, round
        after round: every member reaches its target."""
        for _ in range(2 * MAX_MEMBERS + 3):
            if self._settled():
                break
            for member_id in sorted(self.members):
                self.client_applies_all(member_id)
                self._heartbeat(member_id, with_owned=True)
                self.client_applies_all(member_id)
                self.no_partition_has_two_owners()
        for member_id, member in self.members.items():
            expected = self._expected(member_id)
            assert member.state is ReconciliationState.STABLE, (member_id, member)
            assert member.member_epoch == self.target_epoch
            assert flat(member.assigned_partitions) == expected
            assert not member.partitions_pending_revocation
            assert self.clients[member_id].held == expected

    def _expected(self, member_id: str) -> set[Partition]:
        return {
            (topic_id, index)
            for topic_id, index in self.target.get(member_id, set())
            if topic_id in self.subscribed
        }

    def _settled(self) -> bool:
        return all(
            member.state is ReconciliationState.STABLE
            and member.member_epoch == self.target_epoch
            and flat(member.assigned_partitions) == self._expected(member_id)
            and self.clients[member_id].held == self._expected(member_id)
            for member_id, member in self.members.items()
        )

    def client_applies_all(self, member_id: str) -> None:
        client = self.clients[member_id]
        if client.to_apply is not None:
            client.held = set(client.to_apply)
            client.to_apply = None

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        seen: dict[Partition, str] = {}
        for member_id, member in self.members.items():
            view = flat(member.assigned_partitions) | flat(member.partitions_pending_revocation)
            assert flat(member.assigned_partitions).isdisjoint(
                flat(member.partitions_pending_revocation)
            )
            for partition in view:
                assert partition not in seen, (partition, seen[partition], member_id)
                seen[partition] = member_id
            # What a client holds, the coordinator counts as its own.
            assert self.clients[member_id].held <= view, (member_id, self.clients[member_id])
        held_by: dict[Partition, str] = {}
        for member_id, client in self.clients.items():
            for partition in client.held:
                assert partition not in held_by, (partition, held_by[partition], member_id)
                held_by[partition] = member_id

    def teardown(self) -> None:
        self.settle()


GroupReconciliation.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
test_group_reconciliation = GroupReconciliation.TestCase
