"""OffsetCommit and TxnOffsetCommit checked against the data cluster's partitions
(`--offset-commit-check-partitions`, off by default), as Kafka's `KafkaApis` checks them
before its group coordinator sees the request.

By default the coordinator takes offsets for any topic and partition: it coordinates
consumers of any partitioned source. With the check on, a commit is first held against the
metadata of the Kafka cluster the consumers read from, exactly as Kafka's
`handleOffsetCommitRequest` and `handleTxnOffsetCommitRequest` hold it against the broker's
metadata cache, per partition:

- a partition whose topic the cluster does not have, or whose index is past the topic's
  partition count, is answered UNKNOWN_TOPIC_OR_PARTITION (3) and not committed;
- the other partitions go on to the coordinator as a request of their own, and its answer is
  merged after the refused ones (Kafka's `Builder.merge`): the refused partitions first, the
  coordinator's answers appended to a topic already named, or as topics of their own;
- a request none of whose partitions is left is answered without the coordinator at all.

The check is a handler in front of each API's own (`CommitPartitionCheck.guard`), as
KafkaApis is in front of the group coordinator: nothing behind it changes. What it costs:

- A commit whose topics are all cached, with every partition it names, is checked at once,
  in the request's own call, over the request's own objects (`_Indexes`: no copy of the
  request's partitions); only a commit that refuses some builds the request of the rest.
- A topic not cached, a topic the cluster did not have, or a partition past a cached
  topic's count is asked of the cluster (one MetadataRequest that never creates a topic, for
  the topics of that commit only), so that a topic created or grown since is taken at its
  next commit, as a Kafka client refreshes its metadata after UNKNOWN_TOPIC_OR_PARTITION. A
  topic's known partitions are trusted for `--metadata-max-age-ms`.
- A commit waits only for what it depends on: its own MetadataRequest (on connections of the
  check's own, which no other request to the brokers shares: a broker answers a connection's
  requests one at a time), and an earlier commit of the same group still being checked, so
  that a group's commits reach its partition in the order they came (the last one wins).
- When the cluster's metadata cannot be read in `--offsets-commit-timeout-ms`, every partition
  is answered COORDINATOR_NOT_AVAILABLE (15), retriable for both APIs (the client looks its
  coordinator up again and retries), and nothing is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload

import msgspec
from aiokafka.client import AIOKafkaClient

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    Message,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from coordinator_protocol.transactions import (
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from coordinator_server.markers.leaders import LeaderCache, LeaderLookupError
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.add_partitions_to_txn import PartitionCatalog
from coordinator_server.service.bulk_requests import ErrorOnlyResponse
from coordinator_server.service.limits import RequestLimits, commit_answer_refusal
from coordinator_server.service.replies import Handler, PendingReply, Reply
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = ["CommitPartitionCheck", "DataPartitionCatalog"]

logger = logging.getLogger(__name__)

# A WARNING when the cluster's metadata cannot be read, at most once an interval.
_WARNING_INTERVAL_S = 60.0

Topics = Sequence[tuple[str, Sequence[int]]]


class DataPartitionCatalog:
    """The partitions of the Kafka cluster the consumers read from, for the commit check: a
    `PartitionCatalog` on a client of its own (MetadataRequests only, which never create a
    topic) and the marker writer's `LeaderCache` of the topics asked about.

    Only what the cluster has is answered from the cache: a topic not cached, or a partition
    past a cached topic's count, is asked about again (`unknown_partitions_now` answers
    None), so that a topic created or grown since the last answer is seen at once. `start()`
    before use, `stop()` at the end."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: KafkaSecurity | None = None,
        request_timeout_ms: int = 5000,
        metadata_max_age_ms: int = 30_000,
        max_cached_topics: int = 10_000,
        client_id: str = "coordinator-server-partitions",
    ) -> None:
        if request_timeout_ms < 1:
            raise ValueError(f"request_timeout_ms must be at least 1, got {request_timeout_ms}")
        self._bootstrap_servers = bootstrap_servers
        self._security = security or KafkaSecurity()
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_age_s = metadata_max_age_ms / 1000
        self._max_cached_topics = max_cached_topics
        self._client_id = client_id
        self._client: AIOKafkaClient | None = None
        self._leaders: LeaderCache | None = None

    async def start(self) -> None:
        if self._client is not None:
            raise RuntimeError("a DataPartitionCatalog starts once")
        client = forbid_auto_topic_creation(
            AIOKafkaClient(
                bootstrap_servers=self._bootstrap_servers,
                client_id=self._client_id,
                # Each request has a timeout of its own; aiokafka's, which closes the
                # connection, is only a backstop.
                request_timeout_ms=int(self._request_timeout_s * 2000),
                **self._security.aiokafka_options(),
            )
        )
        try:
            await asyncio.wait_for(client.bootstrap(), self._request_timeout_s)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        self._client = client
        self._leaders = LeaderCache(
            client, max_topics=self._max_cached_topics, max_age_s=self._max_age_s
        )

    async def stop(self) -> None:
        client, self._client, self._leaders = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_s)

    def unknown_partitions_now(self, topics: Topics) -> set[tuple[str, int]] | None:
        """Empty when the cache has every partition of `topics`; None otherwise (the cluster
        must be asked: `unknown_partitions`)."""
        leaders = self._leaders
        return None if leaders is None else leaders.unknown_partitions_now(topics)

    async def unknown_partitions(self, topics: Topics) -> set[tuple[str, int]]:
        """The partitions of `topics` the cluster does not have, asking it (one request) about
        each topic the cache cannot vouch for. Raises LeaderLookupError when no broker
        answers in time."""
        leaders = self._leaders
        if leaders is None:
            raise LeaderLookupError("the data cluster's metadata is not read yet")
        return await leaders.unknown_partitions(topics, self._request_timeout_s)


