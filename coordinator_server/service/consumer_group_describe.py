"""ConsumerGroupDescribe (69): each consumer group named, as its partition's committed state
has it (Kafka's `GroupCoordinatorService.consumerGroupDescribe` and KafkaApis' checks).

The groups are read per partition, one read of all of a partition's groups, in the
request's order in the answer. A group id that is empty is answered INVALID_GROUP_ID; with
an authorizer, one the principal may not DESCRIBE is answered GROUP_AUTHORIZATION_FAILED,
whether it exists or not, and one whose members subscribe to or are assigned a topic the
principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED (Kafka's rule: a group's
description names its topics). An answer larger than `max_response_bytes` would allow
answers the groups beyond the room MESSAGE_TOO_LARGE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseGroup,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_server.authorizer.acls import AclOperation, ResourceType
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import RequestLimits
from coordinator_server.service.replies import Reply, future_failure
from coordinator_server.service.routing import Routing
from coordinator_server.shard import GroupShard

_CONSUMER_GROUP_DESCRIBE: Final = api_name(ApiKey.CONSUMER_GROUP_DESCRIBE)

# What Kafka answers as a group's authorized operations (AclEntry.supportedOperations).
_GROUP_OPERATIONS: Final = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE)

_encoder = msgspec.msgpack.Encoder()


def _error(
    group_id: str, code: ErrorCode, message: str | None = None
) -> ConsumerGroupDescribeResponseGroup:
    return ConsumerGroupDescribeResponseGroup(
        group_id=group_id, error_code=code, error_message=message
    )


def _describe_op(
    group_ids: list[str],
) -> Callable[[GroupShard, int], list[ConsumerGroupDescribeResponseGroup]]:
    return lambda shard, committed: shard.consumer_group_describe(group_ids, committed)


class ConsumerGroupDescribeRequests:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        routing: Routing,
        limits: RequestLimits,
        authorizer: RequestAuthorizer | None,
    ) -> None:
        self._runtime = runtime
        self._partition_for = routing.partition_for
        self._limits = limits
        self._authorizer = authorizer

    def consumer_group_describe(
        self, request: ConsumerGroupDescribeRequest, ctx: RequestContext
    ) -> Reply:
        authorizer = self._authorizer
        answers: dict[str, ConsumerGroupDescribeResponseGroup] = {}
        by_partition: dict[int, list[str]] = {}
        seen: set[str] = set()
        for group_id in request.group_ids:
            if not group_id or group_id in seen:
                continue
            seen.add(group_id)
            if authorizer is not None and not authorizer.allowed(
                ctx,
                AclOperation.DESCRIBE,
                ResourceType.GROUP,
                group_id,
                api=_CONSUMER_GROUP_DESCRIBE,
            ):
                answers[group_id] = _error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
                continue
            by_partition.setdefault(self._partition_for(group_id), []).append(group_id)
        for partition, ids in by_partition.items():
            described = self._runtime.schedule_read(
                "consumer-group-describe", partition, _describe_op(ids)
            )
            failure = future_failure(described)
            if failure is not None:
                code, message = map_operation_error("consumer-group-describe", failure)
                for group_id in ids:
                    answers[group_id] = _error(group_id, code, message)
                continue
            for group in described.result():
                answers[group.group_id] = self._checked(group, request, ctx)
        room = self._limits.answer_items_bytes
        groups: list[ConsumerGroupDescribeResponseGroup] = []
        for group_id in request.group_ids:
            answer = answers[group_id] if group_id else _error("", ErrorCode.INVALID_GROUP_ID)
            size = len(_encoder.encode(answer))
            if size > room:
                answer = _error(
                    answer.group_id,
                    ErrorCode.MESSAGE_TOO_LARGE,
                    "the group's description does not fit the rest of the answer "
                    f"(max_response_bytes {self._limits.max_response_bytes})",
                )
                size = len(_encoder.encode(answer))
            room -= size
            groups.append(answer)
        return ConsumerGroupDescribeResponse(groups=groups)

    def _checked(
        self,
        group: ConsumerGroupDescribeResponseGroup,
        request: ConsumerGroupDescribeRequest,
        ctx: RequestContext,
    ) -> ConsumerGroupDescribeResponseGroup:
        """The group as this principal may see it."""
        authorizer = self._authorizer
        if authorizer is None or group.error_code:
            return group
        topics: set[str] = set()
        for member in group.members:
            topics.update(member.subscribed_topic_names)
            for assignment in (member.assignment, member.target_assignment):
                topics.update(tp.topic_name for tp in assignment.topic_partitions if tp.topic_name)
        if topics and authorizer.denied(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics, api=_CONSUMER_GROUP_DESCRIBE
        ):
            return _error(
                group.group_id,
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "The described group uses topics that the client is not authorized to describe.",
            )
        if request.include_authorized_operations:
            group.authorized_operations = authorizer.authorized_operations(
                ctx,
                ResourceType.GROUP,
                group.group_id,
                _GROUP_OPERATIONS,
                api=_CONSUMER_GROUP_DESCRIBE,
            )
        return group


__all__ = ["ConsumerGroupDescribeRequests"]
