"""`coordinator-server analyze`: the pipeline's command line.

    coordinator-server analyze audit   (--bootstrap-servers B | --data-dir D) --server H:P
    coordinator-server analyze history (--bootstrap-servers B | --data-dir D) --output DIR
    coordinator-server analyze bench   --records 1000000 [--bootstrap-servers B]

Every sub-command takes the usual Spark settings (`--master`, `--conf k=v`, memory and
cores); without `--master` it runs on `local[*]`, or on what `spark-submit` says. A log in
Kafka is read through Spark's own Kafka source, which the session loads for it (resolved
from Maven Central on a machine's first use). PySpark is imported only when a sub-command
runs, so the rest of the program never needs it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from coordinator_client import ClientSecurity
    from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = ["add_parser", "main"]

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
# The log could not be read (its cluster does not answer, refuses us, lacks the topic):
# apart from a mismatch, so that a script can tell "inconsistent" from "could not look".
EXIT_UNREADABLE = 3
BENCH_TOPIC = "coordinator-analyze-bench"


def _spark_options() -> argparse.ArgumentParser:
    spark = argparse.ArgumentParser(add_help=False)
    group = spark.add_argument_group("Spark")
    group.add_argument(
        "--master", help="Spark master URL (default local[*], or what spark-submit sets)"
    )
    group.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. --conf spark.executor.instances=4",
    )
    group.add_argument("--driver-memory", help="spark.driver.memory, e.g. 4g")
    group.add_argument("--executor-memory", help="spark.executor.memory, e.g. 8g")
    group.add_argument("--executor-cores", type=int, help="spark.executor.cores")
    group.add_argument(
        "--shuffle-partitions",
        type=int,
        help="spark.sql.shuffle.partitions (default: one per 200,000 records of the log, at "
        "most 200)",
    )
    group.add_argument("--app-name", default="coordinator-server analyze", help="Spark app name")
    return spark


def _log_options() -> argparse.ArgumentParser:
    from coordinator_server.tools.kafka_options import add_kafka_security_options

    log = argparse.ArgumentParser(add_help=False)
    group = log.add_argument_group("the coordinator's log (one of)")
    group.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers of the cluster holding the log topic"
    )
    group.add_argument(
        "--offsets-topic", default="__coordinator_offsets", help="the log's Kafka topic"
    )
    group.add_argument(
        "--data-dir",
        type=Path,
        help="the server's --data-dir (the embedded SQLite log; a running server's is copied)",
    )
    # The log's cluster and the data cluster (history's lag) are reached the same way.
    add_kafka_security_options(log)
    return log


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `analyze` and its sub-commands on the `coordinator-server` parser."""
    analyze = commands.add_parser(
        "analyze",
        help="analytics and audit of the log on Spark (the pipeline extra)",
        description="Analytics and audit of the coordinator's log on Spark. Needs the "
        "`pipeline` extra (pip install 'coordinator-server[pipeline]').",
    )
    actions = analyze.add_subparsers(dest="analyze_command", required=True, metavar="COMMAND")
    spark, log = _spark_options(), _log_options()

    audit = actions.add_parser(
        "audit",
        parents=[log, spark],
        help="compare the log's final state with a live server; exit 1 on any mismatch",
    )
    audit.add_argument(
        "--server", required=True, metavar="HOST:PORT", help="the live coordinator-server(s)"
    )
    audit.add_argument("--output", type=Path, help="save the differences here")
    audit.add_argument(
        "--command-config",
        metavar="FILE",
        help="a properties file of Kafka's client security settings (security.protocol, "
        "sasl.*, ssl.*) for the connections to the live server(s), as Kafka's tools take it",
    )

    history = actions.add_parser(
        "history",
        parents=[log, spark],
        help="commits, regressions, rebalances, idle groups and lag, as Parquet and HTML",
    )
    history.add_argument(
        "--output",
        required=True,
        help="where the Parquet tables go: a directory, or a URI Spark writes (hdfs://...)",
    )
    history.add_argument(
        "--report",
        type=Path,
        help="the HTML report, a local file (default OUTPUT/report.html; required when "
        "OUTPUT is a URI)",
    )
    history.add_argument(
        "--bucket", default="1 minute", help="time bucket of the commit rate (default 1 minute)"
    )
    history.add_argument(
        "--idle-minutes",
        type=float,
        default=60.0,
        help="a group without a commit for longer is idle (default 60)",
    )
    history.add_argument(
        "--as-of", help="'now' for idleness and lag, ISO 8601 (default: the time of the run)"
    )
    history.add_argument(
        "--kafka-bootstrap-servers", help="the data cluster, for consumer lag (log-end offsets)"
    )
    history.add_argument(
        "--lag-points",
        type=int,
        default=12,
        help="points in time of the lag history (0: current lag only; default 12)",
    )

    bench = actions.add_parser(
        "bench",
        parents=[spark],
        help="rows per second over a generated log (SQLite, or a Kafka topic)",
    )
    bench.add_argument("--records", type=int, default=1_000_000, help="log size (default 1e6)")
    bench.add_argument("--groups", type=int, default=1_000, help="groups (default 1000)")
    bench.add_argument(
        "--data-dir",
        type=Path,
        help="where to write the SQLite log (kept, and reused by the next run); default: a "
        "temporary directory",
    )
    bench.add_argument(
        "--bootstrap-servers",
        help="write the log to a topic of this Kafka cluster instead, and read it through "
        "Spark's Kafka source",
    )
    bench.add_argument(
        "--topic",
        default=BENCH_TOPIC,
        help=f"the Kafka topic of the log (default {BENCH_TOPIC}; created, kept and reused "
        "by the next run with as many records; one holding another count is refused)",
    )
    from coordinator_server.tools.kafka_options import add_kafka_security_options

    add_kafka_security_options(bench)


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf wants KEY=VALUE, not {pair!r}")
        conf[key.strip()] = value
    return conf


