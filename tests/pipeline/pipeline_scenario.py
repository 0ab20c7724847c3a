"""A known history, produced through a real server over the wire contract.

Group `orders-app` (a consumer group of wire-level members) rebalances four times and its
members commit in three generations; then the group empties and an operator rewinds one
partition with the admin tool (`coordinator-server groups reset-offsets`). Group `billing`
only stores offsets (simple commits). `ExpectedHistory` is what the pipeline must find.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.errors import ErrorCode

DATA_PARTITIONS = 4
CONSUMER_GROUP = "orders-app"
SIMPLE_GROUP = "billing"
SIMPLE_TOPIC = "payments"
REWOUND_PARTITION = 0
REWOUND_TO = 5


def server_group_args(*extra: str) -> list[str]:
    """Settings that make rebalances quick and deterministic."""
    return [
        "--port", "0",
        "--offsets-topic-partitions", "4",
        "--group-initial-rebalance-delay-ms", "0",
        "--group-min-session-timeout-ms", "500",
        *extra,
    ]  # fmt: skip


@dataclass
class Member:
    """One consumer's side of the classic protocol, as bare wire calls."""

    client: WireClient
    group: str
    topic: str
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    joined_members: list[dict[str, Any]] = field(default_factory=list)
    assignment: list[int] = field(default_factory=list)

    def _join_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group,
            "session_timeout_ms": 30_000,
            "rebalance_timeout_ms": 30_000,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [
                {"name": "range", "metadata": ConsumerProtocolSubscription([self.topic]).encode()}
            ],
            "reason": None,
        }

    async def get_member_id(self) -> None:
        """KIP-394's first step: the server hands out the member id and waits for the real
        join, which starts the rebalance."""
        response = await self.client.call(ApiKey.JOIN_GROUP, self._join_body())
        assert response["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, response
        self.member_id = response["member_id"]

    async def join(self) -> None:
        if not self.member_id:
            await self.get_member_id()
        response = await self.client.call(ApiKey.JOIN_GROUP, self._join_body(), timeout=60)
        assert response["error_code"] == 0, response
        self.generation = response["generation_id"]
        self.leader = response["leader"]
        self.joined_members = response["members"]

    async def sync(self) -> None:
        assignments = []
        if self.member_id == self.leader:
            ordered = sorted(m["member_id"] for m in self.joined_members)
            for index, member_id in enumerate(ordered):
                owned = [p for p in range(DATA_PARTITIONS) if p % len(ordered) == index]
                assignments.append(
                    {
                        "member_id": member_id,
                        "assignment": ConsumerProtocolAssignment(
                            [TopicPartitions(self.topic, owned)]
                        ).encode(),
                    }
                )
        response = await self.client.call(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": assignments,
            },
            timeout=60,
        )
        assert response["error_code"] == 0, response
        decoded = ConsumerProtocolAssignment.decode(response["assignment"])
        self.assignment = sorted(p for tp in decoded.partitions for p in tp.partitions)

    async def commit(self, offset: int) -> list[tuple[str, int, int]]:
        body = commit_body(
            self.group, dict.fromkeys(((self.topic, p) for p in self.assignment), offset)
        )
        body["generation_id_or_member_epoch"] = self.generation
        body["member_id"] = self.member_id
        response = await self.client.call(ApiKey.OFFSET_COMMIT, body)
        assert set(commit_errors(response).values()) == {0}, response
        return [(self.topic, p, offset) for p in self.assignment]

    async def leave(self) -> None:
        response = await self.client.call(
            ApiKey.LEAVE_GROUP,
            {
                "group_id": self.group,
                "members": [
                    {"member_id": self.member_id, "group_instance_id": None, "reason": "done"}
                ],
            },
        )
        assert response["error_code"] == 0, response


@dataclass
class ExpectedHistory:
    topic: str
    # group -> the (topic, partition, offset) of every commit, in order.
    commits: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    # (group, topic, partition, previous offset, new offset)
    regressions: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    # group -> [(generation, member count)] of each rebalance, in order.
    rebalances: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # (group, topic, partition) -> the final committed offset.
    final_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    member_names: dict[str, str] = field(default_factory=dict)

    def add_commits(self, group: str, commits: list[tuple[str, int, int]]) -> None:
        self.commits.setdefault(group, []).extend(commits)
        for topic, partition, offset in commits:
            self.final_offsets[(group, topic, partition)] = offset


async def group_state(client: WireClient, group: str) -> str:
    response = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
    state: str = response["groups"][0]["group_state"]
    return state


async def wait_for_state(client: WireClient, group: str, state: str) -> None:
    for _ in range(400):
        if await group_state(client, group) == state:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{group} never reached {state}")


