"""How the RPC client routes and reads each API of the wire contract: one `ApiHandler` per
API, run by the one request path of `CoordinatorClient` (its `_call`).

Kafka's admin client is built the same way (an `AdminApiHandler` per API, with the lookup
strategy that finds the node to ask), so that what differs between APIs is data, and
discovery, retries, deadlines and fan-out are written once. An API differs in:

- where it goes (`Lookup`): any bootstrap server, every node of the cluster (each answers
  for the groups or transactions it coordinates), or the coordinator of the group or
  transactional id it names (`key`, `key_type`);
- which answers mean "try again" (`retry_code`): COORDINATOR_LOAD_IN_PROGRESS and
  REQUEST_TIMED_OUT on the same coordinator, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR
  after looking the coordinator up again, wherever the API puts its error codes; for the
  transaction APIs CONCURRENT_TRANSACTIONS on the same coordinator too;
- what `raise_on_error` raises (`errors`);
- for the security APIs (ACLs, SCRAM credentials), nothing but their errors and that
  NOT_CONTROLLER passes too: any node answers them (the server forwards them to the node that
  holds them), and the SASL exchange is each connection's own (`sasl`), never sent on this
  path;
- for a request that names several groups (OffsetFetch, DescribeGroups, DeleteGroups,
  ConsumerGroupDescribe) or transactional ids (DescribeTransactions), how it is cut into one
  request per key, each sent to its own coordinator, and how the answers are put back
  together in the request's order (`split`, `item`, `join`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from coordinator_protocol.api_keys import api_name
from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode, error_for_code
from coordinator_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsV1Request,
    DescribeTransactionsV1Response,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseState,
    ListTransactionsV1Request,
    ListTransactionsV1Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "API_VERSIONS",
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "CREATE_ACLS",
    "DELETE_ACLS",
    "DELETE_GROUPS",
    "DESCRIBE_ACLS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_GROUPS",
    "DESCRIBE_TRANSACTIONS",
    "DESCRIBE_TRANSACTIONS_V1",
    "DESCRIBE_USER_SCRAM_CREDENTIALS",
    "END_TXN",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "INIT_PRODUCER_ID",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "LIST_TRANSACTIONS",
    "LIST_TRANSACTIONS_V1",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "RETRY_CODES",
    "RETRY_REDISCOVER",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SECURITY_RETRY_CODES",
    "SYNC_GROUP",
    "TXN_OFFSET_COMMIT",
    "TXN_RETRY_CODES",
    "WRITE_TXN_MARKERS",
    "ApiHandler",
    "Lookup",
    "first_retriable",
    "single",
]

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)
T = TypeVar("T")

# Answers that mean "try again": the first two on the same coordinator, the last two after
# looking the coordinator up again (Kafka's `markCoordinatorUnknown`).
RETRY_SAME_NODE: Final = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT}
)
RETRY_REDISCOVER: Final = frozenset(
    {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)
RETRY_CODES: Final = RETRY_SAME_NODE | RETRY_REDISCOVER
# The transaction APIs also retry CONCURRENT_TRANSACTIONS on the same coordinator: the
# transactional id's previous transaction is still being completed (Kafka's producer
# re-enqueues the request after its back-off, as for every retriable error).
TXN_RETRY_CODES: Final = RETRY_CODES | {ErrorCode.CONCURRENT_TRANSACTIONS}


class Lookup(enum.Enum):
    """Which server a request goes to (Kafka's admin lookup strategies)."""

    BOOTSTRAP = "bootstrap"
    """A bootstrap server, the next one if it cannot be reached."""
    EVERY_NODE = "every node"
    """Every node of the cluster, as DescribeCluster at a bootstrap server names them (the
    bootstrap servers themselves when the server does not list DescribeCluster in
    ApiVersions), the answers joined (Kafka's `AllBrokersStrategy`, which finds the brokers
    with Metadata)."""
    COORDINATOR = "coordinator"
    """The coordinator of the group the request names, found with FindCoordinator and
    cached (Kafka's `CoordinatorStrategy`)."""


def _never(_: Message) -> int | None:
    return None


def _no_errors(_: Message) -> Iterator[tuple[int, str | None]]:
    return iter(())


def _no_group(_: Message) -> str:
    raise TypeError("not an API of one group or transaction")


def _identity(answer: T) -> T:
    return answer


@dataclass(frozen=True, slots=True)
class ApiHandler(Generic[Req, Resp]):
    """What one API's calls need besides what every call does; see the module docstring."""

    request_type: type[Req]
    response_type: type[Resp]
    lookup: Lookup
    retry_code: Callable[[Resp], int | None] = _never
    """The retriable code an answer carries, or None: the call is answered."""
    errors: Callable[[Resp], Iterator[tuple[int, str | None]]] = _no_errors
    """(code, message) of each error in an answer, in the order `raise_on_error` checks
    them: the first that is not NONE is raised."""
    key: Callable[[Req], str] = _no_group
    """The key whose coordinator answers (`Lookup.COORDINATOR`): a group id, or with
    `key_type` 1 a transactional id."""
    key_type: int = 0
    """FindCoordinator's key type of `key`: 0 a group, 1 a transactional id."""
    split: Callable[[Req], Sequence[tuple[str, Req]]] | None = None
    """A request naming several keys as one request per key, with its key."""
    item: Callable[[Resp], Any] = _identity
    """What one group's answer contributes to the joined answer."""
    join: Callable[[Req, list[Any]], Resp] | None = None
    """The answer to the whole request: from the groups' items in the request's order, or
    (`Lookup.EVERY_NODE`) from the nodes' answers in the nodes' order."""
    name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", api_name(self.request_type.API_KEY))


class _ErrorAtTopLevel(Protocol):
    @property
    def error_code(self) -> int: ...

    @property
    def error_message(self) -> str | None: ...


def retriable(code: int) -> int | None:
    return code if code in RETRY_CODES else None


def first_retriable(codes: Iterable[int]) -> int | None:
    for code in codes:
        if code in RETRY_CODES:
            return code
    return None


def single(items: Sequence[T], api: str) -> T:
    """The one item an answer about one group holds."""
    if len(items) != 1:
        raise error_for_code(
            ErrorCode.UNKNOWN_SERVER_ERROR, f"{api} answered {len(items)} items for one"
        )
    return items[0]


def _group_of(group_id: str | None) -> str:
    # A missing group id is sent as is (the server answers INVALID_GROUP_ID); any
    # coordinator can say so, so it is routed like the empty id.
    return group_id or ""


def _top_level_retry(response: _ErrorAtTopLevel) -> int | None:
    return retriable(response.error_code)


def _top_level_error(response: _ErrorAtTopLevel) -> Iterator[tuple[int, str | None]]:
    yield response.error_code, response.error_message


def _txn_retry(response: _ErrorAtTopLevel) -> int | None:
    code = response.error_code
    return code if code in TXN_RETRY_CODES else None


def _add_partitions_retry(response: AddPartitionsToTxnResponse) -> int | None:
    # A request refused for one partition is refused for all (the others answer
    # OPERATION_NOT_ATTEMPTED): any retriable code retries the whole request.
    if response.error_code in TXN_RETRY_CODES:
        return response.error_code
    for topic in response.results_by_topic:
        for partition in topic.results_by_partition:
            if partition.partition_error_code in TXN_RETRY_CODES:
                return partition.partition_error_code
    return None


def _add_partitions_errors(
    response: AddPartitionsToTxnResponse,
) -> Iterator[tuple[int, str | None]]:
    yield response.error_code, response.error_message
    for topic in response.results_by_topic:
        for partition in topic.results_by_partition:
            yield partition.partition_error_code, f"{topic.name}-{partition.partition_index}"


def _txn_commit_retry(response: TxnOffsetCommitResponse) -> int | None:
    # As OffsetCommit: coordinator errors come per partition (Kafka's TxnOffsetCommitHandler
    # retries the partitions that failed with one; the whole request is sent again here,
    # which writes the same pending offsets again).
    for topic in response.topics:
        for partition in topic.partitions:
            if partition.error_code in TXN_RETRY_CODES:
                return partition.error_code
    return None


def _markers_retry(response: WriteTxnMarkersResponse) -> int | None:
    # Only what the same node answers differently later: a node that no longer owns a log
    # partition (NOT_COORDINATOR) answers so again, and the caller must route the marker to
    # the new owner.
    for marker in response.markers:
        for topic in marker.topics:
            for partition in topic.partitions:
                if partition.error_code in RETRY_SAME_NODE:
                    return partition.error_code
    return None


def _join_listed_transactions(
    request: ListTransactionsRequest, responses: list[ListTransactionsResponse]
) -> ListTransactionsResponse:
    # As ListGroups: the first node's error answers the call; otherwise a transactional id
    # listed twice (while its partition moves) is listed once, and a state filter is unknown
    # if a node said so.
    seen: dict[str, ListTransactionsResponseState] = {}
    unknown: dict[str, None] = {}
    for response in responses:
        if response.error_code != ErrorCode.NONE:
            return response
        unknown.update(dict.fromkeys(response.unknown_state_filters))
        for state in response.transaction_states:
            seen.setdefault(state.transactional_id, state)
    return ListTransactionsResponse(
        unknown_state_filters=list(unknown), transaction_states=list(seen.values())
    )


def _join_listed_pages(
    request: ListTransactionsV1Request, pages: list[ListTransactionsV1Response]
) -> ListTransactionsV1Response:
    # The nodes' lists joined as version 0's are, when each page is its node's whole list:
    # a node's next pages are for `CoordinatorClient.list_transactions` to follow.
    for page in pages:
        if page.error_code != ErrorCode.NONE:
            return page
        if page.next_cursor is not None:
            raise error_for_code(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "ListTransactions: a node's list has more pages (CoordinatorClient."
                "list_transactions follows them)",
            )
    joined = _join_listed_transactions(request, list(pages))
    return ListTransactionsV1Response(
        unknown_state_filters=joined.unknown_state_filters,
        transaction_states=joined.transaction_states,
    )


def _leave_group_errors(response: LeaveGroupResponse) -> Iterator[tuple[int, str | None]]:
    yield response.error_code, response.error_message
    for member in response.members:
        yield member.error_code, f"member {member.member_id!r}"


def _commit_retry(response: OffsetCommitResponse) -> int | None:
    # Kafka answers coordinator errors per partition too.
    for topic in response.topics:
        for partition in topic.partitions:
            if partition.error_code in RETRY_CODES:
                return partition.error_code
    return None


def _join_listed_groups(
    _: ListGroupsRequest, responses: list[ListGroupsResponse]
) -> ListGroupsResponse:
    # The first server's error answers the call; otherwise a group listed twice is listed
    # once.
    seen: dict[str, ListGroupsResponseGroup] = {}
    for response in responses:
        if response.error_code != ErrorCode.NONE:
            return response
        for group in response.groups:
            seen.setdefault(group.group_id, group)
    return ListGroupsResponse(groups=list(seen.values()))


API_VERSIONS: Final = ApiHandler(
    ApiVersionsRequest, ApiVersionsResponse, Lookup.BOOTSTRAP, errors=_top_level_error
)
FIND_COORDINATOR: Final = ApiHandler(
    FindCoordinatorRequest, FindCoordinatorResponse, Lookup.BOOTSTRAP
)
DESCRIBE_CLUSTER: Final = ApiHandler(
    DescribeClusterRequest,
    DescribeClusterResponse,
    Lookup.BOOTSTRAP,
    retry_code=_top_level_retry,
    errors=_top_level_error,
)
JOIN_GROUP: Final = ApiHandler(
    JoinGroupRequest,
    JoinGroupResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_top_level_error,
    key=lambda request: _group_of(request.group_id),
)
SYNC_GROUP: Final = ApiHandler(
    SyncGroupRequest,
    SyncGroupResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_top_level_error,
    key=lambda request: _group_of(request.group_id),
)
HEARTBEAT: Final = ApiHandler(
    HeartbeatRequest,
    HeartbeatResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_top_level_error,
    key=lambda request: _group_of(request.group_id),
)
LEAVE_GROUP: Final = ApiHandler(
    LeaveGroupRequest,
    LeaveGroupResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_leave_group_errors,
    key=lambda request: _group_of(request.group_id),
)
OFFSET_COMMIT: Final = ApiHandler(
    OffsetCommitRequest,
    OffsetCommitResponse,
    Lookup.COORDINATOR,
    retry_code=_commit_retry,
    key=lambda request: _group_of(request.group_id),
)
OFFSET_DELETE: Final = ApiHandler(
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_top_level_error,
    key=lambda request: _group_of(request.group_id),
)
OFFSET_FETCH: Final = ApiHandler(
    OffsetFetchRequest,
    OffsetFetchResponse,
    Lookup.COORDINATOR,
    retry_code=lambda response: first_retriable(g.error_code for g in response.groups),
    split=lambda request: [
        (
            group.group_id or "",
            OffsetFetchRequest(groups=[group], require_stable=request.require_stable),
        )
        for group in request.groups
    ],
    item=lambda response: single(response.groups, "OffsetFetch"),
    join=lambda _, groups: OffsetFetchResponse(groups=groups),
)
DESCRIBE_GROUPS: Final = ApiHandler(
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    Lookup.COORDINATOR,
    retry_code=lambda response: first_retriable(g.error_code for g in response.groups),
    split=lambda request: [
        (group_id or "", DescribeGroupsRequest(groups=[group_id])) for group_id in request.groups
    ],
    item=lambda response: single(response.groups, "DescribeGroups"),
    join=lambda _, groups: DescribeGroupsResponse(groups=groups),
)
DELETE_GROUPS: Final = ApiHandler(
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    Lookup.COORDINATOR,
    retry_code=lambda response: first_retriable(r.error_code for r in response.results),
    split=lambda request: [
        (group_id or "", DeleteGroupsRequest(groups_names=[group_id]))
        for group_id in request.groups_names
    ],
    item=lambda response: single(response.results, "DeleteGroups"),
    join=lambda _, results: DeleteGroupsResponse(results=results),
)
CONSUMER_GROUP_HEARTBEAT: Final = ApiHandler(
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    Lookup.COORDINATOR,
    retry_code=_top_level_retry,
    errors=_top_level_error,
    key=lambda request: _group_of(request.group_id),
)
CONSUMER_GROUP_DESCRIBE: Final = ApiHandler(
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    Lookup.COORDINATOR,
    retry_code=lambda response: first_retriable(g.error_code for g in response.groups),
    split=lambda request: [
        (
            group_id or "",
            ConsumerGroupDescribeRequest(
                group_ids=[group_id],
                include_authorized_operations=request.include_authorized_operations,
            ),
        )
        for group_id in request.group_ids
    ],
    item=lambda response: single(response.groups, "ConsumerGroupDescribe"),
    join=lambda _, groups: ConsumerGroupDescribeResponse(groups=groups),
)
LIST_GROUPS: Final = ApiHandler(
    ListGroupsRequest,
    ListGroupsResponse,
    Lookup.EVERY_NODE,
    retry_code=_top_level_retry,
    join=_join_listed_groups,
)
INIT_PRODUCER_ID: Final = ApiHandler(
    InitProducerIdRequest,
    InitProducerIdResponse,
    Lookup.COORDINATOR,
    retry_code=_txn_retry,
    errors=_top_level_error,
    key=lambda request: request.transactional_id or "",
    key_type=1,
)
"""InitProducerId goes to the transaction coordinator of its transactional id; an
idempotent producer's (no transactional id) goes to a bootstrap server instead, as Kafka's
producer asks any broker (`CoordinatorClient.init_producer_id` decides)."""
ADD_PARTITIONS_TO_TXN: Final = ApiHandler(
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    Lookup.COORDINATOR,
    retry_code=_add_partitions_retry,
    errors=_add_partitions_errors,
    key=lambda request: request.transactional_id,
    key_type=1,
)
ADD_OFFSETS_TO_TXN: Final = ApiHandler(
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    Lookup.COORDINATOR,
    retry_code=_txn_retry,
    errors=_top_level_error,
    key=lambda request: request.transactional_id,
    key_type=1,
)
END_TXN: Final = ApiHandler(
    EndTxnRequest,
    EndTxnResponse,
    Lookup.COORDINATOR,
    retry_code=_txn_retry,
    errors=_top_level_error,
    key=lambda request: request.transactional_id,
    key_type=1,
)
TXN_OFFSET_COMMIT: Final = ApiHandler(
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    Lookup.COORDINATOR,
    retry_code=_txn_commit_retry,
    key=lambda request: _group_of(request.group_id),
)
"""TxnOffsetCommit goes to the coordinator of its group (key type 0), as in Kafka: the
transactional offsets are kept with the group's."""
WRITE_TXN_MARKERS: Final = ApiHandler(
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    Lookup.BOOTSTRAP,
    retry_code=_markers_retry,
)
"""WriteTxnMarkers goes to the node that owns the log partitions it names, which the
sender knows (`CoordinatorClient.write_txn_markers` takes that node); only nodes send it."""
DescribedRequest = TypeVar(
    "DescribedRequest", DescribeTransactionsRequest, DescribeTransactionsV1Request
)
DescribedResponse = TypeVar(
    "DescribedResponse", DescribeTransactionsResponse, DescribeTransactionsV1Response
)


def _describe_transactions(
    request_type: type[DescribedRequest], response_type: type[DescribedResponse]
) -> ApiHandler[DescribedRequest, DescribedResponse]:
    """DescribeTransactions of one version: one request per transactional id, to its
    coordinator."""
    return ApiHandler(
        request_type,
        response_type,
        Lookup.COORDINATOR,
        retry_code=lambda response: first_retriable(
            state.error_code for state in response.transaction_states
        ),
        key_type=1,
        split=lambda request: [
            (transactional_id, request_type(transactional_ids=[transactional_id]))
            for transactional_id in request.transactional_ids
        ],
        item=lambda response: single(response.transaction_states, "DescribeTransactions"),
        join=lambda _, states: response_type(transaction_states=states),
    )


DESCRIBE_TRANSACTIONS: Final = _describe_transactions(
    DescribeTransactionsRequest, DescribeTransactionsResponse
)
DESCRIBE_TRANSACTIONS_V1: Final = _describe_transactions(
    DescribeTransactionsV1Request, DescribeTransactionsV1Response
)
"""Version 1: each state also names the markers refused for good."""
LIST_TRANSACTIONS: Final = ApiHandler(
    ListTransactionsRequest,
    ListTransactionsResponse,
    Lookup.EVERY_NODE,
    retry_code=_top_level_retry,
    join=_join_listed_transactions,
)
LIST_TRANSACTIONS_V1: Final = ApiHandler(
    ListTransactionsV1Request,
    ListTransactionsV1Response,
    Lookup.EVERY_NODE,
    retry_code=_top_level_retry,
    join=_join_listed_pages,
)
"""Version 1: a page of one node's list (`CoordinatorClient.list_transactions` reads every
page of every node, and joins them as LIST_TRANSACTIONS joins the nodes' lists)."""


# The security APIs

# The node holding the ACLs and credentials (the owner of the log's partition 0) answers
# them, the others sending them on: REQUEST_TIMED_OUT while no node owns the partition or
# its owner does not answer, NOT_CONTROLLER while it loads or has just moved. Both pass.
SECURITY_RETRY_CODES: Final = RETRY_CODES | {ErrorCode.NOT_CONTROLLER}


def _security_retriable(codes: Iterable[int]) -> int | None:
    for code in codes:
        if code in SECURITY_RETRY_CODES:
            return code
    return None


def _described_acls_retry(response: DescribeAclsResponse) -> int | None:
    return _security_retriable([response.error_code])


def _created_acls_retry(response: CreateAclsResponse) -> int | None:
    # Creating an ACL that exists changes nothing, so a whole request may go again.
    return _security_retriable(result.error_code for result in response.results)


def _created_acls_errors(response: CreateAclsResponse) -> Iterator[tuple[int, str | None]]:
    for result in response.results:
        yield result.error_code, result.error_message


def _deleted_acls_retry(response: DeleteAclsResponse) -> int | None:
    return _security_retriable(result.error_code for result in response.filter_results)


def _deleted_acls_errors(response: DeleteAclsResponse) -> Iterator[tuple[int, str | None]]:
    for result in response.filter_results:
        yield result.error_code, result.error_message
        for acl in result.matching_acls:
            yield acl.error_code, acl.error_message


def _described_credentials_retry(response: DescribeUserScramCredentialsResponse) -> int | None:
    return _security_retriable(
        [response.error_code, *(result.error_code for result in response.results)]
    )


def _described_credentials_errors(
    response: DescribeUserScramCredentialsResponse,
) -> Iterator[tuple[int, str | None]]:
    yield response.error_code, response.error_message
    for result in response.results:
        yield result.error_code, result.error_message or f"user {result.user!r}"


def _altered_credentials_retry(response: AlterUserScramCredentialsResponse) -> int | None:
    # The same upsertion (its salt and salted password) sent again sets the same credential.
    return _security_retriable(result.error_code for result in response.results)


def _altered_credentials_errors(
    response: AlterUserScramCredentialsResponse,
) -> Iterator[tuple[int, str | None]]:
    for result in response.results:
        yield result.error_code, result.error_message or f"user {result.user!r}"


SASL_HANDSHAKE: Final = ApiHandler(SaslHandshakeRequest, SaslHandshakeResponse, Lookup.BOOTSTRAP)
"""SaslHandshake: sent by each connection for itself as it opens (`sasl.authenticate`),
never on the request path."""
SASL_AUTHENTICATE: Final = ApiHandler(
    SaslAuthenticateRequest, SaslAuthenticateResponse, Lookup.BOOTSTRAP
)
"""SaslAuthenticate: as SaslHandshake, the connection's own."""
DESCRIBE_ACLS: Final = ApiHandler(
    DescribeAclsRequest,
    DescribeAclsResponse,
    Lookup.BOOTSTRAP,
    retry_code=_described_acls_retry,
    errors=_top_level_error,
)
CREATE_ACLS: Final = ApiHandler(
    CreateAclsRequest,
    CreateAclsResponse,
    Lookup.BOOTSTRAP,
    retry_code=_created_acls_retry,
    errors=_created_acls_errors,
)
DELETE_ACLS: Final = ApiHandler(
    DeleteAclsRequest,
    DeleteAclsResponse,
    Lookup.BOOTSTRAP,
    retry_code=_deleted_acls_retry,
    errors=_deleted_acls_errors,
)
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = ApiHandler(
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    Lookup.BOOTSTRAP,
    retry_code=_described_credentials_retry,
    errors=_described_credentials_errors,
)
ALTER_USER_SCRAM_CREDENTIALS: Final = ApiHandler(
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    Lookup.BOOTSTRAP,
    retry_code=_altered_credentials_retry,
    errors=_altered_credentials_errors,
)
"""The credential an upsertion carries is derived by the client (`sasl.scram_upsertion`):
the password never travels."""
