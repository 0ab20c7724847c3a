"""`coordinator-server acls` against a scripted coordinator: kafka-acls.sh's options, checks
and output, the confirmation before a removal, the server's refusals and the exit codes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from security_tool_server import RunningServer, security_server

from coordinator_protocol.api_keys import ApiKey
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.cli import main

pytestmark = pytest.mark.timeout(60)

GROUP_PATTERN = "ResourcePattern(resourceType=GROUP, name=orders, patternType=LITERAL)"
ALICE_READ = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with security_server() as running:
        yield running


def acls(server: RunningServer, *args: str) -> int:
    return main(["acls", "--bootstrap-server", server.bootstrap, *args])


def acl(
    resource_type: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern_type: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern_type, principal, host, operation, permission)


class Terminal(io.StringIO):
    """A stdin that is a terminal, with the answers typed on it."""

    def isatty(self) -> bool:
        return True


def test_add_prints_as_kafka_acls_and_creates_each_acl(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = acls(
        server, "--add", "--allow-principal", "User:alice", "--operation", "Read",
        "--operation", "describe", "--group", "orders",
    )  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == (
        f"Adding ACLs for resource `{GROUP_PATTERN}`: \n"
        f" \t{ALICE_READ}\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\n"
    )
    assert set(server.state.acls) == {
        acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.READ),
        acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.DESCRIBE),
    }
    (created,) = server.requests(ApiKey.CREATE_ACLS)
    assert created.body["creations"][0] == {
        "resource_type": 3, "resource_name": "orders", "resource_pattern_type": 3,
        "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3,
    }  # fmt: skip


def test_add_skips_and_names_an_acl_that_exists(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.state.acls.append(acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.READ))
    code = acls(
        server, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group",
        "orders",
    )  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == (
        f"Acl (pattern={GROUP_PATTERN}, entry={ALICE_READ}) already exists.\n"
    )
    assert server.requests(ApiKey.CREATE_ACLS) == []


def test_add_for_principals_hosts_and_resources_makes_every_combination(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = acls(
        server, "--add",
        "--allow-principal", "User:alice", "--allow-principal", "User:bob",
        "--allow-host", "10.0.0.1", "--deny-principal", "User:mallory",
        "--operation", "Write", "--transactional-id", "payments-",
        "--topic", "payments-", "--resource-pattern-type", "PREFIXED",
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, "
        "name=payments-, patternType=PREFIXED)`:" in out
    )
    assert "(principal=User:mallory, host=*, operation=WRITE, permissionType=DENY)" in out
    assert len(server.state.acls) == 6
    assert {a.host for a in server.state.acls if a.principal == "User:bob"} == {"10.0.0.1"}
    assert {a.resource_type for a in server.state.acls} == {
        ResourceType.TOPIC,
        ResourceType.TRANSACTIONAL_ID,
    }


def test_list_prints_each_resource_and_its_acls(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.state.acls += [
        acl(ResourceType.GROUP, "orders", "User:bob", AclOperation.DESCRIBE),
        acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.READ),
        acl(ResourceType.CLUSTER, "kafka-cluster", "User:node", AclOperation.CLUSTER_ACTION),
        acl(ResourceType.GROUP, "ord", "User:carol", AclOperation.READ,
            pattern_type=PatternType.PREFIXED),
    ]  # fmt: skip
    assert acls(server, "--list", "--group", "orders") == 0
    assert capsys.readouterr().out == (
        f"Current ACLs for resource `{GROUP_PATTERN}`:\n"
        f"\t{ALICE_READ}\n"
        "\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\n"
    )
    assert acls(server, "--list", "--group", "orders", "--resource-pattern-type", "match") == 0
    matched = capsys.readouterr().out
    assert "name=ord, patternType=PREFIXED" in matched and "User:bob" in matched
    assert acls(server, "--list") == 0
    everything = capsys.readouterr().out
    assert everything.count("Current ACLs for resource") == 3
    assert (
        "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"
        in everything
    )
    assert acls(server, "--list", "--principal", "User:alice") == 0
    assert capsys.readouterr().out == (
        "ACLs for principal `User:alice`\n"
        f"Current ACLs for resource `{GROUP_PATTERN}`:\n\t{ALICE_READ}\n\n"
    )


def test_list_as_json(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.state.acls.append(acl(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ))
    assert acls(server, "--list", "--topic", "orders", "--json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "resource_type": "TOPIC", "name": "orders", "pattern_type": "LITERAL",
            "principal": "User:alice", "host": "*", "operation": "READ",
            "permission_type": "ALLOW",
        }
    ]  # fmt: skip


def seed(server: RunningServer) -> None:
    server.state.acls += [
        acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.READ),
        acl(ResourceType.GROUP, "orders", "User:bob", AclOperation.ALL),
        acl(ResourceType.GROUP, "other", "User:bob", AclOperation.ALL),
    ]


def test_remove_with_force_removes_the_acls_named_or_all_of_the_resource(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(server)
    # The default operation is All: exactly bob's ALL ACL goes.
    assert (
        acls(server, "--remove", "--force", "--allow-principal", "User:bob", "--group", "orders")
        == 0
    )
    assert acl(ResourceType.GROUP, "orders", "User:bob", AclOperation.ALL) not in server.state.acls
    assert len(server.state.acls) == 2
    assert acls(server, "--remove", "--force", "--group", "orders", "--json") == 0
    (removed,) = json.loads(capsys.readouterr().out)["removed"]
    assert (removed["principal"], removed["operation"]) == ("User:alice", "READ")
    assert server.state.acls == [acl(ResourceType.GROUP, "other", "User:bob", AclOperation.ALL)]


def test_remove_asks_on_a_terminal_and_refuses_without_one(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(server)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert acls(server, "--remove", "--group", "orders") == 2
    captured = capsys.readouterr()
    assert "--force" in captured.err
    assert len(server.state.acls) == 3
    assert server.requests(ApiKey.DELETE_ACLS) == []

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert acls(server, "--remove", "--group", "orders") == 0
    assert capsys.readouterr().out == (
        f"Are you sure you want to delete all ACLs for resource filter `{GROUP_PATTERN}`? (y/N)\n"
    )
    assert len(server.state.acls) == 3

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    code = acls(server, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                "--group", "orders")  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == (
        "Are you sure you want to remove ACLs: \n"
        f" \t{ALICE_READ}\n"
        f" from resource filter `{GROUP_PATTERN}`? (y/N)\n"
    )
    assert len(server.state.acls) == 2


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--add", "--allow-principal", "User:a", "--group", "g", "--resource-pattern-type",
          "match"], "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
        (["--add", "--group", "g"], "You must specify one of: --allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--remove", "--force"], "You must provide at least one resource"),
        (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
         "ResourceType GROUP only supports operations [READ, DESCRIBE, DELETE, ALL]"),
        (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--group", "g"],
         "unknown operation 'Fly'"),
        (["--add", "--allow-principal", "alice", "--group", "g"], "principalType:principalName"),
        (["--list", "--allow-principal", "User:a"], "--list cannot be used with"),
        (["--add", "--principal", "User:a", "--group", "g"], "only available if --list is set"),
        (["--add", "--allow-principal", "User:a", "--cluster", "--resource-pattern-type",
          "prefixed"], "no prefixed pattern"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_with_kafka_acls_words(
    server: RunningServer, capsys: pytest.CaptureFixture[str], args: list[str], complaint: str
) -> None:
    assert acls(server, *args) == 2
    assert complaint in capsys.readouterr().err
    assert server.requests(ApiKey.CREATE_ACLS) == server.requests(ApiKey.DELETE_ACLS) == []


@pytest.mark.parametrize("actions", [[], ["--add", "--list"]])
def test_exactly_one_action_is_needed(server: RunningServer, actions: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        acls(server, *actions, "--group", "g")
    assert exited.value.code == 2


def test_a_refusal_exits_1_with_the_servers_error(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.state.refuse[ApiKey.CREATE_ACLS] = {
        "results": [{"error_code": 31, "error_message": "Cluster authorization failed."}]
    }
    code = acls(server, "--add", "--allow-principal", "User:a", "--cluster", "--operation",
                "ClusterAction")  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "CLUSTER_AUTHORIZATION_FAILED (31): Cluster authorization failed." in err
    assert err.startswith("coordinator-server acls: error: ")
    server.state.refuse[ApiKey.DESCRIBE_ACLS] = {
        "error_code": 54, "error_message": "No authorizer is configured.",
    }  # fmt: skip
    assert acls(server, "--list") == 1
    assert "SECURITY_DISABLED (54): No authorizer is configured." in capsys.readouterr().err


def test_an_unreachable_server_exits_1_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acls", "--bootstrap-server", "127.0.0.1:1", "--list"]) == 1
    assert "cannot connect to 127.0.0.1:1" in capsys.readouterr().err
