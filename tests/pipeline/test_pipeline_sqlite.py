"""The pipeline over the embedded SQLite log of a real server process: the data source, the
history, the audit against the live server (whose file is locked, so read through a
snapshot), the command line, the streaming reader and the benchmark; the session's start
(Spark's packages resolved once), and the history's rates over a hand-made log."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pipeline_checks import GROUPS, check_history, check_idle, final_offsets_of
from pipeline_scenario import (
    ExpectedHistory,
    produce_known_history,
    server_group_args,
    write_sqlite_log,
)
from server_process import ServerProcess

from coordinator_server.cli import main as coordinator_main
from coordinator_server.records import (
    GroupMemberValue,
    GroupMetadataValue,
    encode_record,
    new_group_metadata_record,
    new_offset_commit_record,
)
from coordinator_server.tools.pipeline import session
from coordinator_server.tools.pipeline.audit import run_audit
from coordinator_server.tools.pipeline.history import HistoryOptions, compute_history
from coordinator_server.tools.pipeline.kafka_source import kafka_source_package
from coordinator_server.tools.pipeline.logs import LogInUseError, SqliteLogFile, readable
from coordinator_server.tools.pipeline.packages import (
    RESOLVED_JARS_FILE,
    remember_resolved_jars,
    resolved_jars_file,
    with_resolved_jars,
)
from coordinator_server.tools.pipeline.session import read_log, read_log_stream
from coordinator_server.tools.pipeline.state import final_offsets

pytestmark = [pytest.mark.slow]

TOPIC = "orders"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ExpectedHistory, Path]]:
    data_dir = tmp_path_factory.mktemp("sqlite-log")
    with ServerProcess(server_group_args("--data-dir", str(data_dir))) as process:
        expected = asyncio.run(produce_known_history(process, TOPIC))
        yield process, expected, data_dir


def location_of(data_dir: Path) -> SqliteLogFile:
    return SqliteLogFile(str(data_dir / "coordinator.db"))


@pytest.mark.parametrize("in_driver", [True, False], ids=["in the driver", "by the data source"])
def test_a_running_servers_log_is_read_through_a_snapshot(
    spark: Any,
    served: tuple[ServerProcess, ExpectedHistory, Path],
    in_driver: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, expected, data_dir = served
    if not in_driver:
        monkeypatch.setattr(session, "READ_IN_DRIVER_BELOW_RECORDS", 0)
    with pytest.raises(LogInUseError):
        location_of(data_dir).end_offsets()
    with readable(location_of(data_dir)) as location:
        ends = location.end_offsets()
        log = read_log(spark, location)
        counts = {
            row.record_type: row["count"] for row in log.groupBy("record_type").count().collect()
        }
        assert sum(counts.values()) == sum(ends.values())
        commits = sum(len(rows) for rows in expected.commits.values())
        assert counts["offset_commit"] == commits
        # The group's creation (generation 0), then one record per generation: the
        # leader's assignments, or the group left empty.
        assert counts["group_metadata"] == 1 + len(expected.rebalances["orders-app"])
        assert final_offsets_of(final_offsets(log).collect()) == expected.final_offsets
        if not in_driver:
            # One Spark partition per log partition.
            assert log.rdd.getNumPartitions() == len(ends)


def test_a_small_log_read_in_the_driver_has_the_rows_the_data_source_reads(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "coordinator.db"
    asyncio.run(write_commits(db, range(25)))
    location = SqliteLogFile(str(db))
    assert (location.count_records(10), location.count_records(1_000)) == (10, 25)

    def rows(ends: dict[int, int] | None = None) -> list[Any]:
        read = read_log(spark, location, ends).collect()
        return sorted(read, key=lambda row: (row.log_partition, row.log_offset))

    in_driver, below = rows(), rows({0: 6, 1: 5})
    monkeypatch.setattr(session, "READ_IN_DRIVER_BELOW_RECORDS", 0)
    assert in_driver == rows()
    assert below == rows({0: 6, 1: 5})
    assert len(in_driver) == 25 and len(below) == 11


def test_history_finds_exactly_the_commits_regressions_and_rebalances(
    spark: Any, served: tuple[ServerProcess, ExpectedHistory, Path]
) -> None:
    _, expected, data_dir = served
    with readable(location_of(data_dir)) as location:
        log = read_log(spark, location).cache()
        history = compute_history(spark, log, HistoryOptions(idle_threshold_ms=3_600_000))
        check_history(history, expected)
        check_idle(history, set())
        two_hours_later = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000) + 7_200_000
        later = compute_history(
            spark, log, HistoryOptions(idle_threshold_ms=3_600_000, as_of_ms=two_hours_later)
        )
        check_idle(later, GROUPS)
        log.unpersist()


async def test_audit_of_the_live_server_finds_no_mismatch(
    spark: Any, served: tuple[ServerProcess, ExpectedHistory, Path], tmp_path: Path
) -> None:
    process, _, data_dir = served
    result = await asyncio.to_thread(
        run_audit, spark, location_of(data_dir), f"{process.host}:{process.port}", tmp_path
    )
    assert (result.mismatches, result.changed_during_audit, result.unreachable) == (0, 0, 0)
    assert (result.groups_in_log, result.offsets_in_log) == (2, 6)
    assert result.rows == []
    assert (tmp_path / "audit.json").exists()


@pytest.mark.timeout(300)
async def test_command_line_history_writes_partitioned_parquet_and_a_self_contained_report(
    spark: Any, served: tuple[ServerProcess, ExpectedHistory, Path], tmp_path: Path
) -> None:
    _, expected, data_dir = served
    output = tmp_path / "history"
    # The command as a user runs it: a process of its own, with a Spark session of its own.
    started = time.monotonic()
    completed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "coordinator_server", "analyze", "history",
         "--data-dir", str(data_dir), "--output", str(output), "--bucket", "10 seconds"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    print(f"analyze history on {data_dir}: {time.monotonic() - started:.1f} s")
    for table in ("commits", "commit_rate", "regressions", "rebalances", "rebalance_summary",
                  "idle_groups"):  # fmt: skip
        assert list((output / table).glob("**/*.parquet")), table
    # Event tables are partitioned by day.
    assert list((output / "commits").glob("date=*"))
    # The shuffles were sized to the log: one file a table (and day), where Spark's default
    # of 200 partitions wrote one for each of those partitions a row fell in.
    for directory in {path.parent for path in output.glob("**/*.parquet")}:
        assert len(list(directory.glob("*.parquet"))) == 1, directory
    assert spark.read.parquet(str(output / "commits")).count() == sum(
        len(rows) for rows in expected.commits.values()
    )
    page = (output / "report.html").read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', page)
    assert images == ["commits", "rebalances", "regressions"]
    # Self-contained: nothing is fetched from elsewhere.
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "orders-app" in page and "No lag" in page


async def test_command_line_audit_exits_zero_on_a_consistent_server(
    spark: Any,
    served: tuple[ServerProcess, ExpectedHistory, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    process, _, data_dir = served
    code = await asyncio.to_thread(
        coordinator_main,
        ["analyze", "audit", "--data-dir", str(data_dir), "--server",
         f"{process.host}:{process.port}"],
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 mismatches" in out


async def write_commits(path: Path, offsets: range) -> None:
    from coordinator_server.storage.sqlite import SqliteLog

    log = SqliteLog(path, 2)
    await log.start()
    try:
        for offset in offsets:
            record = new_offset_commit_record("g", "t", 0, offset, -1, "", 1_764_000_000_000)
            await log.append(offset % 2, [encode_record(record)])
    finally:
        await log.close()


def test_streaming_reads_only_what_is_new_since_the_last_run(spark: Any, tmp_path: Path) -> None:
    db = tmp_path / "coordinator.db"
    asyncio.run(write_commits(db, range(10)))
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"

    def run_once() -> int:
        query = (
            read_log_stream(spark, SqliteLogFile(str(db)))
            .writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .option("path", str(sink))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return sum(progress["numInputRows"] for progress in query.recentProgress)

    assert run_once() == 10
    asyncio.run(write_commits(db, range(10, 15)))
    assert run_once() == 5
    assert run_once() == 0
    offsets = sorted(row.committed_offset for row in spark.read.parquet(str(sink)).collect())
    assert offsets == list(range(15))


def test_benchmark_command_reports_rows_per_second(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = coordinator_main(["analyze", "bench", "--records", "20000", "--data-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "log: 20000 records in 8 partitions (SQLite)" in out
    assert re.search(r"read \+ decode: [0-9.]+ s, [0-9,]+ rows/s", out)
    assert re.search(r"read \+ decode \+ aggregate .* [0-9,]+ rows/s", out)


def test_the_spark_submit_entry_point_takes_the_same_arguments(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator_server.tools.pipeline.main import run

    assert run(["bench", "--records", "2000", "--data-dir", str(tmp_path)]) == 0
    assert "log: 2000 records" in capsys.readouterr().out


def generation(group: str, number: int, members: int) -> Any:
    value = GroupMetadataValue(
        "consumer", number, "range", "m0" if members else None, 0,
        tuple(
            GroupMemberValue(f"m{i}", None, "client", "/127.0.0.1", 30_000, 30_000, b"", b"")
            for i in range(members)
        ),
    )  # fmt: skip
    return new_group_metadata_record(group, value)


def test_rebalances_per_hour_is_over_the_groups_window_in_the_log_and_at_least_an_hour(
    spark: Any, tmp_path: Path
) -> None:
    hour = 3_600_000
    t0 = 1_764_000_000_000
    db = tmp_path / "coordinator.db"
    records = [
        # "burst": 4 rebalances within 15 ms, at the start of the log.
        *((generation("burst", g, 1), t0 + 5 * (g - 1)) for g in range(1, 5)),
        # "steady": created at t0 + 10 min, 6 rebalances over 3 hours.
        (generation("steady", 0, 0), t0 + 10 * 60_000),
        *((generation("steady", g, 2), t0 + 10 * 60_000 + (g - 1) * 36 * 60_000) for g in
          range(1, 7)),
    ]  # fmt: skip
    records.sort(key=lambda item: item[1])
    log_end = t0 + 10 * 60_000 + 3 * hour
    records.append((new_offset_commit_record("steady", "t", 0, 1, -1, "", log_end), log_end))
    asyncio.run(write_sqlite_log(db, records))
    log = read_log(spark, SqliteLogFile(str(db))).cache()
    history = compute_history(spark, log, HistoryOptions())
    summary = {row.group: row for row in history["rebalance_summary"].collect()}
    log.unpersist()

    # The burst's window runs from its first record to the log's last: 3 h 10 min. Over
    # 15 ms, (4 - 1) rebalances would be 720,000 an hour.
    burst = summary["burst"]
    assert burst.rebalances == 4
    assert burst.window_hours == pytest.approx(3 + 10 / 60)
    assert burst.rebalances_per_hour == pytest.approx(4 / (3 + 10 / 60))
    # "steady" lived 3 hours in the log: 6 rebalances, 2 an hour.
    steady = summary["steady"]
    assert (steady.rebalances, steady.window_hours) == (6, pytest.approx(3))
    assert steady.rebalances_per_hour == pytest.approx(2)


def test_a_rate_over_a_window_shorter_than_an_hour_is_counted_over_an_hour(
    spark: Any, tmp_path: Path
) -> None:
    t0 = 1_764_000_000_000
    db = tmp_path / "coordinator.db"
    # 4 rebalances within 15 ms, and nothing else in the log.
    asyncio.run(
        write_sqlite_log(db, [(generation("burst", g, 1), t0 + 5 * (g - 1)) for g in range(1, 5)])
    )
    log = read_log(spark, SqliteLogFile(str(db))).cache()
    (row,) = compute_history(spark, log, HistoryOptions())["rebalance_summary"].collect()
    log.unpersist()
    assert (row.rebalances, row.window_hours) == (4, pytest.approx(15 / 3_600_000))
    assert row.rebalances_per_hour == 4.0


def test_a_start_names_the_jars_an_earlier_resolution_of_the_same_settings_gave(
    spark: Any, tmp_path: Path
) -> None:
    # The session of these tests resolved Spark's Kafka source (or named the jars an
    # earlier run's resolution gave): its jars are remembered beside its Ivy cache.
    conf = {
        "spark.jars.packages": kafka_source_package(),
        "spark.jars.ivy": spark.sparkContext.getConf().get("spark.jars.ivy"),
    }
    file = tmp_path / RESOLVED_JARS_FILE
    assert with_resolved_jars(conf, file) == conf
    remember_resolved_jars(spark, conf, file)
    start = with_resolved_jars(conf, file)
    assert "spark.jars.packages" not in start
    jars = start["spark.jars"].split(",")
    assert any("spark-sql-kafka-0-10" in jar for jar in jars)
    assert any("kafka-clients" in jar for jar in jars)
    # Other settings are another resolution.
    other = {**conf, "spark.jars.repositories": "https://repo.example/maven"}
    assert with_resolved_jars(other, file) == other
    # A jar gone (Ivy's cache emptied): Spark resolves again.
    remembered = json.loads(file.read_text())
    for key in remembered:
        remembered[key].append((tmp_path / "gone.jar").as_uri())
    file.write_text(json.dumps(remembered))
    assert with_resolved_jars(conf, file) == conf
    assert resolved_jars_file(conf) == Path(conf["spark.jars.ivy"]) / RESOLVED_JARS_FILE
