"""GroupMember against a scripted coordinator, for what a real server rarely says on cue:
the exact requests of a two-step join, the heartbeat cadence, and how the member reacts to
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS and fatal errors."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from client_fake_server import FakeCoordinator, Received

from coordinator_client import CoordinatorClient, GroupMember, GroupMemberError
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import ConsumerProtocolSubscription
from coordinator_protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(30)

ALL = frozenset(TopicPartition("t", p) for p in range(4))


class ScriptedGroup:
    """A one-member group: hands out member ids, generations and the leader's own
    assignment; answers each API from a script of error codes first, then with success."""

    def __init__(self) -> None:
        self.ids = (f"m-{n}" for n in itertools.count(1))
        self.generation = 0
        self.scripts: dict[int, list[int]] = {}

    def next_code(self, api_key: int) -> int:
        script = self.scripts.get(api_key)
        return script.pop(0) if script else 0

    def __call__(self, received: Received) -> dict[str, Any] | None:
        body = received.body
        code = self.next_code(received.api_key)
        if received.api_key == ApiKey.JOIN_GROUP:
            if not body["member_id"] and body.get("group_instance_id") is None:
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": next(self.ids)}
            if code:
                return {"error_code": code, "member_id": ""}
            member_id = body["member_id"] or next(self.ids)
            self.generation += 1
            protocol = body["protocols"][0]
            return {
                "error_code": 0,
                "generation_id": self.generation,
                "protocol_type": "consumer",
                "protocol_name": protocol["name"],
                "leader": member_id,
                "skip_assignment": False,
                "member_id": member_id,
                "members": [
                    {
                        "member_id": member_id,
                        "group_instance_id": body.get("group_instance_id"),
                        "metadata": protocol["metadata"],
                    }
                ],
            }
        if received.api_key == ApiKey.SYNC_GROUP:
            if code:
                return {"error_code": code}
            (own,) = body["assignments"]
            return {"error_code": 0, "assignment": own["assignment"]}
        if received.api_key in (ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
            return {"error_code": code, "members": []}
        return None


@pytest.fixture
async def group() -> AsyncIterator[tuple[FakeCoordinator, ScriptedGroup]]:
    script = ScriptedGroup()
    async with FakeCoordinator(script) as server:
        yield server, script


@pytest.fixture
async def client(
    group: tuple[FakeCoordinator, ScriptedGroup],
) -> AsyncIterator[CoordinatorClient]:
    async with CoordinatorClient(group[0].bootstrap) as coordinator_client:
        yield coordinator_client


class Events:
    def __init__(self) -> None:
        self.log: list[str] = []

    async def revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append("revoked")

    async def assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append("assigned")

    async def lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append("lost")


def member_of(
    client: CoordinatorClient, events: Events, session_timeout_ms: int = 900, **options: Any
) -> GroupMember:
    return GroupMember(
        client,
        "g",
        ["t"],
        partitions_for_topics={"t": 4},
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=2000,
        on_partitions_revoked=events.revoked,
        on_partitions_assigned=events.assigned,
        on_partitions_lost=events.lost,
        retry_backoff_ms=10,
        **options,
    )


def joins(server: FakeCoordinator) -> list[tuple[str, str | None]]:
    return [(r.body["member_id"], r.body.get("group_instance_id"))
            for r in server.requests(ApiKey.JOIN_GROUP)]  # fmt: skip


async def wait_for(condition: Any, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_two_step_join_subscription_and_heartbeat_cadence(
    group: tuple[FakeCoordinator, ScriptedGroup], client: CoordinatorClient
) -> None:
    server, _ = group
    events = Events()
    async with member_of(client, events) as member:
        assert await member.wait_for_assignment(5) == ALL
        await asyncio.sleep(1.0)
    assert joins(server) == [("", None), ("m-1", None)]
    (first, second) = server.requests(ApiKey.JOIN_GROUP)
    assert first.body["session_timeout_ms"] == 900
    assert first.body["rebalance_timeout_ms"] == 2000
    assert first.body["protocol_type"] == "consumer"
    (protocol,) = second.body["protocols"]
    assert protocol["name"] == "range"
    assert ConsumerProtocolSubscription.decode(protocol["metadata"]).topics == ["t"]
    beats = [r.at for r in server.requests(ApiKey.HEARTBEAT)]
    # A third of the session timeout apart (with room above for a loaded machine; never
    # sooner).
    assert 2 <= len(beats) <= 4
    for earlier, later in itertools.pairwise(beats):
        assert 0.28 <= later - earlier <= 0.8
    # A dynamic member leaves when closed.
    (leave,) = server.requests(ApiKey.LEAVE_GROUP)
    assert leave.body["members"][0]["member_id"] == "m-1"
    assert events.log == ["assigned", "revoked"]


async def test_illegal_generation_resets_the_member_id_and_loses_the_partitions(
    group: tuple[FakeCoordinator, ScriptedGroup], client: CoordinatorClient
) -> None:
    server, script = group
    script.scripts[ApiKey.HEARTBEAT] = [ErrorCode.ILLEGAL_GENERATION]
    events = Events()
    async with member_of(client, events) as member:
        await member.wait_for_assignment(5)
        await wait_for(lambda: member.generation_id == 2 and member.member_id == "m-2")
        assert await member.wait_for_assignment(5) == ALL
    assert joins(server) == [("", None), ("m-1", None), ("", None), ("m-2", None)]
    assert events.log == ["assigned", "lost", "assigned", "revoked"]


async def test_unknown_member_id_from_sync_group_resets_and_rejoins(
    group: tuple[FakeCoordinator, ScriptedGroup], client: CoordinatorClient
) -> None:
    server, script = group
    script.scripts[ApiKey.SYNC_GROUP] = [ErrorCode.UNKNOWN_MEMBER_ID]
    events = Events()
    async with member_of(client, events) as member:
        assert await member.wait_for_assignment(5) == ALL
        assert member.member_id == "m-2"
    assert joins(server) == [("", None), ("m-1", None), ("", None), ("m-2", None)]
    # Nothing had been assigned before the failed sync: nothing to revoke or lose.
    assert events.log == ["assigned", "revoked"]


async def test_rebalance_in_progress_revokes_and_rejoins_with_the_same_member_id(
    group: tuple[FakeCoordinator, ScriptedGroup], client: CoordinatorClient
) -> None:
    server, script = group
    script.scripts[ApiKey.HEARTBEAT] = [ErrorCode.REBALANCE_IN_PROGRESS]
    events = Events()
    async with member_of(client, events) as member:
        await member.wait_for_assignment(5)
        await wait_for(lambda: member.generation_id == 2)
        assert await member.wait_for_assignment(5) == ALL
    assert joins(server) == [("", None), ("m-1", None), ("m-1", None)]
    assert events.log == ["assigned", "revoked", "assigned", "revoked"]


async def test_a_static_member_joins_in_one_step_and_does_not_leave(
    group: tuple[FakeCoordinator, ScriptedGroup], client: CoordinatorClient
) -> None:
    server, _ = group
    async with member_of(client, Events(), group_instance_id="i-1") as member:
        assert await member.wait_for_assignment(5) == ALL
    assert joins(server) == [("", "i-1")]
    assert server.requests(ApiKey.LEAVE_GROUP) == []


@pytest.mark.parametrize(
    ("api_key", "code"),
    [
        (ApiKey.JOIN_GROUP, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        (ApiKey.JOIN_GROUP, ErrorCode.GROUP_MAX_SIZE_REACHED),
        (ApiKey.SYNC_GROUP, ErrorCode.FENCED_INSTANCE_ID),
        (ApiKey.HEARTBEAT, ErrorCode.FENCED_INSTANCE_ID),
    ],
)
async def test_errors_no_retry_can_fix_end_the_membership(
    group: tuple[FakeCoordinator, ScriptedGroup],
    client: CoordinatorClient,
    api_key: ApiKey,
    code: ErrorCode,
) -> None:
    _, script = group
    script.scripts[api_key] = [code]
    failures: list[GroupMemberError] = []
    member = member_of(client, Events(), group_instance_id="i-1", on_error=failures.append)
    await member.start()
    try:
        with pytest.raises(GroupMemberError) as ended:
            while True:
                await member.wait_for_assignment(5)
                await asyncio.sleep(0.05)
        assert getattr(ended.value.__cause__, "code", None) is code
        assert failures and failures[0] is member.error
    finally:
        await member.close()
