"""The transaction APIs' messages: the contract's field lists, defaults, validation and wire
round trips (the same checks as the group APIs', in test_protocol_messages)."""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message_strategies import message_strategy

import coordinator_protocol
from coordinator_protocol import transactions
from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, ApiKey, api_name
from coordinator_protocol.envelope import (
    RequestHeader,
    encode_body,
    encode_request,
    encode_response,
    split_request,
    split_response,
)
from coordinator_protocol.errors import ErrorCode, InvalidRequestError, error_for_code
from coordinator_protocol.message_base import Message
from coordinator_protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    error_body,
    parse_request,
    parse_response,
)
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponsePartition,
    AddPartitionsToTxnResponseTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsV1Request,
    ListTransactionsV1Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestMarker,
    WriteTxnMarkersRequestTopic,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseMarker,
    WriteTxnMarkersResponsePartition,
    WriteTxnMarkersResponseTopic,
)

# The field lists of PROTOCOL.md's transaction table, item by item, plus `error_message`
# next to a top-level error_code. Order is the wire order (Kafka's schema order).
CONTRACT_FIELDS: dict[str, list[str]] = {
    "InitProducerIdRequest": [
        "transactional_id",
        "transaction_timeout_ms",
        "producer_id",
        "producer_epoch",
    ],
    "InitProducerIdResponse": ["error_code", "error_message", "producer_id", "producer_epoch"],
    "AddPartitionsToTxnRequest": ["transactional_id", "producer_id", "producer_epoch", "topics"],
    "AddPartitionsToTxnRequestTopic": ["name", "partitions"],
    "AddPartitionsToTxnResponse": ["error_code", "error_message", "results_by_topic"],
    "AddPartitionsToTxnResponseTopic": ["name", "results_by_partition"],
    "AddPartitionsToTxnResponsePartition": ["partition_index", "partition_error_code"],
    "AddOffsetsToTxnRequest": ["transactional_id", "producer_id", "producer_epoch", "group_id"],
    "AddOffsetsToTxnResponse": ["error_code", "error_message"],
    "EndTxnRequest": ["transactional_id", "producer_id", "producer_epoch", "committed"],
    "EndTxnResponse": ["error_code", "error_message", "producer_id", "producer_epoch"],
    "WriteTxnMarkersRequest": ["markers"],
    "WriteTxnMarkersRequestMarker": [
        "producer_id",
        "producer_epoch",
        "transaction_result",
        "topics",
        "coordinator_epoch",
        "transaction_version",
    ],
    "WriteTxnMarkersRequestTopic": ["name", "partition_indexes"],
    "WriteTxnMarkersResponse": ["markers"],
    "WriteTxnMarkersResponseMarker": ["producer_id", "topics"],
    "WriteTxnMarkersResponseTopic": ["name", "partitions"],
    "WriteTxnMarkersResponsePartition": ["partition_index", "error_code"],
    "TxnOffsetCommitRequest": [
        "transactional_id",
        "group_id",
        "producer_id",
        "producer_epoch",
        "generation_id_or_member_epoch",
        "member_id",
        "group_instance_id",
        "topics",
    ],
    "TxnOffsetCommitRequestTopic": ["name", "partitions"],
    "TxnOffsetCommitRequestPartition": [
        "partition_index",
        "committed_offset",
        "committed_leader_epoch",
        "committed_metadata",
    ],
    "TxnOffsetCommitResponse": ["topics"],
    "TxnOffsetCommitResponseTopic": ["name", "partitions"],
    "TxnOffsetCommitResponsePartition": ["partition_index", "error_code"],
    "DescribeTransactionsRequest": ["transactional_ids"],
    "DescribeTransactionsResponse": ["transaction_states"],
    "DescribeTransactionsResponseState": [
        "error_code",
        "transactional_id",
        "transaction_state",
        "transaction_timeout_ms",
        "transaction_start_time_ms",
        "producer_id",
        "producer_epoch",
        "topics",
    ],
    "DescribeTransactionsResponseTopic": ["topic", "partitions"],
    "DescribeTransactionsV1Request": ["transactional_ids"],
    "DescribeTransactionsV1Response": ["transaction_states"],
    "DescribeTransactionsV1ResponseState": [
        "error_code",
        "transactional_id",
        "transaction_state",
        "transaction_timeout_ms",
        "transaction_start_time_ms",
        "producer_id",
        "producer_epoch",
        "topics",
        "refused_markers",
    ],
    "DescribeTransactionsV1ResponseRefusedMarker": ["topic", "partition_index", "error_code"],
    "ListTransactionsRequest": [
        "state_filters",
        "producer_id_filters",
        "duration_filter",
        "transactional_id_pattern",
    ],
    "ListTransactionsResponse": [
        "error_code",
        "error_message",
        "unknown_state_filters",
        "transaction_states",
    ],
    "ListTransactionsResponseState": ["transactional_id", "producer_id", "transaction_state"],
    "ListTransactionsV1Request": [
        "state_filters",
        "producer_id_filters",
        "duration_filter",
        "transactional_id_pattern",
        "cursor",
    ],
    "ListTransactionsV1Response": [
        "error_code",
        "error_message",
        "unknown_state_filters",
        "transaction_states",
        "next_cursor",
    ],
}

