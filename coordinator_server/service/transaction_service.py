"""TransactionCoordinatorService: the transaction coordinator's front door, one method per API.

Kafka's `TransactionCoordinator` as KafkaApis reaches it (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions), the group coordinator's
TxnOffsetCommit, and WriteTxnMarkers for the coordinator log's own partitions (what a
transaction's end writes where its offsets are). A transactional id lives on the log
partition it hashes to, as a group id does, so each request is one operation on one
partition's shard, scheduled on the same runtime as the groups'.

A write that moves a transaction to PrepareCommit or PrepareAbort owes markers; once its
records are committed, its pending completion goes to the `MarkerChannel`
(`markers/channel.py`: the markers, then the transaction's own completion), which also finds
the prepared transactions of every partition that loads, so a transaction prepared before a
crash or a move of its partition still ends.

With an authorizer, each method checks what Kafka's KafkaApis handler of its API checks,
after the refusals that depend on the request alone and before any state is read or written;
without one (None) a request pays a single `is None` test for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol, TypeVar

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import CoordinatorLoadInProgressError, ErrorCode
from coordinator_protocol.messages import Message
from coordinator_protocol.transactions import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    DescribeTransactionsResponseState,
    DescribeTransactionsV1Request,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsV1Request,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseMarker,
    WriteTxnMarkersResponsePartition,
    WriteTxnMarkersResponseTopic,
)
from coordinator_server import defaults
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.offsets.transactional import (
    TransactionalCommit,
    TransactionalCommitAnswer,
    TransactionalCommitPartition,
    TransactionalCommitTopic,
)
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.events import WriteOutcome
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.add_partitions_to_txn import AddPartitionsToTxn, PartitionCatalog
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import RequestLimits
from coordinator_server.service.replies import (
    Handler,
    PendingReply,
    Reply,
    reply_after,
    reply_gathered,
    reply_then,
    settle,
    typed_handler,
)
from coordinator_server.service.routing import Routing
from coordinator_server.service.slicing import SlicedRequests
from coordinator_server.service.transaction_ends import TransactionEnds
from coordinator_server.service.transaction_views import TransactionViews
from coordinator_server.shard import TransactionShard
from coordinator_server.transactions.results import (
    AddOffsetsToTxnResult,
    EndTxnResult,
    InitProducerIdResult,
    PendingCompleteTxn,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Kafka's names of the requests, which the authorizer's log and counts say.
_INIT_PRODUCER_ID: Final = api_name(ApiKey.INIT_PRODUCER_ID)
_ADD_OFFSETS_TO_TXN: Final = api_name(ApiKey.ADD_OFFSETS_TO_TXN)
_END_TXN: Final = api_name(ApiKey.END_TXN)
_TXN_OFFSET_COMMIT: Final = api_name(ApiKey.TXN_OFFSET_COMMIT)
_WRITE_TXN_MARKERS: Final = api_name(ApiKey.WRITE_TXN_MARKERS)


class MarkerChannel(Protocol):
    """Where a prepared transaction's end goes once its Prepare record is committed."""

    def submit(self, partition: int, completion: PendingCompleteTxn) -> None: ...

    def ending(self, transactional_id: str) -> asyncio.Future[None] | None:
        """The end under way of the transactional id's prepared transaction, if any: done
        once its completion is written to the partition's state (or the end gave up)."""
        ...


class ProducerIdSource(Protocol):
    """New producer ids from the Kafka cluster (`ClusterProducerIds`)."""

    def take_now(self) -> int | None:
        """An id at once, or None when none is in hand."""
        ...

    async def take(self) -> int:
        """An id, waiting for the cluster; raises when none comes in time."""
        ...

    def give_back(self, producer_id: int) -> None:
        """An id taken and never handed out."""
        ...


