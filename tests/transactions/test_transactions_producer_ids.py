"""Producer ids that no other writer of the Kafka cluster shares, and what happens when one
does: two deployments of the server on one Apache Kafka broker (two log topics).

A broker tells producers apart by producer id alone. Two deployments that hand out the same
ids fence each other's batches and markers (INVALID_PRODUCER_EPOCH) and may even end each
other's transactions; by default our ids come from the cluster itself, so that cannot
happen. A range set by hand still can: the transaction whose markers the brokers refuse for
good is then completed without them, and said so, instead of staying prepared for good.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
import uuid
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from test_transactions_admin import Tool
from test_transactions_kafka import coordinator, create_topic, producer, read_all, server_args

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import DescribeTransactionsV1Request, InitProducerIdRequest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

# A range far above the ids the test broker hands out, the same in both deployments.
SHARED_RANGE = ("--transaction-producer-id-start", str(2**50))


def http_json(process: ServerProcess, path: str) -> Any:
    url = f"http://127.0.0.1:{process.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def metric(process: ServerProcess, name: str) -> float:
    url = f"http://127.0.0.1:{process.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} on /metrics")


async def init_ids(server: ServerProcess, transactional_ids: list[str]) -> dict[str, int]:
    client = CoordinatorClient(f"{server.host}:{server.port}")
    try:
        ids: dict[str, int] = {}
        for transactional_id in transactional_ids:
            answer = await client.init_producer_id(
                InitProducerIdRequest(
                    transactional_id=transactional_id, transaction_timeout_ms=30_000
                )
            )
            assert answer.error_code == ErrorCode.NONE
            ids[transactional_id] = answer.producer_id
        idempotent = await client.init_producer_id(
            InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=30_000)
        )
        ids[""] = idempotent.producer_id
        return ids
    finally:
        await client.close()


async def test_two_deployments_on_one_cluster_never_share_a_producer_id(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    """No setting: each deployment's ids are the cluster's own, unique among them and apart
    from a Kafka producer's; the same transactional id in both commits on the same partition
    with neither fenced by the other, whatever their epochs."""
    suffix = uuid.uuid4().hex[:8]
    out = f"shared-out-{suffix}"
    transactional_id = f"same-name-{suffix}"
    await create_topic(kafka_broker, out, partitions=1)
    names = [f"{transactional_id}-{n}" for n in range(20)]
    with (
        coordinator(kafka_broker, f"__log_a_{suffix}") as first,
        coordinator(kafka_broker, f"__log_b_{suffix}") as second,
    ):
        ids_a = await init_ids(first, names)
        ids_b = await init_ids(second, names)
        assert len(set(ids_a.values()) | set(ids_b.values())) == 2 * len(ids_a)
        # A Kafka producer's id, handed out by the broker after ours: above all of them.
        kafka_idempotent = (await init_ids(first, []))[""]
        assert kafka_idempotent not in ids_a.values() and kafka_idempotent not in ids_b.values()
        status = http_json(first, "/status")["transactions"]["producer_ids"]
        # (A broker's first InitProducerId answers may be COORDINATOR_LOAD_IN_PROGRESS.)
        assert status["source"] == "kafka" and status["asked"] >= len(ids_a)

        # The same transactional id in both, one deployment's producer at a higher epoch.
        for _ in range(3):
            async with producer(kafka_broker, first, transactional_id):
                pass
        async with (
            producer(kafka_broker, first, transactional_id) as txn_a,
            producer(kafka_broker, second, transactional_id) as txn_b,
        ):
            assert txn_a.producer_id != txn_b.producer_id
            assert txn_a.producer_epoch > txn_b.producer_epoch
            await txn_b.begin_transaction()
            await txn_b.send(out, b"second", partition=0)
            async with txn_a.transaction():
                await txn_a.send(out, b"first", partition=0)
            await txn_b.commit_transaction()
        committed = await read_all(kafka_broker, out, "read_committed", expect=2)
        assert sorted(committed) == [b"first", b"second"]


def test_a_range_the_cluster_hands_out_itself_stops_the_start(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    """A range set by hand that the cluster's own ids have reached: one line, exit 1."""
    args = server_args(
        kafka_broker, f"__log_{uuid.uuid4().hex[:8]}", "--transaction-producer-id-start", "0"
    )
    done = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", *args, "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert "the producer id range [0, 9223372036854775807) overlaps the ids the Kafka" in line
    assert "Traceback" not in done.stderr


