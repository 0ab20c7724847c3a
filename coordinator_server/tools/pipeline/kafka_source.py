"""The coordinator's log in a Kafka topic, read through Spark's own Kafka source.

Spark's source (`spark-sql-kafka-0-10`, the `kafka` format) reads the records in its JVM,
one Spark partition per topic partition; the executors' Python workers get the keys and
values in Arrow batches (`mapInArrow`) and decode them with `decode.decode_arrow_batches`.
The package is the one built for the running PySpark (`kafka_source_package`); Spark
resolves it from Maven Central into its Ivy directory (`spark.jars.ivy`) when the session
starts (`session.build_session(..., kafka_source=True)`; under `spark-submit`, its
`--packages`), and a local session's later starts name the jars that resolution gave
(`packages`).

How the source is set, and why:

- `kafka.isolation.level=read_committed`: a record of an aborted transaction never became
  state (Kafka's own loader discards aborted transactional offset commits), so it must not
  count here either; the end of a read is then the last stable offset. The coordinator
  writes no transactions yet, so today this reads exactly what `read_uncommitted` would.
- `failOnDataLoss=true` (Spark's default, set so nobody changes it by accident): the gaps
  compaction leaves, and the offsets of aborted records and transaction markers, are not
  data loss to the source: it skips them. What fails the read is a planned offset that is
  gone: records deleted by retention or DeleteRecords, or the topic deleted and created
  again. Then the log the read would replay is not the log the server loaded, and the
  analysis would be wrong without saying so.
- `includeHeaders=false`: the coordinator's records carry none.
- Records without a key are not the coordinator's (its loader skips them): filtered out
  before they reach Python.

Before a read, the driver asks the cluster for the topic's partitions with Kafka's Java
consumer, on the same settings the source uses: a cluster that does not answer, refuses our
credentials or lacks the topic is then one clear error rather than a Spark job that retries
for minutes. The same consumer gives the end offsets (`end_offsets`) the audit notes before
it asks the server.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator_server.storage.kafka.security import KafkaSecurityError
from coordinator_server.tools.pipeline.decode import SCHEMA, decode_arrow_batches
from coordinator_server.tools.pipeline.logs import (
    DEFAULT_OFFSETS_TOPIC,
    LogLocation,
    LogUnreadableError,
    TopicNotFoundError,
)

__all__ = [
    "KAFKA_SOURCE_ARTIFACT",
    "KafkaLogTopic",
    "kafka_source_conf",
    "kafka_source_package",
]

# Spark 4 is built for Scala 2.13 only.
KAFKA_SOURCE_ARTIFACT: Final = "org.apache.spark:spark-sql-kafka-0-10_2.13"
# Dependencies of the source that Spark itself ships, at the same versions (the source is
# Spark's own version): a second copy would be a download (50 of the 64 MB) and, on a
# cluster, a copy to every executor.
PROVIDED_BY_SPARK: Final = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
    "org.scala-lang.modules:scala-parallel-collections_2.13",
)
SOURCE_DEFAULTS: Final = {
    "kafka.isolation.level": "read_committed",
    # Reading a topic must never create it (Kafka's consumers may, by default, when the
    # broker allows it): the driver's consumer and Spark's alike.
    "kafka.allow.auto.create.topics": "false",
    "failOnDataLoss": "true",
    "includeHeaders": "false",
}
CLIENT_ID: Final = "coordinator-server-analyze"
BYTES_DESERIALIZER: Final = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
KAFKA_OPTION_PREFIX: Final = "kafka."


def kafka_source_package(spark_version: str | None = None) -> str:
    """The Maven coordinate of Spark's Kafka source for `spark_version` (default: the
    running PySpark's)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return f"{KAFKA_SOURCE_ARTIFACT}:{spark_version}"


def _merged(listed: str | None, *items: str) -> str:
    present = [item.strip() for item in (listed or "").split(",") if item.strip()]
    return ",".join(present + [item for item in items if item not in present])