def location_of(args: argparse.Namespace, security: KafkaSecurity) -> Any:
    """The log the options name: a Kafka topic, read through Spark's Kafka source with the
    security settings as its `kafka.*` options, or the SQLite file."""
    from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic
    from coordinator_server.tools.pipeline.logs import SqliteLogFile, sqlite_file

    if bool(args.bootstrap_servers) == bool(args.data_dir):
        raise ValueError("give exactly one of --bootstrap-servers (Kafka log) or --data-dir")
    if args.bootstrap_servers:
        return KafkaLogTopic(
            args.bootstrap_servers, args.offsets_topic, options=security.spark_options()
        )
    return SqliteLogFile(str(sqlite_file(args.data_dir)))


def kafka_security(args: argparse.Namespace) -> KafkaSecurity:
    from coordinator_server.tools.kafka_options import kafka_security_from_args

    return kafka_security_from_args(args)


def _as_of_ms(text: str | None) -> int | None:
    if text is None:
        return None
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        from pyspark import SparkContext

        from coordinator_server.storage.kafka.security import KafkaSecurityError
        from coordinator_server.tools.pipeline.logs import LogInUseError, LogUnreadableError
        from coordinator_server.tools.pipeline.session import (
            SparkSettings,
            build_session,
            stop_session,
        )
    except ImportError as error:
        print(
            f"coordinator-server analyze: needs the pipeline extra ({error}); "
            "pip install 'coordinator-server[pipeline]'",
            file=err,
        )
        return EXIT_USAGE
    bench = args.analyze_command == "bench"
    try:
        security = kafka_security(args)
        coordinator_security = _coordinator_security(args)
        if bench and args.bootstrap_servers and args.data_dir:
            raise ValueError("give --bootstrap-servers (a Kafka log) or --data-dir, not both")
        location = None if bench else location_of(args, security)
        settings = SparkSettings(
            master=args.master,
            app_name=args.app_name,
            driver_memory=args.driver_memory,
            executor_memory=args.executor_memory,
            executor_cores=args.executor_cores,
            shuffle_partitions=args.shuffle_partitions,
            conf=_conf(args.conf),
            kafka_source=bool(args.bootstrap_servers),
            class_archive=True,
        )
    except (ValueError, KafkaSecurityError) as error:
        print(f"coordinator-server analyze: {error}", file=err)
        return EXIT_USAGE
    # A session already running in this process (a notebook, a test) is used and left
    # running, with its settings; one started here is stopped here.
    owned = SparkContext._active_spark_context is None
    if args.analyze_command == "history":
        from coordinator_server.tools.pipeline.report import prepare_plotting

        prepare_plotting()
    spark = build_session(settings)
    try:
        if owned and location is not None:
            _fit_shuffles(spark, location)
        if args.analyze_command == "audit":
            return _audit(spark, location, args, out, coordinator_security)
        if args.analyze_command == "history":
            return _history(spark, location, args, out, security.properties())
        return _bench(spark, args, out, err, security)
    except (
        KafkaSecurityError,
        LogUnreadableError,
        LogInUseError,
        FileNotFoundError,
    ) as error:
        # What to fix, in one line, not a stack trace (the password is never in it).
        print(f"coordinator-server analyze: cannot read the log: {error}", file=err)
        return EXIT_UNREADABLE
    finally:
        if owned:
            stop_session(spark)


