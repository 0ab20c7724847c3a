"""Kafka's `authorizeByResourceType` (may a principal take an operation on any resource of a
type? what an idempotent producer's InitProducerId asks of the topics), with the facts of
Kafka's BaseAuthorizerTest; and the rule Kafka's authorizer log names for a decision."""

from __future__ import annotations

import pytest

from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    Action,
    AuthorizationResult,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
Op = AclOperation
USER1 = "User:user1"
USER2 = "User:user2"
HOST1 = "192.168.1.1"
HOST2 = "192.168.1.2"


def acl(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType,
    *,
    principal: str = USER1,
    host: str = HOST1,
    pattern: PatternType = LITERAL,
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern, principal, host, operation, permission)


def any_of(
    data: StandardAuthorizerData,
    operation: AclOperation,
    resource_type: ResourceType,
    *,
    principal: str = USER1,
    host: str = HOST1,
) -> bool:
    result = data.authorize_by_resource_type(principal, host, operation, resource_type)
    return result is ALLOWED


def test_an_allow_counts_until_a_deny_of_the_same_name_takes_it_back() -> None:
    data = StandardAuthorizerData()
    allow_read = acl(TOPIC, "sb1", Op.READ, ALLOW)
    deny_read = acl(TOPIC, "sb1", Op.READ, DENY)
    for _ in range(3):
        assert not any_of(data, Op.READ, TOPIC)
        data.add(allow_read)
        assert any_of(data, Op.READ, TOPIC)
        data.add(deny_read)
        assert not any_of(data, Op.READ, TOPIC)
        data.remove(deny_read)
        assert any_of(data, Op.READ, TOPIC)
        data.remove(allow_read)
    assert not any_of(data, Op.READ, TOPIC)


def test_an_unrelated_deny_does_not_dominate_an_allow() -> None:
    data = StandardAuthorizerData()
    for each in (
        acl(TOPIC, "sb1", Op.READ, DENY),
        acl(TOPIC, "sb1", Op.READ, DENY, principal=USER2),
        acl(TOPIC, "sb1", Op.WRITE, DENY, host=HOST2),
        acl(TOPIC, "sb1", Op.READ, DENY, principal=USER2, host=HOST2),
        acl(TOPIC, "sb1", Op.READ, ALLOW, host=HOST2),
        acl(TOPIC, "sb2", Op.READ, DENY, host=HOST2),
        acl(GROUP, "s", Op.READ, DENY, host=HOST2, pattern=PREFIXED),
    ):
        data.add(each)
    for resource_type in (TOPIC, GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER):
        assert not any_of(data, Op.READ, resource_type)
    assert any_of(data, Op.READ, TOPIC, host=HOST2)


def test_a_prefixed_deny_dominates_the_allows_of_the_names_it_starts() -> None:
    data = StandardAuthorizerData()
    data.add(acl(GROUP, "abcde", Op.READ, ALLOW, pattern=PREFIXED))
    assert any_of(data, Op.READ, GROUP)
    data.add(acl(GROUP, "abcd", Op.READ, DENY, pattern=PREFIXED))
    assert not any_of(data, Op.READ, GROUP)
    data.add(acl(GROUP, "abc", Op.READ, ALLOW, pattern=PREFIXED))
    assert any_of(data, Op.READ, GROUP)
    data.add(acl(GROUP, "a", Op.READ, DENY, pattern=PREFIXED))
    assert not any_of(data, Op.READ, GROUP)
    data.add(acl(GROUP, "ab", Op.READ, ALLOW, pattern=PREFIXED))
    assert not any_of(data, Op.READ, GROUP)


def test_a_literal_allow_is_dominated_by_a_prefixed_deny_that_starts_it() -> None:
    data = StandardAuthorizerData()
    data.add(acl(TOPIC, "orders-eu", Op.WRITE, ALLOW))
    assert any_of(data, Op.WRITE, TOPIC)
    data.add(acl(TOPIC, "orders-", Op.WRITE, DENY, pattern=PREFIXED))
    assert not any_of(data, Op.WRITE, TOPIC)


def test_a_wildcard_deny_dominates_every_allow() -> None:
    data = StandardAuthorizerData()
    data.add(acl(GROUP, "hello", Op.WRITE, ALLOW, pattern=PREFIXED))
    assert any_of(data, Op.WRITE, GROUP)
    data.add(acl(GROUP, "*", Op.WRITE, DENY))
    assert not any_of(data, Op.WRITE, GROUP)
    data.add(acl(GROUP, "*", Op.WRITE, ALLOW))
    assert not any_of(data, Op.WRITE, GROUP)
    data.add(acl(GROUP, "aloha", Op.WRITE, ALLOW))
    assert not any_of(data, Op.WRITE, GROUP)