async def simple_commit(
    client: WireClient, group: str, offsets: dict[tuple[str, int], int]
) -> list[tuple[str, int, int]]:
    response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, offsets))
    assert set(commit_errors(response).values()) == {0}, response
    return [(topic, partition, offset) for (topic, partition), offset in offsets.items()]


def reset_offsets(process: ServerProcess, group: str, topic: str, partition: int, to: int) -> None:
    """The operator's rewind, with the admin tool."""
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "groups", "reset-offsets", group,
            "--bootstrap-server", f"{process.host}:{process.port}",
            "--topic", f"{topic}:{partition}", "--to-offset", str(to), "--execute",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr


async def produce_known_history(
    process: ServerProcess, topic: str, simple_topic: str = SIMPLE_TOPIC
) -> ExpectedHistory:
    expected = ExpectedHistory(topic)
    admin = await WireClient.connect(process.host, process.port)
    first = await WireClient.connect(process.host, process.port)
    second = await WireClient.connect(process.host, process.port)
    try:
        a = Member(first, CONSUMER_GROUP, topic)
        b = Member(second, CONSUMER_GROUP, topic)

        # Generation 1: a alone, owning every partition.
        await a.join()
        await a.sync()
        assert a.generation == 1 and a.assignment == list(range(DATA_PARTITIONS))
        expected.rebalances.setdefault(CONSUMER_GROUP, []).append((1, 1))
        expected.add_commits(CONSUMER_GROUP, await a.commit(10))

        # Generation 2: b joins; its join parks the group until a rejoins too.
        await b.get_member_id()
        b_join = asyncio.create_task(b.join())
        await wait_for_state(admin, CONSUMER_GROUP, "PreparingRebalance")
        await asyncio.gather(a.join(), b_join)
        await asyncio.gather(a.sync(), b.sync())
        assert a.generation == b.generation == 2
        expected.rebalances[CONSUMER_GROUP].append((2, 2))
        expected.add_commits(CONSUMER_GROUP, await a.commit(20))
        expected.add_commits(CONSUMER_GROUP, await b.commit(20))

        # Generation 3: b leaves, a rejoins alone.
        await b.leave()
        await a.join()
        await a.sync()
        assert a.generation == 3 and a.assignment == list(range(DATA_PARTITIONS))
        expected.rebalances[CONSUMER_GROUP].append((3, 1))
        expected.add_commits(CONSUMER_GROUP, await a.commit(30))

        # Generation 4: a leaves and the group is Empty.
        await a.leave()
        await wait_for_state(admin, CONSUMER_GROUP, "Empty")
        expected.rebalances[CONSUMER_GROUP].append((4, 0))

        # The operator's rewind of one partition, on the empty group.
        reset_offsets(process, CONSUMER_GROUP, topic, REWOUND_PARTITION, REWOUND_TO)
        expected.add_commits(CONSUMER_GROUP, [(topic, REWOUND_PARTITION, REWOUND_TO)])
        expected.regressions.append((CONSUMER_GROUP, topic, REWOUND_PARTITION, 30, REWOUND_TO))

        # A consumer that only stores offsets, moving forwards.
        for offset in (100, 200):
            expected.add_commits(
                SIMPLE_GROUP,
                await simple_commit(
                    admin, SIMPLE_GROUP, {(simple_topic, 0): offset, (simple_topic, 1): offset}
                ),
            )
        expected.member_names = {a.member_id: "a", b.member_id: "b"}
    finally:
        for client in (admin, first, second):
            await client.close()
    return expected


def self_signed_ca(directory: Path) -> Path:
    """A CA of its own in `directory` (ca.pem): one no broker of the tests is signed by."""
    ca = directory / "ca.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=some-ca", "-keyout", str(directory / "ca.key"), "-out", str(ca),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return ca


async def write_sqlite_log(path: Path, records: list[tuple[Any, int]]) -> None:
    """A SQLite log of one partition holding `records` (each a record and the time the log
    wrote it, in ms), written by the server's own SqliteLog."""
    import sqlite3

    from coordinator_server.records import encode_record
    from coordinator_server.storage.sqlite import SqliteLog

    log = SqliteLog(path, 1)
    await log.start()
    try:
        for record, _ in records:
            await log.append(0, [encode_record(record)])
    finally:
        await log.close()
    # The log stamps a batch with the time it is written: the history's times are set here.
    with sqlite3.connect(path) as connection:
        connection.executemany(
            'UPDATE records SET timestamp_ms = ? WHERE "partition" = 0 AND "offset" = ?',
            [(timestamp_ms, offset) for offset, (_, timestamp_ms) in enumerate(records)],
        )
    connection.close()
