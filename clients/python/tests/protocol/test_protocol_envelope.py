"""Request and response envelopes: golden bytes, round trips and every malformed shape."""

from __future__ import annotations

import contextlib
import tracemalloc

import msgpack
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_protocol.envelope import (
    EnvelopeError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    encode_response_of,
    response_frame_of,
    split_request,
    split_response,
)
from coordinator_protocol.errors import ErrorCode, ProtocolError
from coordinator_protocol.framing import encode_frame

GOLDEN_REQUEST = (
    b"\x95"  # fixarray of 5
    b"\x0b"  # api_key 11 (JoinGroup), positive fixint
    b"\x00"  # api_version 0
    b"\x07"  # correlation_id 7
    b"\xa3app"  # client_id: fixstr of 3
    b"\x82"  # body: fixmap of 2
    b"\xa8group_id"  # key: fixstr of 8
    b"\xa1g"  # value: fixstr of 1
    b"\xa8metadata"  # key: fixstr of 8
    b"\xc4\x02\x01\x02"  # value: bin 8 of length 2
)


def test_encode_request_golden() -> None:
    header = RequestHeader(api_key=11, api_version=0, correlation_id=7, client_id="app")
    body = {"group_id": "g", "metadata": b"\x01\x02"}
    assert encode_request(header, body) == GOLDEN_REQUEST


def test_decode_request_golden() -> None:
    header, body = decode_request(GOLDEN_REQUEST)
    assert header == RequestHeader(11, 0, 7, "app")
    assert body == {"group_id": "g", "metadata": b"\x01\x02"}
    assert isinstance(body, dict)
    assert type(body["metadata"]) is bytes


def test_split_request_golden() -> None:
    header, body = split_request(GOLDEN_REQUEST)
    assert header == RequestHeader(11, 0, 7, "app")
    assert type(body) is msgspec.Raw
    # The body's own bytes, not decoded: from the fixmap of 2 to the end.
    assert bytes(body) == GOLDEN_REQUEST[GOLDEN_REQUEST.index(b"\x82") :]


def test_encode_request_golden_wide_ints_and_nil_client() -> None:
    header = RequestHeader(api_key=47, api_version=0, correlation_id=-1, client_id=None)
    expected = (
        b"\x95"  # fixarray of 5
        b"\x2f"  # api_key 47 (OffsetDelete)
        b"\x00"  # api_version 0
        b"\xff"  # correlation_id -1, negative fixint
        b"\xc0"  # client_id nil
        b"\x80"  # body: empty fixmap
    )
    assert encode_request(header, {}) == expected
    header = RequestHeader(api_key=18, api_version=0, correlation_id=2**31 - 1, client_id="")
    expected = (
        b"\x95"  # fixarray of 5
        b"\x12"  # api_key 18 (ApiVersions)
        b"\x00"  # api_version 0
        b"\xce\x7f\xff\xff\xff"  # correlation_id 2147483647: uint 32
        b"\xa0"  # client_id "": fixstr of 0
        b"\x80"  # body: empty fixmap
    )
    assert encode_request(header, {}) == expected


GOLDEN_RESPONSE = (
    b"\x92"  # fixarray of 2
    b"\xcd\x01\x00"  # correlation_id 256: uint 16
    b"\x82"  # body: fixmap of 2
    b"\xaaerror_code"  # key: fixstr of 10
    b"\x10"  # value: 16 (NOT_COORDINATOR)
    b"\xaderror_message"  # key: fixstr of 13
    b"\xc0"  # value: nil
)


def test_encode_response_golden() -> None:
    body = {"error_code": ErrorCode.NOT_COORDINATOR, "error_message": None}
    assert encode_response(256, body) == GOLDEN_RESPONSE


def test_decode_response_golden() -> None:
    assert decode_response(GOLDEN_RESPONSE) == (256, {"error_code": 16, "error_message": None})


def test_split_response_golden() -> None:
    correlation_id, body = split_response(GOLDEN_RESPONSE)
    assert correlation_id == 256
    assert bytes(body) == GOLDEN_RESPONSE[4:]


def test_encode_body_then_the_correlation_id_is_the_whole_response() -> None:
    body = {"error_code": ErrorCode.NOT_COORDINATOR, "error_message": None}
    assert encode_response_of(256, encode_body(body)) == GOLDEN_RESPONSE


def test_str_goes_out_as_str_and_bytes_as_bin() -> None:
    payload = encode_response(1, {"s": "é", "b": b"\xc3\xa9"})
    assert payload == (
        b"\x92"  # fixarray of 2
        b"\x01"  # correlation_id 1
        b"\x82"  # fixmap of 2
        b"\xa1s"  # key "s"
        b"\xa2\xc3\xa9"  # fixstr of 2 bytes: UTF-8 of "é"
        b"\xa1b"  # key "b"
        b"\xc4\x02\xc3\xa9"  # bin 8 of length 2
    )


def test_body_is_returned_unvalidated() -> None:
    for body in ([1, 2], "text", None, 5, {"anything": [1, {"x": b""}]}):
        payload = msgpack.packb([12, 0, 1, None, body])
        assert decode_request(payload) == (RequestHeader(12, 0, 1, None), body)


def test_header_extremes_are_accepted() -> None:
    payload = msgpack.packb([-(2**15), 2**15 - 1, -(2**31), "c", {}])
    assert decode_request(payload)[0] == RequestHeader(-(2**15), 2**15 - 1, -(2**31), "c")


def _packed_ext(code: int, data: bytes) -> bytes:
    return bytes(msgpack.packb(msgpack.ExtType(code, data)))


# Payloads whose envelope is broken: no correlation id can be trusted, so the connection
# ends. The message is what the server logs.
BROKEN_ENVELOPES = [
    (b"", "invalid msgpack: Input data was truncated"),
    (b"\xc1", "invalid msgpack: MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)"),
    (b"\x95\x0b\x00\x07", "invalid msgpack: Input data was truncated"),
    (
        msgpack.packb([11, 0, 7, None, {}]) + b"\x00",
        "invalid msgpack: MessagePack data is malformed: trailing characters (byte 6)",
    ),
    (
        msgpack.packb([11, 0, 7, None, {}]) * 2,
        "invalid msgpack: MessagePack data is malformed: trailing characters (byte 6)",
    ),
    (msgpack.packb({"api_key": 11}), "a request must be a 5-element array"),
    (msgpack.packb([11, 0, 7, None]), "a request must be a 5-element array"),
    (msgpack.packb([11, 0, 7, None, {}, 1]), "a request must be a 5-element array"),
    (msgpack.packb("request"), "a request must be a 5-element array"),
    (msgpack.packb(["11", 0, 7, None, {}]), "api_key must be an int16"),
    (msgpack.packb([True, 0, 7, None, {}]), "api_key must be an int16"),
    (msgpack.packb([11.0, 0, 7, None, {}]), "api_key must be an int16"),
    (msgpack.packb([2**15, 0, 7, None, {}]), "api_key must be an int16"),
    (msgpack.packb([-(2**15) - 1, 0, 7, None, {}]), "api_key must be an int16"),
    (b"\x95" + _packed_ext(5, b"x") + b"\x00\x07\xc0\x80", "api_key must be an int16"),
    (msgpack.packb([11, None, 7, None, {}]), "api_version must be an int16"),
    (msgpack.packb([11, 2**15, 7, None, {}]), "api_version must be an int16"),
    (msgpack.packb([11, False, 7, None, {}]), "api_version must be an int16"),
    (msgpack.packb([11, 0, 2**31, None, {}]), "correlation_id must be an int32"),
    (msgpack.packb([11, 0, -(2**31) - 1, None, {}]), "correlation_id must be an int32"),
    (msgpack.packb([11, 0, "7", None, {}]), "correlation_id must be an int32"),
    (msgpack.packb([11, 0, True, None, {}]), "correlation_id must be an int32"),
    (msgpack.packb([11, 0, 7, 5, {}]), "client_id must be a str or nil"),
    (msgpack.packb([11, 0, 7, b"app", {}]), "client_id must be a str or nil"),
    (msgpack.packb([11, 0, 7, ["app"], {}]), "client_id must be a str or nil"),
    (b"\x95\x0b\x00\x07" + _packed_ext(5, b"x") + b"\x80", "client_id must be a str or nil"),
    (
        b"\x95\x0b\x00\x07\xa2\xff\xfe\x80",
        "invalid msgpack: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
    ),
    # The body is not decoded here, but it is walked: every problem of structure in it is
    # found, wherever it is.
    (
        b"\x95\x0b\x00\x07\xc0" + b"\x91" * 5000 + b"\xc0",
        "invalid msgpack: maximum recursion depth exceeded while deserializing an object",
    ),
    (b"\x95\x0b\x00\x07\xc0\xdd\xff\xff\xff\xff", "invalid msgpack: Input data was truncated"),
    (b"\x95\x0b\x00\x07\xc0\xc6\xff\xff\xff\xff", "invalid msgpack: Input data was truncated"),
    (b"\x95\x0b\x00\x07\xc0\xdf\xff\xff\xff\xff", "invalid msgpack: Input data was truncated"),
    (b"\x95\x0b\x00\x07\xc0\xdb\xff\xff\xff\xff", "invalid msgpack: Input data was truncated"),
    (
        b"\x95\x0b\x00\x07\xc0\x81\xa1x\xc1",
        "invalid msgpack: MessagePack data is malformed: invalid opcode '\\xc1' (byte 8)",
    ),
]