def test_all_allows_and_denies_the_operation() -> None:
    data = StandardAuthorizerData()
    data.add(acl(TOPIC, "sb1", Op.WRITE, DENY))
    data.add(acl(TOPIC, "sb1", Op.ALL, ALLOW))
    assert any_of(data, Op.READ, TOPIC)
    data.add(acl(TOPIC, "sb1", Op.ALL, DENY))
    assert not any_of(data, Op.READ, TOPIC)


def test_the_wildcard_host_and_principal_apply_to_everyone() -> None:
    data = StandardAuthorizerData()
    data.add(acl(TOPIC, "sb1", Op.READ, ALLOW))
    assert any_of(data, Op.READ, TOPIC)
    data.add(acl(TOPIC, "sb1", Op.READ, DENY, host="*"))
    assert not any_of(data, Op.READ, TOPIC)
    data.add(acl(TOPIC, "sb2", Op.READ, ALLOW, principal="User:*"))
    assert not any_of(data, Op.READ, TOPIC, principal=USER2, host=HOST2)
    assert any_of(data, Op.READ, TOPIC, principal=USER2)
    data.add(acl(TOPIC, "sb2", Op.READ, DENY, principal="User:*"))
    assert not any_of(data, Op.READ, TOPIC, principal=USER2)


def test_no_allow_implies_describe_here() -> None:
    data = StandardAuthorizerData()
    data.add(acl(TOPIC, "sb1", Op.WRITE, ALLOW))
    assert any_of(data, Op.WRITE, TOPIC)
    assert not any_of(data, Op.DESCRIBE, TOPIC)


def test_a_super_user_and_allow_everyone_answer_first() -> None:
    deny_all = [
        acl(resource_type, "*", Op.ALL, DENY, principal="User:*", host="*")
        for resource_type in (TOPIC, GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
    ]
    data = StandardAuthorizerData(["User:admin"])
    for each in deny_all:
        data.add(each)
    for resource_type in (TOPIC, GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID):
        assert any_of(data, Op.READ, resource_type, principal="User:admin")
    everyone = StandardAuthorizerData(allow_everyone_if_no_acl_found=True)
    assert any_of(everyone, Op.WRITE, TOPIC)
    everyone.add(acl(TOPIC, "*", Op.READ, ALLOW, principal=USER2))
    assert not any_of(everyone, Op.WRITE, TOPIC)


@pytest.mark.parametrize("operation", [Op.ANY, Op.UNKNOWN])
def test_only_a_concrete_operation_is_asked(operation: AclOperation) -> None:
    with pytest.raises(AssertionError):
        StandardAuthorizerData().authorize_by_resource_type(USER1, HOST1, operation, TOPIC)


# The rule of a decision, as Kafka's authorizer log names it.


def test_the_rule_names_what_decided() -> None:
    data = StandardAuthorizerData(["User:admin"])
    read = Action(Op.READ, TOPIC, "orders")
    assert data.rule("User:admin", HOST1, read) == "SuperUser"
    assert data.rule(USER1, HOST1, read) == "DefaultDeny"
    assert StandardAuthorizerData(allow_everyone_if_no_acl_found=True).rule(USER1, HOST1, read) == (
        "DefaultAllow"
    )
    data.add(acl(TOPIC, "ord", Op.READ, ALLOW, pattern=PREFIXED, host="*"))
    assert data.rule(USER1, HOST1, read) == (
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=ord, "
        "patternType=PREFIXED, principal=User:user1, host=*, operation=READ, "
        "permissionType=ALLOW))"
    )
    # A resource with ACLs, none of them this principal's: denied by default, whatever
    # allow_everyone_if_no_acl_found says.
    assert data.rule(USER2, HOST1, read) == "DefaultDeny"
    data.add(acl(TOPIC, "orders", Op.ALL, DENY))
    assert data.rule(USER1, HOST1, read) == (
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, "
        "patternType=LITERAL, principal=User:user1, host=192.168.1.1, operation=ALL, "
        "permissionType=DENY))"
    )
    assert data.authorize(USER1, HOST1, read) is DENIED
