"""CoordinatorClient against a real server process: every API of the contract through its
typed method and helpers, typed errors as the server sends them, TLS, and a reconnect
after the server is killed and restarted."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from client_servers import FAST_GROUPS, sqlite_server, write_self_signed_certificate
from kafka_broker import free_port
from server_process import ServerProcess, sqlite_args

from coordinator_client import CoordinatorClient, OffsetCommitError
from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from coordinator_protocol.consumer import ConsumerProtocolSubscription
from coordinator_protocol.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)
from coordinator_protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    LeaveGroupRequestMember,
    ListGroupsRequest,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)

pytestmark = pytest.mark.timeout(60)

GROUP_APIS = [
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
    ApiKey.API_VERSIONS,
    ApiKey.DELETE_GROUPS,
    ApiKey.OFFSET_DELETE,
    ApiKey.DESCRIBE_CLUSTER,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with sqlite_server(tmp_path_factory.mktemp("data")) as process:
        yield process


def client_of(server: ServerProcess, **options: object) -> CoordinatorClient:
    return CoordinatorClient(f"{server.host}:{server.port}", **options)  # type: ignore[arg-type]


def join_request(group: str, member_id: str = "", **fields: object) -> JoinGroupRequest:
    values: dict[str, object] = {
        "group_id": group,
        "session_timeout_ms": 5000,
        "rebalance_timeout_ms": 5000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [
            JoinGroupRequestProtocol(
                name="range", metadata=ConsumerProtocolSubscription(["orders"]).encode()
            )
        ],
    }
    values.update(fields)
    return JoinGroupRequest(**values)


async def test_simple_commits_fetches_and_deletes(server: ServerProcess) -> None:
    group = "client-offsets"
    t0, t1, u0 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("u", 0)
    async with client_of(server) as client:
        versions = await client.api_versions()
        listed = {k.api_key for k in versions.api_keys}
        # Every API listed is in the contract, and every group API is listed (the contract's
        # transaction APIs are listed once the server serves them).
        assert listed <= {int(k) for k in SUPPORTED_VERSIONS}
        assert {int(k) for k in GROUP_APIS} <= listed
        node = await client.find_coordinator(group)
        assert (node.host, node.port) == (server.host, server.port)

        await client.commit_offsets(group, {t0: 10, t1: OffsetAndMetadata(20, "meta"), u0: 5})
        assert await client.fetch_offsets(group) == {
            t0: OffsetAndMetadata(10, ""),
            t1: OffsetAndMetadata(20, "meta"),
            u0: OffsetAndMetadata(5, ""),
        }
        # A partition without a commit is left out.
        assert await client.fetch_offsets(group, [t1, TopicPartition("orders", 9)]) == {
            t1: OffsetAndMetadata(20, "meta")
        }
        listed = {g.group_id: g for g in await client.list_all_groups()}
        assert listed[group].group_state == "Empty"
        assert listed[group].group_type == "classic"
        assert (await client.describe_group(group)).group_state == "Empty"

        await client.delete_offsets(group, [u0])
        assert u0 not in await client.fetch_offsets(group)
        await client.delete_group(group)
        assert await client.fetch_offsets(group) == {}
        with pytest.raises(GroupIdNotFoundError):
            await client.describe_group(group)
        with pytest.raises(GroupIdNotFoundError):
            await client.delete_group(group)


async def test_raw_typed_methods_for_the_group_apis(server: ServerProcess) -> None:
    group = "client-raw"
    async with client_of(server) as client:
        with pytest.raises(MemberIdRequiredError):
            await client.join_group(join_request(group))
        first = await client.join_group(join_request(group), raise_on_error=False)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        joined = await client.join_group(join_request(group, first.member_id))
        assert joined.generation_id == 1 and joined.leader == first.member_id
        synced = await client.sync_group(
            SyncGroupRequest(
                group_id=group,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"\x80")
                ],
            )
        )
        assert synced.assignment == b"\x80"
        beat = await client.heartbeat(
            HeartbeatRequest(group_id=group, generation_id=1, member_id=joined.member_id)
        )
        assert beat.error_code == 0

        described = await client.describe_groups(DescribeGroupsRequest(groups=[group, "nope"]))
        assert [g.error_code for g in described.groups] == [0, ErrorCode.GROUP_ID_NOT_FOUND]
        assert described.groups[0].group_state == "Stable"
        assert [m.member_id for m in described.groups[0].members] == [joined.member_id]
        stable = await client.list_groups(ListGroupsRequest(states_filter=["Stable"]))
        assert group in {g.group_id for g in stable.groups}
        fetched = await client.offset_fetch(
            OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(group_id=group),
                    OffsetFetchRequestGroup(group_id="x"),
                ]
            )
        )
        assert [g.group_id for g in fetched.groups] == [group, "x"]
        coordinators = await client.find_coordinator_raw(FindCoordinatorRequest(keys=[group, "x"]))
        assert [c.key for c in coordinators.coordinators] == [group, "x"]

        with pytest.raises(NonEmptyGroupError):
            await client.delete_group(group)
        deleted = await client.delete_groups(DeleteGroupsRequest(groups_names=[group]))
        assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP

        left = await client.leave_group(
            LeaveGroupRequest(
                group_id=group, members=[LeaveGroupRequestMember(member_id=joined.member_id)]
            )
        )
        assert left.members[0].error_code == 0
        assert (await client.describe_group(group)).group_state == "Empty"
        with pytest.raises(UnknownMemberIdError):
            await client.heartbeat(
                HeartbeatRequest(group_id=group, generation_id=1, member_id=joined.member_id)
            )
        with pytest.raises(InvalidSessionTimeoutError):
            await client.join_group(join_request(group, session_timeout_ms=10))


async def test_commit_errors_name_their_partitions(server: ServerProcess) -> None:
    group = "client-commit-errors"
    async with client_of(server) as client:
        first = await client.join_group(join_request(group), raise_on_error=False)
        await client.join_group(join_request(group, first.member_id))
        with pytest.raises(OffsetCommitError) as failed:
            await client.commit_offsets(
                group,
                {TopicPartition("orders", 0): 1, TopicPartition("orders", 1): 2},
                generation=7,
                member_id=first.member_id,
            )
        assert set(failed.value.errors) == {
            TopicPartition("orders", 0),
            TopicPartition("orders", 1),
        }
        assert {e.code for e in failed.value.errors.values()} == {ErrorCode.ILLEGAL_GENERATION}
        await client.leave(group, [LeaveGroupRequestMember(member_id=first.member_id)])


async def test_tls(tmp_path: Path) -> None:
    cert, key = write_self_signed_certificate(tmp_path)
    with sqlite_server(
        tmp_path / "data", "--tls-certfile", str(cert), "--tls-keyfile", str(key)
    ) as server:
        async with client_of(server, ssl_cafile=str(cert)) as client:
            await client.commit_offsets("tls-group", {TopicPartition("t", 0): 3})
            assert await client.fetch_offsets("tls-group") == {
                TopicPartition("t", 0): OffsetAndMetadata(3, "")
            }
        # The certificate names "localhost" too.
        context = ssl.create_default_context(cafile=str(cert))
        async with client_of(
            server, ssl_context=context, ssl_server_hostname="localhost"
        ) as client:
            assert (await client.api_versions()).error_code == 0
        # A client that does not trust the certificate is refused, not retried forever.
        async with client_of(server, ssl_context=ssl.create_default_context()) as client:
            with pytest.raises(ssl.SSLCertVerificationError):
                await client.api_versions(timeout_ms=5000)


async def test_the_client_reconnects_to_a_restarted_server(tmp_path: Path) -> None:
    port = free_port()
    args = sqlite_args(tmp_path, *FAST_GROUPS)
    args[args.index("--port") + 1] = str(port)
    group = "client-restart"
    async with CoordinatorClient(f"127.0.0.1:{port}", retry_backoff_ms=50) as client:
        with ServerProcess(args) as first:
            await client.commit_offsets(group, {TopicPartition("t", 0): 42})
            first.kill()
        # While the server is down the call keeps trying to connect, within its deadline.
        fetch = asyncio.create_task(client.fetch_offsets(group, timeout_ms=30_000))
        await asyncio.sleep(0.5)
        assert not fetch.done()
        second = ServerProcess(args)
        await asyncio.to_thread(second.start)
        try:
            fetched = await fetch
        finally:
            second.kill()
        assert fetched == {TopicPartition("t", 0): OffsetAndMetadata(42, "")}


async def test_requests_from_many_tasks_share_one_connection(server: ServerProcess) -> None:
    group = "client-pipeline"
    async with client_of(server) as client:
        await asyncio.gather(
            *(client.commit_offsets(group, {TopicPartition("t", p % 8): p}) for p in range(400))
        )
        assert client.open_connections == 1
        offsets = await client.fetch_offsets(group)
    assert {tp.partition for tp in offsets} == set(range(8))