MESSAGE_CLASSES: list[type[Message]] = [getattr(transactions, name) for name in CONTRACT_FIELDS]
RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if "Response" in cls.__name__]
REQUEST_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in REQUEST_TYPES.values()]
TOP_RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in RESPONSE_TYPES.values()]

TRANSACTION_KEYS = {
    ApiKey.INIT_PRODUCER_ID: "InitProducerId",
    ApiKey.ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
    ApiKey.ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    ApiKey.END_TXN: "EndTxn",
    ApiKey.WRITE_TXN_MARKERS: "WriteTxnMarkers",
    ApiKey.TXN_OFFSET_COMMIT: "TxnOffsetCommit",
    ApiKey.DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    ApiKey.LIST_TRANSACTIONS: "ListTransactions",
}


def test_every_message_class_is_in_the_contract_table_and_exported_by_the_package() -> None:
    exported = {
        name
        for name in transactions.__all__
        if isinstance(getattr(transactions, name), type)
        and issubclass(getattr(transactions, name), Message)
    }
    assert exported == set(CONTRACT_FIELDS)
    assert exported <= set(coordinator_protocol.__all__)
    for name in exported:
        assert getattr(coordinator_protocol, name) is getattr(transactions, name)


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
def test_fields_are_the_contract_fields(cls: type[Message]) -> None:
    assert list(cls.__struct_fields__) == CONTRACT_FIELDS[cls.__name__]


@pytest.mark.parametrize("cls", RESPONSE_CLASSES, ids=lambda cls: cls.__name__)
def test_responses_build_from_defaults_and_write_every_field(cls: type[Message]) -> None:
    body = cls().to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]


