"""The README's Python code runs as written: each block, in a Python process of its own,
against a real server process (and, for the consumer, a real Apache Kafka broker). Only the
addresses (`localhost:9094` for the server, `localhost:9092` for Kafka) and the topic
(`"orders"`) are replaced by the test's own, so that the front door cannot rot."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker
from markdown_docs import README, code_blocks
from server_process import ServerProcess, sqlite_args

from coordinator_client import CoordinatorClient

COORDINATOR = "localhost:9094"
KAFKA = "localhost:9092"
TOPIC = '"orders"'
PARTITIONS = 3
RECORD_LINE = re.compile(r"^(\d+) (\d+) b'(.*)'$")


def readme_block(constructor: str) -> str:
    """The README's one Python block that builds `constructor`."""
    (block,) = [code for code in code_blocks(README, "python") if f"{constructor}(" in code]
    return block


def as_run(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in code, f"the README's example no longer uses {old}"
        code = code.replace(old, new)
    return code


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_readme_has_both_examples() -> None:
    blocks = code_blocks(README, "python")
    assert len(blocks) == 2
    assert readme_block("GroupMember") != readme_block("CoordinatedConsumer")


@pytest.mark.timeout(120)
def test_the_group_member_example_runs_as_written(tmp_path: Path) -> None:
    with ServerProcess(sqlite_args(tmp_path / "data")) as server:
        code = as_run(readme_block("GroupMember"), {COORDINATOR: f"127.0.0.1:{server.port}"})
        result = subprocess.run(python(code), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "assigned: [0, 1, 2]" in result.stdout
    assert re.search(
        r"committed: \{TopicPartition\(topic='orders', partition=0\): "
        r"OffsetAndMetadata\(offset=42, metadata=''\)\}",
        result.stdout,
    ), result.stdout


async def create_and_fill(broker: KafkaBroker, topic: str, per_partition: int) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    values = set()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for partition in range(PARTITIONS):
            for i in range(per_partition):
                value = f"{partition}-{i}"
                await producer.send_and_wait(topic, value.encode(), partition=partition)
                values.add(value)
    finally:
        await producer.stop()
    return values


@pytest.mark.timeout(180)
async def test_the_consumer_example_reads_every_record_and_commits_when_stopped(
    tmp_path: Path, kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    per_partition = 2
    produced = await create_and_fill(kafka_broker, unique_topic, per_partition)
    with ServerProcess(sqlite_args(tmp_path / "data")) as server:
        coordinator = f"127.0.0.1:{server.port}"
        code = as_run(
            readme_block("CoordinatedConsumer"),
            {COORDINATOR: coordinator, KAFKA: kafka_broker.bootstrap, TOPIC: f'"{unique_topic}"'},
        )
        consumer = await asyncio.create_subprocess_exec(
            *python(code),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert consumer.stdout is not None and consumer.stderr is not None
        consumed: set[str] = set()
        try:
            deadline = time.monotonic() + 60
            while consumed != produced:
                line = await asyncio.wait_for(
                    consumer.stdout.readline(), max(deadline - time.monotonic(), 0.1)
                )
                assert line, "the consumer ended: " + (await consumer.stderr.read()).decode()
                match = RECORD_LINE.match(line.decode().strip())
                assert match, line
                consumed.add(match[3])
            # Ctrl-C, as the reader would stop it: the consumer commits what it consumed.
            os.kill(consumer.pid, signal.SIGINT)
            await asyncio.wait_for(consumer.wait(), 30)
        finally:
            if consumer.returncode is None:
                consumer.kill()
                await consumer.wait()
        async with CoordinatorClient(coordinator) as client:
            committed = await client.fetch_offsets("billing")
    assert consumed == produced
    assert {tp: meta.offset for tp, meta in committed.items()} == {
        TopicPartition(unique_topic, partition): per_partition for partition in range(PARTITIONS)
    }
