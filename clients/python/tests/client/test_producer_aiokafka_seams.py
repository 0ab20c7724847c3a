"""The private aiokafka APIs `TransactionalProducer` relies on (see
`coordinator_client.txn_sender`): if an aiokafka release renames or reshapes one,
these fail and name it, rather than the producer misbehaving at run time."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import MessageAccumulator, MessageBatch
from aiokafka.producer.sender import Sender
from aiokafka.producer.transaction_manager import (
    TransactionManager,
    TransactionResult,
    TransactionState,
)
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.txn_sender import CoordinatedSender

# The transaction steps CoordinatedSender overrides, with their parameters after self.
STEPS = {
    "_maybe_wait_for_pid": [],
    "_do_add_partitions_to_txn": ["tps"],
    "_do_add_offsets_to_txn": ["group_id"],
    "_do_txn_offset_commit": ["offsets", "group_id"],
    "_do_txn_commit": ["commit_result"],
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_sender_transaction_steps_are_coroutines_with_these_parameters(name: str) -> None:
    method = getattr(Sender, name)
    assert inspect.iscoroutinefunction(method), name
    assert list(inspect.signature(method).parameters)[1:] == STEPS[name]
    # Overridden, with the same parameters.
    ours = getattr(CoordinatedSender, name)
    assert ours is not method
    assert list(inspect.signature(ours).parameters)[1:] == STEPS[name]


def test_sender_loop_dispatches_transaction_steps_through_these_methods() -> None:
    # The loop picks the next step in _maybe_do_transactional_request and waits for the
    # producer id through _maybe_wait_for_pid; if it called anything else, our steps would
    # be bypassed and requests would go to Kafka's coordinator.
    dispatch = inspect.getsource(Sender._maybe_do_transactional_request)
    for name in STEPS.keys() - {"_maybe_wait_for_pid"}:
        assert f"self.{name}(" in dispatch, name
    routine = inspect.getsource(Sender._sender_routine)
    assert "self._maybe_wait_for_pid()" in routine
    assert "self._maybe_do_transactional_request()" in routine
    # Partitions waiting to be added are muted: no batch before AddPartitionsToTxn.
    assert "partitions_to_add()" in routine
    assert "await self._maybe_wait_for_pid()" in inspect.getsource(Sender.start)


def test_sender_constructor_and_attributes() -> None:
    parameters = inspect.signature(Sender.__init__).parameters
    assert list(parameters) == [
        "self",
        "client",
        "acks",
        "txn_manager",
        "message_accumulator",
        "retry_backoff_ms",
        "request_timeout_ms",
    ]
    assert "self._fail_all" in inspect.getsource(Sender.start)


async def test_producer_holds_the_sender_the_manager_and_the_accumulator() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
    try:
        sender = producer._sender
        assert isinstance(sender, Sender)
        assert isinstance(producer._txn_manager, TransactionManager)
        assert isinstance(producer._message_accumulator, MessageAccumulator)
        assert sender._txn_manager is producer._txn_manager
        assert sender._message_accumulator is producer._message_accumulator
        assert sender._acks == -1
        assert sender._retry_backoff == 0.1
        assert sender._request_timeout_ms == 40000
        assert sender.client is producer.client
        assert sender.sender_task is None
        # The accumulator stamps batches with the manager's producer state.
        assert producer._message_accumulator._txn_manager is producer._txn_manager
        assert inspect.iscoroutinefunction(MessageAccumulator.flush_for_commit)
        # Undrained batches per partition (failed on an abortable error).
        assert isinstance(producer._message_accumulator._batches, dict)
        assert callable(MessageBatch.failure)

        client = CoordinatorClient("127.0.0.1:1")
        ours = CoordinatedSender.replacing(sender, coordinator=client)
        assert ours._txn_manager is sender._txn_manager
        assert ours._retry_backoff == sender._retry_backoff
        await client.close()
    finally:
        await producer.stop()


async def test_accumulator_builds_transactional_batches() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
    try:
        # What the accumulator does to a batch it drains (_pop_batch), then its bytes.
        builder = producer._message_accumulator.create_builder()
        assert builder.append(timestamp=None, key=None, value=b"v") is not None
        builder._set_producer_state(2**48 + 1, 4, 0)
        batch = DefaultRecordBatch(builder._build())
        assert batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch) == (2**48 + 1, 4)
    finally:
        await producer.stop()


def test_transaction_manager_methods() -> None:
    for name in (
        "set_pid_and_epoch",
        "has_pid",
        "partitions_to_add",
        "partition_added",
        "consumer_group_added",
        "offset_committed",
        "needs_transaction_commit",
        "complete_transaction",
        "error_transaction",
        "committing_transaction",
        "aborting_transaction",
        "begin_transaction",
        "is_in_transaction",
        "wait_for_transaction_end",
    ):
        assert callable(getattr(TransactionManager, name)), name
    assert isinstance(TransactionManager.txn_partitions, property)
    assert isinstance(TransactionManager.producer_id, property)
    assert isinstance(TransactionManager.producer_epoch, property)
    assert {state.name for state in TransactionState} >= {
        "UNINITIALIZED",
        "READY",
        "IN_TRANSACTION",
        "COMMITTING_TRANSACTION",
        "ABORTING_TRANSACTION",
        "ABORTABLE_ERROR",
        "FATAL_ERROR",
    }
    assert (TransactionResult.ABORT, TransactionResult.COMMIT) == (0, 1)


async def test_transaction_manager_state_machine() -> None:
    manager = TransactionManager("t", 60000)
    manager.set_pid_and_epoch(2**48, 3)
    assert manager.state == TransactionState.READY
    assert (manager.producer_id, manager.producer_epoch) == (2**48, 3)
    manager.begin_transaction()
    tp = TopicPartition("a", 0)
    manager.maybe_add_partition_to_txn(tp)
    assert manager.partitions_to_add() == {tp}
    manager.partition_added(tp)
    assert manager.txn_partitions == {tp}
    manager.committing_transaction()
    assert manager.needs_transaction_commit() == TransactionResult.COMMIT
    manager.complete_transaction()
    assert manager.state == TransactionState.READY
    await asyncio.wait_for(manager.wait_for_transaction_end(), 1)


def test_produce_request_versions_stay_below_transaction_version_2() -> None:
    # Produce v12+ means transaction version 2: the broker would add partitions to the
    # transaction through its own coordinator. Our producers must send v11 or older.
    versions = [struct.API_VERSION for struct in ProduceRequest._CLASSES]
    assert max(versions) <= 11, versions
