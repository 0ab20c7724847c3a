"""The answers to OffsetCommit, shared: answers are values nobody changes once made, and the
same few are made again and again (a partition committed without error, a commit of the
same partitions as the last one), so they are kept rather than built each time. A shared
response also lets a connection reuse the encoding of the last response it sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

_ANSWERS_KEPT: Final = 65536
_partition_answers: Final[dict[tuple[int, ErrorCode], OffsetCommitResponsePartition]] = {}
_RESPONSES_KEPT: Final = 4096
_RESPONSE_MAX_PARTITIONS: Final = 256
_all_committed_answers: Final[
    dict[tuple[tuple[str, tuple[int, ...]], ...], OffsetCommitResponse]
] = {}


def _partition_answer(partition_index: int, code: ErrorCode) -> OffsetCommitResponsePartition:
    answer = _partition_answers.get((partition_index, code))
    if answer is None:
        if len(_partition_answers) >= _ANSWERS_KEPT:
            _partition_answers.clear()
        answer = _partition_answers[(partition_index, code)] = OffsetCommitResponsePartition(
            partition_index=partition_index, error_code=code
        )
    return answer


def all_committed_answer(shape: tuple[tuple[str, tuple[int, ...]], ...]) -> OffsetCommitResponse:
    """The answer to a commit of every partition of `shape`, (topic, partition indexes) in
    the request's order, without error."""
    response = _all_committed_answers.get(shape)
    if response is not None:
        return response
    response = OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=name,
                partitions=[_partition_answer(index, ErrorCode.NONE) for index in indexes],
            )
            for name, indexes in shape
        ]
    )
    # Answers to commits of many partitions are not kept: they are rarely the same twice.
    if sum(len(indexes) for _, indexes in shape) <= _RESPONSE_MAX_PARTITIONS:
        if len(_all_committed_answers) >= _RESPONSES_KEPT:
            _all_committed_answers.clear()
        _all_committed_answers[shape] = response
    return response


def answer_per_partition(
    request: OffsetCommitRequest,
    code_of: Callable[[str, OffsetCommitRequestPartition], ErrorCode],
) -> OffsetCommitResponse:
    """Every partition of the request answered with `code_of` its topic's name and it, in
    the request's order."""
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    _partition_answer(p.partition_index, code_of(topic.name, p))
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )
