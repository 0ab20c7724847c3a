"""The `coordinator-server` command line: options, environment variables, the ready line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from server_process import ServerProcess

from coordinator_server.cli import build_parser, load_config
from coordinator_server.config import CoordinatorConfig

REQUIRED_OPTIONS = [
    "--host", "--port", "--bootstrap-servers", "--offsets-topic", "--offsets-topic-partitions",
    "--offsets-topic-replication-factor", "--data-dir", "--max-frame-bytes", "--max-connections",
    "--append-linger-ms", "--log-level", "--offsets-commit-timeout-ms",
    "--offset-metadata-max-bytes", "--offsets-retention-minutes",
    "--offsets-retention-check-interval-ms", "--group-initial-rebalance-delay-ms",
    "--group-min-session-timeout-ms", "--group-max-session-timeout-ms", "--group-max-size",
]  # fmt: skip


def test_every_option_of_the_issue_exists_with_kafka_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    for option in REQUIRED_OPTIONS:
        assert option in help_text, option
    config = load_config(build_parser().parse_args(["serve"]))
    assert config.offsets_topic == "__coordinator_offsets"
    assert config.offsets_topic_partitions == 50
    assert config.offsets_commit_timeout_ms == 5000
    assert config.offset_metadata_max_bytes == 4096
    assert config.offsets_retention_minutes == 10080
    assert config.offsets_retention_check_interval_ms == 600000
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.group_min_session_timeout_ms == 6000
    assert config.group_max_session_timeout_ms == 1800000
    assert config.group_max_size == 2147483647
    assert config.append_linger_ms == -1


def test_environment_variables_set_options_and_options_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATOR_OFFSETS_TOPIC_PARTITIONS", "7")
    monkeypatch.setenv("COORDINATOR_GROUP_MAX_SIZE", "12")
    monkeypatch.setenv("COORDINATOR_BOOTSTRAP_SERVERS", "kafka:9092")
    config = load_config(build_parser().parse_args(["serve", "--group-max-size", "3"]))
    assert config.offsets_topic_partitions == 7
    assert config.group_max_size == 3
    assert config.bootstrap_servers == "kafka:9092"


def test_every_setting_is_an_option() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve"])
    assert set(CoordinatorConfig.model_fields) <= set(vars(args))


def test_invalid_settings_exit_with_a_clear_message() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "ERROR" in line and "--port '70000'" in line, line


def test_serve_logs_one_ready_line_with_its_address_and_reads_the_environment(
    tmp_path: Path,
) -> None:
    env = {"COORDINATOR_DATA_DIR": str(tmp_path / "d"), "COORDINATOR_OFFSETS_TOPIC_PARTITIONS": "3"}
    with ServerProcess(["--port", "0"], env=env) as server:
        ready = [line for line in server.lines if "ready on" in line]
        assert len(ready) == 1
        assert re.search(rf"ready on 127\.0\.0\.1:{server.port}\b", ready[0])
        assert "3 partitions" in ready[0]
        # One INFO line says which build of the hot path runs (compiled.py).
        (build,) = [line for line in server.lines if "hot path: " in line]
        assert " INFO " in build
        assert build.split("hot path: ", 1)[1].startswith(("compiled (mypyc)", "pure Python"))
    assert (tmp_path / "d" / "coordinator.db").exists()


def test_the_readme_test_command_is_exactly_what_ci_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
    (test_command,) = [b for b in blocks if ".venv/bin/pytest" in b]
    ci_lines = (root / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_serve_does_not_import_the_tools() -> None:
    # The admin tool, the bench and the Spark pipeline cost start-up time serve never uses.
    probe = (
        "import sys\n"
        "from coordinator_server.cli import build_parser\n"
        "args = build_parser(tools=False).parse_args(['serve'])\n"
        "assert args.command == 'serve'\n"
        "loaded = [m for m in ('coordinator_server.tools.admin',\n"
        "          'coordinator_server.tools.bench',\n"
        "          'coordinator_server.tools.pipeline.cli') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


def test_a_response_buffer_that_one_answer_could_overflow_is_refused() -> None:
    with pytest.raises(ValueError, match="response-buffer-max-bytes"):
        CoordinatorConfig(
            response_buffer_bytes=4 * 1024 * 1024,
            max_response_bytes=8 * 1024 * 1024,
            response_buffer_max_bytes=8 * 1024 * 1024,
        )


def test_a_connection_bound_over_the_servers_bound_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="exceeds response-buffer-total-bytes"):
        CoordinatorConfig(
            response_buffer_max_bytes=64 * 1024 * 1024,
            response_buffer_total_bytes=32 * 1024 * 1024,
        )


@pytest.mark.parametrize(("given", "checked"), [("on", True), ("off", False), ("true", True)])
def test_the_partition_check_of_commits_is_a_switch(given: str, checked: bool) -> None:
    config = load_config(
        build_parser().parse_args(
            [
                "serve",
                "--bootstrap-servers",
                "kafka:9092",
                "--offset-commit-check-partitions",
                given,
            ]
        )
    )
    assert config.offset_commit_check_partitions is checked
