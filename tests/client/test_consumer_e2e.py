"""The whole story against a real Kafka-protocol broker and a real server process:

1. three consumers (one in a process of its own) read a 12-partition topic of 30,000
   records, joining while it is written; every record is processed exactly once;
2. the child process is killed (SIGKILL: no commit, no LeaveGroup); after its session
   timeout the other two take over its partitions from its last committed offsets, and no
   record is lost;
3. a fourth consumer joins and the partitions are spread evenly again (sticky: the others
   only give partitions up);
4. the admin tool, as a real `python -m coordinator_server groups` process, lists and
   describes the group, shows the lag going to zero, refuses to reset a group with
   members, and resets a stopped group so that its records are read again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatedConsumer, CoordinatorClient, StickyAssignor

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "consumer_child.py"
PARTITIONS = 12
SESSION_MS = 3000
AUTO_COMMIT_MS = 200

Record = tuple[int, int]  # (partition, offset)


def server_args(broker: KafkaBroker, offsets_topic: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", offsets_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--group-min-session-timeout-ms", "500",
        "--group-initial-rebalance-delay-ms", "0",
    ]  # fmt: skip


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Producer:
    """Writes records round-robin over the partitions; counts what it wrote."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.written = 0

    async def produce(self, count: int, *, chunk: int = 1000, pause_s: float = 0.0) -> None:
        for start in range(0, count, chunk):
            futures = [
                await self.producer.send(
                    self.topic,
                    value=str(self.written + i).encode(),
                    partition=(self.written + i) % PARTITIONS,
                )
                for i in range(min(chunk, count - start))
            ]
            await asyncio.gather(*futures)
            self.written += len(futures)
            if pause_s:
                await asyncio.sleep(pause_s)

    def end_offset(self) -> int:
        """Every partition's log end (the producer spreads records evenly)."""
        assert self.written % PARTITIONS == 0
        return self.written // PARTITIONS


class InProcessConsumer:
    def __init__(self, name: str, broker: KafkaBroker, coordinator: str, group: str, topic: str):
        self.name = name
        self.records: list[Record] = []
        self.consumer = CoordinatedConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            coordinator_bootstrap_servers=coordinator,
            group_id=group,
            client_id=f"consumer-{name}",
            auto_offset_reset="earliest",
            auto_commit_interval_ms=AUTO_COMMIT_MS,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=SESSION_MS // 3,
            max_poll_interval_ms=10_000,
            partition_assignment_strategy=[StickyAssignor()],
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> InProcessConsumer:
        await self.consumer.start()
        self.task = asyncio.create_task(self._consume())
        return self

    async def _consume(self) -> None:
        async for record in self.consumer:
            self.records.append((record.partition, record.offset))

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        await self.consumer.stop()
        if self.task is not None:
            await self.task


class ChildConsumer:
    """consumer_child.py in its own process; its stdout tells what it did."""

    def __init__(self, coordinator: str, broker: KafkaBroker, group: str, topic: str) -> None:
        self.args = [
            "--coordinator", coordinator, "--kafka", broker.bootstrap, "--group", group,
            "--topic", topic, "--session-timeout-ms", str(SESSION_MS),
            "--auto-commit-interval-ms", str(AUTO_COMMIT_MS),
        ]  # fmt: skip
        self.records: list[Record] = []
        self.assignments: list[set[int]] = []
        self.process: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None

    async def start(self) -> ChildConsumer:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(CHILD), *self.args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )  # fmt: skip
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        async for raw in self.process.stdout:
            kind, _, rest = raw.decode().strip().partition(" ")
            if kind == "R":
                partition, offset = rest.split()
                self.records.append((int(partition), int(offset)))
            elif kind == "A":
                self.assignments.append({int(p) for p in rest.split(",") if p})

    def partitions(self) -> set[int]:
        return self.assignments[-1] if self.assignments else set()

    async def slow_down(self, ms: int) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(f"slow {ms}\n".encode())
        await self.process.stdin.drain()

    async def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        if self.reader is not None:
            await self.reader

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            await self.kill()
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()


