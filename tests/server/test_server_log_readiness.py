"""What the app does when its log stops for good or a partition's appends keep failing: the
partitions, /readyz, /status and the metric, in process over the in-memory log."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from wire_client import WireClient, commit_body, commit_errors, fetch_body, until

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


async def http_get(port: int, path: str) -> tuple[int, Any]:
    def get() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    status, body = await asyncio.get_running_loop().run_in_executor(None, get)
    return status, body.decode() if path == "/metrics" else json.loads(body)


def config(**overrides: Any) -> CoordinatorConfig:
    return CoordinatorConfig(
        port=0, metrics_port=0, offsets_topic_partitions=PARTITIONS, **overrides
    )


async def test_a_log_that_stops_for_good_stops_every_partition_until_a_restart() -> None:
    log = InMemoryLog(PARTITIONS)
    app = CoordinatorApp(config(), log=log)
    await app.start()
    assert app.address is not None and app.metrics_port is not None
    client = await WireClient.connect(*app.address)
    try:
        committed = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(committed) == {("t", 0): 0}
        assert (await http_get(app.metrics_port, "/readyz"))[0] == 200
        _, status = await http_get(app.metrics_port, "/status")
        assert status["log_failure"] is None

        log.stop_for_good("topic t no longer exists")

        assert app.runtime is not None
        assert set(app.runtime.partitions().values()) == {CoordinatorState.FAILED}
        code, readiness = await http_get(app.metrics_port, "/readyz")
        assert code == 503
        assert readiness["reason"] == "the log stopped: topic t no longer exists"
        _, status = await http_get(app.metrics_port, "/status")
        assert status["log_failure"] == "topic t no longer exists"
        assert set(status["partitions"].values()) == {"FAILED"}
        _, metrics = await http_get(app.metrics_port, "/metrics")
        assert "coordinator_log_failed 1.0" in metrics
        (fetched,) = (await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", None)))["groups"]
        assert fetched["error_code"] == ErrorCode.NOT_COORDINATOR
        # No partition is loaded again by itself, however long it waits.
        await asyncio.sleep(1.5)
        assert set(app.runtime.partitions().values()) == {CoordinatorState.FAILED}
        assert log.writer.end_offset(partition_for("g", PARTITIONS)) == 1
    finally:
        await client.close()
        await app.shutdown()


async def test_a_partition_whose_appends_keep_failing_is_loaded_again() -> None:
    log = InMemoryLog(PARTITIONS)
    app = CoordinatorApp(config(append_failure_timeout_ms=1), log=log)
    await app.start()
    assert app.address is not None and app.metrics_port is not None and app.runtime is not None
    runtime = app.runtime
    partition = partition_for("g", PARTITIONS)
    client = await WireClient.connect(*app.address)
    try:
        committed = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(committed) == {("t", 0): 0}
        left = asyncio.ensure_future(runtime.wait_left_active(partition))
        log.writer.inject_append_failure(partition, 19, "not enough replicas", count=2)
        for offset in (2, 3):
            await asyncio.sleep(0.01)
            await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): offset}))
        assert await asyncio.wait_for(left, 5) is CoordinatorState.FAILED
        assert (await http_get(app.metrics_port, "/readyz"))[0] == 503

        # The app loads it again (after a back-off); what was committed is still there.
        await until(lambda: runtime.partition_state(partition) is CoordinatorState.ACTIVE, 10)
        assert (await http_get(app.metrics_port, "/readyz"))[0] == 200
        (fetched,) = (await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", None)))["groups"]
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 1
    finally:
        await client.close()
        await app.shutdown()


async def test_a_stop_asked_for_while_partitions_load_ends_the_start() -> None:
    """Loads wait for the log as long as it takes; SIGTERM (request_stop) must not."""
    log = InMemoryLog(PARTITIONS)
    log.loader.pause_loads()
    app = CoordinatorApp(config(), log=log)
    starting = asyncio.ensure_future(app.start())
    try:
        await until(lambda: app.runtime is not None and len(app.runtime.partitions()) > 0)
        app.request_stop()
        await asyncio.wait_for(starting, 5)
    finally:
        await app.shutdown()
