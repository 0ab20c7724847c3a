"""The bench's raw connections to our server, secured by `--command-config`: SASL (and TLS)
run on a protocol of their own before the bench's protocol takes the transport, so the
measured loops send nothing before the exchange ends; the pipeline's audit reads the same
file."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from client_fake_server import FakeCoordinator, FakeSasl, Received
from server_process import ServerProcess

from coordinator_client import (
    ClientSecurity,
    ClientSecurityError,
    CoordinatorClient,
    OffsetCommitError,
)
from coordinator_client.rpc.security import Password
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from coordinator_protocol.security import DescribeAclsRequest
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator_server.tools.bench import add_parser as add_bench_parser
from coordinator_server.tools.bench import main as bench_main
from coordinator_server.tools.bench.brokers import BenchApacheKafka, SaslListener
from coordinator_server.tools.bench.ours import (
    ClosedLoop,
    RequestTemplate,
    WireConnection,
    check_ours,
    parse_ours,
)
from coordinator_server.tools.bench.peer_sasl import open_kafka_secured
from coordinator_server.tools.bench.runner import ALL, check_targets, comparisons
from coordinator_server.tools.bench.security import (
    BENCH_USER,
    BenchCredentials,
    peer_broker_config,
    serve_args,
    set_up_ours,
    set_up_peer,
)
from coordinator_server.tools.bench.security import check_args as check_security_args
from coordinator_server.tools.bench.stats import LoadResult
from coordinator_server.tools.bench.targets import (
    TOPIC,
    CommitSpec,
    OursTarget,
    PeerTarget,
    parse_address,
)
from coordinator_server.tools.pipeline.cli import _coordinator_security

pytestmark = pytest.mark.timeout(60)

USERS = {"bench": "bench-secret"}


def scram(password: str = USERS["bench"]) -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="bench",
        sasl_password=Password(password),
    )


def answer(received: Received) -> dict[str, Any] | None:
    if received.api_key == ApiKey.HEARTBEAT:
        return {"error_code": 0, "error_message": None}
    return None


async def test_the_setup_connections_and_the_loops_authenticate_first() -> None:
    sasl = FakeSasl(users=USERS)
    async with FakeCoordinator(answer, sasl=sasl) as server:
        target = await OursTarget.connect(server.bootstrap, connections=2, security=scram())
        try:
            assert await target.heartbeat(0, "g", 1, "m") == 0
        finally:
            await target.close()
        result = LoadResult()
        loop = await ClosedLoop.open(
            server.host,
            server.port,
            [RequestTemplate(12, {"group_id": "g", "generation_id": 1, "member_id": "m"})],
            4,
            result,
            parse_ours,
            check_ours,
            scram(),
        )
        loop.measuring = True
        loop.start()
        await asyncio.sleep(0.2)
        loop.stop()
        await asyncio.wait_for(loop.done, 5)
        loop.close()
    assert result.requests > 0 and result.errors == 0
    assert len(sasl.sessions) == 3
    assert {session.principal for session in sasl.sessions.values()} == {"User:bench"}
    assert sasl.violations == []


async def test_a_refused_login_fails_the_connection() -> None:
    async with FakeCoordinator(answer, sasl=FakeSasl(users=USERS)) as server:
        with pytest.raises(SaslAuthenticationFailedError):
            await WireConnection.open(server.host, server.port, scram("wrong"))
    assert server.requests(ApiKey.HEARTBEAT) == []


def test_a_command_config_that_cannot_be_used_stops_the_bench_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bench.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    assert bench_main(argparse.Namespace(command_config=str(config))) == 2
    assert "GSSAPI" in capsys.readouterr().err


def test_the_audit_reads_the_command_config(tmp_path: Path) -> None:
    config = tmp_path / "audit.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=auditor\nsasl.password=audit-secret\n"
    )
    security = _coordinator_security(argparse.Namespace(command_config=str(config)))
    assert security is not None and security.sasl_username == "auditor"
    assert _coordinator_security(argparse.Namespace(command_config=None)) is None
    config.write_text("ssl.keystore.password=audit-secret\n")
    with pytest.raises(ValueError, match=r"ssl\.keystore\.password") as caught:
        _coordinator_security(argparse.Namespace(command_config=str(config)))
    assert "audit-secret" not in str(caught.value)
    assert isinstance(caught.value, ValueError) and not isinstance(
        caught.value, ClientSecurityError
    )


# `--security`: both sides secured by the bench itself, measured beside themselves without


def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_security_reads_a_comma_list_of_modes_each_once() -> None:
    assert bench_args("commits").security is None
    assert bench_args("commits", "--security", "scram-acls").security == ["scram-acls"]
    both = bench_args("heartbeats", "--security", "none, scram-acls,none")
    assert both.security == ["none", "scram-acls"]
    for wrong in ("tls", "", "none,plain"):
        with pytest.raises(SystemExit) as exited:
            bench_args("commits", "--security", wrong)
        assert exited.value.code == 2


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["transactions"], "not transactions"),
        (["all"], "not load"),
        (["commits", "--nodes", "2"], "--nodes"),
        (["commits", "--bootstrap", "127.0.0.1:1"], "--bootstrap"),
        (["commits", "--command-config", "bench.properties"], "--command-config"),
        (["commits", "--peer-bootstrap", "127.0.0.1:1"], "--peer-bootstrap"),
        (["commits", "--peer", "--bootstrap-servers", "127.0.0.1:1"], "--bootstrap-servers"),
        (["commits", "--peer", "--broker", "tansu"], "--broker kafka"),
    ],
)
def test_what_scram_acls_cannot_measure_is_refused_before_anything_starts(
    argv: list[str], words: str
) -> None:
    args = bench_args(*argv, "--security", "none,scram-acls")
    scenarios = list(ALL) if args.scenario == "all" else [args.scenario]
    with pytest.raises(SystemExit) as refused:
        check_security_args(args, scenarios)
    assert words in str(refused.value)
    # Without scram-acls, the bench runs as it did.
    check_security_args(bench_args(*argv), scenarios)


def measured(target: str, mode: str, rate: float, cpu: float) -> dict[str, Any]:
    return {
        "target": target,
        "security": mode,
        "inflight": 64,
        "requests_per_s": rate,
        "p99_ms": 2.0,
        "core_cpu_us": cpu,
    }


def test_each_side_gets_what_security_cost_it_and_ours_a_goal_of_5_percent() -> None:
    by_target = {
        ("ours", "none"): measured("ours", "none", 10_000.0, 100.0),
        ("peer", "none"): measured("peer", "none", 5_000.0, 200.0),
        ("ours", "scram-acls"): measured("ours", "scram-acls", 9_600.0, 104.0),
        ("peer", "scram-acls"): measured("peer", "scram-acls", 4_000.0, 250.0),
    }
    ratios = comparisons(by_target, ["requests_per_s", "core_cpu_us"], ["none", "scram-acls"])
    assert [(row["target"], row["security"]) for row in ratios] == [
        ("ours/peer", "none"),
        ("ours/peer", "scram-acls"),
        ("ours", "scram-acls/none"),
        ("peer", "scram-acls/none"),
    ]
    assert ratios[1]["requests_per_s"] == 2.4
    assert (ratios[2]["requests_per_s"], ratios[2]["core_cpu_us"]) == (0.96, 1.04)
    assert (ratios[3]["requests_per_s"], ratios[3]["core_cpu_us"]) == (0.8, 1.25)
    assert all(row["inflight"] == 64 for row in ratios)

    checks = check_targets({"commits": [*by_target.values(), *ratios]}, "Apache Kafka")
    goals = {check["target"]: check["met"] for check in checks}
    at_64 = "commits at 64 in flight"
    assert goals[f"{at_64}: SCRAM and ACLs cost our server at most 5 % of its rate"]
    assert goals[f"{at_64}: CPU time a commit on the core at most 5 % more with SCRAM and ACLs"]
    # The goals against the peer hold under each mode, each saying which.
    assert "commits at 64 in flight (scram-acls): at least the rate of Apache Kafka" in goals
    assert "commits at 64 in flight: at least the rate of Apache Kafka" in goals


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, BenchCredentials]]:
    credentials = BenchCredentials()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    args = ["--port", "0", "--data-dir", str(data_dir), *serve_args(tmp_path, credentials)]
    with ServerProcess(args) as running:
        yield running, credentials


async def test_the_set_up_lets_the_bench_principal_in_where_a_tenant_is_and_no_further(
    secured_server: tuple[ServerProcess, BenchCredentials], tmp_path: Path
) -> None:
    server, credentials = secured_server
    assert (tmp_path / "plain-users").stat().st_mode & 0o777 == 0o600
    address = f"{server.host}:{server.port}"
    await set_up_ours(address, credentials, timeout_s=30)
    async with CoordinatorClient(
        address, security=credentials.bench, request_timeout_ms=10_000
    ) as client:
        await client.commit_offsets("bench-commits-1", {TopicPartition(TOPIC, 0): 5})
        with pytest.raises(GroupAuthorizationFailedError):
            await client.commit_offsets("payments", {TopicPartition(TOPIC, 0): 5})
        with pytest.raises(OffsetCommitError) as refused:
            await client.commit_offsets("bench-commits-1", {TopicPartition("payments", 0): 5})
        assert {type(error) for error in refused.value.errors.values()} == {
            TopicAuthorizationFailedError
        }
        # Not a super user: the ACL APIs need the cluster's DESCRIBE.
        with pytest.raises(ClusterAuthorizationFailedError):
            await client.describe_acls(
                DescribeAclsRequest(
                    resource_type_filter=ResourceType.ANY,
                    pattern_type_filter=PatternType.ANY,
                    operation=AclOperation.ANY,
                    permission_type=AclPermissionType.ANY,
                )
            )
    # The measured loops log in the same way: every commit answered, none refused.
    target = await OursTarget.connect(address, connections=2, security=credentials.bench)
    try:
        run = await target.commit_loop(
            [CommitSpec(f"bench-commits-{i}", "", -1, TOPIC, 3) for i in range(4)],
            inflight=8,
            connections=2,
            warmup_s=0.1,
            duration_s=0.3,
        )
    finally:
        await target.close()
    assert run.result.requests > 0 and run.result.errors == 0, run.result.error_codes


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_peer_broker_authenticates_the_loops_and_holds_them_to_the_same_acls() -> None:
    credentials = BenchCredentials()
    broker = BenchApacheKafka(
        None,
        4,
        "512m",
        SaslListener(BENCH_USER, credentials.bench_password, peer_broker_config()),
    )
    await asyncio.to_thread(broker.start)
    try:
        await set_up_peer(broker.bootstrap, timeout_s=60)
        peer = await PeerTarget.connect(
            broker.sasl_bootstrap, 3, security=credentials.bench, admin_address=broker.bootstrap
        )
        try:
            groups = [f"bench-commits-{i}" for i in range(4)]
            await peer.ready(groups)
            run = await peer.commit_loop(
                [CommitSpec(group, "", -1, TOPIC, 3) for group in groups],
                inflight=4,
                connections=2,
                warmup_s=0.1,
                duration_s=0.3,
            )
            assert run.result.requests > 0 and run.result.errors == 0, run.result.error_codes
            # Outside the tenant's prefix, Kafka's authorizer refuses the same principal.
            assert (
                await peer.heartbeat(0, "payments", 1, "m") == ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
        finally:
            await peer.close()
        host, port = parse_address(broker.sasl_bootstrap)
        wrong = ClientSecurity(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=BENCH_USER,
            sasl_password=Password("not-the-password"),
        )
        with pytest.raises(SaslAuthenticationFailedError):
            await open_kafka_secured(asyncio.Protocol, host, port, wrong)
    finally:
        await asyncio.to_thread(broker.stop)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_short_run_measures_each_side_with_and_without_security() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "bench", "commits", "--peer",
            "--security", "none,scram-acls", "--groups", "2", "--partitions", "3",
            "--inflight", "8", "--runs", "1", "--duration", "1", "--warmup", "0.2",
            "--jit-warmup", "0.2", "--no-pin", "--json",
        ],
        capture_output=True, text=True, timeout=380, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    document = json.loads(completed.stdout)
    assert document["settings"]["security"] == ["none", "scram-acls"]
    assert set(document["security"]["scram-acls"]) == {"ours", "peer"}
    assert "SCRAM-SHA-512 as User:bench" in document["security"]["scram-acls"]["peer"]
    roles = {process["role"] for process in document["processes"]}
    assert roles == {"log broker", "server", "peer broker", "secured server", "secured peer broker"}
    rows = {(row["target"], row["security"]): row for row in document["results"]["commits"]}
    for side in ("ours", "peer"):
        for mode in ("none", "scram-acls"):
            row = rows[side, mode]
            assert row["requests"] > 0 and row["errors"] == 0, row.get("error_codes")
        assert rows[side, "scram-acls/none"]["requests_per_s"] > 0
    assert rows["ours/peer", "scram-acls"]["requests_per_s"] > 0
    goals = [check["target"] for check in document["targets"]]
    # 8 in flight is not the 64: no goal of 64 in flight is checked.
    assert goals == []
