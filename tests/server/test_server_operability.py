"""Metrics, health and status endpoints, and JSON logs, against a real workload."""

from __future__ import annotations

import asyncio
import json
import struct
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess, sqlite_args
from wire_client import WireClient, commit_body, fetch_body

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.records import encode_record, new_offset_commit_record
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    def get() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    return await asyncio.get_running_loop().run_in_executor(None, get)


async def scrape(port: int) -> dict[str, float]:
    """Every sample as 'name{labels}' -> value."""
    status, body = await http_get(port, "/metrics")
    assert status == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    wanted = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        value
        for key, value in samples.items()
        if key.split("{", 1)[0] == name and all(w in key for w in wanted)
    )


async def settled(future: asyncio.Future[dict[str, Any]], clock: ManualClock) -> dict[str, Any]:
    """Wait for a response whose operation needs the (manual) clock to move, e.g. a join
    phase that ends on its timer."""
    for _ in range(500):
        if future.done():
            return future.result()
        clock.advance(10)
        await asyncio.sleep(0.005)
    raise AssertionError("no response")


async def form_group(client: WireClient, group: str, clock: ManualClock) -> None:
    join = {
        "group_id": group,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ConsumerProtocolSubscription(["t"]).encode()}],
    }
    first = await client.call(ApiKey.JOIN_GROUP, join)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    join["member_id"] = first["member_id"]
    joined = await settled(client.send(ApiKey.JOIN_GROUP, join), clock)
    assert joined["error_code"] == 0, joined
    assignment = ConsumerProtocolAssignment([TopicPartitions("t", [0])]).encode()
    synced = await client.call(
        ApiKey.SYNC_GROUP,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "assignments": [{"member_id": joined["member_id"], "assignment": assignment}],
        },
    )
    assert synced["error_code"] == 0, synced


async def test_every_metric_family_moves_under_a_real_workload() -> None:
    log = InMemoryLog(PARTITIONS)
    # Something to load at start-up.
    await log.writer.append(
        0, [encode_record(new_offset_commit_record("old", "t", 0, 1, -1, "", 0))]
    )
    clock = ManualClock(start_ms=1_700_000_000_000)
    config = CoordinatorConfig(
        port=0,
        metrics_port=0,
        offsets_topic_partitions=PARTITIONS,
        max_connections=3,
        group_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=1000,
    )
    app = CoordinatorApp(config, log=log, clock=clock)
    await app.start()
    assert app.address is not None and app.metrics_port is not None
    try:
        before = await scrape(app.metrics_port)
        client = await WireClient.connect(*app.address)
        for i in range(20):
            await client.call(ApiKey.OFFSET_COMMIT, commit_body("simple", {("t", i % 3): i}))
        await client.call(ApiKey.OFFSET_FETCH, fetch_body("simple", None))
        await client.call(ApiKey.OFFSET_COMMIT, [1, 2])  # INVALID_REQUEST
        log.writer.inject_append_failure(partition_for("doomed", PARTITIONS), 19)
        await client.call(ApiKey.OFFSET_COMMIT, commit_body("doomed", {("t", 0): 1}))
        await form_group(client, "members", clock)
        formed = await scrape(app.metrics_port)
        assert total(formed, "coordinator_groups", state="Stable") == 1
        # Every state has its series, 0 included.
        assert total(formed, "coordinator_groups", state="Dead") == 0
        assert "coordinator_groups{state=PreparingRebalance}" in formed
        assert total(formed, "coordinator_group_members") == 1
        # A broken frame and a refused connection.
        broken = await WireClient.connect(*app.address)
        broken.send_raw(struct.pack(">I", 2) + b"\xc1\xc1")
        assert await broken.closed_by_server()
        extra = [await WireClient.connect(*app.address) for _ in range(3)]
        assert await extra[-1].closed_by_server()
        # Offsets of the memberless group expire once retention passes.
        clock.advance(60_000 + 1_000)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if total(await scrape(app.metrics_port), "coordinator_offsets_expired_total") > 0:
                break
        after = await scrape(app.metrics_port)

        def moved(name: str, **labels: str) -> None:
            assert total(after, name, **labels) > total(before, name, **labels), name

        moved("coordinator_requests_total", api="OffsetCommit", error="NONE")
        moved("coordinator_requests_total", error="INVALID_REQUEST")
        moved("coordinator_requests_total", api="OffsetCommit", error="COORDINATOR_NOT_AVAILABLE")
        moved("coordinator_request_duration_seconds_count", api="OffsetCommit")
        moved("coordinator_request_duration_seconds_count", api="JoinGroup")
        assert total(after, "coordinator_connections_open") >= 1
        moved("coordinator_connections_refused_total")
        moved("coordinator_malformed_frames_total")
        moved("coordinator_rebalances_total")
        moved("coordinator_rebalance_duration_seconds_count")
        moved("coordinator_offset_commits_total")
        moved("coordinator_offsets_expired_total")
        assert total(after, "coordinator_partitions", state="ACTIVE") == PARTITIONS
        assert total(after, "coordinator_partition_load_duration_seconds_count") == PARTITIONS
        assert total(after, "coordinator_partition_load_records_total") == 1
        moved("coordinator_event_queue_time_seconds_count")
        moved("coordinator_event_processing_time_seconds_count")
        # "simple"'s three and "old"'s one, until retention removed them.
        assert total(formed, "coordinator_committed_offsets") == 3 + 1
        assert total(after, "coordinator_committed_offsets") < 3 + 1
        moved("coordinator_write_batch_records_count")
        moved("coordinator_write_batch_bytes_sum")
        moved("coordinator_append_duration_seconds_count")
        moved("coordinator_append_failures_total")
        assert "coordinator_event_queue_depth{}" in after
        assert any(k.startswith("coordinator_uncommitted_offsets{partition=") for k in after)
        assert "coordinator_requests_in_flight{}" in after
        for key in after:
            assert "group" not in key.split("{", 1)[1] and "member" not in key.split("{", 1)[1]
        for connection in [client, broken, *extra]:
            await connection.close()
    finally:
        await app.shutdown()


