"""DescribeTransactions and ListTransactions: the transaction coordinator's views, read from
the committed state of the partitions this node serves (Kafka's
`TransactionCoordinator.handleDescribeTransactions` and `handleListTransactions`).

Both do bounded work, as the group APIs of `bulk_requests` do. They run in slices (see
`slicing`) with the event loop free between them. DescribeTransactions looks at a repeated
id once, reads the ids of a log partition a part at a time, and sizes its answer as it is
built: what each id named costs at least is checked against `max_response_bytes` first
(a request that cannot fit gets the contract's error body), and an id whose description
does not fit what is left is answered MESSAGE_TOO_LARGE. ListTransactions walks a log
partition's ids a part at a time too. Its version 1 answers in pages: the ids in one order
(by log partition, then by id), as many as fit the largest answer, and `next_cursor`, the id
the next page starts at; version 0 answers the whole list, or MESSAGE_TOO_LARGE at the top
when it does not fit.

With an authorizer, both answer as Kafka's handlers do: DescribeTransactions answers an id the
principal may not DESCRIBE with TRANSACTIONAL_ID_AUTHORIZATION_FAILED alone, and leaves out
of a described transaction the topics the principal may not DESCRIBE; ListTransactions lists
only the ids the principal may DESCRIBE.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace
from functools import partial
from itertools import islice
from typing import Final, cast

import msgspec

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseState,
    DescribeTransactionsResponseTopic,
    DescribeTransactionsV1Request,
    DescribeTransactionsV1Response,
    DescribeTransactionsV1ResponseRefusedMarker,
    DescribeTransactionsV1ResponseState,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseState,
    ListTransactionsV1Request,
    ListTransactionsV1Response,
)
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.groups.answer_sizes import (
    ARRAY_EXTRA,
    DESCRIBED_TRANSACTION_MIN_BYTES,
    DESCRIBED_TRANSACTION_V1_MIN_BYTES,
    described_transaction_extra_bytes,
    listed_transaction_bytes,
    str_bytes,
    str_extra,
)
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.bulk_requests import ErrorOnlyResponse
from coordinator_server.service.errors import NO_OWNERSHIP, map_operation_error
from coordinator_server.service.limits import RequestLimits, answer_too_large, too_long
from coordinator_server.service.replies import Reply, future_failure, sliced_reply
from coordinator_server.service.slicing import PAUSE, SliceClock, SlicedRequests, Step, Steps
from coordinator_server.shard import TransactionShard
from coordinator_server.transactions.metadata import TransactionState
from coordinator_server.transactions.results import ListedTransaction, TransactionDescription

# Items handled between two looks at the slice's clock, by what an item costs: counting a
# repeat or copying an id, hashing a transactional id, answering an item.
_COUNT_CHUNK: Final = 2048
_HASH_CHUNK: Final = 64
_ANSWER_CHUNK: Final = 4096
# Transactional ids one DescribeTransactions read describes.
_DESCRIBE_CHUNK: Final = 64
# Transactional ids one ListTransactions read looks up, and sorted at once (the rest are
# merged as they are listed).
_LIST_CHUNK: Final = 1024
_SORT_CHUNK: Final = 4096

# Kafka's names of the requests, which the authorizer's log and counts say.
_DESCRIBE_TRANSACTIONS: Final = api_name(ApiKey.DESCRIBE_TRANSACTIONS)
_LIST_TRANSACTIONS: Final = api_name(ApiKey.LIST_TRANSACTIONS)

_VERSION_1_HINT: Final = (
    "; ListTransactions version 1 answers the list in pages (request `cursor`, response "
    "`next_cursor`)"
)


class TransactionViews:
    def __init__(
        self,
        runtime: CoordinatorRuntime[TransactionShard],
        partition_for: Callable[[str], int],
        *,
        log_topic: str,
        refused: Callable[[str], bool],
        limits: RequestLimits | None = None,
        sliced: SlicedRequests | None = None,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        """`refused`: whether a transactional id is refused as the request's (empty, too
        long); `log_topic` names the log partitions a transaction added; `limits` and
        `sliced`: the group coordinator's, which these views share; `authorizer`: what
        requests are checked against (None: nothing is checked)."""
        self._authorizer = authorizer
        self._runtime = runtime
        self._partition_for = partition_for
        self._log_topic = log_topic
        self._refused = refused
        self._limits = limits or RequestLimits()
        self._sliced = sliced or SlicedRequests()

    def _too_large(self, items_bytes: int) -> ErrorOnlyResponse:
        code, message = self._refusal(items_bytes)
        return ErrorOnlyResponse(error_code=code, error_message=message)

    def _refusal(self, items_bytes: int) -> tuple[ErrorCode, str]:
        """MESSAGE_TOO_LARGE for an answer whose items take `items_bytes`, with what the
        rest of the answer takes at most."""
        limits = self._limits
        return answer_too_large(
            items_bytes + limits.max_response_bytes - limits.answer_items_bytes, limits
        )

    # DescribeTransactions.

    def describe_transactions(
        self,
        request: DescribeTransactionsRequest | DescribeTransactionsV1Request,
        ctx: RequestContext,
    ) -> Reply:
        """Version 1 also answers the markers the id's last completed transaction was
        completed without (refused for good by the brokers)."""
        version_1 = isinstance(request, DescribeTransactionsV1Request)
        least_each = (
            DESCRIBED_TRANSACTION_V1_MIN_BYTES if version_1 else DESCRIBED_TRANSACTION_MIN_BYTES
        )
        ids = request.transactional_ids
        # What the ids cost at least without their names: a request that cannot fit is
        # answered before any work.
        if len(ids) * least_each > self._limits.answer_items_bytes:
            return self._too_large(len(ids) * least_each)
        return sliced_reply(
            self._sliced.run(lambda clock: self._describe(ids, version_1, least_each, ctx, clock))
        )

    def _describe(
        self,
        ids: list[str],
        version_1: bool,
        least_each: int,
        ctx: RequestContext,
        clock: SliceClock,
    ) -> Steps:
        state_type: type[DescribeTransactionsResponseState] = (
            DescribeTransactionsV1ResponseState if version_1 else DescribeTransactionsResponseState
        )
        counts = yield from _count(ids, clock)
        least = 0
        distinct = list(counts.items())
        for start in range(0, len(distinct), _ANSWER_CHUNK):
            for transactional_id, count in distinct[start : start + _ANSWER_CHUNK]:
                least += count * (least_each + str_extra(transactional_id))
            if clock.due():
                yield PAUSE
        # What the descriptions may add beyond the least each costs.
        room = self._limits.answer_items_bytes - least
        if room < 0:
            return self._too_large(least)
        answers: dict[str, DescribeTransactionsResponseState] = {}
        describe_op = _describe_op
        authorizer = self._authorizer
        if authorizer is not None:
            distinct = yield from self._authorized_ids(
                authorizer, ctx, distinct, answers, state_type, clock
            )
            describe_op = partial(_visible_describe_op, self._visible_topics(authorizer, ctx))
        by_partition: dict[int, list[str]] = {}
        refused = self._refused
        partition_for = self._partition_for
        for start in range(0, len(distinct), _HASH_CHUNK):
            for transactional_id, _ in distinct[start : start + _HASH_CHUNK]:
                if refused(transactional_id):
                    answers[transactional_id] = state_type(
                        error_code=ErrorCode.INVALID_REQUEST, transactional_id=transactional_id
                    )
                else:
                    by_partition.setdefault(partition_for(transactional_id), []).append(
                        transactional_id
                    )
            if clock.due():
                yield PAUSE
        for partition, partition_ids in by_partition.items():
            for start in range(0, len(partition_ids), _DESCRIBE_CHUNK):
                chunk = partition_ids[start : start + _DESCRIBE_CHUNK]
                read = self._runtime.schedule_read(
                    "describe-transactions", partition, describe_op(chunk)
                )
                error = future_failure(read)
                if error is not None:
                    code, _ = map_operation_error("describe-transactions", error)
                    for transactional_id in chunk:
                        answers[transactional_id] = state_type(
                            error_code=code, transactional_id=transactional_id
                        )
                else:
                    for described in read.result():
                        transactional_id = described.transactional_id
                        state = self._described_state(described, version_1)
                        if described.error == ErrorCode.NONE:
                            extra = counts[transactional_id] * described_transaction_extra_bytes(
                                described.state,
                                self._described_topics(described),
                                described.refused_markers if version_1 else (),
                            )
                            if extra <= room:
                                room -= extra
                            else:
                                state = state_type(
                                    error_code=ErrorCode.MESSAGE_TOO_LARGE,
                                    transactional_id=transactional_id,
                                )
                        answers[transactional_id] = state
                if clock.due():
                    yield PAUSE
        states: list[DescribeTransactionsResponseState] = []
        for start in range(0, len(ids), _ANSWER_CHUNK):
            states.extend([answers[tid] for tid in ids[start : start + _ANSWER_CHUNK]])
            if clock.due():
                yield PAUSE
        if version_1:
            return DescribeTransactionsV1Response(
                transaction_states=cast("list[DescribeTransactionsV1ResponseState]", states)
            )
        return DescribeTransactionsResponse(transaction_states=states)

    def _authorized_ids(
        self,
        authorizer: RequestAuthorizer,
        ctx: RequestContext,
        distinct: list[tuple[str, int]],
        answers: dict[str, DescribeTransactionsResponseState],
        state_type: type[DescribeTransactionsResponseState],
        clock: SliceClock,
    ) -> Generator[Step, None, list[tuple[str, int]]]:
        """The ids of `distinct` (with how often each is named) the principal may DESCRIBE;
        the others answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED at once. An id refused as
        the request's is left to be refused: it is refused whoever asks."""
        refused = self._refused
        allowed: list[tuple[str, int]] = []
        for start in range(0, len(distinct), _HASH_CHUNK):
            for transactional_id, count in distinct[start : start + _HASH_CHUNK]:
                if refused(transactional_id) or authorizer.allowed(
                    ctx,
                    AclOperation.DESCRIBE,
                    ResourceType.TRANSACTIONAL_ID,
                    transactional_id,
                    api=_DESCRIBE_TRANSACTIONS,
                    ref_count=count,
                ):
                    allowed.append((transactional_id, count))
                else:
                    answers[transactional_id] = state_type(
                        error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        transactional_id=transactional_id,
                    )
            if clock.due():
                yield PAUSE
        return allowed

    def _visible_topics(
        self, authorizer: RequestAuthorizer, ctx: RequestContext
    ) -> Callable[[TransactionDescription], TransactionDescription]:
        """What a described transaction shows the principal: only the topics it may
        DESCRIBE (Kafka's handler removes the others from the answer), among them the log
        topic of the transaction's offsets, and the refused markers of those topics."""
        log_topic = self._log_topic

        def visible(topic: str) -> bool:
            return authorizer.allowed(
                ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, api=_DESCRIBE_TRANSACTIONS
            )

        def shown(described: TransactionDescription) -> TransactionDescription:
            if described.error != ErrorCode.NONE:
                return described
            return replace(
                described,
                topics=tuple(topic for topic in described.topics if visible(topic[0])),
                log_partitions=(
                    described.log_partitions
                    if described.log_partitions and visible(log_topic)
                    else ()
                ),
                refused_markers=tuple(
                    marker for marker in described.refused_markers if visible(marker[0])
                ),
            )

        return shown

    def _described_topics(
        self, described: TransactionDescription
    ) -> list[tuple[str, Sequence[int]]]:
        topics: list[tuple[str, Sequence[int]]] = list(described.topics)
        if described.log_partitions:
            # The log partitions of AddOffsetsToTxn, as Kafka lists its __consumer_offsets
            # partitions.
            topics.append((self._log_topic, described.log_partitions))
        return topics

    def _described_state(
        self, described: TransactionDescription, version_1: bool
    ) -> DescribeTransactionsResponseState:
        if described.error != ErrorCode.NONE:
            state_type = (
                DescribeTransactionsV1ResponseState
                if version_1
                else DescribeTransactionsResponseState
            )
            return state_type(
                error_code=described.error, transactional_id=described.transactional_id
            )
        state = DescribeTransactionsResponseState(
            error_code=described.error,
            transactional_id=described.transactional_id,
            transaction_state=described.state,
            transaction_timeout_ms=described.timeout_ms,
            transaction_start_time_ms=described.start_time_ms,
            producer_id=described.producer_id,
            producer_epoch=described.producer_epoch,
            topics=[
                DescribeTransactionsResponseTopic(topic=topic, partitions=list(partitions))
                for topic, partitions in self._described_topics(described)
            ],
        )
        if not version_1:
            return state
        # Version 1: the same fields, and the markers refused for good.
        return DescribeTransactionsV1ResponseState(
            **msgspec.structs.asdict(state),
            refused_markers=[
                DescribeTransactionsV1ResponseRefusedMarker(
                    topic=topic, partition_index=partition, error_code=code
                )
                for topic, partition, code in described.refused_markers
            ],
        )

    # ListTransactions.

    def list_transactions(
        self,
        request: ListTransactionsRequest | ListTransactionsV1Request,
        ctx: RequestContext,
    ) -> Reply:
        """Every transaction of the partitions this node serves (a client asks every node,
        as Kafka's admin client asks every broker), or with version 1 the page that starts
        at the request's `cursor`; COORDINATOR_LOAD_IN_PROGRESS while one of the partitions
        loads, as Kafka answers, and COORDINATOR_NOT_AVAILABLE while the node does not know
        which partitions it owns: a list without them would be taken as whole."""
        version_1 = isinstance(request, ListTransactionsV1Request)
        answer_type = ListTransactionsV1Response if version_1 else ListTransactionsResponse
        if not self._runtime.may_serve():
            return answer_type(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=NO_OWNERSHIP
            )
        loading = self._runtime.loading_partitions()
        if loading:
            return answer_type(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                error_message=f"partitions {loading} are loading",
            )
        cursor = request.cursor if isinstance(request, ListTransactionsV1Request) else None
        refusal = too_long("the cursor", cursor, self._limits.max_id_length)
        if refusal is not None:
            return answer_type(error_code=ErrorCode.INVALID_REQUEST, error_message=refusal)
        return sliced_reply(self._sliced.run(lambda clock: self._list(request, cursor, ctx, clock)))

    def _list(
        self,
        request: ListTransactionsRequest | ListTransactionsV1Request,
        cursor: str | None,
        ctx: RequestContext,
        clock: SliceClock,
    ) -> Steps:
        version_1 = isinstance(request, ListTransactionsV1Request)
        # The filters, and what the answer's echo of the unknown state names takes.
        states: set[TransactionState] | None = set() if request.state_filters else None
        unknown: list[str] = []
        unknown_bytes = ARRAY_EXTRA
        names = request.state_filters
        for start in range(0, len(names), _COUNT_CHUNK):
            for name in names[start : start + _COUNT_CHUNK]:
                state = TransactionState.from_name(name)
                if state is None:
                    unknown.append(name)
                    unknown_bytes += str_bytes(name)
                elif states is not None:
                    states.add(state)
            if clock.due():
                yield PAUSE
        producer_ids: set[int] = set()
        wanted = request.producer_id_filters
        for start in range(0, len(wanted), _COUNT_CHUNK * 8):
            producer_ids.update(wanted[start : start + _COUNT_CHUNK * 8])
            if clock.due():
                yield PAUSE
        matcher = _pattern(request.transactional_id_pattern)
        authorizer = self._authorizer
        if authorizer is not None:
            # Kafka's handler: only the ids the principal may DESCRIBE, each denial logged
            # as Kafka logs it; those the pattern leaves out are not asked about.
            matcher = _both(
                matcher,
                partial(
                    authorizer.allowed,
                    ctx,
                    AclOperation.DESCRIBE,
                    ResourceType.TRANSACTIONAL_ID,
                    api=_LIST_TRANSACTIONS,
                ),
            )
        budget = self._limits.answer_items_bytes - unknown_bytes
        if budget < 0:
            code, message = self._refusal(unknown_bytes)
            answer_type = ListTransactionsV1Response if version_1 else ListTransactionsResponse
            return answer_type(error_code=code, error_message=message)
        first = 0 if cursor is None else self._partition_for(cursor)
        partitions = [
            partition
            for partition, state in sorted(self._runtime.partitions().items())
            if state is CoordinatorState.ACTIVE and partition >= first
        ]
        listed: list[ListTransactionsResponseState] = []
        size = 0
        last_bytes = 0
        next_cursor: str | None = None
        for partition in partitions:
            read = self._runtime.schedule_read(
                "list-transactions", partition, _transactional_ids_op
            )
            if future_failure(read) is not None:
                # The partition unloaded meanwhile: its transactions are another node's to
                # list now.
                continue
            ids = read.result()
            if cursor is not None and partition == first:
                ids = yield from _at_or_after(ids, cursor, clock)
            order: Iterator[str] = (yield from _sorted(ids, clock)) if version_1 else iter(ids)
            while next_cursor is None and (batch := list(islice(order, _LIST_CHUNK))):
                found = self._runtime.schedule_read(
                    "list-transactions",
                    partition,
                    _list_op(batch, states, producer_ids, request.duration_filter),
                )
                if future_failure(found) is not None:
                    break
                for txn in found.result():
                    if matcher is not None and not matcher(txn.transactional_id):
                        continue
                    item_bytes = listed_transaction_bytes(txn.transactional_id, txn.state)
                    if size + item_bytes > budget:
                        if not version_1:
                            code, message = self._refusal(unknown_bytes + size + item_bytes)
                            return ListTransactionsResponse(
                                error_code=code, error_message=message + _VERSION_1_HINT
                            )
                        next_cursor = txn.transactional_id
                        break
                    size += item_bytes
                    last_bytes = item_bytes
                    listed.append(_listed_state(txn))
                if clock.due():
                    yield PAUSE
            if next_cursor is not None:
                break
        if next_cursor is not None:
            # Room for the cursor: the last id listed goes to the next page when it does not
            # leave it (it takes more than its id alone).
            if listed and size + str_bytes(next_cursor) > budget:
                next_cursor = listed.pop().transactional_id
                size -= last_bytes
            if not listed:
                return ListTransactionsV1Response(
                    error_code=ErrorCode.MESSAGE_TOO_LARGE,
                    error_message="the first transaction of the page does not fit the largest "
                    f"answer (max_response_bytes {self._limits.max_response_bytes})",
                )
        if version_1:
            return ListTransactionsV1Response(
                unknown_state_filters=unknown, transaction_states=listed, next_cursor=next_cursor
            )
        return ListTransactionsResponse(unknown_state_filters=unknown, transaction_states=listed)