class _Indexes(Sequence[int]):
    """The partition indexes of a request's topic, read from its own partitions."""

    __slots__ = ("_partitions",)

    def __init__(self, partitions: Sequence[Any]) -> None:
        self._partitions = partitions

    def __len__(self) -> int:
        return len(self._partitions)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...

    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return [p.partition_index for p in self._partitions[index]]
        return int(self._partitions[index].partition_index)

    def __iter__(self) -> Iterator[int]:
        return (p.partition_index for p in self._partitions)


@dataclass(frozen=True, slots=True)
class _Api:
    """What differs between OffsetCommit and TxnOffsetCommit for the check."""

    key: ApiKey
    name: str
    request_topic: Callable[[str, list[Any]], Any]
    response: Callable[[list[Any]], Message]
    response_type: type[Message]
    response_topic: Callable[[str, list[Any]], Any]
    response_partition: Callable[[int, int], Any]

    def refused_topics(
        self, request: Any, unknown: set[tuple[str, int]]
    ) -> tuple[list[Any], list[Any]]:
        """The answers of the refused partitions, by topic as Kafka's response builder makes
        them (one topic per name), and the request's topics of the others (a topic left
        with none is left out)."""
        refused: dict[str, Any] = {}
        kept = []
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for topic in request.topics:
            name = topic.name
            partitions = [p for p in topic.partitions if (name, p.partition_index) not in unknown]
            if len(partitions) < len(topic.partitions):
                answered = refused.get(name)
                if answered is None:
                    answered = refused[name] = self.response_topic(name, [])
                answered.partitions.extend(
                    self.response_partition(p.partition_index, code)
                    for p in topic.partitions
                    if (name, p.partition_index) in unknown
                )
            if len(partitions) == len(topic.partitions):
                kept.append(topic)
            elif partitions:
                kept.append(self.request_topic(name, partitions))
        return list(refused.values()), kept

    def merged(self, refused: list[Any], answer: Message) -> Message:
        """Kafka's `Builder.merge`: the coordinator's answer after the refused partitions,
        each of its topics appended to the refused one of the same name or after them."""
        if not isinstance(answer, self.response_type):
            # An answer of the whole request (the contract's error body): as it is.
            return answer
        by_name = {topic.name: topic for topic in refused}
        topics = list(refused)
        for topic in answer.topics:  # type: ignore[attr-defined]
            existing = by_name.get(topic.name)
            if existing is None:
                topics.append(topic)
                by_name[topic.name] = topic
            else:
                existing.partitions.extend(topic.partitions)
        return self.response(topics)

    def error(self, request: Any, code: ErrorCode) -> Message:
        """Every partition of the request answered `code`."""
        return self.response(
            [
                self.response_topic(
                    topic.name,
                    [self.response_partition(p.partition_index, code) for p in topic.partitions],
                )
                for topic in request.topics
            ]
        )


