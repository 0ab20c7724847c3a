"""CoordinatorClient against a scripted server: pipelining, out-of-order answers,
discovery and its cache, retries with back-off, reconnects, timeouts, close, bounds and
typed errors."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from client_fake_server import FakeCoordinator, Received, commit_answer

from coordinator_client import (
    ClientClosedError,
    CloseReason,
    ConnectionClosedError,
    CoordinatorClient,
    OffsetCommitError,
    RequestTimeoutError,
    RequestTooLargeError,
)
from coordinator_client.rpc.connection import Connection
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    ErrorCode,
    IllegalGenerationError,
    InvalidRequestError,
    UnknownMemberIdError,
)
from coordinator_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)

pytestmark = pytest.mark.timeout(60)

GROUP = "orders-service"


def heartbeat(group: str = GROUP) -> HeartbeatRequest:
    return HeartbeatRequest(group_id=group, generation_id=1, member_id="m-1")


def join(group: str = GROUP) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="m-1",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


def join_answer(member_id: str = "m-1") -> dict[str, Any]:
    return {
        "error_code": 0,
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": member_id,
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


@pytest.fixture
async def server() -> AsyncIterator[FakeCoordinator]:
    async with FakeCoordinator() as fake:
        yield fake


def client_for(*servers: FakeCoordinator, **options: Any) -> CoordinatorClient:
    options.setdefault("retry_backoff_ms", 20)
    options.setdefault("retry_backoff_max_ms", 200)
    options.setdefault("request_timeout_ms", 5000)
    return CoordinatorClient(",".join(s.bootstrap for s in servers), **options)


async def test_a_parked_join_group_does_not_hold_up_a_heartbeat(server: FakeCoordinator) -> None:
    release_join = asyncio.Event()

    async def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.JOIN_GROUP:
            await release_join.wait()
            return join_answer()
        if received.api_key == ApiKey.HEARTBEAT:
            return {"error_code": 0, "error_message": None}
        return None

    server.handler = handle
    async with client_for(server) as client:
        join_task = asyncio.create_task(client.join_group(join()))
        await server.wait_for_requests(ApiKey.JOIN_GROUP)
        response = await asyncio.wait_for(client.heartbeat(heartbeat()), 2)
        assert response == HeartbeatResponse(error_code=0)
        assert not join_task.done()
        release_join.set()
        assert (await join_task).member_id == "m-1"
    # One connection carried both (plus the discovery): they were pipelined on it.
    assert server.connections == 1
    assert {r.connection for r in server.received} == {1}


async def test_answers_in_reverse_order_reach_their_callers(server: FakeCoordinator) -> None:
    count = 20

    async def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.OFFSET_FETCH:
            return None
        partition = received.body["groups"][0]["topics"][0]["partition_indexes"][0]
        # The first request sent is answered last.
        await asyncio.sleep(0.02 * (count - partition))
        return {
            "groups": [
                {
                    "group_id": GROUP,
                    "error_code": 0,
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": partition,
                                    "committed_offset": partition * 100,
                                    "committed_leader_epoch": -1,
                                    "metadata": "",
                                    "error_code": 0,
                                }
                            ],
                        }
                    ],
                }
            ]
        }

    server.handler = handle
    async with client_for(server) as client:
        await client.find_coordinator(GROUP)
        results = await asyncio.gather(
            *(client.fetch_offsets(GROUP, [TopicPartition("t", p)]) for p in range(count))
        )
    assert results == [
        {TopicPartition("t", p): OffsetAndMetadata(p * 100, "")} for p in range(count)
    ]
    assert server.max_in_flight == count
    assert server.connections == 1


async def test_the_coordinator_is_cached_per_group(server: FakeCoordinator) -> None:
    server.handler = lambda r: (
        {"error_code": 0, "error_message": None} if r.api_key == ApiKey.HEARTBEAT else None
    )
    async with client_for(server) as client:
        await asyncio.gather(*(client.heartbeat(heartbeat("a")) for _ in range(5)))
        await client.heartbeat(heartbeat("a"))
        await client.heartbeat(heartbeat("b"))
        assert client.cached_coordinator("a") is not None
    looked_up = [r.body["keys"] for r in server.requests(ApiKey.FIND_COORDINATOR)]
    # Concurrent calls for one group shared one lookup.
    assert looked_up == [["a"], ["b"]]


async def test_not_coordinator_drops_the_cache_and_finds_the_new_coordinator() -> None:
    async with FakeCoordinator(node_id=1) as old, FakeCoordinator(node_id=2) as new:
        old.handler = lambda r: (
            commit_answer(r, ErrorCode.NOT_COORDINATOR if old.coordinator_address else 0)
            if r.api_key == ApiKey.OFFSET_COMMIT
            else None
        )
        new.handler = lambda r: commit_answer(r, 0) if r.api_key == ApiKey.OFFSET_COMMIT else None
        async with client_for(old) as client:
            await client.commit_offsets(GROUP, {TopicPartition("t", 0): 5})
            assert client.cached_coordinator(GROUP).node_id == 1  # type: ignore[union-attr]
            # The group moves: the old node says NOT_COORDINATOR, discovery says node 2.
            old.coordinator_address = (new.host, new.port)
            await client.commit_offsets(GROUP, {TopicPartition("t", 0): 6})
            assert client.cached_coordinator(GROUP).port == new.port  # type: ignore[union-attr]
        assert len(old.requests(ApiKey.FIND_COORDINATOR)) == 2
        assert [r.body["topics"][0]["partitions"][0]["committed_offset"] for r in
                new.requests(ApiKey.OFFSET_COMMIT)] == [6]  # fmt: skip


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_COORDINATOR,
    ],
)
async def test_retriable_errors_are_retried_with_exponential_backoff(
    server: FakeCoordinator, code: ErrorCode
) -> None:
    failures = 4

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        if len(server.requests(ApiKey.HEARTBEAT)) <= failures:
            return {"error_code": int(code), "error_message": None}
        return {"error_code": 0, "error_message": None}

    server.handler = handle
    async with client_for(server, retry_backoff_ms=40, retry_backoff_max_ms=1000) as client:
        assert (await client.heartbeat(heartbeat())).error_code == 0
    times = [r.at for r in server.requests(ApiKey.HEARTBEAT)]
    assert len(times) == failures + 1
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for attempt, gap in enumerate(gaps):
        expected = 0.040 * 2**attempt
        # 20% jitter either way, plus slack above for a round trip on a loaded machine.
        assert expected * 0.8 - 0.005 <= gap <= expected * 1.2 + 0.25, (attempt, gaps)
    rediscoveries = len(server.requests(ApiKey.FIND_COORDINATOR)) - 1
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
        assert rediscoveries == failures
    else:
        assert rediscoveries == 0


async def test_retries_stop_at_the_deadline_with_the_last_error(server: FakeCoordinator) -> None:
    server.handler = lambda r: (
        {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "error_message": None}
        if r.api_key == ApiKey.HEARTBEAT
        else None
    )
    async with client_for(server, retry_backoff_ms=20, retry_backoff_max_ms=50) as client:
        started = time.monotonic()
        with pytest.raises(CoordinatorLoadInProgressError):
            await client.heartbeat(heartbeat(), timeout_ms=500)
        elapsed = time.monotonic() - started
    assert 0.4 <= elapsed <= 1.0
    # The back-off is capped at 50 ms (60 with jitter): about 10 attempts in 500 ms.
    assert 6 <= len(server.requests(ApiKey.HEARTBEAT)) <= 20


async def test_a_retry_still_out_at_the_deadline_ends_with_the_last_error(
    server: FakeCoordinator,
) -> None:
    """The first attempt is answered COORDINATOR_LOAD_IN_PROGRESS, the one sent again is not
    answered before the deadline: the call fails with what its attempts answered (the
    timeout of that last moment is its cause), as when the deadline passes in a back-off."""

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        if len(server.requests(ApiKey.HEARTBEAT)) == 1:
            return {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "error_message": None}
        return None

    server.handler = handle
    async with client_for(server, retry_backoff_ms=20, retry_backoff_max_ms=50) as client:
        with pytest.raises(CoordinatorLoadInProgressError) as raised:
            await client.heartbeat(heartbeat(), timeout_ms=300)
    assert isinstance(raised.value.__cause__, RequestTimeoutError)
    assert len(server.requests(ApiKey.HEARTBEAT)) == 2


async def test_a_lost_connection_is_reopened_and_the_request_sent_again(
    server: FakeCoordinator,
) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        if len(server.requests(ApiKey.HEARTBEAT)) == 1:
            # The server goes away with the request unanswered.
            server.close_all_connections()
            return None
        return {"error_code": 0, "error_message": None}

    server.handler = handle
    async with client_for(server) as client:
        assert (await client.heartbeat(heartbeat())).error_code == 0
        # Closed while idle: the next call opens a new connection by itself.
        server.close_all_connections()
        await asyncio.sleep(0.05)
        assert (await client.heartbeat(heartbeat())).error_code == 0
    assert server.connections == 3
    assert [r.connection for r in server.requests(ApiKey.HEARTBEAT)] == [1, 2, 3]


async def test_a_request_without_an_answer_times_out_and_its_late_answer_is_dropped(
    server: FakeCoordinator,
) -> None:
    late: list[Received] = []

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        if received.body["member_id"] == "slow":
            late.append(received)
            return None
        return {"error_code": 0, "error_message": None}

    server.handler = handle
    async with client_for(server) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await client.heartbeat(
                HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="slow"),
                timeout_ms=300,
            )
        assert 0.25 <= time.monotonic() - started <= 1.0
        # The answer comes after all: dropped, and the connection carries on.
        (writer,) = server.writers
        FakeCoordinator.send(writer, late[0].correlation_id, {"error_code": 0})
        assert (await client.heartbeat(heartbeat())).error_code == 0
    assert server.connections == 1


async def test_a_coordinator_that_does_not_answer_in_time_is_looked_up_again() -> None:
    # The coordinator is paused (it takes the request, never answers) while its groups move.
    async with (
        FakeCoordinator(node_id=0) as bootstrap,
        FakeCoordinator(node_id=1) as silent,
        FakeCoordinator(node_id=2) as new,
    ):
        silent.handler = lambda r: None
        new.handler = lambda r: (
            {"error_code": 0, "error_message": None} if r.api_key == ApiKey.HEARTBEAT else None
        )
        bootstrap.coordinator_address = (silent.host, silent.port)
        async with client_for(bootstrap) as client:
            with pytest.raises(RequestTimeoutError):
                await client.heartbeat(heartbeat(), timeout_ms=300)
            assert client.cached_coordinator(GROUP) is None
            bootstrap.coordinator_address = (new.host, new.port)
            assert (await client.heartbeat(heartbeat(), timeout_ms=2000)).error_code == 0
        assert len(bootstrap.requests(ApiKey.FIND_COORDINATOR)) == 2
        assert len(silent.requests(ApiKey.HEARTBEAT)) == 1
        assert len(new.requests(ApiKey.HEARTBEAT)) == 1


async def test_a_bootstrap_server_that_does_not_answer_in_time_is_skipped_next_time(
    server: FakeCoordinator,
) -> None:
    async with FakeCoordinator() as silent:
        silent.handler = lambda r: None
        server.handler = lambda r: (
            {"error_code": 0, "api_keys": []} if r.api_key == ApiKey.API_VERSIONS else None
        )
        async with client_for(silent, server) as client:
            with pytest.raises(RequestTimeoutError):
                await client.api_versions(timeout_ms=300)
            assert (await client.api_versions(timeout_ms=2000)).error_code == 0
            # And a group's coordinator is looked up there too.
            await client.find_coordinator(GROUP, timeout_ms=2000)
        assert len(silent.requests(ApiKey.API_VERSIONS)) == 1
        assert not silent.requests(ApiKey.FIND_COORDINATOR)
        assert len(server.requests(ApiKey.FIND_COORDINATOR)) == 1


async def test_close_fails_every_pending_call_at_once(server: FakeCoordinator) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.HEARTBEAT:
            return {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "error_message": None}
        return None  # JoinGroup: parked forever

    server.handler = handle
    client = client_for(server, retry_backoff_ms=5000, retry_backoff_max_ms=5000)
    parked = asyncio.create_task(client.join_group(join()))
    backing_off = asyncio.create_task(client.heartbeat(heartbeat(), timeout_ms=60_000))
    await server.wait_for_requests(ApiKey.JOIN_GROUP)
    await server.wait_for_requests(ApiKey.HEARTBEAT)
    started = time.monotonic()
    await client.close()
    for task in (parked, backing_off):
        with pytest.raises(ClientClosedError):
            await task
    assert time.monotonic() - started < 0.5
    with pytest.raises(ClientClosedError):
        await client.heartbeat(heartbeat())


async def test_server_errors_are_raised_as_their_typed_exceptions(
    server: FakeCoordinator,
) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.HEARTBEAT:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "error_message": "gone"}
        if received.api_key == ApiKey.OFFSET_DELETE:
            # A body the server could not parse: the generic answer of any API.
            return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "topics: required"}
        if received.api_key == ApiKey.OFFSET_COMMIT:
            answer = commit_answer(received, 0)
            answer["topics"][0]["partitions"][1]["error_code"] = ErrorCode.ILLEGAL_GENERATION
            return answer
        return None

    server.handler = handle
    async with client_for(server) as client:
        with pytest.raises(UnknownMemberIdError) as unknown:
            await client.heartbeat(heartbeat())
        assert unknown.value.code is ErrorCode.UNKNOWN_MEMBER_ID
        assert "gone" in str(unknown.value)
        response = await client.heartbeat(heartbeat(), raise_on_error=False)
        assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID

        with pytest.raises(InvalidRequestError, match="topics: required"):
            await client.delete_offsets(GROUP, [TopicPartition("t", 0)])

        with pytest.raises(OffsetCommitError) as failed:
            await client.commit_offsets(
                GROUP, {TopicPartition("t", 0): 1, TopicPartition("t", 1): 2}
            )
        assert list(failed.value.errors) == [TopicPartition("t", 1)]
        assert isinstance(failed.value.errors[TopicPartition("t", 1)], IllegalGenerationError)
        assert "t-1: ILLEGAL_GENERATION" in str(failed.value)


async def test_in_flight_requests_per_connection_are_bounded(server: FakeCoordinator) -> None:
    release = asyncio.Event()

    async def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        await release.wait()
        return {"error_code": 0, "error_message": None}

    server.handler = handle
    async with client_for(server, max_in_flight_requests=3) as client:
        await client.find_coordinator(GROUP)
        calls = [asyncio.create_task(client.heartbeat(heartbeat())) for _ in range(10)]
        await server.wait_for_requests(ApiKey.HEARTBEAT, 3)
        await asyncio.sleep(0.2)
        assert len(server.requests(ApiKey.HEARTBEAT)) == 3
        release.set()
        await asyncio.gather(*calls)
    assert server.max_in_flight == 3
    assert len(server.requests(ApiKey.HEARTBEAT)) == 10


async def test_frames_are_bounded_both_ways(server: FakeCoordinator) -> None:
    server.handler = lambda r: (
        {"error_code": 0, "error_message": "x" * 5000} if r.api_key == ApiKey.HEARTBEAT else None
    )
    async with client_for(server, max_frame_bytes=4096) as client:
        await client.find_coordinator(GROUP)
        big = JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\0" * 5000)],
        )
        with pytest.raises(RequestTooLargeError):
            await client.join_group(big)
        assert not server.requests(ApiKey.JOIN_GROUP)
    # An answer over the limit: the connection cannot be trusted past it.
    connection = await Connection.open(server.host, server.port, max_frame_bytes=4096)
    with pytest.raises(ConnectionClosedError) as lost:
        await connection.send(heartbeat(), HeartbeatResponse, timeout_s=5)
    assert lost.value.reason is CloseReason.OUT_OF_SYNC
    assert connection.closed
    await connection.wait_closed()


async def test_an_answer_to_an_unknown_correlation_id_closes_the_connection(
    server: FakeCoordinator,
) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.HEARTBEAT:
            return None
        if len(server.requests(ApiKey.HEARTBEAT)) == 1:
            (writer,) = server.writers
            FakeCoordinator.send(writer, received.correlation_id + 1000, {"error_code": 0})
            return None
        return {"error_code": 0, "error_message": None}

    server.handler = handle
    async with client_for(server) as client:
        # The first attempt dies with the connection; the retry, on a new one, succeeds.
        assert (await client.heartbeat(heartbeat())).error_code == 0
    assert server.connections == 2


async def test_an_unreachable_bootstrap_server_is_skipped(server: FakeCoordinator) -> None:
    async with FakeCoordinator() as gone:
        address = gone.bootstrap
    server.handler = lambda r: {"error_code": 0, "api_keys": []}
    client = CoordinatorClient(
        f"{address},{server.bootstrap}", retry_backoff_ms=10, request_timeout_ms=5000
    )
    async with client:
        versions = await client.api_versions()
    assert versions.error_code == 0
    assert server.requests(ApiKey.API_VERSIONS)


async def test_api_versions_errors_are_typed(server: FakeCoordinator) -> None:
    server.handler = lambda r: {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": []}
    async with client_for(server) as client:
        with pytest.raises(ApiError) as error:
            await client.api_versions()
    assert error.value.code is ErrorCode.UNSUPPORTED_VERSION


def test_bootstrap_strings_are_parsed() -> None:
    from coordinator_client import parse_bootstrap

    assert parse_bootstrap("a:1, b:2,[::1]:9094") == [("a", 1), ("b", 2), ("::1", 9094)]
    for bad in ("", "a", "a:b", "a:0", ":1"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)
