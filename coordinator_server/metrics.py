"""The metrics' counters: cheap on the hot path, read out at scrape time.

The request path only bumps plain integers and appends observations to bounded lists
that are counted in bulk (no locks, no label lookups through prometheus_client); the
collector (`prometheus`) turns them, and the runtime's per-partition figures, into metric
families when Prometheus scrapes. The listener and its connections count here; the runtime
and the shard report through interfaces of their own, which the wiring fills with these.
None of them knows Prometheus.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip
# How many of the slowest partition loads the start-up summary names.
SLOWEST_LOADS_KEPT = 3

SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
BYTES_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
REBALANCE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# A transaction lasts from its first partition to its completion: milliseconds for a
# producer that commits at once, up to the largest timeout (15 minutes by default) and past
# it for one whose markers wait on an unavailable broker.
TRANSACTION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
)  # fmt: skip


PENDING_OBSERVATIONS = 1024
"""Observations a histogram (and the request counters) hold before counting them."""


class Histogram:
    """Bucket counts and a sum. An observation is a list append: observations are put in
    their buckets in bulk, when `PENDING_OBSERVATIONS` are waiting or when the histogram is
    read: bucketing each one as it came, with the request counters, was a fifth of a
    heartbeat's time in process."""

    __slots__ = ("_count", "_counts", "_pending", "_total", "bounds")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._count = 0
        self._total = 0.0
        self._pending: list[float] = []

    @property
    def pending(self) -> int:
        """Observations not in their buckets yet (fewer than PENDING_OBSERVATIONS)."""
        return len(self._pending)

    def observe(self, value: float) -> None:
        pending = self._pending
        pending.append(value)
        if len(pending) >= PENDING_OBSERVATIONS:
            self.observe_all(pending)
            self._pending = []

    def observe_all(self, values: list[float]) -> None:
        """Count `values` (sorting them in place): a bucket holds the values above the
        previous bound up to its own, as bisect_left of each value would place it."""
        values.sort()
        counts = self._counts
        below = 0
        for index, bound in enumerate(self.bounds):
            upto = bisect_right(values, bound, below)
            counts[index] += upto - below
            below = upto
        counts[-1] += len(values) - below
        self._count += len(values)
        self._total += sum(values)

    def observe_zeros(self, times: int) -> None:
        """Count `times` observations of 0 (in the first bucket: every bound is above 0)."""
        assert self.bounds[0] > 0
        self._counts[0] += times
        self._count += times

    def _settle(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self.observe_all(pending)

    @property
    def count(self) -> int:
        self._settle()
        return self._count

    @property
    def total(self) -> float:
        self._settle()
        return self._total

    @property
    def counts(self) -> list[int]:
        """Per bucket, the last one above every bound."""
        self._settle()
        return list(self._counts)

    def buckets(self) -> list[tuple[str, float]]:
        self._settle()
        cumulative = 0
        result: list[tuple[str, float]] = []
        for bound, count in zip(self.bounds, self._counts, strict=False):
            cumulative += count
            result.append((_bound(bound), cumulative))
        result.append(("+Inf", self._count))
        return result


def _bound(value: float) -> str:
    return repr(float(value))


class ServerMetrics:
    """What the listener and its connections count. Answered requests are counted in bulk,
    like histogram observations: `request_done` appends to a list."""

    def __init__(self) -> None:
        # Connections refused and closed by the server, by reason (see connection_events).
        self.connections_refused: Counter[str] = Counter()
        self.connections_closed: Counter[str] = Counter()
        self.malformed_frames = 0
        # SASL exchanges and TLS client certificates, by (mechanism, outcome): "success",
        # "failure", "reauthentication" (KIP-368).
        self.authentications: Counter[tuple[str, str]] = Counter()
        # Requests (or items of one) the authorizer denied, by Kafka's name of the API.
        self.authorization_denials: Counter[str] = Counter()
        # How late the event loop ran a periodic timer (`loop_lag`): time every callback,
        # request and timer of the process waited for the loop.
        self.event_loop_lag = Histogram(LATENCY_BUCKETS_S)
        self._requests: Counter[tuple[int, int]] = Counter()
        self._latency: dict[int, Histogram] = {}
        self._pending: list[tuple[int, int, float]] = []

    @property
    def pending(self) -> int:
        """Answered requests not counted yet (fewer than PENDING_OBSERVATIONS)."""
        return len(self._pending)

    def request_done(self, api_key: int, error_code: int, seconds: float) -> None:
        pending = self._pending
        pending.append((api_key, error_code, seconds))
        if len(pending) >= PENDING_OBSERVATIONS:
            self._settle()

    @property
    def requests(self) -> Counter[tuple[int, int]]:
        """Requests answered, by (api key, error code)."""
        self._settle()
        return self._requests

    @property
    def request_latency(self) -> dict[int, Histogram]:
        """Seconds from a request's arrival to its answer, by api key."""
        self._settle()
        return self._latency

    def _settle(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._requests.update(map(_API_AND_ERROR, pending))
        by_api: dict[int, list[float]] = {}
        for api_key, _, seconds in pending:
            values = by_api.get(api_key)
            if values is None:
                values = by_api[api_key] = []
            values.append(seconds)
        latency = self._latency
        for api_key, values in by_api.items():
            histogram = latency.get(api_key)
            if histogram is None:
                histogram = latency[api_key] = Histogram(LATENCY_BUCKETS_S)
            histogram.observe_all(values)


_API_AND_ERROR = itemgetter(0, 1)


class RuntimeMetrics:
    """What the runtime reports as it writes and loads (see CoordinatorRuntime). Every write
    operation reports its queue and processing times (`event_ran`, a heartbeat's path too),
    counted into their histograms in bulk; most ran at once, without waiting in a queue,
    and their zeros are only counted."""

    def __init__(self) -> None:
        self.batch_records = Histogram(SIZE_BUCKETS)
        self.batch_bytes = Histogram(BYTES_BUCKETS)
        self.append_latency = Histogram(LATENCY_BUCKETS_S)
        self.load_duration = Histogram(LATENCY_BUCKETS_S)
        self.append_failures = 0
        self.records_loaded = 0
        self._queue_time = Histogram(LATENCY_BUCKETS_S)
        self._processing_time = Histogram(LATENCY_BUCKETS_S)
        self._queued: list[float] = []
        self._processing: list[float] = []
        self._ran_at_once = 0
        # The slowest loads as (seconds, partition), at most SLOWEST_LOADS_KEPT: the start's
        # summary names them.
        self.slowest_loads: list[tuple[float, int]] = []

    def batch_appended(self, records: int, size_bytes: int, seconds: float) -> None:
        self.batch_records.observe(records)
        self.batch_bytes.observe(size_bytes)
        self.append_latency.observe(seconds)

    def append_failed(self) -> None:
        self.append_failures += 1

    @property
    def pending(self) -> int:
        """Operations that ran and are not in the histograms yet (fewer than
        PENDING_OBSERVATIONS)."""
        return len(self._processing)

    def event_ran(self, queued_seconds: float, processing_seconds: float) -> None:
        processing = self._processing
        processing.append(processing_seconds)
        if queued_seconds:
            self._queued.append(queued_seconds)
        else:
            self._ran_at_once += 1
        if len(processing) >= PENDING_OBSERVATIONS:
            self._settle()

    @property
    def queue_time(self) -> Histogram:
        """Time a write operation waited in its partition's queue (0 if it ran at once)."""
        self._settle()
        return self._queue_time

    @property
    def processing_time(self) -> Histogram:
        """Time a write operation ran on its partition."""
        self._settle()
        return self._processing_time

    def _settle(self) -> None:
        if self._processing:
            queued, self._queued = self._queued, []
            processing, self._processing = self._processing, []
            self._queue_time.observe_all(queued)
            self._queue_time.observe_zeros(self._ran_at_once)
            self._ran_at_once = 0
            self._processing_time.observe_all(processing)

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None:
        self.load_duration.observe(seconds)
        self.records_loaded += records
        if len(self.slowest_loads) < SLOWEST_LOADS_KEPT:
            heapq.heappush(self.slowest_loads, (seconds, partition))
        else:
            heapq.heappushpop(self.slowest_loads, (seconds, partition))


@dataclass
class GroupMetrics:
    """What the group and offset state machines report (through the shard)."""

    rebalances: int = 0
    rebalance_duration: Histogram = field(default_factory=lambda: Histogram(REBALANCE_BUCKETS_S))
    offset_commits: int = 0
    offsets_expired: int = 0

    def rebalance_completed(self, duration_ms: int) -> None:
        self.rebalances += 1
        self.rebalance_duration.observe(duration_ms / 1000)


@dataclass
class ClusterMetrics:
    """What a node of a cluster counts as partitions move (see `cluster.node`)."""

    # Partitions this node fenced to itself: a new producer epoch and its ownership record
    # in the log, after which the partition loads (a reload after a failure is one more).
    takeovers: int = 0
    # Takeovers that did not get that far: Kafka refused the epoch or the record, or the
    # membership no longer gave this node the partition on a valid lease.
    takeover_failures: int = 0
    # Partitions this node owned and lost to a new assignment.
    handovers: int = 0

    def takeover_done(self) -> None:
        self.takeovers += 1

    def takeover_failed(self) -> None:
        self.takeover_failures += 1

    def partition_lost(self) -> None:
        self.handovers += 1


@dataclass(frozen=True)
class ClusterGauges:
    """A node's place in its cluster, read at scrape time."""

    generation: int
    owned: int
    standby: int
    nodes: int
    holds_lease: bool
    # The cluster gives this node nothing because of an error (its node id is taken).
    refused: bool
    # The producer epoch of each partition this node took over, by partition.
    producer_epochs: dict[int, int]


@dataclass
class TransactionMetrics:
    """What the end of transactions counts (`markers.channel`): each transaction once, as
    its CompleteCommit or CompleteAbort record is written, on the node that writes it."""

    completed_commits: int = 0
    completed_aborts: int = 0
    # Aborts of transactions that outlived their timeout (see `PendingCompleteTxn.timed_out`).
    timed_out: int = 0
    # From the transaction's start (its first partition) to its completion.
    duration: Histogram = field(default_factory=lambda: Histogram(TRANSACTION_BUCKETS_S))
    # Transactions whose markers a broker fenced (a newer coordinator or producer ends them).
    fenced: int = 0
    # Data markers the brokers refused for good on transactions this node completed without
    # them (an unknown partition, another writer's producer epoch on it).
    markers_refused: int = 0
    # Steps of ending a transaction tried again: markers refused, a log partition's offsets
    # not settled, the completion record not written.
    retries: int = 0

    def transaction_completed(self, committed: bool, timed_out: bool, seconds: float) -> None:
        if committed:
            self.completed_commits += 1
        else:
            self.completed_aborts += 1
            if timed_out:
                self.timed_out += 1
        if seconds >= 0:
            self.duration.observe(seconds)


@dataclass(frozen=True)
class TransactionFigures:
    """The transaction coordinator's figures read at scrape time, on a node that serves
    transactions: what its completion driver and marker writer hold."""

    # Prepared transactions being ended (markers, then their completion).
    completions_in_flight: int
    # Data partitions whose markers are waiting to be written or on their way.
    markers_queued: int
    # WriteTxnMarkers requests sent to the Kafka cluster, and markers sent again.
    marker_requests: int
    marker_retries: int


@dataclass
class ConsumerLagMetrics:
    """What the consumer lag's refreshes found (`consumer_lag`), read at scrape time."""

    # Each committed offset's lag behind its data partition's log end offset, by (group,
    # topic, partition): the latest refresh's, replaced whole at each refresh.
    lag: dict[tuple[str, str, int], int] = field(default_factory=dict)
    # `lag` in Prometheus's text format, rendered with it (see `prometheus.lag_samples`).
    exposition: bytes = b""
    # Committed offsets left out of `lag` by its bound on series, summed over refreshes.
    series_dropped: int = 0
    # Refreshes that could not read every end offset they needed (the data cluster or a
    # leader did not answer): the partitions not read are missing from `lag` until the next.
    refresh_failures: int = 0
