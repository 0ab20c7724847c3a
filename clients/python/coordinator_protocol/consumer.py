"""The "consumer" embedded protocol: what Kafka's ConsumerProtocol carries, in msgpack.

Groups whose protocol_type is "consumer" put a subscription in each JoinGroup
`protocols[].metadata` and an assignment in each SyncGroup `assignments[].assignment` (and
the SyncGroup response's `assignment`). For every other protocol type those bytes stay
opaque. The server decodes them only to learn which topics a group uses (OffsetDelete,
offset expiration, DescribeGroups tooling), so decoding is as strict as the envelope's and
anything unexpected raises `InvalidConsumerProtocolError`; Kafka's rule is then to treat
the member as subscribed to every topic, which is the caller's decision.

An empty assignment (`b""`) means "no assignment" and decodes to one with no partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Self

from coordinator_protocol import _msgpack

__all__ = [
    "ConsumerProtocolAssignment",
    "ConsumerProtocolSubscription",
    "InvalidConsumerProtocolError",
    "TopicPartitions",
]

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1


class InvalidConsumerProtocolError(ValueError):
    """Bytes that do not hold a subscription or assignment of the "consumer" protocol."""


@dataclass(slots=True)
class TopicPartitions:
    """Partitions of one topic."""

    topic: str
    partitions: list[int]

    def to_map(self) -> dict[str, object]:
        return {"topic": self.topic, "partitions": self.partitions}


@dataclass(slots=True)
class ConsumerProtocolSubscription:
    """A member's subscription: JoinGroup `protocols[].metadata` of a "consumer" group."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartitions] = field(default_factory=list)

    def encode(self) -> bytes:
        """`{"topics": [str], "user_data": bin or nil, "owned_partitions": [...]}`."""
        return _msgpack.pack(
            {
                "topics": self.topics,
                "user_data": self.user_data,
                "owned_partitions": [owned.to_map() for owned in self.owned_partitions],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Parse a subscription.

        Raises:
            InvalidConsumerProtocolError: `data` is not a msgpack map of this shape.
        """
        value = _decode_map(data, "subscription")
        topics = value.get("topics")
        if type(topics) is not list or not all(type(topic) is str for topic in topics):
            raise InvalidConsumerProtocolError("subscription: topics must be a list of str")
        return cls(
            topics=topics,
            user_data=_user_data(value, "subscription"),
            owned_partitions=_topic_partitions(
                value.get("owned_partitions", []), "subscription: owned_partitions"
            ),
        )


@dataclass(slots=True)
class ConsumerProtocolAssignment:
    """A member's assignment: SyncGroup `assignments[].assignment` of a "consumer" group."""

    partitions: list[TopicPartitions] = field(default_factory=list)
    user_data: bytes | None = None

    def encode(self) -> bytes:
        """`{"partitions": [{"topic": str, "partitions": [int]}], "user_data": bin or nil}`."""
        return _msgpack.pack(
            {
                "partitions": [assigned.to_map() for assigned in self.partitions],
                "user_data": self.user_data,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Parse an assignment; empty bytes (no assignment) give an empty one.

        Raises:
            InvalidConsumerProtocolError: `data` is neither empty nor a msgpack map of this
                shape.
        """
        if not data:
            return cls()
        value = _decode_map(data, "assignment")
        if "partitions" not in value:
            raise InvalidConsumerProtocolError("assignment: partitions is missing")
        return cls(
            partitions=_topic_partitions(value["partitions"], "assignment: partitions"),
            user_data=_user_data(value, "assignment"),
        )


# Decoding checks by hand: the shapes are small, and type() rather than isinstance()
# keeps a bool from passing as a partition number.


def _decode_map(data: bytes, what: str) -> dict[str, object]:
    try:
        value = _msgpack.unpack(data)
    except ValueError as e:
        raise InvalidConsumerProtocolError(f"{what}: invalid msgpack: {e}") from None
    if type(value) is not dict:
        raise InvalidConsumerProtocolError(f"{what}: expected a map")
    return value


def _user_data(value: dict[str, object], what: str) -> bytes | None:
    user_data = value.get("user_data")
    if user_data is not None and type(user_data) is not bytes:
        raise InvalidConsumerProtocolError(f"{what}: user_data must be bin or nil")
    return user_data


def _topic_partitions(value: object, what: str) -> list[TopicPartitions]:
    if type(value) is not list:
        raise InvalidConsumerProtocolError(f"{what} must be a list")
    result = []
    for index, item in enumerate(value):
        if type(item) is not dict:
            raise InvalidConsumerProtocolError(f"{what}.{index} must be a map")
        topic = item.get("topic")
        partitions = item.get("partitions")
        if type(topic) is not str:
            raise InvalidConsumerProtocolError(f"{what}.{index}.topic must be a str")
        if type(partitions) is not list or not all(
            type(partition) is int and _INT32_MIN <= partition <= _INT32_MAX
            for partition in partitions
        ):
            raise InvalidConsumerProtocolError(f"{what}.{index}.partitions must be a list of int32")
        result.append(TopicPartitions(topic, partitions))
    return result
