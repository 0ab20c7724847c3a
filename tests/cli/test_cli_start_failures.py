"""Each common start failure, on the real `coordinator-server serve` process: one ERROR line
that says what to fix, exit status 1, no trace; and a healthy start in a handful of lines,
its ready line shown whatever the log level."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_broker import KafkaBroker
from server_process import ServerProcess

pytestmark = pytest.mark.timeout(120)


def serve(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--metrics-port", "-1", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def the_one_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        error = the_one_error(serve("--port", str(port), "--data-dir", str(tmp_path)))
    assert f"cannot listen on 127.0.0.1:{port}" in error and "--port" in error, error


def test_a_data_directory_another_server_holds(tmp_path: Path) -> None:
    with ServerProcess(["--port", "0", "--data-dir", str(tmp_path)]):
        error = the_one_error(serve("--port", "0", "--data-dir", str(tmp_path)))
    assert "in use by another process" in error and "--data-dir" in error, error


def test_kafka_that_refuses() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    # Nothing listens there now: every connection is refused.
    error = the_one_error(serve("--port", "0", "--bootstrap-servers", f"127.0.0.1:{port}"))
    assert f"cannot reach the Kafka cluster at 127.0.0.1:{port}" in error, error
    assert "--bootstrap-servers" in error, error


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--port", "abc"], "--port 'abc'"),
        (["--port", "70000"], "--port '70000'"),
        (["--max-connections", "0"], "--max-connections '0'"),
    ],
)
def test_an_invalid_value(args: list[str], named: str) -> None:
    result = serve(*args)
    error = the_one_error(result)
    assert named in error and "invalid settings" in error, error
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_the_commit_check_without_a_kafka_cluster() -> None:
    """The embedded log has no Kafka cluster to check committed partitions against: the
    start is refused, rather than every offset taken unchecked."""
    result = serve("--port", "0", "--offset-commit-check-partitions", "on")
    error = the_one_error(result)
    assert "offset-commit-check-partitions needs the Kafka cluster" in error, error
    assert "--lag-bootstrap-servers" in error and "--bootstrap-servers" in error, error


def over_kafka(broker: KafkaBroker, topic: str, *extra: str) -> list[str]:
    """A node alone on its own log topic at `broker`."""
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-replication-factor", "1",
        *extra,
        *broker.coordinator_args,
    ]  # fmt: skip


@pytest.mark.kafka
def test_a_healthy_start_over_kafka_is_a_handful_of_lines(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    with ServerProcess(over_kafka(kafka_broker, unique_topic)) as server:
        lines = list(server.lines)
    ready = [line for line in lines if "ready on" in line]
    assert len(ready) == 1 and "50 partitions loaded" in ready[0], "".join(lines)
    assert not [line for line in lines if " ERROR " in line], "".join(lines)
    assert len(lines) <= 12, "".join(lines)


@pytest.mark.kafka
def test_the_ready_line_is_shown_at_log_level_warning(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    with ServerProcess(over_kafka(kafka_broker, unique_topic, "--log-level", "WARNING")) as server:
        lines = list(server.lines)
    assert [line for line in lines if "ready on" in line], "".join(lines)
    assert not [line for line in lines if " INFO " in line and "ready on" not in line]
