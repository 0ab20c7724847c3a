"""AclControlManager: the ACLs of the security partition, as Kafka's controller keeps them.

CreateAcls and DeleteAcls are write operations (records and a response, as every shard
operation); DescribeAcls reads the ACLs as of the committed offset. The ACLs live in a
timeline map, so a write whose append fails leaves no trace. The rules are Kafka's
`AclControlManager`:

- a creation is checked on its own (`validateNewAcl`: a resource type, pattern type,
  operation and permission a stored ACL can have, a name; and, as Kafka's brokers check, a
  principal "Type:name", a host, and the Cluster resource's one name); a refused creation
  does not stop the others;
- an ACL that exists already, or is created twice in one request, succeeds with one record
  at most;
- each DeleteAcls filter answers every ACL it matches; an ACL two filters match is answered
  by both and tombstoned once; a filter with an UNKNOWN element is refused.

Beyond Kafka: at most `max_acls` ACLs (a creation past it is refused with
POLICY_VIOLATION), and a resource name, principal or host longer than `max_id_length`
characters is INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, TypeVar

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import (
    CreateAclsRequest,
    CreateAclsRequestCreation,
    CreateAclsResponse,
    CreateAclsResponseResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteAclsResponseFilterResult,
    DeleteAclsResponseMatchingAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseAcl,
    DescribeAclsResponseResource,
)
from coordinator_server import defaults
from coordinator_server.authorizer.acls import (
    CLUSTER_NAME,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.records import (
    AclKey,
    CoordinatorRecord,
    new_acl_record,
    new_acl_tombstone_record,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

__all__ = [
    "AclControlManager",
    "AclsConfig",
    "acl_filter",
    "acl_key_of",
    "acl_of_key",
    "describe_acls_response",
    "sorted_acls",
]

E = TypeVar("E", bound=IntEnum)


@dataclass(frozen=True, slots=True)
class AclsConfig:
    max_acls: int = defaults.MAX_ACLS
    max_id_length: int = defaults.MAX_ID_LENGTH


class _AclFilterFields(Protocol):
    """A DescribeAcls request and a DeleteAcls filter: the same seven fields."""

    @property
    def resource_type_filter(self) -> int: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> int: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


def _code(enum: type[E], value: int) -> E:
    """The member of Kafka's `value`, UNKNOWN for a number Kafka does not have (its
    `fromCode`)."""
    try:
        return enum(value)
    except ValueError:
        # UNKNOWN is 0 in each of Kafka's enums.
        return enum(0)


def acl_of_key(key: AclKey) -> StandardAcl | None:
    """The ACL a record's key states, None for one no ACL can be (codes out of range)."""
    resource_type = _code(ResourceType, key.resource_type)
    pattern_type = _code(PatternType, key.pattern_type)
    operation = _code(AclOperation, key.operation)
    permission = _code(AclPermissionType, key.permission)
    if (
        resource_type in (ResourceType.UNKNOWN, ResourceType.ANY)
        or pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
        or operation in (AclOperation.UNKNOWN, AclOperation.ANY)
        or permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY)
    ):
        return None
    return StandardAcl(
        resource_type,
        key.resource_name,
        pattern_type,
        key.principal,
        key.host,
        operation,
        permission,
    )


def acl_key_of(acl: StandardAcl) -> AclKey:
    return AclKey(
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


def _sort_key(acl: StandardAcl) -> tuple[int, str, int, str, str, int, int]:
    return (
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission,
    )


def sorted_acls(acls: Iterable[StandardAcl]) -> list[StandardAcl]:
    """In one order whatever the order they were kept in: answers are the same every time."""
    return sorted(acls, key=_sort_key)


def _new_acl(creation: CreateAclsRequestCreation, max_id_length: int) -> StandardAcl | str:
    """The ACL a creation asks for, or why it cannot be one (Kafka's INVALID_REQUEST)."""
    resource_type = _code(ResourceType, creation.resource_type)
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {resource_type.name}"
    pattern_type = _code(PatternType, creation.resource_pattern_type)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern_type.name}"
    operation = _code(AclOperation, creation.operation)
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {operation.name}"
    permission = _code(AclPermissionType, creation.permission_type)
    if permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {permission.name}"
    name = creation.resource_name
    if not name:
        return "Resource name should not be empty"
    if resource_type is ResourceType.CLUSTER and name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    principal_type, colon, principal_name = creation.principal.partition(":")
    if not colon or not principal_type or not principal_name:
        return (
            f"Could not parse principal from `{creation.principal}` (expected "
            "principalType:principalName)"
        )
    if not creation.host:
        return "Invalid empty host"
    if max(len(name), len(creation.principal), len(creation.host)) > max_id_length:
        return f"a resource name, principal or host is longer than {max_id_length} characters"
    return StandardAcl(
        resource_type, name, pattern_type, creation.principal, creation.host, operation, permission
    )


