"""OffsetFetch: the committed offsets of each group a request names, of the partitions it
names or of every partition the group has (topics nil), read at the committed offset or,
with require_stable, once every pending write of the group's partition is committed.

The bounds of `bulk_requests` hold here too. The answer's least size, each group's id, is
known from the request and checked first; a group's partitions are read a slice at a time,
their metadata counted as read, and a group whose offsets do not fit is answered
MESSAGE_TOO_LARGE. A group fetched whole is read once however often it is named; a group
naming its partitions is read as named, each time.

With an authorizer, as Kafka's KafkaApis authorizes it: DESCRIBE of each group, then of
each topic named (a refused topic's partitions answered TOPIC_AUTHORIZATION_FAILED,
unread), or, for a group fetched whole, its topics the principal may not describe left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import Any, Final, TypeVar

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    Message,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.groups.answer_sizes import (
    ARRAY_EXTRA,
    FETCHED_GROUP_MIN_BYTES,
    FETCHED_PARTITION_BYTES,
    fetched_group_bytes,
    fetched_partition_bytes,
    fetched_topic_bytes,
)
from coordinator_server.runtime.api import CoordinatorResult, RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.bulk_requests import ErrorOnlyResponse
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import RequestLimits, answer_too_large
from coordinator_server.service.replies import future_failure
from coordinator_server.service.slicing import (
    PAUSE,
    SliceClock,
    SlicedAnswer,
    SlicedRequests,
    Step,
    Steps,
)
from coordinator_server.shard import GroupShard

R = TypeVar("R")

# Groups whose least size is counted between two looks at the slice's clock.
_ANSWER_CHUNK: Final = 4096
# Partitions one OffsetFetch read looks up.
_FETCH_CHUNK: Final = 2048

# Kafka's name of the request, which the authorizer's log and counts say.
_OFFSET_FETCH: Final = api_name(ApiKey.OFFSET_FETCH)


class OffsetFetchRequests:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        partition_for: Callable[[str], int],
        limits: RequestLimits,
        sliced: SlicedRequests,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        """`authorizer`: what each group and topic is checked against (None: nothing is
        checked)."""
        self._authorizer = authorizer
        self._runtime = runtime
        self._partition_for = partition_for
        self._limits = limits
        self._sliced = sliced

    def _too_large(self, size: int) -> ErrorOnlyResponse:
        code, message = answer_too_large(size, self._limits)
        return ErrorOnlyResponse(error_code=code, error_message=message)

    def offset_fetch(
        self, request: OffsetFetchRequest, ctx: RequestContext
    ) -> Message | SlicedAnswer:
        """Each group's offsets; with an authorizer, as Kafka's handler answers them: a
        group the principal may not DESCRIBE is answered GROUP_AUTHORIZATION_FAILED alone;
        of the topics it names, one it may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
        for each partition, unread; of every topic of the group (topics nil), those it may
        not DESCRIBE are left out."""
        least = len(request.groups) * FETCHED_GROUP_MIN_BYTES
        if least > self._limits.answer_items_bytes:
            return self._too_large(least)
        return self._sliced.run(lambda clock: self._offset_fetch(request, ctx, clock))

    def _offset_fetch(
        self, request: OffsetFetchRequest, ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        authorizer = self._authorizer
        fetch_group = (
            self._fetch_group
            if authorizer is None
            else partial(self._fetch_authorized_group, authorizer, ctx)
        )
        groups = request.groups
        least = 0
        for start in range(0, len(groups), _ANSWER_CHUNK):
            for group in groups[start : start + _ANSWER_CHUNK]:
                least += fetched_group_bytes(group.group_id or "")
            if clock.due():
                yield PAUSE
        room = self._limits.answer_items_bytes - least
        if room < 0:
            return self._too_large(least)
        # A group fetched whole is fetched once, however often it is named.
        whole: dict[_WholeKey, tuple[OffsetFetchResponseGroup, int]] = {}
        answers: list[OffsetFetchResponseGroup] = []
        built = 0
        for group in groups:
            # What the answer holds while it waits for the group's fetch (see SliceClock).
            clock.built_bytes = built
            group_id = group.group_id
            if group_id is None or len(group_id) > self._limits.max_id_length:
                answer, extra = _fetch_error(group_id, ErrorCode.INVALID_GROUP_ID), 0
            else:
                answer, extra = yield from fetch_group(
                    group, request.require_stable, room, whole, clock
                )
            if extra > room:
                answer, extra = _fetch_error(group_id, ErrorCode.MESSAGE_TOO_LARGE), 0
            room -= extra
            answers.append(answer)
            built += fetched_group_bytes(group_id or "") + extra
            if clock.due():
                yield PAUSE
        return OffsetFetchResponse(groups=answers)

    def _fetch_group(
        self,
        group: OffsetFetchRequestGroup,
        require_stable: bool,
        room: int,
        whole: dict[_WholeKey, tuple[OffsetFetchResponseGroup, int]],
        clock: SliceClock,
    ) -> Generator[Step, None, tuple[OffsetFetchResponseGroup, int]]:
        """A group's answer (its id valid), and what it adds to its least; `whole` holds
        the answers of the groups fetched whole so far."""
        group_id = group.group_id
        assert group_id is not None
        if group.topics is not None:
            return (yield from self._fetch_partitions(group, require_stable, room, clock))
        # The same group asked as another member is another question (KIP-848's check).
        key = (group_id, group.member_id, group.member_epoch)
        known = whole.get(key)
        if known is None:
            known = yield from self._fetch_all(group, require_stable, room)
            whole[key] = known
        return known

    def _fetch_authorized_group(
        self,
        authorizer: RequestAuthorizer,
        ctx: RequestContext,
        group: OffsetFetchRequestGroup,
        require_stable: bool,
        room: int,
        whole: dict[_WholeKey, tuple[OffsetFetchResponseGroup, int]],
        clock: SliceClock,
    ) -> Generator[Step, None, tuple[OffsetFetchResponseGroup, int]]:
        """`_fetch_group` as Kafka's handler authorizes it (see `offset_fetch`)."""
        group_id = group.group_id
        assert group_id is not None
        if not authorizer.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id, api=_OFFSET_FETCH
        ):
            return _fetch_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED), 0
        topics = group.topics
        if topics is None:
            answer, extra = yield from self._fetch_group(group, require_stable, room, whole, clock)
            if answer.error_code != ErrorCode.NONE:
                return answer, extra
            return _visible_offsets(authorizer, ctx, answer, extra)
        max_length = self._limits.max_id_length
        if any(len(topic.name) > max_length for topic in topics):
            # Refused whoever asks, before any topic is authorized.
            return (yield from self._fetch_partitions(group, require_stable, room, clock))
        denied = authorizer.denied(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            [topic.name for topic in topics],
            api=_OFFSET_FETCH,
        )
        if not denied:
            return (yield from self._fetch_partitions(group, require_stable, room, clock))
        # Kafka's `fetchOffsetsForGroup`: the authorized topics fetched, then each
        # partition of the others answered TOPIC_AUTHORIZATION_FAILED.
        refused: list[OffsetFetchResponseTopic] = []
        refused_bytes = 0
        for topic in topics:
            if topic.name in denied:
                refused.append(
                    OffsetFetchResponseTopic(
                        name=topic.name,
                        partitions=[
                            OffsetFetchResponsePartition(
                                partition_index=index,
                                committed_offset=-1,
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            )
                            for index in topic.partition_indexes
                        ],
                    )
                )
                refused_bytes += fetched_topic_bytes(topic.name) + len(topic.partition_indexes) * (
                    FETCHED_PARTITION_BYTES
                )
        authorized = group.replace(topics=[topic for topic in topics if topic.name not in denied])
        answer, extra = yield from self._fetch_partitions(
            authorized, require_stable, room - refused_bytes, clock
        )
        if answer.error_code != ErrorCode.NONE:
            return answer, extra
        return OffsetFetchResponseGroup(group_id=group_id, topics=answer.topics + refused), (
            extra + refused_bytes
        )

    def _fetch(
        self,
        group_id: str,
        require_stable: bool,
        fetch: Callable[[GroupShard, int | None], R],
    ) -> asyncio.Future[R]:
        partition = self._partition_for(group_id)
        if require_stable:
            # Kafka reads the latest state through the write path and answers once every
            # pending write is committed (a write with no records).
            return self._runtime.schedule_write(
                "fetch-offsets-stable",
                partition,
                lambda shard: CoordinatorResult(response=fetch(shard, None)),
            )
        return self._runtime.schedule_read("fetch-offsets", partition, fetch)

    def _fetch_all(
        self, group: OffsetFetchRequestGroup, require_stable: bool, room: int
    ) -> Generator[Step, None, tuple[OffsetFetchResponseGroup, int]]:
        """The group's answer with every offset it has, and what that adds to its least."""
        group_id = group.group_id
        assert group_id is not None
        member_id, member_epoch = group.member_id, group.member_epoch
        fetched = self._fetch(
            group_id,
            require_stable,
            lambda shard, committed: shard.fetch_all_offsets(
                group_id,
                committed,
                room - ARRAY_EXTRA,
                member_id=member_id,
                member_epoch=member_epoch,
            ),
        )
        if not fetched.done():
            yield [fetched]
        error = future_failure(fetched)
        if error is not None:
            code, _ = map_operation_error("fetch-offsets", error, require_stable=require_stable)
            return _fetch_error(group_id, code), 0
        topics = fetched.result()
        if topics is None:
            return _fetch_error(group_id, ErrorCode.MESSAGE_TOO_LARGE), 0
        return OffsetFetchResponseGroup(group_id=group_id, topics=topics[0]), (
            topics[1] + ARRAY_EXTRA
        )

    def _fetch_partitions(
        self, group: OffsetFetchRequestGroup, require_stable: bool, room: int, clock: SliceClock
    ) -> Generator[Step, None, tuple[OffsetFetchResponseGroup, int]]:
        """The group's answer for the partitions it names, read a slice of partitions at a
        time, and what it adds to its least."""
        group_id = group.group_id
        assert group_id is not None and group.topics is not None
        max_length = self._limits.max_id_length
        # What the partitions cost at least, their metadata empty, before any is read.
        least = ARRAY_EXTRA
        for topic in group.topics:
            if len(topic.name) > max_length:
                return _fetch_error(group_id, ErrorCode.INVALID_REQUEST), 0
            least += fetched_topic_bytes(topic.name) + len(topic.partition_indexes) * (
                FETCHED_PARTITION_BYTES
            )
        if least > room:
            return _fetch_error(group_id, ErrorCode.MESSAGE_TOO_LARGE), 0
        topics: list[OffsetFetchResponseTopic] = []
        size = ARRAY_EXTRA
        # What the request's answer held before this group.
        built = clock.built_bytes
        # The request's topics cut into slices of partitions; a topic cut in two is answered
        # as one, as it was asked.
        for chunk in _fetch_chunks(group.topics):
            pieces = [(name, indexes) for _, name, indexes in chunk]
            fetched = self._fetch(
                group_id,
                require_stable,
                _fetch_partitions_op(group, pieces, room - size),
            )
            if not fetched.done():
                clock.built_bytes = built + size
                yield [fetched]
            error = future_failure(fetched)
            if error is not None:
                code, _ = map_operation_error("fetch-offsets", error, require_stable=require_stable)
                return _fetch_error(group_id, code), 0
            result = fetched.result()
            if result is None:
                return _fetch_error(group_id, ErrorCode.MESSAGE_TOO_LARGE), 0
            answered, chunk_size = result
            size += chunk_size
            for (position, _, _), piece in zip(chunk, answered, strict=True):
                if position == len(topics) - 1:
                    topics[-1].partitions.extend(piece.partitions)
                else:
                    topics.append(piece)
            if clock.due():
                yield PAUSE
        return OffsetFetchResponseGroup(group_id=group_id, topics=topics), size


