"""`bench load`: a small log written to a broker or a SQLite file, then a cold start over it."""

from __future__ import annotations

import pytest
from bench_support import assert_common_shape, run_bench
from kafka_broker import KafkaBroker

from coordinator_server.tools.bench.processes import port_accepts_connections


def test_load_of_a_small_log(kafka_broker: KafkaBroker) -> None:
    document = run_bench(
        "load",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--records", "5000",
        "--load-topics", "2",
        "--load-partitions", "50",
        "--load-batch-records", "10",
        "--offsets-topic-partitions", "8",
    )  # fmt: skip
    assert_common_shape(document)
    (row,) = document["results"]["load"]
    assert row["target"] == "ours"
    assert (row["log"], row["batch_records"]) == ("kafka", 10)
    assert row["records"] == 5000
    assert row["groups"] == 50
    assert row["loaded_ok"] is True
    assert 0 < row["server_load_s"] <= row["ready_s"]
    assert row["records_per_s"] > 0
    assert row["rss_mb"] > 0


def test_load_of_a_small_sqlite_log() -> None:
    document = run_bench(
        "load",
        "--log", "sqlite",
        "--records", "5000",
        "--load-topics", "2",
        "--load-partitions", "50",
        "--offsets-topic-partitions", "8",
    )  # fmt: skip
    assert_common_shape(document)
    (row,) = document["results"]["load"]
    assert (row["target"], row["log"], row["records"]) == ("ours", "sqlite", 5000)
    assert row["loaded_ok"] is True
    assert 0 < row["server_load_s"] <= row["ready_s"]
    assert row["records_per_s"] > 0


# The bench starts tansu brokers of its own.
@pytest.mark.tansu
def test_the_load_gets_a_broker_of_its_own_when_the_bench_starts_brokers() -> None:
    import argparse

    from coordinator_server.tools.bench.environment import Environment

    def arguments(bootstrap_servers: str | None) -> argparse.Namespace:
        return argparse.Namespace(
            bootstrap_servers=bootstrap_servers,
            no_pin=True,
            server_cpu=0,
            bootstrap=None,
            peer=False,
            peer_bootstrap=None,
            broker="tansu",
            offsets_topic_partitions=4,
        )

    given = Environment(arguments("127.0.0.1:9"))
    with given.broker_of_its_own() as bootstrap:
        assert bootstrap == "127.0.0.1:9"
    assert given.broker is None

    started = Environment(arguments(None))
    try:
        shared = started.kafka()
        with started.broker_of_its_own() as own:
            assert own != shared
            port = int(own.rsplit(":", 1)[1])
            assert port_accepts_connections(port)
        # Stopped once the scenario is done; the shared broker runs on.
        assert not port_accepts_connections(port)
        assert port_accepts_connections(int(shared.rsplit(":", 1)[1]))
    finally:
        started.close()
