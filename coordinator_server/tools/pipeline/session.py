"""The Spark session of the pipeline, and the log as a DataFrame.

A log in Kafka is read through Spark's own Kafka source (`kafka_source`), which the session
loads when started with `kafka_source=True`: Spark resolves the package from Maven Central
into its Ivy directory (`spark.jars.ivy`, default Ivy's own in the home directory) on the
first start; a local session's later starts name the jars it resolved to (`packages`) and
skip Ivy. The SQLite log is read by the `coordinator_log` data source (`source`), which
needs nothing more.

Run locally (`local[*]`, the default) the executors are Python processes of this same
interpreter, so `PYSPARK_PYTHON` is set to it unless already set, and Spark binds to
127.0.0.1 (`SPARK_LOCAL_IP`) so that a machine whose host name does not resolve can run
it. Under `spark-submit` or with `--master` pointing at a cluster, both are left to the
cluster's own settings.

A local session also starts the way a short batch job wants (`LOCAL_DEFAULTS`, each
overridden by the caller's own setting): no web UI (an HTTP server nobody looks at during
a run of seconds), and a driver JVM that compiles with C1 only. HotSpot's C2 compiler
spends several CPU seconds optimising Spark's start-up code, which runs once; on 2 cores
that alone is a third of a small log's analysis. The work that is heavy on a large log,
decoding, runs in the Python workers, not in the JVM.

The shuffles of a query over a small log are small: `fit_shuffle_partitions` sizes them to
the log (Spark's default of 200 partitions makes every aggregation of a 200-record log run
200 tasks), and runs a small log's queries without generated code.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from coordinator_server.tools.pipeline.class_archive import ArchivePlan, keep_archive, plan_archive
from coordinator_server.tools.pipeline.decode import SCHEMA
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic, kafka_source_conf
from coordinator_server.tools.pipeline.logs import LogLocation, SqliteLogFile
from coordinator_server.tools.pipeline.packages import (
    PACKAGES,
    remember_resolved_jars,
    user_cache_dir,
    with_resolved_jars,
)
from coordinator_server.tools.pipeline.source import FORMAT, CoordinatorLogDataSource, decode_log

__all__ = [
    "SparkSettings",
    "build_session",
    "fit_shuffle_partitions",
    "log_end_offsets",
    "read_log",
    "read_log_stream",
    "register",
    "source_options",
    "stop_session",
]

DEFAULT_MASTER: Final = "local[*]"
JAVA_OPTIONS: Final = "spark.driver.extraJavaOptions"
LOCAL_DEFAULTS: Final = {
    "spark.ui.enabled": "false",
    # C1 alone reserves 48 MB for compiled code, which a long session (a large log, a
    # notebook) fills; the compiler then stops and Spark runs interpreted.
    JAVA_OPTIONS: "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
}
SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"
# Records of the log per shuffle partition (a decoded record is a few hundred bytes: some
# tens of megabytes a partition, near Spark's advisory partition size), and at most
# Spark's own default.
RECORDS_PER_SHUFFLE_PARTITION: Final = 200_000
MAX_SHUFFLE_PARTITIONS: Final = 200
INTERPRETED_BELOW_RECORDS: Final = 100_000
# A SQLite log smaller than this is read and decoded in the driver and handed to Spark as
# one Arrow table: no Python data source to register and plan, no Python worker to start.
# The driver decodes 99,000 records in 1.9 s; a history of them took 39 s so and 44 s
# through the data source.
READ_IN_DRIVER_BELOW_RECORDS: Final = 100_000
INTERPRETED: Final = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # Adaptive execution runs each stage of a query as a job of its own, to plan the next
    # stage from what the last one wrote: a small log's shuffles are too small to re-plan,
    # and each job costs scheduling (a history was 64 jobs with it, 27 without).
    "spark.sql.adaptive.enabled": "false",
}


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = None
    app_name: str = "coordinator-server analyze"
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    shuffle_partitions: int | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    # Load Spark's Kafka source (for a log in Kafka). Only a session started here can: under
    # spark-submit, give it --packages (kafka_source.kafka_source_package()).
    kafka_source: bool = False
    # Start a local driver JVM from its class archive (class_archive), made by the first
    # start: only for a session its starter ends with `stop_session`, which keeps the archive.
    class_archive: bool = False


def _under_spark_submit() -> bool:
    # spark-submit starts the Python driver with the address of the JVM it already runs.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: SparkSettings | None = None) -> SparkSession:
    """The session (an existing one is reused). The log's data source is registered when
    a log is first read through it (`register`): registering costs a fresh JVM about 2 s,
    which a small SQLite log, read in the driver, never spends."""
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
    local = master is not None and _is_local(master) and not _under_spark_submit()
    if local:
        conf.update(LOCAL_DEFAULTS)
    if settings.driver_memory:
        conf["spark.driver.memory"] = settings.driver_memory
    if settings.executor_memory:
        conf["spark.executor.memory"] = settings.executor_memory
    if settings.executor_cores:
        conf["spark.executor.cores"] = str(settings.executor_cores)
    if settings.shuffle_partitions:
        conf[SHUFFLE_PARTITIONS] = str(settings.shuffle_partitions)
    conf.update(settings.conf)
    if settings.kafka_source:
        conf = kafka_source_conf(conf)
    # A session starts here unless one runs already (then getOrCreate returns it as it is).
    starts = SparkContext._active_spark_context is None
    launch = with_resolved_jars(conf) if local else conf
    plan = None
    if starts and local and settings.class_archive and JAVA_OPTIONS not in settings.conf:
        plan = plan_archive(launch, user_cache_dir())
        if plan is not None:
            launch[JAVA_OPTIONS] = f"{launch.get(JAVA_OPTIONS, '')} {plan.java_options}".strip()
    for key, value in launch.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if plan is not None:
        _archive_plans[spark] = plan
    if starts and local and launch.get(PACKAGES):
        remember_resolved_jars(spark, conf)
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop a session this process started; one started with `class_archive` also ends its
    JVM, which keeps the class archive it wrote for the next start."""
    gateway = SparkContext._gateway
    spark.stop()
    keep_archive(_archive_plans.pop(spark, None), gateway)