def _fetch_chunks(
    topics: Sequence[Any],
) -> Generator[list[tuple[int, str, Sequence[int]]], None, None]:
    """The request's topics ((name, partition_indexes) items) as slices of at most
    _FETCH_CHUNK partitions: (position of the topic in the request, name, indexes)."""
    chunk: list[tuple[int, str, Sequence[int]]] = []
    room = _FETCH_CHUNK
    for position, topic in enumerate(topics):
        indexes = topic.partition_indexes
        start = 0
        while True:
            piece = indexes[start : start + room]
            chunk.append((position, topic.name, piece))
            start += len(piece)
            room -= len(piece)
            if room == 0:
                yield chunk
                chunk, room = [], _FETCH_CHUNK
            if start >= len(indexes):
                break
    if chunk:
        yield chunk


_WholeKey = tuple[str, str | None, int]
"""A group fetched whole, as which member (KIP-848's member id and epoch)."""

# The read, made by a function so that it holds its own arguments.


def _fetch_partitions_op(
    group: OffsetFetchRequestGroup, topics: list[tuple[str, Sequence[int]]], max_bytes: int
) -> Callable[[GroupShard, int | None], tuple[list[OffsetFetchResponseTopic], int] | None]:
    group_id = group.group_id
    assert group_id is not None
    member_id, member_epoch = group.member_id, group.member_epoch
    return lambda shard, committed: shard.fetch_partition_offsets(
        group_id, topics, committed, max_bytes, member_id=member_id, member_epoch=member_epoch
    )


def _visible_offsets(
    authorizer: RequestAuthorizer, ctx: RequestContext, answer: OffsetFetchResponseGroup, extra: int
) -> tuple[OffsetFetchResponseGroup, int]:
    """Kafka's `fetchAllOffsetsForGroup`: of a group's offsets, those of the topics the
    principal may not describe left out (their denials logged, as Kafka logs them), and what
    the answer adds to its least then. `answer` is left as it is: a group named again in
    the request is answered from it again."""
    denied = authorizer.denied(
        ctx,
        AclOperation.DESCRIBE,
        ResourceType.TOPIC,
        [topic.name for topic in answer.topics],
        api=_OFFSET_FETCH,
    )
    if not denied:
        return answer, extra
    visible = [topic for topic in answer.topics if topic.name not in denied]
    size = ARRAY_EXTRA
    for topic in visible:
        size += fetched_topic_bytes(topic.name)
        for partition in topic.partitions:
            size += fetched_partition_bytes(partition.metadata)
    return OffsetFetchResponseGroup(group_id=answer.group_id, topics=visible), size


def _fetch_error(group_id: str | None, code: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group_id or "", error_code=code, topics=[])