def test_the_transaction_apis_have_kafkas_keys_and_their_versions() -> None:
    newer = {ApiKey.DESCRIBE_TRANSACTIONS: 1, ApiKey.LIST_TRANSACTIONS: 1}
    for api_key, name in TRANSACTION_KEYS.items():
        assert api_name(api_key) == name
        assert SUPPORTED_VERSIONS[api_key] == (0, newer.get(api_key, 0))
        assert REQUEST_TYPES[(api_key, 0)].__name__ == f"{name}Request"
        assert RESPONSE_TYPES[(api_key, 0)].__name__ == f"{name}Response"
        for version in range(1, newer.get(api_key, 0) + 1):
            assert REQUEST_TYPES[(api_key, version)].__name__ == f"{name}V{version}Request"
            assert RESPONSE_TYPES[(api_key, version)].__name__ == f"{name}V{version}Response"
    assert {cls.API_KEY for cls in REQUEST_CLASSES} == set(TRANSACTION_KEYS)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("code", "name", "retriable"),
    [
        (47, "INVALID_PRODUCER_EPOCH", False),
        (48, "INVALID_TXN_STATE", False),
        (49, "INVALID_PRODUCER_ID_MAPPING", False),
        (50, "INVALID_TRANSACTION_TIMEOUT", False),
        (51, "CONCURRENT_TRANSACTIONS", True),
        (52, "TRANSACTION_COORDINATOR_FENCED", False),
        (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
        (55, "OPERATION_NOT_ATTEMPTED", False),
        (59, "UNKNOWN_PRODUCER_ID", False),
        (88, "UNSTABLE_OFFSET_COMMIT", True),
        (90, "PRODUCER_FENCED", False),
        (105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    ],
)
def test_the_transaction_error_codes_are_kafkas(code: int, name: str, retriable: bool) -> None:
    error = error_for_code(code)
    assert (error.code.name, error.code.value, error.retriable) == (name, code, retriable)


# Minimal bodies and what they parse to.


def _header(api_key: ApiKey, api_version: int = 0) -> RequestHeader:
    return RequestHeader(api_key, api_version, correlation_id=1, client_id="test")


def packb(value: object) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def _parse(api_key: ApiKey, body: object) -> Message:
    return parse_request(_header(api_key), packb(body))


def test_init_producer_id_minimal_is_a_new_producer() -> None:
    request = _parse(ApiKey.INIT_PRODUCER_ID, {"transaction_timeout_ms": 60_000})
    assert request == InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    resumed = _parse(
        ApiKey.INIT_PRODUCER_ID,
        {
            "transactional_id": "tx",
            "transaction_timeout_ms": 1,
            "producer_id": 2**48,
            "producer_epoch": 3,
        },
    )
    assert resumed == InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=1, producer_id=2**48, producer_epoch=3
    )


def test_init_producer_id_response_defaults_are_kafkas() -> None:
    assert InitProducerIdResponse().to_body() == {
        "error_code": 0,
        "error_message": None,
        "producer_id": -1,
        "producer_epoch": 0,
    }
    assert EndTxnResponse().to_body() == {
        "error_code": 0,
        "error_message": None,
        "producer_id": -1,
        "producer_epoch": -1,
    }


def test_add_partitions_to_txn_is_the_clients_form() -> None:
    body = {
        "transactional_id": "tx",
        "producer_id": 7,
        "producer_epoch": 0,
        "topics": [{"name": "orders", "partitions": [0, 3]}],
        # The brokers' batch form is not part of the contract: ignored as unknown.
        "transactions": [{"transactional_id": "other"}],
    }
    request = _parse(ApiKey.ADD_PARTITIONS_TO_TXN, body)
    assert request == AddPartitionsToTxnRequest(
        transactional_id="tx",
        producer_id=7,
        producer_epoch=0,
        topics=[AddPartitionsToTxnRequestTopic(name="orders", partitions=[0, 3])],
    )


def test_add_offsets_to_txn_lets_a_missing_group_id_through() -> None:
    body = {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 0}
    request = _parse(ApiKey.ADD_OFFSETS_TO_TXN, body)
    assert request == AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=7, producer_epoch=0, group_id=None
    )


def test_end_txn_minimal() -> None:
    body = {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 1, "committed": True}
    request = _parse(ApiKey.END_TXN, body)
    assert request == EndTxnRequest(
        transactional_id="tx", producer_id=7, producer_epoch=1, committed=True
    )


def test_write_txn_markers_minimal_and_defaults() -> None:
    body = {
        "markers": [
            {
                "producer_id": 7,
                "producer_epoch": 1,
                "transaction_result": False,
                "topics": [{"name": "log", "partition_indexes": [4]}],
                "coordinator_epoch": 12,
            }
        ]
    }
    request = _parse(ApiKey.WRITE_TXN_MARKERS, body)
    assert request == WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequestMarker(
                producer_id=7,
                producer_epoch=1,
                transaction_result=False,
                topics=[WriteTxnMarkersRequestTopic(name="log", partition_indexes=[4])],
                coordinator_epoch=12,
                transaction_version=0,
            )
        ]
    )