# Valid msgpack in a body that the contract has no use for. `split_request` leaves them
# to the body's validation (`coordinator_protocol.messages.parse_request`: an answer, not a closed
# connection; ignored inside an unknown field); `decode_request`, which builds plain
# values, refuses them.
BODY_ODDITIES = [
    (b"\x95\x0b\x00\x07\xc0" + _packed_ext(5, b"x"), "ext type as the body"),
    (b"\x95\x0b\x00\x07\xc0" + _packed_ext(5, b""), "empty ext type"),
    (b"\x95\x0b\x00\x07\xc0\xd6\xff\x00\x00\x00\x01", "msgpack timestamp"),
    (b"\x95\x0b\x00\x07\xc0\x81\xa1x" + _packed_ext(5, b"x"), "ext type in a field"),
    (b"\x95\x0b\x00\x07\xc0\x81\x91\x01\x01", "map key that is an array"),
    (b"\x95\x0b\x00\x07\xc0\x81\xa1x\xa2\xff\xfe", "str not UTF-8 in the body"),
]


@pytest.mark.parametrize(("payload", "message"), BROKEN_ENVELOPES)
def test_split_request_rejects(payload: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError) as raised:
        split_request(payload)
    assert str(raised.value) == message


@pytest.mark.parametrize("payload", [payload for payload, _ in BROKEN_ENVELOPES + BODY_ODDITIES])
def test_decode_request_rejects(payload: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode_request(payload)


@pytest.mark.parametrize(("payload", "problem"), BODY_ODDITIES)
def test_split_request_leaves_the_body_to_validation(payload: bytes, problem: str) -> None:
    header, body = split_request(payload)
    assert header == RequestHeader(11, 0, 7, None)
    assert bytes(body) == payload[5:]


@pytest.mark.parametrize(
    "body",
    [
        b"\xdd\xff\xff\xff\xff",  # array 32 of 2**32 - 1 items
        b"\xdf\xff\xff\xff\xff",  # map 32 of 2**32 - 1 pairs
        b"\xc6\xff\xff\xff\xff",  # bin 32 of 4 GiB
        b"\xdb\xff\xff\xff\xff",  # str 32 of 4 GiB
        b"\x81\xa1x\xdd\x00\xff\xff\xff" + b"\xc0" * 64,  # 16M items in a field, 64 sent
        b"\x91" * 100 + b"\xdc\xff\xff" * 200,  # a length at every level
    ],
)
def test_a_declared_length_allocates_nothing_before_its_bytes_arrive(body: bytes) -> None:
    payload = b"\x95\x0b\x00\x07\xc0" + body
    tracemalloc.start()
    try:
        with pytest.raises(EnvelopeError):
            split_request(payload)
        with pytest.raises(EnvelopeError):
            decode_request(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "invalid msgpack: Input data was truncated"),
        (
            b"\xc1",
            "invalid msgpack: MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)",
        ),
        (
            msgpack.packb([1, {}]) + b"\x00",
            "invalid msgpack: MessagePack data is malformed: trailing characters (byte 3)",
        ),
        (b"\x92\x01\xdd\xff\xff\xff\xff", "invalid msgpack: Input data was truncated"),
        (msgpack.packb({"correlation_id": 1}), "a response must be a 2-element array"),
        (msgpack.packb([1]), "a response must be a 2-element array"),
        (msgpack.packb([1, {}, 2]), "a response must be a 2-element array"),
        (msgpack.packb(["1", {}]), "correlation_id must be an int32"),
        (msgpack.packb([True, {}]), "correlation_id must be an int32"),
        (msgpack.packb([2**31, {}]), "correlation_id must be an int32"),
        (msgpack.packb([1, [1, 2]]), "a response body must be a map"),
        (msgpack.packb([1, None]), "a response body must be a map"),
        (b"\x92\x01" + _packed_ext(5, b"x"), "a response body must be a map"),
        (b"\x92\x80\x80", "correlation_id must be an int32"),
        (b"\x92\x80", "invalid msgpack: Input data was truncated"),
    ],
)
def test_split_response_rejects(payload: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError) as raised:
        split_response(payload)
    assert str(raised.value) == message
    with pytest.raises(EnvelopeError):
        decode_response(payload)


