"""`bench load`: a small log written to a broker, then a cold start over it."""

from __future__ import annotations

import pytest
from bench_support import assert_common_shape, run_bench
from kafka_broker import KafkaBroker

pytestmark = pytest.mark.kafka


def test_load_of_a_small_log(kafka_broker: KafkaBroker) -> None:
    document = run_bench(
        "load",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--records", "5000",
        "--load-topics", "2",
        "--load-partitions", "50",
        "--offsets-topic-partitions", "8",
    )  # fmt: skip
    assert_common_shape(document)
    (row,) = document["results"]["load"]
    assert row["target"] == "ours"
    assert row["records"] == 5000
    assert row["groups"] == 50
    assert row["loaded_ok"] is True
    assert 0 < row["server_load_s"] <= row["ready_s"]
    assert row["rss_mb"] > 0