def test_txn_offset_commit_minimal_and_defaults() -> None:
    body = {
        "transactional_id": "tx",
        "group_id": "g",
        "producer_id": 7,
        "producer_epoch": 1,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42}]}],
    }
    request = _parse(ApiKey.TXN_OFFSET_COMMIT, body)
    assert isinstance(request, TxnOffsetCommitRequest)
    assert request.generation_id_or_member_epoch == -1
    assert request.member_id == ""
    assert request.group_instance_id is None
    partition = request.topics[0].partitions[0]
    assert (partition.committed_leader_epoch, partition.committed_metadata) == (-1, None)
    for variant in ({**body, "group_id": None}, {k: v for k, v in body.items() if k != "group_id"}):
        parsed = _parse(ApiKey.TXN_OFFSET_COMMIT, variant)
        assert parsed.group_id is None  # type: ignore[attr-defined]


def test_describe_and_list_transactions_minimal() -> None:
    request = _parse(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["a", ""]})
    assert request == DescribeTransactionsRequest(transactional_ids=["a", ""])
    assert _parse(ApiKey.LIST_TRANSACTIONS, {}) == ListTransactionsRequest(
        state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=None
    )


def test_list_transactions_version_1_adds_a_cursor_and_the_next_one() -> None:
    version_1 = _header(ApiKey.LIST_TRANSACTIONS, 1)
    assert parse_request(version_1, packb({})) == ListTransactionsV1Request(cursor=None)
    assert parse_request(version_1, packb({"cursor": "tx-7", "state_filters": ["Ongoing"]})) == (
        ListTransactionsV1Request(cursor="tx-7", state_filters=["Ongoing"])
    )
    with pytest.raises(InvalidRequestError):
        parse_request(version_1, packb({"cursor": 7}))
    answer = parse_response(ApiKey.LIST_TRANSACTIONS, 1, packb({"next_cursor": "tx-9"}))
    assert answer == ListTransactionsV1Response(next_cursor="tx-9")
    # Version 0 knows no cursor: an unknown field, ignored.
    assert parse_request(_header(ApiKey.LIST_TRANSACTIONS), packb({"cursor": "tx-7"})) == (
        ListTransactionsRequest()
    )


GOOD_END: dict[str, Any] = {
    "transactional_id": "tx",
    "producer_id": 7,
    "producer_epoch": 1,
    "committed": True,
}
GOOD_MARKER: dict[str, Any] = {
    "producer_id": 7,
    "producer_epoch": 1,
    "transaction_result": True,
    "topics": [{"name": "log", "partition_indexes": [0]}],
    "coordinator_epoch": 3,
}
GOOD_TXN_COMMIT: dict[str, Any] = {
    "transactional_id": "tx",
    "group_id": "g",
    "producer_id": 7,
    "producer_epoch": 1,
    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
}