def _fit_shuffles(spark: Any, location: Any) -> None:
    """Size the session's shuffles to the log (unless --shuffle-partitions or --conf named a
    number): Spark's 200 partitions would make a small log's analysis run thousands of
    tasks."""
    from coordinator_server.tools.pipeline.logs import readable
    from coordinator_server.tools.pipeline.session import fit_shuffle_partitions, log_end_offsets

    with readable(location) as readable_location:
        records = sum(log_end_offsets(spark, readable_location).values())
    fit_shuffle_partitions(spark, records)


def _coordinator_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The connections to the live server(s), as `--command-config` secures them (audit)."""
    from coordinator_client import ClientSecurity, ClientSecurityError, read_properties_file

    path = getattr(args, "command_config", None)
    if path is None:
        return None
    try:
        return ClientSecurity.from_properties(read_properties_file(path))
    except ClientSecurityError as error:
        raise ValueError(f"--command-config {path}: {error}") from None


def _audit(
    spark: Any,
    location: Any,
    args: argparse.Namespace,
    out: TextIO,
    coordinator_security: ClientSecurity | None,
) -> int:
    from coordinator_server.tools.pipeline.audit import format_result, run_audit

    options = {} if coordinator_security is None else {"security": coordinator_security}
    result = run_audit(spark, location, args.server, args.output, client_options=options)
    print(format_result(result), file=out)
    if args.output is not None:
        print(f"saved: {args.output / 'audit.json'}, {args.output / 'audit_differences'}", file=out)
    return EXIT_OK if result.ok else EXIT_MISMATCH


def _history(
    spark: Any,
    location: Any,
    args: argparse.Namespace,
    out: TextIO,
    kafka_properties: dict[str, str],
) -> int:
    from coordinator_server.tools.pipeline.history import (
        HistoryOptions,
        compute_history,
        write_history,
    )
    from coordinator_server.tools.pipeline.logs import readable
    from coordinator_server.tools.pipeline.report import write_report
    from coordinator_server.tools.pipeline.session import read_log

    options = HistoryOptions(
        bucket=args.bucket,
        idle_threshold_ms=int(args.idle_minutes * 60_000),
        as_of_ms=_as_of_ms(args.as_of),
        kafka_bootstrap_servers=args.kafka_bootstrap_servers,
        kafka_options=kafka_properties,
        lag_points=args.lag_points,
    )
    if args.report is None and "://" in args.output:
        print("coordinator-server analyze: give --report when --output is a URI", file=out)
        return EXIT_USAGE
    report_path = args.report or Path(args.output) / "report.html"
    with readable(location) as readable_location:
        log = read_log(spark, readable_location).cache()
        history = compute_history(spark, log, options)
        # The tables are written while the report is made: on a small log both are mostly
        # the driver planning queries and Spark scheduling them, which overlap.
        with concurrent.futures.ThreadPoolExecutor(1, "write history") as pool:
            writing = pool.submit(write_history, history, args.output)
            write_report(
                history, report_path, "coordinator-server: log history", location.describe()
            )
            written = writing.result()
        history.unpersist()
        log.unpersist()
    for name, path in written.items():
        print(f"{name}: {path}", file=out)
    print(f"report: {report_path}", file=out)
    return EXIT_OK


def _bench(
    spark: Any, args: argparse.Namespace, out: TextIO, err: TextIO, security: KafkaSecurity
) -> int:
    import os
    import platform

    from coordinator_server.tools.pipeline.bench import KafkaBenchLog, run_bench

    kafka = None
    if args.bootstrap_servers:
        kafka = KafkaBenchLog(args.bootstrap_servers, args.topic, security)
    try:
        result = run_bench(spark, args.records, args.data_dir, args.groups, kafka=kafka)
    except ValueError as error:
        print(f"coordinator-server analyze: {error}", file=err)
        return EXIT_USAGE
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, Spark {spark.version}, master {spark.sparkContext.master}",
        file=out,
    )
    for line in result.lines():
        print(line, file=out)
    return EXIT_OK
