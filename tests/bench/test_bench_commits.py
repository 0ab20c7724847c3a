"""`bench commits` against a server and a peer it starts itself: shape and sanity."""

from __future__ import annotations

import pytest
from bench_support import assert_common_shape, rows_of, run_bench

# The bench starts a tansu broker of its own for these.
pytestmark = pytest.mark.tansu


def test_commits_against_ours_and_the_peer() -> None:
    document = run_bench(
        "commits", "--peer", "--groups", "4", "--partitions", "3", "--inflight", "1,4"
    )
    assert_common_shape(document)
    for target in ("ours", "peer"):
        rows = rows_of(document, "commits", target)
        assert [row["inflight"] for row in rows] == [1, 4]
        for row in rows:
            assert row["requests"] > 0
            assert row["requests_per_s"] > 0
            assert row["partition_commits_per_s"] == pytest.approx(
                row["requests_per_s"] * 3, rel=0.01
            )
            assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["p999_ms"]
            assert row["errors"] == 0
            assert 0 < row["generator_cpu"] <= 1.5
            # The broker started here serves both; only ours runs in our server too.
            assert row["broker_cpu_us"] > 0
            assert ("server_cpu_us" in row) == (target == "ours")
            if target == "ours":
                assert row["server_cpu_us"] > 0
    ratios = rows_of(document, "commits", "ours/peer")
    assert len(ratios) == 2
    assert all(row["requests_per_s"] > 0 for row in ratios)