@pytest.mark.parametrize(
    ("api_key", "body", "message"),
    [
        (
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": "tx"},
            "Object missing required field `transaction_timeout_ms`",
        ),
        (
            ApiKey.INIT_PRODUCER_ID,
            {"transaction_timeout_ms": 2**31},
            "Expected `int` <= 2147483647 - at `$.transaction_timeout_ms`",
        ),
        (
            ApiKey.INIT_PRODUCER_ID,
            {"transaction_timeout_ms": 1, "transactional_id": b"tx"},
            "Expected `str | null`, got `bytes` - at `$.transactional_id`",
        ),
        (
            ApiKey.INIT_PRODUCER_ID,
            {"transaction_timeout_ms": 1, "producer_epoch": 2**15},
            "Expected `int` <= 32767 - at `$.producer_epoch`",
        ),
        (
            ApiKey.INIT_PRODUCER_ID,
            {"transaction_timeout_ms": 1, "producer_id": 2**63},
            "Expected `int` <= 9223372036854775807 - at `$.producer_id`",
        ),
        (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 0},
            "Object missing required field `topics`",
        ),
        (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {"producer_id": 7, "producer_epoch": 0, "topics": []},
            "Object missing required field `transactional_id`",
        ),
        (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {"transactional_id": None, "producer_id": 7, "producer_epoch": 0, "topics": []},
            "Expected `str`, got `None` - at `$.transactional_id`",
        ),
        (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "transactional_id": "tx",
                "producer_id": 7,
                "producer_epoch": 0,
                "topics": [{"name": "t", "partitions": ["0"]}],
            },
            "Expected `int`, got `str` - at `$.topics[0].partitions[0]`",
        ),
        (
            ApiKey.ADD_OFFSETS_TO_TXN,
            {"transactional_id": "tx", "producer_epoch": 0, "group_id": "g"},
            "Object missing required field `producer_id`",
        ),
        (
            ApiKey.ADD_OFFSETS_TO_TXN,
            {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 0, "group_id": 1},
            "Expected `str | null`, got `int` - at `$.group_id`",
        ),
        (
            ApiKey.END_TXN,
            {**GOOD_END, "committed": 1},
            "Expected `bool`, got `int` - at `$.committed`",
        ),
        (
            ApiKey.END_TXN,
            {k: v for k, v in GOOD_END.items() if k != "committed"},
            "Object missing required field `committed`",
        ),
        (
            ApiKey.END_TXN,
            {**GOOD_END, "producer_epoch": True},
            "Expected `int`, got `bool` - at `$.producer_epoch`",
        ),
        (
            ApiKey.WRITE_TXN_MARKERS,
            {},
            "Object missing required field `markers`",
        ),
        (
            ApiKey.WRITE_TXN_MARKERS,
            {"markers": [{k: v for k, v in GOOD_MARKER.items() if k != "coordinator_epoch"}]},
            "Object missing required field `coordinator_epoch` - at `$.markers[0]`",
        ),
        (
            ApiKey.WRITE_TXN_MARKERS,
            {"markers": [{**GOOD_MARKER, "transaction_version": 128}]},
            "Expected `int` <= 127 - at `$.markers[0].transaction_version`",
        ),
        (
            ApiKey.WRITE_TXN_MARKERS,
            {"markers": [{**GOOD_MARKER, "topics": [{"name": "log"}]}]},
            "Object missing required field `partition_indexes` - at `$.markers[0].topics[0]`",
        ),
        (
            ApiKey.TXN_OFFSET_COMMIT,
            {k: v for k, v in GOOD_TXN_COMMIT.items() if k != "producer_epoch"},
            "Object missing required field `producer_epoch`",
        ),
        (
            ApiKey.TXN_OFFSET_COMMIT,
            {**GOOD_TXN_COMMIT, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
            "Object missing required field `committed_offset` - at `$.topics[0].partitions[0]`",
        ),
        (
            ApiKey.TXN_OFFSET_COMMIT,
            {
                **GOOD_TXN_COMMIT,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 1, "committed_metadata": 1}
                        ],
                    }
                ],
            },
            "Expected `str | null`, got `int` - at `$.topics[0].partitions[0].committed_metadata`",
        ),
        (
            ApiKey.TXN_OFFSET_COMMIT,
            {**GOOD_TXN_COMMIT, "member_id": None},
            "Expected `str`, got `None` - at `$.member_id`",
        ),
        (
            ApiKey.DESCRIBE_TRANSACTIONS,
            {"transactional_ids": [None]},
            "Expected `str`, got `None` - at `$.transactional_ids[0]`",
        ),
        (
            ApiKey.DESCRIBE_TRANSACTIONS,
            {},
            "Object missing required field `transactional_ids`",
        ),
        (
            ApiKey.LIST_TRANSACTIONS,
            {"producer_id_filters": [2**63]},
            "Expected `int` <= 9223372036854775807 - at `$.producer_id_filters[0]`",
        ),
        (
            ApiKey.LIST_TRANSACTIONS,
            {"duration_filter": "1"},
            "Expected `int`, got `str` - at `$.duration_filter`",
        ),
        (
            ApiKey.LIST_TRANSACTIONS,
            {"state_filters": "Ongoing"},
            "Expected `array`, got `str` - at `$.state_filters`",
        ),
    ],
)
def test_invalid_bodies(api_key: ApiKey, body: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(api_key, body)
    assert raised.value.message == message
    assert raised.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("api_key", sorted(TRANSACTION_KEYS))
def test_a_body_that_is_not_a_map_is_invalid_request(api_key: ApiKey) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(api_key, [1])
    assert raised.value.message == "body: expected a map, got list"


# Responses


def test_reported_error_codes() -> None:
    assert AddPartitionsToTxnResponse().reported_error_code() == 0
    per_partition = AddPartitionsToTxnResponse(
        results_by_topic=[
            AddPartitionsToTxnResponseTopic(
                name="t",
                results_by_partition=[
                    AddPartitionsToTxnResponsePartition(
                        partition_index=0, partition_error_code=ErrorCode.CONCURRENT_TRANSACTIONS
                    )
                ],
            )
        ]
    )
    assert per_partition.reported_error_code() == 51
    top = per_partition.replace(error_code=ErrorCode.NOT_COORDINATOR)
    assert top.reported_error_code() == 16
    code = TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name="t", partitions=[TxnOffsetCommitResponsePartition(error_code=47)]
            )
        ]
    ).reported_error_code()
    assert (code, type(code)) == (47, int)
    assert TxnOffsetCommitResponse().reported_error_code() == 0
    markers = WriteTxnMarkersResponse(
        markers=[
            WriteTxnMarkersResponseMarker(
                producer_id=7,
                topics=[
                    WriteTxnMarkersResponseTopic(
                        name="log",
                        partitions=[WriteTxnMarkersResponsePartition(error_code=ErrorCode(6))],
                    )
                ],
            )
        ]
    )
    assert markers.reported_error_code() == 6
    assert WriteTxnMarkersResponse().reported_error_code() == 0