async def run_admin(server: ServerProcess, broker: KafkaBroker, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coordinator_server", "groups", *args,
        "--bootstrap-server", f"{server.host}:{server.port}",
        "--kafka-bootstrap-servers", broker.bootstrap,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def admin_json(server: ServerProcess, broker: KafkaBroker, *args: str) -> Any:
    code, stdout, stderr = await run_admin(server, broker, *args, "--json")
    assert code == 0, stderr
    return json.loads(stdout)


def lags(offsets: dict[str, Any]) -> dict[int, int | None]:
    return {row["partition"]: row["lag"] for row in offsets["partitions"]}


@pytest.fixture
async def topic(kafka_broker: KafkaBroker, unique_topic: str) -> AsyncIterator[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(unique_topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    yield unique_topic


async def test_consumer_group_end_to_end(kafka_broker: KafkaBroker, topic: str) -> None:
    group = f"{topic}-group"
    server = ServerProcess(server_args(kafka_broker, f"{topic}-offsets"))
    await asyncio.to_thread(server.start)
    coordinator = f"{server.host}:{server.port}"
    producer = Producer(kafka_broker.bootstrap, topic)
    await producer.producer.start()
    client = CoordinatorClient(coordinator)
    child = ChildConsumer(coordinator, kafka_broker, group, topic)
    consumers: list[InProcessConsumer] = []

    def consumer(name: str) -> InProcessConsumer:
        made = InProcessConsumer(name, kafka_broker, coordinator, group, topic)
        consumers.append(made)
        return made

    def processed() -> Counter[Record]:
        return Counter([r for c in consumers for r in c.records] + child.records)

    def all_records(start: int, end: int) -> set[Record]:
        return {(p, o) for p in range(PARTITIONS) for o in range(start, end)}

    try:
        # 1. Three consumers, joining while the topic is written: exactly once.
        a = await consumer("a").start()
        await a.consumer.wait_for_assignment(30)
        b = await consumer("b").start()
        await producer.produce(15_000, pause_s=0.05)
        await child.start()
        await wait_until(lambda: bool(child.partitions()), 60, "the child's assignment")
        await producer.produce(15_000, pause_s=0.05)
        await wait_until(lambda: len(processed()) >= 30_000, 60, "30,000 records")
        await asyncio.sleep(0.5)  # anything extra would show up now
        counts = processed()
        assert set(counts) == all_records(0, 2500)
        assert max(counts.values()) == 1, "a record was processed twice"
        assert a.records and b.records and child.records, "all three consumed"
        await wait_until(
            lambda: (
                sorted(len(x) for x in (a.partitions(), b.partitions(), child.partitions()))
                == [4, 4, 4]
            ),
            30,
            "an even spread over three",
        )
        phase_one = Counter(counts)

        # 2. The child dies mid-stream, holding records it processed but did not commit.
        await child.slow_down(5)
        await producer.produce(6000)
        child_partitions = child.partitions()
        await wait_until(
            lambda: sum(1 for p, o in child.records if o >= 2500) >= 200,
            30,
            "the child's progress",
        )
        await asyncio.sleep(3 * AUTO_COMMIT_MS / 1000)
        await child.kill()
        killed_at = time.monotonic()
        # A commit the child sent just before dying is still applied; the survivors cannot
        # take over before the child's session expires, seconds later. require_stable: a
        # commit still on its way to the log counts too.
        await asyncio.sleep(1.0)
        committed = await client.fetch_offsets(
            group, [TopicPartition(topic, p) for p in child_partitions], require_stable=True
        )
        committed_at_kill = {tp.partition: value.offset for tp, value in committed.items()}
        child_last = {p: max(o for q, o in child.records if q == p) for p in child_partitions}
        assert sum(committed_at_kill[p] - 2500 for p in child_partitions) > 0

        await wait_until(lambda: set(processed()) >= all_records(0, 3000), 60, "no record lost")
        takeover = {
            p: min(o for c in consumers for q, o in c.records if q == p and o >= 2500)
            for p in child_partitions
        }
        # The survivors start exactly at the child's last commit, nowhere else.
        assert takeover == committed_at_kill
        takeover_s = time.monotonic() - killed_at
        assert a.partitions() | b.partitions() == set(range(PARTITIONS))
        assert len(a.partitions()) == len(b.partitions()) == 6
        # What was read twice is exactly what the child processed after its last commit.
        twice = {r for r, n in (processed() - phase_one).items() if n > 1}
        expected_twice = {
            (p, o) for p in child_partitions for o in range(committed_at_kill[p], child_last[p] + 1)
        }
        assert twice == expected_twice
        print(f"\nkill -> partitions taken over within {takeover_s:.2f} s "
              f"(session timeout {SESSION_MS} ms); {len(twice)} records read twice")  # fmt: skip

        # 3. A fourth consumer joins: an even spread again, the others only give up.
        before = {c.name: c.partitions() for c in (a, b)}
        d = await consumer("d").start()
        await wait_until(
            lambda: (
                [len(c.partitions()) for c in (a, b, d)] == [4, 4, 4]
                and a.consumer.member.generation_id == d.consumer.member.generation_id
            ),
            60,
            "an even spread over a, b and d",
        )
        assert a.partitions() <= before["a"] and b.partitions() <= before["b"]
        assert a.partitions() | b.partitions() | d.partitions() == set(range(PARTITIONS))
        mark = processed()
        await producer.produce(1200)
        await wait_until(lambda: set(processed()) >= all_records(0, 3100), 30, "1,200 more")
        await asyncio.sleep(0.5)
        new = processed() - mark
        assert set(new) == all_records(3000, 3100) and max(new.values()) == 1

        # 4. The admin tool.
        listed = await admin_json(server, kafka_broker, "list")
        assert {"group_id": group, "state": "Stable", "protocol_type": "consumer",
                "group_type": "classic"} in listed  # fmt: skip
        code, table, _ = await run_admin(server, kafka_broker, "describe", group)
        assert code == 0 and group in table and "Stable" in table and "sticky" in table
        described = await admin_json(server, kafka_broker, "describe", group)
        assert described["state"] == "Stable" and described["protocol"] == "sticky"
        assert len(described["members"]) == 3
        spread = sorted(len(m["assignment"][0]["partitions"]) for m in described["members"])
        assert spread == [4, 4, 4]
        assert {m["client_id"] for m in described["members"]} == {
            "consumer-a", "consumer-b", "consumer-d"
        }  # fmt: skip

        for c in (a, b, d):
            await c.stop()
        await producer.produce(1200)
        offsets = await admin_json(server, kafka_broker, "offsets", group)
        assert offsets["state"] == "Empty"
        assert lags(offsets) == dict.fromkeys(range(PARTITIONS), 100)
        code, table, _ = await run_admin(server, kafka_broker, "offsets", group)
        assert code == 0 and "LOG-END-OFFSET" in table and "3200" in table

        e = await consumer("e").start()
        seen_lags = [sum(lags(offsets).values())]

        async def lag_is_zero() -> bool:
            result = await admin_json(server, kafka_broker, "offsets", group)
            seen_lags.append(sum(v or 0 for v in lags(result).values()))
            return set(lags(result).values()) == {0}

        deadline = time.monotonic() + 60
        while not await lag_is_zero():
            assert time.monotonic() < deadline, seen_lags
            await asyncio.sleep(0.2)
        assert seen_lags[0] == 1200 and seen_lags[-1] == 0

        code, _, error = await run_admin(
            server, kafka_broker, "reset-offsets", group, "--topic", topic, "--to-earliest",
            "--execute",
        )  # fmt: skip
        assert code == 1 and "inactive" in error and "Stable" in error
        await e.stop()

        plan = await admin_json(
            server, kafka_broker, "reset-offsets", group, "--topic", topic, "--to-earliest"
        )
        assert plan["executed"] is False
        assert {
            (r["partition"], r["current_offset"], r["new_offset"]) for r in plan["partitions"]
        } == {(p, 3200, 0) for p in range(PARTITIONS)}
        still = await client.fetch_offsets(group)
        assert {v.offset for v in still.values()} == {3200}
        executed = await admin_json(
            server, kafka_broker, "reset-offsets", group, "--topic", topic, "--to-earliest",
            "--execute",
        )  # fmt: skip
        assert executed["executed"] is True
        assert {v.offset for v in (await client.fetch_offsets(group)).values()} == {0}

        f = await consumer("f").start()
        await wait_until(lambda: len(set(f.records)) >= 3200 * PARTITIONS, 60, "everything again")
        assert set(f.records) == all_records(0, 3200)
        await f.stop()
    finally:
        for c in consumers:
            await c.stop()
        await child.close()
        await client.close()
        await producer.producer.stop()
        await asyncio.to_thread(server.kill)
