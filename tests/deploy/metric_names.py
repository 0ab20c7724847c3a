"""The metric families coordinator-server exports: the one list that the dashboard, the alert
rules, deploy/README.md and the test of a running server's /metrics are all checked against.

A test in this folder imports it as `metric_names`; a test elsewhere under tests/ imports it as
`deploy.metric_names` (tests/ is on sys.path through tests/conftest.py).

Names are as PromQL sees them: counters with their `_total`, histograms without a suffix
(their series are `_bucket`, `_sum` and `_count`). prometheus_client's text parser reports a
counter's family without `_total`; its samples keep it. No family is labelled by group or
member id but the consumer lag's (`LAG_FAMILY`). Beside the coordinator's own, the server
exports prometheus_client's process and garbage collector families (`PROCESS_METRICS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram"]

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable")
PARTITION_STATES = ("INITIAL", "LOADING", "ACTIVE", "FAILED", "CLOSED")
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
)
TRANSACTION_RESULTS = ("commit", "abort")
REFUSAL_REASONS = ("max_connections", "max_connections_per_ip", "shutting_down")
CLOSE_REASONS = (
    "evicted",
    "idle",
    "frame_timeout",
    "write_timeout",
    "response_buffer_full",
    "malformed_frame",
    "connection_error",
)


@dataclass(frozen=True)
class MetricFamily:
    name: str
    type: MetricType
    labels: tuple[str, ...] = ()


EXPORTED_METRICS: tuple[MetricFamily, ...] = (
    MetricFamily("coordinator_build_info", "gauge", ("version",)),
    # Requests.
    MetricFamily("coordinator_requests_total", "counter", ("api", "error")),
    MetricFamily("coordinator_request_duration_seconds", "histogram", ("api",)),
    MetricFamily("coordinator_requests_in_flight", "gauge"),
    # Connections.
    MetricFamily("coordinator_connections_open", "gauge"),
    MetricFamily("coordinator_connections_refused_total", "counter", ("reason",)),
    MetricFamily("coordinator_connections_closed_total", "counter", ("reason",)),
    MetricFamily("coordinator_malformed_frames_total", "counter"),
    MetricFamily("coordinator_authentications_total", "counter", ("mechanism", "outcome")),
    MetricFamily("coordinator_authorization_denials_total", "counter", ("api",)),
    # Groups.
    MetricFamily("coordinator_groups", "gauge", ("state",)),
    MetricFamily("coordinator_group_members", "gauge"),
    MetricFamily("coordinator_consumer_groups", "gauge", ("state",)),
    MetricFamily("coordinator_consumer_group_members", "gauge"),
    MetricFamily("coordinator_rebalances_total", "counter"),
    MetricFamily("coordinator_rebalance_duration_seconds", "histogram"),
    # Offsets.
    MetricFamily("coordinator_offset_commits_total", "counter"),
    MetricFamily("coordinator_offsets_expired_total", "counter"),
    # Log partitions.
    MetricFamily("coordinator_log_failed", "gauge"),
    MetricFamily("coordinator_partitions", "gauge", ("state",)),
    MetricFamily("coordinator_partition_load_duration_seconds", "histogram"),
    MetricFamily("coordinator_partition_load_records_total", "counter"),
    # Event queues.
    MetricFamily("coordinator_event_queue_depth", "gauge"),
    MetricFamily("coordinator_event_queue_time_seconds", "histogram"),
    MetricFamily("coordinator_event_processing_time_seconds", "histogram"),
    MetricFamily("coordinator_event_loop_lag_seconds", "histogram"),
    # Log writes.
    MetricFamily("coordinator_write_batch_records", "histogram"),
    MetricFamily("coordinator_write_batch_bytes", "histogram"),
    MetricFamily("coordinator_append_duration_seconds", "histogram"),
    MetricFamily("coordinator_append_failures_total", "counter"),
    MetricFamily("coordinator_uncommitted_offsets", "gauge", ("partition",)),
    MetricFamily("coordinator_committed_offsets", "gauge", ("partition",)),
    # The node's place in its cluster (samples only with --cluster on).
    MetricFamily("coordinator_cluster_owned_partitions", "gauge"),
    MetricFamily("coordinator_cluster_standby_partitions", "gauge"),
    MetricFamily("coordinator_cluster_nodes", "gauge"),
    MetricFamily("coordinator_cluster_generation", "gauge"),
    MetricFamily("coordinator_cluster_lease_held", "gauge"),
    MetricFamily("coordinator_cluster_assignment_error", "gauge"),
    MetricFamily("coordinator_cluster_producer_epoch", "gauge", ("partition",)),
    MetricFamily("coordinator_cluster_takeovers_total", "counter"),
    MetricFamily("coordinator_cluster_takeover_failures_total", "counter"),
    MetricFamily("coordinator_cluster_handovers_total", "counter"),
    # The transaction coordinator (the last ten: samples only on a node serving them).
    MetricFamily("coordinator_transactions", "gauge", ("state",)),
    MetricFamily("coordinator_transactional_ids", "gauge"),
    MetricFamily("coordinator_pending_transactional_offsets", "gauge"),
    MetricFamily("coordinator_transactions_completed_total", "counter", ("result",)),
    MetricFamily("coordinator_transactions_timed_out_total", "counter"),
    MetricFamily("coordinator_transaction_duration_seconds", "histogram"),
    MetricFamily("coordinator_transaction_markers_fenced_total", "counter"),
    MetricFamily("coordinator_transaction_markers_refused_total", "counter"),
    MetricFamily("coordinator_transaction_completion_retries_total", "counter"),
    MetricFamily("coordinator_transaction_completions_in_flight", "gauge"),
    MetricFamily("coordinator_transaction_markers_queued", "gauge"),
    MetricFamily("coordinator_transaction_marker_requests_total", "counter"),
    MetricFamily("coordinator_transaction_marker_retries_total", "counter"),
    # Consumer lag (samples only with a data cluster and --lag-refresh-interval-ms above 0).
    MetricFamily("coordinator_consumer_group_lag", "gauge", ("group", "topic", "partition")),
    MetricFamily("coordinator_consumer_group_lag_series_dropped_total", "counter"),
    MetricFamily("coordinator_consumer_group_lag_refresh_failures_total", "counter"),
)

# The one family labelled by group (its series bounded by --lag-max-series).
LAG_FAMILY = "coordinator_consumer_group_lag"

# prometheus_client's process collector (Linux) and garbage collector collector.
PROCESS_METRICS: tuple[MetricFamily, ...] = (
    MetricFamily("process_cpu_seconds_total", "counter"),
    MetricFamily("process_resident_memory_bytes", "gauge"),
    MetricFamily("process_virtual_memory_bytes", "gauge"),
    MetricFamily("process_start_time_seconds", "gauge"),
    MetricFamily("process_open_fds", "gauge"),
    MetricFamily("process_max_fds", "gauge"),
    MetricFamily("python_gc_objects_collected_total", "counter", ("generation",)),
    MetricFamily("python_gc_objects_uncollectable_total", "counter", ("generation",)),
    MetricFamily("python_gc_collections_total", "counter", ("generation",)),
)

METRICS_BY_NAME: dict[str, MetricFamily] = {family.name: family for family in EXPORTED_METRICS}

# Values a label takes where the set is closed, by (family, label). `api` and `error` are
# Kafka's names (protocol/api_keys.py, protocol/errors.py, "NONE" for success), `partition` a
# log partition number, `version` free.
LABEL_VALUES: dict[tuple[str, str], tuple[str, ...]] = {
    ("coordinator_groups", "state"): GROUP_STATES,
    ("coordinator_consumer_groups", "state"): CONSUMER_GROUP_STATES,
    ("coordinator_partitions", "state"): PARTITION_STATES,
    ("coordinator_transactions", "state"): TRANSACTION_STATES,
    ("coordinator_transactions_completed_total", "result"): TRANSACTION_RESULTS,
    ("coordinator_connections_refused_total", "reason"): REFUSAL_REASONS,
    ("coordinator_connections_closed_total", "reason"): CLOSE_REASONS,
}


def series_names() -> dict[str, MetricFamily]:
    """Every series name a scrape can show (`_bucket`/`_sum`/`_count` for histograms), mapped to
    its family."""
    names: dict[str, MetricFamily] = {}
    for family in (*EXPORTED_METRICS, *PROCESS_METRICS):
        if family.type == "histogram":
            for suffix in HISTOGRAM_SUFFIXES:
                names[family.name + suffix] = family
        else:
            names[family.name] = family
    return names


def family_of(series: str) -> str:
    """The family name of a series name: a histogram's suffix stripped, anything else as is."""
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        family = METRICS_BY_NAME.get(base)
        if base != series and family is not None and family.type == "histogram":
            return base
    return series
