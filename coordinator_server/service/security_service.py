"""SecurityService: the front door of the ACL and SCRAM credential APIs (Kafka's `AclApis`
and the SCRAM handlers of `KafkaApis`, with the controller's part on the security
partition).

DescribeAcls (29), CreateAcls (30), DeleteAcls (31), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51) all act on the security partition (log partition 0), whose
shard holds the ACLs and credentials (`SecurityShard`).

- Authorization comes first, as Kafka's: DescribeAcls and DescribeUserScramCredentials need
  DESCRIBE on the Cluster, CreateAcls, DeleteAcls and AlterUserScramCredentials ALTER
  (CLUSTER_AUTHORIZATION_FAILED otherwise). A node without an authorizer answers the ACL
  APIs SECURITY_DISABLED, as Kafka's brokers do without one, and the SCRAM APIs to anyone.
- When this node owns the security partition (a node alone owns every partition), a write
  runs on the runtime and is answered once its records are committed; a read answers from
  the committed state.
- Otherwise the request goes as it is to the node that owns the partition now (the
  cluster's placement), as this node (Kafka's brokers forward these to the controller), and
  that node's answer is relayed. A request another node sent on is never sent on again: a
  node that no longer owns the partition answers it NOT_CONTROLLER.
- No owner yet, or an owner that does not answer in time, is REQUEST_TIMED_OUT (Kafka's
  forwarding answers that when the controller does not answer); a partition placed here but
  not serving (loading, or moved away meanwhile) is NOT_CONTROLLER. Both are retriable.

What waits on another node is bounded by the connections' requests in flight: one
forwarded request per client request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import Message
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseResult,
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteAclsResponseFilterResult,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseResult,
)
from coordinator_server.authorizer.acls import AclOperation
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.node_address import NodeAddress, Placement
from coordinator_server.node_client import NODE_CLIENT_ID_PREFIX, UNREACHABLE
from coordinator_server.records.security import SECURITY_PARTITION
from coordinator_server.runtime.api import CoordinatorResult, RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.security.acl_control import describe_acls_response
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.replies import Handler, Reply, reply_after, typed_handler
from coordinator_server.shard import SecurityShard

__all__ = ["PeerRequests", "SecurityService"]

M = TypeVar("M", bound=Message)
R = TypeVar("R", bound=Message)

ErrorAnswer = Callable[[ErrorCode, str | None], Message]
"""The API's answer of one error code for the whole request."""

# The runtime's refusals that mean "the security partition is not served here now".
_NOT_SERVED_HERE: Final = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    }
)
_NO_AUTHORIZER: Final = "No Authorizer is configured."
# The APIs that write the security partition.
_WRITES: Final = frozenset(
    {ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}
)
_EXTERNAL_ACLS: Final = (
    "the ACLs in force are the data cluster's (--authorizer kafka): change them there, with "
    "kafka-acls.sh"
)


class PeerRequests(Protocol):
    """How this node's requests reach another node (`node_client.NodeClient`)."""

    async def send(self, node: NodeAddress, request: Message) -> Message: ...


