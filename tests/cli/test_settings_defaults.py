"""One source of defaults: the server's settings and the layers' own configurations
take theirs from `coordinator_server.defaults`, so a state machine built with its
configuration's defaults (as tests build it) runs as the server runs it."""

from __future__ import annotations

import pytest

from coordinator_server.config import CoordinatorConfig
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.server.state import ServerConfig
from coordinator_server.transactions.results import TransactionsConfig


@pytest.mark.parametrize(
    ("setting", "field", "scale"),
    [
        ("group_initial_rebalance_delay_ms", "initial_rebalance_delay_ms", 1),
        ("group_min_session_timeout_ms", "min_session_timeout_ms", 1),
        ("group_max_session_timeout_ms", "max_session_timeout_ms", 1),
        ("group_max_size", "max_size", 1),
        ("offsets_retention_minutes", "offsets_retention_ms", 60_000),
        ("offsets_retention_check_interval_ms", "offsets_retention_check_interval_ms", 1),
        ("max_groups", "max_groups", 1),
        ("max_response_bytes", "max_response_bytes", 1),
    ],
)
def test_each_group_setting_defaults_to_what_the_groups_default_to(
    setting: str, field: str, scale: int
) -> None:
    assert CoordinatorConfig.model_fields[setting].default * scale == getattr(GroupsConfig(), field)


@pytest.mark.parametrize(
    "setting",
    [
        "offset_metadata_max_bytes",
        "max_committed_offsets_per_group",
        "max_id_length",
        "max_pending_transactional_offsets",
    ],
)
def test_each_offsets_setting_defaults_to_what_the_offsets_default_to(setting: str) -> None:
    assert CoordinatorConfig.model_fields[setting].default == getattr(OffsetsConfig(), setting)


@pytest.mark.parametrize(
    "setting",
    [
        "max_frame_bytes",
        "max_connections",
        "max_connections_per_ip",
        "max_inflight_requests",
        "max_inflight_request_bytes",
        "max_response_bytes",
        "response_buffer_bytes",
        "response_buffer_max_bytes",
        "response_buffer_total_bytes",
        "connections_max_idle_ms",
        "frame_read_timeout_ms",
        "response_write_timeout_ms",
    ],
)
def test_each_listener_setting_defaults_to_what_the_listener_defaults_to(setting: str) -> None:
    assert CoordinatorConfig.model_fields[setting].default == getattr(ServerConfig(), setting)


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("transaction_max_timeout_ms", "max_timeout_ms"),
        ("transactional_id_expiration_ms", "transactional_id_expiration_ms"),
        (
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
            "abort_timed_out_interval_ms",
        ),
        (
            "transaction_remove_expired_transaction_cleanup_interval_ms",
            "remove_expired_interval_ms",
        ),
        ("max_transactional_ids", "max_transactional_ids"),
        ("max_partitions_per_transaction", "max_partitions_per_transaction"),
    ],
)
def test_each_transaction_setting_defaults_to_what_the_transactions_default_to(
    setting: str, field: str
) -> None:
    default = CoordinatorConfig.model_fields[setting].default
    assert default == getattr(TransactionsConfig(), field)


def test_producer_ids_come_from_the_kafka_cluster_unless_a_range_is_set() -> None:
    assert CoordinatorConfig.model_fields["transaction_producer_id_start"].default is None
    assert CoordinatorConfig.model_fields["transaction_producer_id_end"].default is None
    assert CoordinatorConfig().transaction_producer_id_range is None
    # Either bound sets a range; the other is the transaction state machine's default.
    shard = TransactionsConfig()
    assert CoordinatorConfig(transaction_producer_id_start=2**50).transaction_producer_id_range == (
        2**50,
        shard.producer_id_end,
    )
    assert CoordinatorConfig(transaction_producer_id_end=2**60).transaction_producer_id_range == (
        shard.producer_id_start,
        2**60,
    )


def test_offsets_of_any_partition_are_taken_unless_the_check_is_on() -> None:
    assert CoordinatorConfig.model_fields["offset_commit_check_partitions"].default is False
    assert CoordinatorConfig().offset_commit_check_partitions is False
    # The check reads the cluster the consumers read from: the lag's, else the log's.
    on = {"offset_commit_check_partitions": True}
    assert CoordinatorConfig(bootstrap_servers="log:9092", **on).data_cluster == "log:9092"
    assert (
        CoordinatorConfig(
            bootstrap_servers="log:9092", lag_bootstrap_servers="data:9092", **on
        ).data_cluster
        == "data:9092"
    )
    assert CoordinatorConfig(lag_bootstrap_servers="data:9092", **on).data_cluster == "data:9092"
    # With no Kafka cluster at all (the embedded log), the check would check nothing: the
    # settings are refused rather than offsets committed unchecked.
    with pytest.raises(ValueError, match="offset-commit-check-partitions needs the Kafka cluster"):
        CoordinatorConfig(**on)
