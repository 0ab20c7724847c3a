"""A whole consumer group driven at random through the manager, as the shard drives it: no
partition is ever owned by two members at once.

Members join, heartbeat with what they hold (or without saying), revoke and apply what they
were told late or at once, leave, crash (their session expires), change their subscription;
the topics grow; and the coordinator reloads (a fresh manager replays the whole log, as a
restart or a failover does) between any two steps. After every step: in the coordinator's
view no partition is held by two members (assigned or pending revocation), nor in what the
clients really hold, and every partition a client holds is one the coordinator knows it
holds; a reload rebuilds the same group. Whenever every client keeps heartbeating with what
it holds, the group becomes Stable.

Clients are modelled as Kafka's: a client gives up what its latest answer took away before
it reports, and takes newly given partitions only after it has reported the revocations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from consumer_group_replay import replay
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator_protocol.consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_server.consumer_groups.group import ConsumerGroupState
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ConsumerGroupConfig,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.records import CoordinatorRecord
from coordinator_server.runtime.api import RecordRun
from coordinator_server.timeline import SnapshotRegistry

GROUP = "random"
FOO, BAR = b"\x01" * 16, b"\x02" * 16
MEMBERS = ("a", "b", "c", "d")
NOW_MS = 1_000

Partition = tuple[bytes, int]


@dataclass
class Client:
    """What one member's process really holds, and what it was last told."""

    epoch: int = 0
    holds: set[Partition] = field(default_factory=set)
    told: set[Partition] | None = None
    topics: tuple[str, ...] = ("foo",)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.topics = ClusterTopicsSnapshot(
            {"foo": ClusterTopic(FOO, 4), "bar": ClusterTopic(BAR, 2)}
        )
        self.log: list[CoordinatorRecord] = []
        self.manager = self._fresh()
        self.clients: dict[str, Client] = {}

    def _fresh(self) -> ConsumerGroupManager:
        return ConsumerGroupManager(
            SnapshotRegistry(),
            len(MEMBERS),
            ConsumerGroupConfig(),
            topics=lambda: self.topics,
        )

    def _apply(self, records: Sequence[CoordinatorRecord] | RecordRun) -> None:
        assert not isinstance(records, RecordRun)
        for record in records:
            replay(self.manager, record)
            self.log.append(record)

    def _send(
        self, member_id: str, request: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        result = self.manager.heartbeat(
            request, client_id=member_id, client_host="/10.0.0.1", topics=self.topics, now_ms=NOW_MS
        )
        self._apply(result.records)
        assert result.response is not None
        return result.response

    def _owned(self, holds: set[Partition]) -> list[ConsumerGroupHeartbeatRequestTopicPartitions]:
        by_topic: dict[bytes, list[int]] = {}
        for topic_id, partition in holds:
            by_topic.setdefault(topic_id, []).append(partition)
        return [
            ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=topic_id, topic_name="", partitions=sorted(partitions)
            )
            for topic_id, partitions in by_topic.items()
        ]

    def _take_answer(self, client: Client, response: ConsumerGroupHeartbeatResponse) -> None:
        if response.error_code:
            # Fenced or unknown: the client loses everything and joins again.
            client.epoch, client.holds, client.told = 0, set(), None
            return
        client.epoch = response.member_epoch
        if response.assignment is not None:
            told = {
                (tp.topic_id, p)
                for tp in response.assignment.topic_partitions
                for p in tp.partitions
            }
            client.told = told
            # Kafka's consumer gives up at once what it is no longer given.
            client.holds &= told

    # Rules.

    @rule(
        member=st.sampled_from(MEMBERS),
        topics=st.sampled_from([("foo",), ("foo", "bar"), ("bar",)]),
    )
    def join(self, member: str, topics: tuple[str, ...]) -> None:
        if member in self.clients and self.clients[member].epoch > 0:
            return
        client = self.clients.setdefault(member, Client(topics=topics))
        client.holds = set()
        response = self._send(
            member,
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=member,
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=list(client.topics),
                topic_partitions=[],
            ),
        )
        self._take_answer(client, response)

    @rule(member=st.sampled_from(MEMBERS), report=st.booleans())
    def heartbeat(self, member: str, report: bool) -> None:
        client = self.clients.get(member)
        if client is None or client.epoch <= 0:
            return
        response = self._send(
            member,
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=member,
                member_epoch=client.epoch,
                topic_partitions=self._owned(client.holds) if report else None,
            ),
        )
        self._take_answer(client, response)

    @rule(member=st.sampled_from(MEMBERS))
    def client_takes_what_it_was_told(self, member: str) -> None:
        """After reporting its revocations, the client takes what it was given."""
        client = self.clients.get(member)
        if client is None or client.told is None or client.epoch <= 0:
            return
        group = self.manager.group(GROUP)
        known = None if group is None else group.member(member)
        if known is None or known.partitions_pending_revocation:
            return
        client.holds = set(client.told)

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        client = self.clients.get(member)
        if client is None or client.epoch <= 0:
            return
        self._send(
            member,
            ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=member, member_epoch=-1),
        )
        client.epoch, client.holds, client.told = 0, set(), None

    @rule(member=st.sampled_from(MEMBERS))
    def crash(self, member: str) -> None:
        """The client dies; its session expires and the coordinator fences it."""
        client = self.clients.get(member)
        if client is None or client.epoch <= 0:
            return
        client.epoch, client.holds, client.told = 0, set(), None
        self._apply(self.manager._expire_session(GROUP, member).records)

    @rule(partitions=st.integers(4, 8))
    def foo_grows(self, partitions: int) -> None:
        current = self.topics.topic("foo")
        assert current is not None
        if partitions > current.partition_count:
            self.topics = ClusterTopicsSnapshot(
                {"foo": ClusterTopic(FOO, partitions), "bar": ClusterTopic(BAR, 2)},
                self.topics.version + 1,
            )

    @rule()
    def reload(self) -> None:
        """A restart or a failover: the log replayed into a manager of its own."""
        before = self.manager.group(GROUP)
        fresh = self._fresh()
        for record in self.log:
            replay(fresh, record)
        after = fresh.group(GROUP)
        if before is None:
            assert after is None
        else:
            assert after is not None
            assert after.members() == before.members()
            assert after.target_assignments() == before.target_assignments()
            assert after.group_epoch() == before.group_epoch()
        self.manager = fresh

    @precondition(lambda self: any(c.epoch > 0 for c in self.clients.values()))
    @rule()
    def settle(self) -> None:
        """Every live client heartbeats with what it holds until nothing changes: the group
        ends Stable."""
        for _ in range(20):
            for member, client in self.clients.items():
                if client.epoch <= 0:
                    continue
                self.heartbeat(member, True)
                self.client_takes_what_it_was_told(member)
                self.heartbeat(member, True)
        group = self.manager.group(GROUP)
        assert group is not None
        assert group.state() in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY), group.state()

    # What must always hold.

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        held: dict[Partition, str] = {}
        for member, client in self.clients.items():
            for partition in client.holds:
                assert partition not in held, f"{partition} held by {held[partition]} and {member}"
                held[partition] = member
        group = self.manager.group(GROUP)
        if group is None:
            assert not held
            return
        owners: dict[Partition, str] = {}
        for known in group.members().values():
            for partitions in (known.assigned_partitions, known.partitions_pending_revocation):
                for topic_id, indexes in partitions.items():
                    for index in indexes:
                        assert (topic_id, index) not in owners
                        owners[(topic_id, index)] = known.member_id
        for partition, member in held.items():
            assert owners.get(partition) == member, (partition, member, owners.get(partition))


GroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_no_partition_is_owned_by_two_members = GroupMachine.TestCase
