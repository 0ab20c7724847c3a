"""Prometheus metrics, read out at scrape time: one collector turns the counters every layer
keeps (`metrics`) and figures read from live objects (`Snapshot`) into metric families.
Names follow Prometheus's rules: prefix `coordinator_`, base units, `_total` counters, and
never a group or member id as a label but in one family, the consumer lag's (bounded by
`--lag-max-series`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from coordinator_protocol.api_keys import api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.metrics import (
    ClusterGauges,
    ClusterMetrics,
    ConsumerLagMetrics,
    GroupMetrics,
    Histogram,
    RuntimeMetrics,
    ServerMetrics,
    TransactionFigures,
    TransactionMetrics,
)
from coordinator_server.server.connection_events import RefusalReason, ServerCloseReason

# Kafka's consumer group states as the gauge lists them (a deleted group is gone, not Dead).
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable")

LAG_FAMILY = "coordinator_consumer_group_lag"
_LAG_HELP = (
    "Messages a group has not consumed: the partition's log end offset on the data cluster "
    "minus the group's committed offset (0 at least), as of the last refresh."
)
LAG_HEADER = f"# HELP {LAG_FAMILY} {_LAG_HELP}\n# TYPE {LAG_FAMILY} gauge\n"
"""The lag family's text without samples."""


def lag_samples(lag: Iterable[tuple[tuple[str, str, int], int]]) -> str:
    """The lag family's samples in Prometheus's text format. The family is rendered here, as
    the refresh computes it (in slices), not by prometheus_client at each scrape: 10,000
    series cost a scrape about 90 ms of the event loop that way, and 13 ms here."""
    return "".join(
        f'{LAG_FAMILY}{{group="{_escape(group)}",topic="{_escape(topic)}",'
        f'partition="{partition}"}} {messages}\n'
        for (group, topic, partition), messages in lag
    )


def lag_exposition(lag: ConsumerLagMetrics) -> bytes:
    """The lag family as /metrics serves it beside the collector's families."""
    return lag.exposition or LAG_HEADER.encode()


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class Snapshot:
    """Figures read from live objects at scrape time."""

    requests_in_flight: int
    connections_open: int
    partitions_by_state: dict[str, int]
    queue_depth: int
    uncommitted_offsets: dict[int, int]
    # Committed offsets held, by ACTIVE log partition.
    committed_offsets: dict[int, int]
    groups_by_state: dict[str, int]
    members: int
    log_failed: bool = False
    # The node's place in its cluster; None for a node alone (no --cluster on).
    cluster: ClusterGauges | None = None
    # Transactional ids by the state of their transaction (Kafka's names), and the pending
    # transactional offsets, over the active partitions.
    transactions_by_state: dict[str, int] = field(default_factory=dict)
    transactional_ids: int = 0
    pending_transactional_offsets: int = 0
    # The completion driver's and marker writer's figures; None: no transactions served.
    transactions: TransactionFigures | None = None
    # Consumer groups (KIP-848) by state (Kafka's names), and their members.
    consumer_groups_by_state: dict[str, int] = field(default_factory=dict)
    consumer_group_members: int = 0


