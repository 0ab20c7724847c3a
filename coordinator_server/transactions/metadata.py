"""A transactional id's metadata and its legal transitions (Kafka's TransactionMetadata).

Kafka's TransactionMetadata is mutable: `prepare*` builds the transition's target
(TxnTransitMetadata) and sets a pending state that blocks other transitions until the log
append completes, and `completeTransitionTo` then copies the target into place. Here the
metadata is an immutable value and the pending state has no counterpart: a handler builds
the target with the same `prepare_*` methods (each checks the transition is legal from the
current state, as `prepareTransitionTo` does), checks it as `completeTransitionTo` would
(`check_transition`), and writes it as a record; the replay of that record is the
transition, at once, and a failed append reverts it. The next operation of the partition
sees the target, which is what Kafka's pending state stands for, so no operation ever meets
a transition in progress.

What is in memory is exactly what the record holds, so a load rebuilds it: Kafka's
in-memory copy keeps a few fields its log does not (the last epoch, the previous
transaction's start time after InitProducerId); here the record is the state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from coordinator_server.records import RefusedMarkers, TransactionValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# A Java short: the epoch's largest value.
MAX_PRODUCER_EPOCH = 32767

TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """Kafka's TransactionState, by the ids its log writes."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return _NAMES[self]

    @staticmethod
    def from_name(name: str) -> TransactionState | None:
        return _BY_NAME.get(name)

    @property
    def is_expiration_allowed(self) -> bool:
        return self in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)


EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT
DEAD = TransactionState.DEAD
PREPARE_EPOCH_FENCE = TransactionState.PREPARE_EPOCH_FENCE

_NAMES = {
    EMPTY: "Empty",
    ONGOING: "Ongoing",
    PREPARE_COMMIT: "PrepareCommit",
    PREPARE_ABORT: "PrepareAbort",
    COMPLETE_COMMIT: "CompleteCommit",
    COMPLETE_ABORT: "CompleteAbort",
    DEAD: "Dead",
    PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}
"""Kafka's `validPreviousStates` of each state."""