class SecurityService:
    def __init__(
        self,
        runtime: CoordinatorRuntime[SecurityShard],
        *,
        node_id: int,
        placement: Placement | None = None,
        peers: PeerRequests | None = None,
        authorizer: RequestAuthorizer | None = None,
        external_acls: StandardAuthorizerData | None = None,
        settled: Callable[[], asyncio.Future[None]] | None = None,
        partition: int = SECURITY_PARTITION,
    ) -> None:
        """`placement`: the node that owns each log partition now (None: this node owns
        every partition); `peers`: how a request reaches that node (None: never sent on);
        `authorizer`: the node's (None: the ACL APIs answer SECURITY_DISABLED);
        `external_acls`: the ACLs in force when they come from elsewhere than the log (the
        data cluster's, `--authorizer kafka`): DescribeAcls then answers from them, and
        CreateAcls and DeleteAcls are refused, the ACLs being changed where they come
        from; `settled`: a future done once this node's image holds what the log committed
        before (a write is answered after it, so that the client sees its change on this node
        at once)."""
        self._runtime = runtime
        self._node_id = node_id
        self._placement = placement
        self._peers = peers
        self.authorizer = authorizer
        self._external_acls = external_acls
        self._settled = settled
        self._partition = partition
        # The requests on their way to another node, held until answered (the loop keeps
        # only a weak reference to a task).
        self._forwarding: set[asyncio.Future[Message]] = set()
        self.forwarded = 0
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_ACLS: typed_handler(DescribeAclsRequest, self.describe_acls),
            ApiKey.CREATE_ACLS: typed_handler(CreateAclsRequest, self.create_acls),
            ApiKey.DELETE_ACLS: typed_handler(DeleteAclsRequest, self.delete_acls),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: typed_handler(
                DescribeUserScramCredentialsRequest, self.describe_user_scram_credentials
            ),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: typed_handler(
                AlterUserScramCredentialsRequest, self.alter_user_scram_credentials
            ),
        }

    def close(self) -> None:
        """Stop waiting for other nodes: their answers are dropped (the connection drains
        or closes)."""
        for forwarding in list(self._forwarding):
            forwarding.cancel()

    # DescribeAcls.

    def describe_acls(self, request: DescribeAclsRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None) -> Message:
            return DescribeAclsResponse(error_code=code, error_message=message)

        refusal = self._refusal(ctx, ApiKey.DESCRIBE_ACLS, AclOperation.DESCRIBE, acls=True)
        if refusal is not None:
            return error(*refusal)
        if self._external_acls is not None:
            return describe_acls_response(self._external_acls, request)
        return self._read(
            request,
            ctx,
            lambda shard, committed: shard.describe_acls(request, committed),
            error,
        )

    # CreateAcls.

    def create_acls(self, request: CreateAclsRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None) -> Message:
            return CreateAclsResponse(
                results=[
                    CreateAclsResponseResult(error_code=code, error_message=message)
                    for _ in request.creations
                ]
            )

        refusal = self._refusal(ctx, ApiKey.CREATE_ACLS, AclOperation.ALTER, acls=True)
        if refusal is not None:
            return error(*refusal)
        if self._external_acls is not None:
            return error(ErrorCode.INVALID_REQUEST, _EXTERNAL_ACLS)
        return self._write(request, ctx, lambda shard: shard.create_acls(request), error)

    # DeleteAcls.

    def delete_acls(self, request: DeleteAclsRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None) -> Message:
            return DeleteAclsResponse(
                filter_results=[
                    DeleteAclsResponseFilterResult(error_code=code, error_message=message)
                    for _ in request.filters
                ]
            )

        refusal = self._refusal(ctx, ApiKey.DELETE_ACLS, AclOperation.ALTER, acls=True)
        if refusal is not None:
            return error(*refusal)
        if self._external_acls is not None:
            return error(ErrorCode.INVALID_REQUEST, _EXTERNAL_ACLS)
        return self._write(request, ctx, lambda shard: shard.delete_acls(request), error)

    # DescribeUserScramCredentials.

    def describe_user_scram_credentials(
        self, request: DescribeUserScramCredentialsRequest, ctx: RequestContext
    ) -> Reply:
        def error(code: ErrorCode, message: str | None) -> Message:
            return DescribeUserScramCredentialsResponse(
                error_code=code,
                error_message=message,
                results=[
                    DescribeUserScramCredentialsResponseResult(
                        user=user.name, error_code=code, error_message=message
                    )
                    for user in request.users or ()
                ],
            )

        refusal = self._refusal(
            ctx, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, AclOperation.DESCRIBE, acls=False
        )
        if refusal is not None:
            return error(*refusal)
        return self._read(
            request,
            ctx,
            lambda shard, committed: shard.describe_scram_credentials(request, committed),
            error,
        )

    # AlterUserScramCredentials.

    def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest, ctx: RequestContext
    ) -> Reply:
        def error(code: ErrorCode, message: str | None) -> Message:
            # Kafka's error answer: each user named once, in order of name.
            users = sorted(
                {deletion.name for deletion in request.deletions}
                | {upsertion.name for upsertion in request.upsertions}
            )
            return AlterUserScramCredentialsResponse(
                results=[
                    AlterUserScramCredentialsResponseResult(
                        user=user, error_code=code, error_message=message
                    )
                    for user in users
                ]
            )

        refusal = self._refusal(
            ctx, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, AclOperation.ALTER, acls=False
        )
        if refusal is not None:
            return error(*refusal)
        return self._write(
            request, ctx, lambda shard: shard.alter_scram_credentials(request), error
        )

    # Where each request goes.

    def _refusal(
        self, ctx: RequestContext, api_key: ApiKey, operation: AclOperation, *, acls: bool
    ) -> tuple[ErrorCode, str | None] | None:
        """Why the request is answered with an error before anything else, if it is."""
        authorizer = self.authorizer
        if authorizer is None:
            return (ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER) if acls else None
        if not authorizer.allowed_cluster(ctx, operation, api=api_name(api_key)):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        return None

    def _owner(self, ctx: RequestContext) -> NodeAddress | tuple[ErrorCode, str] | None:
        """The node to send the request on to; None: this one serves it; or the error it
        gets."""
        placement = self._placement
        if placement is None:
            return None
        owner = placement(self._partition)
        if owner is None:
            return (
                ErrorCode.REQUEST_TIMED_OUT,
                f"no node owns the security partition {self._partition} yet",
            )
        if owner.node_id == self._node_id:
            return None
        if ctx.client_id.startswith(NODE_CLIENT_ID_PREFIX) or self._peers is None:
            return (
                ErrorCode.NOT_CONTROLLER,
                f"node {owner.node_id} owns the security partition {self._partition}, not "
                f"node {self._node_id}",
            )
        return owner

    def _write(
        self,
        request: Message,
        ctx: RequestContext,
        operation: Callable[[SecurityShard], CoordinatorResult[M]],
        error: ErrorAnswer,
    ) -> Reply:
        owner = self._owner(ctx)
        if isinstance(owner, NodeAddress):
            return self._forward(owner, request, error)
        if owner is not None:
            return error(*owner)
        name = api_name(request.API_KEY)
        outcome = self._runtime.write(name, self._partition, operation)

        def failed(failure: BaseException) -> Message:
            return error(*self._failure(name, failure))

        if outcome.future is None:
            if outcome.error is not None:
                return failed(outcome.error)
            assert outcome.response is not None
            return self._seen_here(outcome.response)
        return reply_after(outcome.future, self._seen_here, failed)

    def _seen_here(self, answer: M) -> Reply:
        """`answer`, once this node's image holds the write it answers."""
        settled = self._settled
        if settled is None:
            return answer
        return reply_after(settled(), lambda _: answer, lambda _: answer)

    def _read(
        self,
        request: Message,
        ctx: RequestContext,
        operation: Callable[[SecurityShard, int], R],
        error: ErrorAnswer,
    ) -> Reply:
        owner = self._owner(ctx)
        if isinstance(owner, NodeAddress):
            return self._forward(owner, request, error)
        if owner is not None:
            return error(*owner)
        name = api_name(request.API_KEY)
        answer = self._runtime.schedule_read(name, self._partition, operation)
        return reply_after(
            answer, lambda read: read, lambda failure: error(*self._failure(name, failure))
        )

    @staticmethod
    def _failure(name: str, failure: BaseException) -> tuple[ErrorCode, str | None]:
        code, message = map_operation_error(name, failure)
        if code in _NOT_SERVED_HERE:
            return ErrorCode.NOT_CONTROLLER, message
        return code, message

    def _forward(self, owner: NodeAddress, request: Message, error: ErrorAnswer) -> Reply:
        peers = self._peers
        assert peers is not None, "_owner names no node without peers"
        self.forwarded += 1
        forwarding = asyncio.ensure_future(peers.send(owner, request))
        self._forwarding.add(forwarding)
        forwarding.add_done_callback(self._forwarding.discard)

        def relay(answer: Message) -> Reply:
            if answer.API_KEY != request.API_KEY:
                return error(ErrorCode.UNKNOWN_SERVER_ERROR, "another API's answer")
            if request.API_KEY in _WRITES:
                # The owner committed it: this node reads it before the client hears so.
                return self._seen_here(answer)
            return answer

        def failed(failure: BaseException) -> Message:
            if isinstance(failure, ApiError):
                return error(failure.code, failure.message)
            if isinstance(failure, (*UNREACHABLE, asyncio.CancelledError)):
                return error(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"node {owner.node_id}, which owns the security partition, did not "
                    f"answer: {failure!r}",
                )
            return error(ErrorCode.UNKNOWN_SERVER_ERROR, None)

        return reply_after(forwarding, relay, failed)
