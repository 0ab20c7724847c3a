"""The check each request handler makes before it acts (Kafka's `AuthHelper.authorize`):
may this request's principal, from its host, take this operation on this resource?

`RequestAuthorizer` decides with Kafka's StandardAuthorizer rule over the node's ACLs
(`StandardAuthorizerData`, which the log's security records keep current on every node).
Decisions are cached per (principal, host, operation, resource): a busy group asks the same
question thousands of times a second, and the answer only changes when an ACL does, so the
cache is dropped whole whenever the ACLs change (`acls_changed`) and is bounded by
`cache_entries` (dropped whole when full: a working set larger than the bound is recomputed,
never grown without limit).

Denials are counted per API and logged on the `kafka.authorizer.logger` logger in Kafka's
wording (with the rule that decided, as Kafka's StandardAuthorizer names it), at most
`log_per_second` lines a second (the rest are counted, and their number said on the next
line that goes out), so a client retrying a refused request in a loop cannot flood the log.

A handler on a node without an authorizer holds None instead of a `RequestAuthorizer` and
checks nothing: no request pays for authorization it does not have.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from coordinator_server.authorizer.acls import (
    CLUSTER_NAME,
    AclOperation,
    Action,
    AuthorizationResult,
    ResourceType,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.runtime.api import RequestContext

__all__ = ["AUTHORIZER_LOGGER", "RequestAuthorizer"]

AUTHORIZER_LOGGER = "kafka.authorizer.logger"

_RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
}

_CacheKey = tuple[str, str, AclOperation, ResourceType, str]
_TypeCacheKey = tuple[str, str, AclOperation, ResourceType]


class RequestAuthorizer:
    """Kafka's decision for a request's principal and host, cached, denials logged."""

    def __init__(
        self,
        data: StandardAuthorizerData,
        *,
        cache_entries: int = 100_000,
        log_per_second: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data = data
        self._cache: dict[_CacheKey, bool] = {}
        self._by_type_cache: dict[_TypeCacheKey, bool] = {}
        self._cache_entries = cache_entries
        self._log = logging.getLogger(AUTHORIZER_LOGGER)
        self._log_per_second = log_per_second
        self._clock = clock
        self._log_window = 0.0
        self._logged_in_window = 0
        self._suppressed = 0
        self.denials: Counter[str] = Counter()
        """Denials per API name, for metrics."""

    def acls_changed(self) -> None:
        """Forget every cached decision (an ACL was added or removed, or the super users
        changed)."""
        self._cache.clear()
        self._by_type_cache.clear()

    def allowed(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        api: str,
        log_denied: bool = True,
        ref_count: int = 1,
    ) -> bool:
        """Whether the request may take `operation` on the resource; a denial is counted
        against `api` (Kafka's name of the request) and, with `log_denied`, logged, saying
        the request named the resource `ref_count` times. Handlers that filter what they
        answer by permission where Kafka does not log it (ListGroups) pass
        `log_denied=False`: a resource left out is not something the client asked for."""
        key = (ctx.principal, ctx.client_host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(ctx, operation, resource_type, name)
            if len(self._cache) >= self._cache_entries:
                self._cache.clear()
            self._cache[key] = decision
        if not decision:
            self.denials[api] += 1
            if log_denied:
                self._log_denial(ctx, operation, resource_type, name, api, ref_count)
        return decision

    def allowed_cluster(
        self, ctx: RequestContext, operation: AclOperation, *, api: str, log_denied: bool = True
    ) -> bool:
        """`allowed` on the one Cluster resource."""
        return self.allowed(
            ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, api=api, log_denied=log_denied
        )

    def denied(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str] | Mapping[str, int],
        *,
        api: str,
        log_denied: bool = True,
    ) -> set[str]:
        """The names among `names` (or of `names`, a mapping of each name to how often the
        request names it) the request may not take `operation` on (Kafka's
        `filterByAuthorized`): each distinct name decided once, its log line counting how
        often the request names it."""
        # The common case first: every name allowed, each decision cached already (a
        # consumer's commits name the same few topics again and again): no counting.
        cache = self._cache
        principal, host = ctx.principal, ctx.client_host
        for name in names:
            if cache.get((principal, host, operation, resource_type, name)) is not True:
                break
        else:
            return set()
        counts: Counter[str] = Counter(names)
        return {
            name
            for name, count in counts.items()
            if not self.allowed(
                ctx,
                operation,
                resource_type,
                name,
                api=api,
                log_denied=log_denied,
                ref_count=count,
            )
        }

    def allowed_by_resource_type(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        *,
        api: str,
    ) -> bool:
        """Whether the request may take `operation` on at least one resource of
        `resource_type` (Kafka's `authorizeByResourceType`); a denial is counted against
        `api`, never logged (Kafka's logs none)."""
        key = (ctx.principal, ctx.client_host, operation, resource_type)
        decision = self._by_type_cache.get(key)
        if decision is None:
            result = self.data.authorize_by_resource_type(
                ctx.principal, _host(ctx), operation, resource_type
            )
            decision = result is AuthorizationResult.ALLOWED
            if len(self._by_type_cache) >= self._cache_entries:
                self._by_type_cache.clear()
            self._by_type_cache[key] = decision
        if not decision:
            self.denials[api] += 1
        return decision

    def authorized_operations(
        self,
        ctx: RequestContext,
        resource_type: ResourceType,
        name: str,
        operations: Iterable[AclOperation],
        *,
        api: str,
    ) -> int:
        """The bit field of `operations` the request may take on the resource (bit n for
        the operation of code n), as Kafka's `authorizedOperations` answers it: what is not
        allowed is left out, not logged."""
        field = 0
        for operation in operations:
            if self.allowed(ctx, operation, resource_type, name, api=api, log_denied=False):
                field |= 1 << operation
        return field

    def _decide(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        action = Action(operation, resource_type, name)
        result = self.data.authorize(ctx.principal, _host(ctx), action)
        return result is AuthorizationResult.ALLOWED

    def _log_denial(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        api: str,
        ref_count: int,
    ) -> None:
        now = self._clock()
        if now - self._log_window >= 1.0:
            self._log_window = now
            self._logged_in_window = 0
        if self._logged_in_window >= self._log_per_second:
            self._suppressed += 1
            return
        self._logged_in_window += 1
        suppressed, self._suppressed = self._suppressed, 0
        host = _host(ctx)
        resource = f"{_RESOURCE_NAMES.get(resource_type, resource_type.name)}:LITERAL:{name}"
        rule = self.data.rule(ctx.principal, host, Action(operation, resource_type, name))
        self._log.info(
            "Principal = %s is Denied operation = %s from host = %s on resource = %s "
            "for request = %s with resourceRefCount = %d based on rule %s%s",
            ctx.principal,
            operation.name,
            host,
            resource,
            api,
            ref_count,
            rule,
            f" ({suppressed} more denials not logged)" if suppressed else "",
        )


def _host(ctx: RequestContext) -> str:
    # The peer's address as Kafka's ACLs name hosts: without the "/" Kafka's request
    # context writes before it.
    host = ctx.client_host
    return host[1:] if host.startswith("/") else host
