"""A classic member and a consumer-protocol member of the client library in one group, on a
real server (embedded log, topics from a topics file): the consumer member's join upgrades
the classic group online, both then own disjoint partitions covering the topic, the group
goes back to a classic group when the consumer member leaves, the committed offsets stay
throughout, and the group's log replays to the same group after a restart."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from server_process import ServerProcess, sqlite_args

from coordinator_client import CoordinatorClient, GroupMember
from coordinator_protocol.consumer_groups import MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER

pytestmark = pytest.mark.timeout(120)

GROUP = "migrating-readers"
TOPIC = "orders"
PARTITIONS = 4
EVERYTHING = frozenset(TopicPartition(TOPIC, p) for p in range(PARTITIONS))
SESSION_MS = 1_500


def serve_args(data_dir: Path, topics: Path) -> list[str]:
    return sqlite_args(
        data_dir,
        "--group-consumer-topics-file",
        str(topics),
        "--group-min-session-timeout-ms",
        "500",
        "--group-initial-rebalance-delay-ms",
        "0",
        "--group-consumer-min-session-timeout-ms",
        "500",
        "--group-consumer-session-timeout-ms",
        str(SESSION_MS),
        "--group-consumer-min-heartbeat-interval-ms",
        "100",
        "--group-consumer-heartbeat-interval-ms",
        "200",
    )


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_classic_group_upgrades_shares_its_partitions_and_downgrades(
    tmp_path: Path,
) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({TOPIC: PARTITIONS}))
    data = tmp_path / "data"
    with ServerProcess(serve_args(data, topics)) as server:
        bootstrap = f"{server.host}:{server.port}"
        async with CoordinatorClient(bootstrap, retry_backoff_ms=20) as client:
            classic = GroupMember(
                client,
                GROUP,
                [TOPIC],
                partitions_for_topics={TOPIC: PARTITIONS},
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=10_000,
            )
            consumer = GroupMember(client, GROUP, [TOPIC], group_protocol="consumer")
            await classic.start()
            assert await classic.wait_for_assignment(30) == EVERYTHING
            await classic.commit_offsets({TopicPartition(TOPIC, p): 100 + p for p in range(4)})
            assert (await client.describe_group(GROUP)).protocol_type == "consumer"

            # The consumer member's join upgrades the group: both end up owning a part.
            await consumer.start()

            def shared() -> bool:
                mine, theirs = classic.assignment, consumer.assignment
                return bool(mine and theirs) and mine | theirs == EVERYTHING and not mine & theirs

            await wait_until(shared, "the two members to share the topic")
            described = await client.describe_consumer_group(GROUP)
            types = {member.member_id: member.member_type for member in described.members}
            assert types == {
                classic.member_id: MEMBER_TYPE_CLASSIC,
                consumer.member_id: MEMBER_TYPE_CONSUMER,
            }
            (listed,) = await client.list_all_groups()
            assert (listed.group_id, listed.group_type) == (GROUP, "consumer")
            # Each commits as a member: the classic one at its generation, its member epoch.
            await classic.commit_offsets({tp: 200 + tp.partition for tp in classic.assignment})
            await consumer.commit_offsets({tp: 300 + tp.partition for tp in consumer.assignment})
            committed = await client.fetch_offsets(GROUP)
            expected = {
                tp: OffsetAndMetadata((200 if tp in classic.assignment else 300) + tp.partition, "")
                for tp in EVERYTHING
            }
            assert committed == expected

            # The consumer member leaves: the group is a classic group again, which
            # rebalances, and the classic member takes everything.
            await consumer.close()
            await wait_until(
                lambda: classic.assignment == EVERYTHING, "the classic member to take all"
            )
            group = await client.describe_group(GROUP)
            assert (group.group_state, group.protocol_type, group.protocol_data) == (
                "Stable",
                "consumer",
                "range",
            )
            assert [member.member_id for member in group.members] == [classic.member_id]
            (listed,) = await client.list_all_groups()
            assert listed.group_type == "classic"
            assert await client.fetch_offsets(GROUP) == expected
            await classic.commit_offsets({TopicPartition(TOPIC, 0): 400})
            expected[TopicPartition(TOPIC, 0)] = OffsetAndMetadata(400, "")
            # The member stops without leaving: the group stays as it is in the log.
            await classic.close(leave_group=False)
            before = await client.describe_group(GROUP)
            assert "Traceback" not in server.output(), server.output()

    # A restart replays the log (the upgrade's records, the downgrade's) to the same group.
    with ServerProcess(serve_args(data, topics)) as server:
        async with CoordinatorClient(f"{server.host}:{server.port}") as client:
            after = await client.describe_group(GROUP)
            assert (after.group_state, after.protocol_data) == ("Stable", "range")
            assert [(m.member_id, m.member_assignment) for m in after.members] == [
                (m.member_id, m.member_assignment) for m in before.members
            ]
            assert await client.fetch_offsets(GROUP) == expected
            (listed,) = await client.list_all_groups()
            assert listed.group_type == "classic"
