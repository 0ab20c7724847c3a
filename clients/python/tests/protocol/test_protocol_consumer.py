"""The "consumer" embedded protocol: golden bytes, round trips and garbage."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
    TopicPartitions,
)


def test_assignment_golden() -> None:
    assignment = ConsumerProtocolAssignment([TopicPartitions("t", [0, 1])])
    assert assignment.encode() == (
        b"\x82"  # fixmap of 2
        b"\xaapartitions"  # key: fixstr of 10
        b"\x91"  # fixarray of 1
        b"\x82"  # fixmap of 2
        b"\xa5topic\xa1t"  # "topic": "t"
        b"\xaapartitions\x92\x00\x01"  # "partitions": [0, 1]
        b"\xa9user_data\xc0"  # "user_data": nil
    )


def test_subscription_golden() -> None:
    subscription = ConsumerProtocolSubscription(
        ["a"], user_data=b"\xff", owned_partitions=[TopicPartitions("a", [3])]
    )
    assert subscription.encode() == (
        b"\x83"  # fixmap of 3
        b"\xa6topics\x91\xa1a"  # "topics": ["a"]
        b"\xa9user_data\xc4\x01\xff"  # "user_data": bin 8 of length 1
        b"\xb0owned_partitions"  # key: fixstr of 16
        b"\x91"  # fixarray of 1
        b"\x82"  # fixmap of 2
        b"\xa5topic\xa1a"  # "topic": "a"
        b"\xaapartitions\x91\x03"  # "partitions": [3]
    )


def test_defaults() -> None:
    subscription = ConsumerProtocolSubscription(["a"])
    assert subscription.user_data is None
    assert subscription.owned_partitions == []
    assignment = ConsumerProtocolAssignment()
    assert assignment.partitions == []
    assert assignment.user_data is None
    # Defaults are not shared between instances.
    assignment.partitions.append(TopicPartitions("t", [0]))
    assert ConsumerProtocolAssignment().partitions == []


def test_keyword_construction() -> None:
    assert TopicPartitions(topic="t", partitions=[1]) == TopicPartitions("t", [1])


def test_empty_bytes_are_no_assignment() -> None:
    assert ConsumerProtocolAssignment.decode(b"") == ConsumerProtocolAssignment()


def test_empty_bytes_are_not_a_subscription() -> None:
    with pytest.raises(InvalidConsumerProtocolError):
        ConsumerProtocolSubscription.decode(b"")


def test_optional_keys_may_be_absent_and_unknown_keys_are_ignored() -> None:
    subscription = ConsumerProtocolSubscription.decode(
        msgpack.packb({"topics": ["a", "b"], "rack_id": "r1"})
    )
    assert subscription == ConsumerProtocolSubscription(["a", "b"])
    assignment = ConsumerProtocolAssignment.decode(
        msgpack.packb({"partitions": [{"topic": "t", "partitions": [], "x": 1}], "y": 2})
    )
    assert assignment == ConsumerProtocolAssignment([TopicPartitions("t", [])])


topic_partitions = st.builds(
    TopicPartitions,
    topic=st.text(max_size=10),
    partitions=st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=5),
)
user_data = st.none() | st.binary(max_size=10)


@given(
    topics=st.lists(st.text(max_size=10), max_size=5),
    user_data=user_data,
    owned=st.lists(topic_partitions, max_size=3),
)
def test_subscription_round_trip(
    topics: list[str], user_data: bytes | None, owned: list[TopicPartitions]
) -> None:
    subscription = ConsumerProtocolSubscription(topics, user_data, owned)
    assert ConsumerProtocolSubscription.decode(subscription.encode()) == subscription


@given(partitions=st.lists(topic_partitions, max_size=3), user_data=user_data)
def test_assignment_round_trip(partitions: list[TopicPartitions], user_data: bytes | None) -> None:
    assignment = ConsumerProtocolAssignment(partitions, user_data)
    assert ConsumerProtocolAssignment.decode(assignment.encode()) == assignment


GOOD_TP = {"topic": "t", "partitions": [0]}


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # never-used msgpack byte
        b"\x81",  # truncated map
        msgpack.packb({"topics": []}) + b"\x00",  # trailing byte
        msgpack.packb([["t"]]),  # an array, not a map
        msgpack.packb("topics"),
        msgpack.packb({}),  # topics missing
        msgpack.packb({"topics": None}),
        msgpack.packb({"topics": "t"}),
        msgpack.packb({"topics": [1]}),
        msgpack.packb({"topics": [b"t"]}),
        msgpack.packb({"topics": [], "user_data": "text"}),
        msgpack.packb({"topics": [], "owned_partitions": None}),
        msgpack.packb({"topics": [], "owned_partitions": [["t", [0]]]}),
        msgpack.packb({"topics": [], "owned_partitions": [{"partitions": [0]}]}),
        msgpack.packb({"topics": [], "owned_partitions": [{"topic": "t"}]}),
        msgpack.packb({"topics": [], "owned_partitions": [{"topic": "t", "partitions": [True]}]}),
        msgpack.packb({"topics": [], "owned_partitions": [{"topic": "t", "partitions": [2**31]}]}),
        bytes(msgpack.packb({"topics": [], "user_data": msgpack.ExtType(1, b"x")})),
    ],
)
def test_subscription_garbage(data: bytes) -> None:
    with pytest.raises(InvalidConsumerProtocolError):
        ConsumerProtocolSubscription.decode(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",
        b"\x00",  # a bare int
        msgpack.packb([]),
        msgpack.packb({}),  # partitions missing
        msgpack.packb({"partitions": None}),
        msgpack.packb({"partitions": {"t": [0]}}),
        msgpack.packb({"partitions": [GOOD_TP, None]}),
        msgpack.packb({"partitions": [{"topic": 1, "partitions": [0]}]}),
        msgpack.packb({"partitions": [{"topic": "t", "partitions": ["0"]}]}),
        msgpack.packb({"partitions": [{"topic": "t", "partitions": [0.0]}]}),
        msgpack.packb({"partitions": [{"topic": "t", "partitions": None}]}),
        msgpack.packb({"partitions": [GOOD_TP], "user_data": 5}),
        msgpack.packb({"partitions": [GOOD_TP]}) + b"\xc0",
    ],
)
def test_assignment_garbage(data: bytes) -> None:
    with pytest.raises(InvalidConsumerProtocolError):
        ConsumerProtocolAssignment.decode(data)


def test_error_is_a_value_error() -> None:
    assert issubclass(InvalidConsumerProtocolError, ValueError)


@given(data=st.binary(min_size=1, max_size=64))
def test_random_bytes_decode_or_raise_the_protocol_error(data: bytes) -> None:
    for decode in (ConsumerProtocolSubscription.decode, ConsumerProtocolAssignment.decode):
        with contextlib.suppress(InvalidConsumerProtocolError):
            decode(data)
