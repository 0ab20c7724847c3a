"""AddPartitionsToTxn: a transaction's data partitions joining it (Kafka's
`TransactionCoordinator.handleAddPartitionsToTransaction`, behind
`KafkaApis.handleAddPartitionsToTxnRequest`'s checks).

A request may name any number of partitions, so it runs in slices (see `slicing`) with the
event loop free between them: what the request alone decides first (its transactional id,
more distinct partitions than a transaction may hold, an answer larger than
`max_response_bytes`), then, with an authorizer, what the principal may write, then the
partitions checked against the data cluster's (`PartitionCatalog`, a part at a time), then
one write of the partitions as a set made beforehand, and the answer built a part at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final, Protocol

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponsePartition,
    AddPartitionsToTxnResponseTopic,
)
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.groups.answer_sizes import ADDED_PARTITION_BYTES, added_topic_bytes
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import RequestLimits, answer_too_large
from coordinator_server.service.replies import Reply, future_failure, sliced_reply
from coordinator_server.service.slicing import PAUSE, SliceClock, SlicedRequests, Step, Steps
from coordinator_server.shard import TransactionShard
from coordinator_server.transactions.metadata import TxnPartitions

# Items handled between two looks at the slice's clock: topics sized, partitions counted or
# answered; and the partitions checked against the cluster's metadata in one call.
_TOPIC_CHUNK: Final = 1024
_PARTITION_CHUNK: Final = 8192
_CHECK_CHUNK: Final = 8192

# Kafka's name of the request, which the authorizer's log and counts say.
_ADD_PARTITIONS_TO_TXN: Final = api_name(ApiKey.ADD_PARTITIONS_TO_TXN)

# Kafka's internal topics (`Topic.isInternal`): AddPartitionsToTxn never authorizes a
# producer to write them.
_KAFKA_INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


class PartitionCatalog(Protocol):
    """Which partitions of the data cluster exist: a transaction's markers must land on
    them (the marker writer's metadata)."""

    def unknown_partitions_now(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]] | None:
        """The partitions of `topics` the cluster does not have, from what is cached; None
        when that is not enough to tell."""
        ...

    async def unknown_partitions(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]]:
        """The same, asking the cluster; raises when it does not answer."""
        ...


class AddPartitionsToTxn:
    def __init__(
        self,
        runtime: CoordinatorRuntime[TransactionShard],
        partition_for: Callable[[str], int],
        *,
        refused_id: Callable[[str | None], str | None],
        ending: Callable[[str], asyncio.Future[None] | None],
        concurrent_wait_s: float,
        limits: RequestLimits,
        sliced: SlicedRequests,
        max_partitions_per_transaction: int,
        partitions: PartitionCatalog | None,
        authorizer: RequestAuthorizer | None,
    ) -> None:
        """The transaction service's: `refused_id`, why a transactional id is refused as
        the request's (None: it is not); `ending`, the end under way of a transactional id's
        previous transaction, which the write waits for, `concurrent_wait_s` at most;
        `partitions`, the data cluster's (None: any partition is taken);
        `max_partitions_per_transaction`, the shards' limit, checked first against the
        request alone; `limits`, `sliced` and `authorizer` as the service has them."""
        self._runtime = runtime
        self._partition_for = partition_for
        self._refused_id = refused_id
        self._ending = ending
        self._concurrent_wait_s = concurrent_wait_s
        self._limits = limits
        self._sliced = sliced
        self._max_partitions_per_transaction = max_partitions_per_transaction
        self._partitions = partitions
        self._authorizer = authorizer
        # The metadata checks an answer waits on, held until done: the loop keeps only a
        # weak reference to a task.
        self._asking: set[asyncio.Future[Any]] = set()

    def add_partitions_to_txn(
        self, request: AddPartitionsToTxnRequest, ctx: RequestContext
    ) -> Reply:
        """The request's partitions join its transaction, with bounded work however many it
        names: see `_add_partitions`."""
        return sliced_reply(
            self._sliced.run(lambda clock: self._add_partitions(request, ctx, clock))
        )

    def _add_partitions(
        self, request: AddPartitionsToTxnRequest, ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        """AddPartitionsToTxn in slices. What the request alone decides comes first, before
        any work on the state or the cluster's metadata: an invalid transactional id, more
        distinct partitions than a transaction may hold (POLICY_VIOLATION, as the shard
        answers a transaction that would grow past it), an answer larger than
        `max_response_bytes` (it names every partition as the request does). Then the
        partitions are checked against the cluster's metadata a part at a time and written
        as one set made beforehand, so that the write itself does little, and the answer is
        built a part at a time.

        With an authorizer, once the request alone is found acceptable, Kafka's handler's
        checks: WRITE of the transactional id, else every partition refused; then WRITE of
        each topic (never of Kafka's internal topics): when a topic is refused, its
        partitions are answered TOPIC_AUTHORIZATION_FAILED, those the cluster lacks
        UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, nothing added."""
        topics = request.topics
        limits = self._limits
        # What the answer takes, from the request alone.
        size = 0
        for start in range(0, len(topics), _TOPIC_CHUNK):
            for topic in topics[start : start + _TOPIC_CHUNK]:
                size += added_topic_bytes(topic.name) + len(topic.partitions) * (
                    ADDED_PARTITION_BYTES
                )
            if clock.due():
                yield PAUSE
        fits = size <= limits.answer_items_bytes
        refusal = self._refused_id(request.transactional_id)
        if refusal is not None:
            return (yield from _added(request, ErrorCode.INVALID_REQUEST, refusal, fits, clock))
        # Each topic's partitions as a set: counted once however often they are named.
        most = self._max_partitions_per_transaction
        by_topic: dict[str, set[int]] = {}
        distinct = 0
        work = 0
        for topic in topics:
            indexes = by_topic.get(topic.name)
            if indexes is None:
                indexes = by_topic[topic.name] = set()
            named = topic.partitions
            for start in range(0, len(named), _PARTITION_CHUNK):
                before = len(indexes)
                chunk = named[start : start + _PARTITION_CHUNK]
                indexes.update(chunk)
                distinct += len(indexes) - before
                if distinct > most:
                    message = (
                        f"the request names more than {most} distinct partitions, more than a "
                        "transaction may hold (max_partitions_per_transaction)"
                    )
                    return (
                        yield from _added(request, ErrorCode.POLICY_VIOLATION, message, fits, clock)
                    )
                work += len(chunk)
                if work >= _PARTITION_CHUNK:
                    work = 0
                    if clock.due():
                        yield PAUSE
            work += 1
            if work >= _PARTITION_CHUNK:
                work = 0
                if clock.due():
                    yield PAUSE
        if not fits:
            code, message = answer_too_large(size, limits)
            return AddPartitionsToTxnResponse(error_code=code, error_message=message)
        authorizer = self._authorizer
        if authorizer is not None:
            if not authorizer.allowed(
                ctx,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
                api=_ADD_PARTITIONS_TO_TXN,
            ):
                code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                return (yield from _added(request, code, None, True, clock))
            denied = authorizer.denied(
                ctx,
                AclOperation.WRITE,
                ResourceType.TOPIC,
                {
                    name: len(indexes)
                    for name, indexes in by_topic.items()
                    if name not in _KAFKA_INTERNAL_TOPICS
                },
                api=_ADD_PARTITIONS_TO_TXN,
            )
            denied.update(_KAFKA_INTERNAL_TOPICS.intersection(by_topic))
            if denied:
                return (yield from self._refused_topics(request, by_topic, denied, clock))
        # Each topic's set frozen and sorted once, here: the write then only joins sets.
        frozen: dict[str, frozenset[int]] = {}
        sorted_indexes: dict[str, tuple[int, ...]] = {}
        work = 0
        for name, indexes in by_topic.items():
            if indexes:
                frozen[name] = frozen_indexes = frozenset(indexes)
                sorted_indexes[name] = tuple(sorted(frozen_indexes))
            work += len(indexes) + 1
            if work >= _PARTITION_CHUNK:
                work = 0
                if clock.due():
                    yield PAUSE
        del by_topic
        partitions = TxnPartitions(frozen, sorted_indexes)

        catalog = self._partitions
        if catalog is not None:
            unknown = yield from self._unknown_partitions(catalog, sorted_indexes, clock)
            if isinstance(unknown, BaseException):
                return (yield from _unreadable_partitions(request, unknown, clock))
            if unknown:
                # Kafka's answer: the partitions its metadata lacks, and nothing of the rest
                # done.
                return (yield from _added(request, ErrorCode.NONE, None, True, clock, unknown))

        # While the transactional id's previous transaction is being ended here, the write
        # waits for that end, or `concurrent_wait_s`, as the service's other requests do.
        ending = self._ending(request.transactional_id)
        if ending is not None and self._concurrent_wait_s > 0:
            loop = asyncio.get_running_loop()
            waited: asyncio.Future[None] = loop.create_future()

            def stop_waiting(_: object = None) -> None:
                if not waited.done():
                    waited.set_result(None)

            timer = loop.call_later(self._concurrent_wait_s, stop_waiting)
            ending.add_done_callback(stop_waiting)
            try:
                yield [waited]
            finally:
                timer.cancel()
                ending.remove_done_callback(stop_waiting)

        outcome = self._runtime.write(
            "add-partitions-to-txn",
            self._partition_for(request.transactional_id),
            lambda shard: shard.add_partitions_to_txn(
                request.transactional_id, request.producer_id, request.producer_epoch, partitions
            ),
        )
        result = outcome.response
        error = outcome.error
        future = outcome.future
        if future is not None:
            if not future.done():
                yield [future]
            error = future_failure(future)
            result = None if error is not None else future.result()
        if error is not None:
            code, why = map_operation_error("add-partitions-to-txn", error)
            return (yield from _added(request, code, why, True, clock))
        assert result is not None
        return (yield from _added(request, ErrorCode.NONE, None, True, clock, each=result.error))

    def _unknown_partitions(
        self,
        catalog: PartitionCatalog,
        sorted_indexes: dict[str, tuple[int, ...]],
        clock: SliceClock,
    ) -> Generator[Step, None, set[tuple[str, int]] | BaseException]:
        """The partitions of `sorted_indexes` the cluster lacks, checked a part at a time;
        the failure when the cluster's metadata cannot be read."""
        unknown: set[tuple[str, int]] = set()
        for piece in _pieces(sorted_indexes, _CHECK_CHUNK):
            found = catalog.unknown_partitions_now(piece)
            if found is None:
                asking = asyncio.ensure_future(catalog.unknown_partitions(piece))
                # Held until done: the loop keeps only a weak reference to a task.
                self._asking.add(asking)
                asking.add_done_callback(self._asking.discard)
                if not asking.done():
                    yield [asking]
                failure = future_failure(asking)
                if failure is not None:
                    return failure
                found = asking.result()
            unknown |= found
            if clock.due():
                yield PAUSE
        return unknown

    def _refused_topics(
        self,
        request: AddPartitionsToTxnRequest,
        by_topic: dict[str, set[int]],
        denied: set[str],
        clock: SliceClock,
    ) -> Steps:
        """AddPartitionsToTxn's answer when the principal may not write some of its topics
        (Kafka's: the refused topics' partitions TOPIC_AUTHORIZATION_FAILED, the others'
        UNKNOWN_TOPIC_OR_PARTITION where the cluster lacks them, else
        OPERATION_NOT_ATTEMPTED); nothing is added."""
        unknown: set[tuple[str, int]] = set()
        catalog = self._partitions
        if catalog is not None:
            allowed = {
                name: tuple(sorted(indexes))
                for name, indexes in by_topic.items()
                if indexes and name not in denied
            }
            found = yield from self._unknown_partitions(catalog, allowed, clock)
            if isinstance(found, BaseException):
                return (yield from _unreadable_partitions(request, found, clock))
            unknown = found
        no_error = ErrorCode.NONE
        return (yield from _added(request, no_error, None, True, clock, unknown, denied=denied))


def _added(
    request: AddPartitionsToTxnRequest,
    error: ErrorCode,
    message: str | None,
    fits: bool,
    clock: SliceClock,
    unknown: set[tuple[str, int]] | None = None,
    *,
    each: int | None = None,
    denied: AbstractSet[str] = frozenset(),
) -> Generator[Step, None, AddPartitionsToTxnResponse]:
    """AddPartitionsToTxn's answer, built a part at a time: `error` at the top (with
    `message`), and every partition of the request answered `each` (by default `error`), as
    Kafka's response does; with `unknown`, the partitions of the `denied` topics answered
    TOPIC_AUTHORIZATION_FAILED, those the cluster lacks UNKNOWN_TOPIC_OR_PARTITION and the
    others OPERATION_NOT_ATTEMPTED. An answer that does not fit (`fits` False) names no
    partition: it is the error at the top alone."""
    if not fits:
        return AddPartitionsToTxnResponse(error_code=error, error_message=message)
    code = error if each is None else each
    results: list[AddPartitionsToTxnResponseTopic] = []
    work = 0
    for topic in request.topics:
        name = topic.name
        indexes = topic.partitions
        answered: list[AddPartitionsToTxnResponsePartition] = []
        uniform: int | None = code
        if unknown is not None:
            uniform = ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in denied else None
        for start in range(0, len(indexes), _PARTITION_CHUNK):
            chunk = indexes[start : start + _PARTITION_CHUNK]
            if uniform is not None:
                answered.extend(
                    [
                        AddPartitionsToTxnResponsePartition(
                            partition_index=p, partition_error_code=uniform
                        )
                        for p in chunk
                    ]
                )
            else:
                assert unknown is not None
                answered.extend(
                    [
                        AddPartitionsToTxnResponsePartition(
                            partition_index=p,
                            partition_error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            if (name, p) in unknown
                            else ErrorCode.OPERATION_NOT_ATTEMPTED,
                        )
                        for p in chunk
                    ]
                )
            work += len(chunk)
            if work >= _PARTITION_CHUNK:
                work = 0
                if clock.due():
                    yield PAUSE
        results.append(AddPartitionsToTxnResponseTopic(name=name, results_by_partition=answered))
        work += 1
    return AddPartitionsToTxnResponse(
        error_code=error, error_message=message, results_by_topic=results
    )


def _unreadable_partitions(
    request: AddPartitionsToTxnRequest, failure: BaseException, clock: SliceClock
) -> Generator[Step, None, AddPartitionsToTxnResponse]:
    return (
        yield from _added(
            request,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"the cluster's partitions cannot be read now: {failure!r}",
            True,
            clock,
        )
    )


def _pieces(
    sorted_indexes: dict[str, tuple[int, ...]], size: int
) -> Iterator[list[tuple[str, tuple[int, ...]]]]:
    """The partitions of `sorted_indexes`, `size` at most in each piece: (topic, indexes)."""
    piece: list[tuple[str, tuple[int, ...]]] = []
    room = size
    for name, indexes in sorted_indexes.items():
        start = 0
        while start < len(indexes):
            part = indexes[start : start + room]
            piece.append((name, part))
            start += len(part)
            room -= len(part)
            if room == 0:
                yield piece
                piece, room = [], size
    if piece:
        yield piece
