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
wildcard and each prefix of the name, never every ACL.
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
