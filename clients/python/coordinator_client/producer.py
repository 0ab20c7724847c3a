"""`TransactionalProducer`: an aiokafka producer whose transactions are coordinated by
coordinator-server.

Records go to Kafka exactly as aiokafka's `AIOKafkaProducer` sends them (idempotent,
transactional batches, Produce v3 to v7); what Kafka's own transaction coordinator would do
is done by coordinator-server instead: it hands out the producer id and epoch
(InitProducerId, at `start`), learns which partitions the transaction writes to before
their first batch is sent (AddPartitionsToTxn), which group's offsets it commits
(AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator) and how it ends (EndTxn),
and writes the transaction markers to the partitions. The seam is aiokafka's `Sender`,
replaced by `txn_sender.CoordinatedSender` (its docstring lists the private aiokafka APIs
this relies on).

The Kafka cluster must accept transactional batches without asking its own transaction
coordinator about them: `transaction.partition.verification.enable=false` on the brokers.

Errors are aiokafka's: `ProducerFenced` when a newer producer with the same transactional id
started (the producer is then unusable, every later call raises it again), the transaction's
error on commit after a batch or an offset was refused (abort, then carry on),
`IllegalOperation` for a call out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaError
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.structs import OffsetAndMetadata, RecordMetadata, TopicPartition

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.security import ClientSecurity
from coordinator_client.txn_sender import CoordinatedSender

__all__ = ["TransactionalProducer"]

log = logging.getLogger(__name__)

# Kafka's transaction.timeout.ms default.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


class TransactionalProducer:
    """A transactional Kafka producer coordinated by coordinator-server.

    Args:
        bootstrap_servers: the Kafka cluster, for records.
        transactional_id: the producer's transactional id: a producer started with the
            same id fences this one (its open transaction is aborted).
        coordinator_bootstrap_servers: coordinator-server, "host:port[,host:port]"; or
            pass `coordinator_client` to share a `CoordinatorClient` (not closed here).
        transaction_timeout_ms: how long a transaction may stay open before the
            coordinator aborts it (at most the server's transaction.max.timeout.ms).
        client_id: for both Kafka and the coordinator.
        key_serializer, value_serializer: as in aiokafka.
        coordinator_options: more `CoordinatorClient` arguments (TLS, timeouts).
        security: how the coordinator connections are secured (`ClientSecurity`: Kafka's
            client settings, TLS and SASL), for the `CoordinatorClient` made here; a shared
            `coordinator_client` has its own. It does not touch the Kafka connections, which
            take aiokafka's security options.
        **kafka_options: more `AIOKafkaProducer` arguments (linger_ms, max_batch_size,
            compression_type, request_timeout_ms, retry_backoff_ms, Kafka security, ...);
            `acks` can only be "all" (idempotence requires it).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str | list[str],
        transactional_id: str,
        coordinator_bootstrap_servers: str | None = None,
        coordinator_client: CoordinatorClient | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        client_id: str = "transactional-producer",
        key_serializer: Callable[[Any], bytes] | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        coordinator_options: Mapping[str, Any] | None = None,
        security: ClientSecurity | None = None,
        **kafka_options: Any,
    ) -> None:
        if (coordinator_bootstrap_servers is None) == (coordinator_client is None):
            raise ValueError("give one of coordinator_bootstrap_servers and coordinator_client")
        if security is not None and coordinator_client is not None:
            raise ValueError("a shared coordinator_client has its own security; give it there")
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        for option in ("transactional_id", "enable_idempotence", "loop"):
            if option in kafka_options:
                raise ValueError(f"{option} is not an option of a TransactionalProducer")
        self.transactional_id = transactional_id
        self._owns_client = coordinator_client is None
        self._client = coordinator_client or CoordinatorClient(
            coordinator_bootstrap_servers or "",
            client_id=client_id,
            security=security,
            **dict(coordinator_options or {}),
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            **kafka_options,
        )
        forbid_auto_topic_creation(self._producer.client)
        self._sender = CoordinatedSender.replacing(self._producer._sender, coordinator=self._client)
        self._producer._sender = self._sender
        self._txn_manager = self._producer._txn_manager
        self._started = False
        self._closed = False

    # Life cycle

    async def start(self) -> None:
        """Connect to Kafka and get the producer id and epoch from the coordinator (which
        fences any older producer with this transactional id and aborts its transaction)."""
        if self._started:
            raise RuntimeError("the producer was already started")
        self._started = True
        try:
            await self._producer.start()
        except BaseException:
            await self._close()
            raise

    async def stop(self) -> None:
        """Send what is buffered and close. An open transaction is not ended here: the
        coordinator aborts it when its timeout passes, or when a producer with the same
        transactional id starts. Idempotent."""
        await self._close()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._producer.stop()
        finally:
            if self._owns_client:
                await self._client.close()

    async def __aenter__(self) -> TransactionalProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # State

    @property
    def producer_id(self) -> int:
        """The producer id the coordinator handed out (-1 before `start`)."""
        value: int = self._txn_manager.producer_id
        return value

    @property
    def producer_epoch(self) -> int:
        value: int = self._txn_manager.producer_epoch
        return value

    @property
    def coordinator_client(self) -> CoordinatorClient:
        return self._client

    @property
    def kafka_producer(self) -> AIOKafkaProducer:
        """The aiokafka producer underneath (for its metadata; sending through it directly
        bypasses the transaction bookkeeping of this class)."""
        return self._producer

    def in_transaction(self) -> bool:
        return bool(self._txn_manager.is_in_transaction())

    def _check_usable(self) -> None:
        """Raise what made this producer unusable, if anything did."""
        if self._closed:
            raise IllegalOperation("the producer is stopped")
        if not self._started:
            raise IllegalOperation("the producer is not started")
        error = self._fatal_error()
        if error is not None:
            raise error

    def _fatal_error(self) -> BaseException | None:
        if self._sender.fatal_error is not None:
            return self._sender.fatal_error
        task = self._sender.sender_task
        if task is not None and task.done() and not task.cancelled():
            error: BaseException | None = task.exception()
            return error
        return None

    async def _wait(self, future: asyncio.Future[Any]) -> Any:
        """Await one of aiokafka's transaction futures, raising the fatal error itself
        rather than aiokafka's wrapper of it."""
        try:
            return await asyncio.shield(future)
        except KafkaError:
            self._raise_fatal()
            raise

    def _raise_fatal(self) -> None:
        error = self._fatal_error()
        if error is not None:
            raise error from None

    # Transactions

    async def begin_transaction(self) -> None:
        """Start a transaction: every record sent until it ends is part of it."""
        self._check_usable()
        # The producer id came at start(), so the state is READY between transactions.
        if self._txn_manager.state != TransactionState.READY:
            raise IllegalOperation(
                f"cannot begin a transaction in state {self._txn_manager.state.name}"
            )
        self._txn_manager.begin_transaction()

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it.

        Raises:
            The transaction's error when a record or an offset of it was refused: the
            transaction can then only be aborted.
        """
        self._check_usable()
        state = self._txn_manager.state
        if state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            raise IllegalOperation(f"no transaction to commit (state {state.name})")
        # In ABORTABLE_ERROR this raises the transaction's error.
        self._txn_manager.committing_transaction()
        await self._wait(self._txn_manager.wait_for_transaction_end())

    async def abort_transaction(self) -> None:
        """Abort the transaction (its records are delivered first, then marked aborted)."""
        self._check_usable()
        state = self._txn_manager.state
        if state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            raise IllegalOperation(f"no transaction to abort (state {state.name})")
        self._txn_manager.aborting_transaction()
        await self._wait(self._txn_manager.wait_for_transaction_end())

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[TransactionalProducer]:
        """`async with producer.transaction():` begins a transaction, commits it when the
        block ends, and aborts it when the block raises (unless the producer is unusable:
        then the block's error is raised as it is)."""
        await self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self._fatal_error() is None and not self._closed:
                await self.abort_transaction()
            raise
        await self.commit_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str] | OffsetAndMetadata],
        group_id: str,
        *,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        """Commit `offsets` for consumer group `group_id` as part of the transaction: they
        become the group's committed offsets when it commits, never if it aborts.

        `generation_id`, `member_id` and `group_instance_id` name the group member that
        consumed the records (Kafka's `ConsumerGroupMetadata`, KIP-447; a
        `CoordinatedConsumer`'s `member` has them): the group then refuses the offsets if
        that member is no longer in it, and the transaction must be aborted
        (`CommitFailedError`). The defaults skip that check.
        """
        self._check_usable()
        self._sender.group_members[group_id] = (generation_id, member_id, group_instance_id)
        try:
            await self._producer.send_offsets_to_transaction(dict(offsets), group_id)
        except KafkaError:
            self._raise_fatal()
            raise

    # Records

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Add a record to the transaction; the future resolves once Kafka has it.

        A record Kafka refuses makes the transaction abortable: commit raises its error.
        """
        self._check_usable()
        future: asyncio.Future[RecordMetadata] = await self._producer.send(
            topic, value, key, partition, timestamp_ms, headers
        )
        future.add_done_callback(self._on_delivered)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> RecordMetadata:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def _on_delivered(self, future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None or self._fatal_error() is not None:
            return
        # Kafka's client: a failed batch makes the transaction abortable, so that it cannot
        # be committed without the record.
        log.warning("transactional id %r: a record was refused: %r", self.transactional_id, error)
        self._sender._abortable(error)

    async def flush(self) -> None:
        """Wait until every buffered record is delivered."""
        await self._producer.flush()

    async def partitions_for(self, topic: str) -> set[int]:
        partitions: set[int] = await self._producer.partitions_for(topic)
        return partitions