def test_decode_response_refuses_what_split_response_leaves_to_validation() -> None:
    payload = b"\x92\x01\x81\xa1x" + _packed_ext(5, b"x")
    assert bytes(split_response(payload)[1]) == payload[2:]
    with pytest.raises(EnvelopeError):
        decode_response(payload)


def test_envelope_error_is_a_protocol_error() -> None:
    assert issubclass(EnvelopeError, ProtocolError)


def test_encoder_recovers_after_an_unencodable_body() -> None:
    with pytest.raises(TypeError):
        encode_response(1, {"bad": object()})
    # A failed encode must not leave half a value in the shared encoder.
    assert encode_response(1, {}) == b"\x92\x01\x80"


def _size(value: object) -> object:
    return len(value) if isinstance(value, str | bytes | list | dict) else value


@pytest.mark.parametrize(
    "value",
    [
        *(0, 127, 128, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**64 - 1),
        *(-1, -32, -33, -128, -129, -(2**15), -(2**15) - 1, -(2**31), -(2**31) - 1, -(2**63)),
        *("", "a" * 31, "a" * 32, "a" * 255, "a" * 256, "a" * 2**16),
        *(b"", b"a" * 255, b"a" * 256, b"a" * 2**16),
        *([0] * 15, [0] * 16, [0] * 2**16),
        *({str(i): i for i in range(n)} for n in (15, 16, 2**16)),
        *(None, True, False, 1.5),
    ],
    ids=lambda value: f"{type(value).__name__}-{_size(value)}",
)
def test_encoding_is_msgpacks_own_at_every_size_boundary(value: object) -> None:
    assert encode_body(value) == msgpack.packb(value, use_bin_type=True)  # type: ignore[arg-type]


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
bodies = st.dictionaries(st.text(max_size=12), msgpack_values, max_size=6)
headers = st.builds(
    RequestHeader,
    api_key=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    api_version=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    correlation_id=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    client_id=st.none() | st.text(max_size=20),
)


@given(header=headers, body=bodies)
def test_request_round_trip(header: RequestHeader, body: dict[str, object]) -> None:
    payload = encode_request(header, body)
    assert payload == msgpack.packb([*header, body], use_bin_type=True)
    assert decode_request(payload) == (header, body)
    split_header, raw = split_request(payload)
    assert split_header == header
    assert bytes(raw) == encode_body(body)


@given(correlation_id=st.integers(min_value=-(2**31), max_value=2**31 - 1), body=bodies)
def test_response_round_trip(correlation_id: int, body: dict[str, object]) -> None:
    payload = encode_response(correlation_id, body)
    assert payload == msgpack.packb([correlation_id, body], use_bin_type=True)
    assert payload == encode_response_of(correlation_id, encode_body(body))
    assert response_frame_of(correlation_id, encode_body(body)) == encode_frame(payload)
    assert decode_response(payload) == (correlation_id, body)
    assert split_response(payload) == (correlation_id, msgspec.Raw(encode_body(body)))


@given(payload=st.binary(max_size=64))
def test_garbage_decodes_or_raises_envelope_error(payload: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        decode_request(payload)
    with contextlib.suppress(EnvelopeError):
        split_request(payload)
    with contextlib.suppress(EnvelopeError):
        decode_response(payload)
    with contextlib.suppress(EnvelopeError):
        split_response(payload)