class CoordinatorCollector(Collector):
    def __init__(
        self,
        server: ServerMetrics,
        runtime: RuntimeMetrics,
        groups: GroupMetrics,
        snapshot: Callable[[], Snapshot],
        version: str,
        cluster: ClusterMetrics | None = None,
        transactions: TransactionMetrics | None = None,
        lag: ConsumerLagMetrics | None = None,
    ) -> None:
        """`lag` is None while consumer lag is off: its families have no samples."""
        self._server = server
        self._runtime = runtime
        self._groups = groups
        self._snapshot = snapshot
        self._version = version
        self._cluster = cluster
        self._transactions = transactions
        self._lag = lag
        self.started = time.monotonic()

    def collect(self) -> Iterable[Metric]:
        snapshot = self._snapshot()
        yield from self._collect_server(snapshot)
        yield from self._collect_runtime()
        yield from self._collect_groups()
        yield from self._collect_cluster(snapshot.cluster)
        yield from self._collect_transactions(snapshot)
        yield from self._collect_consumer_lag()

    def _collect_server(self, snapshot: Snapshot) -> Iterator[Metric]:
        server = self._server
        info = GaugeMetricFamily(
            "coordinator_build_info", "The coordinator's version.", labels=["version"]
        )
        info.add_metric([self._version], 1)
        yield info
        requests = CounterMetricFamily(
            "coordinator_requests", "Requests answered, by API and error.", labels=["api", "error"]
        )
        for (api_key, code), count in sorted(server.requests.items()):
            requests.add_metric([api_name(api_key), error_name(code)], count)
        yield requests
        latency = HistogramMetricFamily(
            "coordinator_request_duration_seconds",
            "Time from a request's arrival to its response, by API.",
            labels=["api"],
        )
        for api_key, histogram in sorted(server.request_latency.items()):
            latency.add_metric([api_name(api_key)], histogram.buckets(), histogram.total)
        yield latency
        yield GaugeMetricFamily(
            "coordinator_requests_in_flight",
            "Requests received and not answered yet.",
            value=snapshot.requests_in_flight,
        )
        yield _histogram(
            "coordinator_event_loop_lag_seconds",
            "How late the event loop ran a timer due every 0.5 s: how long requests, timers "
            "and appends waited for the loop meanwhile.",
            server.event_loop_lag,
        )
        yield GaugeMetricFamily(
            "coordinator_connections_open",
            "Open client connections.",
            value=snapshot.connections_open,
        )
        refused = CounterMetricFamily(
            "coordinator_connections_refused",
            "Connections refused as they opened, by reason.",
            labels=["reason"],
        )
        for refusal in RefusalReason:
            refused.add_metric([refusal.value], server.connections_refused[refusal])
        yield refused
        closed = CounterMetricFamily(
            "coordinator_connections_closed",
            "Open connections the server closed, by reason.",
            labels=["reason"],
        )
        for close in ServerCloseReason:
            closed.add_metric([close.value], server.connections_closed[close])
        yield closed
        authentications = CounterMetricFamily(
            "coordinator_authentications",
            "SASL exchanges and TLS client certificates, by mechanism and outcome (success, "
            "failure, reauthentication).",
            labels=["mechanism", "outcome"],
        )
        for (mechanism, outcome), count in sorted(server.authentications.items()):
            authentications.add_metric([mechanism, outcome], count)
        yield authentications
        denials = CounterMetricFamily(
            "coordinator_authorization_denials",
            "Requests, or items of one, the authorizer denied, by API.",
            labels=["api"],
        )
        for api, count in sorted(server.authorization_denials.items()):
            denials.add_metric([api], count)
        yield denials
        yield CounterMetricFamily(
            "coordinator_malformed_frames",
            "Connections closed for broken framing or a malformed request header.",
            value=server.malformed_frames,
        )
        yield GaugeMetricFamily(
            "coordinator_log_failed",
            "1 once the log stopped for good (its topic disappeared or changed its partition "
            "count): every partition stops until a restart.",
            value=int(snapshot.log_failed),
        )
        partitions = GaugeMetricFamily(
            "coordinator_partitions", "Log partitions by runtime state.", labels=["state"]
        )
        for state, count in sorted(snapshot.partitions_by_state.items()):
            partitions.add_metric([state], count)
        yield partitions
        yield GaugeMetricFamily(
            "coordinator_event_queue_depth",
            "Operations queued on all partitions.",
            value=snapshot.queue_depth,
        )
        uncommitted = GaugeMetricFamily(
            "coordinator_uncommitted_offsets",
            "Records written to a log partition and not committed yet.",
            labels=["partition"],
        )
        for partition, count in sorted(snapshot.uncommitted_offsets.items()):
            uncommitted.add_metric([str(partition)], count)
        yield uncommitted
        committed = GaugeMetricFamily(
            "coordinator_committed_offsets",
            "Committed offsets held (one per group and topic partition), by log partition "
            "(Kafka's NumOffsets).",
            labels=["partition"],
        )
        for partition, count in sorted(snapshot.committed_offsets.items()):
            committed.add_metric([str(partition)], count)
        yield committed
        groups = GaugeMetricFamily(
            "coordinator_groups", "Groups by state (every state, 0 included).", labels=["state"]
        )
        for group_state in ClassicGroupState:
            groups.add_metric(
                [group_state.value], snapshot.groups_by_state.get(group_state.value, 0)
            )
        yield groups
        yield GaugeMetricFamily(
            "coordinator_group_members", "Members of all groups.", value=snapshot.members
        )
        consumer_groups = GaugeMetricFamily(
            "coordinator_consumer_groups",
            "Consumer groups (KIP-848) by state (every state, 0 included; Kafka's "
            "consumer-group-count).",
            labels=["state"],
        )
        for consumer_state in CONSUMER_GROUP_STATES:
            consumer_groups.add_metric(
                [consumer_state], snapshot.consumer_groups_by_state.get(consumer_state, 0)
            )
        yield consumer_groups
        yield GaugeMetricFamily(
            "coordinator_consumer_group_members",
            "Members of all consumer groups (KIP-848).",
            value=snapshot.consumer_group_members,
        )

    def _collect_runtime(self) -> Iterator[Metric]:
        runtime = self._runtime
        yield _histogram(
            "coordinator_event_queue_time_seconds",
            "Time a write operation waited in its partition's queue.",
            runtime.queue_time,
        )
        yield _histogram(
            "coordinator_event_processing_time_seconds",
            "Time a write operation ran on its partition: the operation, the replay of its "
            "records and their place in the batch (not the wait for the log).",
            runtime.processing_time,
        )
        yield _histogram(
            "coordinator_write_batch_records", "Records per appended batch.", runtime.batch_records
        )
        yield _histogram(
            "coordinator_write_batch_bytes", "Bytes per appended batch.", runtime.batch_bytes
        )
        yield _histogram(
            "coordinator_append_duration_seconds",
            "Time from handing a batch to the log to its acknowledgement.",
            runtime.append_latency,
        )
        yield CounterMetricFamily(
            "coordinator_append_failures", "Appends the log failed.", value=runtime.append_failures
        )
        yield _histogram(
            "coordinator_partition_load_duration_seconds",
            "Time to load a log partition.",
            runtime.load_duration,
        )
        yield CounterMetricFamily(
            "coordinator_partition_load_records",
            "Records replayed while loading partitions.",
            value=runtime.records_loaded,
        )

    def _collect_groups(self) -> Iterator[Metric]:
        groups = self._groups
        yield CounterMetricFamily(
            "coordinator_rebalances", "Completed rebalances (join phases).", value=groups.rebalances
        )
        yield _histogram(
            "coordinator_rebalance_duration_seconds",
            "Time from a rebalance's start to the end of its join phase.",
            groups.rebalance_duration,
        )
        yield CounterMetricFamily(
            "coordinator_offset_commits",
            "Partition offsets committed.",
            value=groups.offset_commits,
        )
        yield CounterMetricFamily(
            "coordinator_offsets_expired",
            "Offsets removed by retention.",
            value=groups.offsets_expired,
        )

    def _collect_cluster(self, gauges: ClusterGauges | None) -> Iterator[Metric]:
        """The node's place in its cluster. A node alone exports the families without
        samples: it owns no share of a cluster, takes nothing over and hands nothing over."""
        counters = self._cluster if gauges is not None else None

        yield _gauge(
            "coordinator_cluster_owned_partitions",
            "Log partitions the cluster's assignment gives this node.",
            None if gauges is None else gauges.owned,
        )
        yield _gauge(
            "coordinator_cluster_standby_partitions",
            "Log partitions this node stands by for (it would take them over next).",
            None if gauges is None else gauges.standby,
        )
        yield _gauge(
            "coordinator_cluster_nodes",
            "Nodes in the cluster's latest assignment, as this node knows it.",
            None if gauges is None else gauges.nodes,
        )
        yield _gauge(
            "coordinator_cluster_generation",
            "Generation of the cluster's group (the Kafka consumer group) of the latest "
            "assignment.",
            None if gauges is None else gauges.generation,
        )
        yield _gauge(
            "coordinator_cluster_lease_held",
            "1 while Kafka counts this node a member of its cluster for sure (a heartbeat "
            "answered within the session timeout); 0 means it takes nothing over.",
            None if gauges is None else int(gauges.holds_lease),
        )
        yield _gauge(
            "coordinator_cluster_assignment_error",
            "1 while the cluster gives this node nothing because of an error (its node id "
            "is taken by another node, or the assignment could not be read).",
            None if gauges is None else int(gauges.refused),
        )
        epochs = GaugeMetricFamily(
            "coordinator_cluster_producer_epoch",
            "Producer epoch at which this node took each partition over (Kafka's fencing: "
            "writes of older epochs are refused).",
            labels=["partition"],
        )
        if gauges is not None:
            for partition, epoch in sorted(gauges.producer_epochs.items()):
                epochs.add_metric([str(partition)], epoch)
        yield epochs
        yield _counter(
            "coordinator_cluster_takeovers",
            "Partitions this node fenced to itself (a new producer epoch and its ownership "
            "record in the log) before loading them.",
            None if counters is None else counters.takeovers,
        )
        yield _counter(
            "coordinator_cluster_takeover_failures",
            "Takeovers that failed (Kafka refused the epoch or the record, or the lease ran "
            "out); each is tried again while the node owns the partition.",
            None if counters is None else counters.takeover_failures,
        )
        yield _counter(
            "coordinator_cluster_handovers",
            "Partitions this node owned and lost to a new assignment.",
            None if counters is None else counters.handovers,
        )

    def _collect_transactions(self, snapshot: Snapshot) -> Iterator[Metric]:
        """The transaction coordinator. The state is read from the partitions whether or not
        the node serves transactions (a log may hold them from when it did); the ends of
        transactions and their markers have samples only on a node that serves them."""
        by_state = GaugeMetricFamily(
            "coordinator_transactions",
            "Transactional ids by the state of their transaction (Kafka's names).",
            labels=["state"],
        )
        for state, count in sorted(snapshot.transactions_by_state.items()):
            by_state.add_metric([state], count)
        yield by_state
        yield GaugeMetricFamily(
            "coordinator_transactional_ids",
            "Transactional ids kept (each with its producer id and epoch).",
            value=snapshot.transactional_ids,
        )
        yield GaugeMetricFamily(
            "coordinator_pending_transactional_offsets",
            "Offsets committed in transactions not ended yet (one per producer, group and "
            "partition).",
            value=snapshot.pending_transactional_offsets,
        )
        figures = snapshot.transactions
        counters = self._transactions if figures is not None else None
        completed = CounterMetricFamily(
            "coordinator_transactions_completed",
            "Transactions completed (CompleteCommit or CompleteAbort written), by result.",
            labels=["result"],
        )
        duration = HistogramMetricFamily(
            "coordinator_transaction_duration_seconds",
            "Time from a transaction's first partition to its completion.",
        )
        if counters is not None:
            completed.add_metric(["commit"], counters.completed_commits)
            completed.add_metric(["abort"], counters.completed_aborts)
            duration.add_metric([], counters.duration.buckets(), counters.duration.total)
        yield completed
        yield _counter(
            "coordinator_transactions_timed_out",
            "Transactions aborted because they outlived their timeout, counted as they complete.",
            None if counters is None else counters.timed_out,
        )
        yield duration
        yield _counter(
            "coordinator_transaction_markers_fenced",
            "Transactions whose markers a broker fenced (a newer coordinator or producer ends "
            "them).",
            None if counters is None else counters.fenced,
        )
        yield _counter(
            "coordinator_transaction_markers_refused",
            "Data markers the brokers refused for good (an unknown partition, another writer's "
            "producer epoch on it) on transactions completed without them.",
            None if counters is None else counters.markers_refused,
        )
        yield _counter(
            "coordinator_transaction_completion_retries",
            "Steps of ending a transaction tried again (markers refused, offsets on a log "
            "partition not settled, the completion record not written).",
            None if counters is None else counters.retries,
        )
        yield _gauge(
            "coordinator_transaction_completions_in_flight",
            "Prepared transactions being ended (their markers, then their completion).",
            None if figures is None else figures.completions_in_flight,
        )
        yield _gauge(
            "coordinator_transaction_markers_queued",
            "Data partitions whose transaction markers are waiting or on their way to Kafka.",
            None if figures is None else figures.markers_queued,
        )
        yield _counter(
            "coordinator_transaction_marker_requests",
            "WriteTxnMarkers requests sent to the Kafka cluster's brokers.",
            None if figures is None else figures.marker_requests,
        )
        yield _counter(
            "coordinator_transaction_marker_retries",
            "Markers sent again (no answer, a retriable error, the leader moved).",
            None if figures is None else figures.marker_retries,
        )

    def _collect_consumer_lag(self) -> Iterator[Metric]:
        """Consumer lag's counters; its gauge, the one family labelled by group, comes from
        `lag_exposition` while lag is on, and without samples from here while it is off."""
        lag = self._lag
        if lag is None:
            yield GaugeMetricFamily(LAG_FAMILY, _LAG_HELP, labels=["group", "topic", "partition"])
        yield _counter(
            "coordinator_consumer_group_lag_series_dropped",
            "Committed offsets left out of coordinator_consumer_group_lag by --lag-max-series, "
            "counted at each refresh.",
            None if lag is None else lag.series_dropped,
        )
        yield _counter(
            "coordinator_consumer_group_lag_refresh_failures",
            "Lag refreshes that could not read every end offset they needed from the data "
            "cluster (the partitions not read are missing until the next).",
            None if lag is None else lag.refresh_failures,
        )


def _gauge(name: str, documentation: str, value: float | None) -> GaugeMetricFamily:
    """A family with one sample, or none when `value` is None (nothing to report here)."""
    family = GaugeMetricFamily(name, documentation)
    if value is not None:
        family.add_metric([], value)
    return family


def _counter(name: str, documentation: str, value: int | None) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation)
    if value is not None:
        family.add_metric([], value)
    return family


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    family.add_metric([], histogram.buckets(), histogram.total)
    return family