def kafka_source_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with Spark's Kafka source added to `spark.jars.packages` (unless a version of
    it is listed already) and what Spark ships to `spark.jars.excludes`."""
    merged = dict(conf)
    packages = conf.get("spark.jars.packages")
    if KAFKA_SOURCE_ARTIFACT + ":" not in (packages or ""):
        merged["spark.jars.packages"] = _merged(packages, kafka_source_package())
    merged["spark.jars.excludes"] = _merged(conf.get("spark.jars.excludes"), *PROVIDED_BY_SPARK)
    return merged


@dataclass(frozen=True)
class KafkaLogTopic(LogLocation):
    """The log as a Kafka topic. `options`: more options of Spark's Kafka source, such as
    `KafkaSecurity.spark_options()` (`kafka.security.protocol`, `kafka.sasl.jaas.config`,
    ...); they may hold a password, so they stay out of the repr. `timeout_ms` bounds the
    driver's questions to the cluster (partitions, end offsets)."""

    bootstrap_servers: str
    topic: str = DEFAULT_OFFSETS_TOPIC
    options: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_ms: int = 30_000

    def describe(self) -> str:
        return f"kafka topic {self.topic} at {self.bootstrap_servers}"

    def source_options(self) -> dict[str, str]:
        """The options of Spark's Kafka source for this topic (without the offsets)."""
        return {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": self.topic,
            **SOURCE_DEFAULTS,
            **self.options,
        }

    def partitions(self, spark: SparkSession) -> list[int]:
        """The topic's partitions. Raises TopicNotFoundError, KafkaSecurityError (refused
        credentials, an untrusted certificate) or LogUnreadableError (no answer in time,
        or no Kafka source in the session)."""
        with self._consumer(spark) as (consumer, jvm):
            return self._partitions_with(consumer, jvm)

    def end_offsets(self, spark: SparkSession) -> dict[int, int]:
        """Each partition's end: the offset the next record will get, or the last stable
        offset when a transaction is open (what a read of the source goes up to)."""
        with self._consumer(spark) as (consumer, jvm):
            partitions = self._partitions_with(consumer, jvm)
            topic_partition = jvm.org.apache.kafka.common.TopicPartition
            topic_partitions = jvm.java.util.ArrayList()
            for partition in partitions:
                topic_partitions.add(topic_partition(self.topic, partition))
            ends = self._call(
                lambda: consumer.endOffsets(topic_partitions, self._timeout(jvm)), "end offsets"
            )
            return {tp.partition(): int(ends.get(tp)) for tp in topic_partitions}

    def read(self, spark: SparkSession, end_offsets: Mapping[int, int] | None = None) -> DataFrame:
        """The log from each partition's start up to `end_offsets` (a partition missing
        there: its end), else up to each partition's end when a query runs."""
        partitions = self.partitions(spark)
        ending = "latest"
        if end_offsets is not None:
            # Spark wants every partition named; -1 is its "latest".
            ending = json.dumps(
                {self.topic: {str(p): int(end_offsets.get(p, -1)) for p in partitions}}
            )
        frame = (
            spark.read.format("kafka")
            .options(**self.source_options())
            .option("startingOffsets", "earliest")
            .option("endingOffsets", ending)
            .load()
        )
        return _decoded(frame)

    def read_stream(self, spark: SparkSession, starting_offsets: str = "earliest") -> DataFrame:
        """The log as a stream; with a checkpoint, each run reads what was appended since
        the last one (`starting_offsets` is for a query's first run: earliest or latest)."""
        self.partitions(spark)
        frame = (
            spark.readStream.format("kafka")
            .options(**self.source_options())
            .option("startingOffsets", starting_offsets)
            .load()
        )
        return _decoded(frame)

    # The driver's Java consumer.

    def _consumer_properties(self) -> dict[str, str]:
        properties = {
            name[len(KAFKA_OPTION_PREFIX) :]: value
            for name, value in self.source_options().items()
            if name.startswith(KAFKA_OPTION_PREFIX)
        }
        properties.update(
            {
                "client.id": CLIENT_ID,
                "key.deserializer": BYTES_DESERIALIZER,
                "value.deserializer": BYTES_DESERIALIZER,
                "enable.auto.commit": "false",
            }
        )
        return properties

    @contextlib.contextmanager
    def _consumer(self, spark: SparkSession) -> Iterator[tuple[Any, Any]]:
        from py4j.java_gateway import JavaClass

        jvm: Any = spark.sparkContext._jvm
        consumer_class = jvm.org.apache.kafka.clients.consumer.KafkaConsumer
        if not isinstance(consumer_class, JavaClass):
            raise LogUnreadableError(
                "this Spark session has no Kafka source (spark-sql-kafka-0-10): start it "
                "with coordinator_server.tools.pipeline.session.build_session(settings, "
                f"kafka_source=True), or give spark-submit --packages {kafka_source_package()}"
            )
        properties = jvm.java.util.Properties()
        for name, value in self._consumer_properties().items():
            properties.setProperty(name, value)
        consumer = self._call(lambda: consumer_class(properties), "a connection")
        try:
            yield consumer, jvm
        finally:
            with contextlib.suppress(Exception):
                consumer.close(jvm.java.time.Duration.ofMillis(self.timeout_ms))

    def _timeout(self, jvm: Any) -> Any:
        return jvm.java.time.Duration.ofMillis(self.timeout_ms)

    def _partitions_with(self, consumer: Any, jvm: Any) -> list[int]:
        infos = self._call(
            lambda: consumer.partitionsFor(self.topic, self._timeout(jvm)), "the partitions"
        )
        partitions = sorted(int(info.partition()) for info in (infos or ()))
        if not partitions:
            raise TopicNotFoundError(
                f"topic {self.topic} does not exist at {self.bootstrap_servers}"
            )
        return partitions

    def _call(self, call: Any, what: str) -> Any:
        """`call()`, with Kafka's Java exceptions turned into ours, said in one line."""
        from py4j.protocol import Py4JJavaError

        try:
            return call()
        except Py4JJavaError as error:
            raise self._error(error.java_exception, what) from None

    def _error(self, exception: Any, what: str) -> Exception:
        chain: list[tuple[str, str]] = []
        while exception is not None and len(chain) < 8:
            chain.append((str(exception.getClass().getName()), str(exception.getMessage())))
            exception = exception.getCause()
        names = [name.rsplit(".", 1)[-1] for name, _ in chain]
        reasons = " / ".join(dict.fromkeys(message for _, message in chain if message != "None"))
        where = f"Kafka at {self.bootstrap_servers}"
        refused = ("AuthenticationException", "SSLHandshakeException")
        if any(name.endswith(refused) for name in names):
            return KafkaSecurityError(f"{where} and we do not trust each other: {reasons}")
        if any(name.endswith("AuthorizationException") for name in names):
            return KafkaSecurityError(f"{where} does not let us read topic {self.topic}: {reasons}")
        if names and names[0] == "TimeoutException":
            return LogUnreadableError(
                f"{where} did not answer about {what} of topic {self.topic} within "
                f"{self.timeout_ms} ms (is it up, and is the security protocol the "
                f"listener's?): {reasons}"
            )
        return LogUnreadableError(f"{where}: cannot get {what} of topic {self.topic}: {reasons}")


def _decoded(frame: DataFrame) -> DataFrame:
    """The source's rows as rows of `decode.SCHEMA`, decoded in Arrow batches."""
    records = frame.where(F.col("key").isNotNull()).select(
        F.col("partition").alias("log_partition"),
        F.col("offset").alias("log_offset"),
        F.unix_millis("timestamp").alias("log_timestamp_ms"),
        "key",
        "value",
    )
    return records.mapInArrow(decode_arrow_batches, SCHEMA)
