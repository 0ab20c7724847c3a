"""The markers of a transaction over many partitions that land slowly do not hold back the
end of every other transaction, and a partition deleted under an open transaction does not
leave it prepared: coordinator-server on Apache Kafka."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from kafka_broker import cluster_topics
from server_process import ServerProcess
from test_transactions_cluster import delete_topic
from test_transactions_kafka import coordinator, create_topic, producer

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsV1Request,
    EndTxnRequest,
    InitProducerIdRequest,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]

QUEUED_MARKERS = 100


async def state_of(client: CoordinatorClient, transactional_id: str) -> Any:
    answer = await client.describe_transactions(
        DescribeTransactionsV1Request(transactional_ids=[transactional_id])
    )
    (state,) = answer.transaction_states
    return state


def status(process: ServerProcess) -> Any:
    url = f"http://127.0.0.1:{process.metrics_port}/status"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())["transactions"]


async def test_a_deleted_topic_neither_holds_other_transactions_nor_leaves_its_own_prepared(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    """A transaction over as many partitions as the marker queue holds, whose topic is
    deleted before its commit: its markers wait for the partitions to stay unknown (30 s)
    before they are dropped. Meanwhile another producer's transactions end as fast as ever
    (they waited the whole 30 s when one transaction could take the whole queue). Then the
    large one completes, its refused markers said as such."""
    suffix = uuid.uuid4().hex[:8]
    doomed, other = f"doomed-{suffix}", f"other-{suffix}"
    await create_topic(kafka_broker, doomed, partitions=QUEUED_MARKERS)
    await create_topic(kafka_broker, other, partitions=1)
    large = f"large-{suffix}"
    with coordinator(
        kafka_broker,
        f"__log_{suffix}",
        "--transaction-max-queued-markers",
        str(QUEUED_MARKERS),
    ) as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            init = await client.init_producer_id(
                InitProducerIdRequest(transactional_id=large, transaction_timeout_ms=120_000)
            )
            ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
            added = await client.add_partitions_to_txn(
                AddPartitionsToTxnRequest(
                    transactional_id=large,
                    topics=[
                        AddPartitionsToTxnRequestTopic(
                            name=doomed, partitions=list(range(QUEUED_MARKERS))
                        )
                    ],
                    **ids,
                )
            )
            codes = {
                result.partition_error_code
                for topic in added.results_by_topic
                for result in topic.results_by_partition
            }
            assert codes == {ErrorCode.NONE}
            await delete_topic(kafka_broker, doomed)
            # Gone from the metadata, and then from the broker's partitions (a broker
            # publishes the new metadata before it stops the deleted partitions, and a
            # marker sent to a leader the coordinator still has cached lands meanwhile).
            for _ in range(100):
                if doomed not in await cluster_topics(kafka_broker.bootstrap):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)
            ended = await client.end_txn(
                EndTxnRequest(transactional_id=large, committed=True, **ids)
            )
            assert ended.error_code == ErrorCode.NONE
            loop = asyncio.get_running_loop()
            committed_at = loop.time()

            async with producer(kafka_broker, server, f"small-{suffix}") as small:
                for n in range(3):
                    started = loop.time()
                    async with small.transaction():
                        await small.send(other, b"%d" % n, partition=0)
                    # The next transaction starts only once this one ended (its first
                    # request waits for the end): each one's time is its whole end.
                    assert loop.time() - started < 5
            assert (await state_of(client, large)).transaction_state == "PrepareCommit"

            while (state := await state_of(client, large)).transaction_state != ("CompleteCommit"):
                assert loop.time() - committed_at < 90, state
                await asyncio.sleep(0.5)
            refused = {(m.topic, m.partition_index, m.error_code) for m in state.refused_markers}
            assert refused == {
                (doomed, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in range(QUEUED_MARKERS)
            }
        finally:
            await client.close()
        report = status(server)["markers_refused"]
        assert report["total"] == QUEUED_MARKERS
        (latest,) = report["latest"]
        assert latest["transactional_id"] == large
        named = latest["partitions"]["UNKNOWN_TOPIC_OR_PARTITION"]
        assert len(named) == 11 and named[-1] == f"and {QUEUED_MARKERS - 10} more"
        errors = [line for line in server.lines if " ERROR " in line and large in line]
        assert len(errors) == 1, errors
