"""`serve --workers N` as an operator runs it, on Apache Kafka: one command starts two
workers, each a node of the cluster on its own port; one ready line names both; groups are
spread over them by FindCoordinator; a worker killed with -9 is started again and its groups
are served again with their offsets; SIGTERM stops every worker, and a parent killed with
-9 leaves none behind. Without the Kafka log, more than one worker is refused at the start."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WORKER = re.compile(r"worker (?P<index>\d+) \(node (?P<node>\d+), pid (?P<pid>\d+)\) serves")
NODE = re.compile(r"node (?P<node>\d+) at (?P<host>[0-9.]+):(?P<port>\d+)")
GROUPS = [f"group-{n}" for n in range(12)]


def worker_args(broker: ApacheKafkaBroker, log_topic: str) -> list[str]:
    return [
        "--port", "0",
        "--workers", "2",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--group-initial-rebalance-delay-ms", "0",
        # A worker killed is noticed by Kafka within its session.
        "--cluster-session-timeout-ms", "6000",
        "--cluster-heartbeat-interval-ms", "1000",
        *broker.coordinator_args,
    ]  # fmt: skip


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not serving.
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(")")[-1].split()[0] == "Z")


async def until(what: str, condition: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.25)


class Nodes:
    """Connections to the workers, by address, and each group sent to its coordinator at the
    address FindCoordinator gives (a worker started again with `--port 0` has a new one)."""

    def __init__(self, addresses: dict[int, tuple[str, int]]) -> None:
        self.addresses = addresses
        self.clients: dict[tuple[str, int], WireClient] = {}

    async def client(self, address: tuple[str, int]) -> WireClient:
        client = self.clients.get(address)
        if client is None or client.closed:
            if client is not None:
                await client.close()
            client = self.clients[address] = await WireClient.connect(*address)
        return client

    async def drop(self, address: tuple[str, int]) -> None:
        client = self.clients.pop(address, None)
        if client is not None:
            await client.close()

    async def coordinator(self, group: str) -> tuple[int, tuple[str, int]] | None:
        for address in list(self.addresses.values()):
            try:
                client = await self.client(address)
                response = await client.call(
                    ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": [group]}, timeout=5
                )
            except (OSError, TimeoutError):
                await self.drop(address)
                continue
            (answer,) = response["coordinators"]
            if answer["error_code"] == ErrorCode.NONE:
                node = int(answer["node_id"])
                self.addresses[node] = (answer["host"], int(answer["port"]))
                return node, self.addresses[node]
        return None

    async def call(self, group: str, api_key: int, body: Any) -> dict[str, Any] | None:
        found = await self.coordinator(group)
        if found is None:
            return None
        _, address = found
        try:
            client = await self.client(address)
            return await client.call(api_key, body, timeout=5)
        except (OSError, TimeoutError):
            await self.drop(address)
            return None

    async def close(self) -> None:
        for address in list(self.clients):
            await self.drop(address)


async def commit(nodes: Nodes, group: str, offset: int) -> bool:
    answer = await nodes.call(group, ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): offset}))
    return answer is not None and set(commit_errors(answer).values()) == {0}


async def test_workers_share_the_log_restart_one_killed_and_stop_together(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    server = ServerProcess(worker_args(kafka_broker, f"__workers_{uuid.uuid4().hex[:8]}"))
    server.start(timeout=120)
    nodes: Nodes | None = None
    pids: dict[int, int] = {}
    try:
        ready = next(line for line in server.lines if "ready on" in line)
        assert "with 2 workers" in ready, ready
        addresses = {int(m["node"]): (m["host"], int(m["port"])) for m in NODE.finditer(ready)}
        assert sorted(addresses) == [0, 1]
        assert len({port for _, port in addresses.values()}) == 2
        pids = {int(m["index"]): int(m["pid"]) for m in WORKER.finditer(server.output())}
        assert sorted(pids) == [0, 1]

        nodes = Nodes(addresses)
        # The cluster's assignment spreads the log's partitions, so the groups, over both.
        owners = await until(
            "both workers owning groups",
            lambda: _owners_if_spread(nodes),
            60,
        )
        for group in GROUPS:
            assert await commit(nodes, group, 10), group

        # Worker 1 is node 1 (node ids count up from --node-id, 0).
        killed = 1
        os.kill(pids[killed], 9)
        await until(
            "the killed worker started again",
            lambda: _logged(server, f"worker {killed} (node 1) exited"),
            30,
        )
        # Every group served again (by the other worker while the killed one is out, then
        # by whichever owns it), its offset kept.
        for group in GROUPS:
            await until(f"{group} committing again", lambda g=group: commit(nodes, g, 11), 90)

        async def fetched(group: str) -> int | None:
            answer = await nodes.call(group, ApiKey.OFFSET_FETCH, fetch_body(group, {"t": [0]}))
            return None if answer is None else fetched_offsets(answer).get(("t", 0))

        for group in GROUPS:
            assert await fetched(group) == 11, group
        assert len(set(owners.values())) == 2
        again = re.compile(rf"worker {killed} \(node 1, pid (?P<pid>\d+)\) serves again on")
        restarted = await until(
            "the restarted worker serving",
            lambda: _found(again, server),
            60,
        )
        assert int(restarted["pid"]) != pids[killed]
    finally:
        if nodes is not None:
            await nodes.close()
        if server.proc is not None and server.proc.poll() is None:
            assert server.terminate(60) == 0
        workers = [int(m["pid"]) for m in WORKER.finditer(server.output())]
    for pid in workers:
        await until(f"worker pid {pid} stopped", lambda p=pid: _not(alive(p)), 30)


async def _owners_if_spread(nodes: Nodes) -> dict[str, int] | None:
    owners: dict[str, int] = {}
    for group in GROUPS:
        found = await nodes.coordinator(group)
        owners[group] = -1 if found is None else found[0]
    return owners if set(owners.values()) == {0, 1} else None


async def _logged(server: ServerProcess, text: str) -> bool:
    return text in server.output()


async def _found(pattern: re.Pattern[str], server: ServerProcess) -> re.Match[str] | None:
    return pattern.search(server.output())


async def _not(value: bool) -> bool:
    return not value


async def test_a_parent_killed_leaves_no_worker_behind(kafka_broker: ApacheKafkaBroker) -> None:
    server = ServerProcess(worker_args(kafka_broker, f"__workers_{uuid.uuid4().hex[:8]}"))
    server.start(timeout=120)
    workers = [int(m["pid"]) for m in WORKER.finditer(server.output())]
    assert len(workers) == 2
    server.kill()
    for pid in workers:
        await until(f"worker pid {pid} stopped", lambda p=pid: _not(alive(p)), 30)


def test_more_than_one_worker_needs_the_kafka_log(tmp_path: Path) -> None:
    started = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--port", "0",
         "--data-dir", str(tmp_path), "--workers", "2", "--metrics-port", "-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 1
    assert "workers above 1 need the Kafka log" in started.stderr
