"""`KafkaTxnMarkerWriter`: a transaction's COMMIT or ABORT markers onto the Kafka data
partitions it wrote to (Kafka's `TransactionMarkerChannelManager` with its
`TransactionMarkerRequestCompletionHandler`).

A `write` waits until every partition's marker is written or given up. Markers go to each
partition's leader in WriteTxnMarkers requests, one queue per broker; several transactions'
markers bound for one broker leave in one request (never two of one producer id: the answer
tells markers apart by producer id only). What an answer means for a partition is Kafka's
completion handler's table:

- NONE: written.
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR (and LEADER_NOT_AVAILABLE, NETWORK_EXCEPTION), a
  lost connection or no answer in time: tried again after a back-off, the leader looked up
  afresh, until it lands.
- A partition the cluster does not know (its topic deleted) is dropped, as Kafka's
  coordinator drops a partition its metadata cache does not have, but only once it has been
  unknown for `unknown_partition_timeout_ms`: our metadata comes from a broker, not from the
  controller's image, and a topic just created may not show everywhere yet.
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: the partition's producer state has
  a newer producer or coordinator epoch; its marker is not sent again. The transaction's other
  markers still are, unlike Kafka's `removeMarkersForTxn`: whether a newer coordinator ends
  the transaction or nobody will (another writer uses the producer id) is for the caller to
  tell, and in the second case the other partitions must still get their markers, or their
  records would hold back their last stable offset for good.
- UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: the partition is dropped (the producer
  could not have written transactional records there).
- Anything else (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE...: Kafka's coordinator throws) is
  reported for the partition and not tried again.

`MarkerOutcome.complete` says whether the transaction may move to CompleteCommit or
CompleteAbort: every partition written or dropped as Kafka would. Cancelling a `write` (the
coordinator no longer owns the transaction) takes its markers out of the queues.

Bounds, all from the constructor: markers waiting (a `write` waits for room; a large one
goes in parts of a quarter of the bound, and large parts together hold at most half of it,
so that small transactions always find room), requests on the way per broker, partitions
per request, cached topics' leaders.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.transaction import InitProducerIdRequest

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.leaders import NO_LEADER, LeaderCache, LeaderLookupError
from coordinator_server.markers.request import (
    KafkaWriteTxnMarkersRequest,
    MarkerEntry,
    read_marker_results,
)
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = [
    "DROPPED_ERRORS",
    "FENCED_ERRORS",
    "RETRIABLE_ERRORS",
    "KafkaTxnMarkerWriter",
    "MarkerOutcome",
    "MarkerWriterStopped",
    "ProducerIdRefused",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_UNKNOWN_TOPIC = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
RETRIABLE_ERRORS = frozenset(
    int(code)
    for code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.KAFKA_STORAGE_ERROR,
    )
)
"""Answers after which the marker is sent again."""
_LEADER_MOVED = frozenset(
    int(code)
    for code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
    )
)
FENCED_ERRORS = frozenset(
    (int(ErrorCode.INVALID_PRODUCER_EPOCH), int(ErrorCode.TRANSACTION_COORDINATOR_FENCED))
)
"""Answers that say a partition has a newer producer or coordinator epoch than the markers'."""
DROPPED_ERRORS = frozenset(
    (
        _UNKNOWN_TOPIC,
        int(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        int(ErrorCode.UNSUPPORTED_VERSION),
    )
)
"""Final errors of a partition that Kafka's coordinator takes out of the transaction and
completes it without (UNKNOWN_TOPIC_OR_PARTITION only once past the writer's bound)."""
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
# The partition number that stands for a whole topic the cluster does not know.
_WHOLE_TOPIC = -1


class MarkerWriterStopped(Exception):
    """The writer stopped before the markers landed; their fate is unknown."""


class ProducerIdRefused(Exception):
    """The cluster did not hand out a producer id (its error, or no broker to ask)."""


# InitProducerId's transaction timeout, which the brokers check even without a transactional
# id (at most their transaction.max.timeout.ms): Kafka's producer default.
_PRODUCER_ID_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class MarkerOutcome:
    """What became of one transaction's markers."""

    written: frozenset[TopicPartition]
    errors: Mapping[TopicPartition, int]
    """Every partition whose marker was not written, with the error it ended with."""

    @property
    def fenced(self) -> bool:
        """A partition has a newer producer or coordinator epoch than the markers': either
        the transaction belongs to a newer coordinator, or another writer uses its producer
        id."""
        return any(code in FENCED_ERRORS for code in self.errors.values())

    @property
    def complete(self) -> bool:
        """Every marker written or its partition dropped as Kafka drops it: the transaction
        may move to CompleteCommit / CompleteAbort."""
        return all(code in DROPPED_ERRORS for code in self.errors.values())


class _Transaction:
    """One `write` in progress."""

    __slots__ = (
        "active",
        "attempts",
        "committed",
        "coordinator_epoch",
        "done",
        "errors",
        "large",
        "pending",
        "producer_epoch",
        "producer_id",
        "retries",
        "size",
        "written",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: set[TopicPartition],
        done: asyncio.Future[MarkerOutcome],
        large: bool = False,
    ) -> None:
        self.producer_id = producer_id
        self.large = large
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.committed = committed
        self.pending = set(partitions)
        self.size = len(partitions)
        self.written: set[TopicPartition] = set()
        self.errors: dict[TopicPartition, int] = {}
        self.attempts: dict[TopicPartition, int] = {}
        self.retries: dict[TopicPartition, asyncio.TimerHandle] = {}
        self.done = done
        self.active = True

    def describe(self) -> str:
        result = "COMMIT" if self.committed else "ABORT"
        return (
            f"{result} markers of producer {self.producer_id} epoch {self.producer_epoch} "
            f"(coordinator epoch {self.coordinator_epoch})"
        )


class _BrokerQueue:
    __slots__ = ("inflight", "markers")

    def __init__(self) -> None:
        self.markers: dict[_Transaction, set[TopicPartition]] = {}
        self.inflight = 0


class KafkaTxnMarkerWriter:
    """Writes transaction markers to Kafka's data partitions; `start()` before the first
    `write`, `stop()` at the end."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: KafkaSecurity | None = None,
        client_id: str = "coordinator-server-markers",
        request_timeout_ms: int = 30000,
        max_inflight_requests_per_broker: int = 1,
        max_queued_markers: int = 100_000,
        max_markers_per_request: int = 10_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        unknown_partition_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 300_000,
        max_cached_topics: int = 10_000,
    ) -> None:
        """`max_inflight_requests_per_broker`: WriteTxnMarkers requests on the way to one
        broker (Kafka's marker sender: 1). `max_queued_markers`: the partitions of all the
        writes in progress; a `write` that does not fit waits (one larger than the bound is
        let in alone). `max_markers_per_request`: partitions in one request.
        `unknown_partition_timeout_ms`: how long a partition may stay unknown to the
        cluster before its marker is dropped."""
        for name, value in (
            ("request_timeout_ms", request_timeout_ms),
            ("max_inflight_requests_per_broker", max_inflight_requests_per_broker),
            ("max_queued_markers", max_queued_markers),
            ("max_markers_per_request", max_markers_per_request),
            ("retry_backoff_ms", retry_backoff_ms),
            ("metadata_max_age_ms", metadata_max_age_ms),
            ("max_cached_topics", max_cached_topics),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError("retry_backoff_max_ms must be at least retry_backoff_ms")
        if unknown_partition_timeout_ms < 0:
            raise ValueError("unknown_partition_timeout_ms must not be negative")
        self._bootstrap_servers = bootstrap_servers
        self._security = security or KafkaSecurity()
        self._client_id = client_id
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_inflight = max_inflight_requests_per_broker
        self._max_queued = max_queued_markers
        self._max_per_request = max_markers_per_request
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = retry_backoff_max_ms / 1000
        self._unknown_timeout_s = unknown_partition_timeout_ms / 1000
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._max_cached_topics = max_cached_topics
        self._client: AIOKafkaClient | None = None
        self._leaders: LeaderCache | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # Set whenever a write ends (room for the writes waiting) and at stop.
        self._room = asyncio.Event()
        self._stopped = False
        self._transactions: set[_Transaction] = set()
        self._queued = 0
        # The part of `_queued` that large writes hold (see `_admit`).
        self._large_queued = 0
        # Since when each partition, or whole topic (partition `_WHOLE_TOPIC`), has been
        # unknown to the cluster, over every write: the other parts of a large transaction,
        # or the next transaction, over a deleted topic do not wait their whole bound
        # again. At most `max_queued_markers` of them.
        self._unknown_since: dict[TopicPartition, float] = {}
        self._unrouted: dict[_Transaction, set[TopicPartition]] = {}
        self._brokers: dict[int, _BrokerQueue] = {}
        # At most max_inflight_requests_per_broker per broker of the cluster.
        self._sending: set[asyncio.Task[None]] = set()
        self._lookup_failures = 0
        # Counters, for tests and metrics.
        self.requests_sent = 0
        self.retries = 0

    async def start(self) -> None:
        if self._client is not None or self._stopped:
            raise RuntimeError("a KafkaTxnMarkerWriter starts once")
        options = self._security.aiokafka_options()
        client = AIOKafkaClient(
            bootstrap_servers=self._bootstrap_servers,
            client_id=self._client_id,
            # Each request has a timeout of its own; aiokafka's, which closes the
            # connection, is only a backstop.
            request_timeout_ms=int(self._request_timeout_s * 2000),
            **options,
        )
        forbid_auto_topic_creation(client)
        try:
            await asyncio.wait_for(client.bootstrap(), self._request_timeout_s)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        self._client = client
        self._leaders = LeaderCache(
            client, max_topics=self._max_cached_topics, max_age_s=self._metadata_max_age_s
        )
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-marker-writer")

    async def stop(self) -> None:
        """Stop sending; writes in progress fail with MarkerWriterStopped."""
        if self._stopped:
            return
        self._stopped = True
        self._room.set()
        tasks = [task for task in (self._task, *self._sending) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for transaction in list(self._transactions):
            self._end(transaction)
            if not transaction.done.done():
                transaction.done.set_exception(
                    MarkerWriterStopped(f"{transaction.describe()}: the writer stopped")
                )
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_s)

    @property
    def queued_markers(self) -> int:
        """Partitions of the writes in progress whose markers have not landed yet."""
        return self._queued

    def unknown_partitions_now(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]] | None:
        """The partitions of `topics` the cluster lacks, from the metadata cached for the
        markers (`LeaderCache.unknown_partitions_now`)."""
        leaders = self._leaders
        return None if leaders is None else leaders.unknown_partitions_now(topics)

    async def unknown_partitions(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]]:
        """The same, asking the cluster (`LeaderCache.unknown_partitions`)."""
        leaders = self._leaders
        if leaders is None:
            raise LeaderLookupError("the marker writer has not started")
        return await leaders.unknown_partitions(topics, self._request_timeout_s)

    async def new_producer_id(self) -> int:
        """A producer id the cluster hands out (InitProducerId without a transactional id, as
        an idempotent producer asks for one, to any broker: the brokers take their ids from
        the controller's blocks, so no Kafka producer and no other deployment gets it).
        Raises ProducerIdRefused with the broker's error, or KafkaError, OSError or
        TimeoutError when no broker answers in time."""
        client = self._client
        if client is None:
            raise ProducerIdRefused("the marker writer has not started")
        node_id = client.get_random_node()
        if node_id is None:
            raise ProducerIdRefused("no broker is known")
        response = await asyncio.wait_for(
            client.send(node_id, InitProducerIdRequest(None, _PRODUCER_ID_TIMEOUT_MS)),
            self._request_timeout_s,
        )
        if response.error_code != ErrorCode.NONE:
            code = int(response.error_code)
            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
            raise ProducerIdRefused(f"node {node_id} answered InitProducerId with {name}")
        return int(response.producer_id)

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: Mapping[str, list[int]],
    ) -> MarkerOutcome:
        """Write the transaction's COMMIT (`committed`) or ABORT markers to `partitions`
        (topic -> partition numbers); returns once each landed or was given up. Raises
        MarkerWriterStopped when the writer stops first."""
        if self._client is None or self._stopped:
            raise MarkerWriterStopped("the marker writer is not running")
        wanted = sorted(
            {(topic, partition) for topic, numbers in partitions.items() for partition in numbers}
        )
        # A large transaction goes a share of the queue at a time, so that it cannot hold
        # every other transaction's markers back (see `_admit`).
        share = max(1, self._max_queued // 4)
        outcomes = await asyncio.gather(
            *(
                self._write_part(
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    committed,
                    set(wanted[start : start + share]),
                )
                for start in range(0, len(wanted), share)
            )
        )
        written: set[TopicPartition] = set()
        errors: dict[TopicPartition, int] = {}
        for outcome in outcomes:
            written |= outcome.written
            errors.update(outcome.errors)
        return MarkerOutcome(frozenset(written), errors)

    async def _admit(self, size: int, large: bool) -> None:
        """Wait for room for `size` markers. Every write shares the queue's bound (one alone
        is let in whatever its size); large ones (over a sixteenth of it) share half of it
        between them, so that the other half is always there for the small ones: a few
        transactions over many partitions whose markers land slowly (partitions unknown
        to the cluster until their bound) no longer hold every other transaction's end."""
        large_room = self._max_queued // 2
        while not (
            self._stopped
            or (
                (self._queued == 0 or self._queued + size <= self._max_queued)
                and (
                    not large or self._large_queued == 0 or self._large_queued + size <= large_room
                )
            )
        ):
            self._room.clear()
            await self._room.wait()
        if self._stopped:
            raise MarkerWriterStopped("the marker writer stopped")

    async def _write_part(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        wanted: set[TopicPartition],
    ) -> MarkerOutcome:
        large = len(wanted) > self._max_queued // 16
        await self._admit(len(wanted), large)
        self._queued += len(wanted)
        if large:
            self._large_queued += len(wanted)
        loop = asyncio.get_running_loop()
        transaction = _Transaction(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            committed,
            wanted,
            loop.create_future(),
            large,
        )
        self._transactions.add(transaction)
        self._unrouted[transaction] = set(wanted)
        self._wake.set()
        try:
            return await transaction.done
        finally:
            if transaction.active:
                # Cancelled: its markers leave the queues; one on the way may still land.
                self._end(transaction)

    # The sending loop.

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._unrouted:
                await self._route()
            self._send_ready()

    async def _route(self) -> None:
        """Put every marker waiting for its leader into its leader's queue."""
        leaders = self._leaders
        client = self._client
        assert leaders is not None and client is not None
        unrouted, self._unrouted = self._unrouted, {}
        topics = {topic for parts in unrouted.values() for topic, _ in parts}
        missing = [topic for topic in topics if leaders.get(topic) is None]
        fresh = {}
        if missing:
            try:
                fresh = await leaders.refresh(missing, self._request_timeout_s)
            except LeaderLookupError as error:
                self._lookup_failures += 1
                if self._lookup_failures & (self._lookup_failures - 1) == 0:
                    log.warning("cannot look up the leaders of %d topics: %s", len(missing), error)
            else:
                self._lookup_failures = 0
        now = asyncio.get_running_loop().time()
        known_nodes = {node.nodeId for node in client.cluster.brokers()}
        for transaction, parts in unrouted.items():
            if not transaction.active:
                continue
            for topic_partition in parts:
                topic, partition = topic_partition
                entry = leaders.get(topic) or fresh.get(topic)
                if entry is None:
                    # No answer at all: the lookup failed.
                    self._retry(transaction, topic_partition)
                    continue
                if entry.error_code == _TOPIC_AUTHORIZATION_FAILED:
                    self._finish(transaction, topic_partition, entry.error_code)
                    continue
                if entry.unknown:
                    self._unknown(transaction, topic_partition, now, (topic, _WHOLE_TOPIC))
                    continue
                if entry.error_code == ErrorCode.NONE and partition not in entry.leaders:
                    self._unknown(transaction, topic_partition, now, topic_partition)
                    continue
                leader = entry.leaders.get(partition, NO_LEADER)
                if leader == NO_LEADER or leader not in known_nodes:
                    leaders.forget(topic)
                    if leader != NO_LEADER:
                        client.force_metadata_update()
                    self._retry(transaction, topic_partition)
                    continue
                if self._unknown_since:
                    self._unknown_since.pop(topic_partition, None)
                    self._unknown_since.pop((topic, _WHOLE_TOPIC), None)
                queue = self._brokers.get(leader)
                if queue is None:
                    queue = self._brokers[leader] = _BrokerQueue()
                queue.markers.setdefault(transaction, set()).add(topic_partition)

    def _send_ready(self) -> None:
        for node_id, queue in list(self._brokers.items()):
            while queue.markers and queue.inflight < self._max_inflight:
                entries = self._take(queue)
                queue.inflight += 1
                self.requests_sent += 1
                task = asyncio.get_running_loop().create_task(
                    self._send(node_id, queue, entries), name=f"txn-markers-to-{node_id}"
                )
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
            if not queue.markers and queue.inflight == 0:
                del self._brokers[node_id]

    def _take(self, queue: _BrokerQueue) -> list[tuple[_Transaction, set[TopicPartition]]]:
        """The markers of the next request: in the order they came, at most
        `max_markers_per_request` partitions, one marker per producer id."""
        entries: list[tuple[_Transaction, set[TopicPartition]]] = []
        producers: set[int] = set()
        room = self._max_per_request
        for transaction in list(queue.markers):
            if room == 0:
                break
            if transaction.producer_id in producers:
                continue
            parts = queue.markers[transaction]
            if len(parts) <= room:
                taken = parts
                del queue.markers[transaction]
            else:
                taken = {parts.pop() for _ in range(room)}
            room -= len(taken)
            producers.add(transaction.producer_id)
            entries.append((transaction, taken))
        return entries

    async def _send(
        self,
        node_id: int,
        queue: _BrokerQueue,
        entries: list[tuple[_Transaction, set[TopicPartition]]],
    ) -> None:
        client = self._client
        assert client is not None
        markers = []
        for transaction, parts in entries:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(parts):
                by_topic.setdefault(topic, []).append(partition)
            markers.append(
                MarkerEntry(
                    transaction.producer_id,
                    transaction.producer_epoch,
                    transaction.coordinator_epoch,
                    transaction.committed,
                    by_topic,
                )
            )
        try:
            try:
                response = await asyncio.wait_for(
                    client.send(node_id, KafkaWriteTxnMarkersRequest(markers)),
                    self._request_timeout_s,
                )
                results = read_marker_results(response)
            except NotImplementedError as error:
                # Checked at start (check_kafka_for_transactions); a broker downgraded since.
                log.error("node %d cannot take WriteTxnMarkers v1: %s", node_id, error)
                self._resend(entries)
            except (KafkaError, OSError, TimeoutError, ValueError) as error:
                log.info(
                    "WriteTxnMarkers to node %d failed (%r); sending its %d markers again",
                    node_id,
                    error,
                    len(entries),
                )
                self._resend(entries)
            else:
                for transaction, parts in entries:
                    self._answered(transaction, parts, results.get(transaction.producer_id, {}))
        finally:
            queue.inflight -= 1
            self._wake.set()

    def _resend(self, entries: list[tuple[_Transaction, set[TopicPartition]]]) -> None:
        """Every marker of a request that got no answer: the leaders are looked up again."""
        leaders = self._leaders
        assert leaders is not None
        for transaction, parts in entries:
            for topic_partition in parts:
                leaders.forget(topic_partition[0])
                self._retry(transaction, topic_partition)

    def _answered(
        self,
        transaction: _Transaction,
        parts: set[TopicPartition],
        errors: Mapping[TopicPartition, int],
    ) -> None:
        leaders = self._leaders
        assert leaders is not None
        now = asyncio.get_running_loop().time()
        for topic_partition in parts:
            if not transaction.active:
                return
            code = errors.get(topic_partition)
            if code is None:
                # The answer does not mention it: as if it had been lost.
                self._retry(transaction, topic_partition)
            elif code == ErrorCode.NONE:
                self._finish(transaction, topic_partition, 0)
            elif code == _UNKNOWN_TOPIC:
                leaders.forget(topic_partition[0])
                self._unknown(transaction, topic_partition, now, topic_partition)
            elif code in RETRIABLE_ERRORS:
                if code in _LEADER_MOVED:
                    leaders.forget(topic_partition[0])
                self._retry(transaction, topic_partition)
            elif code in FENCED_ERRORS:
                log.info(
                    "%s: %s on %s-%d; not sent again",
                    transaction.describe(),
                    ErrorCode(code).name,
                    *topic_partition,
                )
                self._finish(transaction, topic_partition, code)
            else:
                level = logging.INFO if code in DROPPED_ERRORS else logging.ERROR
                log.log(
                    level,
                    "%s: %s-%d answered error %d; not sent again",
                    transaction.describe(),
                    *topic_partition,
                    code,
                )
                self._finish(transaction, topic_partition, code)

    def _unknown(
        self,
        transaction: _Transaction,
        topic_partition: TopicPartition,
        now: float,
        unknown: TopicPartition,
    ) -> None:
        """The cluster does not know the partition (`unknown`: it, or its whole topic):
        tried again until that has been unknown for the bound, then dropped (its topic was
        deleted)."""
        since = self._unknown_since.get(unknown)
        if since is None:
            since = self._unknown_since[unknown] = now
            while len(self._unknown_since) > self._max_queued:
                del self._unknown_since[next(iter(self._unknown_since))]
        if now - since >= self._unknown_timeout_s:
            # DEBUG: a deleted topic's every partition would say it; the transaction's end
            # says it once (`TxnMarkerChannel`).
            log.debug(
                "%s: %s-%d has been unknown to the cluster for %.1f s (deleted?); dropped",
                transaction.describe(),
                *topic_partition,
                now - since,
            )
            self._finish(transaction, topic_partition, _UNKNOWN_TOPIC)
        else:
            self._retry(transaction, topic_partition)

    def _retry(self, transaction: _Transaction, topic_partition: TopicPartition) -> None:
        if not transaction.active or topic_partition in transaction.retries:
            return
        attempt = transaction.attempts.get(topic_partition, 0)
        transaction.attempts[topic_partition] = attempt + 1
        self.retries += 1
        backoff_s = min(self._backoff_s * 2 ** min(attempt, 30), self._backoff_max_s)
        transaction.retries[topic_partition] = asyncio.get_running_loop().call_later(
            backoff_s, self._requeue, transaction, topic_partition
        )

    def _requeue(self, transaction: _Transaction, topic_partition: TopicPartition) -> None:
        transaction.retries.pop(topic_partition, None)
        if transaction.active and topic_partition in transaction.pending:
            self._unrouted.setdefault(transaction, set()).add(topic_partition)
            self._wake.set()

    def _finish(
        self, transaction: _Transaction, topic_partition: TopicPartition, code: int
    ) -> None:
        if topic_partition not in transaction.pending:
            return
        transaction.pending.discard(topic_partition)
        if code == ErrorCode.NONE:
            transaction.written.add(topic_partition)
        else:
            transaction.errors[topic_partition] = code
        if transaction.pending:
            return
        self._end(transaction)
        if not transaction.done.done():
            transaction.done.set_result(
                MarkerOutcome(frozenset(transaction.written), dict(transaction.errors))
            )

    def _end(self, transaction: _Transaction) -> None:
        """The transaction leaves every queue and gives its room back."""
        if not transaction.active:
            return
        transaction.active = False
        self._transactions.discard(transaction)
        self._unrouted.pop(transaction, None)
        for queue in self._brokers.values():
            queue.markers.pop(transaction, None)
        for handle in transaction.retries.values():
            handle.cancel()
        transaction.retries.clear()
        self._queued -= transaction.size
        if transaction.large:
            self._large_queued -= transaction.size
        self._room.set()
