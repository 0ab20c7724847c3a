"""`CoordinatedSender`: aiokafka's producer `Sender` whose transaction steps go to
coordinator-server instead of Kafka's transaction coordinator.

aiokafka's producer is three parts: the `MessageAccumulator` (batches per partition, stamped
with the producer id, epoch, sequence and the transactional flag), the `TransactionManager`
(the transaction's state machine: which partitions and offsets still have to be added, whether
to commit or abort) and the `Sender` (a task that sends the accumulator's batches to the
partition leaders and runs one transaction step at a time). The transaction steps are the
Sender's methods `_maybe_wait_for_pid` (InitProducerId) and `_do_add_partitions_to_txn`,
`_do_add_offsets_to_txn`, `_do_txn_offset_commit`, `_do_txn_commit` (AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn), which its loop calls in Kafka's order. This
subclass overrides exactly those five, sending each request to coordinator-server through
the RPC client; batches, sequences, retries of Produce, and the state machine stay
aiokafka's. aiokafka mutes a partition while it waits to be added, so no batch of a partition
reaches Kafka before the coordinator has acknowledged AddPartitionsToTxn for it.

Each step follows aiokafka's (and Kafka's Java client's) contract: one attempt; on success it
tells the TransactionManager; on a retriable answer it sleeps the retry back-off and returns,
and the Sender's loop runs the step again; on an abortable error it moves the transaction to
ABORTABLE_ERROR (the application must abort); on a fatal one (fencing among them) it raises,
which ends the Sender's task and makes the producer unusable (aiokafka fails every pending
batch and the transaction with it).

Three departures from aiokafka's own steps, all Kafka's Java client's behaviour:

- EndTxn is sent whenever the coordinator knows something of the transaction, even after
  an abortable error cleared aiokafka's list of the transaction's partitions (aiokafka would
  skip the abort, leaving the transaction Ongoing at the coordinator until it times out).
- A commit whose flush saw a batch fail does not send EndTxn(commit): the transaction is in
  ABORTABLE_ERROR by then (see `producer.TransactionalProducer.send`) and must be aborted.
- On an abortable error, the batches of partitions not yet added fail (aiokafka would unmute
  and send them, outside the transaction the coordinator knows).

Private aiokafka APIs this depends on (pinned by tests/client/test_producer_aiokafka_seams.py):
`aiokafka.producer.sender.Sender` (its constructor's keywords, the five step methods above,
its attributes `_txn_manager`, `_message_accumulator`, `_retry_backoff`, `_acks`,
`_request_timeout_ms`, `client`, `sender_task`), `MessageAccumulator.flush_for_commit` and its
`_batches` (the undrained batches per partition, failed on an abortable error), and
`TransactionManager`'s methods the steps call (`set_pid_and_epoch`, `partitions_to_add`,
`partition_added`, `consumer_group_added`, `offset_committed`, `needs_transaction_commit`,
`complete_transaction`, `error_transaction`, `state`, `txn_partitions`, producer id and epoch).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable, Mapping
from typing import Any, Final

from aiokafka.errors import (
    CommitFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnknownError,
)
from aiokafka.errors import for_code as aiokafka_error_for_code
from aiokafka.producer.sender import Sender
from aiokafka.producer.transaction_manager import TransactionResult, TransactionState
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_client import txn_requests
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.connection_problems import connect_cause
from coordinator_client.rpc.errors import ClientClosedError, ClientError
from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code

__all__ = ["CoordinatedSender", "TransactionStepError"]

log = logging.getLogger(__name__)

# Answers after which a step is tried again (the RPC client already retries the coordinator
# ones within its deadline; they come back here once that deadline passed).
_RETRY: Final = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)
# Kafka's client treats both as "a newer producer with this transactional id exists".
_FENCED: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})
# A TxnOffsetCommit the group refused because the consumer's membership is stale (KIP-447):
# abortable, as Kafka's client (CommitFailedException).
_STALE_MEMBER: Final = frozenset(
    {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}
)
# KAFKA-5477: right after a transaction ended, the coordinator answers
# CONCURRENT_TRANSACTIONS until its markers are written; the first AddPartitionsToTxn of the
# next transaction retries sooner than the back-off (aiokafka's and Kafka's 20 ms).
_CONCURRENT_TRANSACTIONS_BACKOFF_S: Final = 0.02


class TransactionStepError(KafkaError):  # type: ignore[misc]
    """A transaction step got an answer the producer cannot recover from (other than being
    fenced, which raises aiokafka's `ProducerFenced`): `__cause__` is the coordinator's
    error."""


class CoordinatedSender(Sender):  # type: ignore[misc]
    """aiokafka's `Sender` with the transaction steps sent to coordinator-server."""

    def __init__(self, client: Any, *, coordinator: CoordinatorClient, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self._coordinator = coordinator
        # Whether the coordinator may hold partitions or offsets of the current transaction,
        # so that an abort is sent even when aiokafka's own lists were cleared.
        self._registered = False
        # The consumer group member whose offsets TxnOffsetCommit sends, per group (KIP-447:
        # the group refuses offsets of a member that is no longer in it), as
        # (generation_id, member_id, group_instance_id).
        self.group_members: dict[str, tuple[int, str, str | None]] = {}
        # The groups the coordinator added to the current transaction (AddOffsetsToTxn).
        self._groups_added: set[str] = set()
        # The error that made the producer unusable, as the application should see it
        # (aiokafka wraps what is not ProducerFenced in "Unexpected error").
        self.fatal_error: BaseException | None = None

    @classmethod
    def replacing(cls, sender: Sender, *, coordinator: CoordinatorClient) -> CoordinatedSender:
        """A sender with the settings of aiokafka's `sender` (before it is started)."""
        return cls(
            sender.client,
            coordinator=coordinator,
            acks=sender._acks,
            txn_manager=sender._txn_manager,
            message_accumulator=sender._message_accumulator,
            retry_backoff_ms=sender._retry_backoff * 1000,
            request_timeout_ms=sender._request_timeout_ms,
        )

    # Outcomes shared by the steps

    def _fatal(self, error: BaseException) -> BaseException:
        """Remember `error` as the end of this producer; the caller raises it."""
        if self.fatal_error is None:
            self.fatal_error = error
        return error

    def _fenced(self, code: int) -> BaseException:
        error = ProducerFenced()
        error.__cause__ = _api_error(code)
        return self._fatal(error)

    def _unexpected(self, step: str, code: int) -> BaseException:
        error = TransactionStepError(f"{step}: {_code_name(code)}")
        error.__cause__ = _api_error(code)
        return self._fatal(error)

    def _refused(self, step: str, code: int) -> BaseException:
        """The fatal error for an answer no step recovers from: fenced, not authorized for
        the transactional id, or unexpected."""
        if code in _FENCED:
            return self._fenced(code)
        if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return self._fatal(TransactionalIdAuthorizationFailed(self._transactional_id))
        return self._unexpected(step, code)

    def _abortable(self, error: BaseException) -> None:
        """Move the transaction to ABORTABLE_ERROR (the application must abort it)."""
        manager = self._txn_manager
        if manager.state not in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING_TRANSACTION,
        ):
            return
        not_added = set(manager.partitions_to_add())
        manager.error_transaction(error)
        # aiokafka forgets the partitions still waiting to be added, which unmutes them: their
        # batches would reach Kafka in a transaction the coordinator does not know them in
        # (and no marker would ever end them). Kafka's client fails them; so does this.
        batches = self._message_accumulator._batches
        for tp in not_added:
            for batch in batches.pop(tp, ()):
                batch.failure(error)

    async def _back_off(self, seconds: float | None = None) -> None:
        await asyncio.sleep(self._retry_backoff if seconds is None else seconds)

    async def _call(self, step: str, call: Any) -> Any | None:
        """The coordinator's answer, or None after a transient failure (and its back-off)."""
        try:
            return await call
        except ClientClosedError:
            raise
        except ssl.SSLError as e:
            # A certificate that does not verify will not on the next try either.
            error = TransactionStepError(
                f"{step}: the coordinator at {self._coordinator.describe_bootstrap()}: "
                f"{connect_cause(e)}"
            )
            raise self._fatal(error) from e
        except (ClientError, OSError) as e:
            # One line a call: each call retries for its whole deadline first, and the
            # client logs the connection problems themselves as they happen.
            log.warning("%s for %r failed, retrying: %s", step, self._transactional_id, e)
        except ApiError as e:
            # An error the RPC client raised rather than returned: a retriable one whose
            # retries outlasted its deadline, or the answer's own.
            if e.code not in _RETRY:
                raise self._refused(step, e.code) from e
            log.info("%s for %r: %s, retrying", step, self._transactional_id, e.code.name)
        await self._back_off()
        return None

    @property
    def _transactional_id(self) -> str:
        transactional_id: str = self._txn_manager.transactional_id
        return transactional_id

    # The steps

    async def _maybe_wait_for_pid(self) -> None:
        manager = self._txn_manager
        if manager is None or manager.has_pid():
            return
        while True:
            response = await self._call(
                "InitProducerId",
                self._coordinator.init_producer_id(
                    txn_requests.init_producer_id(
                        self._transactional_id, manager.transaction_timeout_ms
                    ),
                    raise_on_error=False,
                ),
            )
            if response is None:
                continue
            code = response.error_code
            if code == ErrorCode.NONE:
                log.debug(
                    "transactional id %r: producer id %d, epoch %d",
                    self._transactional_id,
                    response.producer_id,
                    response.producer_epoch,
                )
                manager.set_pid_and_epoch(response.producer_id, response.producer_epoch)
                return
            if code not in _RETRY:
                raise self._refused("InitProducerId", code)
            await self._back_off()

    async def _do_add_partitions_to_txn(self, tps: Iterable[TopicPartition]) -> None:
        manager = self._txn_manager
        # A snapshot: aiokafka passes its live set, which grows as batches arrive.
        partitions = sorted(tps)
        response = await self._call(
            "AddPartitionsToTxn",
            self._coordinator.add_partitions_to_txn(
                txn_requests.add_partitions_to_txn(
                    self._transactional_id,
                    manager.producer_id,
                    manager.producer_epoch,
                    partitions,
                ),
                raise_on_error=False,
            ),
        )
        if response is None:
            return
        backoff: float | None = None
        unauthorized: set[str] = set()
        for tp, code in txn_requests.add_partitions_errors(response, partitions):
            if code == ErrorCode.NONE:
                self._registered = True
                # An abortable error may have cleared the pending set meanwhile.
                if tp in manager.partitions_to_add():
                    manager.partition_added(tp)
            elif code == ErrorCode.CONCURRENT_TRANSACTIONS and not manager.txn_partitions:
                backoff = min(backoff or _CONCURRENT_TRANSACTIONS_BACKOFF_S, self._retry_backoff)
            elif code in _RETRY or code in (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.OPERATION_NOT_ATTEMPTED,
            ):
                backoff = self._retry_backoff
            elif code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                unauthorized.add(tp.topic)
            else:
                raise self._refused("AddPartitionsToTxn", code)
        if unauthorized:
            self._abortable(TopicAuthorizationFailedError(unauthorized))
        elif backoff is not None:
            await self._back_off(backoff)

    async def _do_add_offsets_to_txn(self, group_id: str) -> None:
        manager = self._txn_manager
        response = await self._call(
            "AddOffsetsToTxn",
            self._coordinator.add_offsets_to_txn(
                txn_requests.add_offsets_to_txn(
                    self._transactional_id, manager.producer_id, manager.producer_epoch, group_id
                ),
                raise_on_error=False,
            ),
        )
        if response is None:
            return
        code = response.error_code
        if code == ErrorCode.NONE:
            self._registered = True
            self._groups_added.add(group_id)
            manager.consumer_group_added(group_id)
        elif code in _RETRY:
            await self._back_off()
        elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            self._abortable(GroupAuthorizationFailedError(group_id))
        else:
            raise self._refused("AddOffsetsToTxn", code)

    async def _do_txn_offset_commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group_id: str
    ) -> None:
        if not offsets:
            return
        if group_id not in self._groups_added:
            # aiokafka adds only the transaction's first group (AddOffsetsToTxn); the
            # offsets of another group must not go out before it is added too.
            await self._do_add_offsets_to_txn(group_id)
            return
        manager = self._txn_manager
        # A snapshot: offset_committed removes from aiokafka's mapping.
        pending = dict(offsets)
        response = await self._call(
            "TxnOffsetCommit",
            self._coordinator.txn_offset_commit(
                txn_requests.txn_offset_commit(
                    self._transactional_id,
                    manager.producer_id,
                    manager.producer_epoch,
                    group_id,
                    pending,
                    *self.group_members.get(group_id, (-1, "", None)),
                ),
            ),
        )
        if response is None:
            return
        retry = False
        for tp, code in txn_requests.txn_offset_commit_errors(response):
            if tp not in pending:
                continue
            if code == ErrorCode.NONE:
                manager.offset_committed(tp, pending[tp].offset, group_id)
            elif code in _RETRY or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                retry = True
            elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                self._abortable(GroupAuthorizationFailedError(group_id))
                return
            elif code in _STALE_MEMBER:
                self._abortable(CommitFailedError(f"group {group_id!r}: {_code_name(code)}"))
                return
            else:
                raise self._refused("TxnOffsetCommit", code)
        if retry:
            await self._back_off()

    async def _do_txn_commit(self, commit_result: TransactionResult) -> None:
        # Every batch of the transaction is delivered (or failed) first.
        await self._message_accumulator.flush_for_commit()
        manager = self._txn_manager
        if manager.needs_transaction_commit() != commit_result:
            # A batch failed during the flush: the transaction is now in ABORTABLE_ERROR and
            # the application's abort will end it.
            return
        if not self._registered:
            # Nothing of it reached the coordinator: nothing to end there.
            self._transaction_ended()
            return
        committed = commit_result == TransactionResult.COMMIT
        response = await self._call(
            "EndTxn",
            self._coordinator.end_txn(
                txn_requests.end_txn(
                    self._transactional_id, manager.producer_id, manager.producer_epoch, committed
                ),
                raise_on_error=False,
            ),
        )
        if response is None:
            return
        code = response.error_code
        if code == ErrorCode.NONE:
            self._transaction_ended()
        elif code in _RETRY:
            await self._back_off()
        else:
            raise self._refused("EndTxn", code)

    def _transaction_ended(self) -> None:
        self._registered = False
        self._groups_added.clear()
        self.group_members.clear()
        self._txn_manager.complete_transaction()


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def _api_error(code: int) -> BaseException:
    """aiokafka's exception for `code` where it has one, else ours."""
    error_type = aiokafka_error_for_code(code)
    if error_type is not UnknownError:
        error: BaseException = error_type()
        return error
    return error_for_code(code)