def _is_local(master: str) -> bool:
    # local, local[N], local[*], local[N,F]: one JVM on this machine (not local-cluster).
    return re.fullmatch(r"local(\[[^]]*\])?", master) is not None


def fit_shuffle_partitions(spark: SparkSession, records: int) -> int:
    """Size the session's shuffles to a log of `records` records (at least one partition,
    one per `RECORDS_PER_SHUFFLE_PARTITION`, at most Spark's default), unless its settings
    name a number, and run the queries of a small log without generated code. Returns the
    number of partitions in force. Call it before the queries are built: a
    cached DataFrame keeps the partitioning it was planned with."""
    settings = spark.sparkContext.getConf()
    if records < INTERPRETED_BELOW_RECORDS:
        # Compiling each query's generated code (Janino) costs more than running a few
        # thousand rows through the interpreted operators; adaptive execution re-plans
        # shuffles too small to gain from it.
        for name, value in INTERPRETED.items():
            if not settings.contains(name):
                spark.conf.set(name, value)
    if settings.contains(SHUFFLE_PARTITIONS):
        return int(spark.conf.get(SHUFFLE_PARTITIONS) or MAX_SHUFFLE_PARTITIONS)
    partitions = min(
        max(1, math.ceil(records / RECORDS_PER_SHUFFLE_PARTITION)), MAX_SHUFFLE_PARTITIONS
    )
    spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))
    return partitions


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()
_archive_plans: weakref.WeakKeyDictionary[SparkSession, ArchivePlan] = weakref.WeakKeyDictionary()


def register(spark: SparkSession) -> None:
    """Make `format("coordinator_log")` known to `spark` (once: Spark warns on each
    registration after the first)."""
    if spark not in _registered:
        spark.dataSource.register(CoordinatorLogDataSource)
        _registered.add(spark)


def source_options(location: LogLocation) -> dict[str, str]:
    """The options of the source that reads `location`: Spark's Kafka source, or the
    `coordinator_log` data source."""
    if isinstance(location, KafkaLogTopic):
        return location.source_options()
    if isinstance(location, SqliteLogFile):
        return {"path": location.path}
    raise TypeError(f"unknown log location {location!r}")


def log_end_offsets(spark: SparkSession, location: LogLocation) -> dict[int, int]:
    """Each log partition's end now (the offset its next record will get)."""
    if isinstance(location, KafkaLogTopic):
        return location.end_offsets(spark)
    if isinstance(location, SqliteLogFile):
        return location.end_offsets()
    raise TypeError(f"unknown log location {location!r}")


def read_log(
    spark: SparkSession, location: LogLocation, end_offsets: Mapping[int, int] | None = None
) -> DataFrame:
    """The log as a DataFrame of `decode.SCHEMA`, up to `end_offsets` when given, else up
    to each partition's end: a SQLite log of fewer than `READ_IN_DRIVER_BELOW_RECORDS`
    records is read and decoded here at once (its end: now), a larger one, or a log in
    Kafka, by Spark's tasks, one Spark partition per log partition (its end: when a query
    runs)."""
    if isinstance(location, KafkaLogTopic):
        return location.read(spark, end_offsets)
    if isinstance(location, SqliteLogFile) and (
        location.count_records(READ_IN_DRIVER_BELOW_RECORDS) < READ_IN_DRIVER_BELOW_RECORDS
    ):
        ends = dict(end_offsets) if end_offsets is not None else location.end_offsets()
        return spark.createDataFrame(decode_log(location, ends), schema=SCHEMA)
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
    """The log as a streaming DataFrame (use with a checkpoint location): its offsets are
    each log partition's next offset, so a query with a checkpoint reads, on each run, only
    what was appended since the last one."""
    if isinstance(location, KafkaLogTopic):
        return location.read_stream(spark, starting_offsets)
    register(spark)
    return (
        spark.readStream.format(FORMAT)
        .options(**source_options(location))
        .option("startingOffsets", starting_offsets)
        .load()
    )
