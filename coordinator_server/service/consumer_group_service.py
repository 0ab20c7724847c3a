"""The consumer group protocol's front door (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe, as Kafka's GroupCoordinatorService and KafkaApis serve them.

A node serves them when it knows the data cluster's topics (the consumers' Kafka cluster,
or a topics file): a group is assigned partitions of topics, and a node that cannot name
any would hold every member at an empty assignment. Without one, neither API is in
ApiVersions, as a Kafka broker whose coordinator does not enable the protocol.

Each method refuses what the request alone makes invalid or too large (INVALID_REQUEST, as
Kafka's validation), checks what Kafka's KafkaApis handler checks when an authorizer is set,
and schedules the operation on the group's partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Final

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import Message
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.consumer_groups.heartbeat import ClusterTopics
from coordinator_server.consumer_groups.regex import DeniedTopics, nothing_denied
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.consumer_group_describe import ConsumerGroupDescribeRequests
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import RequestLimits, too_long
from coordinator_server.service.replies import (
    Handler,
    Reply,
    reply_after,
    reply_to,
    typed_handler,
)
from coordinator_server.service.routing import Routing
from coordinator_server.shard import GroupShard

_CONSUMER_GROUP_HEARTBEAT: Final = api_name(ApiKey.CONSUMER_GROUP_HEARTBEAT)


class ConsumerGroupService:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        routing: Routing,
        limits: RequestLimits,
        authorizer: RequestAuthorizer | None,
        *,
        topics: Callable[[], ClusterTopics] | None = None,
        refresh_topics: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`topics` and `refresh_topics`: the data cluster's topics as last read, and a read
        of them again now, for a member that subscribes to a topic the last read did not
        have (None: the topics are not read again on demand)."""
        self._runtime = runtime
        self._topics = topics
        self._refresh_topics = refresh_topics
        # Names subscribed to that the last read of the cluster lacked, read again for
        # until they appear (at most `max_subscribed_topics` of them, the oldest dropped).
        self._wanted: dict[str, None] = {}
        self._new_wanted = asyncio.Event()
        self._reading_wanted: asyncio.Task[None] | None = None
        # The heartbeats that wait for the next read to end (or for TOPICS_READ_WAIT_S).
        self._read_waiters: list[asyncio.Future[None]] = []
        self._partition_for = routing.partition_for
        self._limits = limits
        self._authorizer = authorizer
        self._describe = ConsumerGroupDescribeRequests(runtime, routing, limits, authorizer)
        self.handlers: dict[int, Handler] = {
            ApiKey.CONSUMER_GROUP_HEARTBEAT: typed_handler(
                ConsumerGroupHeartbeatRequest, self.consumer_group_heartbeat
            ),
            ApiKey.CONSUMER_GROUP_DESCRIBE: typed_handler(
                ConsumerGroupDescribeRequest, self._describe.consumer_group_describe
            ),
        }

    def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, ctx: RequestContext
    ) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
            return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message)

        group_id = request.group_id
        if not group_id:
            # Kafka's own words: the group's partition cannot be found without it.
            return error(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        refusal = heartbeat_refusal(request, self._limits)
        if refusal is not None:
            return error(ErrorCode.INVALID_REQUEST, refusal)
        authorizer = self._authorizer
        if authorizer is not None:
            if not authorizer.allowed(
                ctx, AclOperation.READ, ResourceType.GROUP, group_id, api=_CONSUMER_GROUP_HEARTBEAT
            ):
                return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            names = request.subscribed_topic_names
            # Kafka's: a member may subscribe by name only to topics it may describe.
            if names and authorizer.denied(
                ctx,
                AclOperation.DESCRIBE,
                ResourceType.TOPIC,
                names,
                api=_CONSUMER_GROUP_HEARTBEAT,
            ):
                return error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)

        def on_error(exc: BaseException) -> Message:
            return error(*map_operation_error("consumer-group-heartbeat", exc))

        denied_topics = nothing_denied if authorizer is None else _denied_topics(authorizer, ctx)

        if request.subscribed_topic_names:
            read = self._maybe_refresh_topics(request.subscribed_topic_names)
            if read is not None:
                return reply_after(
                    read, lambda _: self._write(ctx, request, denied_topics, on_error), on_error
                )
        return self._write(ctx, request, denied_topics, on_error)

    def _write(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        denied_topics: DeniedTopics,
        on_error: Callable[[BaseException], Message],
    ) -> Reply:
        outcome = self._runtime.write(
            "consumer-group-heartbeat",
            self._partition_for(request.group_id or ""),
            lambda shard: shard.consumer_group_heartbeat(ctx, request, denied_topics),
        )
        return reply_to(outcome, on_error)

    def _maybe_refresh_topics(self, names: list[str]) -> asyncio.Future[None] | None:
        """Topics subscribed to that the last read of the cluster did not have may have been
        created since (a consumer often starts right after its topic is made): they are read
        for again in the background, at once and then ever less often
        (`WANTED_READ_FIRST_S` doubling up to `WANTED_READ_MAX_S`), until they appear or
        `WANTED_FOR_S` has passed (the periodic read takes over then); the source shares a
        read among every caller. Returns what the heartbeat waits for before it is made:
        the next read's end, at most `TOPICS_READ_WAIT_S` (None: every topic is known, or
        every missing one was already read for), so
        that a member joining a topic just created is answered with its partitions, as
        Kafka's coordinator, whose metadata image has it at once, answers. Later, the group
        takes a topic at the heartbeat after the read that has it (its metadata hash
        changes): a heartbeat names its topics only when they change."""
        topics, refresh = self._topics, self._refresh_topics
        if topics is None or refresh is None:
            return None
        snapshot = topics()
        missing = [name for name in names if snapshot.topic(name) is None]
        if not missing:
            return None
        wanted = self._wanted
        new = [name for name in missing if name not in wanted]
        for name in new:
            wanted[name] = None
        while len(wanted) > self._limits.max_subscribed_topics:
            del wanted[next(iter(wanted))]
        if self._reading_wanted is None or self._reading_wanted.done():
            self._reading_wanted = asyncio.ensure_future(self._read_until_known(topics, refresh))
        if not new:
            # Already read for (members of a group joining one after another, or a topic
            # that does not exist): the reads go on at their pace, and the heartbeat does
            # not wait for the next.
            return None
        # A name not wanted before starts the pauses over: it is read for at once.
        self._new_wanted.set()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        waiters = self._read_waiters
        if len(waiters) >= _PRUNE_WAITERS_PAST:
            # Those the timer settled, while a read takes long: dropped, so that the list
            # holds only heartbeats still waiting.
            waiters[:] = [pending for pending in waiters if not pending.done()]
        waiters.append(waiter)
        timer = loop.call_later(TOPICS_READ_WAIT_S, _settle, waiter)
        waiter.add_done_callback(lambda _: timer.cancel())
        return waiter

    async def _read_until_known(
        self, topics: Callable[[], ClusterTopics], refresh: Callable[[], Awaitable[None]]
    ) -> None:
        loop = asyncio.get_running_loop()
        wanted = self._wanted
        pause = WANTED_READ_FIRST_S
        give_up = loop.time() + WANTED_FOR_S
        try:
            while wanted and loop.time() < give_up:
                self._new_wanted.clear()
                await refresh()
                waiters, self._read_waiters = self._read_waiters, []
                for waiter in waiters:
                    _settle(waiter)
                snapshot = topics()
                for name in [name for name in wanted if snapshot.topic(name) is not None]:
                    del wanted[name]
                if not wanted:
                    return
                # A name wanted since the read starts the pauses over.
                try:
                    await asyncio.wait_for(self._new_wanted.wait(), pause)
                    pause = WANTED_READ_FIRST_S
                    give_up = loop.time() + WANTED_FOR_S
                except TimeoutError:
                    pause = min(pause * 2, WANTED_READ_MAX_S)
        finally:
            if loop.time() >= give_up:
                wanted.clear()
            # Nobody waits for a read that will not come.
            waiters, self._read_waiters = self._read_waiters, []
            for waiter in waiters:
                _settle(waiter)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_PRUNE_WAITERS_PAST: Final = 64