class IllegalTransitionError(Exception):
    """A transition Kafka refuses with an IllegalStateException: a bug, never a client's
    error."""


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka keeps the last epoch for itself, so that it can always fence a producer."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    # The producer id before the last rotation (equal to producer_id after a plain bump).
    previous_producer_id: int
    # Kafka's transaction version 2 only: always NO_PRODUCER_ID here.
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    log_partitions: frozenset[int]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    # The markers of the last completed transaction that the brokers refused for good (it
    # was completed without them): kept until the next completion, for DescribeTransactions.
    refused_markers: RefusedMarkers = ()

    @staticmethod
    def new(
        transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        """A transactional id's metadata before its first InitProducerId completes (Kafka
        creates it in its cache; here it exists only once the record is replayed)."""
        return TransactionMetadata(
            transactional_id,
            producer_id,
            NO_PRODUCER_ID,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_PRODUCER_EPOCH,
            timeout_ms,
            EMPTY,
            frozenset(),
            frozenset(),
            -1,
            now_ms,
        )

    @staticmethod
    def from_value(transactional_id: str, value: TransactionValue) -> TransactionMetadata:
        return TransactionMetadata(
            transactional_id,
            value.producer_id,
            value.previous_producer_id,
            value.next_producer_id,
            value.producer_epoch,
            value.last_producer_epoch,
            value.timeout_ms,
            TransactionState(value.state),
            frozenset(
                (topic, partition)
                for topic, partitions in value.partitions
                for partition in partitions
            ),
            frozenset(value.log_partitions),
            value.txn_start_timestamp_ms,
            value.txn_last_update_timestamp_ms,
            value.refused_markers,
        )

    def to_value(self) -> TransactionValue:
        return TransactionValue(
            self.producer_id,
            self.previous_producer_id,
            self.next_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            int(self.state),
            topic_partitions(self.partitions),
            tuple(sorted(self.log_partitions)),
            self.txn_start_timestamp_ms,
            self.txn_last_update_timestamp_ms,
            self.refused_markers,
        )

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (ONGOING, PREPARE_ABORT, PREPARE_COMMIT)

    # Kafka's prepare* methods: the target of a transition, checked for legality.

    def prepare_fence_producer_epoch(self) -> TransactionMetadata:
        """The epoch bumped to fence the current producer out of an Ongoing transaction,
        which is then aborted (PrepareEpochFence is never written: the abort that follows
        carries the bumped epoch)."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(
                "cannot fence a producer at the largest epoch: it would overflow"
            )
        return self._transition_to(
            PREPARE_EPOCH_FENCE,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TransactionMetadata | None:
        """InitProducerId's epoch bump (KIP-360 with an expected epoch); None: the expected
        epoch is neither the current nor the last one, so the caller is fenced."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(
                f"no producer epoch left for producer id {self.producer_id}"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # A new producer instance: the last epoch is forgotten, so that an old instance
            # retrying with it is fenced.
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # The producer continues after an error, and nobody else initialized meanwhile.
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: its answer is the current epoch again.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transition_to(
            EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            log_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
            previous_producer_id=self.producer_id,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TransactionMetadata:
        """A new producer id at epoch 0 once the epochs of the current one are exhausted."""
        if self.has_pending_transaction:
            raise IllegalTransitionError(
                "cannot rotate producer ids while a transaction is pending"
            )
        return self._transition_to(
            EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            log_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
            previous_producer_id=self.producer_id,
        )

    def prepare_add_partitions(
        self,
        partitions: frozenset[TopicPartition],
        log_partitions: frozenset[int],
        now_ms: int,
    ) -> TransactionMetadata:
        """Ongoing with these partitions added (data partitions by AddPartitionsToTxn, the
        coordinator log's by AddOffsetsToTxn); a transaction that was not Ongoing starts
        now."""
        start_ms = (
            now_ms
            if self.state in (EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT)
            else self.txn_start_timestamp_ms
        )
        return self._transition_to(
            ONGOING,
            partitions=self.partitions | partitions,
            log_partitions=self.log_partitions | log_partitions,
            txn_start_timestamp_ms=start_ms,
            txn_last_update_timestamp_ms=now_ms,
        )

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TransactionMetadata:
        """EndTxn's PrepareCommit or PrepareAbort (transaction versions 0 and 1: the epoch
        stays)."""
        assert state in (PREPARE_COMMIT, PREPARE_ABORT)
        return self._transition_to(state, txn_last_update_timestamp_ms=now_ms)

    def prepare_complete(
        self, now_ms: int, refused_markers: RefusedMarkers = ()
    ) -> TransactionMetadata:
        """CompleteCommit or CompleteAbort once every marker is written or refused for good
        (`refused_markers`, kept until the next completion)."""
        state = COMPLETE_COMMIT if self.state is PREPARE_COMMIT else COMPLETE_ABORT
        return replace(
            self._transition_to(
                state,
                last_producer_epoch=self.producer_epoch,
                partitions=frozenset(),
                log_partitions=frozenset(),
                txn_last_update_timestamp_ms=now_ms,
            ),
            refused_markers=tuple(sorted(refused_markers)),
        )

    def prepare_dead(self) -> TransactionMetadata:
        """The transactional id expires (its record is a tombstone)."""
        return self._transition_to(DEAD, partitions=frozenset(), log_partitions=frozenset())

    def _transition_to(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        log_partitions: frozenset[int] | None = None,
        txn_start_timestamp_ms: int | None = None,
        txn_last_update_timestamp_ms: int | None = None,
        previous_producer_id: int | None = None,
    ) -> TransactionMetadata:
        """Kafka's prepareTransitionTo: the target, if `state` may follow the current one."""
        new_producer_id = self.producer_id if producer_id is None else producer_id
        new_epoch = self.producer_epoch if producer_epoch is None else producer_epoch
        if new_producer_id < 0:
            raise IllegalTransitionError(f"illegal new producer id {new_producer_id}")
        if state is not DEAD and new_epoch < 0:
            raise IllegalTransitionError(f"illegal new producer epoch {new_epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {state.kafka_name} may not follow "
                f"{self.state.kafka_name}"
            )
        return replace(
            self,
            state=state,
            producer_id=new_producer_id,
            producer_epoch=new_epoch,
            last_producer_epoch=(
                self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch
            ),
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            partitions=self.partitions if partitions is None else partitions,
            log_partitions=self.log_partitions if log_partitions is None else log_partitions,
            txn_start_timestamp_ms=(
                self.txn_start_timestamp_ms
                if txn_start_timestamp_ms is None
                else txn_start_timestamp_ms
            ),
            txn_last_update_timestamp_ms=(
                self.txn_last_update_timestamp_ms
                if txn_last_update_timestamp_ms is None
                else txn_last_update_timestamp_ms
            ),
            previous_producer_id=(
                self.previous_producer_id if previous_producer_id is None else previous_producer_id
            ),
        )


def check_transition(current: TransactionMetadata, target: TransactionMetadata) -> None:
    """Kafka's completeTransitionTo checks of a target against the metadata it leaves (for
    transaction versions 0 and 1); IllegalTransitionError when one fails."""
    state = target.state

    def same_producer() -> bool:
        return (
            target.producer_epoch == current.producer_epoch
            and target.producer_id == current.producer_id
        )

    if state is EMPTY:
        bumped = target.producer_epoch == current.producer_epoch + 1 or (
            target.producer_epoch == 0 and target.producer_id != current.producer_id
        )
        ok = (
            (target.producer_epoch == current.producer_epoch or bumped)
            and not target.partitions
            and not target.log_partitions
            and target.txn_start_timestamp_ms == -1
        )
    elif state is ONGOING:
        ok = (
            same_producer()
            and current.partitions <= target.partitions
            and current.log_partitions <= target.log_partitions
            and current.timeout_ms == target.timeout_ms
        )
    elif state in (PREPARE_COMMIT, PREPARE_ABORT):
        ok = (
            same_producer()
            and current.partitions == target.partitions
            and current.log_partitions == target.log_partitions
            and current.timeout_ms == target.timeout_ms
            and current.txn_start_timestamp_ms == target.txn_start_timestamp_ms
        )
    elif state in (COMPLETE_COMMIT, COMPLETE_ABORT):
        ok = (
            same_producer()
            and current.timeout_ms == target.timeout_ms
            and target.txn_start_timestamp_ms != -1
        )
    else:
        # PrepareEpochFence is never completed (the abort replaces it), and Dead is a
        # tombstone, never a state to keep.
        ok = False
    if not ok:
        raise IllegalTransitionError(
            f"{current.transactional_id}: transition from {current} to {target} failed"
        )


def topic_partitions(
    partitions: frozenset[TopicPartition],
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Partitions grouped by topic, sorted: the record's and the answers' shape."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic))
