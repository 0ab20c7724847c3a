"""Which ACLs a filter selects, as Kafka's AclBindingFilter does for DescribeAcls and
DeleteAcls (the facts of Kafka's ResourcePatternFilterTest and AccessControlEntryFilterTest)."""

from __future__ import annotations

import pytest

from coordinator_server.authorizer.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData

GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
MATCH = PatternType.MATCH
ANY = PatternType.ANY


def acl(
    name: str,
    pattern: PatternType = LITERAL,
    *,
    resource_type: ResourceType = GROUP,
    principal: str = "User:alice",
    host: str = "*",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern, principal, host, operation, permission)


@pytest.mark.parametrize(
    ("acl_name", "acl_pattern", "filter_name", "filter_pattern", "selected"),
    [
        # No name: every ACL of the type and pattern type.
        ("a", LITERAL, None, ANY, True),
        ("a", PREFIXED, None, LITERAL, False),
        # ANY with a name: that exact name, whatever the pattern type.
        ("team-", PREFIXED, "team-", ANY, True),
        ("team-", PREFIXED, "team-a", ANY, False),
        ("*", LITERAL, "g", ANY, False),
        # A pattern type with a name: that exact pattern.
        ("g", LITERAL, "g", LITERAL, True),
        ("g", LITERAL, "g", PREFIXED, False),
        # MATCH: what applies to the resource named.
        ("g", LITERAL, "g", MATCH, True),
        ("*", LITERAL, "g", MATCH, True),
        ("team-", PREFIXED, "team-a", MATCH, True),
        ("team-a", LITERAL, "team-", MATCH, False),
        ("team-ab", PREFIXED, "team-a", MATCH, False),
        ("g", LITERAL, "g2", MATCH, False),
    ],
)
def test_resource_patterns_select_as_kafkas_filters_do(
    acl_name: str,
    acl_pattern: PatternType,
    filter_name: str | None,
    filter_pattern: PatternType,
    selected: bool,
) -> None:
    selector = AclBindingFilter(GROUP, filter_name, filter_pattern)
    assert selector.matches(acl(acl_name, acl_pattern)) is selected


def test_the_resource_type_selects_unless_any() -> None:
    topic_acl = acl("orders", resource_type=TOPIC)
    assert not AclBindingFilter(GROUP).matches(topic_acl)
    assert AclBindingFilter(TOPIC).matches(topic_acl)
    assert AclBindingFilter().matches(topic_acl)


def test_entries_select_by_principal_host_operation_and_permission_exactly() -> None:
    entry = acl("g", principal="User:*", host="10.0.0.1", operation=AclOperation.WRITE)
    assert AclBindingFilter(principal="User:*").matches(entry)
    assert not AclBindingFilter(principal="User:alice").matches(entry)
    assert not AclBindingFilter(host="*").matches(entry)
    assert AclBindingFilter(host="10.0.0.1").matches(entry)
    assert not AclBindingFilter(operation=AclOperation.ALL).matches(entry)
    assert AclBindingFilter(operation=AclOperation.WRITE).matches(entry)
    assert not AclBindingFilter(permission=AclPermissionType.DENY).matches(entry)
    assert AclBindingFilter(permission=AclPermissionType.ALLOW).matches(entry)


def test_the_authorizers_acls_are_listed_by_filter() -> None:
    data = StandardAuthorizerData()
    acls = [acl("g"), acl("team-", PREFIXED), acl("*"), acl("orders", resource_type=TOPIC)]
    for each in acls:
        data.add(each)
    assert set(data.matching(AclBindingFilter())) == set(acls)
    assert set(data.matching(AclBindingFilter(GROUP, "team-x", MATCH))) == {acls[1], acls[2]}
    assert data.matching(AclBindingFilter(TOPIC, "orders", LITERAL)) == [acls[3]]
