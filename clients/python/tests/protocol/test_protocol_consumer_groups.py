"""The consumer group protocol's messages (ConsumerGroupHeartbeat, ConsumerGroupDescribe):
the contract's field lists, defaults, nulls, validation and wire round trips (the same checks
as the group APIs', in test_protocol_messages)."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message_strategies import message_strategy

from coordinator_protocol import consumer_groups
from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, ApiKey, api_name, is_supported
from coordinator_protocol.consumer_groups import (
    CONSUMER_GROUP_MESSAGE_PAIRS,
    MEMBER_TYPE_CONSUMER,
    MEMBER_TYPE_UNKNOWN,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupDescribeResponseMember,
    ConsumerGroupDescribeResponseTopicPartitions,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from coordinator_protocol.envelope import (
    RequestHeader,
    encode_body,
    encode_request,
    encode_response,
    encode_response_of,
    split_request,
    split_response,
)
from coordinator_protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    UnsupportedVersionError,
    error_for_code,
)
from coordinator_protocol.message_base import AUTHORIZED_OPERATIONS_OMITTED, NO_UUID, Message
from coordinator_protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    parse_request,
    parse_response,
)

# The field lists of PROTOCOL.md's consumer group table, item by item. Order is the wire
# order (Kafka's schema order, `topic_name` right after `topic_id`).
CONTRACT_FIELDS: dict[str, list[str]] = {
    "ConsumerGroupHeartbeatRequest": [
        "group_id",
        "member_id",
        "member_epoch",
        "instance_id",
        "rack_id",
        "rebalance_timeout_ms",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "server_assignor",
        "topic_partitions",
    ],
    "ConsumerGroupHeartbeatRequestTopicPartitions": ["topic_id", "topic_name", "partitions"],
    "ConsumerGroupHeartbeatResponse": [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "member_id",
        "member_epoch",
        "heartbeat_interval_ms",
        "assignment",
    ],
    "ConsumerGroupHeartbeatResponseAssignment": ["topic_partitions"],
    "ConsumerGroupHeartbeatResponseTopicPartitions": ["topic_id", "topic_name", "partitions"],
    "ConsumerGroupDescribeRequest": ["group_ids", "include_authorized_operations"],
    "ConsumerGroupDescribeResponse": ["throttle_time_ms", "groups"],
    "ConsumerGroupDescribeResponseGroup": [
        "error_code",
        "error_message",
        "group_id",
        "group_state",
        "group_epoch",
        "assignment_epoch",
        "assignor_name",
        "members",
        "authorized_operations",
    ],
    "ConsumerGroupDescribeResponseMember": [
        "member_id",
        "instance_id",
        "rack_id",
        "member_epoch",
        "client_id",
        "client_host",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "assignment",
        "target_assignment",
        "member_type",
    ],
    "ConsumerGroupDescribeResponseAssignment": ["topic_partitions"],
    "ConsumerGroupDescribeResponseTopicPartitions": ["topic_id", "topic_name", "partitions"],
}

MESSAGE_CLASSES: list[type[Message]] = [getattr(consumer_groups, name) for name in CONTRACT_FIELDS]
RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if "Response" in cls.__name__]
REQUEST_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in REQUEST_TYPES.values()]
TOP_RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in RESPONSE_TYPES.values()]

CONSUMER_GROUP_KEYS = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat",
    ApiKey.CONSUMER_GROUP_DESCRIBE: "ConsumerGroupDescribe",
}

ORDERS_ID = uuid.UUID("6f1c4a52-0d3e-4b5a-9c7e-2a1b3c4d5e6f").bytes


def _header(api_key: ApiKey, api_version: int = 0) -> RequestHeader:
    return RequestHeader(api_key, api_version, correlation_id=1, client_id="test")


def packb(value: object) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def _parse(api_key: ApiKey, body: object) -> Message:
    return parse_request(_header(api_key), packb(body))


# The table


def test_every_message_class_is_in_the_contract_table() -> None:
    exported = {
        name
        for name in consumer_groups.__all__
        if isinstance(getattr(consumer_groups, name), type)
        and issubclass(getattr(consumer_groups, name), Message)
    }
    assert exported == set(CONTRACT_FIELDS)


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
def test_fields_are_the_contract_fields(cls: type[Message]) -> None:
    assert list(cls.__struct_fields__) == CONTRACT_FIELDS[cls.__name__]


@pytest.mark.parametrize("cls", RESPONSE_CLASSES, ids=lambda cls: cls.__name__)
def test_responses_build_from_defaults_and_write_every_field(cls: type[Message]) -> None:
    body = cls().to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]


def test_the_registry_holds_both_apis_at_version_0_with_kafkas_keys() -> None:
    assert (
        (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
        (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
    ) == CONSUMER_GROUP_MESSAGE_PAIRS
    assert (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE) == (68, 69)
    for api_key, name in CONSUMER_GROUP_KEYS.items():
        assert api_name(api_key) == name
        assert SUPPORTED_VERSIONS[api_key] == (0, 0)
        assert REQUEST_TYPES[(api_key, 0)].__name__ == f"{name}Request"
        assert RESPONSE_TYPES[(api_key, 0)].__name__ == f"{name}Response"
        assert not is_supported(api_key, 1)
    assert {cls.API_KEY for cls in REQUEST_CLASSES} == set(CONSUMER_GROUP_KEYS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("api_key", sorted(CONSUMER_GROUP_KEYS))
def test_kafkas_version_number_is_not_the_contracts(api_key: ApiKey) -> None:
    # The bodies are Kafka's version 1; the contract numbers its own shapes from 0.
    with pytest.raises(UnsupportedVersionError) as raised:
        parse_request(_header(api_key, 1), packb({}))
    assert raised.value.message == (
        f"{CONSUMER_GROUP_KEYS[api_key]} version 1 is not supported (supported: 0 to 0)"
    )


@pytest.mark.parametrize(
    ("code", "name", "retriable"),
    [
        (25, "UNKNOWN_MEMBER_ID", False),
        (69, "GROUP_ID_NOT_FOUND", False),
        (81, "GROUP_MAX_SIZE_REACHED", False),
        (110, "FENCED_MEMBER_EPOCH", False),
        (111, "UNRELEASED_INSTANCE_ID", False),
        (112, "UNSUPPORTED_ASSIGNOR", False),
        (113, "STALE_MEMBER_EPOCH", False),
        (128, "INVALID_REGULAR_EXPRESSION", False),
    ],
)
def test_the_consumer_group_error_codes_are_kafkas(code: int, name: str, retriable: bool) -> None:
    error = error_for_code(code)
    assert (error.code.name, error.code.value, error.retriable) == (name, code, retriable)


# ConsumerGroupHeartbeat


def test_a_heartbeat_needs_only_the_member_and_its_epoch_the_rest_is_unchanged() -> None:
    request = _parse(ApiKey.CONSUMER_GROUP_HEARTBEAT, {"member_id": "m", "member_epoch": 5})
    assert request == ConsumerGroupHeartbeatRequest(
        group_id=None,
        member_id="m",
        member_epoch=5,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=-1,
        subscribed_topic_names=None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=None,
    )
    nulls: dict[str, object] = dict.fromkeys(CONTRACT_FIELDS["ConsumerGroupHeartbeatRequest"])
    nulls.update(member_id="m", member_epoch=5, rebalance_timeout_ms=-1)
    assert _parse(ApiKey.CONSUMER_GROUP_HEARTBEAT, nulls) == request


def test_a_joining_heartbeat_carries_everything() -> None:
    body = {
        "group_id": "g",
        "member_id": "m",
        "member_epoch": 0,
        "instance_id": "i",
        "rack_id": "r",
        "rebalance_timeout_ms": 300_000,
        "subscribed_topic_names": ["orders"],
        "subscribed_topic_regex": "ord.*",
        "server_assignor": "uniform",
        "topic_partitions": [],
    }
    request = _parse(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
    assert request.to_body() == body
    owned = _parse(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        {
            **body,
            "topic_partitions": [
                {"topic_id": ORDERS_ID, "topic_name": "orders", "partitions": [0, 2]}
            ],
        },
    )
    assert isinstance(owned, ConsumerGroupHeartbeatRequest)
    assert owned.topic_partitions == [
        ConsumerGroupHeartbeatRequestTopicPartitions(
            topic_id=ORDERS_ID, topic_name="orders", partitions=[0, 2]
        )
    ]


def test_heartbeat_response_defaults_and_assignment() -> None:
    assert ConsumerGroupHeartbeatResponse().to_body() == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }
    assert ConsumerGroupHeartbeatResponseTopicPartitions().topic_id == NO_UUID == bytes(16)
    response = ConsumerGroupHeartbeatResponse(
        member_id="m",
        member_epoch=3,
        heartbeat_interval_ms=5000,
        assignment=ConsumerGroupHeartbeatResponseAssignment(
            topic_partitions=[
                ConsumerGroupHeartbeatResponseTopicPartitions(
                    topic_id=ORDERS_ID, topic_name="orders", partitions=[1]
                )
            ]
        ),
    )
    _, body = split_response(encode_response(7, response))
    assert msgpack.unpackb(bytes(body))["assignment"] == {
        "topic_partitions": [{"topic_id": ORDERS_ID, "topic_name": "orders", "partitions": [1]}]
    }
    assert parse_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, body) == response
    assert response.reported_error_code() == 0
    fenced = ConsumerGroupHeartbeatResponse(error_code=ErrorCode.FENCED_MEMBER_EPOCH)
    assert fenced.reported_error_code() == 110


# ConsumerGroupDescribe


def test_describe_request_minimal_and_nil_group_ids() -> None:
    request = _parse(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": ["a", None]})
    assert request == ConsumerGroupDescribeRequest(
        group_ids=["a", None], include_authorized_operations=False
    )
    asked = _parse(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        {"group_ids": [], "include_authorized_operations": True},
    )
    assert asked == ConsumerGroupDescribeRequest(group_ids=[], include_authorized_operations=True)


def test_describe_response_defaults_are_kafkas() -> None:
    assert ConsumerGroupDescribeResponseGroup().to_body() == {
        "error_code": 0,
        "error_message": None,
        "group_id": "",
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    assert ConsumerGroupDescribeResponseMember().to_body() == {
        "member_id": "",
        "instance_id": None,
        "rack_id": None,
        "member_epoch": 0,
        "client_id": "",
        "client_host": "",
        "subscribed_topic_names": [],
        "subscribed_topic_regex": None,
        "assignment": {"topic_partitions": []},
        "target_assignment": {"topic_partitions": []},
        "member_type": MEMBER_TYPE_UNKNOWN,
    }
    # Each member has assignments of its own, not one shared default.
    first, second = ConsumerGroupDescribeResponseMember(), ConsumerGroupDescribeResponseMember()
    assert first.assignment is not second.assignment
    assert first.assignment is not first.target_assignment


def test_describe_response_round_trip_with_both_assignments() -> None:
    def assignment(*partitions: int) -> ConsumerGroupDescribeResponseAssignment:
        return ConsumerGroupDescribeResponseAssignment(
            topic_partitions=[
                ConsumerGroupDescribeResponseTopicPartitions(
                    topic_id=ORDERS_ID, topic_name="orders", partitions=list(partitions)
                )
            ]
        )

    response = ConsumerGroupDescribeResponse(
        groups=[
            ConsumerGroupDescribeResponseGroup(
                group_id="g",
                group_state="Reconciling",
                group_epoch=4,
                assignment_epoch=4,
                assignor_name="uniform",
                members=[
                    ConsumerGroupDescribeResponseMember(
                        member_id="m",
                        member_epoch=3,
                        client_id="c",
                        client_host="/10.0.0.1",
                        subscribed_topic_regex="ord.*",
                        assignment=assignment(0, 1),
                        target_assignment=assignment(0),
                        member_type=MEMBER_TYPE_CONSUMER,
                    )
                ],
            ),
            ConsumerGroupDescribeResponseGroup(
                group_id="missing", error_code=ErrorCode.GROUP_ID_NOT_FOUND
            ),
        ]
    )
    _, body = split_response(encode_response(7, response))
    assert parse_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body) == response


def test_describe_response_carries_an_unparsed_requests_error_to_the_client() -> None:
    # The answer has no top-level error_code: an error the server answers at the top level
    # (a request it could not parse) is raised, not lost among the ignored fields.
    body = packb({"error_code": 42, "error_message": "bad"})
    with pytest.raises(InvalidRequestError) as raised:
        parse_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body)
    assert raised.value.message == "bad"


# Validation

GOOD_HEARTBEAT: dict[str, Any] = {"group_id": "g", "member_id": "m", "member_epoch": 1}
OWNED: dict[str, Any] = {"topic_id": ORDERS_ID, "topic_name": "orders", "partitions": [0]}


@pytest.mark.parametrize(
    ("api_key", "body", "message"),
    [
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {"group_id": "g", "member_epoch": 0},
            "Object missing required field `member_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {"group_id": "g", "member_id": "m"},
            "Object missing required field `member_epoch`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "member_id": None},
            "Expected `str`, got `None` - at `$.member_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "member_epoch": "1"},
            "Expected `int`, got `str` - at `$.member_epoch`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "rebalance_timeout_ms": 2**31},
            "Expected `int` <= 2147483647 - at `$.rebalance_timeout_ms`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "subscribed_topic_names": "orders"},
            "Expected `array | null`, got `str` - at `$.subscribed_topic_names`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "subscribed_topic_regex": b"ord.*"},
            "Expected `str | null`, got `bytes` - at `$.subscribed_topic_regex`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "server_assignor": 1},
            "Expected `str | null`, got `int` - at `$.server_assignor`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "topic_partitions": [{**OWNED, "topic_id": ORDERS_ID[:15]}]},
            "Expected `bytes` of length >= 16 - at `$.topic_partitions[0].topic_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "topic_partitions": [{**OWNED, "topic_id": ORDERS_ID + b"\0"}]},
            "Expected `bytes` of length <= 16 - at `$.topic_partitions[0].topic_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            # A uuid's text form is not a uuid: the contract's uuid is 16 bytes of bin.
            {
                **GOOD_HEARTBEAT,
                "topic_partitions": [{**OWNED, "topic_id": str(uuid.UUID(bytes=ORDERS_ID))}],
            },
            "Expected `bytes`, got `str` - at `$.topic_partitions[0].topic_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "topic_partitions": [{**OWNED, "topic_id": None}]},
            "Expected `bytes`, got `None` - at `$.topic_partitions[0].topic_id`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {
                **GOOD_HEARTBEAT,
                "topic_partitions": [{k: v for k, v in OWNED.items() if k != "topic_name"}],
            },
            "Object missing required field `topic_name` - at `$.topic_partitions[0]`",
        ),
        (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {**GOOD_HEARTBEAT, "topic_partitions": [{**OWNED, "partitions": [2**31]}]},
            "Expected `int` <= 2147483647 - at `$.topic_partitions[0].partitions[0]`",
        ),
        (
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            {},
            "Object missing required field `group_ids`",
        ),
        (
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            {"group_ids": ["g"], "include_authorized_operations": 1},
            "Expected `bool`, got `int` - at `$.include_authorized_operations`",
        ),
        (
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            {"group_ids": [1]},
            "Expected `str | null`, got `int` - at `$.group_ids[0]`",
        ),
    ],
)
def test_invalid_bodies(api_key: ApiKey, body: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(api_key, body)
    assert raised.value.message == message
    assert raised.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("api_key", sorted(CONSUMER_GROUP_KEYS))
def test_a_body_that_is_not_a_map_is_invalid_request(api_key: ApiKey) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(api_key, [1])
    assert raised.value.message == "body: expected a map, got list"


def test_unknown_fields_are_ignored() -> None:
    body = {**GOOD_HEARTBEAT, "client_assignors": [{"name": "x"}], "member_type": 1}
    assert _parse(ApiKey.CONSUMER_GROUP_HEARTBEAT, body) == ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=1
    )


# Round trips through the wire for every message class, with values drawn from each
# field's own type and range (a uuid: 16 bytes).


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_request_wire_round_trip(cls: type[Message], data: st.DataObject) -> None:
    request = data.draw(message_strategy(cls))
    header = _header(cls.API_KEY)  # type: ignore[attr-defined]
    payload = encode_request(header, request)
    assert payload == encode_request(header, request.to_body())
    decoded_header, body = split_request(payload)
    assert decoded_header == header
    assert parse_request(decoded_header, body) == request


@pytest.mark.parametrize("cls", TOP_RESPONSE_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_response_wire_round_trip(cls: type[Message], data: st.DataObject) -> None:
    response = data.draw(message_strategy(cls))
    payload = encode_response(7, response)
    assert payload == encode_response(7, response.to_body())
    assert payload == encode_response_of(7, encode_body(response))
    correlation_id, body = split_response(payload)
    assert correlation_id == 7
    assert parse_response(cls.API_KEY, 0, body) == response  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_to_body_decodes_back_to_the_same_message(cls: type[Message], data: st.DataObject) -> None:
    message = data.draw(message_strategy(cls))
    body = message.to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]
    assert msgspec.msgpack.decode(packb(body), type=cls) == message
