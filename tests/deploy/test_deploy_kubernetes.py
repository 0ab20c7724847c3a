"""deploy/kubernetes/: every manifest against the Kubernetes API schemas bundled with
kubernetes-validate (strict: unknown fields fail; no cluster, no network), and the wiring
between the manifests, the ConfigMap's settings and the image that the schemas cannot see."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
from deploy_support import DOCKERFILE, KUBERNETES_DIR, load_yaml_documents, settings_from_env

from coordinator_server.config import CoordinatorConfig

# The oldest Kubernetes the manifests claim (deploy/README.md says so). The schemas alone
# would allow older: the manifests validate strictly against 1.25, the oldest that
# kubernetes-validate ships. The floor is the pod-index label
# (apps.kubernetes.io/pod-index) that each pod's node id comes from: the StatefulSet
# controller sets it from 1.28, where the PodIndexLabel gate is beta and on by default (GA in
# 1.32). A label is free-form, so no schema can see that. Every field the manifests use is GA
# by 1.28 (policy/v1 PodDisruptionBudget 1.21, topologySpreadConstraints, seccompProfile and
# startupProbe by 1.20, emptyDir sizeLimit enforced since LocalStorageCapacityIsolation went
# GA in 1.25), so no beta gate that is off by default is involved.
OLDEST_KUBERNETES = "1.28"
# The newest Kubernetes the installed kubernetes-validate has schemas for, so that an API a
# newer Kubernetes removed fails too. pyproject asks for kubernetes-validate>=1.33, which
# ships 1.28 (1.33.0 ships 1.22 to 1.33; 1.37.0 ships 1.25 to 1.37); releases drop the oldest
# schemas, which test_the_oldest_claim_has_its_own_schemas catches.
NEWEST_KUBERNETES = kubernetes_validate.utils.major_minor(kubernetes_validate.latest_version())
KUBERNETES_VERSIONS = [OLDEST_KUBERNETES, NEWEST_KUBERNETES]

MANIFESTS = sorted(KUBERNETES_DIR.glob("*.yaml"))


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{document['kind']}/{document['metadata']['name']}", document)
        for path in MANIFESTS
        for document in load_yaml_documents(path)
    ]


def resources(kind: str) -> list[dict[str, Any]]:
    return [document for _, document in documents() if document["kind"] == kind]


def one(kind: str) -> dict[str, Any]:
    (resource,) = resources(kind)
    return resource


@pytest.fixture(scope="module")
def workload() -> dict[str, Any]:
    found = resources("StatefulSet") + resources("Deployment")
    assert len(found) == 1, "one workload"
    return found[0]


@pytest.fixture(scope="module")
def pod(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    return container


@pytest.fixture(scope="module")
def settings() -> CoordinatorConfig:
    return settings_from_env(one("ConfigMap")["data"])


def test_there_are_manifests() -> None:
    assert MANIFESTS
    kinds = sorted(document["kind"] for _, document in documents())
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service", "StatefulSet"]


def test_the_oldest_claim_has_its_own_schemas() -> None:
    """validate() silently falls back to the newest schemas not newer than the version asked
    for, and fails only when there are none: the claim must be a version that is shipped."""
    shipped = {
        kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()
    }
    assert OLDEST_KUBERNETES in shipped, (
        f"kubernetes-validate {kubernetes_validate.__version__} has no {OLDEST_KUBERNETES}"
        " schemas: bound it in pyproject and constraints.txt, or raise the claim"
    )
    assert NEWEST_KUBERNETES != OLDEST_KUBERNETES


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(("where", "document"), documents(), ids=[w for w, _ in documents()])
def test_manifest_is_valid(where: str, document: dict[str, Any], version: str) -> None:
    # SchemaNotFoundError (an unknown kind or apiVersion) fails the test too. The return value
    # is the version whose schemas were used.
    assert kubernetes_validate.validate(document, version, strict=True) == version


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_strict_validation_really_checks(version: str) -> None:
    """A control: a misspelt field fails the same call."""
    broken = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "dta": {"a": "b"},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_the_oldest_claim_rejects_a_newer_field() -> None:
    """A control: the StatefulSet with the pod's appArmorProfile, a field added in 1.30 (an
    annotation before), passes the newest schemas and fails the oldest claim's."""
    newer = copy.deepcopy(one("StatefulSet"))
    newer["spec"]["template"]["spec"]["securityContext"]["appArmorProfile"] = {
        "type": "RuntimeDefault"
    }
    kubernetes_validate.validate(newer, NEWEST_KUBERNETES, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError, match="appArmorProfile"):
        kubernetes_validate.validate(newer, OLDEST_KUBERNETES, strict=True)


def headless_service() -> dict[str, Any]:
    (headless,) = [s for s in resources("Service") if s["spec"].get("clusterIP") == "None"]
    return headless


def test_three_nodes_with_stable_identities(workload: dict[str, Any]) -> None:
    assert workload["kind"] == "StatefulSet"
    assert workload["spec"]["replicas"] == 3
    headless = headless_service()
    assert headless["metadata"]["name"] == workload["spec"]["serviceName"]
    # A node that owns partitions but is still loading them must resolve: clients it is
    # handed to retry COORDINATOR_LOAD_IN_PROGRESS rather than fail to connect.
    assert headless["spec"]["publishNotReadyAddresses"] is True


def test_the_disruption_budget_keeps_two_nodes_up(workload: dict[str, Any]) -> None:
    budget = one("PodDisruptionBudget")["spec"]
    replicas = workload["spec"]["replicas"]
    down = (
        budget["maxUnavailable"]
        if "maxUnavailable" in budget
        else replicas - budget["minAvailable"]
    )
    assert down == 1


def test_the_nodes_spread_over_kubernetes_nodes(pod: dict[str, Any]) -> None:
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