@pytest.mark.parametrize(
    "api_key",
    [ApiKey.WRITE_TXN_MARKERS, ApiKey.TXN_OFFSET_COMMIT, ApiKey.DESCRIBE_TRANSACTIONS],
)
def test_a_top_level_error_of_a_response_without_one_is_raised(api_key: ApiKey) -> None:
    # What a server answers to a request it cannot parse or does not serve.
    with pytest.raises(InvalidRequestError):
        parse_response(api_key, 0, packb(error_body(ErrorCode.INVALID_REQUEST, "bad")))


def test_a_top_level_error_of_a_response_with_one_is_kept() -> None:
    body = packb(error_body(ErrorCode.UNSUPPORTED_VERSION, "not served"))
    response = parse_response(ApiKey.END_TXN, 0, body)
    assert response == EndTxnResponse(error_code=35, error_message="not served")


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_request_wire_round_trip(cls: type[Message], data: st.DataObject) -> None:
    request = data.draw(message_strategy(cls))
    header = _header(cls.API_KEY, cls.API_VERSION)  # type: ignore[attr-defined]
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
    correlation_id, body = split_response(payload)
    assert correlation_id == 7
    assert parse_response(cls.API_KEY, cls.API_VERSION, body) == response  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_to_body_decodes_back_to_the_same_message(cls: type[Message], data: st.DataObject) -> None:
    message = data.draw(message_strategy(cls))
    body = message.to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]
    assert msgspec.msgpack.decode(packb(body), type=cls) == message
    assert msgspec.msgpack.decode(encode_body(message), type=cls) == message
