"""The project's image, built from its own Dockerfile and run beside Apache Kafka as users run
it: on the host's network, read-only, as its own non-root user, stopped by `docker stop`.

Everything goes through the container's own doors: its HEALTHCHECK, /readyz, the client port
(the project's client library, on the host), `docker logs`, `docker stop` and `docker kill`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as TP
from apache_kafka import ApacheKafkaBroker
from docker_daemon import REPO_ROOT, DockerDaemon
from kafka_broker import free_port
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from coordinator_client import CoordinatorClient, GroupMember, RangeAssignor

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# The broker's group.min.session.timeout.ms is Kafka's default, 6000 ms: the shortest the
# cluster's own membership may use.
CLUSTER_SESSION_TIMEOUT_MS = 6000
SHUTDOWN_TIMEOUT_MS = 10_000
LOG_PARTITIONS = 4
# The Dockerfile's HEALTHCHECK runs every 10 s: healthy from the first check that passes.
HEALTHY_WITHIN_S = 45
TOPIC = "events"


class Container:
    """One coordinator container on the host's network, listening on 127.0.0.1 only."""

    def __init__(
        self, docker: DockerDaemon, image: str, broker: ApacheKafkaBroker, topic: str, **env: str
    ) -> None:
        self.docker = docker
        self.name = f"coordinator-{uuid.uuid4().hex[:10]}"
        self.port = free_port()
        self.metrics_port = free_port()
        settings = {
            "COORDINATOR_HOST": "127.0.0.1",
            "COORDINATOR_PORT": str(self.port),
            "COORDINATOR_METRICS_PORT": str(self.metrics_port),
            "COORDINATOR_BOOTSTRAP_SERVERS": broker.bootstrap,
            "COORDINATOR_OFFSETS_TOPIC": topic,
            "COORDINATOR_OFFSETS_TOPIC_PARTITIONS": str(LOG_PARTITIONS),
            "COORDINATOR_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "COORDINATOR_CLUSTER_SESSION_TIMEOUT_MS": str(CLUSTER_SESSION_TIMEOUT_MS),
            "COORDINATOR_CLUSTER_HEARTBEAT_INTERVAL_MS": "1000",
            "COORDINATOR_SHUTDOWN_TIMEOUT_MS": str(SHUTDOWN_TIMEOUT_MS),
            **env,
        }
        self.args = [
            "run", "--detach", "--name", self.name,
            "--network", "host",
            # As the Kubernetes manifests run it: nothing of the image is writable, no
            # capability, no privilege to gain. The data volume stays writable.
            "--read-only",
            "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            *(arg for key, value in settings.items() for arg in ("--env", f"{key}={value}")),
            image,
        ]  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Container:
        self.docker.run(*self.args)
        return self

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.docker.inspect(self.name)["State"]
        return state

    def logs(self) -> str:
        result = self.docker.run("logs", self.name)
        return result.stdout + result.stderr

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if http_status(self.metrics_port, "/readyz") == 200:
                return
            assert self.state()["Running"], f"the container stopped:\n{self.logs()}"
            time.sleep(0.2)
        raise AssertionError(f"not ready in {timeout} s:\n{self.logs()}")

    def remove(self) -> None:
        self.docker.remove_containers(self.name)


def http_status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


@pytest.fixture
def start_container(
    docker: DockerDaemon,
    coordinator_image: str,
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
) -> Iterator[Callable[..., Container]]:
    """Starts a container of the image on the run's broker and the test's own log topic,
    with extra settings as keyword arguments; each is removed at the test's end."""
    started: list[Container] = []

    def start(**env: str) -> Container:
        container = Container(docker, coordinator_image, kafka_broker, unique_topic, **env)
        started.append(container)
        return container.start()

    yield start
    for container in started:
        container.remove()


