"""`bench transactions`: transactional producers coordinated by our server beside Kafka's own
transaction coordinator, on the same broker, in the same run: the table's shape, both
targets completing transactions, the CPU budget, and a failing transaction counted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from bench_support import assert_common_shape, rows_of, run_bench
from server_process import ServerProcess

from coordinator_server.tools.bench.transactions import TxnCounts, TxnShape, producer_loop

PINNED = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


@pytest.fixture
def server(kafka_broker: ApacheKafkaBroker) -> Iterator[ServerProcess]:
    # A log topic of its own, so that it does not meet other tests' servers on the broker.
    with ServerProcess(
        [
            "--port", "0",
            "--bootstrap-servers", kafka_broker.bootstrap,
            "--offsets-topic", f"__bench_txn_{uuid.uuid4().hex[:8]}",
            "--offsets-topic-partitions", "4",
            "--offsets-topic-replication-factor", "1",
            "--transactions", "on",
        ]
    ) as process:  # fmt: skip
        yield process


def assert_transaction_rows(
    document: dict[str, Any], records: list[int], offsets: list[str], producers: int
) -> None:
    rows = document["results"]["transactions"]
    # Each shape: ours, the peer, then their ratio.
    expected = [
        (target, count, send_offsets)
        for count in records
        for send_offsets in offsets
        for target in ("ours", "peer", "ours/peer")
    ]
    assert [(row["target"], row["records_per_txn"], row["send_offsets"]) for row in rows] == (
        expected
    )
    for target in ("ours", "peer"):
        for row in rows_of(document, "transactions", target):
            assert row["producers"] == producers
            assert row["transactions"] > 0, row
            assert row["errors"] == 0, row.get("error_kinds")
            assert row["transactions_per_s"] > 0
            # Both rates are rounded to a tenth: at a few transactions a second, the
            # transactions' rounding is most of the difference.
            assert row["records_per_s"] == pytest.approx(
                row["transactions_per_s"] * row["records_per_txn"],
                rel=0.01,
                abs=0.05 * row["records_per_txn"] + 0.05,
            )
            assert 0 < row["p50_ms"] <= row["p99_ms"]
            assert 0 < row["generator_cpu"] <= 1.5
    for ratio in rows_of(document, "transactions", "ours/peer"):
        (ours,) = [
            row
            for row in rows_of(document, "transactions", "ours")
            if (row["records_per_txn"], row["send_offsets"])
            == (ratio["records_per_txn"], ratio["send_offsets"])
        ]
        (peer,) = [
            row
            for row in rows_of(document, "transactions", "peer")
            if (row["records_per_txn"], row["send_offsets"])
            == (ratio["records_per_txn"], ratio["send_offsets"])
        ]
        assert ratio["transactions_per_s"] == pytest.approx(
            ours["transactions_per_s"] / peer["transactions_per_s"], rel=0.01
        )
        assert ratio["p99_ms"] == pytest.approx(ours["p99_ms"] / peer["p99_ms"], rel=0.01)


@pytest.mark.kafka
def test_transactions_against_a_running_server_and_its_brokers_coordinator(
    server: ServerProcess, kafka_broker: ApacheKafkaBroker
) -> None:
    document = run_bench(
        "transactions",
        "--bootstrap", f"{server.host}:{server.port}",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--records-per-txn", "1,5",
        "--producers", "2",
        "--partitions", "3",
    )  # fmt: skip
    assert_common_shape(document)
    assert document["peer"] == f"the transaction coordinator at {kafka_broker.bootstrap}"
    assert document["settings"]["records_per_txn"] == [1, 5]
    assert_transaction_rows(document, [1, 5], ["no", "yes"], 2)
    # Nothing was started here, so no CPU time is reported.
    assert "core_cpu_us" not in document["results"]["transactions"][0]


@pytest.mark.kafka
@pytest.mark.slow
def test_transactions_on_a_broker_and_server_the_bench_starts() -> None:
    pinning = ["--server-cpu", "0", "--generator-cpu", "1"] if PINNED else []
    document = run_bench(
        "transactions", "--records-per-txn", "3", "--send-offsets", "on", "--producers", "2",
        *pinning, pin=bool(pinning),
    )  # fmt: skip
    assert_common_shape(document)
    assert document["peer"].startswith("Apache Kafka 4.")
    assert document["peer"].endswith("transaction coordinator")
    processes = {process["role"]: process for process in document["processes"]}
    # One broker for both: our server's log and records, and Kafka's coordinator.
    assert set(processes) == {"log broker", "server"}
    if pinning:
        assert all(process["cpus"] == [0] for process in processes.values())
    assert_transaction_rows(document, [3], ["yes"], 2)
    (ours,) = rows_of(document, "transactions", "ours")
    (peer,) = rows_of(document, "transactions", "peer")
    # Ours runs in our server and the broker; Kafka's in the broker, our server idle beside.
    assert ours["server_cpu_us"] > 0 and ours["broker_cpu_us"] > 0
    assert ours["core_cpu_us"] == pytest.approx(
        ours["server_cpu_us"] + ours["broker_cpu_us"], abs=0.2
    )
    assert "server_cpu_us" not in peer and "others_cpu_us" in peer
    assert peer["core_cpu_us"] == pytest.approx(peer["broker_cpu_us"], abs=0.2)
    (ratio,) = rows_of(document, "transactions", "ours/peer")
    assert ratio["core_cpu_us"] == pytest.approx(
        ours["core_cpu_us"] / peer["core_cpu_us"], rel=0.01
    )


def test_transactions_refuse_a_running_server_without_its_kafka_cluster() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "bench", "transactions",
            "--bootstrap", "127.0.0.1:1", "--no-pin", "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    assert "--bootstrap-servers" in completed.stderr


class FailingProducer:
    """A producer whose commits fail; its abort fails too once `abort_failures` is 0."""

    def __init__(self, abort_failures: int) -> None:
        self.commits = 0
        self.aborts = 0
        self.abort_failures = abort_failures

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def begin_transaction(self) -> None: ...

    async def send(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def send_offsets_to_transaction(self, offsets: Any, group: str) -> None: ...

    async def commit_transaction(self) -> None:
        self.commits += 1
        await asyncio.sleep(0)
        raise RuntimeError("refused")

    async def abort_transaction(self) -> None:
        self.aborts += 1
        if self.aborts > self.abort_failures:
            raise ValueError("cannot abort")


async def test_a_failed_transaction_is_counted_and_a_producer_that_cannot_abort_stops() -> None:
    producer = FailingProducer(abort_failures=2)
    counts = TxnCounts(measuring=True)
    shape = TxnShape(records=2, send_offsets=True, producers=1, topic="t", partitions=2)
    await asyncio.wait_for(producer_loop(producer, 0, shape, "g", counts), 5)
    # Two failed commits aborted, the third failed and its abort too: the loop ended.
    assert producer.commits == 3
    assert counts.transactions == 0 and counts.latencies == []
    assert counts.errors == 4
    assert counts.error_kinds == {"RuntimeError": 3, "ValueError": 1}
