"""`coordinator-server transactions` (Kafka's kafka-transactions) against a real
coordinator-server on Apache Kafka: `list` and `describe` show an ongoing and a completed
transaction; a hanging transaction (a transactional batch of a producer id no coordinator
knows, as a producer whose coordinator lost it would leave) is found by `find-hanging`, not
confused with the ongoing one, and `abort` ends it: the partition's last stable offset passes
it and a read_committed consumer reads on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from test_transactions_kafka import coordinator, create_topic, producer

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.transactions import DescribeTransactionsRequest
from coordinator_server.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


class Tool:
    """Runs the command line (in a thread: it runs its own event loop) and reads its output."""

    def __init__(
        self, broker: ApacheKafkaBroker, server: ServerProcess, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.options = [
            "--bootstrap-server", f"{server.host}:{server.port}",
            "--kafka-bootstrap-servers", broker.bootstrap,
            "--timeout-ms", "10000",
        ]  # fmt: skip
        self.capsys = capsys

    async def run(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = await asyncio.to_thread(main, ["transactions", *args, *self.options])
        out, err = self.capsys.readouterr()
        return code, out, err

    async def json(self, *args: str) -> Any:
        code, out, err = await self.run(*args, "--json")
        assert code == 0, err
        return json.loads(out)


def hanging_batch(producer_id: int, value: bytes) -> bytes:
    """A transactional batch at epoch 0, sequence 0, of a producer id no coordinator knows."""
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, 0, 0, 1 << 20)
    builder.append(0, int(time.time() * 1000), value, value, [])
    return bytes(builder.build())


async def produce_hanging(
    bootstrap: str, topic: str, partition: int, producer_id: int
) -> tuple[int, int]:
    """Writes the batch to the (single-broker) cluster; returns its offset and the broker's
    id."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        request = ProduceRequest(
            "hanging", -1, 10_000, [(topic, [(partition, hanging_batch(producer_id, b"hang"))])]
        )
        node_id = next(iter(client.cluster.brokers())).nodeId
        response = await client.send(node_id, request)
        _partition, error_code, offset, *_ = response.topics[0][1][0]
        assert error_code == 0
        return int(offset), node_id
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def read_committed(bootstrap: str, tp: TopicPartition) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        yield consumer
    finally:
        await consumer.stop()


async def last_stable_offset(bootstrap: str, tp: TopicPartition) -> int:
    async with read_committed(bootstrap, tp) as consumer:
        return int((await consumer.end_offsets([tp]))[tp])


