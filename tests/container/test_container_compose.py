"""deploy/docker-compose.yml as written: its default services (Kafka, built from
deploy/kafka/Dockerfile, and three coordinator nodes, built from the repository's
Dockerfile) come up healthy, and the coordinator serves a client on the host through the
published ports. Prometheus and Grafana are images from their registries, behind the
`monitoring` profile, and are not started here (no registry is reachable).

Debian's docker-compose (Compose v1) runs the file: the same file users run with
`docker compose` (v2), which the compose-spec schema test covers.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from aiokafka.structs import TopicPartition as TP
from docker_daemon import REPO_ROOT, DockerDaemon

from coordinator_client import CoordinatorClient

pytestmark = [pytest.mark.slow]

COMPOSE_FILE = REPO_ROOT / "deploy" / "docker-compose.yml"
# Where the file publishes each node's client and metrics ports on the host.
NODES = {
    "coordinator-1": (9094, 9095),
    "coordinator-2": (9194, 9195),
    "coordinator-3": (9294, 9295),
}
UP_WITHIN_S = 120


@pytest.fixture
def project(docker: DockerDaemon) -> Iterator[tuple[DockerDaemon, str]]:
    """A compose project of the test's own, taken down with its volumes at the end."""
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (the test command installs it)")
    name = f"compose{uuid.uuid4().hex[:8]}"
    yield docker, name
    compose(docker, name, "down", "--volumes", "--timeout", "30", check=False)


def compose(
    docker: DockerDaemon, project: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["docker-compose", "--file", str(COMPOSE_FILE), "--project-name", project, *args],
        env=docker.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"docker-compose {' '.join(args)}:\n{result.stdout}{result.stderr}")
    return result


def ready(metrics_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def health(docker: DockerDaemon, project: str) -> dict[str, str]:
    """service -> its container's health (or state, for one without a healthcheck)."""
    ids = compose(docker, project, "ps", "--quiet").stdout.split()
    found = json.loads(docker.run("inspect", *ids).stdout) if ids else []
    return {
        c["Config"]["Labels"]["com.docker.compose.service"]: (
            c["State"].get("Health", {}).get("Status") or c["State"]["Status"]
        )
        for c in found
    }


def test_the_compose_stack_comes_up_and_its_coordinator_serves_a_client(
    project: tuple[DockerDaemon, str], kafka_image: str, coordinator_image: str
) -> None:
    # Kafka's image first: a process running the image's tests builds the coordinator's
    # meanwhile.
    docker, name = project
    started = time.monotonic()
    compose(docker, name, "up", "--detach", "--no-build")
    deadline = time.monotonic() + UP_WITHIN_S
    while True:
        states = health(docker, name)
        if states == dict.fromkeys(["kafka", *NODES], "healthy") and all(
            ready(metrics) for _, metrics in NODES.values()
        ):
            break
        assert "unhealthy" not in states.values() and "exited" not in states.values(), (
            states,
            compose(docker, name, "logs", "--tail", "40", check=False).stdout,
        )
        assert time.monotonic() < deadline, (
            f"not up in {UP_WITHIN_S} s: {states}",
            compose(docker, name, "logs", "--tail", "40", check=False).stdout,
        )
        time.sleep(1)
    up_s = time.monotonic() - started
    # The default profile starts no image from a registry.
    assert set(states) == {"kafka", *NODES}

    groups = [f"compose-{index}" for index in range(8)]

    async def commit_and_read() -> dict[str, int]:
        """Through the first node: FindCoordinator sends each group to its owner, by the
        address each node advertises (localhost and its published port)."""
        async with CoordinatorClient(f"127.0.0.1:{NODES['coordinator-1'][0]}") as client:
            for offset, group in enumerate(groups):
                await client.commit_offsets(group, {TP("events", 0): offset})
            return {
                group: (await client.fetch_offsets(group))[TP("events", 0)].offset
                for group in groups
            }

    assert asyncio.run(commit_and_read()) == {group: i for i, group in enumerate(groups)}

    compose(docker, name, "down", "--volumes", "--timeout", "30")
    label = f"label=com.docker.compose.project={name}"
    for kind, listing in (("container", ("ps", "--all")), ("volume", ("volume", "ls"))):
        left = docker.run(*listing, "--quiet", "--filter", label).stdout.split()
        assert left == [], f"{kind}s left after down: {left}"
    print(f"compose up to every node ready: {up_s:.1f} s")
