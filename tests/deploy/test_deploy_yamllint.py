"""Every YAML file of deploy/ (and the yamllint configuration itself) passes yamllint with the
repository's .yamllint, in strict mode: warnings fail too."""

from __future__ import annotations

from pathlib import Path

from deploy_support import YAMLLINT_CONFIG, deploy_yaml_files, run_tool


def yamllint(*paths: Path) -> tuple[int, str]:
    options = ["--strict", "--format", "parsable", "-c", str(YAMLLINT_CONFIG)]
    result = run_tool("yamllint", *options, *map(str, paths))
    return result.returncode, result.stdout + result.stderr


def test_every_deploy_yaml_file_is_linted() -> None:
    names = {path.relative_to(YAMLLINT_CONFIG.parent).as_posix() for path in deploy_yaml_files()}
    assert {
        "deploy/docker-compose.yml",
        "deploy/prometheus/prometheus.yml",
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/provisioning/datasources/prometheus.yml",
        "deploy/grafana/provisioning/dashboards/coordinator.yml",
    } <= names
    assert any(name.startswith("deploy/kubernetes/") for name in names)


def test_yamllint_strict_passes() -> None:
    returncode, output = yamllint(YAMLLINT_CONFIG, *deploy_yaml_files())
    assert returncode == 0, output


def test_yamllint_really_lints(tmp_path: Path) -> None:
    """A control: the same call fails a file whose only finding is a warning (no `---`), so
    yamllint runs, with this configuration, in strict mode."""
    sloppy = tmp_path / "sloppy.yml"
    sloppy.write_text("enabled: true\n", encoding="utf-8")
    returncode, output = yamllint(sloppy)
    assert returncode != 0
    assert "[warning]" in output and "document-start" in output