async def wait_for_state(client: CoordinatorClient, transactional_id: str, state: str) -> None:
    """Until the coordinator says `state` (a commit completes once its markers landed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while True:
        answer = await client.describe_transactions(
            DescribeTransactionsRequest(transactional_ids=[transactional_id])
        )
        if answer.transaction_states[0].transaction_state == state:
            return
        assert loop.time() < deadline, answer
        await asyncio.sleep(0.05)


async def test_list_describe_find_hanging_and_abort(
    kafka_broker: ApacheKafkaBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    log_topic, out = f"__txn_log_{suffix}", f"txn-admin-{suffix}"
    done_id, open_id = f"done-{suffix}", f"open-{suffix}"
    # Far from the start of every log partition's range of producer ids (the coordinator
    # hands out the first blocks of each): no coordinator knows it.
    hanging_producer_id = 2**60 + random.randrange(10**9)
    await create_topic(kafka_broker, out)
    hanging_tp, open_tp = TopicPartition(out, 0), TopicPartition(out, 1)
    bootstrap = kafka_broker.bootstrap
    with coordinator(kafka_broker, log_topic) as server:
        tool = Tool(kafka_broker, server, capsys)
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            async with producer(kafka_broker, server, done_id) as done:
                async with done.transaction():
                    await (await done.send(out, b"committed", partition=0))
                done_producer = done.producer_id
            await wait_for_state(client, done_id, "CompleteCommit")
            hanging_offset, broker_id = await produce_hanging(
                bootstrap, out, 0, hanging_producer_id
            )
            async with producer(kafka_broker, server, open_id) as ongoing:
                await ongoing.begin_transaction()
                await (await ongoing.send(out, b"ongoing", partition=1))
                await asyncio.sleep(0.01)  # older than a max transaction timeout of 0

                # list: both, with their coordinator, and the filters
                listed = {t["transactional_id"]: t for t in await tool.json("list")}
                assert listed[done_id]["state"] == "CompleteCommit"
                assert listed[done_id]["producer_id"] == done_producer
                assert listed[open_id]["state"] == "Ongoing"
                assert listed[open_id]["producer_id"] == ongoing.producer_id
                (node,) = (await client.describe_cluster()).brokers
                assert listed[open_id]["coordinator"] == node.broker_id
                ongoing_only = await tool.json("list", "--state", "Ongoing")
                assert open_id in {t["transactional_id"] for t in ongoing_only}
                assert done_id not in {t["transactional_id"] for t in ongoing_only}
                by_producer = await tool.json("list", "--producer-id", str(done_producer))
                assert [t["transactional_id"] for t in by_producer] == [done_id]
                code, table, _ = await tool.run("list")
                assert code == 0
                header, *rows = table.splitlines()
                assert header.split() == [
                    "TransactionalId", "Coordinator", "ProducerId", "TransactionState"
                ]  # fmt: skip
                assert [open_id, str(node.broker_id), str(ongoing.producer_id), "Ongoing"] in [
                    row.split() for row in rows
                ]

                # describe: the ongoing one with its partition, the completed one
                described = await tool.json("describe", "--transactional-id", open_id)
                assert described["state"] == "Ongoing"
                assert described["coordinator_id"] == node.broker_id
                assert described["producer_id"] == ongoing.producer_id
                assert described["producer_epoch"] == ongoing.producer_epoch
                assert described["transaction_timeout_ms"] == 30_000
                assert described["topic_partitions"] == [f"{out}-1"]
                assert described["transaction_start_time_ms"] is not None
                assert described["transaction_duration_ms"] >= 0
                completed = await tool.json("describe", "--transactional-id", done_id)
                assert completed["state"] == "CompleteCommit"
                assert completed["topic_partitions"] == []
                code, _, err = await tool.run("describe", "--transactional-id", f"none-{suffix}")
                assert code == 1
                assert "TRANSACTIONAL_ID_NOT_FOUND" in err

                # describe-producers: the hanging one open at its offset, the committed not
                producers = {
                    p["producer_id"]: p
                    for p in await tool.json(
                        "describe-producers", "--topic", out, "--partition", "0"
                    )
                }
                assert producers[hanging_producer_id]["current_transaction_start_offset"] == (
                    hanging_offset
                )
                assert producers[hanging_producer_id]["coordinator_epoch"] == -1
                assert producers[done_producer]["current_transaction_start_offset"] is None
                code, table, _ = await tool.run(
                    "describe-producers", "--topic", out, "--partition", "0"
                )
                assert code == 0
                assert table.splitlines()[0].split() == [
                    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset",
                ]  # fmt: skip

                # find-hanging: the unknown producer's, not the ongoing transaction's
                hanging = await tool.json(
                    "find-hanging", "--topic", out, "--max-transaction-timeout", "0"
                )
                assert [(h["partition"], h["producer_id"]) for h in hanging] == [
                    (0, hanging_producer_id)
                ]
                assert hanging[0]["current_transaction_start_offset"] == hanging_offset
                assert await tool.json("find-hanging", "--topic", out) == [], "younger than 15 min"
                only_open = ["--topic", out, "--partition", "1", "--max-transaction-timeout", "0"]
                assert await tool.json("find-hanging", *only_open) == [], (
                    "the ongoing transaction includes partition 1: its coordinator will end it"
                )
                by_broker = await tool.json(
                    "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0"
                )
                assert (out, 0, hanging_producer_id) in {
                    (h["topic"], h["partition"], h["producer_id"]) for h in by_broker
                }
                code, _, err = await tool.run("find-hanging")
                assert code == 1
                assert "--topic or --broker-id" in err

                # abort: the LSO was held at the hanging batch, and passes it after
                assert await last_stable_offset(bootstrap, hanging_tp) == hanging_offset
                code, _, err = await tool.run(
                    "abort", "--topic", out, "--partition", "0", "--start-offset", "999"
                )
                assert code == 1
                assert "Could not find any open transactions starting at offset 999" in err
                code, _, err = await tool.run("abort", "--topic", out, "--partition", "0")
                assert code == 1
                assert "--start-offset" in err
                code, said, err = await tool.run(
                    "abort",
                    "--topic", out,
                    "--partition", "0",
                    "--start-offset", str(hanging_offset),
                )  # fmt: skip
                assert code == 0, err
                assert str(hanging_producer_id) in said
                assert await last_stable_offset(bootstrap, hanging_tp) > hanging_offset
                async with read_committed(bootstrap, hanging_tp) as consumer:
                    values: list[bytes] = []
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + 15
                    while await consumer.position(hanging_tp) <= hanging_offset:
                        assert loop.time() < deadline, "the consumer never passed the abort"
                        batch = await consumer.getmany(hanging_tp, timeout_ms=200)
                        values += [r.value for r in batch.get(hanging_tp, []) if r.value]
                    assert values == [b"committed"], "the aborted record is never read"
                # abort by producer: Kafka's form for brokers older than 3.0; coordinator epoch
                # -1 (no marker yet) is sent as 0
                second_offset, _ = await produce_hanging(bootstrap, out, 0, hanging_producer_id + 1)
                code, _, err = await tool.run(
                    "abort",
                    "--topic", out,
                    "--partition", "0",
                    "--producer-id", str(hanging_producer_id + 1),
                    "--producer-epoch", "0",
                    "--coordinator-epoch", "-1",
                )  # fmt: skip
                assert code == 0, err
                assert await last_stable_offset(bootstrap, hanging_tp) > second_offset
                assert (
                    await tool.json(
                        "find-hanging", "--topic", out, "--max-transaction-timeout", "0"
                    )
                    == []
                )
                # The ongoing transaction is untouched: it commits.
                await ongoing.commit_transaction()
            await wait_for_state(client, open_id, "CompleteCommit")
            assert await last_stable_offset(bootstrap, open_tp) == 2  # record and marker
        finally:
            await client.close()
