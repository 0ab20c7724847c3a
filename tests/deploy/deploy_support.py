"""Shared helpers of the deploy tests: where the files are, how to read them, how to run the
linters, and how to take PromQL apart."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from metric_names import LABEL_VALUES, series_names

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_server.config import CoordinatorConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
DOCKERFILE = REPO_ROOT / "Dockerfile"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
KUBERNETES_DIR = DEPLOY / "kubernetes"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
ALERT_RULES = DEPLOY / "prometheus" / "alerts.yml"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "coordinator.json"
DEPLOY_README = DEPLOY / "README.md"
YAMLLINT_CONFIG = REPO_ROOT / ".yamllint"

# The scrape job the alert rules and the dashboard select.
SCRAPE_JOB = "coordinator-server"

# Series that are not the coordinator's own but may be queried: Prometheus's scrape health.
PROMETHEUS_SERIES = {"up": ("job", "instance")}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = ("job", "instance")


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def load_yaml_documents(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as stream:
        return [document for document in yaml.safe_load_all(stream) if document is not None]


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def deploy_yaml_files() -> list[Path]:
    return sorted(
        path for pattern in ("*.yml", "*.yaml") for path in DEPLOY.rglob(pattern) if path.is_file()
    )


def run_tool(module: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a linter of this interpreter's environment as `python -m module`, so the tests use
    the dev extra's versions whatever is on PATH. With `home`, the tool runs there with HOME and
    XDG_CONFIG_HOME pointing into it, so no configuration file of the machine applies: only
    what the test passes."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HADOLINT_")}
    env["NO_COLOR"] = "1"
    cwd = REPO_ROOT
    if home is not None:
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
        cwd = home
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- settings ------------------------------------------------------------------------------


def settings_from_env(env: dict[str, Any]) -> CoordinatorConfig:
    """Validate COORDINATOR_* variables as the server would read them, failing on a name that
    is no setting (the server itself would silently ignore it)."""
    fields = CoordinatorConfig.model_fields
    given: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("COORDINATOR_"):
            continue
        name = key.removeprefix("COORDINATOR_").lower()
        assert name in fields, f"{key} is not a setting of coordinator-server"
        given[name] = str(value)
    return CoordinatorConfig(**given)


_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def interpolate_defaults(value: Any) -> Any:
    """A compose value with every ${VAR:-default} replaced by its default, as with no
    environment set."""
    if not isinstance(value, str):
        return value
    return _INTERPOLATION.sub(lambda match: match.group("default") or "", value)


# --- PromQL --------------------------------------------------------------------------------

# Grafana's macros are not PromQL; a plain duration stands in for them when parsing.
_GRAFANA_MACROS = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)
_COORDINATOR_NAME = re.compile(r"\bcoordinator_[a-z_]+\b")


def grafana_to_promql(expr: str) -> str:
    return _GRAFANA_MACROS.sub("5m", expr)


def coordinator_names_in(text: str) -> set[str]:
    """Every coordinator_ name in a text, whatever its syntax (PromQL, a template query)."""
    return set(_COORDINATOR_NAME.findall(text))


@dataclass
class Selector:
    name: str
    matchers: list[tuple[str, str, str]]  # (label, op, value)


@dataclass
class ParsedQuery:
    selectors: list[Selector] = field(default_factory=list)
    grouping_labels: set[str] = field(default_factory=set)


def parse_promql(expr: str) -> ParsedQuery:
    """The series selectors and the labels that aggregations and vector matching name."""
    tree = promql_parser.parse(grafana_to_promql(expr))
    parsed = ParsedQuery()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name
            matchers = []
            for matcher in node.matchers.matchers:
                op = str(matcher.op).rsplit(".", 1)[-1]
                if matcher.name == "__name__":
                    name = matcher.value
                else:
                    matchers.append((matcher.name, op, matcher.value))
            parsed.selectors.append(Selector(name, matchers))
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            parsed.grouping_labels.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            matching = node.modifier.matching
            if matching is not None:
                parsed.grouping_labels.update(matching.labels)
            parsed.grouping_labels.update(node.modifier.group_labels or [])
        return True

    promql_parser.walk(tree, visit)
    return parsed


def known_label_values(family: str, label: str) -> set[str] | None:
    """The closed set of values a label takes, or None when any value may occur."""
    if label == "api":
        return {api_name(key) for key in ApiKey}
    if label == "error":
        return {code.name for code in ErrorCode}
    closed = LABEL_VALUES.get((family, label))
    return set(closed) if closed is not None else None


# Grafana's template query `label_values(<series selector>, <label>)`: not PromQL itself.
_LABEL_VALUES_QUERY = re.compile(r"\s*label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)\s*")


def query_problems(expr: str) -> list[str]:
    """What is wrong with a query's use of the metrics: unknown series, labels the series do
    not have, values a closed label never takes. Empty when nothing is."""
    exported = series_names()
    problems = [
        f"{name} is not an exported series"
        for name in sorted(coordinator_names_in(expr))
        if name not in exported
    ]
    template = _LABEL_VALUES_QUERY.fullmatch(expr)
    promql = template.group("selector") if template else expr
    try:
        parsed = parse_promql(promql)
    except ValueError as error:
        return [*problems, f"does not parse as PromQL: {error}"]
    if template:
        parsed.grouping_labels.add(template.group("label"))
    labels_in_query: set[str] = set(TARGET_LABELS)
    for selector in parsed.selectors:
        if selector.name in PROMETHEUS_SERIES:
            labels = set(PROMETHEUS_SERIES[selector.name])
            family_name = selector.name
        elif selector.name in exported:
            family = exported[selector.name]
            family_name = family.name
            labels = set(family.labels) | set(TARGET_LABELS)
            if selector.name.endswith("_bucket"):
                labels.add("le")
        else:
            problems.append(f"selects {selector.name!r}, which nothing exports")
            continue
        labels_in_query |= labels
        for label, op, value in selector.matchers:
            if label not in labels:
                problems.append(f"{selector.name} has no label {label!r}")
                continue
            allowed = known_label_values(family_name, label)
            if allowed is None:
                continue
            if op in ("Equal", "NotEqual"):
                values = [value]
            elif re.fullmatch(r"[A-Za-z_]+(\|[A-Za-z_]+)*", value):
                values = value.split("|")
            else:
                values = []
            problems.extend(
                f"{selector.name}{{{label}}} never takes the value {v!r}"
                for v in values
                if v not in allowed
            )
    problems.extend(
        f"groups by {label!r}, which no selected series has"
        for label in sorted(parsed.grouping_labels - labels_in_query)
    )
    return problems


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expression) of every query in a Grafana dashboard: panel targets (rows' nested
    panels included) and template variable queries."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            where = f"panel {panel.get('title')!r} target {target.get('refId')}"
            yield where, target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            yield f"variable {variable['name']!r}", text


def alert_rules(rules_file: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in rules_file["groups"]:
        yield from (rule for rule in group["rules"] if "alert" in rule)
