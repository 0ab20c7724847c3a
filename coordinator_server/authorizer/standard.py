"""The decision Kafka's StandardAuthorizer makes: whether a principal, from a host, may take
an action on a resource, given the ACLs.

The rule, as Kafka's `StandardAuthorizerData` applies it:
- a super user may do anything;
- the ACLs of the resource are the LITERAL ones of its exact name, the LITERAL ones of the
  wildcard name `*`, and the PREFIXED ones whose name starts the resource's name;
- of those, an ACL applies when its principal is the request's (or `User:*`), its host the
  request's (or `*`) and its operation the action's, or ALL. An ALLOW ACL for READ, WRITE,
  DELETE or ALTER also applies to DESCRIBE, and one for ALTER_CONFIGS to DESCRIBE_CONFIGS; a
  DENY ACL applies to its own operation only (denying READ does not deny DESCRIBE);
- an applying DENY wins; else an applying ALLOW allows; else, when the resource has no ACL at
  all, `allow.everyone.if.no.acl.found` decides; else the action is denied.

The ACLs are indexed by resource type and name: a decision looks up the exact name, the
wildcard and each prefix of the name, never every ACL. Only `authorize_by_resource_type` (may
the principal take an operation on any resource of a type?) scans the ACLs of a type, as
Kafka's does; its callers cache what it answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from coordinator_server.authorizer.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Action,
    AuthorizationResult,
    PatternType,
    ResourceType,
    StandardAcl,
)

IMPLIES_DESCRIBE: Final = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
"""The operations whose ALLOW ACLs allow DESCRIBE too."""

IMPLIES_DESCRIBE_CONFIGS: Final = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
)
"""The operations whose ALLOW ACLs allow DESCRIBE_CONFIGS too."""


def acl_result(
    acl: StandardAcl, principal: str, host: str, operation: AclOperation
) -> AuthorizationResult | None:
    """What `acl` says of `principal` from `host` doing `operation` on a resource it
    matches: ALLOWED, DENIED, or None when it does not apply."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation is not AclOperation.ALL:
        if acl.permission is AclPermissionType.ALLOW:
            if operation is AclOperation.DESCRIBE:
                if acl.operation not in IMPLIES_DESCRIBE:
                    return None
            elif operation is AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation is not acl.operation:
                return None
        elif operation is not acl.operation:
            return None
    if acl.permission is AclPermissionType.ALLOW:
        return AuthorizationResult.ALLOWED
    return AuthorizationResult.DENIED


