"""What the transaction coordinator's operations answer, and its settings.

The results hold Kafka's error codes and fields; the service makes the wire messages of
them (and maps PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for the request versions that
predate it, as Kafka's KafkaApis does).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server import defaults

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]
"""Kafka data partitions by topic, sorted: ((topic, (partition, ...)), ...)."""


@dataclass(frozen=True, slots=True)
class TransactionsConfig:
    """The transaction coordinator's settings, with the server's defaults (`defaults.py`).

    `partition` is the log partition the state machine serves (the shard sets it from its
    context); `num_partitions` the log's partitions, which split the producer id range."""

    max_timeout_ms: int = defaults.TRANSACTION_MAX_TIMEOUT_MS
    transactional_id_expiration_ms: int = defaults.TRANSACTIONAL_ID_EXPIRATION_MS
    abort_timed_out_interval_ms: int = defaults.TRANSACTION_ABORT_TIMED_OUT_INTERVAL_MS
    remove_expired_interval_ms: int = defaults.TRANSACTION_REMOVE_EXPIRED_INTERVAL_MS
    producer_id_start: int = defaults.TRANSACTION_PRODUCER_ID_START
    producer_id_end: int = defaults.TRANSACTION_PRODUCER_ID_END
    # True: a new producer id is the one the Kafka cluster handed out for the request (the
    # range above is not used); False: the next of the partition's part of the range.
    producer_ids_from_cluster: bool = False
    num_partitions: int = defaults.OFFSETS_TOPIC_PARTITIONS
    partition: int = 0
    # What clients may make one log partition hold: transactional ids, and data partitions
    # in one transaction (its record must fit a batch).
    max_transactional_ids: int = defaults.MAX_TRANSACTIONAL_IDS
    max_partitions_per_transaction: int = defaults.MAX_PARTITIONS_PER_TRANSACTION


@dataclass(frozen=True, slots=True)
class PendingCompleteTxn:
    """A transaction in PrepareCommit or PrepareAbort (Kafka's `PendingCompleteTxn`): the
    markers to deliver (to the Kafka data partitions and to the coordinator log's partitions
    holding its offsets), after which `complete_transaction` writes CompleteCommit or
    CompleteAbort."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: TopicPartitions
    log_partitions: tuple[int, ...]
    # When the transaction was prepared: `complete_transaction` completes that one only.
    prepared_ms: int = -1
    # When it started (its first AddPartitionsToTxn or AddOffsetsToTxn), for its duration.
    started_ms: int = -1
    # An abort prepared after the transaction outlived its timeout: the coordinator's abort
    # of a timed-out transaction (or the producer's own, had it come even later).
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: int
    producer_id: int
    producer_epoch: int
    # InitProducerId fencing an Ongoing transaction (CONCURRENT_TRANSACTIONS) aborts it.
    completion: PendingCompleteTxn | None = None
    # The request needs a new producer id and none came with it (ids from the Kafka
    # cluster): nothing was written; asked again with one, it is answered.
    needs_producer_id: bool = False


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResult:
    """The error code of every partition of the request (Kafka answers one for all of them
    when the transaction refuses them); the service answers each partition with it."""

    error: int


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResult:
    error: int


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error: int
    producer_id: int
    producer_epoch: int
    # Set when the transaction moved to PrepareCommit or PrepareAbort.
    completion: PendingCompleteTxn | None = None


@dataclass(frozen=True, slots=True)
class CompleteTransactionResult:
    """NONE when CompleteCommit or CompleteAbort was written or had been; otherwise why the
    completion was ignored (the transaction moved on). `written`: this completion wrote it
    (what the metrics count; a completion repeated after it had been written does not)."""

    error: int
    written: bool = False


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id."""

    error: int
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: TopicPartitions = ()
    # The log partitions holding its offsets (Kafka lists the __consumer_offsets partitions
    # of AddOffsetsToTxn among the topics; the service does the same with the log topic).
    log_partitions: tuple[int, ...] = ()
    # The last completed transaction's markers the brokers refused for good.
    refused_markers: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: int
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[ListedTransaction, ...]