_REFERENCE = re.compile(r"\$\((\w+)\)")


def pod_environment(container: dict[str, Any], ordinal: int, namespace: str) -> dict[str, str]:
    """The environment the kubelet gives pod `ordinal`: the ConfigMap's, then `env` in order,
    with the downward API's fields and $(VAR) references resolved as Kubernetes does."""
    name = f"{one('StatefulSet')['metadata']['name']}-{ordinal}"
    fields = {
        "metadata.name": name,
        "metadata.namespace": namespace,
        "metadata.labels['apps.kubernetes.io/pod-index']": str(ordinal),
    }
    env: dict[str, str] = dict(one("ConfigMap")["data"])
    for variable in container["env"]:
        if "value" in variable:
            env[variable["name"]] = _REFERENCE.sub(
                lambda match: env.get(match[1], match[0]), variable["value"]
            )
            continue
        source = variable["valueFrom"]
        if "fieldRef" in source:
            env[variable["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            # A Secret's key, optional: absent unless the Secret exists.
            assert source["secretKeyRef"]["optional"] is True, variable["name"]
    return env


@pytest.mark.parametrize("ordinal", [0, 1, 2])
def test_each_pod_is_the_node_of_its_ordinal_at_its_own_dns_name(
    container: dict[str, Any], ordinal: int
) -> None:
    settings = settings_from_env(pod_environment(container, ordinal, "coordination"))
    assert settings.clustered
    assert settings.node_id == ordinal
    headless = headless_service()["metadata"]["name"]
    assert settings.advertised_host == (
        f"coordinator-server-{ordinal}.{headless}.coordination.svc.cluster.local"
    )


def test_the_pods_have_distinct_node_ids(container: dict[str, Any]) -> None:
    replicas = one("StatefulSet")["spec"]["replicas"]
    ids = {
        settings_from_env(pod_environment(container, ordinal, "ns")).node_id
        for ordinal in range(replicas)
    }
    assert len(ids) == replicas


def test_selectors_match_the_pod(workload: dict[str, Any], pod: dict[str, Any]) -> None:
    labels = pod["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for service in resources("Service"):
        assert service["spec"]["selector"].items() <= labels.items()
    budget = one("PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_settings_come_from_the_configmap(
    container: dict[str, Any], settings: CoordinatorConfig
) -> None:
    refs = [source["configMapRef"]["name"] for source in container["envFrom"]]
    assert refs == [one("ConfigMap")["metadata"]["name"]]
    assert settings.host == "0.0.0.0"
    assert settings.bootstrap_servers, "the Kafka log: state must outlive the pod"
    assert settings.cluster == "on"
    # Each pod's own: never the same for every node.
    assert "COORDINATOR_NODE_ID" not in one("ConfigMap")["data"]
    assert "COORDINATOR_ADVERTISED_HOST" not in one("ConfigMap")["data"]


def test_ports_agree(container: dict[str, Any], settings: CoordinatorConfig) -> None:
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"coordinator": settings.port, "metrics": settings.metrics_port}
    for service in resources("Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{service['metadata']['name']}: {port}"
            assert port["port"] == ports[port["targetPort"]]


def test_probes(container: dict[str, Any]) -> None:
    def http_get(probe: str) -> tuple[str, str]:
        action = container[probe]["httpGet"]
        return action["path"], action["port"]

    assert http_get("livenessProbe") == ("/healthz", "metrics")
    assert http_get("readinessProbe") == ("/readyz", "metrics")
    assert http_get("startupProbe") == ("/healthz", "metrics")


def test_resources_requested_and_limited(container: dict[str, Any]) -> None:
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= container["resources"][bound].keys(), bound


def test_runs_as_the_image_user_without_privileges(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    uid = re.search(r"^ARG UID=(\d+)$", dockerfile, re.MULTILINE)
    gid = re.search(r"^ARG GID=(\d+)$", dockerfile, re.MULTILINE)
    assert uid and gid
    assert security["runAsUser"] == int(uid.group(1))
    assert security["runAsGroup"] == int(gid.group(1))
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]


def test_writable_paths_are_volumes(container: dict[str, Any]) -> None:
    """With a read-only root filesystem, the data dir the image sets must be a mount."""
    data_dir = re.search(r"COORDINATOR_DATA_DIR=(\S+)", DOCKERFILE.read_text(encoding="utf-8"))
    assert data_dir
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert data_dir.group(1) in mounts


def test_prometheus_scrape_annotations(pod: dict[str, Any], settings: CoordinatorConfig) -> None:
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(settings.metrics_port)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_grace_period_outlasts_the_shutdown_timeout(
    pod: dict[str, Any], settings: CoordinatorConfig
) -> None:
    # The shutdown drains, then leaves the cluster, which may wait for a rebalance under
    # way for up to a session timeout.
    needed_ms = settings.shutdown_timeout_ms + settings.cluster_session_timeout_ms
    assert pod["spec"]["terminationGracePeriodSeconds"] * 1000 > needed_ms


def test_no_service_links(pod: dict[str, Any]) -> None:
    """Service links inject COORDINATOR_SERVER_* variables, which look like settings."""
    assert pod["spec"]["enableServiceLinks"] is False


def test_image_is_tagged(container: dict[str, Any]) -> None:
    _, _, tag = container["image"].rpartition(":")
    assert tag and tag != "latest"
    assert container["args"] == ["serve"]


def test_manifests_are_plain_files() -> None:
    """`kubectl apply -f deploy/kubernetes/` applies every file there: no kustomization or
    other non-resource YAML may sit beside them."""
    for path in KUBERNETES_DIR.iterdir():
        assert path.suffix == ".yaml", f"{path.name}: kubectl would try to apply it"