async def describe(server: ServerProcess, transactional_id: str) -> Any:
    client = CoordinatorClient(f"{server.host}:{server.port}")
    try:
        answer = await client.describe_transactions(
            DescribeTransactionsV1Request(transactional_ids=[transactional_id])
        )
    finally:
        await client.close()
    (state,) = answer.transaction_states
    return state


async def test_markers_refused_for_good_complete_the_transaction_and_say_why(
    kafka_broker: ApacheKafkaBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two deployments given the same range by hand hand out the same producer id. The one
    whose producer writes at the higher epoch commits (its marker commits the other's
    records too: what a shared id does); the other's marker is then refused with
    INVALID_PRODUCER_EPOCH. Its transaction completes all the same, its id usable at once,
    with one ERROR, the counter, /status and DescribeTransactions saying why."""
    suffix = uuid.uuid4().hex[:8]
    out = f"collide-out-{suffix}"
    transactional_id = f"collide-{suffix}"
    await create_topic(kafka_broker, out, partitions=2)
    with (
        coordinator(kafka_broker, f"__log_a_{suffix}", *SHARED_RANGE) as first,
        coordinator(kafka_broker, f"__log_b_{suffix}", *SHARED_RANGE) as second,
    ):
        async with producer(kafka_broker, first, transactional_id) as victim:
            await victim.begin_transaction()
            await victim.send(out, b"victim", partition=0)
            await victim.send(out, b"victim elsewhere", partition=1)
            for _ in range(2):
                async with producer(kafka_broker, second, transactional_id):
                    pass
            async with producer(kafka_broker, second, transactional_id) as other:
                # The same id (the same range and log partition), at a newer epoch.
                assert other.producer_id == victim.producer_id
                assert other.producer_epoch > victim.producer_epoch
                async with other.transaction():
                    await other.send(out, b"other", partition=0)
            await victim.commit_transaction()

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while (state := await describe(first, transactional_id)).transaction_state != (
            "CompleteCommit"
        ):
            assert state.transaction_state == "PrepareCommit", state
            assert loop.time() < deadline, "the transaction stayed prepared"
            await asyncio.sleep(0.1)
        assert [
            (marker.topic, marker.partition_index, marker.error_code)
            for marker in state.refused_markers
        ] == [(out, 0, ErrorCode.INVALID_PRODUCER_EPOCH)]

        tool = Tool(kafka_broker, first, capsys)
        code, printed, err = await tool.run("describe", "--transactional-id", transactional_id)
        assert code == 0, err
        assert f"{out}-0:INVALID_PRODUCER_EPOCH" in printed
        described = await tool.json("describe", "--transactional-id", transactional_id)
        assert described["refused_markers"] == [
            {"topic_partition": f"{out}-0", "error": "INVALID_PRODUCER_EPOCH"}
        ]

        # Its id is usable again: a new producer starts and commits at once.
        async with (
            producer(kafka_broker, first, transactional_id) as again,
            again.transaction(),
        ):
            await again.send(out, b"again", partition=1)
        # Its completion, with every marker written, replaces what the last one said.
        deadline = loop.time() + 20
        while (state := await describe(first, transactional_id)).refused_markers:
            assert loop.time() < deadline, state
            await asyncio.sleep(0.1)
        assert state.transaction_state == "CompleteCommit"
        # Partition 1 got its marker: the victim's record there is committed.
        committed = await read_all(kafka_broker, out, "read_committed", expect=4)
        assert sorted(committed) == [b"again", b"other", b"victim", b"victim elsewhere"]

        errors = [line for line in first.lines if " ERROR " in line and transactional_id in line]
        assert len(errors) == 1, errors
        assert f"INVALID_PRODUCER_EPOCH: {out}-0" in errors[0]
        assert "another writer uses producer id" in errors[0]
        refused = http_json(first, "/status")["transactions"]["markers_refused"]
        assert refused["total"] == 1
        (latest,) = refused["latest"]
        assert latest["transactional_id"] == transactional_id
        assert latest["partitions"] == {"INVALID_PRODUCER_EPOCH": [f"{out}-0"]}
        assert metric(first, "coordinator_transaction_markers_refused_total") == 1
