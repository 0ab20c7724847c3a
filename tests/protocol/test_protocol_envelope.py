"""Request and response envelopes: golden bytes, round trips and every malformed shape."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.envelope import (
    EnvelopeError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocol.errors import ErrorCode, ProtocolError

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


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", "empty payload"),
        (b"\xc1", "never-used msgpack byte"),
        (b"\x95\x0b\x00\x07", "truncated array"),
        (msgpack.packb([11, 0, 7, None, {}]) + b"\x00", "trailing byte"),
        (msgpack.packb([11, 0, 7, None, {}]) * 2, "two values"),
        (msgpack.packb({"api_key": 11}), "a map, not an array"),
        (msgpack.packb([11, 0, 7, None]), "4 elements"),
        (msgpack.packb([11, 0, 7, None, {}, 1]), "6 elements"),
        (msgpack.packb("request"), "a str"),
        (msgpack.packb(["11", 0, 7, None, {}]), "api_key str"),
        (msgpack.packb([True, 0, 7, None, {}]), "api_key bool"),
        (msgpack.packb([11.0, 0, 7, None, {}]), "api_key float"),
        (msgpack.packb([2**15, 0, 7, None, {}]), "api_key above int16"),
        (msgpack.packb([-(2**15) - 1, 0, 7, None, {}]), "api_key below int16"),
        (msgpack.packb([11, None, 7, None, {}]), "api_version nil"),
        (msgpack.packb([11, 2**15, 7, None, {}]), "api_version above int16"),
        (msgpack.packb([11, False, 7, None, {}]), "api_version bool"),
        (msgpack.packb([11, 0, 2**31, None, {}]), "correlation_id above int32"),
        (msgpack.packb([11, 0, -(2**31) - 1, None, {}]), "correlation_id below int32"),
        (msgpack.packb([11, 0, "7", None, {}]), "correlation_id str"),
        (msgpack.packb([11, 0, True, None, {}]), "correlation_id bool"),
        (msgpack.packb([11, 0, 7, 5, {}]), "client_id int"),
        (msgpack.packb([11, 0, 7, b"app", {}]), "client_id bin"),
        (msgpack.packb([11, 0, 7, ["app"], {}]), "client_id array"),
        (b"\x95\x0b\x00\x07\xc0" + _packed_ext(5, b"x"), "ext type in the body"),
        (b"\x95\x0b\x00\x07\xc0" + _packed_ext(5, b""), "empty ext type"),
        (b"\x95\x0b\x00\x07\xc0\xd6\xff\x00\x00\x00\x01", "msgpack timestamp"),
        (b"\x95\x0b\x00\x07\xa2\xff\xfe\x80", "client_id not UTF-8"),
        (b"\x95\x0b\x00\x07\xc0\x81\x91\x01\x01", "map key that is an array"),
        (b"\x95\x0b\x00\x07\xc0" + b"\x91" * 5000 + b"\xc0", "nesting too deep"),
        (b"\x95\x0b\x00\x07\xc0\xdd\xff\xff\xff\xff", "array longer than the payload"),
        (b"\x95\x0b\x00\x07\xc0\xc6\xff\xff\xff\xff", "bin longer than the payload"),
    ],
)
def test_decode_request_rejects(payload: bytes, problem: str) -> None:
    with pytest.raises(EnvelopeError):
        decode_request(payload)


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",
        msgpack.packb([1, {}]) + b"\x00",
        msgpack.packb({"correlation_id": 1}),
        msgpack.packb([1]),
        msgpack.packb([1, {}, 2]),
        msgpack.packb([1, [1, 2]]),
        msgpack.packb([1, None]),
        msgpack.packb(["1", {}]),
        msgpack.packb([True, {}]),
        msgpack.packb([2**31, {}]),
    ],
)
def test_decode_response_rejects(payload: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode_response(payload)


def test_envelope_error_is_a_protocol_error() -> None:
    assert issubclass(EnvelopeError, ProtocolError)


def test_encoder_recovers_after_an_unencodable_body() -> None:
    with pytest.raises(TypeError):
        encode_response(1, {"bad": object()})
    # A failed pack must not leave half a value in the shared packer.
    assert encode_response(1, {}) == b"\x92\x01\x80"


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
    assert decode_request(encode_request(header, body)) == (header, body)


@given(correlation_id=st.integers(min_value=-(2**31), max_value=2**31 - 1), body=bodies)
def test_response_round_trip(correlation_id: int, body: dict[str, object]) -> None:
    assert decode_response(encode_response(correlation_id, body)) == (correlation_id, body)


@given(payload=st.binary(max_size=64))
def test_garbage_decodes_or_raises_envelope_error(payload: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        decode_request(payload)
    with contextlib.suppress(EnvelopeError):
        decode_response(payload)
