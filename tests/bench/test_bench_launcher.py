"""The bench starts Apache Kafka through the repository's launcher, and says so clearly when
it runs from an install without the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator_server.tools.bench import apache_kafka
from coordinator_server.tools.bench.apache_kafka import ApacheKafkaBroker, ApacheKafkaStartError


def test_the_launcher_is_the_repositorys_run_sh() -> None:
    assert apache_kafka.launcher() == apache_kafka.REPOSITORY / "deploy" / "kafka" / "run.sh"
    assert apache_kafka.launcher().is_file()


def test_an_install_without_the_repository_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "deploy" / "kafka" / "run.sh"
    monkeypatch.setattr(apache_kafka, "RUN_SH", missing)
    # Whether or not this process fetched Kafka's jars already, the start stops at the launcher.
    for fetched in (False, True):
        monkeypatch.setattr(apache_kafka, "_fetched", fetched)
        with pytest.raises(ApacheKafkaStartError, match="installed without its repository"):
            ApacheKafkaBroker(sasl_ssl_listener=False).start()


def test_the_bench_from_an_install_without_the_repository_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    # The packages alone, as an install has them, without the repository around them.
    import shutil
    import subprocess
    import sys

    # The server's package and the client distribution's two, as an install lays them out.
    client = apache_kafka.REPOSITORY / "clients" / "python"
    sources = {
        "coordinator_server": apache_kafka.REPOSITORY / "coordinator_server",
        "coordinator_client": client / "coordinator_client",
        "coordinator_protocol": client / "coordinator_protocol",
    }
    for package, source in sources.items():
        shutil.copytree(source, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    completed = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "bench", "commits", "--no-pin"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith(
        "bench: starting Apache Kafka needs the repository's deploy/kafka/run.sh"
    )
    assert str(tmp_path) in line
