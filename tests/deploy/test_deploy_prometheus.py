"""deploy/prometheus/alerts.yml and prometheus.yml: the structure Prometheus requires of a rule
file, the alerts operators rely on, and every expression parsed as PromQL."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from deploy_support import (
    ALERT_RULES,
    DEPLOY_README,
    PROMETHEUS_CONFIG,
    SCRAPE_JOB,
    alert_rules,
    load_yaml,
    parse_promql,
)

# Prometheus's duration syntax (model.ParseDuration): units in decreasing order.
DURATION = re.compile(r"(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
SEVERITIES = {"critical", "warning", "info"}

# The alerts issue 5 asks for (partition not loaded, append failures, commit latency,
# rebalance storms) and the instance-down alert.
REQUIRED_ALERTS = {
    "CoordinatorDown",
    "CoordinatorPartitionsNotLoaded",
    "CoordinatorAppendFailures",
    "CoordinatorCommitLatencyHigh",
    "CoordinatorRebalanceStorm",
    # Issue 24: consumer lag that keeps growing.
    "CoordinatorConsumerLagGrowing",
}


@pytest.fixture(scope="module")
def rules_file() -> dict[str, Any]:
    return load_yaml(ALERT_RULES)


@pytest.fixture(scope="module")
def alerts(rules_file: dict[str, Any]) -> list[dict[str, Any]]:
    return list(alert_rules(rules_file))


def test_rule_file_structure(rules_file: dict[str, Any]) -> None:
    assert set(rules_file) == {"groups"}
    names = [group["name"] for group in rules_file["groups"]]
    assert len(names) == len(set(names)), "group names are unique within a file"
    for group in rules_file["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit", "labels", "query_offset"}
        assert group["rules"], f"group {group['name']} has no rules"
        for rule in group["rules"]:
            assert ("alert" in rule) != ("record" in rule), rule
            allowed = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert set(rule) <= allowed, f"unknown keys in {rule}"


def test_every_alert_is_complete(alerts: list[dict[str, Any]]) -> None:
    assert alerts
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), name
        assert isinstance(alert["expr"], str) and alert["expr"].strip(), name
        assert isinstance(alert["for"], str) and DURATION.fullmatch(alert["for"]), name
        assert alert["for"] not in ("", "0s"), f"{name}: fires on a single evaluation"
        assert alert["labels"]["severity"] in SEVERITIES, name
        assert alert["annotations"]["summary"].strip(), name
        assert alert["annotations"]["description"].strip(), name
        for text in alert["annotations"].values():
            # Go templates may only use the alert's labels and value.
            for action in re.findall(r"\{\{(.*?)\}\}", text):
                assert re.search(r"\$(labels\.\w+|value)\b", action), f"{name}: {{{{{action}}}}}"


def test_alert_names_are_unique(alerts: list[dict[str, Any]]) -> None:
    names = [alert["alert"] for alert in alerts]
    assert len(names) == len(set(names))


def test_required_alerts_exist(alerts: list[dict[str, Any]]) -> None:
    assert {alert["alert"] for alert in alerts} >= REQUIRED_ALERTS


def test_alert_expressions_parse(alerts: list[dict[str, Any]]) -> None:
    for alert in alerts:
        parse_promql(alert["expr"])  # raises ValueError on a syntax error


def test_required_alerts_watch_the_right_series(alerts: list[dict[str, Any]]) -> None:
    by_name = {alert["alert"]: alert["expr"] for alert in alerts}
    (partitions,) = parse_promql(by_name["CoordinatorPartitionsNotLoaded"]).selectors
    assert partitions.name == "coordinator_partitions"
    (state,) = [m for m in partitions.matchers if m[0] == "state"]
    # Counts what is not loaded: neither ACTIVE nor unowned (CLOSED).
    assert state[1] == "Re" and set(state[2].split("|")) == {"INITIAL", "LOADING", "FAILED"}
    assert "coordinator_append_failures_total" in by_name["CoordinatorAppendFailures"]
    commit = by_name["CoordinatorCommitLatencyHigh"]
    assert "histogram_quantile(0.99" in commit
    assert 'api="OffsetCommit"' in commit
    assert "coordinator_request_duration_seconds_bucket" in commit
    assert "coordinator_rebalances_total" in by_name["CoordinatorRebalanceStorm"]
    down = parse_promql(by_name["CoordinatorDown"])
    assert {s.name for s in down.selectors} == {"up"}
    for selector in down.selectors:
        assert ("job", "Equal", SCRAPE_JOB) in selector.matchers


def test_the_job_the_rules_select_is_scraped() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    assert SCRAPE_JOB in {job["job_name"] for job in config["scrape_configs"]}
    assert config["rule_files"]


def test_readme_describes_every_alert(alerts: list[dict[str, Any]]) -> None:
    readme = DEPLOY_README.read_text(encoding="utf-8")
    missing = [alert["alert"] for alert in alerts if f"`{alert['alert']}`" not in readme]
    assert not missing, f"deploy/README.md does not describe {missing}"


def test_readme_scrape_config_for_kubernetes_names_the_job() -> None:
    """The README's scrape job for a cluster parses and keeps the name the rules select."""
    readme = DEPLOY_README.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert blocks
    snippets = [yaml.safe_load(block) for block in blocks]
    jobs = [job for snippet in snippets for job in snippet.get("scrape_configs", [])]
    assert [job["job_name"] for job in jobs] == [SCRAPE_JOB]


def test_the_lag_alert_watches_each_group_s_lag_and_its_growth(
    alerts: list[dict[str, Any]],
) -> None:
    """Growing lag is a group's: both sides of the rule keep the group and only it, and the
    growth is read over the last 10 minutes."""
    by_name = {alert["alert"]: alert for alert in alerts}
    rule = by_name["CoordinatorConsumerLagGrowing"]
    parsed = parse_promql(rule["expr"])
    assert [s.name for s in parsed.selectors] == ["coordinator_consumer_group_lag"] * 2
    assert parsed.grouping_labels == {"group"}
    assert "[10m]" in rule["expr"] and "deriv(" in rule["expr"]
    assert rule["for"] == "10m"