def acl_filter(fields: _AclFilterFields) -> AclBindingFilter | str:
    """The filter a DescribeAcls or a DeleteAcls filter states, or why it cannot be one: an
    UNKNOWN element (Kafka's `AclBindingFilter.isUnknown`, INVALID_REQUEST)."""
    resource_type = _code(ResourceType, fields.resource_type_filter)
    pattern_type = _code(PatternType, fields.pattern_type_filter)
    operation = _code(AclOperation, fields.operation)
    permission = _code(AclPermissionType, fields.permission_type)
    if resource_type is ResourceType.UNKNOWN or pattern_type is PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if operation is AclOperation.UNKNOWN or permission is AclPermissionType.UNKNOWN:
        return "Unknown entryFilter."
    return AclBindingFilter(
        resource_type,
        fields.resource_name_filter,
        pattern_type,
        fields.principal_filter,
        fields.host_filter,
        operation,
        permission,
    )


def describe_acls_response(
    acls: Iterable[StandardAcl], request: DescribeAclsRequest
) -> DescribeAclsResponse:
    """DescribeAcls' answer of `acls`: those the request's filter matches, by resource
    pattern (INVALID_REQUEST for a filter Kafka refuses)."""
    selection = acl_filter(request)
    if isinstance(selection, str):
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=selection)
    resources: dict[tuple[int, str, int], DescribeAclsResponseResource] = {}
    for acl in sorted_acls(acl for acl in acls if selection.matches(acl)):
        pattern = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        resource = resources.get(pattern)
        if resource is None:
            resource = resources[pattern] = DescribeAclsResponseResource(
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
            )
        resource.acls.append(
            DescribeAclsResponseAcl(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    return DescribeAclsResponse(resources=list(resources.values()))


def _matching_acl(acl: StandardAcl) -> DeleteAclsResponseMatchingAcl:
    return DeleteAclsResponseMatchingAcl(
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission,
    )


class AclControlManager:
    """The security partition's ACLs."""

    def __init__(self, registry: SnapshotRegistry, config: AclsConfig | None = None) -> None:
        self._config = config or AclsConfig()
        # Every ACL, by itself; the value is its record's key (what a tombstone names).
        self._acls: TimelineDict[StandardAcl, AclKey] = TimelineDict(registry)

    def num_acls(self) -> int:
        return len(self._acls)

    def create_acls(self, request: CreateAclsRequest) -> CoordinatorResult[CreateAclsResponse]:
        records: list[CoordinatorRecord] = []
        results: list[CreateAclsResponseResult] = []
        existing = self._acls
        created: set[StandardAcl] = set()
        room = self._config.max_acls - len(existing)
        for creation in request.creations:
            acl = _new_acl(creation, self._config.max_id_length)
            if isinstance(acl, str):
                results.append(
                    CreateAclsResponseResult(
                        error_code=ErrorCode.INVALID_REQUEST, error_message=acl
                    )
                )
                continue
            if acl not in existing and acl not in created:
                if len(created) >= room:
                    results.append(
                        CreateAclsResponseResult(
                            error_code=ErrorCode.POLICY_VIOLATION,
                            error_message=(
                                f"the coordinator holds {self._config.max_acls} ACLs, its most "
                                "(max-acls)"
                            ),
                        )
                    )
                    continue
                created.add(acl)
                records.append(new_acl_record(acl_key_of(acl)))
            results.append(CreateAclsResponseResult())
        return CoordinatorResult(records, CreateAclsResponse(results=results), atomic=True)

    def delete_acls(self, request: DeleteAclsRequest) -> CoordinatorResult[DeleteAclsResponse]:
        # Each ACL once, in the order the filters found them.
        deleted: dict[StandardAcl, AclKey] = {}
        results: list[DeleteAclsResponseFilterResult] = []
        for fields in request.filters:
            selection = acl_filter(fields)
            if isinstance(selection, str):
                results.append(
                    DeleteAclsResponseFilterResult(
                        error_code=ErrorCode.INVALID_REQUEST, error_message=selection
                    )
                )
                continue
            matching = sorted_acls(acl for acl in self._acls if selection.matches(acl))
            for acl in matching:
                deleted.setdefault(acl, self._acls[acl])
            results.append(
                DeleteAclsResponseFilterResult(
                    matching_acls=[_matching_acl(acl) for acl in matching]
                )
            )
        records = [new_acl_tombstone_record(key) for key in deleted.values()]
        return CoordinatorResult(records, DeleteAclsResponse(filter_results=results), atomic=True)

    def describe_acls(
        self, request: DescribeAclsRequest, committed_offset: int
    ) -> DescribeAclsResponse:
        """The ACLs the request's filter matches as of `committed_offset`, by resource
        pattern."""
        return describe_acls_response(self._acls.keys_at(committed_offset), request)

    def replay(self, key: AclKey, exists: bool) -> None:
        """An ACL record (`exists`) or its tombstone. A key no ACL can be (no server writes
        one) changes nothing: the partition's load must not stop on it."""
        acl = acl_of_key(key)
        if acl is None:
            return
        if exists:
            self._acls[acl] = key
        else:
            self._acls.pop(acl)
