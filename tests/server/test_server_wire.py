"""The server over real sockets, in process, on an in-memory log the test controls."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgpack
import msgspec
import pytest
from wire_client import (
    WireClient,
    commit_body,
    commit_errors,
    fetch_body,
    fetched_offsets,
    hung_up,
    until,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.framing import encode_frame
from coordinator_protocol.hashing import partition_for
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


@asynccontextmanager
async def serve(log: InMemoryLog | None = None, **settings: Any) -> AsyncIterator[CoordinatorApp]:
    settings.setdefault("metrics_port", -1)
    config = CoordinatorConfig(port=0, offsets_topic_partitions=PARTITIONS, **settings)
    app = CoordinatorApp(config, log=log or InMemoryLog(PARTITIONS))
    await app.start()
    try:
        yield app
    finally:
        await app.shutdown()


@asynccontextmanager
async def connect(app: CoordinatorApp) -> AsyncIterator[WireClient]:
    assert app.address is not None
    client = await WireClient.connect(*app.address)
    try:
        yield client
    finally:
        await client.close()


async def test_api_versions_lists_the_served_apis() -> None:
    async with serve() as app, connect(app) as client:
        response = await client.call(ApiKey.API_VERSIONS, {})
        assert response["error_code"] == 0
        assert response["server_name"] == "coordinator-server"
        served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
        assert served[ApiKey.OFFSET_COMMIT] == (0, 0)
        assert {ApiKey.API_VERSIONS, ApiKey.FIND_COORDINATOR, ApiKey.OFFSET_FETCH} <= set(served)


async def test_api_versions_at_an_unsupported_version_still_lists_the_api_keys() -> None:
    async with serve() as app, connect(app) as client:
        response = await client.call(ApiKey.API_VERSIONS, {}, api_version=7)
        assert response["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert response["api_keys"]


async def test_unsupported_api_and_version_answer_unsupported_version_and_keep_the_connection() -> (
    None
):
    async with serve() as app, connect(app) as client:
        unknown = await client.call(1234, {})
        assert unknown["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert unknown["error_message"]
        wrong_version = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {}), api_version=9)
        assert wrong_version["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert (await client.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0


async def test_an_api_of_the_contract_the_service_does_not_serve_is_unsupported_and_unlisted() -> (
    None
):
    # The transaction APIs are in the contract before the service answers them: until it
    # does, they are neither listed in ApiVersions nor answered, even with a valid body.
    async with serve() as app, connect(app) as client:
        versions = await client.call(ApiKey.API_VERSIONS, {})
        listed = {k["api_key"] for k in versions["api_keys"]}
        for api_key, body in [
            (ApiKey.INIT_PRODUCER_ID, {"transaction_timeout_ms": 1000}),
            (ApiKey.LIST_TRANSACTIONS, {}),
            (ApiKey.WRITE_TXN_MARKERS, {"markers": []}),
        ]:
            assert api_key not in listed
            answer = await client.call(api_key, body)
            assert answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION, api_key
        # An invalid body of an API not served is still a bad request first.
        invalid = await client.call(ApiKey.END_TXN, {"committed": "yes"})
        assert invalid["error_code"] == ErrorCode.INVALID_REQUEST


async def test_without_a_data_cluster_the_consumer_group_protocols_apis_are_not_served() -> None:
    # ConsumerGroupHeartbeat and ConsumerGroupDescribe need the data cluster's topics: a
    # node without them leaves both out, and a client that reads ApiVersions keeps to the
    # classic protocol.
    async with serve() as app, connect(app) as client:
        versions = await client.call(ApiKey.API_VERSIONS, {})
        listed = {k["api_key"] for k in versions["api_keys"]}
        for api_key, body in [
            (
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                {"group_id": "g", "member_id": "m", "member_epoch": 0},
            ),
            (ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": ["g"]}),
        ]:
            assert api_key not in listed
            answer = await client.call(api_key, body)
            assert answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION, api_key
        assert (await client.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0


async def test_find_coordinator_answers_with_this_node_and_rejects_transactions() -> None:
    async with serve() as app, connect(app) as client:
        assert app.address is not None
        response = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["a", "b"]})
        assert [
            (c["key"], c["host"], c["port"], c["error_code"]) for c in response["coordinators"]
        ] == [
            ("a", "127.0.0.1", app.address[1], 0),
            ("b", "127.0.0.1", app.address[1], 0),
        ]
        txn = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": ["tx"]})
        assert txn["coordinators"][0]["error_code"] == ErrorCode.INVALID_REQUEST


async def test_invalid_bodies_get_invalid_request_and_the_connection_stays_open() -> None:
    async with serve() as app, connect(app) as client:
        not_a_map = await client.call(ApiKey.OFFSET_COMMIT, [1, 2, 3])
        assert not_a_map["error_code"] == ErrorCode.INVALID_REQUEST
        wrong_type = await client.call(
            ApiKey.OFFSET_COMMIT,
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": "0"}]}]},
        )
        assert wrong_type["error_code"] == ErrorCode.INVALID_REQUEST
        assert "partition_index" in wrong_type["error_message"]
        out_of_range = await client.call(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": "g",
                "topics": [
                    {"name": "t", "partitions": [{"partition_index": 2**31, "committed_offset": 1}]}
                ],
            },
        )
        assert out_of_range["error_code"] == ErrorCode.INVALID_REQUEST
        ok = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(ok) == {("t", 0): 0}


async def test_an_ext_value_is_judged_by_the_body_validation() -> None:
    ext = msgspec.msgpack.Ext(5, b"x")
    timestamp = msgspec.msgpack.Ext(-1, b"\x00\x00\x00\x01")
    async with serve() as app, connect(app) as client:
        # Where the schema reads it, an ext value is a wrong type.
        body = commit_body("g", {("t", 0): 1})
        body["topics"][0]["partitions"][0]["committed_offset"] = timestamp
        wrong_type = await client.call(ApiKey.OFFSET_COMMIT, body)
        assert wrong_type["error_code"] == ErrorCode.INVALID_REQUEST
        assert "committed_offset" in wrong_type["error_message"]
        # Inside an unknown field it is ignored, like everything an unknown field holds.
        body = commit_body("g", {("t", 0): 1})
        body["future_field"] = {"at": timestamp, "items": [ext], 7: ext}
        ok = await client.call(ApiKey.OFFSET_COMMIT, body)
        assert commit_errors(ok) == {("t", 0): 0}


async def test_a_str_that_is_not_utf8_closes_the_connection() -> None:
    async with serve() as app, connect(app) as good, connect(app) as bad:
        payload = (
            b"\x95\x0c\x00\x01\xc0"  # Heartbeat, version 0, correlation id 1, no client id
            b"\x83\xa8group_id\xa2\xff\xfe"  # a group id that is not UTF-8
            b"\xadgeneration_id\x01\xa9member_id\xa1m"
        )
        bad.send_raw(struct.pack(">I", len(payload)) + payload)
        assert await bad.closed_by_server()
        assert app.server is not None and app.server.state.metrics.malformed_frames == 1
        assert (await good.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0


async def test_missing_group_id_is_invalid_group_id() -> None:
    async with serve() as app, connect(app) as client:
        body = commit_body("g", {("t", 0): 1})
        body["group_id"] = None
        assert commit_errors(await client.call(ApiKey.OFFSET_COMMIT, body)) == {
            ("t", 0): ErrorCode.INVALID_GROUP_ID
        }
        fetch = fetch_body("g", None)
        del fetch["groups"][0]["group_id"]
        response = await client.call(ApiKey.OFFSET_FETCH, fetch)
        assert response["groups"][0]["error_code"] == ErrorCode.INVALID_GROUP_ID


async def test_commit_then_fetch_round_trip_with_metadata_limit_per_partition() -> None:
    async with serve(offset_metadata_max_bytes=8) as app, connect(app) as client:
        body = commit_body("g", {("t", 0): 5, ("t", 1): 6})
        body["topics"][0]["partitions"][1]["committed_metadata"] = "x" * 9
        assert commit_errors(await client.call(ApiKey.OFFSET_COMMIT, body)) == {
            ("t", 0): 0,
            ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE,
        }
        response = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0, 1]}))
        assert fetched_offsets(response) == {("t", 0): 5, ("t", 1): -1}
        everything = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", None))
        assert fetched_offsets(everything) == {("t", 0): 5}


async def test_fetch_while_a_commit_waits_for_the_high_watermark_sees_the_previous_value() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    async with serve(log) as app, connect(app) as client:
        first = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        await until(lambda: log.writer.end_offset(partition) == 1)
        assert not first.done()
        log.writer.commit(partition)
        assert commit_errors(await first) == {("t", 0): 0}

        second = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 2}))
        await until(lambda: log.writer.end_offset(partition) == 2)
        # Sent after the commit on the same connection, answered before it: out of order.
        fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0]}))
        assert fetched_offsets(fetched) == {("t", 0): 1}
        assert not second.done()
        log.writer.commit(partition)
        assert commit_errors(await second) == {("t", 0): 0}
        assert client.arrival_order[-2:] == [3, 2]
        fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0]}))
        assert fetched_offsets(fetched) == {("t", 0): 2}


async def test_require_stable_fetch_waits_for_pending_commits() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    async with serve(log) as app, connect(app) as client:
        commit = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 7}))
        await until(lambda: log.writer.end_offset(partition) == 1)
        stable = client.send(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0]}, require_stable=True))
        await asyncio.sleep(0.05)
        assert not stable.done()
        log.writer.commit(partition)
        assert commit_errors(await commit) == {("t", 0): 0}
        assert fetched_offsets(await stable) == {("t", 0): 7}


async def test_failed_append_is_answered_with_an_error_and_leaves_no_trace() -> None:
    log = InMemoryLog(PARTITIONS)
    partition = partition_for("g", PARTITIONS)
    async with serve(log) as app, connect(app) as client:
        await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        log.writer.inject_append_failure(partition, ErrorCode.NOT_ENOUGH_REPLICAS)
        failed = await client.call(
            ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 2, ("u", 3): 9})
        )
        assert commit_errors(failed) == {
            ("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ("u", 3): ErrorCode.COORDINATOR_NOT_AVAILABLE,
        }
        for require_stable in (False, True):
            fetched = await client.call(
                ApiKey.OFFSET_FETCH, fetch_body("g", None, require_stable=require_stable)
            )
            assert fetched_offsets(fetched) == {("t", 0): 1}
        ok = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 3}))
        assert commit_errors(ok) == {("t", 0): 0}


@pytest.mark.parametrize(
    ("append_error", "answered"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    ],
)
async def test_append_errors_are_mapped_as_kafka_maps_them(
    append_error: ErrorCode, answered: ErrorCode
) -> None:
    log = InMemoryLog(PARTITIONS)
    async with serve(log) as app, connect(app) as client:
        log.writer.inject_append_failure(partition_for("g", PARTITIONS), append_error)
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(response) == {("t", 0): answered}


async def test_a_write_the_log_does_not_commit_in_time_is_coordinator_not_available() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    async with serve(log, offsets_commit_timeout_ms=100) as app, connect(app) as client:
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(response) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}


async def test_oversized_frame_closes_only_its_own_connection() -> None:
    async with serve(max_frame_bytes=1024) as app, connect(app) as good, connect(app) as bad:
        # A frame of exactly the maximum is accepted.
        body = commit_body("g", {("t", 0): 1})
        payload = b""
        for pad in range(1024):
            # Pad the client id until the payload is exactly 1024 bytes.
            payload = msgpack.packb([ApiKey.OFFSET_COMMIT, 0, 1, "x" * pad, body])
            if len(payload) >= 1024:
                break
        assert len(payload) == 1024, len(payload)
        bad.send_raw(struct.pack(">I", len(payload)) + payload)
        await until(lambda: 1 in bad.arrival_order)
        # One byte more is not.
        bad.send_raw(struct.pack(">I", 1025) + b"\x00" * 1025)
        assert await bad.closed_by_server()
        response = await good.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0]}))
        assert fetched_offsets(response) == {("t", 0): 1}


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x02\xc1\xc1",  # 0xc1 is never valid msgpack
        b"\x00\x00\x00\x01\x01",  # an int, not a header array
        b"\x00\x00\x00\x04\x93\x01\x02\x03",  # an array of 3, not 5
        struct.pack(">I", 6) + msgpack.packb([18, 0, 2**40, None, {}]),  # correlation id > int32
    ],
)
async def test_broken_framing_or_header_closes_the_connection(garbage: bytes) -> None:
    async with serve() as app, connect(app) as good, connect(app) as bad:
        bad.send_raw(struct.pack(">I", len(garbage) - 4) + garbage[4:])
        assert await bad.closed_by_server()
        assert (await good.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0


async def test_connections_over_the_limit_are_refused() -> None:
    async with serve(max_connections=2) as app, connect(app) as first, connect(app) as second:
        assert (await first.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
        assert (await second.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
        async with connect(app) as third:
            assert await third.closed_by_server()
        assert app.server is not None
        assert app.server.state.metrics.connections_refused == {"max_connections": 1}
        await second.close()
        await until(lambda: app.server is not None and len(app.server.state.connections) == 1)
        async with connect(app) as fourth:
            assert (await fourth.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0


async def test_in_flight_requests_per_connection_are_bounded() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    async with serve(log, max_inflight_requests=2) as app, connect(app) as client:
        commits = [
            client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): i})) for i in range(6)
        ]
        await until(lambda: log.writer.end_offset(partition) == 2)
        await asyncio.sleep(0.05)
        # Two commits were taken; the other four wait in the socket and the server's buffer.
        assert log.writer.end_offset(partition) == 2
        while not all(c.done() for c in commits):
            log.writer.commit(partition)
            await asyncio.sleep(0.005)
        assert all(commit_errors(c.result()) == {("t", 0): 0} for c in commits)
        fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t": [0]}))
        assert fetched_offsets(fetched) == {("t", 0): 5}


async def test_shutdown_answers_the_requests_in_flight() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    config = CoordinatorConfig(port=0, offsets_topic_partitions=PARTITIONS, metrics_port=-1)
    app = CoordinatorApp(config, log=log)
    await app.start()
    assert app.address is not None
    client = await WireClient.connect(*app.address)
    try:
        commit = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        await until(lambda: log.writer.end_offset(partition) == 1)
        stopping = asyncio.create_task(app.shutdown())
        await asyncio.sleep(0.05)
        assert not stopping.done() and not commit.done()
        log.writer.commit(partition)
        assert commit_errors(await commit) == {("t", 0): 0}
        await asyncio.wait_for(stopping, 10)
        assert await client.closed_by_server()
    finally:
        await client.close()


async def test_a_partition_that_fails_to_load_is_retried_until_it_loads() -> None:
    log = InMemoryLog(PARTITIONS)
    partition = partition_for("g", PARTITIONS)
    log.loader.inject_load_failure(partition, count=2)
    async with serve(log) as app, connect(app) as client:
        assert app.runtime is not None
        assert app.runtime.partition_state(partition) is not None
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        assert commit_errors(response) == {("t", 0): 0}


async def test_in_flight_request_bytes_per_connection_are_bounded() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    async with serve(log, max_inflight_request_bytes=1024) as app, connect(app) as client:
        # Each over 600 bytes: one alone is taken, a second would pass 1024 in flight.
        commits = [
            client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): i}, "m" * 600))
            for i in range(4)
        ]
        await until(lambda: log.writer.end_offset(partition) >= 1)
        await asyncio.sleep(0.05)
        assert log.writer.end_offset(partition) == 1
        while not all(c.done() for c in commits):
            log.writer.commit(partition)
            await asyncio.sleep(0.005)
        assert all(commit_errors(c.result()) == {("t", 0): 0} for c in commits)
        assert log.writer.end_offset(partition) == 4


async def commit_many_offsets(
    log: InMemoryLog, client: WireClient, group: str, count: int
) -> dict[tuple[str, int], int]:
    """`count` offsets committed for `group` (the log committing by hand or not)."""
    offsets = {("t", i): i for i in range(count)}
    commit = client.send(ApiKey.OFFSET_COMMIT, commit_body(group, offsets))
    while not commit.done():
        log.writer.commit(partition_for(group, PARTITIONS))
        await asyncio.sleep(0.005)
    assert set(commit_errors(commit.result()).values()) == {0}
    return offsets


async def test_a_client_that_reads_late_gets_every_answer() -> None:
    """Past response_buffer_bytes the server stops answering a connection, and goes on
    when the client reads: nothing is lost or stuck on the way."""
    async with serve(response_buffer_bytes=100_000) as app, connect(app) as client:
        offsets = await commit_many_offsets(InMemoryLog(PARTITIONS), client, "g", 2000)
        transport = client.writer.transport
        transport.pause_reading()
        # 100 answers of about 160 KB: 16 MB, far past what the server holds for a client.
        fetches = [client.send(ApiKey.OFFSET_FETCH, fetch_body("g", None)) for _ in range(100)]
        await asyncio.sleep(0.5)
        assert not any(f.done() for f in fetches)
        transport.resume_reading()
        for fetch in fetches:
            assert fetched_offsets(await asyncio.wait_for(fetch, 30)) == offsets
        assert app.server is not None
        assert sum(app.server.state.metrics.connections_closed.values()) == 0


async def test_answers_past_response_buffer_max_bytes_close_the_connection() -> None:
    """Answers that complete together for a client that does not read (here 100 commits of
    1,000 partitions each, parked until the log commits) are bounded by
    response_buffer_max_bytes: past it the connection is closed, and the others are served."""
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    settings = {
        "response_buffer_bytes": 10_000,
        "max_response_bytes": 50_000,
        "response_buffer_max_bytes": 60_000,
    }
    async with serve(log, **settings) as app, connect(app) as client:
        assert app.server is not None and app.address is not None
        end = log.writer.end_offset(partition)
        pending = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        await until(lambda: log.writer.end_offset(partition) > end)
        hog = socket.socket()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(hog, app.address)
            big_commit = commit_body("g", {("t", p): 1 for p in range(1000)})
            await loop.sock_sendall(
                hog,
                b"".join(
                    encode_frame(
                        encode_request(RequestHeader(ApiKey.OFFSET_COMMIT, 0, i, "hog"), big_commit)
                    )
                    for i in range(100)
                ),
            )
            # The 100 commits and the first one.
            await until(
                lambda: app.server is not None and app.server.state.requests_in_flight() == 101
            )
            log.writer.commit(partition)
            assert commit_errors(await pending) == {("t", 0): 0}
            await until(lambda: hung_up(hog))
            assert app.server.state.metrics.connections_closed == {"response_buffer_full": 1}
            assert (await client.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
        finally:
            hog.close()


async def test_a_request_in_flight_keeps_its_connection_from_idling_out() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    async with serve(log, connections_max_idle_ms=300) as app, connect(app) as client:
        assert app.server is not None
        closed = app.server.state.metrics.connections_closed
        commit = client.send(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        await until(lambda: log.writer.end_offset(partition) == 1)
        # Parked for three idle timeouts: busy, not idle.
        await asyncio.sleep(1)
        log.writer.commit(partition)
        assert commit_errors(await commit) == {("t", 0): 0}
        assert closed["idle"] == 0
        # Then idle: closed once the timeout passes from its last activity.
        assert await client.closed_by_server(timeout=10)
        assert closed == {"idle": 1}


async def test_a_frame_the_server_holds_back_is_not_timed_out() -> None:
    """The frame timeout is for clients that do not send; a frame that waits because the
    server stopped reading (here: max_inflight_requests) has its clock started again."""
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("g", PARTITIONS)
    settings = {"frame_read_timeout_ms": 200, "max_inflight_requests": 1}
    async with serve(log, **settings) as app, connect(app) as client:
        assert app.server is not None

        def frame(correlation_id: int, api_key: int, body: Any) -> bytes:
            header = RequestHeader(api_key, 0, correlation_id, "test-client")
            return encode_frame(encode_request(header, body))

        commit = frame(98, ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
        versions = frame(99, ApiKey.API_VERSIONS, {})
        # In one read: a commit the log holds, a frame that waits for room behind it, and
        # the start of another.
        client.send_raw(commit + versions + versions[:3])
        await until(lambda: log.writer.end_offset(partition) == 1)
        await asyncio.sleep(1)
        assert client.arrival_order == []
        log.writer.commit(partition)
        await until(lambda: client.arrival_order == [98, 99])
        # The rest of the frame, once the server reads again: answered, never timed out.
        client.send_raw(versions[3:])
        await until(lambda: client.arrival_order == [98, 99, 99])
        assert app.server.state.metrics.connections_closed == {}