async def test_health_readiness_and_status_follow_the_partitions() -> None:
    log = InMemoryLog(PARTITIONS)
    log.loader.pause_loads()
    config = CoordinatorConfig(port=0, metrics_port=0, offsets_topic_partitions=PARTITIONS)
    app = CoordinatorApp(config, log=log)
    starting = asyncio.create_task(app.start())
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if app.metrics_port:
                break
        assert app.metrics_port
        assert await http_get(app.metrics_port, "/healthz") == (200, b"ok\n")
        status, body = await http_get(app.metrics_port, "/readyz")
        assert status == 503
        assert json.loads(body)["not_active"]
        log.loader.resume_loads()
        await asyncio.wait_for(starting, 10)
        status, body = await http_get(app.metrics_port, "/readyz")
        assert status == 200, body
        status, body = await http_get(app.metrics_port, "/status")
        report: dict[str, Any] = json.loads(body)
        assert report["version"]
        assert report["partitions_by_state"] == {"ACTIVE": PARTITIONS}
        assert report["uptime_s"] >= 0
        assert "groups_by_state" in report
        transactions = report["transactions"]
        assert (transactions["served"], transactions["reason"]) == (
            False,
            "the embedded log has no Kafka cluster",
        )
        assert (transactions["transactional_ids"], transactions["by_state"]) == (0, {})
        assert (await http_get(app.metrics_port, "/nope"))[0] == 404
    finally:
        log.loader.resume_loads()
        if not starting.done():
            starting.cancel()
        await app.shutdown()


async def test_json_logs_carry_the_partition(tmp_path: Path) -> None:
    args = sqlite_args(tmp_path, "--log-format", "json", "--log-level", "DEBUG")
    with ServerProcess(args) as server:
        status, _ = await http_get(server.metrics_port, "/healthz")
        assert status == 200
    lines = [json.loads(line) for line in server.lines if line.startswith("{")]
    assert lines and len(lines) == len([line for line in server.lines if line.strip()])
    ready = [line for line in lines if "ready on" in line["message"]]
    assert len(ready) == 1 and ready[0]["level"] == "INFO"
    about_partitions = [line for line in lines if "partition" in line]
    assert {line["partition"] for line in about_partitions} >= set(range(8))


async def test_the_server_exports_exactly_the_families_the_dashboard_and_alerts_use() -> None:
    """deploy/ (dashboard, alerts, README) is checked against one list of names; this checks
    that list against what a running server really exports."""
    from deploy.metric_names import EXPORTED_METRICS, PROCESS_METRICS

    config = CoordinatorConfig(port=0, metrics_port=0, offsets_topic_partitions=PARTITIONS)
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
    try:
        assert app.metrics_port is not None
        status, body = await http_get(app.metrics_port, "/metrics")
        assert status == 200
        exported = {}
        for family in text_string_to_metric_families(body.decode()):
            # The parser drops a counter's `_total` from the family name; PromQL keeps it.
            name = family.name + "_total" if family.type == "counter" else family.name
            labels = {
                label
                for sample in family.samples
                for label in sample.labels
                if label not in ("le", "quantile")
            }
            exported[name] = (family.type, labels)
        expected = {m.name: (m.type, set(m.labels)) for m in (*EXPORTED_METRICS, *PROCESS_METRICS)}
        assert set(exported) == set(expected)
        for name, (kind, labels) in expected.items():
            assert exported[name][0] == kind, name
            # A family with no samples yet shows no labels; any it shows must be declared.
            assert exported[name][1] <= labels, name
    finally:
        await app.shutdown()
