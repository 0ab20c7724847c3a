"""The APIs one request of which may name many groups or items: FindCoordinator,
DescribeGroups, DeleteGroups and ListGroups; OffsetFetch, which may too, is answered by
`offset_fetch` under the same bounds.

Each costs linear time in the request's size whatever it repeats: a group named many times
is looked at once, and every repeat answered like the first (as Kafka answers each). Large
requests run in slices with the event loop free between them (see `slicing`): reads a slice
of groups or partitions at a time, DeleteGroups as one write per slice of groups and
partition. And no answer is built larger than `max_response_bytes`: what every item of the
answer costs at least is known from the request alone and checked first; what the state
adds (a group's members, an offset's metadata) is counted as it is read. An item that does
not fit is answered MESSAGE_TOO_LARGE where the API has an error per item (a group of
DescribeGroups, ListGroups' top level); a request whose items cannot all be
answered even so gets only `{"error_code": 10, "error_message": ...}`, the answer the
contract gives a request it cannot take.

With an authorizer, each item is checked as Kafka's KafkaApis checks it, before any state is
read: a group, key or topic the request's principal may not see or touch is answered with
its authorization error alone, the same whether it exists or not (see each API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from functools import partial
from typing import Final, TypeVar

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResponseResult,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseGroup,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    Message,
)
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.groups.admin_views import list_filter
from coordinator_server.groups.answer_sizes import (
    COORDINATOR_MIN_BYTES,
    DELETED_GROUP_MIN_BYTES,
    DESCRIBED_GROUP_MIN_BYTES,
    coordinator_bytes,
    described_group_bytes,
    listed_group_bytes,
    str_extra,
)
from coordinator_server.runtime.api import CoordinatorResult, RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.errors import NO_OWNERSHIP, map_operation_error
from coordinator_server.service.limits import RequestLimits, answer_too_large, too_long
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

T = TypeVar("T")

# Items handled between two looks at the slice's clock, by what an item costs: counting a
# repeat, hashing a group id (up to max_id_length characters), answering an item.
_COUNT_CHUNK: Final = 2048
_HASH_CHUNK: Final = 64
_ANSWER_CHUNK: Final = 4096
# Groups one DescribeGroups read looks at, and one DeleteGroups write deletes.
_DESCRIBE_CHUNK: Final = 64
_DELETE_CHUNK: Final = 256
# Tombstones one DeleteGroups write makes at most (then the next write goes on).
_DELETE_RECORDS: Final = 4096

# Kafka's names of the requests, which the authorizer's log and counts say.
_FIND_COORDINATOR: Final = api_name(ApiKey.FIND_COORDINATOR)
_DESCRIBE_GROUPS: Final = api_name(ApiKey.DESCRIBE_GROUPS)
_DELETE_GROUPS: Final = api_name(ApiKey.DELETE_GROUPS)
_LIST_GROUPS: Final = api_name(ApiKey.LIST_GROUPS)


class ErrorOnlyResponse(Message, kw_only=True):
    """The answer of a request that could not be taken at all, whatever the API: the same
    map as `coordinator_protocol.messages.error_body`."""

    error_code: int = 0
    error_message: str | None = None


PartitionFor = Callable[[str], int]

CoordinatorOf = Callable[[int], FindCoordinatorResponseCoordinator]
"""The coordinator FindCoordinator names for a log partition now: its owner's node id and
address, or COORDINATOR_NOT_AVAILABLE while no node owns it (the key is filled in later)."""


class BulkRequests:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        partition_for: PartitionFor,
        num_partitions: int,
        coordinator_of: CoordinatorOf,
        limits: RequestLimits,
        sliced: SlicedRequests,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        """`authorizer`: what each item is checked against (None: nothing is checked)."""
        self._authorizer = authorizer
        self._runtime = runtime
        self._partition_for = partition_for
        self._num_partitions = num_partitions
        self._coordinator_of_partition = coordinator_of
        self._limits = limits
        self._sliced = sliced
        # Why FindCoordinator with key_type 1 (transactional ids) is refused; None once the
        # node coordinates transactions (`GroupCoordinatorService.serve_transactions`).
        self.transactions_refusal: str | None = (
            "this node coordinates no transactions (it has no Kafka log, or --transactions off)"
        )

    def _too_large(self, size: int) -> ErrorOnlyResponse:
        code, message = answer_too_large(size, self._limits)
        return ErrorOnlyResponse(error_code=code, error_message=message)

    # FindCoordinator.

    def find_coordinator(
        self, request: FindCoordinatorRequest, ctx: RequestContext
    ) -> Message | SlicedAnswer:
        least = len(request.keys) * COORDINATOR_MIN_BYTES
        if least > self._limits.answer_items_bytes:
            return self._too_large(least)
        return self._sliced.run(lambda clock: self._find_coordinator(request, ctx, clock))

    def _find_coordinator(
        self, request: FindCoordinatorRequest, ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        authorizer = self._authorizer
        coordinator_of = (
            self._coordinator_of
            if authorizer is None
            else partial(self._authorized_coordinator_of, authorizer, ctx)
        )
        budget = self._limits.answer_items_bytes
        answers: dict[str, tuple[FindCoordinatorResponseCoordinator, int]] = {}
        coordinators: list[FindCoordinatorResponseCoordinator] = []
        size = 0
        keys = request.keys
        for start in range(0, len(keys), _ANSWER_CHUNK):
            for key in keys[start : start + _ANSWER_CHUNK]:
                answer = answers.get(key)
                if answer is None:
                    coordinator = coordinator_of(key, request.key_type)
                    answer = answers[key] = (
                        coordinator,
                        coordinator_bytes(key, coordinator.host, coordinator.error_message),
                    )
                size += answer[1]
                coordinators.append(answer[0])
            if size > budget:
                return self._too_large(size)
            if clock.due():
                yield PAUSE
        return FindCoordinatorResponse(coordinators=coordinators)

    def _coordinator_of(self, key: str, key_type: int) -> FindCoordinatorResponseCoordinator:
        refused = self._refused_key(key, key_type)
        if refused is not None:
            return refused
        return self._coordinator_of_partition(self._partition_for(key)).replace(key=key)

    def _authorized_coordinator_of(
        self, authorizer: RequestAuthorizer, ctx: RequestContext, key: str, key_type: int
    ) -> FindCoordinatorResponseCoordinator:
        """Kafka's `getCoordinator` with an authorizer: DESCRIBE of the group (key type 0)
        or of the transactional id (1), else that key's authorization error and no node."""
        refused = self._refused_key(key, key_type)
        if refused is not None:
            return refused
        if key_type == 1:
            if not authorizer.allowed(
                ctx,
                AclOperation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
                key,
                api=_FIND_COORDINATOR,
            ):
                return FindCoordinatorResponseCoordinator(
                    key=key, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                )
        elif not authorizer.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key, api=_FIND_COORDINATOR
        ):
            return FindCoordinatorResponseCoordinator(
                key=key, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
        return self._coordinator_of_partition(self._partition_for(key)).replace(key=key)

    def _refused_key(self, key: str, key_type: int) -> FindCoordinatorResponseCoordinator | None:
        """The answer to a key refused from the request alone (a key type not served, an
        empty or too long id); None for a key to look up."""
        if key_type == 1:
            # A transactional id is placed as a group id is (Kafka's two coordinators use
            # two topics; here they share the log's partitions).
            if self.transactions_refusal is not None:
                return FindCoordinatorResponseCoordinator(
                    key=key,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"key type 1 is not served: {self.transactions_refusal}",
                )
            refusal = too_long("the transactional id", key, self._limits.max_id_length)
            if not key:
                refusal = "the transactional id must not be empty"
            if refusal is not None:
                return FindCoordinatorResponseCoordinator(
                    key=key, error_code=ErrorCode.INVALID_REQUEST, error_message=refusal
                )
        elif key_type != 0:
            return FindCoordinatorResponseCoordinator(
                key=key,
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"key type {key_type} is not served (0: groups, 1: transactions)",
            )
        else:
            refusal = too_long("the group id", key, self._limits.max_id_length)
            if refusal is not None:
                return FindCoordinatorResponseCoordinator(
                    key=key, error_code=ErrorCode.INVALID_GROUP_ID, error_message=refusal
                )
        return None

    # DescribeGroups.

    def describe_groups(
        self, request: DescribeGroupsRequest, ctx: RequestContext
    ) -> Message | SlicedAnswer:
        """Each group named, described; with an authorizer, one the principal may not
        DESCRIBE is answered GROUP_AUTHORIZATION_FAILED and nothing else, as one that does
        not exist would be."""
        least = len(request.groups) * DESCRIBED_GROUP_MIN_BYTES
        if least > self._limits.answer_items_bytes:
            return self._too_large(least)
        return self._sliced.run(lambda clock: self._describe_groups(request.groups, ctx, clock))

    def _describe_groups(
        self, group_ids: list[str | None], ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        counts = yield from _count(group_ids, clock)
        least = yield from _least_bytes(counts, DESCRIBED_GROUP_MIN_BYTES, clock)
        # What the groups' content may add beyond the least each costs.
        room = self._limits.answer_items_bytes - least
        if room < 0:
            return self._too_large(least)
        answers: dict[str | None, DescribeGroupsResponseGroup] = {}
        to_read = counts
        authorizer = self._authorizer
        if authorizer is not None:
            to_read = yield from self._authorized_groups(
                authorizer,
                ctx,
                AclOperation.DESCRIBE,
                _DESCRIBE_GROUPS,
                counts,
                answers,
                _denied_described,
                clock,
            )
        by_partition = yield from self._by_partition(to_read, answers, _invalid_described, clock)
        for partition, ids in by_partition.items():
            for start in range(0, len(ids), _DESCRIBE_CHUNK):
                chunk = ids[start : start + _DESCRIBE_CHUNK]
                described = self._runtime.schedule_read(
                    "describe-groups", partition, _describe_op(chunk)
                )
                error = future_failure(described)
                if error is not None:
                    code, _ = map_operation_error("describe-groups", error)
                    for group_id in chunk:
                        answers[group_id] = _described_error(group_id, code)
                else:
                    for group in described.result():
                        group_id = group.group_id
                        extra = counts[group_id] * (
                            described_group_bytes(group)
                            - DESCRIBED_GROUP_MIN_BYTES
                            - _id_extra(group_id)
                        )
                        if extra <= room:
                            room -= extra
                        else:
                            group = _described_error(group_id, ErrorCode.MESSAGE_TOO_LARGE)
                        answers[group_id] = group
                if clock.due():
                    yield PAUSE
        groups = yield from _in_request_order(group_ids, answers, clock)
        return DescribeGroupsResponse(groups=groups)

    def _authorized_groups(
        self,
        authorizer: RequestAuthorizer,
        ctx: RequestContext,
        operation: AclOperation,
        api: str,
        counts: dict[str | None, int],
        answers: dict[str | None, T],
        denied: Callable[[str], T],
        clock: SliceClock,
    ) -> Generator[Step, None, dict[str | None, int]]:
        """The groups of `counts` the principal may take `operation` on, and those it may
        not answered `denied` at once (Kafka's `partitionSeqByAuthorized` of the request's
        groups). A missing or too long id is left for `_by_partition` to refuse: it is
        refused whoever asks."""
        max_length = self._limits.max_id_length
        allowed: dict[str | None, int] = {}
        items = list(counts.items())
        for start in range(0, len(items), _HASH_CHUNK):
            for group_id, count in items[start : start + _HASH_CHUNK]:
                if (
                    group_id is None
                    or len(group_id) > max_length
                    or authorizer.allowed(
                        ctx, operation, ResourceType.GROUP, group_id, api=api, ref_count=count
                    )
                ):
                    allowed[group_id] = count
                else:
                    answers[group_id] = denied(group_id)
            if clock.due():
                yield PAUSE
        return allowed

    def _by_partition(
        self,
        counts: dict[str | None, int],
        answers: dict[str | None, T],
        invalid: Callable[[str | None], T],
        clock: SliceClock,
    ) -> Generator[Step, None, dict[int, list[str]]]:
        """The distinct group ids by partition; a missing or too long one is answered
        `invalid` at once."""
        max_length = self._limits.max_id_length
        partition_for = self._partition_for
        by_partition: dict[int, list[str]] = {}
        distinct = list(counts)
        for start in range(0, len(distinct), _HASH_CHUNK):
            for group_id in distinct[start : start + _HASH_CHUNK]:
                if group_id is None or len(group_id) > max_length:
                    answers[group_id] = invalid(group_id)
                else:
                    by_partition.setdefault(partition_for(group_id), []).append(group_id)
            if clock.due():
                yield PAUSE
        return by_partition

    # DeleteGroups.

    def delete_groups(
        self, request: DeleteGroupsRequest, ctx: RequestContext
    ) -> Message | SlicedAnswer:
        """Each group named, deleted; with an authorizer, one the principal may not DELETE
        is answered GROUP_AUTHORIZATION_FAILED and left as it is."""
        least = len(request.groups_names) * DELETED_GROUP_MIN_BYTES
        if least > self._limits.answer_items_bytes:
            return self._too_large(least)
        return self._sliced.run(lambda clock: self._delete_groups(request.groups_names, ctx, clock))

    def _delete_groups(
        self, group_ids: list[str | None], ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        counts = yield from _count(group_ids, clock)
        # Every answer's size is known from the request: nothing is deleted for a request
        # that could not be answered.
        size = yield from _least_bytes(counts, DELETED_GROUP_MIN_BYTES, clock)
        if size > self._limits.answer_items_bytes:
            return self._too_large(size)
        answers: dict[str | None, DeleteGroupsResponseResult] = {}
        to_delete = counts
        authorizer = self._authorizer
        if authorizer is not None:
            to_delete = yield from self._authorized_groups(
                authorizer,
                ctx,
                AclOperation.DELETE,
                _DELETE_GROUPS,
                counts,
                answers,
                _denied_deleted,
                clock,
            )
        by_partition = yield from self._by_partition(to_delete, answers, _invalid_deleted, clock)
        # A write per partition and slice of its groups, those of every partition together;
        # each write deletes what it can within its record budget and the next goes on.
        remaining = {partition: (ids, 0) for partition, ids in by_partition.items()}
        built = 0
        while remaining:
            writes: list[tuple[int, list[str], asyncio.Future[list[DeleteGroupsResponseResult]]]]
            writes = []
            for partition, (ids, done) in remaining.items():
                chunk = ids[done : done + _DELETE_CHUNK]
                deleted = self._runtime.schedule_write(
                    "delete-groups", partition, _delete_op(chunk)
                )
                writes.append((partition, chunk, deleted))
                if clock.due():
                    break
            # What the answer holds while it waits for the writes (see SliceClock).
            clock.built_bytes = built
            yield [deleted for _, _, deleted in writes]
            for partition, chunk, deleted in writes:
                error = future_failure(deleted)
                if error is None:
                    results = deleted.result()
                else:
                    code, _ = map_operation_error("delete-groups", error)
                    results = [_deleted_error(group_id, code) for group_id in chunk]
                for result in results:
                    answers[result.group_id] = result
                    built += DELETED_GROUP_MIN_BYTES + str_extra(result.group_id)
                ids, done = remaining[partition]
                done += len(results)
                if done < len(ids):
                    remaining[partition] = (ids, done)
                else:
                    del remaining[partition]
            if clock.due():
                yield PAUSE
        results = yield from _in_request_order(group_ids, answers, clock)
        return DeleteGroupsResponse(results=results)

    # ListGroups.

    def list_groups(
        self, request: ListGroupsRequest, ctx: RequestContext
    ) -> Message | SlicedAnswer:
        """The groups of the partitions this node owns; with an authorizer, every one to a
        principal that may DESCRIBE the cluster, else only those it may DESCRIBE (Kafka's
        handler; neither denial logged)."""
        if not self._runtime.may_serve():
            # A cluster node that does not know what it owns (just started, or without a
            # lease) cannot say which groups there are: an empty list would say "none".
            return ListGroupsResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=NO_OWNERSHIP
            )
        return self._sliced.run(lambda clock: self._list_groups(request, ctx, clock))

    def _list_groups(
        self, request: ListGroupsRequest, ctx: RequestContext, clock: SliceClock
    ) -> Steps:
        states = list_filter(request.states_filter)
        types = list_filter(request.types_filter)
        list_op = _list_op
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed_cluster(
            ctx, AclOperation.DESCRIBE, api=_LIST_GROUPS, log_denied=False
        ):
            list_op = partial(
                _visible_list_op,
                partial(
                    authorizer.allowed,
                    ctx,
                    AclOperation.DESCRIBE,
                    ResourceType.GROUP,
                    api=_LIST_GROUPS,
                    log_denied=False,
                ),
            )
        room = self._limits.answer_items_bytes
        groups: list[ListGroupsResponseGroup] = []
        for partition in range(self._num_partitions):
            listed = self._runtime.schedule_read(
                "list-groups", partition, list_op(states, types, room)
            )
            error = future_failure(listed)
            if error is not None:
                code, _ = map_operation_error("list-groups", error)
                # Partitions this node does not own are someone else's to list (Kafka's
                # read-all skips NOT_COORDINATOR); any other error fails the listing.
                if code is not ErrorCode.NOT_COORDINATOR:
                    return ListGroupsResponse(error_code=code, groups=[])
            else:
                result = listed.result()
                if result is None:
                    code, message = answer_too_large(
                        self._limits.answer_items_bytes - room, self._limits
                    )
                    return ListGroupsResponse(error_code=code, error_message=message)
                room -= result[1]
                groups.extend(result[0])
            if clock.due():
                yield PAUSE
        return ListGroupsResponse(groups=groups)


def _count(items: list[T], clock: SliceClock) -> Generator[Step, None, dict[T, int]]:
    """How many times each distinct item is named, in the order first named."""
    counts: dict[T, int] = {}
    get = counts.get
    for start in range(0, len(items), _COUNT_CHUNK):
        for item in items[start : start + _COUNT_CHUNK]:
            counts[item] = get(item, 0) + 1
        if clock.due():
            yield PAUSE
    return counts


def _least_bytes(
    counts: dict[str | None, int], item_bytes: int, clock: SliceClock
) -> Generator[Step, None, int]:
    """What the items of an answer naming each group `counts` times take at least: each
    `item_bytes` and its group id (a missing one answered "")."""
    total = 0
    items = list(counts.items())
    for start in range(0, len(items), _ANSWER_CHUNK):
        for group_id, count in items[start : start + _ANSWER_CHUNK]:
            total += count * (item_bytes + _id_extra(group_id))
        if clock.due():
            yield PAUSE
    return total


def _in_request_order(
    requested: list[str | None], answers: dict[str | None, T], clock: SliceClock
) -> Generator[Step, None, list[T]]:
    """The answer of each group in the order the request named them, a repeat answered
    like the first."""
    ordered: list[T] = []
    for start in range(0, len(requested), _ANSWER_CHUNK):
        ordered.extend([answers[group_id] for group_id in requested[start : start + _ANSWER_CHUNK]])
        if clock.due():
            yield PAUSE
    return ordered


# The operations, each made by a function so that it holds its own arguments.


def _describe_op(
    group_ids: list[str],
) -> Callable[[GroupShard, int], list[DescribeGroupsResponseGroup]]:
    return lambda shard, committed: shard.describe_groups(group_ids, committed)


def _delete_op(
    group_ids: list[str],
) -> Callable[[GroupShard], CoordinatorResult[list[DeleteGroupsResponseResult]]]:
    return lambda shard: shard.delete_groups(group_ids, _DELETE_RECORDS)


def _list_op(
    states: frozenset[str], types: frozenset[str], max_bytes: int
) -> Callable[[GroupShard, int], tuple[list[ListGroupsResponseGroup], int] | None]:
    return lambda shard, committed: shard.list_groups(states, types, committed, max_bytes)


def _visible_list_op(
    visible: Callable[[str], bool], states: frozenset[str], types: frozenset[str], max_bytes: int
) -> Callable[[GroupShard, int], tuple[list[ListGroupsResponseGroup], int] | None]:
    """`_list_op` of the groups `visible` lets the principal see. The partition's groups are
    listed whole, then filtered: those left out must not count against `max_bytes` (a
    principal that sees a few groups gets them however many others there are), so the work
    is bounded by the groups a partition holds, not by the answer."""

    def listed(
        shard: GroupShard, committed: int
    ) -> tuple[list[ListGroupsResponseGroup], int] | None:
        every = shard.list_groups(states, types, committed)
        assert every is not None, "no limit, no refusal"
        kept: list[ListGroupsResponseGroup] = []
        size = 0
        for group in every[0]:
            if visible(group.group_id):
                size += listed_group_bytes(
                    group.group_id, group.protocol_type, group.group_state, group.group_type
                )
                if size > max_bytes:
                    return None
                kept.append(group)
        return kept, size

    return listed


def _id_extra(group_id: str | None) -> int:
    # A missing id is answered with "".
    return 0 if group_id is None else str_extra(group_id)


def _described_error(group_id: str | None, code: ErrorCode) -> DescribeGroupsResponseGroup:
    # Kafka's answer for a group it could not describe: empty state, type and protocol.
    return DescribeGroupsResponseGroup(
        group_id=group_id or "", error_code=code, group_state="", protocol_type=""
    )


def _deleted_error(group_id: str | None, code: ErrorCode) -> DeleteGroupsResponseResult:
    return DeleteGroupsResponseResult(group_id=group_id or "", error_code=code)


def _denied_described(group_id: str) -> DescribeGroupsResponseGroup:
    return _described_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)


def _denied_deleted(group_id: str) -> DeleteGroupsResponseResult:
    return _deleted_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)


def _invalid_described(group_id: str | None) -> DescribeGroupsResponseGroup:
    return _described_error(group_id, ErrorCode.INVALID_GROUP_ID)


def _invalid_deleted(group_id: str | None) -> DeleteGroupsResponseResult:
    return _deleted_error(group_id, ErrorCode.INVALID_GROUP_ID)
