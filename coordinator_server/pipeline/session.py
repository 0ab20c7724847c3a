"""The Spark session of the pipeline, and the log as a DataFrame.

Run locally (`local[*]`, the default) the executors are Python processes of this same
interpreter, so `PYSPARK_PYTHON` is set to it unless already set, and Spark binds to
127.0.0.1 (`SPARK_LOCAL_IP`) so that a machine whose host name does not resolve can run
it. Under `spark-submit` or with `--master` pointing at a cluster, both are left to the
cluster's own settings.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from pyspark.sql import DataFrame, SparkSession

from coordinator_server.pipeline.logs import KafkaLog, LogLocation, SqliteLogFile
from coordinator_server.pipeline.source import FORMAT, CoordinatorLogDataSource

__all__ = ["SparkSettings", "build_session", "read_log", "read_log_stream", "source_options"]

DEFAULT_MASTER: Final = "local[*]"


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = None
    app_name: str = "coordinator-server analyze"
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    shuffle_partitions: int | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


def _under_spark_submit() -> bool:
    # spark-submit starts the Python driver with the address of the JVM it already runs.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: SparkSettings | None = None) -> SparkSession:
    """The session (an existing one is reused), with the log's data source registered."""
    settings = settings or SparkSettings()
    master = settings.master
    if master is None and not _under_spark_submit():
        master = DEFAULT_MASTER
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(settings.app_name)
    if master is not None:
        builder = builder.master(master)
    conf: dict[str, str] = {"spark.sql.session.timeZone": "UTC"}
    if settings.driver_memory:
        conf["spark.driver.memory"] = settings.driver_memory
    if settings.executor_memory:
        conf["spark.executor.memory"] = settings.executor_memory
    if settings.executor_cores:
        conf["spark.executor.cores"] = str(settings.executor_cores)
    if settings.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
    conf.update(settings.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Make `format("coordinator_log")` known to `spark` (once: Spark warns on each
    registration after the first)."""
    if spark not in _registered:
        spark.dataSource.register(CoordinatorLogDataSource)
        _registered.add(spark)


def source_options(location: LogLocation) -> dict[str, str]:
    if isinstance(location, KafkaLog):
        options = {
            "bootstrapServers": location.bootstrap_servers,
            "topic": location.topic,
            "timeoutMs": str(location.timeout_ms),
        }
        options.update({f"kafka.{k}": v for k, v in location.kafka_options.items()})
        return options
    if isinstance(location, SqliteLogFile):
        return {"path": location.path}
    raise TypeError(f"unknown log location {location!r}")


def read_log(
    spark: SparkSession, location: LogLocation, end_offsets: Mapping[int, int] | None = None
) -> DataFrame:
    """The log as a DataFrame of `decode.SCHEMA`: up to `end_offsets` when given, else up
    to each partition's end when the read is planned."""
    register(spark)
    reader = spark.read.format(FORMAT).options(**source_options(location))
    if end_offsets is not None:
        reader = reader.option(
            "endOffsets", json.dumps({str(p): o for p, o in end_offsets.items()})
        )
    return reader.load()


def read_log_stream(
    spark: SparkSession, location: LogLocation, starting_offsets: str = "earliest"
) -> DataFrame:
    """The log as a streaming DataFrame (use with a checkpoint location)."""
    register(spark)
    return (
        spark.readStream.format(FORMAT)
        .options(**source_options(location))
        .option("startingOffsets", starting_offsets)
        .load()
    )
