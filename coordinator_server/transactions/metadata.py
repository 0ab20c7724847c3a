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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from coordinator_server.records import RefusedMarkers, TransactionValue
from coordinator_server.records import TransactionState as TransactionState
from coordinator_server.transactions.results import TopicPartitions

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# A Java short: the epoch's largest value.
MAX_PRODUCER_EPOCH = 32767

TopicPartition = tuple[str, int]

_NO_INDEXES: frozenset[int] = frozenset()


class TxnPartitions:
    """A transaction's data partitions: each topic's partition indexes, as a frozenset of
    ints. Immutable, and cheap where a transaction of many partitions is touched again and
    again: a union copies the map of topics and only the sets of the topics it adds to,
    comparisons go topic by topic over sets of ints, and a topic's sorted indexes (what
    records and answers hold, `by_topic`) are sorted once and shared by the unions that
    leave the topic as it was. Iterating gives (topic, partition) pairs."""

    __slots__ = ("_by_topic", "_count", "_sorted", "_sorted_indexes")

    def __init__(
        self,
        by_topic: Mapping[str, frozenset[int]] | None = None,
        sorted_indexes: dict[str, tuple[int, ...]] | None = None,
        *,
        sorted_form: TopicPartitions | None = None,
    ) -> None:
        """`by_topic` holds no empty set; `sorted_indexes` (the sorted indexes of some of its
        topics) and `sorted_form` (`by_topic()`) may be given when known already."""
        self._by_topic: Mapping[str, frozenset[int]] = by_topic or {}
        self._count = sum(map(len, self._by_topic.values()))
        self._sorted_indexes: dict[str, tuple[int, ...]] = sorted_indexes or {}
        self._sorted = sorted_form

    @staticmethod
    def of(topics: Iterable[tuple[str, Iterable[int]]]) -> TxnPartitions:
        """The partitions of (topic, indexes) pairs, a topic named twice or an index
        repeated counted once."""
        by_topic: dict[str, frozenset[int]] = {}
        for topic, indexes in topics:
            added = frozenset(indexes)
            if not added:
                continue
            known = by_topic.get(topic)
            by_topic[topic] = added if known is None else known | added
        return TxnPartitions(by_topic)

    @staticmethod
    def from_sorted(topics: TopicPartitions) -> TxnPartitions:
        """The partitions a record holds (topics sorted, each one's indexes sorted)."""
        by_topic: dict[str, frozenset[int]] = {}
        sorted_indexes: dict[str, tuple[int, ...]] = {}
        canonical = True
        previous: str | None = None
        for topic, indexes in topics:
            added = frozenset(indexes)
            # A record this coordinator wrote: topics in order, no index twice.
            canonical = (
                canonical
                and (previous is None or previous < topic)
                and len(added) == len(indexes) > 0
            )
            previous = topic
            if added:
                known = by_topic.get(topic)
                by_topic[topic] = added if known is None else known | added
            if canonical:
                sorted_indexes[topic] = indexes
        if not canonical:
            return TxnPartitions(by_topic)
        return TxnPartitions(by_topic, sorted_indexes, sorted_form=topics)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[TopicPartition]:
        for topic, indexes in self._by_topic.items():
            for index in indexes:
                yield topic, index

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        topic, index = item
        return index in self._by_topic.get(topic, _NO_INDEXES)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, TxnPartitions):
            return self._count == other._count and self._by_topic == other._by_topic
        if isinstance(other, (set, frozenset)):
            return self._count == len(other) and all(item in self for item in other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._by_topic.items()))

    def __le__(self, other: TxnPartitions) -> bool:
        """Every partition of this one is in `other`."""
        if self._count > other._count:
            return False
        theirs = other._by_topic
        return all(
            indexes <= theirs.get(topic, _NO_INDEXES) for topic, indexes in self._by_topic.items()
        )

    def __or__(self, other: TxnPartitions) -> TxnPartitions:
        if not other._count or other is self:
            return self
        if not self._count:
            return other
        by_topic = dict(self._by_topic)
        sorted_indexes = dict(self._sorted_indexes)
        for topic, indexes in other._by_topic.items():
            known = by_topic.get(topic)
            if known is None:
                by_topic[topic] = indexes
                theirs = other._sorted_indexes.get(topic)
                if theirs is not None:
                    sorted_indexes[topic] = theirs
            elif not indexes <= known:
                by_topic[topic] = known | indexes
                sorted_indexes.pop(topic, None)
        return TxnPartitions(by_topic, sorted_indexes)

    def topics(self) -> Mapping[str, frozenset[int]]:
        """Each topic's indexes."""
        return self._by_topic

    def sorted_indexes(self, topic: str) -> tuple[int, ...]:
        """The topic's indexes, sorted (empty for a topic not in the transaction)."""
        indexes = self._sorted_indexes.get(topic)
        if indexes is None:
            indexes = tuple(sorted(self._by_topic.get(topic, _NO_INDEXES)))
            if indexes:
                self._sorted_indexes[topic] = indexes
        return indexes

    def by_topic(self) -> TopicPartitions:
        """Grouped by topic, sorted: the record's and the answers' shape."""
        grouped = self._sorted
        if grouped is None:
            sorted_indexes = self.sorted_indexes
            grouped = self._sorted = tuple(
                (topic, sorted_indexes(topic)) for topic in sorted(self._by_topic)
            )
        return grouped

    def __repr__(self) -> str:
        return f"TxnPartitions({self.by_topic()!r})"


NO_PARTITIONS = TxnPartitions()


EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT
DEAD = TransactionState.DEAD
PREPARE_EPOCH_FENCE = TransactionState.PREPARE_EPOCH_FENCE

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
    partitions: TxnPartitions
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
            NO_PARTITIONS,
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
            TxnPartitions.from_sorted(value.partitions),
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
            self.partitions.by_topic(),
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
            partitions=NO_PARTITIONS,
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
            partitions=NO_PARTITIONS,
            log_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
            previous_producer_id=self.producer_id,
        )

    def prepare_add_partitions(
        self,
        partitions: TxnPartitions,
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
                partitions=NO_PARTITIONS,
                log_partitions=frozenset(),
                txn_last_update_timestamp_ms=now_ms,
            ),
            refused_markers=tuple(sorted(refused_markers)),
        )

    def prepare_dead(self) -> TransactionMetadata:
        """The transactional id expires (its record is a tombstone)."""
        return self._transition_to(DEAD, partitions=NO_PARTITIONS, log_partitions=frozenset())

    def _transition_to(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: TxnPartitions | None = None,
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


def topic_partitions(partitions: TxnPartitions) -> TopicPartitions:
    """Partitions grouped by topic, sorted: the record's and the answers' shape."""
    return partitions.by_topic()
