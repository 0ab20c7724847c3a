"""The request limits over real sockets, in process, on an in-memory log: ids and metadata,
groups per node, answers that would exceed `max_response_bytes`, repeated ids answered as
Kafka answers them, and sliced requests stopped at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from wire_client import WireClient, commit_body, commit_errors, fetch_body, until

from coordinator_client import CoordinatorClient, GroupMember, GroupMemberError
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import ConsumerProtocolSubscription
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


@asynccontextmanager
async def serve(log: InMemoryLog | None = None, **settings: Any) -> AsyncIterator[CoordinatorApp]:
    settings.setdefault("metrics_port", -1)
    settings.setdefault("group_initial_rebalance_delay_ms", 0)
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


def join_body(
    group: str = "g",
    *,
    member_id: str = "",
    instance: str | None = None,
    metadata: bytes | None = None,
    protocols: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    subscription = ConsumerProtocolSubscription(["t"]).encode()
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": protocols or [{"name": "range", "metadata": subscription + (metadata or b"")}],
    }


async def test_ids_longer_than_max_id_length_are_refused_with_a_message() -> None:
    async with serve(max_id_length=8) as app, connect(app) as client:
        join = await client.call(ApiKey.JOIN_GROUP, join_body("g" * 9))
        assert join["error_code"] == ErrorCode.INVALID_GROUP_ID
        assert "max_id_length 8" in join["error_message"]
        join = await client.call(ApiKey.JOIN_GROUP, join_body(instance="i" * 9))
        assert join["error_code"] == ErrorCode.INVALID_REQUEST
        assert "group_instance_id" in join["error_message"]
        protocols = [{"name": "n" * 9, "metadata": b""}]
        join = await client.call(ApiKey.JOIN_GROUP, join_body(protocols=protocols))
        assert join["error_code"] == ErrorCode.INVALID_REQUEST
        heartbeat = await client.call(
            ApiKey.HEARTBEAT, {"group_id": "g" * 9, "generation_id": 1, "member_id": "m"}
        )
        assert heartbeat["error_code"] == ErrorCode.INVALID_GROUP_ID
        assert heartbeat["error_message"]
        commit = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g" * 9, {("t", 0): 1}))
        assert commit_errors(commit) == {("t", 0): ErrorCode.INVALID_GROUP_ID}
        commit = await client.call(
            ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1, ("t" * 9, 0): 1})
        )
        assert commit_errors(commit) == {("t", 0): 0, ("t" * 9, 0): ErrorCode.INVALID_REQUEST}
        fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"t" * 9: [0]}))
        assert fetched["groups"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        found = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["g", "g" * 9]})
        codes = [(c["key"], c["error_code"]) for c in found["coordinators"]]
        assert codes == [("g", 0), ("g" * 9, ErrorCode.INVALID_GROUP_ID)]
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["g" * 9, None]})
        assert [g["error_code"] for g in described["groups"]] == [ErrorCode.INVALID_GROUP_ID] * 2


async def test_a_client_id_longer_than_max_id_length_cannot_join() -> None:
    async with serve(max_id_length=8) as app, connect(app) as client:
        # The wire client's id is "test-client": 11 characters.
        join = await client.call(ApiKey.JOIN_GROUP, join_body())
        assert join["error_code"] == ErrorCode.INVALID_REQUEST
        assert "client_id" in join["error_message"]


async def test_member_metadata_and_assignments_larger_than_the_limit_are_refused() -> None:
    async with serve(max_member_metadata_bytes=1000) as app, connect(app) as client:
        join = await client.call(ApiKey.JOIN_GROUP, join_body(instance="i", metadata=b"x" * 1000))
        assert join["error_code"] == ErrorCode.INVALID_REQUEST
        assert "max_member_metadata_bytes 1000" in join["error_message"]
        # Many small protocols count with their framing, together.
        protocols = [{"name": f"p{n}", "metadata": b""} for n in range(100)]
        join = await client.call(ApiKey.JOIN_GROUP, join_body(instance="i", protocols=protocols))
        assert join["error_code"] == ErrorCode.INVALID_REQUEST
        join = await client.call(ApiKey.JOIN_GROUP, join_body(instance="i"))
        assert join["error_code"] == 0
        sync = await client.call(
            ApiKey.SYNC_GROUP,
            {
                "group_id": "g",
                "generation_id": join["generation_id"],
                "member_id": join["member_id"],
                "group_instance_id": "i",
                "assignments": [{"member_id": join["member_id"], "assignment": b"a" * 1001}],
            },
        )
        assert sync["error_code"] == ErrorCode.INVALID_REQUEST
        assert "max_member_metadata_bytes" in sync["error_message"]


async def test_static_members_whose_metadata_would_make_the_leaders_answer_too_large() -> None:
    # The case at a smaller scale: members of 64 KiB metadata and an answer of at most
    # 1 MiB. The members that fit form the group; the others are GROUP_MAX_SIZE_REACHED.
    # The initial rebalance delay gathers every member in one generation.
    async with serve(max_response_bytes=1024 * 1024, group_initial_rebalance_delay_ms=2000) as app:
        clients = [await WireClient.connect(*app.address) for _ in range(20)]  # type: ignore[misc]
        try:
            joins = [
                client.send(ApiKey.JOIN_GROUP, join_body(instance=f"i{n}", metadata=b"x" * 65536))
                for n, client in enumerate(clients)
            ]
            answers = await asyncio.wait_for(asyncio.gather(*joins), 30)
        finally:
            for client in clients:
                await client.close()
    joined = [a for a in answers if a["error_code"] == 0]
    refused = [a for a in answers if a["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED]
    assert len(joined) + len(refused) == 20
    assert 10 <= len(joined) < 20
    assert "max_response_bytes" in refused[0]["error_message"]
    (leader,) = [a for a in joined if a["members"]]
    assert len(leader["members"]) == len(joined)


async def test_groups_of_every_partition_count_toward_max_groups() -> None:
    groups = ["a", "b", "c", "d", "e", "f"]
    assert len({partition_for(g, PARTITIONS) for g in groups[:3]}) > 1
    async with serve(max_groups=3) as app, connect(app) as client:
        for group in groups[:3]:
            answer = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): 1}))
            assert commit_errors(answer) == {("t", 0): 0}
        for group in groups[3:]:
            answer = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): 1}))
            assert commit_errors(answer) == {("t", 0): ErrorCode.POLICY_VIOLATION}
            join = await client.call(ApiKey.JOIN_GROUP, join_body(group))
            assert join["error_code"] == ErrorCode.POLICY_VIOLATION
            assert "max_groups 3" in join["error_message"]
        deleted = await client.call(ApiKey.DELETE_GROUPS, {"groups_names": ["a"]})
        assert deleted["results"] == [{"group_id": "a", "error_code": 0}]
        answer = await client.call(ApiKey.OFFSET_COMMIT, commit_body("d", {("t", 0): 1}))
        assert commit_errors(answer) == {("t", 0): 0}


async def test_repeated_ids_are_answered_each_time_in_request_order() -> None:
    async with serve() as app, connect(app) as client:
        for group in ("a", "b"):
            await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): 1}))
        names = ["b", "a", None, "x", "b", "a", "b"]
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": names})
        assert [(g["group_id"], g["error_code"]) for g in described["groups"]] == [
            ("b", 0),
            ("a", 0),
            ("", ErrorCode.INVALID_GROUP_ID),
            ("x", ErrorCode.GROUP_ID_NOT_FOUND),
            ("b", 0),
            ("a", 0),
            ("b", 0),
        ]
        deleted = await client.call(ApiKey.DELETE_GROUPS, {"groups_names": names})
        assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [
            ("b", 0),
            ("a", 0),
            ("", ErrorCode.INVALID_GROUP_ID),
            ("x", ErrorCode.GROUP_ID_NOT_FOUND),
            ("b", 0),
            ("a", 0),
            ("b", 0),
        ]
        again = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["a", "b"]})
        assert {g["error_code"] for g in again["groups"]} == {ErrorCode.GROUP_ID_NOT_FOUND}


async def test_answers_that_cannot_fit_max_response_bytes_are_message_too_large() -> None:
    async with serve(max_response_bytes=64 * 1024) as app, connect(app) as client:
        for group in ("small", "large"):
            await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): 1}))
        await client.call(
            ApiKey.OFFSET_COMMIT,
            commit_body("large", {("t", p): 1 for p in range(400)}, metadata="m" * 200),
        )
        # A group's offsets that do not fit: that group's error; the others are answered.
        fetched = await client.call(
            ApiKey.OFFSET_FETCH,
            {
                "groups": [
                    {"group_id": "large", "topics": None},
                    {"group_id": "small", "topics": None},
                ]
            },
        )
        assert [(g["group_id"], g["error_code"]) for g in fetched["groups"]] == [
            ("large", ErrorCode.MESSAGE_TOO_LARGE),
            ("small", 0),
        ]
        assert fetched["groups"][1]["topics"][0]["partitions"][0]["committed_offset"] == 1
        # A partition named a million times: refused from the request alone.
        fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("small", {"t": [0] * 10**6}))
        assert fetched["groups"][0]["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        # A request whose every item cannot fit: only the error.
        for api, body in (
            (ApiKey.DESCRIBE_GROUPS, {"groups": ["small"] * 10**5}),
            (ApiKey.DELETE_GROUPS, {"groups_names": ["small"] * 10**5}),
            (ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["small"] * 10**5}),
        ):
            answer = await client.call(api, body)
            assert answer["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, api
            assert "max_response_bytes 65536" in answer["error_message"]
        # Nothing was deleted for a DeleteGroups that could not be answered.
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["small"]})
        assert described["groups"][0]["error_code"] == 0
        left = await client.call(
            ApiKey.LEAVE_GROUP,
            {"group_id": "small", "members": [{"member_id": f"m{n}"} for n in range(2000)]},
        )
        assert left["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        deleted = await client.call(
            ApiKey.OFFSET_DELETE,
            {
                "group_id": "small",
                "topics": [{"name": "t", "partitions": [{"partition_index": 0}] * 3000}],
            },
        )
        assert deleted["error_code"] == ErrorCode.MESSAGE_TOO_LARGE


async def test_a_group_description_that_does_not_fit_is_message_too_large() -> None:
    async with serve(max_response_bytes=200 * 1024) as app, connect(app) as client:
        join = await client.call(
            ApiKey.JOIN_GROUP, join_body("big", instance="i", metadata=b"x" * 150_000)
        )
        assert join["error_code"] == 0
        sync = await client.call(
            ApiKey.SYNC_GROUP,
            {
                "group_id": "big",
                "generation_id": join["generation_id"],
                "member_id": join["member_id"],
                "group_instance_id": "i",
                "assignments": [],
            },
        )
        assert sync["error_code"] == 0
        await client.call(ApiKey.OFFSET_COMMIT, commit_body("small", {("t", 0): 1}))
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["big", "small"]})
        assert [(g["group_id"], g["error_code"]) for g in described["groups"]] == [
            ("big", 0),
            ("small", 0),
        ]
        # Twice the large group: the second does not fit.
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["big", "small", "big"]})
        assert [(g["group_id"], g["error_code"]) for g in described["groups"]] == [
            ("big", ErrorCode.MESSAGE_TOO_LARGE),
            ("small", 0),
            ("big", ErrorCode.MESSAGE_TOO_LARGE),
        ]


async def test_list_groups_whose_answer_would_be_too_large_is_message_too_large() -> None:
    async with serve(max_response_bytes=8 * 1024) as app, connect(app) as client:
        for n in range(200):
            await client.call(ApiKey.OFFSET_COMMIT, commit_body(f"group-{n}", {("t", 0): 1}))
        listed = await client.call(ApiKey.LIST_GROUPS, {})
        assert listed["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert listed["groups"] == []
        listed = await client.call(ApiKey.LIST_GROUPS, {"states_filter": ["Stable"] * 10_000})
        assert (listed["error_code"], listed["groups"]) == (0, [])


async def test_shutdown_stops_a_sliced_request_under_way() -> None:
    async with (
        serve(
            max_response_bytes=500 * 1024 * 1024,
            response_buffer_max_bytes=600 * 1024 * 1024,
            response_buffer_total_bytes=600 * 1024 * 1024,
        ) as app,
        connect(app) as client,
    ):
        pending = client.send(
            ApiKey.DESCRIBE_GROUPS, {"groups": [f"group-{n}" for n in range(500_000)]}
        )
        assert app.service is not None
        service = app.service
        await until(lambda: service.sliced_requests > 0, timeout=30)
        app.service.close()
        answer = await asyncio.wait_for(pending, 30)
        assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert service.sliced_requests == 0


async def test_a_member_refused_a_new_group_by_max_groups_ends_with_the_reason() -> None:
    async with serve(max_groups=1) as app, connect(app) as client:
        await client.call(ApiKey.OFFSET_COMMIT, commit_body("existing", {("t", 0): 1}))
        assert app.address is not None
        host, port = app.address
        async with CoordinatorClient(f"{host}:{port}", retry_backoff_ms=20) as coordinator:
            member = GroupMember(
                coordinator, "new", ["t"], partitions_for_topics={"t": 1}, retry_backoff_ms=20
            )
            await member.start()
            try:
                with pytest.raises(GroupMemberError) as ended:
                    await member.wait_for_assignment(timeout_s=10)
                assert "max_groups 1" in str(ended.value)
            finally:
                await member.close(leave_group=False)
