"""deploy/docker-compose.yml: the compose specification's schema (check-jsonschema's vendored
copy, no network), and the wiring between its services, Prometheus and Grafana that the schema
cannot see."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    ALERT_RULES,
    COMPOSE_FILE,
    DASHBOARD,
    DEPLOY,
    GRAFANA_PROVISIONING,
    PROMETHEUS_CONFIG,
    REPO_ROOT,
    SCRAPE_JOB,
    interpolate_defaults,
    load_yaml,
    run_tool,
    settings_from_env,
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(interpolate_defaults(value)) for key, value in env.items()}


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of the service's bind mounts (relative to deploy/)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            mounts[target] = (COMPOSE_FILE.parent / source).resolve()
    return mounts


def coordinators(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The coordinator nodes: the services built from the repository's own Dockerfile."""
    return {
        name: service
        for name, service in services.items()
        if "build" in service
        and (COMPOSE_FILE.parent / service["build"]["context"]).resolve() == REPO_ROOT
    }


def run_options(service: dict[str, Any]) -> dict[str, str]:
    """deploy/kafka/run.sh's options of a service's command, `--config` ones by their key."""
    command = service["command"]
    options: dict[str, str] = {}
    for flag, value in zip(command[::2], command[1::2], strict=True):
        if flag == "--config":
            key, _, setting = value.partition("=")
            options[key] = setting
        else:
            options[flag] = value
    return options


def duration_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(number) * units[unit] for number, unit in re.findall(r"(\d+)(ms|s|m|h)", text))


