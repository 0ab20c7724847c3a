"""TransactionManager: the transaction coordinator's state machine for one log partition
(Kafka's TransactionCoordinator, TransactionStateManager and ProducerIdManager, for the
transactional ids that hash to the partition).

Pure, like the group managers: handlers read the state and return records and a result;
`replay` (and `apply`, for the producer id cursor) is the only way the state changes. The
transactional ids' metadata lives in a timeline map, so a failed append reverts it and
reads can be answered as of the committed offset.

Kafka's handlers append a transition and complete it in the append's callback, with a
pending state in between; here the transition is replayed at once (see `metadata.py`), so
the handlers keep Kafka's checks and error codes but never meet a pending transition. Kafka's
transaction version 2 (an epoch bump at every EndTxn) is not offered: producers speak
versions 0 and 1, whose epochs change only at InitProducerId and when a transaction is
fenced.

A transaction that reaches PrepareCommit or PrepareAbort hands a `PendingCompleteTxn` to the
caller: the markers it owes. Once they are written the caller calls `complete_transaction`,
which writes CompleteCommit or CompleteAbort; after a load, `pending_completions` lists the
transactions still owed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from coordinator_protocol.errors import ErrorCode
from coordinator_server.records import (
    CoordinatorRecord,
    RefusedMarkers,
    TransactionValue,
    new_transaction_record,
    new_transaction_tombstone_record,
)
from coordinator_server.runtime.api import Clock, CoordinatorResult, CoordinatorTimer
from coordinator_server.timeline import SnapshotRegistry, TimelineDict
from coordinator_server.transactions.metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    NO_PARTITIONS,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    TxnPartitions,
    check_transition,
    is_epoch_exhausted,
)
from coordinator_server.transactions.producer_ids import (
    ProducerIdManager,
    ProducerIdsExhaustedError,
    ProducerIdUpdate,
)
from coordinator_server.transactions.results import (
    AddOffsetsToTxnResult,
    AddPartitionsToTxnResult,
    CompleteTransactionResult,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsResult,
    PendingCompleteTxn,
    TransactionDescription,
    TransactionsConfig,
)

ABORT_TIMED_OUT_KEY = "transaction-abort"
EXPIRE_TRANSACTIONAL_IDS_KEY = "transactional-id-expiration"

NONE = int(ErrorCode.NONE)


def _init_error(error: int) -> InitProducerIdResult:
    return InitProducerIdResult(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


# Kafka's answer while its producer id manager waits for a block (retriable), for a caller
# that does not bring the id the request needs.
_NEEDS_PRODUCER_ID = InitProducerIdResult(
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    NO_PRODUCER_ID,
    NO_PRODUCER_EPOCH,
    needs_producer_id=True,
)


class TransactionManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        clock: Clock,
        timer: CoordinatorTimer,
        config: TransactionsConfig,
        id_count: Callable[[], int] | None = None,
    ) -> None:
        """`id_count` says how many transactional ids the node holds over all its
        partitions (for `max_transactional_ids`); None: this partition's own."""
        self._clock = clock
        self._timer = timer
        self.config = config
        self._transactions: TimelineDict[str, TransactionMetadata] = TimelineDict(registry)
        self._id_count: Callable[[], int] = id_count or self.num_transactional_ids
        self.producer_ids = ProducerIdManager(
            registry,
            config.producer_id_start,
            config.producer_id_end,
            config.num_partitions,
            config.partition,
        )
        # Transactions aborted because they outlived their timeout, counted as the abort is
        # prepared (a retry of a failed write counts again). The metrics count them as they
        # complete instead (`PendingCompleteTxn.timed_out`), once, on whichever node ends them.
        self.aborted_by_timeout = 0

    # Replay: the only way the state changes.

    def replay(self, transactional_id: str, value: TransactionValue | None) -> None:
        if value is None:
            self._transactions.pop(transactional_id)
        else:
            self._transactions[transactional_id] = TransactionMetadata.from_value(
                transactional_id, value
            )

    def replay_producer_id_block(self, next_block_start: int) -> None:
        self.producer_ids.replay_block(next_block_start)

    def apply(self, update: ProducerIdUpdate) -> None:
        self.producer_ids.apply(update)

    # The state, for reads and tests.

    def transaction(
        self, transactional_id: str, committed_offset: int | None = None
    ) -> TransactionMetadata | None:
        """The metadata now, or as of `committed_offset`."""
        if committed_offset is None:
            return self._transactions.get(transactional_id)
        return self._transactions.get_at(transactional_id, committed_offset)

    def transactions(self, committed_offset: int | None = None) -> list[TransactionMetadata]:
        if committed_offset is None:
            return list(self._transactions.values())
        return [txn for _, txn in self._transactions.items_at(committed_offset)]

    def num_transactional_ids(self) -> int:
        return len(self._transactions)

    def count_by_state(self) -> dict[str, int]:
        """Transactional ids per state (Kafka's names), for the metrics."""
        counts: dict[str, int] = {}
        for txn in self._transactions.values():
            name = txn.state.kafka_name
            counts[name] = counts.get(name, 0) + 1
        return counts

    def _new_producer_id(
        self,
        records: list[CoordinatorRecord],
        updates: list[ProducerIdUpdate],
        fresh_producer_id: int | None,
    ) -> int | None:
        """A producer id never handed out before: with ids from the Kafka cluster, the one
        it handed out for this request (None when the request brought none); otherwise the
        next of this partition's range (a block record added to `records` when one is
        used up, the cursor's update to `updates`)."""
        if self.config.producer_ids_from_cluster:
            return fresh_producer_id
        new_id, update = self.producer_ids.generate_producer_id(records)
        updates.append(update)
        return new_id

    # Handlers.

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        fresh_producer_id: int | None = None,
    ) -> CoordinatorResult[InitProducerIdResult]:
        """Kafka's handleInitProducerId. Without a transactional id, a fresh producer id at
        epoch 0 (an idempotent producer). With one: its producer id at the next epoch (a
        new id once the epochs are exhausted), the previous producer fenced; with a known
        producer id and epoch, the same producer resumes (KIP-360). An Ongoing transaction
        is aborted first, and the caller retries (CONCURRENT_TRANSACTIONS)."""
        records: list[CoordinatorRecord] = []
        updates: list[ProducerIdUpdate] = []
        if transactional_id is None:
            try:
                new_id = self._new_producer_id(records, updates, fresh_producer_id)
            except ProducerIdsExhaustedError:
                return CoordinatorResult(response=_init_error(ErrorCode.UNKNOWN_SERVER_ERROR))
            if new_id is None:
                return CoordinatorResult(response=_NEEDS_PRODUCER_ID)
            return CoordinatorResult(
                records, InitProducerIdResult(NONE, new_id, 0), updates=updates
            )
        if not transactional_id:
            return CoordinatorResult(response=_init_error(ErrorCode.INVALID_REQUEST))
        # KafkaApis: a producer id and epoch come together or not at all.
        expected: tuple[int, int] | None
        if producer_id == NO_PRODUCER_ID and producer_epoch == NO_PRODUCER_EPOCH:
            expected = None
        elif producer_id == NO_PRODUCER_ID or producer_epoch == NO_PRODUCER_EPOCH:
            return CoordinatorResult(response=_init_error(ErrorCode.INVALID_REQUEST))
        else:
            expected = (producer_id, producer_epoch)
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            return CoordinatorResult(response=_init_error(ErrorCode.INVALID_TRANSACTION_TIMEOUT))

        now_ms = self._clock.now_ms()
        txn = self._transactions.get(transactional_id)
        if txn is None:
            if self._id_count() >= self.config.max_transactional_ids:
                return CoordinatorResult(response=_init_error(ErrorCode.POLICY_VIOLATION))
            try:
                new_id = self._new_producer_id(records, updates, fresh_producer_id)
            except ProducerIdsExhaustedError:
                return CoordinatorResult(response=_init_error(ErrorCode.UNKNOWN_SERVER_ERROR))
            if new_id is None:
                return CoordinatorResult(response=_NEEDS_PRODUCER_ID)
            txn = TransactionMetadata.new(transactional_id, new_id, transaction_timeout_ms, now_ms)

        if expected is not None and not (
            # A just created id (its epoch is -1) goes to whoever asks; otherwise the caller
            # must be the id's producer, or its previous one retrying a rotation it never
            # heard the answer of.
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return CoordinatorResult(response=_init_error(ErrorCode.PRODUCER_FENCED))

        state = txn.state
        if state is PREPARE_ABORT or state is PREPARE_COMMIT:
            return CoordinatorResult(response=_init_error(ErrorCode.CONCURRENT_TRANSACTIONS))
        if state is ONGOING:
            # The epoch bumped here is never answered: the transaction is aborted with it,
            # and the caller's retry bumps it again (to a new producer id if this bump
            # exhausted the epochs).
            fenced = txn.prepare_fence_producer_epoch()
            target = fenced.prepare_abort_or_commit(PREPARE_ABORT, now_ms)
            check_transition(fenced, target)
            records.append(new_transaction_record(transactional_id, target.to_value()))
            return CoordinatorResult(
                records,
                InitProducerIdResult(
                    ErrorCode.CONCURRENT_TRANSACTIONS,
                    NO_PRODUCER_ID,
                    NO_PRODUCER_EPOCH,
                    _completion(target),
                ),
                updates=updates,
            )
        if state is DEAD or state is PREPARE_EPOCH_FENCE:
            raise IllegalTransitionError(f"{transactional_id} is {state.kafka_name}: never kept")

        target_or_none: TransactionMetadata | None
        if txn.is_producer_epoch_exhausted and (
            expected is None or expected[1] == txn.producer_epoch
        ):
            try:
                rotated_id = self._new_producer_id(records, updates, fresh_producer_id)
            except ProducerIdsExhaustedError:
                return CoordinatorResult(response=_init_error(ErrorCode.UNKNOWN_SERVER_ERROR))
            if rotated_id is None:
                return CoordinatorResult(response=_NEEDS_PRODUCER_ID)
            target_or_none = txn.prepare_producer_id_rotation(
                rotated_id, transaction_timeout_ms, now_ms, expected is not None
            )
        else:
            target_or_none = txn.prepare_increment_producer_epoch(
                transaction_timeout_ms, None if expected is None else expected[1], now_ms
            )
        if target_or_none is None:
            return CoordinatorResult(response=_init_error(ErrorCode.PRODUCER_FENCED))
        target = target_or_none
        check_transition(txn, target)
        records.append(new_transaction_record(transactional_id, target.to_value()))
        return CoordinatorResult(
            records,
            InitProducerIdResult(NONE, target.producer_id, target.producer_epoch),
            updates=updates,
        )

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: TxnPartitions | Sequence[tuple[str, Sequence[int]]],
    ) -> CoordinatorResult[AddPartitionsToTxnResult]:
        """Kafka's handleAddPartitionsToTransaction: the partitions join the transaction,
        which becomes Ongoing. One error for every partition, as Kafka answers. The
        partitions may come as a `TxnPartitions` made beforehand: the work done here is
        then a copy of the transaction's map of topics, and set operations on the topics
        the request names."""
        partitions = topics if isinstance(topics, TxnPartitions) else TxnPartitions.of(topics)
        error, records = self._add_to_transaction(
            transactional_id, producer_id, producer_epoch, partitions, frozenset()
        )
        return CoordinatorResult(records, AddPartitionsToTxnResult(error))

    def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        group_log_partition: int,
    ) -> CoordinatorResult[AddOffsetsToTxnResult]:
        """Kafka's handleAddOffsetsToTxn: the group's partition of the coordinator log joins
        the transaction (Kafka adds the group's __consumer_offsets partition the same way),
        so that its markers settle the group's transactional offsets."""
        if not 0 <= group_log_partition < self.config.num_partitions:
            return CoordinatorResult(response=AddOffsetsToTxnResult(ErrorCode.INVALID_REQUEST))
        error, records = self._add_to_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            NO_PARTITIONS,
            frozenset((group_log_partition,)),
        )
        return CoordinatorResult(records, AddOffsetsToTxnResult(error))

    def _add_to_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: TxnPartitions,
        log_partitions: frozenset[int],
    ) -> tuple[int, list[CoordinatorRecord]]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, []
        txn = self._transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, []
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, []
        if txn.state is PREPARE_COMMIT or txn.state is PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS, []
        if (
            txn.state is ONGOING
            and partitions <= txn.partitions
            and log_partitions <= txn.log_partitions
        ):
            return NONE, []
        most = self.config.max_partitions_per_transaction
        if len(txn.partitions) + len(partitions) > most and len(txn.partitions | partitions) > most:
            return ErrorCode.POLICY_VIOLATION, []
        target = txn.prepare_add_partitions(partitions, log_partitions, self._clock.now_ms())
        check_transition(txn, target)
        return NONE, [new_transaction_record(transactional_id, target.to_value())]

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[EndTxnResult]:
        """Kafka's handleEndTransaction (from a client, transaction versions 0 and 1): an
        Ongoing transaction moves to PrepareCommit or PrepareAbort and its markers are owed
        (the result's completion). A retry after the transaction completed the same way is
        answered NONE; one while its markers are on their way CONCURRENT_TRANSACTIONS; the
        other direction INVALID_TXN_STATE."""
        if not transactional_id:
            return CoordinatorResult(
                response=EndTxnResult(ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            )
        txn = self._transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            error: int = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif txn.producer_epoch != producer_epoch:
            error = ErrorCode.PRODUCER_FENCED
        else:
            state = txn.state
            if state is ONGOING:
                now_ms = self._clock.now_ms()
                target = txn.prepare_abort_or_commit(
                    PREPARE_COMMIT if committed else PREPARE_ABORT, now_ms
                )
                check_transition(txn, target)
                return CoordinatorResult(
                    [new_transaction_record(transactional_id, target.to_value())],
                    EndTxnResult(
                        NONE, target.producer_id, target.producer_epoch, _completion(target)
                    ),
                )
            if state is (COMPLETE_COMMIT if committed else COMPLETE_ABORT):
                return CoordinatorResult(
                    response=EndTxnResult(NONE, txn.producer_id, txn.producer_epoch)
                )
            if state is (PREPARE_COMMIT if committed else PREPARE_ABORT):
                error = ErrorCode.CONCURRENT_TRANSACTIONS
            elif state is DEAD or state is PREPARE_EPOCH_FENCE:
                raise IllegalTransitionError(
                    f"{transactional_id} is {state.kafka_name}: never kept"
                )
            else:
                error = ErrorCode.INVALID_TXN_STATE
        return CoordinatorResult(response=EndTxnResult(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

    def complete_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        prepared_ms: int = -1,
        refused_markers: RefusedMarkers = (),
    ) -> CoordinatorResult[CompleteTransactionResult]:
        """Every marker of the transaction is written, or refused for good
        (`refused_markers`, kept in the record for DescribeTransactions): CompleteCommit or
        CompleteAbort (Kafka's completion in TransactionMarkerChannelManager). A completion
        the state has
        moved past is ignored, with the reason; one already written is NONE. `prepared_ms`
        (the completion's): with it, only the very transaction that was prepared then is
        completed, not a later one of the same producer id and epoch (under transaction
        versions 0 and 1 the epoch stays from one transaction to the next)."""
        txn = self._transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            error: int = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif txn.producer_epoch != producer_epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif txn.state is (COMPLETE_COMMIT if committed else COMPLETE_ABORT):
            error = NONE
        elif txn.state is not (PREPARE_COMMIT if committed else PREPARE_ABORT) or (
            prepared_ms >= 0 and prepared_ms != txn.txn_last_update_timestamp_ms
        ):
            error = ErrorCode.INVALID_TXN_STATE
        else:
            target = txn.prepare_complete(self._clock.now_ms(), refused_markers)
            check_transition(txn, target)
            return CoordinatorResult(
                [new_transaction_record(transactional_id, target.to_value())],
                CompleteTransactionResult(NONE, written=True),
            )
        return CoordinatorResult(response=CompleteTransactionResult(error))

    def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        log_partition: int,
        committed_offset: int | None = None,
    ) -> int:
        """Whether the producer's ongoing transaction added the log partition (AddOffsetsToTxn
        of a group on it): the check of a TxnOffsetCommit (Kafka's verification of a
        transactional write, KIP-890, as the transaction coordinator answers it)."""
        txn = self.transaction(transactional_id, committed_offset)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state is not ONGOING or log_partition not in txn.log_partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def is_prepared(
        self, completion: PendingCompleteTxn, committed_offset: int | None = None
    ) -> bool:
        """Whether `completion` is still owed: its transaction is the one prepared then, in
        PrepareCommit or PrepareAbort. A completion found by a sweep just before its
        transaction completed is not: its markers, written now, would end the producer's
        next transaction on the brokers (same producer id and epoch) before it ends."""
        txn = self.transaction(completion.transactional_id, committed_offset)
        return (
            txn is not None
            and (txn.state is PREPARE_COMMIT or txn.state is PREPARE_ABORT)
            and (txn.state is PREPARE_COMMIT) == completion.committed
            and txn.producer_id == completion.producer_id
            and txn.producer_epoch == completion.producer_epoch
            and txn.txn_last_update_timestamp_ms == completion.prepared_ms
        )

    def pending_completions(self, committed_offset: int | None = None) -> list[PendingCompleteTxn]:
        """Every transaction in PrepareCommit or PrepareAbort: markers owed (after a load,
        those its previous owner did not finish)."""
        return [
            _completion(txn)
            for txn in self.transactions(committed_offset)
            if txn.state is PREPARE_COMMIT or txn.state is PREPARE_ABORT
        ]

    # Timers.

    def on_loaded(self) -> None:
        self._schedule_abort_timed_out()
        self._schedule_expiration()

    def abort_timed_out_transactions(self) -> CoordinatorResult[tuple[PendingCompleteTxn, ...]]:
        """Kafka's abortTimedOutTransactions: every transaction Ongoing for longer than its
        timeout is fenced (its epoch bumped) and aborted; the result's response holds the
        completions owed."""
        now_ms = self._clock.now_ms()
        records: list[CoordinatorRecord] = []
        completions: list[PendingCompleteTxn] = []
        for transactional_id, txn in self._transactions.items():
            if txn.state is ONGOING and txn.txn_start_timestamp_ms + txn.timeout_ms < now_ms:
                fenced = txn.prepare_fence_producer_epoch()
                target = fenced.prepare_abort_or_commit(PREPARE_ABORT, now_ms)
                check_transition(fenced, target)
                records.append(new_transaction_record(transactional_id, target.to_value()))
                completions.append(_completion(target))
        self.aborted_by_timeout += len(completions)
        self._schedule_abort_timed_out()
        return CoordinatorResult(records, tuple(completions))

    def remove_expired_transactional_ids(self) -> CoordinatorResult[None]:
        """Kafka's removeExpiredTransactionalIds: an id idle (Empty, CompleteCommit or
        CompleteAbort) for longer than `transactional_id_expiration_ms` is deleted."""
        deadline_ms = self._clock.now_ms() - self.config.transactional_id_expiration_ms
        records: list[CoordinatorRecord] = []
        for transactional_id, txn in self._transactions.items():
            if txn.state.is_expiration_allowed and txn.txn_last_update_timestamp_ms <= deadline_ms:
                txn.prepare_dead()
                records.append(new_transaction_tombstone_record(transactional_id))
        self._schedule_expiration()
        return CoordinatorResult(records)

    def _schedule_abort_timed_out(self) -> None:
        interval_ms = self.config.abort_timed_out_interval_ms
        self._timer.schedule(
            ABORT_TIMED_OUT_KEY,
            interval_ms,
            self.abort_timed_out_transactions,
            retry=True,
            retry_backoff_ms=interval_ms,
        )

    def _schedule_expiration(self) -> None:
        interval_ms = self.config.remove_expired_interval_ms
        self._timer.schedule(
            EXPIRE_TRANSACTIONAL_IDS_KEY,
            interval_ms,
            self.remove_expired_transactional_ids,
            retry=True,
            retry_backoff_ms=interval_ms,
        )

    # Reads.

    def describe_transactions(
        self, transactional_ids: Sequence[str], committed_offset: int | None = None
    ) -> list[TransactionDescription]:
        """Kafka's handleDescribeTransactions, for each id."""
        described: list[TransactionDescription] = []
        for transactional_id in transactional_ids:
            if not transactional_id:
                described.append(
                    TransactionDescription(ErrorCode.INVALID_REQUEST, transactional_id)
                )
                continue
            txn = self.transaction(transactional_id, committed_offset)
            if txn is None:
                described.append(
                    TransactionDescription(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
                )
                continue
            described.append(
                TransactionDescription(
                    NONE,
                    transactional_id,
                    txn.state.kafka_name,
                    txn.timeout_ms,
                    txn.txn_start_timestamp_ms,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.partitions.by_topic(),
                    tuple(sorted(txn.log_partitions)),
                    txn.refused_markers,
                )
            )
        return described

    def transactional_ids(self, committed_offset: int | None = None) -> list[str]:
        """The transactional ids held now, or as of `committed_offset`, in no particular
        order: what a listing walks, a part at a time (`list_transactions_of`)."""
        if committed_offset is None:
            return list(self._transactions)
        return self._transactions.keys_at(committed_offset)

    def list_transactions_of(
        self,
        transactional_ids: Iterable[str],
        states: Collection[TransactionState] | None,
        producer_id_filters: Collection[int],
        duration_filter_ms: int = -1,
        committed_offset: int | None = None,
    ) -> list[ListedTransaction]:
        """Of `transactional_ids`, in their order, those held and in one of `states` (None:
        any), of one of `producer_id_filters` (empty: any), running longer than
        `duration_filter_ms` (-1: any); an id no longer held is left out."""
        now_ms = self._clock.now_ms()
        listed: list[ListedTransaction] = []
        for transactional_id in transactional_ids:
            txn = self.transaction(transactional_id, committed_offset)
            if (
                txn is not None
                and (not producer_id_filters or txn.producer_id in producer_id_filters)
                and (states is None or txn.state in states)
                and (
                    duration_filter_ms < 0
                    or now_ms - txn.txn_start_timestamp_ms > duration_filter_ms
                )
            ):
                listed.append(
                    ListedTransaction(transactional_id, txn.producer_id, txn.state.kafka_name)
                )
        return listed

    def list_transactions(
        self,
        state_filters: Collection[str],
        producer_id_filters: Collection[int],
        duration_filter_ms: int = -1,
        committed_offset: int | None = None,
    ) -> ListTransactionsResult:
        """Kafka's listTransactionStates: the ids in one of `state_filters` (Kafka's names;
        unknown ones are answered back), of one of `producer_id_filters`, running longer
        than `duration_filter_ms` (-1: any); empty filters match everything."""
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_filters:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        now_ms = self._clock.now_ms()
        listed = tuple(
            ListedTransaction(txn.transactional_id, txn.producer_id, txn.state.kafka_name)
            for txn in self.transactions(committed_offset)
            if (not producer_id_filters or txn.producer_id in producer_id_filters)
            and (not state_filters or txn.state in states)
            and (duration_filter_ms < 0 or now_ms - txn.txn_start_timestamp_ms > duration_filter_ms)
        )
        return ListTransactionsResult(NONE, tuple(unknown), listed)


def _completion(txn: TransactionMetadata) -> PendingCompleteTxn:
    committed = txn.state is PREPARE_COMMIT
    prepared_ms = txn.txn_last_update_timestamp_ms
    return PendingCompleteTxn(
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        committed,
        txn.partitions.by_topic(),
        tuple(sorted(txn.log_partitions)),
        prepared_ms,
        txn.txn_start_timestamp_ms,
        # The test of abort_timed_out_transactions, at the moment of the abort: the same
        # whether the completion comes from the abort or from a sweep after a load.
        timed_out=not committed and txn.txn_start_timestamp_ms + txn.timeout_ms < prepared_ms,
    )
