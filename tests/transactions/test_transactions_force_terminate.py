"""`coordinator-server transactions force-terminate` (Kafka's kafka-transactions.sh
force-terminate), run as a process against coordinator-server on Apache Kafka: the open
transaction of a transactional id is aborted by fencing its producer (the epoch bumped), the
producer's commit then fails with PRODUCER_FENCED, read_committed consumers never see its
records; an id nobody uses is an error, and is not created."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid

import pytest
from aiokafka.errors import ProducerFenced
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from test_transactions_admin import last_stable_offset
from test_transactions_kafka import coordinator, create_topic, producer, read_all

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import DescribeTransactionsRequest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


async def force_terminate(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "coordinator_server", "transactions", "force-terminate",
        "--bootstrap-server", f"{server.host}:{server.port}", "--timeout-ms", "10000", *args,
    ]  # fmt: skip
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
    )


async def test_force_terminate_fences_the_producer_and_aborts_its_transaction(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    log_topic, out, transactional_id = f"__txn_log_{suffix}", f"txn-ft-{suffix}", f"ft-{suffix}"
    await create_topic(kafka_broker, out)
    with coordinator(kafka_broker, log_topic) as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            async with producer(kafka_broker, server, transactional_id) as stuck:
                await stuck.begin_transaction()
                await (await stuck.send(out, b"never-committed", partition=0))
                producer_id, epoch = stuck.producer_id, stuck.producer_epoch

                done = await force_terminate(server, "--transactional-id", transactional_id)
                assert done.returncode == 0, done.stderr
                assert f"`{transactional_id}` (it was Ongoing)" in done.stdout
                # The InitProducerId the tool sent returned once the abort completed: the id
                # waits, empty, for its next producer.
                (state,) = (
                    await client.describe_transactions(
                        DescribeTransactionsRequest(transactional_ids=[transactional_id])
                    )
                ).transaction_states
                assert state.transaction_state == "Empty"
                assert state.producer_id == producer_id
                assert state.producer_epoch > epoch
                assert f"now at epoch {state.producer_epoch}" in done.stdout
                with pytest.raises(ProducerFenced):
                    await stuck.commit_transaction()
            # The record was written, and its transaction ended by an ABORT marker: the last
            # stable offset passed both, and read_committed consumers skip the record.
            assert await last_stable_offset(kafka_broker.bootstrap, TopicPartition(out, 0)) == 2
            assert await read_all(kafka_broker, out, "read_uncommitted", expect=1) == [
                b"never-committed"
            ]
            assert await read_all(kafka_broker, out, "read_committed", expect=1, timeout=3) == []

            # JSON, and a second run on the ended transaction bumps the epoch again.
            again = await force_terminate(server, "--transactional-id", transactional_id, "--json")
            assert again.returncode == 0, again.stderr
            said = json.loads(again.stdout)
            assert said["previous_state"] == "Empty"
            assert said["producer_epoch"] > state.producer_epoch

            # An id nobody uses: said, and not created by the tool.
            unknown = f"nobody-{suffix}"
            missing = await force_terminate(server, "--transactional-id", unknown)
            assert missing.returncode == 1
            assert missing.stderr == (
                "coordinator-server transactions: error: Failed to force-terminate "
                f"transactional-id `{unknown}`: TRANSACTIONAL_ID_NOT_FOUND\n"
            )
            (absent,) = (
                await client.describe_transactions(
                    DescribeTransactionsRequest(transactional_ids=[unknown])
                )
            ).transaction_states
            assert absent.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        finally:
            await client.close()
