"""GroupMember against a real server: two-step join, the leader's assignment, heartbeats,
rebalances and their callbacks, resets on UNKNOWN_MEMBER_ID, static membership, fencing,
a clean leave, commits under a generation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from client_servers import sqlite_server
from server_process import ServerProcess

from coordinator_client import (
    Assignor,
    CommitFailedError,
    CoordinatorClient,
    GroupMember,
    GroupMemberError,
    MemberState,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from coordinator_client.assignors import Assignment
from coordinator_protocol.consumer import ConsumerProtocolAssignment
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import LeaveGroupRequestMember

pytestmark = pytest.mark.timeout(90)

TOPIC = "orders"
PARTITIONS = {TOPIC: 6, "payments": 3}
ALL = frozenset(TopicPartition(TOPIC, p) for p in range(6))
SESSION_MS = 1500


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with sqlite_server(tmp_path_factory.mktemp("data")) as process:
        yield process


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[CoordinatorClient]:
    async with CoordinatorClient(f"{server.host}:{server.port}", retry_backoff_ms=20) as c:
        yield c


@dataclass
class Events:
    """What the callbacks saw, in order."""

    log: list[tuple[str, frozenset[TopicPartition]]] = field(default_factory=list)

    async def revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("revoked", partitions))

    async def assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("assigned", partitions))

    async def lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("lost", partitions))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]


def member(
    client: CoordinatorClient,
    group: str,
    events: Events | None = None,
    *,
    topics: tuple[str, ...] = (TOPIC,),
    assignors: list[Assignor] | None = None,
    session_timeout_ms: int = SESSION_MS,
    instance_id: str | None = None,
) -> GroupMember:
    events = events or Events()
    return GroupMember(
        client,
        group,
        topics,
        partitions_for_topics=PARTITIONS,
        assignors=assignors,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=5000,
        group_instance_id=instance_id,
        on_partitions_revoked=events.revoked,
        on_partitions_assigned=events.assigned,
        on_partitions_lost=events.lost,
    )


async def stable(
    *members: GroupMember, newer_than: int = 0, timeout: float = 15
) -> list[frozenset[TopicPartition]]:
    """Wait until every member is stable in one generation newer than `newer_than`;
    their assignments."""
    async with asyncio.timeout(timeout):
        while True:
            for m in members:
                await m.wait_for_assignment()
            generations = {m.generation_id for m in members}
            if (
                len(generations) == 1
                and generations.pop() > newer_than
                and all(m.state is MemberState.STABLE for m in members)
            ):
                return [m.assignment for m in members]
            await asyncio.sleep(0.05)


async def wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


def assert_partitioned(
    assignments: list[frozenset[TopicPartition]], everything: frozenset[TopicPartition] = ALL
) -> None:
    union: set[TopicPartition] = set()
    for assignment in assignments:
        assert not union & assignment
        union |= assignment
    assert union == everything


async def test_a_single_member_joins_in_two_steps_and_gets_everything(
    client: CoordinatorClient,
) -> None:
    events = Events()
    async with member(client, "m-single", events) as one:
        assert await one.wait_for_assignment(10) == ALL
        assert one.generation_id == 1
        assert one.is_leader and one.member_id.startswith("coordinator-client-")
        assert one.protocol_name == "range"
        assert events.log == [("assigned", ALL)]
        described = await client.describe_group("m-single")
        assert described.group_state == "Stable"
        assert [m.member_id for m in described.members] == [one.member_id]
        decoded = ConsumerProtocolAssignment.decode(described.members[0].member_assignment)
        assert {TopicPartition(t.topic, p) for t in decoded.partitions for p in t.partitions} == ALL
    # close() revoked, then left: the group is empty at once.
    assert events.kinds() == ["assigned", "revoked"]
    assert (await client.describe_group("m-single")).group_state == "Empty"


async def test_three_members_split_the_partitions_and_rebalance_when_one_leaves(
    client: CoordinatorClient,
) -> None:
    group = "m-three"
    events = [Events() for _ in range(3)]
    members = [member(client, group, e) for e in events]
    for m in members:
        await m.start()
    try:
        assignments = await stable(*members)
        assert_partitioned(assignments)
        assert sorted(map(len, assignments)) == [2, 2, 2]
        assert sum(m.is_leader for m in members) == 1
        generation = members[0].generation_id

        await members[2].close()
        assignments = await stable(*members[:2], newer_than=generation)
        assert_partitioned(assignments)
        assert members[0].generation_id > generation
        # The survivors gave up their partitions before getting new ones.
        for e in events[:2]:
            assert e.kinds()[-2:] == ["revoked", "assigned"]
        assert events[2].kinds()[-1] == "revoked"
    finally:
        for m in members:
            await m.close()


async def test_members_on_one_connection_heartbeat_while_a_join_is_parked(
    client: CoordinatorClient,
) -> None:
    """The second member's JoinGroup is parked until the first rejoins, and the first
    only learns of the rebalance from a heartbeat sent on the same connection."""
    group = "m-pipelined"
    first = member(client, group)
    await first.start()
    await first.wait_for_assignment(10)
    second = member(client, group)
    await second.start()
    try:
        assignments = await stable(first, second)
        assert_partitioned(assignments)
        assert client.open_connections == 1
    finally:
        await first.close()
        await second.close()


@pytest.mark.slow
async def test_heartbeats_keep_a_member_alive_past_its_session_timeout(
    client: CoordinatorClient,
) -> None:
    async with member(client, "m-alive", session_timeout_ms=2000) as one:
        await one.wait_for_assignment(10)
        generation = one.generation_id
        await asyncio.sleep(5)
        assert one.state is MemberState.STABLE
        assert one.generation_id == generation
        assert one.heartbeat_interval_ms == 666


async def test_a_crashed_member_is_expired_and_its_partitions_reassigned(
    server: ServerProcess, client: CoordinatorClient
) -> None:
    group = "m-crash"
    survivor_events = Events()
    survivor = member(client, group, survivor_events)
    crashing_client = CoordinatorClient(f"{server.host}:{server.port}")
    crashing = member(crashing_client, group)
    await survivor.start()
    await crashing.start()
    try:
        assignments = await stable(survivor, crashing)
        assert_partitioned(assignments)
        # The process dies: no LeaveGroup, no more heartbeats.
        await crashing_client.close()
        started = time.monotonic()
        await wait_until(lambda: survivor.assignment == ALL, 15)
        # Not at once: when the session expires (counted from the last heartbeat, which was
        # on time unless the machine stalled).
        assert time.monotonic() - started >= SESSION_MS / 1000 * 0.3
        assert survivor_events.kinds()[-2:] == ["revoked", "assigned"]
    finally:
        await survivor.close()
        await crashing.close()


async def test_unknown_member_id_resets_the_member_and_its_partitions_are_lost(
    client: CoordinatorClient,
) -> None:
    group = "m-reset"
    events = Events()
    async with member(client, group, events) as one:
        await one.wait_for_assignment(10)
        old_id = one.member_id
        # An administrator removes it: its next heartbeat is answered UNKNOWN_MEMBER_ID.
        await client.leave(group, [LeaveGroupRequestMember(member_id=old_id)])
        await wait_until(
            lambda: one.member_id not in ("", old_id) and one.state is MemberState.STABLE
        )
        assert one.assignment == ALL
        # Lost, not revoked: the generation was gone, there was nothing to commit for.
        assert events.kinds() == ["assigned", "lost", "assigned"]


async def test_commits_carry_the_generation_and_fail_once_it_is_gone(
    client: CoordinatorClient,
) -> None:
    group = "m-commit"
    async with member(client, group) as one:
        await one.wait_for_assignment(10)
        await one.commit_offsets({TopicPartition(TOPIC, 0): 17})
        assert await client.fetch_offsets(group) == {
            TopicPartition(TOPIC, 0): OffsetAndMetadata(17, "")
        }
        old_id = one.member_id
        await client.leave(group, [LeaveGroupRequestMember(member_id=old_id)])
        # The coordinator refuses the stale member; the member resets and will rejoin.
        with pytest.raises(CommitFailedError):
            await one.commit_offsets({TopicPartition(TOPIC, 0): 18})
        assert one.member_id != old_id
        with pytest.raises(CommitFailedError):
            await one.commit_offsets({TopicPartition(TOPIC, 0): 19})
        await one.wait_for_assignment(10)
        await one.commit_offsets({TopicPartition(TOPIC, 0): 20})
    assert (await client.fetch_offsets(group))[TopicPartition(TOPIC, 0)].offset == 20


async def test_a_static_member_does_not_leave_and_comes_back_to_its_partitions(
    client: CoordinatorClient,
) -> None:
    group = "m-static"
    # Sessions long enough that nothing expires while the static member is away.
    dynamic = member(client, group, session_timeout_ms=6000)
    static = member(client, group, instance_id="instance-a", session_timeout_ms=6000)
    await dynamic.start()
    await static.start()
    try:
        before = await stable(dynamic, static)
        rebalances = dynamic.rebalances
        static_partitions = before[1]
        await static.close()
        # It did not leave: still a member, its partitions still its own.
        described = await client.describe_group(group)
        assert {m.group_instance_id for m in described.members} == {None, "instance-a"}
        # Back before its session expires, with the same instance id.
        again = member(client, group, instance_id="instance-a", session_timeout_ms=6000)
        await again.start()
        assert await again.wait_for_assignment(10) == static_partitions
        await asyncio.sleep(1)
        assert dynamic.rebalances == rebalances
        await again.close()
    finally:
        await dynamic.close()
        await static.close()


async def test_a_fenced_static_member_stops_with_an_error(client: CoordinatorClient) -> None:
    group = "m-fenced"
    old = member(client, group, instance_id="instance-b")
    await old.start()
    await old.wait_for_assignment(10)
    new = member(client, group, instance_id="instance-b")
    await new.start()
    try:
        await new.wait_for_assignment(10)
        # The replaced member learns it at its next heartbeat.
        await wait_until(lambda: old.error is not None, 5)
        with pytest.raises(GroupMemberError) as ended:
            await old.wait_for_assignment(10)
        assert ended.value.__cause__ is not None
        assert getattr(ended.value.__cause__, "code", None) is ErrorCode.FENCED_INSTANCE_ID
    finally:
        await old.close()
        await new.close()


@pytest.mark.parametrize("assignor", [RangeAssignor, RoundRobinAssignor, StickyAssignor])
async def test_the_leader_runs_the_agreed_assignor_over_all_subscriptions(
    client: CoordinatorClient, assignor: type[Assignor]
) -> None:
    group = f"m-assignor-{assignor.name}"  # type: ignore[attr-defined]
    other = RoundRobinAssignor if assignor is not RoundRobinAssignor else RangeAssignor
    both = (TOPIC, "payments")
    members = [
        member(client, group, topics=both, assignors=[assignor()]),
        # Prefers another assignor, which the first member lacks: the group agrees on the
        # one both have.
        member(client, group, topics=(TOPIC,), assignors=[other(), assignor()]),
    ]
    for m in members:
        await m.start()
    try:
        assignments = await stable(*members)
        everything = ALL | {TopicPartition("payments", p) for p in range(3)}
        assert_partitioned(assignments, everything)
        # Only the member subscribed to "payments" has its partitions.
        assert all(tp.topic == TOPIC for tp in assignments[1])
        assert {m.protocol_name for m in members} == {assignor.name}  # type: ignore[attr-defined]
    finally:
        for m in members:
            await m.close()


async def test_sticky_members_keep_their_partitions_when_one_joins(
    client: CoordinatorClient,
) -> None:
    group = "m-sticky"
    first = member(client, group, assignors=[StickyAssignor()])
    second = member(client, group, assignors=[StickyAssignor()])
    await first.start()
    await second.start()
    third = member(client, group, assignors=[StickyAssignor()])
    try:
        before = await stable(first, second)
        await third.start()
        after = await stable(first, second, third, newer_than=first.generation_id)
        assert_partitioned(after)
        assert sorted(map(len, after)) == [2, 2, 2]
        # Everything the newcomer got came from the others; nothing else moved.
        assert after[0] <= before[0] and after[1] <= before[1]
    finally:
        for m in (first, second, third):
            await m.close()


async def test_a_new_subscription_triggers_a_rebalance(client: CoordinatorClient) -> None:
    async with member(client, "m-resubscribe") as one:
        assert await one.wait_for_assignment(10) == ALL
        one.subscribe([TOPIC, "payments"])
        await wait_until(lambda: len(one.assignment) == 9 and one.state is MemberState.STABLE)
        assert one.generation_id == 2


def test_assignment_round_trips_through_the_consumer_protocol() -> None:
    assignment = Assignment((TopicPartition("a", 1), TopicPartition("b", 0)), b"\x01")
    assert Assignment.decode(assignment.encode()) == assignment
    assert Assignment.decode(b"") == Assignment()