TOPICS_READ_WAIT_S: Final = 1.0
"""How long a heartbeat that names a topic the last read lacked waits for the next read."""
WANTED_READ_FIRST_S: Final = 0.25
"""The first pause between two reads for a subscribed topic the cluster did not show."""
WANTED_READ_MAX_S: Final = 30.0
"""The longest pause between two such reads."""
WANTED_FOR_S: Final = 300.0
"""How long such a topic is read for (Kafka's `metadata.max.age.ms`, the periodic read's
default interval, after which that read finds it anyway)."""


def _denied_topics(authorizer: RequestAuthorizer, ctx: RequestContext) -> DeniedTopics:
    """The topics the request's principal may not describe, for the group's resolutions of
    its regular expressions (Kafka's `filterTopicDescribeAuthorizedTopics`, which logs no
    denial: a topic a pattern matches is not one the member asked for)."""

    def denied(names: Collection[str]) -> set[str]:
        return authorizer.denied(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            names,
            api=_CONSUMER_GROUP_HEARTBEAT,
            log_denied=False,
        )

    return denied


def heartbeat_refusal(request: ConsumerGroupHeartbeatRequest, limits: RequestLimits) -> str | None:
    """Why a heartbeat is too large for the coordinator to hold, or None: its ids, names
    and regular expression each at most `max_id_length` characters (a regular expression:
    four times that), its topic lists at most `max_subscribed_topics` long."""
    max_length = limits.max_id_length
    for what, value in (
        ("group_id", request.group_id),
        ("member_id", request.member_id),
        ("instance_id", request.instance_id),
        ("rack_id", request.rack_id),
        ("server_assignor", request.server_assignor),
    ):
        refusal = too_long(what, value, max_length)
        if refusal is not None:
            return refusal
    regex = request.subscribed_topic_regex
    if regex is not None and len(regex) > 4 * max_length:
        return (
            f"subscribed_topic_regex is {len(regex)} characters long, more than "
            f"4 * max_id_length ({4 * max_length})"
        )
    names = request.subscribed_topic_names
    if names is not None:
        refusal = _list_refusal("subscribed_topic_names", names, limits)
        if refusal is not None:
            return refusal
    owned = request.topic_partitions
    if owned is not None and len(owned) > limits.max_subscribed_topics:
        return (
            f"topic_partitions names {len(owned)} topics, more than max_subscribed_topics "
            f"{limits.max_subscribed_topics}"
        )
    return None


def _list_refusal(what: str, names: Iterable[str], limits: RequestLimits) -> str | None:
    count = 0
    for name in names:
        count += 1
        refusal = too_long(f"a name of {what}", name, limits.max_id_length)
        if refusal is not None:
            return refusal
    if count > limits.max_subscribed_topics:
        return (
            f"{what} has {count} names, more than max_subscribed_topics "
            f"{limits.max_subscribed_topics}"
        )
    return None


__all__ = ["ConsumerGroupService", "heartbeat_refusal"]
