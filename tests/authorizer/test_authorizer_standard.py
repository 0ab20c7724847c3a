"""Kafka's StandardAuthorizer decisions, case by case (the facts of Kafka's
StandardAuthorizerTest), and against a model that scans every ACL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    Action,
    AuthorizationResult,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData, acl_result

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC
Op = AclOperation
ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = LITERAL,
    resource_type: ResourceType = GROUP,
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern, principal, host, operation, permission)


def data(
    *acls: StandardAcl, allow_everyone: bool = False, super_users: tuple[str, ...] = ()
) -> StandardAuthorizerData:
    authorizer = StandardAuthorizerData(super_users, allow_everyone_if_no_acl_found=allow_everyone)
    for each in acls:
        authorizer.add(each)
    return authorizer


def decide(
    authorizer: StandardAuthorizerData,
    operation: AclOperation,
    name: str,
    *,
    principal: str = ALICE,
    host: str = HOST,
    resource_type: ResourceType = GROUP,
) -> AuthorizationResult:
    return authorizer.authorize(principal, host, Action(operation, resource_type, name))


@pytest.mark.parametrize("allow_everyone", [False, True])
def test_a_resource_without_acls_follows_allow_everyone_if_no_acl_found(
    allow_everyone: bool,
) -> None:
    authorizer = data(acl("other", Op.READ), allow_everyone=allow_everyone)
    assert decide(authorizer, Op.READ, "g") is (ALLOWED if allow_everyone else DENIED)


def test_a_resource_with_acls_denies_what_none_allows_even_with_allow_everyone() -> None:
    authorizer = data(acl("g", Op.READ), allow_everyone=True)
    assert decide(authorizer, Op.READ, "g") is ALLOWED
    assert decide(authorizer, Op.DELETE, "g") is DENIED
    assert decide(authorizer, Op.READ, "g", principal=BOB) is DENIED


def test_a_super_user_may_do_anything_even_what_an_acl_denies() -> None:
    authorizer = data(acl("g", Op.ALL, DENY, principal="User:admin"), super_users=("User:admin",))
    assert decide(authorizer, Op.DELETE, "g", principal="User:admin") is ALLOWED


def test_deny_wins_over_allow() -> None:
    authorizer = data(acl("g", Op.READ), acl("g", Op.READ, DENY))
    assert decide(authorizer, Op.READ, "g") is DENIED


@pytest.mark.parametrize("implying", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_and_alter_allowed_imply_describe(implying: AclOperation) -> None:
    assert decide(data(acl("g", implying)), Op.DESCRIBE, "g") is ALLOWED


@pytest.mark.parametrize("other", [Op.CREATE, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE])
def test_other_operations_do_not_imply_describe(other: AclOperation) -> None:
    assert decide(data(acl("g", other)), Op.DESCRIBE, "g") is DENIED


def test_alter_configs_allowed_implies_describe_configs() -> None:
    assert decide(data(acl("g", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "g") is ALLOWED
    assert decide(data(acl("g", Op.READ)), Op.DESCRIBE_CONFIGS, "g") is DENIED


def test_a_denied_read_does_not_deny_describe() -> None:
    authorizer = data(acl("g", Op.READ, DENY), acl("g", Op.DESCRIBE))
    assert decide(authorizer, Op.READ, "g") is DENIED
    assert decide(authorizer, Op.DESCRIBE, "g") is ALLOWED


def test_all_allows_and_denies_every_operation() -> None:
    assert decide(data(acl("g", Op.ALL)), Op.DELETE, "g") is ALLOWED
    assert decide(data(acl("g", Op.ALL), acl("g", Op.ALL, DENY)), Op.DESCRIBE, "g") is DENIED


def test_the_wildcard_name_principal_and_host_match_everything() -> None:
    authorizer = data(acl("*", Op.READ, principal="User:*"))
    assert decide(authorizer, Op.READ, "any-group", principal=BOB, host="192.0.2.7") is ALLOWED
    assert decide(data(acl("g", Op.READ, host=HOST)), Op.READ, "g", host="192.0.2.7") is DENIED
    assert decide(data(acl("g", Op.READ, host=HOST)), Op.READ, "g") is ALLOWED


def test_prefixed_acls_match_names_they_start_literal_ones_only_their_own() -> None:
    authorizer = data(acl("team-", Op.READ, pattern=PREFIXED), acl("solo", Op.READ))
    assert decide(authorizer, Op.READ, "team-a") is ALLOWED
    assert decide(authorizer, Op.READ, "team-") is ALLOWED
    assert decide(authorizer, Op.READ, "team") is not ALLOWED
    assert decide(authorizer, Op.READ, "solo") is ALLOWED
    assert decide(authorizer, Op.READ, "solo-2") is not ALLOWED


def test_a_prefixed_deny_wins_over_a_literal_allow() -> None:
    authorizer = data(acl("team-a", Op.READ), acl("team-", Op.READ, DENY, pattern=PREFIXED))
    assert decide(authorizer, Op.READ, "team-a") is DENIED


def test_resource_types_are_apart() -> None:
    authorizer = data(acl("orders", Op.READ, resource_type=TOPIC))
    assert decide(authorizer, Op.READ, "orders", resource_type=TOPIC) is ALLOWED
    assert decide(authorizer, Op.READ, "orders") is DENIED


def test_an_acl_is_its_fields_added_once_and_removed_once() -> None:
    authorizer = data()
    read = acl("g", Op.READ)
    assert authorizer.add(read)
    assert not authorizer.add(acl("g", Op.READ))
    assert len(authorizer) == 1
    assert authorizer.remove(read)
    assert not authorizer.remove(read)
    assert len(authorizer) == 0
    assert list(authorizer) == []
    assert decide(authorizer, Op.READ, "g") is DENIED


def test_a_removed_prefix_no_longer_matches() -> None:
    prefix = acl("team-", Op.READ, pattern=PREFIXED)
    authorizer = data(prefix)
    authorizer.remove(prefix)
    assert decide(authorizer, Op.READ, "team-a") is DENIED


# Against a model: every ACL scanned, Kafka's rule applied to those of the resource.

NAMES = st.text(alphabet="ab*", min_size=1, max_size=3)
OPERATIONS = st.sampled_from(
    [Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.CREATE]
)
ACLS = st.builds(
    StandardAcl,
    resource_type=st.sampled_from([GROUP, TOPIC]),
    resource_name=NAMES,
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from([ALICE, BOB, "User:*"]),
    host=st.sampled_from(["*", HOST]),
    operation=OPERATIONS,
    permission=st.sampled_from([ALLOW, DENY]),
)


def model(
    acls: list[StandardAcl], principal: str, host: str, action: Action, allow_everyone: bool
) -> AuthorizationResult:
    name = action.resource_name
    of_resource = [
        a
        for a in acls
        if a.resource_type is action.resource_type
        and (
            (a.pattern_type is LITERAL and a.resource_name in (name, "*"))
            or (a.pattern_type is PREFIXED and name.startswith(a.resource_name))
        )
    ]
    results = {acl_result(a, principal, host, action.operation) for a in of_resource}
    if DENIED in results:
        return DENIED
    if ALLOWED in results:
        return ALLOWED
    if of_resource:
        return DENIED
    return ALLOWED if allow_everyone else DENIED


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(ACLS, max_size=12),
    removed=st.lists(st.integers(min_value=0, max_value=11), max_size=4),
    principal=st.sampled_from([ALICE, BOB]),
    host=st.sampled_from([HOST, "192.0.2.7"]),
    operation=st.sampled_from([Op.READ, Op.WRITE, Op.DELETE, Op.DESCRIBE, Op.CREATE]),
    resource_type=st.sampled_from([GROUP, TOPIC]),
    name=st.text(alphabet="ab", min_size=1, max_size=4),
    allow_everyone=st.booleans(),
)
def test_decisions_match_a_scan_of_every_acl(
    acls: list[StandardAcl],
    removed: list[int],
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    allow_everyone: bool,
) -> None:
    authorizer = data(*acls, allow_everyone=allow_everyone)
    kept = list(dict.fromkeys(acls))
    for index in removed:
        if index < len(acls):
            authorizer.remove(acls[index])
            if acls[index] in kept:
                kept.remove(acls[index])
    assert sorted(authorizer, key=repr) == sorted(kept, key=repr)
    action = Action(operation, resource_type, name)
    assert authorizer.authorize(principal, host, action) is model(
        kept, principal, host, action, allow_everyone
    )
