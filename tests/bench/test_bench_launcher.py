"""The bench starts Apache Kafka through the repository's launcher, and says so clearly when
it runs from an install without the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_server.bench import apache_kafka
from coordinator_server.bench.apache_kafka import ApacheKafkaBroker, ApacheKafkaStartError


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
