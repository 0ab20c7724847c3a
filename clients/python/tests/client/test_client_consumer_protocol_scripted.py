"""GroupMember with `group_protocol="consumer"` (KIP-848) against a scripted coordinator: the
heartbeats it sends (the full request to join and after an error, only what changed
otherwise, the acknowledgement at once), a reconciliation that revokes before it assigns,
fencing, leaving, commits with the member epoch, and the errors that end a membership."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from client_fake_server import FakeCoordinator, Received
from consumer_group_script import ScriptedConsumerGroup

from coordinator_client import (
    CommitFailedError,
    CoordinatorClient,
    GroupMember,
    GroupMemberError,
    MemberState,
    RangeAssignor,
)
from coordinator_client.member import ConsumerMemberState
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(30)

HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


@pytest.fixture
async def group() -> AsyncIterator[tuple[FakeCoordinator, ScriptedConsumerGroup]]:
    script = ScriptedConsumerGroup({"t": 4, "u": 2})
    async with FakeCoordinator(script) as server:
        yield server, script


@pytest.fixture
async def client(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
) -> AsyncIterator[CoordinatorClient]:
    async with CoordinatorClient(group[0].bootstrap, request_timeout_ms=2000) as c:
        yield c


class Events:
    """The listener's calls, in order, with their partitions."""

    def __init__(self) -> None:
        self.log: list[tuple[str, frozenset[TopicPartition]]] = []

    async def revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("revoked", partitions))

    async def assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("assigned", partitions))

    async def lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("lost", partitions))


def member_of(
    client: CoordinatorClient, events: Events, topics: tuple[str, ...] = ("t",), **options: Any
) -> GroupMember:
    options.setdefault("on_partitions_revoked", events.revoked)
    options.setdefault("on_partitions_assigned", events.assigned)
    options.setdefault("on_partitions_lost", events.lost)
    return GroupMember(
        client,
        "g",
        topics,
        group_protocol="consumer",
        rebalance_timeout_ms=2000,
        retry_backoff_ms=10,
        **options,
    )


def heartbeats(server: FakeCoordinator) -> list[dict[str, Any]]:
    return [r.body for r in server.requests(HEARTBEAT)]


def owned(body: dict[str, Any], script: ScriptedConsumerGroup) -> set[TopicPartition] | None:
    """The partitions a heartbeat says the member owns (None: unchanged)."""
    if body["topic_partitions"] is None:
        return None
    result = set()
    for topic in body["topic_partitions"]:
        assert topic["topic_name"] == script.topic_name(topic["topic_id"])
        result |= {TopicPartition(topic["topic_name"], p) for p in topic["partitions"]}
    return result