_OFFSET_COMMIT = _Api(
    key=ApiKey.OFFSET_COMMIT,
    name="OffsetCommit",
    request_topic=lambda name, partitions: OffsetCommitRequestTopic(
        name=name, partitions=partitions
    ),
    response=lambda topics: OffsetCommitResponse(topics=topics),
    response_type=OffsetCommitResponse,
    response_topic=lambda name, partitions: OffsetCommitResponseTopic(
        name=name, partitions=partitions
    ),
    response_partition=lambda index, code: OffsetCommitResponsePartition(
        partition_index=index, error_code=code
    ),
)

_TXN_OFFSET_COMMIT = _Api(
    key=ApiKey.TXN_OFFSET_COMMIT,
    name="TxnOffsetCommit",
    request_topic=lambda name, partitions: TxnOffsetCommitRequestTopic(
        name=name, partitions=partitions
    ),
    response=lambda topics: TxnOffsetCommitResponse(topics=topics),
    response_type=TxnOffsetCommitResponse,
    response_topic=lambda name, partitions: TxnOffsetCommitResponseTopic(
        name=name, partitions=partitions
    ),
    response_partition=lambda index, code: TxnOffsetCommitResponsePartition(
        partition_index=index, error_code=code
    ),
)


def _then(
    reply: asyncio.Future[Message],
    send: Callable[[], Reply],
    merge: Callable[[Message], Message] | None = None,
) -> None:
    """Settle `reply` with what `send()` answers (through `merge`), now or once its pending
    answer is ready; a failure its `on_error` does not map fails `reply` (the connection's
    UNKNOWN_SERVER_ERROR)."""

    def settle(make: Callable[[], Message]) -> None:
        try:
            message = make()
            reply.set_result(message if merge is None else merge(message))
        except Exception as error:
            reply.set_exception(error)

    try:
        answer = send()
    except Exception as error:
        reply.set_exception(error)
        return
    if isinstance(answer, Message):
        settle(lambda: answer)
        return
    on_error = answer.on_error

    def forward(done: asyncio.Future[Message]) -> None:
        if reply.done():
            return
        error = asyncio.CancelledError() if done.cancelled() else done.exception()
        if error is None:
            settle(done.result)
        elif on_error is not None:
            settle(lambda: on_error(error))
        else:
            reply.set_exception(error)

    answer.future.add_done_callback(forward)


def _merging(answer: Reply, merge: Callable[[Message], Message]) -> Reply:
    """`answer`, with `merge` applied to the message it is or will be."""
    if isinstance(answer, Message):
        return merge(answer)
    reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    _then(reply, lambda: answer, merge)
    return PendingReply(reply)


class HandlerTable(Protocol):
    """Where handlers are looked up by api key (`service.dispatch.RequestDispatch`)."""

    def guard(self, api_key: ApiKey, wrap: Callable[[Handler], Handler]) -> bool: ...


