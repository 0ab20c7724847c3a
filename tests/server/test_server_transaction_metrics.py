"""The transaction coordinator's metrics and /status entry, with real transactions on Apache
Kafka: transactional ids by state and pending offsets while a transaction is open, each
transaction counted once by result with its duration as it completes, a transaction the
coordinator aborts for its timeout, the marker writer's requests; and a node serving no
transactions, which still reports the state its log holds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from apache_kafka import ApacheKafkaBroker
from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess

from coordinator_client import TransactionalProducer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]

# The families a node serving no transactions exports without samples.
SERVED_ONLY = (
    "coordinator_transactions_completed",
    "coordinator_transactions_timed_out",
    "coordinator_transaction_duration_seconds",
    "coordinator_transaction_markers_fenced",
    "coordinator_transaction_markers_refused",
    "coordinator_transaction_completion_retries",
    "coordinator_transaction_completions_in_flight",
    "coordinator_transaction_markers_queued",
    "coordinator_transaction_marker_requests",
    "coordinator_transaction_marker_retries",
)


def server_args(broker: ApacheKafkaBroker, log_topic: str, *extra: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        *broker.coordinator_args,
        *extra,
    ]  # fmt: skip


def http_get(process: ServerProcess, path: str) -> bytes:
    url = f"http://127.0.0.1:{process.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        body: bytes = reply.read()
    return body


def scrape(process: ServerProcess) -> Samples:
    """Family and sample name -> {labels: value}, for the transaction families."""
    samples: Samples = {}
    for family in text_string_to_metric_families(http_get(process, "/metrics").decode()):
        if "transaction" not in family.name:
            continue
        samples.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


def by_state(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["state"]: count
        for labels, count in samples["coordinator_transactions"].items()
    }


def status(process: ServerProcess) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(http_get(process, "/status"))["transactions"]
    return report


async def eventually(process: ServerProcess, check: Callable[[Samples], bool]) -> Samples:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        samples = scrape(process)
        if check(samples):
            return samples
        assert loop.time() < deadline, f"never reached: {samples}"
        await asyncio.sleep(0.1)


async def create_topic(broker: ApacheKafkaBroker, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 2, 1)])
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def producer(
    broker: ApacheKafkaBroker, server: ServerProcess, transactional_id: str, timeout_ms: int
) -> AsyncIterator[TransactionalProducer]:
    made = TransactionalProducer(
        bootstrap_servers=broker.bootstrap,
        coordinator_bootstrap_servers=f"{server.host}:{server.port}",
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        coordinator_options={"request_timeout_ms": 10_000, "retry_backoff_ms": 20},
    )
    await made.start()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            await made.stop()


async def test_transaction_metrics_follow_real_transactions(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    log_topic, out, group = f"__txn_metrics_{suffix}", f"txn-metrics-{suffix}", f"g-{suffix}"
    await create_topic(kafka_broker, out)
    args = server_args(
        kafka_broker,
        log_topic,
        "--transactions", "on",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200",
    )  # fmt: skip
    with ServerProcess(args) as server:
        before = scrape(server)
        assert by_state(before) == {}
        assert value(before, "coordinator_transactional_ids") == 0
        assert value(before, "coordinator_transactions_completed_total", result="commit") == 0
        assert value(before, "coordinator_transaction_duration_seconds_count") == 0
        assert value(before, "coordinator_transaction_completions_in_flight") == 0
        assert value(before, "coordinator_transaction_marker_requests_total") == 0
        assert status(server)["served"] is True

        async with producer(kafka_broker, server, f"committer-{suffix}", 30_000) as txn:
            await txn.begin_transaction()
            await txn.send(out, b"a", partition=0)
            await txn.send(out, b"b", partition=1)
            await txn.send_offsets_to_transaction(
                {TopicPartition("input", 0): OffsetAndMetadata(7, "")}, group
            )
            open_now = scrape(server)
            assert by_state(open_now) == {"Ongoing": 1}
            assert value(open_now, "coordinator_transactional_ids") == 1
            assert value(open_now, "coordinator_pending_transactional_offsets") == 1
            assert status(server)["by_state"] == {"Ongoing": 1}
            await txn.commit_transaction()
            await txn.begin_transaction()
            await txn.send(out, b"c", partition=0)
            await txn.abort_transaction()
        ended = await eventually(
            server,
            lambda s: value(s, "coordinator_transactions_completed_total", result="abort") == 1,
        )
        assert value(ended, "coordinator_transactions_completed_total", result="commit") == 1
        assert value(ended, "coordinator_transaction_duration_seconds_count") == 2
        assert value(ended, "coordinator_transactions_timed_out_total") == 0
        assert value(ended, "coordinator_pending_transactional_offsets") == 0
        assert by_state(ended) == {"CompleteAbort": 1}
        # At least one request per transaction (the first one's two partitions may share one).
        assert value(ended, "coordinator_transaction_marker_requests_total") >= 2
        assert value(ended, "coordinator_transaction_markers_queued") == 0
        assert value(ended, "coordinator_transaction_markers_fenced_total") == 0

        # A transaction left open past its timeout: the coordinator aborts it.
        async with producer(kafka_broker, server, f"sleeper-{suffix}", 1_000) as sleeper:
            await sleeper.begin_transaction()
            await sleeper.send_and_wait(out, b"forgotten", partition=1)
            assert by_state(scrape(server)) == {"CompleteAbort": 1, "Ongoing": 1}
            timed_out = await eventually(
                server, lambda s: value(s, "coordinator_transactions_timed_out_total") == 1
            )
        assert value(timed_out, "coordinator_transactions_completed_total", result="abort") == 2
        assert value(timed_out, "coordinator_transaction_duration_seconds_count") == 3
        # It lasted its timeout at least, from its first partition to its completion.
        assert value(timed_out, "coordinator_transaction_duration_seconds_sum") >= 1.0
        buckets = timed_out["coordinator_transaction_duration_seconds_bucket"]
        assert buckets[(("le", "1.0"),)] <= 2 and buckets[(("le", "+Inf"),)] == 3
        assert by_state(timed_out) == {"CompleteAbort": 2}
        report = status(server)
        assert report["served"] is True and report["reason"] is None
        assert report["transactional_ids"] == 2
        assert report["by_state"] == {"CompleteAbort": 2}
        assert (report["in_flight"], report["markers_queued"]) == (0, 0)
        assert report["completed"] == {"commit": 1, "abort": 2}
        assert report["timed_out"] == 1
        assert json.loads(http_get(server, "/readyz"))["ready"] is True

    # The same log on a node that serves no transactions: the state it holds is still
    # reported; nothing of the ends of transactions is.
    with ServerProcess(server_args(kafka_broker, log_topic, "--transactions", "off")) as server:
        off = scrape(server)
        assert by_state(off) == {"CompleteAbort": 2}
        assert value(off, "coordinator_transactional_ids") == 2
        for family in SERVED_ONLY:
            assert off[family] == {}, family
            for suffix in ("_total", "_bucket", "_count", "_sum"):
                assert family + suffix not in off, family
        report = status(server)
        assert (report["served"], report["reason"]) == (False, "--transactions off")
        assert report["in_flight"] is None
