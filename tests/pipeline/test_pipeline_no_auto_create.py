"""The pipeline's readers never create the topic they read, on Apache Kafka, whose brokers
create any topic a metadata request names unless the request forbids it (Kafka's default):
a log topic that does not exist is one line naming it (`analyze history`), whether asked by
the driver's consumer or read by Spark's own Kafka source, and is still missing after."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from kafka_broker import cluster_topics

from coordinator_server.cli import main as coordinator_main
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def test_a_missing_log_topic_is_named_and_never_created(
    spark: Any,
    kafka_broker: ApacheKafkaBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bootstrap = kafka_broker.bootstrap
    missing, read_by_spark = (f"no-such-log-{uuid.uuid4().hex[:8]}-{n}" for n in (1, 2))

    code = coordinator_main(
        ["analyze", "history", "--bootstrap-servers", bootstrap, "--offsets-topic", missing,
         "--output", str(tmp_path / "history")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    assert err == (
        f"coordinator-server analyze: cannot read the log: topic {missing} does not exist at "
        f"{bootstrap}\n"
    )

    # Spark's own source, with no question asked before: its consumers subscribe to the
    # topic, and their metadata requests forbid creating it (the source's options say so),
    # so the read fails on the missing topic instead of reading a new, empty one.
    location = KafkaLogTopic(bootstrap, read_by_spark)
    frame = (
        spark.read.format("kafka")
        .options(**location.source_options())
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="UnknownTopicOrPartitionException"):
        frame.count()

    assert {missing, read_by_spark}.isdisjoint(asyncio.run(cluster_topics(bootstrap)))