class CommitPartitionCheck:
    """The check in front of OffsetCommit and TxnOffsetCommit (`guard`), against `catalog`,
    the data cluster's partitions. `limits`: the server's, whose answer-size bound an
    OffsetCommit is held to as a whole before anything is refused or asked."""

    def __init__(self, catalog: PartitionCatalog, limits: RequestLimits | None = None) -> None:
        self._catalog = catalog
        self._limits = limits or RequestLimits()
        # Per (api, group): the last commit still being checked; one that comes after it
        # goes on only once it went on (the group's commits keep their order).
        self._checking: dict[tuple[int, str], asyncio.Future[None]] = {}
        # The MetadataRequests under way, held until done: the loop keeps only a weak
        # reference to a task.
        self._asking: set[asyncio.Future[set[tuple[str, int]]]] = set()
        self._warned_at = -_WARNING_INTERVAL_S
        self.refused_partitions = 0
        self.unchecked_requests = 0

    def guard(self, table: HandlerTable) -> None:
        """Put the check in front of the OffsetCommit and TxnOffsetCommit handlers of
        `table` (the dispatch's; those it has)."""
        for api in (_OFFSET_COMMIT, _TXN_OFFSET_COMMIT):
            table.guard(api.key, functools.partial(self._checked, api))

    def _checked(self, api: _Api, handler: Handler) -> Handler:
        limits = self._limits
        catalog = self._catalog
        may_not_fit = api is _OFFSET_COMMIT and limits.commit_answer_may_not_fit

        def check(request: Any, ctx: RequestContext) -> Reply:
            if may_not_fit and (refusal := commit_answer_refusal(request, limits)):
                # No answer naming every partition fits: the contract's error body, before
                # the cluster is asked anything (as the coordinator answers it).
                code, message = refusal
                return ErrorOnlyResponse(error_code=code, error_message=message)
            topics = [(t.name, _Indexes(t.partitions)) for t in request.topics]
            key = (api.key, request.group_id or "")
            ahead = self._checking.get(key)
            if ahead is None:
                unknown = catalog.unknown_partitions_now(topics)
                if unknown is not None:
                    return self._go_on(api, handler, request, ctx, unknown)
            return self._after_asking(api, handler, request, ctx, topics, key, ahead)

        return check

    def _go_on(
        self,
        api: _Api,
        handler: Handler,
        request: Any,
        ctx: RequestContext,
        unknown: set[tuple[str, int]],
    ) -> Reply:
        """The request once checked: to the coordinator, without what the cluster lacks."""
        topics = request.topics
        if not unknown:
            if not any(topic.partitions for topic in topics):
                # Nothing to commit: Kafka answers without its coordinator.
                return api.response([])
            return handler(request, ctx)
        refused, kept = api.refused_topics(request, unknown)
        self.refused_partitions += len(unknown)
        if not kept:
            return api.response(refused)
        rest = msgspec.structs.replace(request, topics=kept)
        return _merging(handler(rest, ctx), lambda answer: api.merged(refused, answer))

    def _after_asking(
        self,
        api: _Api,
        handler: Handler,
        request: Any,
        ctx: RequestContext,
        topics: Topics,
        key: tuple[int, str],
        ahead: asyncio.Future[None] | None,
    ) -> Reply:
        """The request once `ahead` (the commit of its group being checked before it, if
        any) went on, and once the cluster answered for what the cache cannot vouch for."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Message] = loop.create_future()
        went_on: asyncio.Future[None] = loop.create_future()
        self._checking[key] = went_on
        catalog = self._catalog

        def release() -> None:
            if self._checking.get(key) is went_on:
                del self._checking[key]
            went_on.set_result(None)

        def settle(send: Callable[[], Reply]) -> None:
            try:
                _then(reply, send)
            finally:
                release()

        def asked(done: asyncio.Future[set[tuple[str, int]]]) -> None:
            failure = (
                asyncio.CancelledError("the check stopped")
                if done.cancelled()
                else done.exception()
            )
            if failure is not None:
                self._unchecked(api, failure)
                settle(lambda: api.error(request, ErrorCode.COORDINATOR_NOT_AVAILABLE))
                return
            unknown = done.result()
            settle(lambda: self._go_on(api, handler, request, ctx, unknown))

        def ask() -> None:
            try:
                asking = asyncio.ensure_future(catalog.unknown_partitions(topics))
            except Exception:
                logger.exception("%s: the check could not start", api.name)
                settle(lambda: api.error(request, ErrorCode.UNKNOWN_SERVER_ERROR))
                return
            self._asking.add(asking)
            asking.add_done_callback(self._asking.discard)
            asking.add_done_callback(asked)

        def check(_: object = None) -> None:
            # Its turn came: what the cache holds now may answer without asking.
            try:
                unknown = catalog.unknown_partitions_now(topics)
            except Exception:
                logger.exception("%s: the check failed", api.name)
                settle(lambda: api.error(request, ErrorCode.UNKNOWN_SERVER_ERROR))
                return
            if unknown is None:
                ask()
            else:
                settle(lambda: self._go_on(api, handler, request, ctx, unknown))

        if ahead is None:
            # The cache was just looked at: it cannot tell.
            ask()
        else:
            ahead.add_done_callback(check)
        return PendingReply(reply)

    def _unchecked(self, api: _Api, failure: BaseException) -> None:
        self.unchecked_requests += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARNING_INTERVAL_S:
            self._warned_at = now
            logger.warning(
                "%s answered COORDINATOR_NOT_AVAILABLE, nothing committed: the data cluster's "
                "partitions cannot be read to check it (%d such answers so far): %r",
                api.name,
                self.unchecked_requests,
                failure,
            )

    async def stop(self) -> None:
        """Cancel the MetadataRequests under way (their commits are answered
        COORDINATOR_NOT_AVAILABLE)."""
        for asking in list(self._asking):
            asking.cancel()
        for asking in list(self._asking):
            with contextlib.suppress(BaseException):
                await asking