async def join_and_commit(bootstrap: str, group: str, offset: int) -> dict[TP, int]:
    """A member joins `group` through the container, commits `offset` on each partition it
    is given, and reads the commits back: what the client saw committed."""
    async with CoordinatorClient(bootstrap) as client:
        member = GroupMember(
            client,
            group,
            [TOPIC],
            partitions_for_topics={TOPIC: 3},
            assignors=[RangeAssignor()],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        await member.start()
        try:
            assignment = await asyncio.wait_for(member.wait_for_assignment(), 30)
            assert assignment == {TP(TOPIC, p) for p in range(3)}
            await member.commit_offsets({tp: OffsetAndMetadata(offset, "") for tp in assignment})
            fetched = await client.fetch_offsets(group)
        finally:
            await member.close()
    return {tp: committed.offset for tp, committed in fetched.items()}


async def fetch(bootstrap: str, group: str) -> dict[TP, int]:
    async with CoordinatorClient(bootstrap) as client:
        fetched = await client.fetch_offsets(group)
    return {tp: committed.offset for tp, committed in fetched.items()}


def test_the_image_runs_beside_kafka_as_a_user_would(
    docker: DockerDaemon, start_container: Callable[..., Container]
) -> None:
    started = time.monotonic()
    container = start_container(COORDINATOR_LOG_FORMAT="json")
    container.wait_ready()
    ready_s = time.monotonic() - started

    # The image's own HEALTHCHECK (/healthz through the interpreter) turns healthy.
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while (health := container.state()["Health"]["Status"]) != "healthy":
        assert health == "starting", f"{health}:\n{container.logs()}"
        assert time.monotonic() < deadline, f"not healthy in {HEALTHY_WITHIN_S} s"
        time.sleep(0.5)
    assert http_status(container.metrics_port, "/readyz") == 200

    # A client outside the container: a member joins, commits and reads its commits back.
    group = f"image-{uuid.uuid4().hex[:8]}"
    committed = asyncio.run(join_and_commit(container.bootstrap, group, 42))
    assert committed == {TP(TOPIC, p): 42 for p in range(3)}

    # Not root, and the image itself cannot be written to.
    assert docker.run("exec", container.name, "id", "-u").stdout.strip() == "10001"
    refused = docker.run("exec", container.name, "touch", "/opt/venv/written", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    assert docker.inspect(container.name)["HostConfig"]["ReadonlyRootfs"] is True

    # Logs are JSON, one object a line, as asked.
    lines = [line for line in container.logs().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert any("ready on 127.0.0.1" in record["message"] for record in records)
    assert {"time", "level", "logger", "message"} <= set(records[0])

    print(f"ready {ready_s:.1f} s after docker run")


def test_docker_stop_is_graceful_and_loses_nothing_acknowledged(
    docker: DockerDaemon, start_container: Callable[..., Container]
) -> None:
    """Commits run while `docker stop` is sent: the container exits by itself (SIGTERM
    reaches the server, status 0, before Docker's SIGKILL), and a new container on the same
    log has every commit that was acknowledged."""
    first = start_container()
    first.wait_ready()
    group = f"stop-{uuid.uuid4().hex[:8]}"
    acknowledged: list[int] = []

    async def commit_until_refused(stopping: asyncio.Event) -> None:
        async with CoordinatorClient(first.bootstrap, request_timeout_ms=5000) as client:
            offset = 0
            while True:
                offset += 1
                try:
                    await client.commit_offsets(group, {TP(TOPIC, 0): offset})
                except Exception:
                    if stopping.is_set():
                        return
                    raise
                acknowledged.append(offset)

    async def stop_while_committing() -> float:
        stopping = asyncio.Event()
        committing = asyncio.create_task(commit_until_refused(stopping))
        while len(acknowledged) < 200:
            assert not committing.done(), committing
            await asyncio.sleep(0.01)
        stopping.set()
        started = time.monotonic()
        # More than the shutdown timeout: if the server does not exit by itself, SIGKILL
        # comes after 30 s and shows in the exit status.
        await asyncio.to_thread(docker.run, "stop", "--time", "30", first.name)
        stopped_s = time.monotonic() - started
        await asyncio.wait_for(committing, 30)
        return stopped_s

    stopped_s = asyncio.run(stop_while_committing())
    state = first.state()
    assert state["ExitCode"] == 0, f"{state}\n{first.logs()}"
    assert stopped_s < SHUTDOWN_TIMEOUT_MS / 1000, stopped_s
    assert "stopped" in first.logs()

    second = start_container()
    second.wait_ready()
    fetched = asyncio.run(fetch(second.bootstrap, group))
    assert fetched[TP(TOPIC, 0)] >= acknowledged[-1], (fetched, acknowledged[-1])
    print(f"{len(acknowledged)} commits acknowledged, docker stop took {stopped_s:.2f} s")


def test_two_containers_are_a_cluster_and_one_survives_the_others_kill(
    docker: DockerDaemon, start_container: Callable[..., Container]
) -> None:
    """Two containers of one cluster split the log's partitions; after `docker kill` of one
    (SIGKILL), the other serves every group, with every acknowledged commit."""
    nodes = [start_container(COORDINATOR_NODE_ID=str(n)) for n in (1, 2)]
    for node in nodes:
        node.wait_ready(timeout=90)

    def owned(node: Container) -> list[int]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{node.metrics_port}/status", timeout=2
        ) as response:
            return list(json.load(response)["cluster"]["owned"])

    deadline = time.monotonic() + 60
    while sorted(owned(nodes[0]) + owned(nodes[1])) != list(range(LOG_PARTITIONS)) or not (
        owned(nodes[0]) and owned(nodes[1])
    ):
        assert time.monotonic() < deadline, "the two nodes never split the partitions"
        time.sleep(0.2)

    # Groups on every partition of the log, committed through whichever node FindCoordinator
    # names (the client library finds it through the first).
    groups = [f"cluster-{uuid.uuid4().hex[:8]}-{i}" for i in range(12)]

    async def commit_all(offset: int) -> None:
        async with CoordinatorClient(nodes[0].bootstrap) as client:
            for group in groups:
                await client.commit_offsets(group, {TP(TOPIC, 0): offset})

    asyncio.run(commit_all(7))
    docker.run("kill", nodes[0].name)
    killed = time.monotonic()

    async def read_all_at_survivor() -> dict[str, int]:
        """Every group's commit, read through the survivor once it owns every partition."""
        async with CoordinatorClient(nodes[1].bootstrap, request_timeout_ms=60_000) as client:
            return {
                group: (await client.fetch_offsets(group))[TP(TOPIC, 0)].offset for group in groups
            }

    deadline = time.monotonic() + 60
    while sorted(owned(nodes[1])) != list(range(LOG_PARTITIONS)):
        assert time.monotonic() < deadline, "the survivor never took the killed node's share"
        time.sleep(0.2)
    took_over_s = time.monotonic() - killed
    assert asyncio.run(read_all_at_survivor()) == dict.fromkeys(groups, 7)
    # SIGKILL: no graceful exit, the case the fencing is for.
    assert nodes[0].state()["ExitCode"] == 137
    print(f"the survivor owned every partition {took_over_s:.1f} s after the kill")


def runtime_closure() -> dict[str, str]:
    """The distributions `pip install .` brings, by canonical name, with the versions this
    environment has (installed from the same constraints file): the package's own
    requirements and theirs, no extra."""
    wanted: dict[str, str] = {}
    pending = ["coordinator-server"]
    while pending:
        name = canonicalize_name(pending.pop())
        if name in wanted:
            continue
        distribution = importlib.metadata.distribution(name)
        wanted[name] = distribution.version
        for line in distribution.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return wanted


def test_the_image_carries_only_what_the_server_runs(
    docker: DockerDaemon, coordinator_image: str
) -> None:
    """No compiler, no pip, no test or pipeline extra: the venv holds the server's own
    requirements at the constraints file's versions, the hot path compiled, and nothing
    else."""
    listed = docker.run(
        "run", "--rm", "--entrypoint", "python", coordinator_image, "-c",
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))",
    ).stdout  # fmt: skip
    installed = {canonicalize_name(name): version for name, version in json.loads(listed).items()}
    assert installed == runtime_closure()
    pins = {
        canonicalize_name(requirement.name): str(requirement.specifier).removeprefix("==")
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
        for requirement in [Requirement(line)]
    }
    # The repository's own two distributions are installed from the clone, not pinned.
    ours = {"coordinator-server", "coordinator-client"}
    assert {name: pins.get(name) for name in installed if name not in ours} == {
        name: version for name, version in installed.items() if name not in ours
    }
    tools = docker.run(
        "run", "--rm", "--entrypoint", "sh", coordinator_image, "-c",
        "for tool in gcc cc c++ make pip pip3 apt-get; do command -v $tool || true; done",
    ).stdout.split()  # fmt: skip
    # apt-get is Debian's own (the base's), not a build tool.
    assert tools == ["/usr/bin/apt-get"], tools
    # The builder compiled the hot path; the image carries the compiled modules.
    build = docker.run(
        "run", "--rm", "--entrypoint", "python", coordinator_image, "-c",
        "from coordinator_server.compiled import running_build; print(running_build())",
    ).stdout.strip()  # fmt: skip
    assert build.startswith("compiled (mypyc)"), build
