"""The dashboard and the alert rules query only what the server exports (tests/deploy/
metric_names.py, the one list), with the labels and label values it exports; the dashboard
covers every family; deploy/README.md lists them all."""

from __future__ import annotations

import re
from typing import Any

import pytest
from deploy_support import (
    ALERT_RULES,
    DASHBOARD,
    DEPLOY_README,
    GRAFANA_PROVISIONING,
    alert_rules,
    coordinator_names_in,
    dashboard_queries,
    load_json,
    load_yaml,
    query_problems,
)
from metric_names import (
    EXPORTED_METRICS,
    LAG_FAMILY,
    METRICS_BY_NAME,
    PROCESS_METRICS,
    family_of,
    series_names,
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_json(DASHBOARD)


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


# --- the list itself -------------------------------------------------------------------------


def test_metric_list_follows_prometheus_naming() -> None:
    names = [family.name for family in EXPORTED_METRICS]
    assert len(names) == len(set(names))
    for family in EXPORTED_METRICS:
        assert re.fullmatch(r"coordinator_[a-z]+(_[a-z]+)*", family.name), family.name
        assert family.name.endswith("_total") == (family.type == "counter"), family.name
        if family.name != LAG_FAMILY:
            assert not {"group", "group_id", "member", "member_id"} & set(family.labels)
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_bytes", "_records")), family.name
    assert family_of("coordinator_append_duration_seconds_bucket") == (
        "coordinator_append_duration_seconds"
    )
    assert family_of("coordinator_requests_total") == "coordinator_requests_total"
    assert METRICS_BY_NAME[LAG_FAMILY].labels == ("group", "topic", "partition")
    for family in PROCESS_METRICS:
        assert re.fullmatch(r"(process|python_gc)_[a-z]+(_[a-z]+)*", family.name), family.name
        assert family.name.endswith("_total") == (family.type == "counter"), family.name


# --- the dashboard -------------------------------------------------------------------------


def test_dashboard_is_a_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = all_panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']!r} queries nothing"


def test_dashboard_datasource_is_prometheus(dashboard: dict[str, Any]) -> None:
    """Every query names the `datasource` variable, which picks among Prometheus data sources
    and defaults to the provisioned one."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    provisioned = load_yaml(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    uids = {source["uid"] for source in provisioned["datasources"]}
    assert variables["datasource"]["current"]["value"] in uids
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == wanted, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == wanted, panel["title"]


def test_dashboard_variables_are_defined(dashboard: dict[str, Any]) -> None:
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    for where, expr in dashboard_queries(dashboard):
        used = set(re.findall(r"\$\{?(\w+)", expr)) - {"__rate_interval", "__interval", "__range"}
        assert used <= defined, f"{where}: undefined variables {used - defined}"


def test_dashboard_queries_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    problems = [
        f"{where}: {problem}"
        for where, expr in dashboard_queries(dashboard)
        for problem in query_problems(expr)
    ]
    assert not problems, "\n".join(problems)


def test_dashboard_covers_every_family(dashboard: dict[str, Any]) -> None:
    used = {
        family_of(name)
        for _, expr in dashboard_queries(dashboard)
        for name in coordinator_names_in(expr)
    }
    missing = sorted(set(METRICS_BY_NAME) - used)
    assert not missing, f"the dashboard shows nothing of {missing}"


# --- the alert rules -----------------------------------------------------------------------


def test_alert_rules_query_only_exported_metrics() -> None:
    problems = [
        f"{rule['alert']}: {problem}"
        for rule in alert_rules(load_yaml(ALERT_RULES))
        for problem in query_problems(rule["expr"])
    ]
    assert not problems, "\n".join(problems)


# --- the checker itself --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "complaint"),
    [
        ("rate(coordinator_request_total[5m])", "coordinator_request_total"),
        ("coordinator_request_duration_seconds", "nothing exports"),
        ('coordinator_groups{state="Rebalancing"}', "Rebalancing"),
        ('coordinator_partitions{state=~"ACTIVE|LOADED"}', "LOADED"),
        ('coordinator_requests_total{api="Commit"}', "Commit"),
        ('coordinator_requests_total{group="g"}', "no label 'group'"),
        ("sum by (member) (coordinator_group_members)", "'member'"),
        ("sum(rate(coordinator_rebalances_total[5m])", "PromQL"),
        ("label_values(coordinator_build_info, group)", "'group'"),
    ],
)
def test_checker_catches(expr: str, complaint: str) -> None:
    """A control: each kind of mistake the checks above look for is caught."""
    problems = query_problems(expr)
    assert any(complaint in problem for problem in problems), problems


def test_checker_accepts_the_forms_in_use() -> None:
    for expr in (
        "histogram_quantile(0.99, sum by (api, le) (rate("
        'coordinator_request_duration_seconds_bucket{api="OffsetCommit", instance=~"$instance"}'
        "[$__rate_interval])))",
        'sum by (api, error) (rate(coordinator_requests_total{error!="NONE"}[5m]))',
        'up{job="coordinator-server"} == 0 or absent(up{job="coordinator-server"})',
        "label_values(coordinator_build_info, instance)",
        "max by (version) (coordinator_build_info)",
    ):
        assert query_problems(expr) == [], expr


# --- the README ----------------------------------------------------------------------------


def test_readme_lists_every_metric() -> None:
    readme = DEPLOY_README.read_text(encoding="utf-8")
    missing = [name for name in METRICS_BY_NAME if f"`{name}`" not in readme]
    assert not missing, f"deploy/README.md's metrics reference lacks {missing}"
    mentioned = coordinator_names_in(readme) - {"coordinator_"}
    unknown = {name for name in mentioned if family_of(name) not in METRICS_BY_NAME} - set(
        series_names()
    )
    assert not unknown, f"deploy/README.md names metrics nobody exports: {unknown}"
