"""CreateAcls, DeleteAcls and DescribeAcls on the security partition's shard, with Kafka's
AclControlManager's rules (the facts of Kafka's AclControlManagerTest), its limits, and a
failed append that leaves no trace."""

from __future__ import annotations

from typing import Any

import pytest
from shard_context import ShardTestContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import (
    CreateAclsRequest,
    CreateAclsRequestCreation,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator_server.records import AclKey, new_acl_record
from coordinator_server.security.acl_control import AclsConfig
from coordinator_server.shard import ShardConfig
from coordinator_server.storage.api import AppendError

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.ALL
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def creation(
    name: str = "orders",
    *,
    resource_type: int = TOPIC,
    pattern: int = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    operation: int = READ,
    permission: int = ALLOW,
) -> CreateAclsRequestCreation:
    return CreateAclsRequestCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def deletion(**fields: Any) -> DeleteAclsRequestFilter:
    """A DeleteAcls filter; every field ANY (or None) unless given."""
    values: dict[str, Any] = {
        "resource_type_filter": ResourceType.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    values.update(fields)
    return DeleteAclsRequestFilter(**values)


def describe_request(**fields: Any) -> DescribeAclsRequest:
    return DescribeAclsRequest(**deletion(**fields).to_body())  # the same seven fields


def create(ctx: ShardTestContext, *creations: CreateAclsRequestCreation) -> list[int]:
    answer = ctx.write(lambda shard: shard.create_acls(CreateAclsRequest(creations=[*creations])))
    assert isinstance(answer, CreateAclsResponse)
    return [result.error_code for result in answer.results]


def described(ctx: ShardTestContext, **fields: Any) -> list[tuple[Any, ...]]:
    """What DescribeAcls answers at the committed offset, flattened."""
    answer = ctx.shard.describe_acls(describe_request(**fields), ctx.registry.committed_offset)
    assert answer.error_code == 0, answer
    return [
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation)
        for r in answer.resources
        for a in r.acls
    ]


@pytest.fixture
def ctx() -> ShardTestContext:
    return ShardTestContext()


def test_a_created_acl_is_written_once_and_described_once_committed(
    ctx: ShardTestContext,
) -> None:
    assert create(ctx, creation(), creation(), creation("payments")) == [0, 0, 0]
    # One record per new ACL: the one named twice is written once.
    assert [record.key for record in ctx.records_written()] == [
        AclKey(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
        AclKey(TOPIC, "payments", LITERAL, "User:alice", "*", READ, ALLOW),
    ]
    # Reads see the committed state only.
    assert described(ctx) == []
    ctx.commit()
    assert described(ctx) == [
        (TOPIC, "orders", LITERAL, "User:alice", "*", READ),
        (TOPIC, "payments", LITERAL, "User:alice", "*", READ),
    ]
    # An ACL that exists already succeeds with no record.
    written = ctx.end_offset
    assert create(ctx, creation()) == [0]
    assert ctx.end_offset == written


def test_describe_groups_the_acls_by_resource_pattern(ctx: ShardTestContext) -> None:
    create(
        ctx,
        creation("orders", principal="User:bob"),
        creation("orders"),
        creation("orders", pattern=PREFIXED),
        creation("orders", operation=WRITE, permission=DENY),
    )
    ctx.commit()
    answer = ctx.shard.describe_acls(describe_request(), ctx.end_offset)
    assert [(r.resource_name, r.pattern_type, len(r.acls)) for r in answer.resources] == [
        ("orders", LITERAL, 3),
        ("orders", PREFIXED, 1),
    ]
    first = answer.resources[0].acls
    assert [(a.principal, a.operation, a.permission_type) for a in first] == [
        ("User:alice", READ, ALLOW),
        ("User:alice", WRITE, DENY),
        ("User:bob", READ, ALLOW),
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (creation(resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
        (creation(resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (creation(resource_type=99), "Invalid resourceType UNKNOWN"),
        (creation(pattern=PatternType.MATCH), "Invalid patternType MATCH"),
        (creation(pattern=PatternType.ANY), "Invalid patternType ANY"),
        (creation(operation=AclOperation.ANY), "Invalid operation ANY"),
        (creation(operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
        (creation(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
        (creation(""), "Resource name should not be empty"),
        (creation("c", resource_type=CLUSTER), "The only valid name for the CLUSTER resource"),
        (creation(principal="alice"), "Could not parse principal"),
        (creation(principal="User:"), "Could not parse principal"),
        (creation(host=""), "Invalid empty host"),
        (creation("x" * 1025), "longer than 1024 characters"),
    ],
)
def test_an_invalid_creation_is_refused_alone(
    ctx: ShardTestContext, bad: CreateAclsRequestCreation, message: str
) -> None:
    answer = ctx.write(
        lambda shard: shard.create_acls(CreateAclsRequest(creations=[creation("a"), bad]))
    )
    assert answer.results[0].error_code == 0
    assert answer.results[1].error_code == ErrorCode.INVALID_REQUEST
    assert message in (answer.results[1].error_message or "")
    assert len(ctx.records_written()) == 1


def test_the_cluster_resource_is_named_kafka_cluster(ctx: ShardTestContext) -> None:
    assert create(ctx, creation("kafka-cluster", resource_type=CLUSTER, operation=ALL)) == [0]


def test_creations_past_max_acls_are_a_policy_violation() -> None:
    ctx = ShardTestContext(ShardConfig(acls=AclsConfig(max_acls=2)))
    assert create(ctx, creation("a"), creation("b"), creation("c"), creation("a")) == [
        0,
        0,
        ErrorCode.POLICY_VIOLATION,
        0,
    ]
    # An existing ACL is no new one: named again it still succeeds, the limit reached.
    assert create(ctx, creation("b"), creation("d")) == [0, ErrorCode.POLICY_VIOLATION]
    assert ctx.shard.managers.acls.num_acls() == 2


def test_each_filter_answers_its_acls_and_each_acl_is_tombstoned_once(
    ctx: ShardTestContext,
) -> None:
    create(
        ctx,
        creation("orders"),
        creation("orders", principal="User:bob"),
        creation("pay", pattern=PREFIXED),
        creation("g1", resource_type=GROUP),
    )
    ctx.commit()
    written = ctx.end_offset
    answer = ctx.write(
        lambda shard: shard.delete_acls(
            DeleteAclsRequest(
                filters=[
                    deletion(principal_filter="User:alice"),
                    deletion(resource_type_filter=TOPIC, resource_name_filter="orders"),
                    deletion(resource_name_filter="nothing"),
                ]
            )
        )
    )
    assert isinstance(answer, DeleteAclsResponse)
    by_filter = [
        sorted((m.resource_name, m.principal) for m in result.matching_acls)
        for result in answer.filter_results
    ]
    assert by_filter == [
        [("g1", "User:alice"), ("orders", "User:alice"), ("pay", "User:alice")],
        [("orders", "User:alice"), ("orders", "User:bob")],
        [],
    ]
    tombstoned = ctx.records_written(written)
    assert all(record.value is None for record in tombstoned)
    assert sorted((r.key.resource_name, r.key.principal) for r in tombstoned) == [  # type: ignore[union-attr]
        ("g1", "User:alice"),
        ("orders", "User:alice"),
        ("orders", "User:bob"),
        ("pay", "User:alice"),
    ]
    ctx.commit()
    assert described(ctx) == []


def test_a_match_filter_deletes_what_applies_to_the_resource(ctx: ShardTestContext) -> None:
    create(
        ctx,
        creation("orders"),
        creation("*"),
        creation("ord", pattern=PREFIXED),
        creation("other"),
    )
    answer = ctx.write(
        lambda shard: shard.delete_acls(
            DeleteAclsRequest(
                filters=[
                    deletion(
                        resource_type_filter=TOPIC,
                        resource_name_filter="orders",
                        pattern_type_filter=PatternType.MATCH,
                    )
                ]
            )
        )
    )
    (result,) = answer.filter_results
    assert sorted(m.resource_name for m in result.matching_acls) == ["*", "ord", "orders"]
    ctx.commit()
    assert [acl[1] for acl in described(ctx)] == ["other"]


@pytest.mark.parametrize(
    "fields",
    [
        {"resource_type_filter": ResourceType.UNKNOWN},
        {"pattern_type_filter": PatternType.UNKNOWN},
        {"operation": AclOperation.UNKNOWN},
        {"permission_type": AclPermissionType.UNKNOWN},
        {"operation": 77},
    ],
)
def test_a_filter_with_an_unknown_element_is_refused(
    ctx: ShardTestContext, fields: dict[str, Any]
) -> None:
    create(ctx, creation())
    answer = ctx.write(
        lambda shard: shard.delete_acls(DeleteAclsRequest(filters=[deletion(**fields), deletion()]))
    )
    refused, done = answer.filter_results
    assert refused.error_code == ErrorCode.INVALID_REQUEST and not refused.matching_acls
    assert done.error_code == 0 and len(done.matching_acls) == 1
    described_answer = ctx.shard.describe_acls(describe_request(**fields), ctx.end_offset)
    assert isinstance(described_answer, DescribeAclsResponse)
    assert described_answer.error_code == ErrorCode.INVALID_REQUEST


def test_describe_filters_as_kafka_does(ctx: ShardTestContext) -> None:
    create(
        ctx,
        creation("orders"),
        creation("orders", host="10.0.0.1"),
        creation("orders", principal="User:*"),
        creation("orders", pattern=PREFIXED),
    )
    ctx.commit()
    # A principal or host filter names exactly that principal or host.
    assert len(described(ctx, principal_filter="User:alice")) == 3
    assert len(described(ctx, principal_filter="User:*")) == 1
    assert len(described(ctx, host_filter="10.0.0.1")) == 1
    # The pattern type LITERAL (the request's default) leaves the PREFIXED one out.
    assert len(described(ctx, pattern_type_filter=LITERAL)) == 3
    assert len(described(ctx, resource_type_filter=GROUP)) == 0


def test_a_failed_append_leaves_no_acl(ctx: ShardTestContext) -> None:
    create(ctx, creation("kept"))
    ctx.commit()
    ctx.fail_append(
        lambda shard: shard.create_acls(CreateAclsRequest(creations=[creation("lost")])),
        AppendError(19, "not enough replicas"),
    )
    ctx.fail_append(
        lambda shard: shard.delete_acls(DeleteAclsRequest(filters=[deletion()])),
        AppendError(19, "not enough replicas"),
    )
    assert ctx.shard.managers.acls.num_acls() == 1
    # The latest state too: creating "lost" again writes it, deleting finds "kept".
    assert create(ctx, creation("lost")) == [0]
    assert len(ctx.records_written()) == 2
    answer = ctx.write(lambda shard: shard.delete_acls(DeleteAclsRequest(filters=[deletion()])))
    assert sorted(m.resource_name for m in answer.filter_results[0].matching_acls) == [
        "kept",
        "lost",
    ]


def test_acls_are_loaded_back_from_the_log(ctx: ShardTestContext) -> None:
    create(ctx, creation("a"), creation("b"), creation("c"))
    ctx.write(
        lambda shard: shard.delete_acls(
            DeleteAclsRequest(filters=[deletion(resource_name_filter="b")])
        )
    )
    ctx.reload()
    assert [acl[1] for acl in described(ctx)] == ["a", "c"]


def test_a_record_of_an_acl_no_acl_can_be_is_left_out_of_a_load(ctx: ShardTestContext) -> None:
    ctx.replay_all([new_acl_record(AclKey(TOPIC, "t", PatternType.MATCH, "User:a", "*", 3, 3))])
    ctx.reload()
    assert described(ctx) == []
