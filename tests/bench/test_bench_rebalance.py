"""`bench rebalance` against a server (and a peer) it starts itself, on Apache Kafka."""

from __future__ import annotations

import pytest
from bench_support import assert_common_shape, rows_of, run_bench

# The bench starts Apache Kafka brokers of its own for these.
pytestmark = pytest.mark.kafka


def assert_rebalance_rows(rows: list[dict[str, object]], sizes: list[int]) -> None:
    assert [row["members"] for row in rows] == sizes
    for row in rows:
        assert isinstance(row["join_s"], float) and row["join_s"] > 0
        assert isinstance(row["extra_join_s"], float) and row["extra_join_s"] > 0


@pytest.mark.slow
def test_rebalance_of_small_groups() -> None:
    document = run_bench("rebalance", "--sizes", "3,10")
    assert_common_shape(document)
    assert_rebalance_rows(rows_of(document, "rebalance", "ours"), [3, 10])
    assert rows_of(document, "rebalance", "peer") == []
    assert document["peer"] is None
    assert [process["role"] for process in document["processes"]] == ["log broker", "server"]


@pytest.mark.slow
def test_rebalance_side_by_side_with_kafkas_coordinator() -> None:
    document = run_bench("rebalance", "--peer", "--sizes", "3")
    assert_rebalance_rows(rows_of(document, "rebalance", "ours"), [3])
    assert_rebalance_rows(rows_of(document, "rebalance", "peer"), [3])
    (ratio,) = rows_of(document, "rebalance", "ours/peer")
    assert ratio["join_s"] > 0
    assert document["peer"].startswith("Apache Kafka")
