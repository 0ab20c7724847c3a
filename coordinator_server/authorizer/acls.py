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