class TransactionLookup(Protocol):
    """DescribeTransactions of one transactional id, asked of the node that owns its log
    partition now; None when no node answered."""

    async def __call__(
        self, log_partition: int, transactional_id: str
    ) -> DescribeTransactionsResponseState | None: ...


def remote_verdict(
    described: DescribeTransactionsResponseState,
    producer_id: int,
    producer_epoch: int,
    log_topic: str,
    log_partition: int,
) -> int:
    """What a TxnOffsetCommit answers given its transaction as its coordinator describes it:
    the same rules as `TransactionManager.verify_transaction`."""
    if described.error_code != ErrorCode.NONE or described.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if described.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    added = any(
        topic.topic == log_topic and log_partition in topic.partitions for topic in described.topics
    )
    if described.transaction_state != "Ongoing" or not added:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE


class TransactionCoordinatorService:
    def __init__(
        self,
        runtime: CoordinatorRuntime[TransactionShard],
        routing: Routing,
        *,
        limits: RequestLimits,
        sliced: SlicedRequests,
        log_topic: str,
        completions: MarkerChannel,
        max_id_length: int,
        transaction_lookup: TransactionLookup | None = None,
        concurrent_wait_ms: int = 0,
        partitions: PartitionCatalog | None = None,
        producer_ids: ProducerIdSource | None = None,
        max_partitions_per_transaction: int = defaults.MAX_PARTITIONS_PER_TRANSACTION,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        """`routing` is the group coordinator's: the same partitions, the same
        `partition_for` and FindCoordinator; `log_topic` names the log in
        WriteTxnMarkers between nodes; `transaction_lookup` describes a transaction another
        node coordinates (None: a node alone); `concurrent_wait_ms`: how long a request
        waits for its transactional id's previous transaction to end (see
        `_after_ending`); `partitions`: the data cluster's, which AddPartitionsToTxn checks
        (None: any partition is taken); `producer_ids`: where new producer ids come from
        when the shards take them from the Kafka cluster (None: from their ranges);
        `max_partitions_per_transaction`: the shards' limit, which AddPartitionsToTxn
        checks first against the request alone. `limits` (of requests) and `sliced` (what runs
        those answered in slices) are the group coordinator's too, as is `authorizer`, what
        requests are checked against (None: nothing is checked)."""
        self._authorizer = authorizer
        self._producer_ids = producer_ids
        # The new producer ids an answer waits on, held until taken: the loop keeps only a
        # weak reference to a task.
        self._asking: set[asyncio.Future[Any]] = set()
        self._runtime = runtime
        self._concurrent_wait_s = concurrent_wait_ms / 1000
        self._routing = routing
        self._ends = TransactionEnds(runtime)
        self._log_topic = log_topic
        self._completions = completions
        self._max_id_length = max_id_length
        self._transaction_lookup = transaction_lookup
        self._views = TransactionViews(
            runtime,
            routing.partition_for,
            log_topic=log_topic,
            refused=lambda transactional_id: self._refused_id(transactional_id) is not None,
            limits=limits,
            sliced=sliced,
            authorizer=authorizer,
        )
        self._partition_adds = AddPartitionsToTxn(
            runtime,
            routing.partition_for,
            refused_id=self._refused_id,
            ending=completions.ending,
            concurrent_wait_s=self._concurrent_wait_s,
            limits=limits,
            sliced=sliced,
            max_partitions_per_transaction=max_partitions_per_transaction,
            partitions=partitions,
            authorizer=authorizer,
        )
        self.handlers: dict[int, Handler] = {
            ApiKey.INIT_PRODUCER_ID: typed_handler(InitProducerIdRequest, self.init_producer_id),
            # Straight to its machinery: no call through the service's own method.
            ApiKey.ADD_PARTITIONS_TO_TXN: typed_handler(
                AddPartitionsToTxnRequest, self._partition_adds.add_partitions_to_txn
            ),
            ApiKey.ADD_OFFSETS_TO_TXN: typed_handler(
                AddOffsetsToTxnRequest, self.add_offsets_to_txn
            ),
            ApiKey.END_TXN: typed_handler(EndTxnRequest, self.end_txn),
            ApiKey.WRITE_TXN_MARKERS: typed_handler(WriteTxnMarkersRequest, self.write_txn_markers),
            ApiKey.TXN_OFFSET_COMMIT: typed_handler(TxnOffsetCommitRequest, self.txn_offset_commit),
            ApiKey.DESCRIBE_TRANSACTIONS: typed_handler(
                DescribeTransactionsRequest, self.describe_transactions
            ),
            ApiKey.LIST_TRANSACTIONS: typed_handler(
                ListTransactionsRequest, self.list_transactions
            ),
        }

    def _refused_id(self, transactional_id: str | None) -> str | None:
        if not transactional_id:
            return "the transactional id must not be empty"
        if len(transactional_id) > self._max_id_length:
            return f"the transactional id is longer than {self._max_id_length} characters"
        return None

    @staticmethod
    def _answer(
        name: str,
        outcome: WriteOutcome[T],
        answer: Callable[[T], Reply],
        on_error: Callable[[ErrorCode, str | None], Message],
        *,
        effect: Callable[[T], None] | None = None,
    ) -> Reply:
        """The write's answer once committed (see `reply_then`), its failure as Kafka maps
        it."""
        return reply_then(
            name,
            outcome,
            answer,
            lambda error: on_error(*map_operation_error(name, error)),
            effect=effect,
        )

    def _submit(self, partition: int, completion: PendingCompleteTxn | None) -> None:
        if completion is not None:
            self._completions.submit(partition, completion)

    def _after_ending(self, transactional_id: str, send: Callable[[], Reply]) -> Reply:
        """`send()` now; or, while the transactional id's previous transaction is being
        ended here (its markers on their way, when the request would be answered
        CONCURRENT_TRANSACTIONS), as soon as its completion is written (the request's own
        write then follows it in the log) or after `concurrent_wait_ms`, whichever comes
        first. A producer's next transaction then starts when its last one ended, not a
        client's back-off later (Kafka's clients retry the first AddPartitionsToTxn of a
        transaction after 20 ms, KAFKA-5477; the project's own client after 10 ms). What
        waits is bounded by the connections' requests in flight: a callback and a timer
        each."""
        ending = self._completions.ending(transactional_id)
        if ending is None or self._concurrent_wait_s <= 0:
            return send()
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Message] = loop.create_future()

        sent = False

        def go(_: object = None) -> None:
            nonlocal sent
            if sent:
                return
            sent = True
            timer.cancel()
            ending.remove_done_callback(go)
            settle(reply, send)

        timer = loop.call_later(self._concurrent_wait_s, go)
        ending.add_done_callback(go)
        return PendingReply(reply)

    # InitProducerId.

    def init_producer_id(self, request: InitProducerIdRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> InitProducerIdResponse:
            # Kafka's coordinator answers no producer id and no epoch with an error.
            return InitProducerIdResponse(
                error_code=code,
                error_message=message,
                producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
            )

        transactional_id = request.transactional_id
        if (request.producer_id < 0) != (request.producer_epoch < 0):
            return error(
                ErrorCode.INVALID_REQUEST,
                "producer_id and producer_epoch are both set or both -1",
            )
        if transactional_id is not None:
            refusal = self._refused_id(transactional_id)
            if refusal is not None:
                return error(ErrorCode.INVALID_REQUEST, refusal)
            if request.transaction_timeout_ms <= 0:
                return error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        authorizer = self._authorizer
        if authorizer is not None:
            denied = _init_producer_id_denial(authorizer, ctx, transactional_id)
            if denied is not None:
                return error(denied)
        if transactional_id is None:
            # An idempotent producer: an id from any partition this node serves.
            partition = self._any_active_partition()
            if partition is None:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no partition is active yet")
        else:
            partition = self._routing.partition_for(transactional_id)

        source = self._producer_ids

        def send_with(fresh: int | None) -> Reply:
            def settled(result: InitProducerIdResult) -> None:
                if result.needs_producer_id:
                    return
                if fresh is not None and fresh != result.producer_id and source is not None:
                    source.give_back(fresh)
                self._submit(partition, result.completion)

            def to_message(result: InitProducerIdResult) -> Reply:
                if result.needs_producer_id:
                    # A new id was needed and none was in hand: wait for the cluster's.
                    return self._with_new_producer_id(send_with, error)
                return InitProducerIdResponse(
                    error_code=result.error,
                    producer_id=result.producer_id,
                    producer_epoch=result.producer_epoch,
                )

            outcome = self._runtime.write(
                "init-producer-id",
                partition,
                lambda shard: shard.init_producer_id(
                    transactional_id,
                    request.transaction_timeout_ms,
                    request.producer_id,
                    request.producer_epoch,
                    fresh,
                ),
            )
            return self._answer("init-producer-id", outcome, to_message, error, effect=settled)

        def send() -> Reply:
            # An id in hand goes with every request: most need none and give it back, and
            # one that needs it is not held up by a round trip to the cluster.
            return send_with(None if source is None else source.take_now())

        if transactional_id is None:
            return send()
        return self._after_ending(transactional_id, send)

    def _with_new_producer_id(
        self,
        send_with: Callable[[int | None], Reply],
        error: Callable[[ErrorCode, str | None], Message],
    ) -> Reply:
        """`send_with(id)` once the cluster handed out a new producer id;
        COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka answers while its producer id
        manager waits for a block) when it hands none out in time."""
        source = self._producer_ids
        if source is None:
            return error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id source")

        def no_id(failure: BaseException) -> Message:
            return error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"no producer id yet: {failure}")

        taking = asyncio.ensure_future(source.take())
        self._asking.add(taking)
        taking.add_done_callback(self._asking.discard)
        return reply_after(taking, send_with, no_id, unused=source.give_back)

    def _any_active_partition(self) -> int | None:
        for partition, state in sorted(self._runtime.partitions().items()):
            if state is CoordinatorState.ACTIVE:
                return partition
        return None

    # AddPartitionsToTxn (add_partitions_to_txn.py), AddOffsetsToTxn, EndTxn.

    def add_partitions_to_txn(
        self, request: AddPartitionsToTxnRequest, ctx: RequestContext
    ) -> Reply:
        return self._partition_adds.add_partitions_to_txn(request, ctx)

    def add_offsets_to_txn(self, request: AddOffsetsToTxnRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> AddOffsetsToTxnResponse:
            return AddOffsetsToTxnResponse(error_code=code, error_message=message)

        refusal = self._refused_id(request.transactional_id)
        if refusal is not None:
            return error(ErrorCode.INVALID_REQUEST, refusal)
        group_id = request.group_id
        if not group_id or len(group_id) > self._max_id_length:
            return error(ErrorCode.INVALID_GROUP_ID)
        authorizer = self._authorizer
        if authorizer is not None:
            # Kafka's handler: WRITE of the transactional id, then READ of the group.
            if not authorizer.allowed(
                ctx,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
                api=_ADD_OFFSETS_TO_TXN,
            ):
                return error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            if not authorizer.allowed(
                ctx, AclOperation.READ, ResourceType.GROUP, group_id, api=_ADD_OFFSETS_TO_TXN
            ):
                return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        group_partition = self._routing.partition_for(group_id)

        def to_message(result: AddOffsetsToTxnResult) -> Message:
            return AddOffsetsToTxnResponse(error_code=result.error)

        def send() -> Reply:
            outcome = self._runtime.write(
                "add-offsets-to-txn",
                self._routing.partition_for(request.transactional_id),
                lambda shard: shard.add_offsets_to_txn(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    group_id,
                    group_partition,
                ),
            )
            return self._answer("add-offsets-to-txn", outcome, to_message, error)

        return self._after_ending(request.transactional_id, send)

    def end_txn(self, request: EndTxnRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> EndTxnResponse:
            return EndTxnResponse(error_code=code, error_message=message)

        refusal = self._refused_id(request.transactional_id)
        if refusal is not None:
            return error(ErrorCode.INVALID_REQUEST, refusal)
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed(
            ctx,
            AclOperation.WRITE,
            ResourceType.TRANSACTIONAL_ID,
            request.transactional_id,
            api=_END_TXN,
        ):
            return error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        partition = self._routing.partition_for(request.transactional_id)

        def to_message(result: EndTxnResult) -> Message:
            return EndTxnResponse(
                error_code=result.error,
                producer_id=result.producer_id,
                producer_epoch=result.producer_epoch,
            )

        def start_markers(result: EndTxnResult) -> None:
            self._submit(partition, result.completion)

        def send() -> Reply:
            outcome = self._runtime.write(
                "end-txn",
                partition,
                lambda shard: shard.end_txn(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.committed,
                ),
            )
            return self._answer("end-txn", outcome, to_message, error, effect=start_markers)

        return self._after_ending(request.transactional_id, send)

    # TxnOffsetCommit.

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> TxnOffsetCommitResponse:
            # TxnOffsetCommit has no message field: the code per partition says it all.
            return request.error_response(code)

        group_id = request.group_id
        if not group_id or len(group_id) > self._max_id_length:
            return error(ErrorCode.INVALID_GROUP_ID)
        refusal = self._refused_id(request.transactional_id)
        if refusal is not None:
            return error(ErrorCode.INVALID_REQUEST, refusal)
        topics = request.topics
        # The answer to a committed result, and to a transaction refused by the verification.
        to_message: Callable[[TransactionalCommitAnswer], Message] = _txn_offset_commit_answer
        refuse: Callable[[ErrorCode], Message] = error
        authorizer = self._authorizer
        if authorizer is not None:
            # Kafka's handler: WRITE of the transactional id, else every partition refused;
            # READ of the group, likewise; then READ of each topic, the partitions of a
            # topic refused answered TOPIC_AUTHORIZATION_FAILED and the others committed.
            if not authorizer.allowed(
                ctx,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
                api=_TXN_OFFSET_COMMIT,
            ):
                return error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            if not authorizer.allowed(
                ctx, AclOperation.READ, ResourceType.GROUP, group_id, api=_TXN_OFFSET_COMMIT
            ):
                return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            denied = authorizer.denied(
                ctx,
                AclOperation.READ,
                ResourceType.TOPIC,
                [topic.name for topic in topics],
                api=_TXN_OFFSET_COMMIT,
            )
            if denied:
                refused = request.replace(
                    topics=[topic for topic in topics if topic.name in denied]
                ).error_response(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                topics = [topic for topic in topics if topic.name not in denied]
                if not topics:
                    # Nothing left to commit: Kafka does not ask the coordinator.
                    return refused
                authorized = request.replace(topics=topics)
                to_message = partial(_with_refused_topics, refused, _txn_offset_commit_answer)
                refuse = partial(_with_refused_topics, refused, authorized.error_response)
        group_partition = self._routing.partition_for(group_id)
        commit = TransactionalCommit(
            group_id=group_id,
            transactional_id=request.transactional_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            topics=[
                TransactionalCommitTopic(
                    name=topic.name,
                    partitions=[
                        TransactionalCommitPartition(
                            partition_index=p.partition_index,
                            committed_offset=p.committed_offset,
                            committed_leader_epoch=p.committed_leader_epoch,
                            committed_metadata=p.committed_metadata,
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in topics
            ],
        )

        def write() -> Reply:
            outcome = self._runtime.write(
                "txn-offset-commit",
                group_partition,
                lambda shard: shard.txn_offset_commit(commit),
            )
            return self._answer("txn-offset-commit", outcome, to_message, error)

        # Kafka's verification (KIP-890): the offsets are taken only inside the producer's
        # ongoing transaction that added this group, so that a zombie's late commit cannot
        # leave offsets no transaction will ever end. The transaction's own partition
        # answers: here, or the node that owns it (`transaction_lookup`).
        verdict = self._verdict(
            request.transactional_id, request.producer_id, request.producer_epoch, group_partition
        )

        def verified(refused: int) -> Reply:
            return write() if refused == ErrorCode.NONE else refuse(ErrorCode(refused))

        def unverified(failure: BaseException) -> Message:
            _, message = map_operation_error("verify-txn", failure)
            # A client before KIP-890 does not retry NETWORK_EXCEPTION: Kafka answers
            # COORDINATOR_LOAD_IN_PROGRESS for a verification that could not run.
            return error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, message)

        return reply_after(verdict, verified, unverified)

    def _verdict(
        self, transactional_id: str, producer_id: int, producer_epoch: int, log_partition: int
    ) -> asyncio.Future[int]:
        """Whether the producer's ongoing transaction added `log_partition`: NONE or the error
        a TxnOffsetCommit answers (the future fails when no answer could be had)."""
        txn_partition = self._routing.partition_for(transactional_id)
        lookup = self._transaction_lookup
        if (
            self._runtime.partition_state(txn_partition) is CoordinatorState.ACTIVE
            or lookup is None
        ):
            return self._runtime.schedule_read(
                "verify-txn",
                txn_partition,
                lambda shard, offset: shard.verify_transaction(
                    transactional_id, producer_id, producer_epoch, log_partition, offset
                ),
            )
        log_topic = self._log_topic

        async def remote() -> int:
            described = await lookup(txn_partition, transactional_id)
            if described is None or described.error_code not in (
                ErrorCode.NONE,
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
            ):
                raise CoordinatorLoadInProgressError("the transaction's coordinator did not answer")
            return remote_verdict(described, producer_id, producer_epoch, log_topic, log_partition)

        return asyncio.ensure_future(remote())

    # WriteTxnMarkers (between the nodes of a cluster).

    def write_txn_markers(self, request: WriteTxnMarkersRequest, ctx: RequestContext) -> Reply:
        """The end of transactions on this node's log partitions: for each marker, each
        named partition of the log gets the producer's transactional offsets committed or
        dropped (a repeat is a no-op).

        With an authorizer, only a principal that may ALTER the cluster or take
        CLUSTER_ACTION on it (Kafka's check, the second logged when denied; a node's
        principal, typically a super user) has markers written: any other gets every
        partition answered CLUSTER_AUTHORIZATION_FAILED."""
        authorizer = self._authorizer
        if authorizer is not None and not (
            authorizer.allowed_cluster(
                ctx, AclOperation.ALTER, api=_WRITE_TXN_MARKERS, log_denied=False
            )
            or authorizer.allowed_cluster(ctx, AclOperation.CLUSTER_ACTION, api=_WRITE_TXN_MARKERS)
        ):
            return _markers_refused(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        loop = asyncio.get_running_loop()
        slots: list[tuple[int, str, int, asyncio.Future[int]]] = []
        for index, marker in enumerate(request.markers):
            for topic in marker.topics:
                for partition in topic.partition_indexes:
                    if topic.name != self._log_topic or not (
                        0 <= partition < self._routing.num_partitions
                    ):
                        result: asyncio.Future[int] = loop.create_future()
                        result.set_result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    else:
                        result = self._ends.end_offsets(
                            partition,
                            marker.producer_id,
                            marker.producer_epoch,
                            marker.transaction_result,
                        )
                    slots.append((index, topic.name, partition, result))

        def gather() -> Message:
            by_marker: dict[int, dict[str, list[WriteTxnMarkersResponsePartition]]] = {}
            for index, name, partition, result in slots:
                by_marker.setdefault(index, {}).setdefault(name, []).append(
                    WriteTxnMarkersResponsePartition(
                        partition_index=partition, error_code=result.result()
                    )
                )
            return WriteTxnMarkersResponse(
                markers=[
                    WriteTxnMarkersResponseMarker(
                        producer_id=marker.producer_id,
                        topics=[
                            WriteTxnMarkersResponseTopic(name=name, partitions=partitions)
                            for name, partitions in by_marker.get(index, {}).items()
                        ],
                    )
                    for index, marker in enumerate(request.markers)
                ]
            )

        return reply_gathered([result for *_, result in slots], gather)

    # DescribeTransactions, ListTransactions (transaction_views.py).

    def describe_transactions(
        self,
        request: DescribeTransactionsRequest | DescribeTransactionsV1Request,
        ctx: RequestContext,
    ) -> Reply:
        return self._views.describe_transactions(request, ctx)

    def list_transactions(
        self, request: ListTransactionsRequest | ListTransactionsV1Request, ctx: RequestContext
    ) -> Reply:
        return self._views.list_transactions(request, ctx)


def _init_producer_id_denial(
    authorizer: RequestAuthorizer, ctx: RequestContext, transactional_id: str | None
) -> ErrorCode | None:
    """Why Kafka's handler refuses an InitProducerId, None when it does not: a
    transactional producer needs WRITE of its transactional id; an idempotent one
    IDEMPOTENT_WRITE of the cluster (its denial not logged) or WRITE of at least one topic
    (Kafka 3's `authorizeByResourceType`, which logs none either)."""
    if transactional_id is not None:
        if authorizer.allowed(
            ctx,
            AclOperation.WRITE,
            ResourceType.TRANSACTIONAL_ID,
            transactional_id,
            api=_INIT_PRODUCER_ID,
        ):
            return None
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if authorizer.allowed_cluster(
        ctx, AclOperation.IDEMPOTENT_WRITE, api=_INIT_PRODUCER_ID, log_denied=False
    ) or authorizer.allowed_by_resource_type(
        ctx, AclOperation.WRITE, ResourceType.TOPIC, api=_INIT_PRODUCER_ID
    ):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _txn_offset_commit_answer(result: TransactionalCommitAnswer) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=p.error_code
                    )
                    for p in topic.partitions
                ],
            )
            for topic in result.topics
        ]
    )


def _with_refused_topics(
    refused: TxnOffsetCommitResponse,
    answer: Callable[[T], TxnOffsetCommitResponse],
    result: T,
) -> Message:
    """`answer(result)` after the topics the principal may not read, refused (Kafka's
    `TxnOffsetCommitResponse.Builder` merges the coordinator's answer into them)."""
    return TxnOffsetCommitResponse(topics=refused.topics + answer(result).topics)


def _markers_refused(request: WriteTxnMarkersRequest, code: ErrorCode) -> WriteTxnMarkersResponse:
    """Every partition of every marker answered `code` (Kafka's
    `WriteTxnMarkersRequest.getErrorResponse`)."""
    markers: list[WriteTxnMarkersResponseMarker] = []
    for marker in request.markers:
        by_name: dict[str, list[WriteTxnMarkersResponsePartition]] = {}
        for topic in marker.topics:
            by_name.setdefault(topic.name, []).extend(
                WriteTxnMarkersResponsePartition(partition_index=partition, error_code=code)
                for partition in topic.partition_indexes
            )
        markers.append(
            WriteTxnMarkersResponseMarker(
                producer_id=marker.producer_id,
                topics=[
                    WriteTxnMarkersResponseTopic(name=name, partitions=partitions)
                    for name, partitions in by_name.items()
                ],
            )
        )
    return WriteTxnMarkersResponse(markers=markers)