class StandardAuthorizerData:
    """The ACLs, the super users and the rule for a resource without ACLs; `authorize`
    decides."""

    def __init__(
        self, super_users: Iterable[str] = (), *, allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self.super_users = frozenset(super_users)
        self.no_acl_result = (
            AuthorizationResult.ALLOWED
            if allow_everyone_if_no_acl_found
            else AuthorizationResult.DENIED
        )
        self._literal: dict[tuple[ResourceType, str], set[StandardAcl]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[StandardAcl]] = {}
        # The lengths of the prefixes each resource type has ACLs for: a decision looks up
        # only those prefixes of a name.
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[StandardAcl]:
        for acls in self._literal.values():
            yield from acls
        for acls in self._prefixed.values():
            yield from acls

    def add(self, acl: StandardAcl) -> bool:
        """Add `acl`; False when it is there already (an ACL is its fields)."""
        index = self._literal if acl.pattern_type is PatternType.LITERAL else self._prefixed
        acls = index.setdefault((acl.resource_type, acl.resource_name), set())
        if acl in acls:
            return False
        acls.add(acl)
        self._count += 1
        if acl.pattern_type is PatternType.PREFIXED:
            lengths = self._prefix_lengths.setdefault(acl.resource_type, {})
            length = len(acl.resource_name)
            lengths[length] = lengths.get(length, 0) + 1
        return True

    def remove(self, acl: StandardAcl) -> bool:
        """Remove `acl`; False when it is not there."""
        index = self._literal if acl.pattern_type is PatternType.LITERAL else self._prefixed
        key = (acl.resource_type, acl.resource_name)
        acls = index.get(key)
        if acls is None or acl not in acls:
            return False
        acls.discard(acl)
        if not acls:
            del index[key]
        self._count -= 1
        if acl.pattern_type is PatternType.PREFIXED:
            lengths = self._prefix_lengths[acl.resource_type]
            length = len(acl.resource_name)
            lengths[length] -= 1
            if not lengths[length]:
                del lengths[length]
        return True

    def matching(self, acl_filter: AclBindingFilter) -> list[StandardAcl]:
        """The ACLs `acl_filter` selects (DescribeAcls' answer, DeleteAcls' victims)."""
        return [acl for acl in self if acl_filter.matches(acl)]

    def resource_acls(self, resource_type: ResourceType, name: str) -> Iterator[StandardAcl]:
        """The ACLs of the resource: of its exact name, of the wildcard, of its prefixes."""
        literal = self._literal
        exact = literal.get((resource_type, name))
        if exact:
            yield from exact
        if name != WILDCARD:
            wildcard = literal.get((resource_type, WILDCARD))
            if wildcard:
                yield from wildcard
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length <= len(name):
                    acls = prefixed.get((resource_type, name[:length]))
                    if acls:
                        yield from acls

    def authorize(self, principal: str, host: str, action: Action) -> AuthorizationResult:
        """Whether `principal` from `host` may take `action` (see the module's rule)."""
        if principal in self.super_users:
            return AuthorizationResult.ALLOWED
        has_resource_acls = False
        allowed = False
        for acl in self.resource_acls(action.resource_type, action.resource_name):
            has_resource_acls = True
            result = acl_result(acl, principal, host, action.operation)
            if result is AuthorizationResult.DENIED:
                return AuthorizationResult.DENIED
            if result is AuthorizationResult.ALLOWED:
                allowed = True
        if allowed:
            return AuthorizationResult.ALLOWED
        return AuthorizationResult.DENIED if has_resource_acls else self.no_acl_result

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """Whether `principal` from `host` may take `operation` on at least one resource of
        `resource_type`: Kafka's `Authorizer.authorizeByResourceType`, whose default
        StandardAuthorizer keeps (what an idempotent producer's InitProducerId asks of the
        topics). Allowed when a resource named "hardcode" would be (a super user, or
        `allow_everyone_if_no_acl_found` with no ACL applying), when an ALLOW ACL of the
        wildcard name applies, or when an applying ALLOW ACL is not dominated by an
        applying DENY: a DENY of the same LITERAL name, or a PREFIXED DENY whose name starts
        the ALLOW's. An applying DENY of the wildcard name denies whatever else applies.
        Only the operation itself and ALL apply (no ALLOW implies DESCRIBE here)."""
        assert operation not in (AclOperation.ANY, AclOperation.UNKNOWN)
        assert resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN)
        hardcoded = Action(operation, resource_type, "hardcode")
        if self.authorize(principal, host, hardcoded) is AuthorizationResult.ALLOWED:
            return AuthorizationResult.ALLOWED
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed_literal: set[str] = set()
        allowed_prefixes: set[str] = set()
        wildcard_allowed = False
        for index in (self._literal, self._prefixed):
            for (acl_type, _), acls in index.items():
                if acl_type is not resource_type:
                    continue
                for acl in acls:
                    if acl.host != WILDCARD and acl.host != host:
                        continue
                    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                        continue
                    if acl.operation is not operation and acl.operation is not AclOperation.ALL:
                        continue
                    literal = acl.pattern_type is PatternType.LITERAL
                    name = acl.resource_name
                    if acl.permission is AclPermissionType.DENY:
                        if literal and name == WILDCARD:
                            return AuthorizationResult.DENIED
                        (denied_literal if literal else denied_prefixes).add(name)
                    elif literal and name == WILDCARD:
                        wildcard_allowed = True
                    else:
                        (allowed_literal if literal else allowed_prefixes).add(name)
        if wildcard_allowed:
            return AuthorizationResult.ALLOWED

        def dominated(name: str) -> bool:
            return any(name[:length] in denied_prefixes for length in range(1, len(name) + 1))

        for name in allowed_literal:
            if name not in denied_literal and not dominated(name):
                return AuthorizationResult.ALLOWED
        for name in allowed_prefixes:
            if not dominated(name):
                return AuthorizationResult.ALLOWED
        return AuthorizationResult.DENIED

    def rule(self, principal: str, host: str, action: Action) -> str:
        """The rule `authorize` decides by, as Kafka's authorizer log names it: `SuperUser`,
        `MatchingAcl(acl=StandardAcl(...))` (the applying DENY ACL, else the applying ALLOW
        one), `DefaultAllow` or `DefaultDeny`. Asked only for a line of the log: the
        decisions themselves never build it."""
        if principal in self.super_users:
            return "SuperUser"
        has_resource_acls = False
        allowing: StandardAcl | None = None
        for acl in self.resource_acls(action.resource_type, action.resource_name):
            has_resource_acls = True
            result = acl_result(acl, principal, host, action.operation)
            if result is AuthorizationResult.DENIED:
                return _matching_acl(acl)
            if result is AuthorizationResult.ALLOWED and allowing is None:
                allowing = acl
        if allowing is not None:
            return _matching_acl(allowing)
        if not has_resource_acls and self.no_acl_result is AuthorizationResult.ALLOWED:
            return "DefaultAllow"
        return "DefaultDeny"


def _matching_acl(acl: StandardAcl) -> str:
    # Kafka's StandardAcl.toString, its enums by their names.
    return (
        f"MatchingAcl(acl=StandardAcl(resourceType={acl.resource_type.name}, "
        f"resourceName={acl.resource_name}, patternType={acl.pattern_type.name}, "
        f"principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
        f"permissionType={acl.permission.name}))"
    )