def _count(items: list[str], clock: SliceClock) -> Generator[Step, None, dict[str, int]]:
    """How many times each distinct item is named, in the order first named."""
    counts: dict[str, int] = {}
    get = counts.get
    for start in range(0, len(items), _COUNT_CHUNK):
        for item in items[start : start + _COUNT_CHUNK]:
            counts[item] = get(item, 0) + 1
        if clock.due():
            yield PAUSE
    return counts


def _at_or_after(
    ids: list[str], cursor: str, clock: SliceClock
) -> Generator[Step, None, list[str]]:
    kept: list[str] = []
    for start in range(0, len(ids), _COUNT_CHUNK):
        kept.extend([tid for tid in ids[start : start + _COUNT_CHUNK] if tid >= cursor])
        if clock.due():
            yield PAUSE
    return kept


def _sorted(ids: list[str], clock: SliceClock) -> Generator[Step, None, Iterator[str]]:
    """`ids` in order: sorted a part at a time, the parts merged as they are read."""
    parts: list[list[str]] = []
    for start in range(0, len(ids), _SORT_CHUNK):
        parts.append(sorted(ids[start : start + _SORT_CHUNK]))
        if clock.due():
            yield PAUSE
    if len(parts) == 1:
        return iter(parts[0])
    return heapq.merge(*parts)