async def wait_for(condition: Any, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


def settled(member: GroupMember) -> bool:
    return member.consumer_state is ConsumerMemberState.STABLE


async def test_join_with_its_own_member_id_then_acknowledge_then_heartbeat_what_changed(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    script.heartbeat_interval_ms = 500
    events = Events()
    async with member_of(client, events, server_assignor="uniform") as member:
        assert await member.wait_for_assignment(5) == tps("t", 0, 1, 2, 3)
        await wait_for(lambda: len(heartbeats(server)) >= 4)
        assert member.generation_id == member.member_epoch == 1
        assert member.state is MemberState.STABLE
        member_id = member.member_id
    join, ack, *beats, leave = server.requests(HEARTBEAT)
    # KIP-1082: the member's own id, in Kafka's uuid text form, from the first request on.
    assert len(member_id) == 22 and not member_id.startswith("-")
    assert {r.body["member_id"] for r in server.requests(HEARTBEAT)} == {member_id}
    assert join.body["member_epoch"] == 0
    assert join.body["group_id"] == "g"
    assert join.body["rebalance_timeout_ms"] == 2000
    assert join.body["subscribed_topic_names"] == ["t"]
    assert join.body["subscribed_topic_regex"] is None
    assert join.body["server_assignor"] == "uniform"
    assert join.body["topic_partitions"] == []
    # The acknowledgement goes out at once, owning the assignment (by topic id and name).
    assert ack.body["member_epoch"] == 1
    assert owned(ack.body, script) == set(tps("t", 0, 1, 2, 3))
    assert ack.at - join.at < 0.3
    assert ack.body["rebalance_timeout_ms"] == -1
    assert ack.body["subscribed_topic_names"] is None
    assert ack.body["server_assignor"] is None
    # Then at the coordinator's interval (500 ms), with nothing that did not change.
    assert beats
    for beat in beats:
        assert beat.body["member_epoch"] == 1
        assert beat.body["topic_partitions"] is None
        assert beat.body["subscribed_topic_names"] is None
    for earlier, later in itertools.pairwise([ack, *beats]):
        assert 0.45 <= later.at - earlier.at <= 1.2
    assert leave.body["member_epoch"] == -1
    assert events.log == [("assigned", tps("t", 0, 1, 2, 3)), ("revoked", tps("t", 0, 1, 2, 3))]


async def test_a_new_assignment_revokes_first_acknowledges_then_assigns_and_keeps_the_rest(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    events = Events()
    acked_before_assigned: list[bool] = []

    async def assigned(partitions: frozenset[TopicPartition]) -> None:
        await events.assigned(partitions)
        if events.log[-2:-1] and events.log[-2][0] == "revoked":
            # The acknowledgement of the revocation does not wait for this callback.
            count = len(server.requests(HEARTBEAT))
            await server.wait_for_requests(HEARTBEAT, count + 1)
            acked_before_assigned.append(owned(heartbeats(server)[-1], script) is not None)

    async with member_of(client, events, topics=("t", "u"), on_partitions_assigned=assigned) as m:
        assert await m.wait_for_assignment(5) == tps("t", 0, 1, 2, 3) | tps("u", 0, 1)
        member = script.only_member()
        # Another member joined: this one gives up t-2, t-3 and u-1 at its epoch ...
        script.assign(member.member_id, 1, {"t": [0, 1], "u": [0]})
        await wait_for(lambda: len(events.log) == 3)
        await wait_for(lambda: settled(m))
        assert m.assignment == tps("t", 0, 1) | tps("u", 0)
        # ... then gets t-2 back and moves on to epoch 2.
        script.assign(member.member_id, 2, {"t": [0, 1, 2], "u": [0]})
        await wait_for(lambda: len(events.log) == 4)
        await wait_for(lambda: m.generation_id == 2 and settled(m))
        bodies = heartbeats(server)
    assert events.log[:4] == [
        ("assigned", tps("t", 0, 1, 2, 3) | tps("u", 0, 1)),
        ("revoked", tps("t", 2, 3) | tps("u", 1)),
        ("assigned", frozenset()),
        ("assigned", tps("t", 2)),
    ]
    assert acked_before_assigned == [True]
    acks = [(b["member_epoch"], owned(b, script)) for b in bodies if owned(b, script) is not None]
    assert acks == [
        (0, set()),
        (1, set(tps("t", 0, 1, 2, 3) | tps("u", 0, 1))),
        # The reduced set, once t-2, t-3 and u-1 are revoked.
        (1, set(tps("t", 0, 1) | tps("u", 0))),
        (2, set(tps("t", 0, 1, 2) | tps("u", 0))),
    ]
    # The kept partitions were never given up.
    assert events.log[4] == ("revoked", tps("t", 0, 1, 2) | tps("u", 0))


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
async def test_fencing_loses_the_partitions_and_rejoins_at_epoch_0_with_the_same_id(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
    client: CoordinatorClient,
    code: ErrorCode,
) -> None:
    server, script = group
    events = Events()
    async with member_of(client, events) as member:
        await member.wait_for_assignment(5)
        member_id = member.member_id
        script.codes[HEARTBEAT] = [code]
        await wait_for(lambda: len(events.log) == 3)
        assert await member.wait_for_assignment(5) == tps("t", 0, 1, 2, 3)
        assert member.member_id == member_id
        assert member.generation_id == 2
        bodies = heartbeats(server)
    assert events.log[:3] == [
        ("assigned", tps("t", 0, 1, 2, 3)),
        ("lost", tps("t", 0, 1, 2, 3)),
        ("assigned", tps("t", 0, 1, 2, 3)),
    ]
    joins = [b for b in bodies if b["member_epoch"] == 0]
    assert len(joins) == 2
    rejoin = joins[1]
    # Everything again, owning nothing.
    assert rejoin["member_id"] == member_id
    assert rejoin["rebalance_timeout_ms"] == 2000
    assert rejoin["subscribed_topic_names"] == ["t"]
    assert rejoin["topic_partitions"] == []


async def test_lost_answers_make_the_next_heartbeat_carry_every_field(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
) -> None:
    server, script = group
    events = Events()
    client = CoordinatorClient(server.bootstrap, request_timeout_ms=300)
    async with client, member_of(client, events) as member:
        await member.wait_for_assignment(5)
        await wait_for(lambda: len(heartbeats(server)) >= 3)
        script.drop_heartbeats = 1
        count = len(heartbeats(server))
        await wait_for(lambda: len(heartbeats(server)) >= count + 2)
        bodies = heartbeats(server)
    lost, retried = bodies[count], bodies[count + 1]
    assert lost["topic_partitions"] is None
    assert retried["member_epoch"] == 1
    assert retried["rebalance_timeout_ms"] == 2000
    assert retried["subscribed_topic_names"] == ["t"]
    assert owned(retried, script) == set(tps("t", 0, 1, 2, 3))
    # Nothing was given up meanwhile.
    assert events.log == [("assigned", tps("t", 0, 1, 2, 3)), ("revoked", tps("t", 0, 1, 2, 3))]


@pytest.mark.parametrize(
    ("instance_id", "leave_group", "epoch"),
    [(None, None, -1), ("i-1", None, -2), ("i-1", True, -1), (None, False, None)],
)
async def test_close_revokes_commits_then_leaves_with_kafkas_epoch(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
    client: CoordinatorClient,
    instance_id: str | None,
    leave_group: bool | None,
    epoch: int | None,
) -> None:
    server, script = group
    events = Events()
    member: GroupMember

    async def commit_then_record(partitions: frozenset[TopicPartition]) -> None:
        await member.commit_offsets(dict.fromkeys(partitions, 7))
        await events.revoked(partitions)

    member = member_of(
        client, events, group_instance_id=instance_id, on_partitions_revoked=commit_then_record
    )
    await member.start()
    await member.wait_for_assignment(5)
    await member.close(leave_group=leave_group)
    assert events.log[-1] == ("revoked", tps("t", 0, 1, 2, 3))
    assert script.commits == {("t", p): 7 for p in range(4)}
    leaves = [r for r in server.requests(HEARTBEAT) if r.body["member_epoch"] < 0]
    if epoch is None:
        assert leaves == []
    else:
        (leave,) = leaves
        assert leave.body["member_epoch"] == epoch
        assert leave.body["instance_id"] == instance_id
        # The commit in on_partitions_revoked came first, at the member's epoch.
        (commit,) = server.requests(ApiKey.OFFSET_COMMIT)
        assert commit.body["generation_id_or_member_epoch"] == 1
        assert server.received.index(commit) < server.received.index(leave)
    with pytest.raises(CommitFailedError):
        await member.commit_offsets({TopicPartition("t", 0): 8})


async def test_commits_carry_the_member_epoch_and_a_stale_one_is_sent_again_with_the_new(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    async with member_of(client, Events()) as member:
        await member.wait_for_assignment(5)
        await member.commit_offsets({TopicPartition("t", 0): 5})
        # The coordinator moved the member to epoch 2; its heartbeat answer is not back yet
        # when the commit leaves, which it refuses with STALE_MEMBER_EPOCH.
        script.assign(member.member_id, 2, {"t": [0, 1, 2, 3]})
        await member.commit_offsets({TopicPartition("t", 1): 6})
        assert member.generation_id == 2
        fetched = await member.fetch_committed(tps("t", 0, 1, 2), require_stable=True)
        member_id = member.member_id
    commits = [r.body for r in server.requests(ApiKey.OFFSET_COMMIT)]
    assert [(c["member_id"], c["generation_id_or_member_epoch"]) for c in commits] == [
        (member_id, 1),
        (member_id, 1),
        (member_id, 2),
    ]
    assert script.commits == {("t", 0): 5, ("t", 1): 6}
    assert {tp: value.offset for tp, value in fetched.items()} == {
        TopicPartition("t", 0): 5,
        TopicPartition("t", 1): 6,
    }
    (fetch,) = [r.body for r in server.requests(ApiKey.OFFSET_FETCH)]
    assert fetch["groups"][0]["member_id"] == member_id
    assert fetch["groups"][0]["member_epoch"] == 2
    assert fetch["require_stable"] is True


async def test_a_stale_commit_of_partitions_no_longer_held_fails(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    async with member_of(client, Events()) as member:
        await member.wait_for_assignment(5)
        script.assign(member.member_id, 2, {"t": [0, 1]})
        await wait_for(lambda: member.assignment == tps("t", 0, 1))
        # Not sent again: t-3 is another member's now.
        script.codes[ApiKey.OFFSET_COMMIT] = [ErrorCode.STALE_MEMBER_EPOCH]
        with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
            await member.commit_offsets({TopicPartition("t", 3): 1})
        script.codes[ApiKey.OFFSET_COMMIT] = [ErrorCode.FENCED_MEMBER_EPOCH]
        with pytest.raises(CommitFailedError, match="FENCED_MEMBER_EPOCH"):
            await member.commit_offsets({TopicPartition("t", 0): 1})
    assert len(server.requests(ApiKey.OFFSET_COMMIT)) == 2
    assert script.commits == {}


@pytest.mark.parametrize(
    "code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
)
async def test_coordinator_errors_are_retried_without_leaving_the_group(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
    client: CoordinatorClient,
    code: ErrorCode,
) -> None:
    server, script = group
    events = Events()
    async with member_of(client, events) as member:
        await member.wait_for_assignment(5)
        lookups = len(server.requests(ApiKey.FIND_COORDINATOR))
        script.codes[HEARTBEAT] = [code, code]
        count = len(heartbeats(server))
        await wait_for(lambda: len(heartbeats(server)) >= count + 4)
        assert member.generation_id == 1
        assert settled(member)
    if code == ErrorCode.NOT_COORDINATOR:
        assert len(server.requests(ApiKey.FIND_COORDINATOR)) > lookups
    assert events.log == [("assigned", tps("t", 0, 1, 2, 3)), ("revoked", tps("t", 0, 1, 2, 3))]


async def test_a_regex_subscription_is_the_coordinators_to_resolve(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    script.on_join = lambda member: {"t": [0], "u": [1]}
    async with member_of(client, Events(), topics=(), subscribed_topic_regex="[tu]") as member:
        assert await member.wait_for_assignment(5) == tps("t", 0) | tps("u", 1)
        assert member.subscribed_topic_regex == "[tu]"
        count = len(heartbeats(server))
        member.subscribe(["t"])
        await wait_for(lambda: len(heartbeats(server)) >= count + 3)
        assert member.topics == {"t"} and member.subscribed_topic_regex is None
        assert script.only_member().topics == ["t"] and script.only_member().regex is None
        bodies = heartbeats(server)
    join = bodies[0]
    assert join["subscribed_topic_regex"] == "[tu]"
    assert join["subscribed_topic_names"] == []
    # Dropping the regex sends it empty once; the names go with it.
    changes = [
        (b["subscribed_topic_regex"], b["subscribed_topic_names"])
        for b in bodies[1:]
        if b["subscribed_topic_regex"] is not None or b["subscribed_topic_names"] is not None
    ]
    assert changes == [("", ["t"])]


async def test_a_held_topic_keeps_its_name_and_a_topic_never_named_is_left_out(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup], client: CoordinatorClient
) -> None:
    server, script = group
    events = Events()
    async with member_of(client, events, topics=("t", "u")) as member:
        await member.wait_for_assignment(5)
        script.nameless = {"t"}
        script.assign(member.member_id, 2, {"t": [0, 1, 2, 3], "u": [0, 1]})
        await wait_for(lambda: member.generation_id == 2 and settled(member))
        script.nameless = {"u"}
        script.assign(member.member_id, 3, {"t": [0, 1, 2, 3]})
        await wait_for(lambda: member.generation_id == 3 and settled(member))
        assert member.assignment == tps("t", 0, 1, 2, 3)
        # A topic the member never held, without a name: not readable, not acknowledged.
        script.assign(member.member_id, 4, {"t": [0, 1, 2, 3], "u": [0]})
        await wait_for(lambda: member.generation_id == 4 and settled(member))
        assert member.assignment == tps("t", 0, 1, 2, 3)
        last_ack = [b for b in heartbeats(server) if b["topic_partitions"] is not None][-1]
    assert owned(last_ack, script) == set(tps("t", 0, 1, 2, 3))
    # The same assignment at epoch 2 (t by id only) was nothing to reconcile.
    assert events.log[1:] == [
        ("revoked", tps("u", 0, 1)),
        ("assigned", frozenset()),
        ("assigned", frozenset()),
        ("revoked", tps("t", 0, 1, 2, 3)),
    ]


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNSUPPORTED_VERSION,
    ],
)
async def test_errors_no_retry_can_fix_end_the_membership_and_lose_the_partitions(
    group: tuple[FakeCoordinator, ScriptedConsumerGroup],
    client: CoordinatorClient,
    code: ErrorCode,
) -> None:
    server, script = group
    events = Events()
    failures: list[GroupMemberError] = []
    member = member_of(client, events, on_error=failures.append)
    await member.start()
    try:
        await member.wait_for_assignment(5)
        script.codes[HEARTBEAT] = [code]
        with pytest.raises(GroupMemberError) as ended:
            while True:
                await member.wait_for_assignment(5)
                await asyncio.sleep(0.02)
        assert getattr(ended.value.__cause__, "code", None) is code
        assert failures == [member.error]
        await wait_for(lambda: len(events.log) == 2)
        assert events.log == [("assigned", tps("t", 0, 1, 2, 3)), ("lost", tps("t", 0, 1, 2, 3))]
        assert member.consumer_state is ConsumerMemberState.FATAL
        count = len(heartbeats(server))
        await asyncio.sleep(0.5)
        assert len(heartbeats(server)) == count
    finally:
        await member.close()
    # A failed member does not leave: the coordinator has already dropped it or refused it.
    assert heartbeats(server)[-1]["member_epoch"] != -1


async def test_a_coordinator_without_the_protocol_says_to_use_the_classic_one() -> None:
    def refuse(received: Received) -> dict[str, Any] | None:
        if received.api_key == HEARTBEAT:
            return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        return None

    async with FakeCoordinator(refuse) as server, CoordinatorClient(server.bootstrap) as client:
        member = member_of(client, Events())
        await member.start()
        with pytest.raises(GroupMemberError, match='group_protocol="classic"'):
            await member.wait_for_assignment(5)
        await member.close()


def test_options_of_one_protocol_are_refused_by_the_other() -> None:
    with pytest.raises(ValueError, match="group_protocol"):
        GroupMember("127.0.0.1:1", "g", ["t"], group_protocol="eager")
    with pytest.raises(ValueError, match="consumer protocol"):
        GroupMember("127.0.0.1:1", "g", ["t"], partitions_for_topics={}, server_assignor="range")
    with pytest.raises(ValueError, match="no client assignors"):
        GroupMember("127.0.0.1:1", "g", ["t"], group_protocol="consumer", partitions_for_topics={})
    with pytest.raises(ValueError, match="partitions_for_topics"):
        GroupMember("127.0.0.1:1", "g", ["t"], group_protocol="classic")


def test_the_consumer_protocol_is_the_default_unless_client_side_assignment_is_given() -> None:
    assert GroupMember("127.0.0.1:1", "g", ["t"]).group_protocol == "consumer"
    given_counts = GroupMember("127.0.0.1:1", "g", ["t"], partitions_for_topics={"t": 1})
    assert given_counts.group_protocol == "classic"
    given_assignors = GroupMember(
        "127.0.0.1:1", "g", ["t"], partitions_for_topics={"t": 1}, assignors=[RangeAssignor()]
    )
    assert given_assignors.group_protocol == "classic"
