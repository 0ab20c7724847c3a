"""ACLs as Kafka states them: who (a principal, from a host) may or may not do what (an
operation) to which resources (a resource type and a name, LITERAL or PREFIXED).

The enums carry Kafka's codes (`AclOperation`, `ResourceType`, `PatternType`,
`AclPermissionType` in Kafka's clients), which CreateAcls, DescribeAcls and DeleteAcls put on
the wire and the log keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

WILDCARD: Final = "*"
"""A LITERAL resource name that matches every name of its type, and a host that matches
every host."""

WILDCARD_PRINCIPAL: Final = "User:*"
"""The principal that matches every principal."""

CLUSTER_NAME: Final = "kafka-cluster"
"""The one Cluster resource's name, as Kafka names it."""


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class AuthorizationResult(IntEnum):
    ALLOWED = 0
    DENIED = 1


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL: `permission` of `principal` from `host` for `operation` on the resources of
    `resource_type` that `pattern_type` and `resource_name` match."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __post_init__(self) -> None:
        # What a stored ACL may hold; a filter's ANY and MATCH are not ACLs.
        assert self.resource_type not in (ResourceType.UNKNOWN, ResourceType.ANY)
        assert self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
        assert self.operation not in (AclOperation.UNKNOWN, AclOperation.ANY)
        assert self.permission in (AclPermissionType.ALLOW, AclPermissionType.DENY)


@dataclass(frozen=True, slots=True)
class Action:
    """What a request asks to do: `operation` on the resource of `resource_type` named
    `resource_name`."""

    operation: AclOperation
    resource_type: ResourceType
    resource_name: str


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls lists and DeleteAcls removes, as Kafka's AclBindingFilter
    selects them. None and ANY match anything; a principal or host matches only itself
    (`User:*` matches the ACLs of `User:*`, not every ACL).

    The pattern type MATCH selects the ACLs that apply to the resource named: the LITERAL
    ones of that name or of the wildcard, and the PREFIXED ones whose name starts it. ANY
    selects the ACLs of exactly that name, whatever their pattern type."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: StandardAcl) -> bool:
        return self.matches_resource(acl) and self.matches_entry(acl)

    def matches_resource(self, acl: StandardAcl) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            acl.resource_type
        ):
            return False
        pattern_type = self.pattern_type
        if pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            pattern_type is not acl.pattern_type
        ):
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern_type is not PatternType.MATCH:
            return name == acl.resource_name
        if acl.pattern_type is PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def matches_entry(self, acl: StandardAcl) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is acl.permission