def _listed_state(txn: ListedTransaction) -> ListTransactionsResponseState:
    return ListTransactionsResponseState(
        transactional_id=txn.transactional_id,
        producer_id=txn.producer_id,
        transaction_state=txn.state,
    )


# The operations, each made by a function so that it holds its own arguments.


def _describe_op(
    transactional_ids: list[str],
) -> Callable[[TransactionShard, int], list[TransactionDescription]]:
    return lambda shard, offset: shard.describe_transactions(transactional_ids, offset)


def _transactional_ids_op(shard: TransactionShard, offset: int) -> list[str]:
    return shard.transactional_ids(offset)


def _list_op(
    transactional_ids: list[str],
    states: set[TransactionState] | None,
    producer_ids: set[int],
    duration_ms: int,
) -> Callable[[TransactionShard, int], list[ListedTransaction]]:
    return lambda shard, offset: shard.list_transactions_of(
        transactional_ids, states, producer_ids, duration_ms, offset
    )


def _visible_describe_op(
    shown: Callable[[TransactionDescription], TransactionDescription],
    transactional_ids: list[str],
) -> Callable[[TransactionShard, int], list[TransactionDescription]]:
    """`_describe_op` of what each description shows the principal."""

    def describe(shard: TransactionShard, offset: int) -> list[TransactionDescription]:
        return [shown(each) for each in shard.describe_transactions(transactional_ids, offset)]

    return describe


def _both(
    first: Callable[[str], bool] | None, then: Callable[[str], bool]
) -> Callable[[str], bool]:
    """An id matched when `first` (None: any id) and then `then` match it."""
    if first is None:
        return then
    return lambda transactional_id: first(transactional_id) and then(transactional_id)


def _pattern(pattern: str | None) -> Callable[[str], bool] | None:
    """ListTransactions' `transactional_id_pattern` (KIP-1152): a Java regular expression
    the whole id must match; None or empty: every id."""
    if not pattern:
        return None
    try:
        compiled = re.compile(pattern)
    except re.error:
        return lambda _: False
    return lambda transactional_id: compiled.fullmatch(transactional_id) is not None
