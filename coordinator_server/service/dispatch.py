"""The one table every request passes through on its way in (Kafka's `KafkaApis.handle`):
api key to handler, built from the group service's handlers, on a node that coordinates
transactions the transaction service's, and the security service's (ACLs and SCRAM
credentials).

ApiVersions is answered here, from the table itself, so a client is told exactly the APIs
this node serves. A guard in front of some handlers (the check of committed partitions
against the data cluster, `commit_partition_check`) is put there through `guard`, the one
place where a handler is replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseKey,
)
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.group_service import GroupCoordinatorService
from coordinator_server.service.replies import Handler, Reply, typed_handler
from coordinator_server.service.security_service import SecurityService
from coordinator_server.service.transaction_service import TransactionCoordinatorService

__all__ = ["SERVER_NAME", "RequestDispatch"]

SERVER_NAME = "coordinator-server"


class RequestDispatch:
    """Api key to handler, for every request this node answers."""

    __slots__ = ("_groups", "_handlers", "_server_version")

    def __init__(self, groups: GroupCoordinatorService, *, server_version: str) -> None:
        self._groups = groups
        self._server_version = server_version
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: typed_handler(ApiVersionsRequest, self.api_versions),
            **groups.handlers,
        }

    @property
    def handlers(self) -> Mapping[int, Handler]:
        """The table as the connections read it (it changes when transactions are served
        or a guard is put in front of a handler)."""
        return self._handlers

    def serve_transactions(self, transactions: TransactionCoordinatorService) -> None:
        """Answer the transaction APIs too, and FindCoordinator for transactional ids."""
        self._handlers.update(transactions.handlers)
        self._groups.serve_transactions()

    def serve_security(self, security: SecurityService) -> None:
        """Answer the ACL and SCRAM credential APIs too."""
        self._handlers.update(security.handlers)

    def serve_consumer_groups(self, handlers: Mapping[int, Handler]) -> None:
        """Answer the consumer group protocol's APIs too (KIP-848)."""
        self._handlers.update(handlers)

    def guard(self, api_key: ApiKey, wrap: Callable[[Handler], Handler]) -> bool:
        """Put `wrap(handler)` in place of the handler of `api_key`; False when this node
        serves no such API."""
        handler = self._handlers.get(api_key)
        if handler is None:
            return False
        self._handlers[api_key] = wrap(handler)
        return True

    # ApiVersions answers at once, even while partitions load.

    def api_versions(self, request: ApiVersionsRequest, ctx: RequestContext) -> Reply:
        return self.api_versions_response(ErrorCode.NONE, None)

    def api_versions_response(self, code: ErrorCode, message: str | None) -> ApiVersionsResponse:
        handlers = self._handlers
        return ApiVersionsResponse(
            error_code=code,
            error_message=message,
            api_keys=[
                ApiVersionsResponseKey(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
                if key in handlers
            ],
            server_name=SERVER_NAME,
            server_version=self._server_version,
        )
