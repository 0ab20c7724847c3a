"""`bench failover`: a cluster over a written log, its first node killed, the time until
each of its partitions commits again, with warm standbys and without."""

from __future__ import annotations

import pytest
from apache_kafka import ApacheKafkaBroker
from bench_support import assert_common_shape, run_bench

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_failover_with_and_without_standbys(kafka_broker: ApacheKafkaBroker) -> None:
    document = run_bench(
        "failover",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--records", "20000",
        "--load-topics", "2",
        "--load-partitions", "50",
        "--offsets-topic-partitions", "4",
        "--nodes", "2",
        "--failover-standby", "both",
        timeout=600,
    )  # fmt: skip
    assert_common_shape(document)
    on, off = document["results"]["failover"]
    assert (on["standby"], off["standby"]) == ("on", "off")
    for row in (on, off):
        assert (row["target"], row["nodes"], row["records"]) == ("ours", 2, 20000)
        assert row["moved"] == 2, "the first of two nodes owned half of the 4 partitions"
        assert 0 < row["median_s"] <= row["max_s"] < 60
        assert row["median_over_session_s"] == pytest.approx(row["median_s"] - 6, abs=0.002)
        assert row["max_after_view_s"] is not None and row["max_after_view_s"] < row["max_s"]
        assert row["errors"] == 0
    # A takeover by a warm standby reads its own ownership record; a cold one the whole
    # partition (a quarter of the log, give or take the groups' spread).
    assert on["takeover_records_max"] <= 2
    assert (on["warm"], off["warm"]) == (2, 0)
    assert off["takeover_records_median"] > 2000