def test_compose_file_matches_the_compose_spec() -> None:
    result = run_tool(
        "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_schema_check_really_checks(tmp_path: Path) -> None:
    """A control: a misspelt service key fails the same call."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  app:\n    imagee: busybox:1.36\n", encoding="utf-8")
    result = run_tool("check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(broken))
    assert result.returncode != 0
    assert "imagee" in result.stdout + result.stderr


def test_images_are_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned"
    # Kafka is built here, from Maven Central's jars (deploy/kafka/Dockerfile).
    assert services["kafka"]["image"].startswith("coordinator-server-kafka:")
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")


def test_kafka_is_built_from_its_dockerfile_and_listens_for_containers_and_the_host(
    services: dict[str, Any],
) -> None:
    kafka = services["kafka"]
    context = (COMPOSE_FILE.parent / kafka["build"]["context"]).resolve()
    assert (context / kafka["build"].get("dockerfile", "Dockerfile")).is_file()
    assert (context / "run.sh").is_file() and (context / "pom.xml").is_file()
    options = run_options(kafka)
    assert options["--cluster-id"], "a fixed cluster id: nothing generates one in the image"
    listeners = dict(item.split("://") for item in options["listeners"].split(","))
    assert listeners["CONTROLLER"].endswith(f":{options['--controller-port']}")
    assert options["inter.broker.listener.name"] in listeners
    protocols = dict(
        item.split(":") for item in options["listener.security.protocol.map"].split(",")
    )
    assert set(protocols) == set(listeners)
    advertised = dict(item.split("://") for item in options["advertised.listeners"].split(","))
    assert set(advertised) == set(listeners) - {"CONTROLLER"}
    # The host's port is the published one.
    published = {port.split(":")[0] for port in kafka["ports"]}
    assert advertised["EXTERNAL"] == f"localhost:{listeners['EXTERNAL'].rsplit(':', 1)[1]}"
    assert advertised["EXTERNAL"].rsplit(":", 1)[1] in published


def test_monitoring_is_a_profile(services: dict[str, Any]) -> None:
    """Prometheus and Grafana come from registries: the default `up` needs neither."""
    for name, service in services.items():
        if name in ("prometheus", "grafana"):
            assert service["profiles"] == ["monitoring"], name
        else:
            assert "profiles" not in service, name
            assert "build" in service, f"{name}: built here, not pulled"


def test_coordinators_are_built_from_the_dockerfile_and_wait_for_kafka(
    services: dict[str, Any],
) -> None:
    for coordinator in coordinators(services).values():
        build = coordinator["build"]
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context == REPO_ROOT
        assert (context / build.get("dockerfile", "Dockerfile")).is_file()
        assert coordinator["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_three_nodes_of_one_cluster_each_with_its_own_node_id(
    services: dict[str, Any],
) -> None:
    nodes = {name: settings_from_env(environment(s)) for name, s in coordinators(services).items()}
    assert len(nodes) == 3
    assert len({settings.node_id for settings in nodes.values()}) == 3
    for settings in nodes.values():
        assert settings.clustered
    # One cluster: the same log and cluster id.
    shared = {
        (s.bootstrap_servers, s.offsets_topic, s.offsets_topic_partitions, s.cluster_name)
        for s in nodes.values()
    }
    assert len(shared) == 1


@pytest.mark.parametrize("node", ["coordinator-1", "coordinator-2", "coordinator-3"])
def test_coordinator_settings_reach_kafka_from_another_container(
    services: dict[str, Any], node: str
) -> None:
    settings = settings_from_env(environment(services[node]))
    assert settings.offsets_topic_replication_factor == 1, "one broker: one replica"
    kafka = services["kafka"]
    advertised = {
        address.split("://")[1] for address in run_options(kafka)["advertised.listeners"].split(",")
    }
    assert settings.bootstrap_servers is not None
    for server in settings.bootstrap_servers.split(","):
        host, _, _ = server.partition(":")
        assert host in ("kafka", kafka.get("hostname")), f"{server}: not the kafka service"
        assert server in advertised, f"{server} is not an advertised listener: {advertised}"


def test_coordinators_get_time_for_a_graceful_shutdown(services: dict[str, Any]) -> None:
    for coordinator in coordinators(services).values():
        settings = settings_from_env(environment(coordinator))
        grace = duration_seconds(coordinator["stop_grace_period"])
        # The shutdown drains, then leaves the cluster, which may wait for a rebalance
        # under way for up to a session timeout.
        needed_ms = settings.shutdown_timeout_ms + settings.cluster_session_timeout_ms
        assert grace * 1000 > needed_ms


def test_each_node_is_published_on_the_ports_it_advertises(services: dict[str, Any]) -> None:
    """FindCoordinator hands out the advertised host with the listener's own port: a client
    on the host reaches each node only if that port is published as itself."""
    seen: set[str] = set()
    for name, coordinator in coordinators(services).items():
        settings = settings_from_env(environment(coordinator))
        assert settings.advertised_host == "localhost", name
        published = {tuple(port.rsplit(":", 2)[-2:]) for port in coordinator["ports"]}
        for port in (str(settings.port), str(settings.metrics_port)):
            assert (port, port) in published, (name, port)
            assert port not in seen, f"{name}: port {port} is another node's"
            seen.add(port)


def test_bind_mounts_exist(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) is missing"
            assert source.is_relative_to(DEPLOY), f"{name}: mounts {source} from outside deploy/"


def test_prometheus_scrapes_the_coordinator_and_loads_the_rules(
    services: dict[str, Any],
) -> None:
    prometheus = services["prometheus"]
    mounts = bind_mounts(prometheus)
    assert mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS_CONFIG
    config = load_yaml(PROMETHEUS_CONFIG)
    for rule_file in config["rule_files"]:
        assert mounts.get(rule_file) == ALERT_RULES, f"{rule_file} is not mounted from alerts.yml"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for group in jobs[SCRAPE_JOB]["static_configs"] for t in group["targets"]]
    assert targets == [
        f"{name}:{settings_from_env(environment(service)).metrics_port}"
        for name, service in coordinators(services).items()
    ]
    assert jobs[SCRAPE_JOB].get("metrics_path", "/metrics") == "/metrics"


def test_grafana_provisions_the_datasource_and_the_dashboard(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == GRAFANA_PROVISIONING
    datasources = load_yaml(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    (datasource,) = datasources["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "prometheus" in services

    providers = load_yaml(GRAFANA_PROVISIONING / "dashboards" / "coordinator.yml")["providers"]
    (provider,) = providers
    dashboards_dir = provider["options"]["path"]
    assert mounts[dashboards_dir] == DASHBOARD.parent
    home = environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{DASHBOARD.name}"


def test_scrape_interval_matches_grafana_time_interval() -> None:
    """Grafana sizes $__rate_interval from timeInterval; it must be the scrape interval."""
    config = load_yaml(PROMETHEUS_CONFIG)
    datasources = load_yaml(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    (datasource,) = datasources["datasources"]
    assert datasource["jsonData"]["timeInterval"] == config["global"]["scrape_interval"]
