"""Request and response envelopes: the msgpack value inside each frame.

A request payload is the array `[api_key, api_version, correlation_id, client_id, body]`
and a response payload is `[correlation_id, body]` (PROTOCOL.md, "Framing"). This module
checks the envelope and nothing more: a broken envelope leaves no correlation id to answer
and ends the connection (`EnvelopeError`), whereas a body the server cannot use is answered
(INVALID_REQUEST, connection kept), which is `messages`' business.

`split_request` and `split_response` are the hot paths. One msgspec pass checks the header
and walks over the body without building it: the body comes back as `msgspec.Raw`, a view
of its encoded bytes, that `messages` decodes straight into its message type. The
walk still checks the body's structure, so invalid msgpack, a truncated value, bytes after
the value, a declared length longer than the data or nesting too deep is an `EnvelopeError`
wherever it is. A declared length is only trusted once the bytes behind it have arrived,
so a hostile length cannot make us allocate more than the payload holds.

`decode_request` and `decode_response` return the body as plain values, decoded with the
strict settings of `_msgpack` (no ext types, str or bin map keys only); they are
for tools and tests that want to look at a body rather than validate it.

Every encoder here goes through one module-level msgspec `Encoder`: str as str, bytes as
bin, a message (a msgspec Struct) as a map of its fields in declaration order, ints in
their smallest form, the same bytes msgpack's own `Packer(use_bin_type=True)` writes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Annotated, Final, NamedTuple, TypeAlias, cast

import msgspec

from coordinator_protocol import _msgpack
from coordinator_protocol.errors import ProtocolError

__all__ = [
    "EnvelopeError",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
    "encode_response_of",
    "response_frame_of",
    "split_request",
    "split_response",
]

_INT16_MIN: Final = -(2**15)
_INT16_MAX: Final = 2**15 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_Int16: TypeAlias = Annotated[int, msgspec.Meta(ge=_INT16_MIN, le=_INT16_MAX)]
_Int32: TypeAlias = Annotated[int, msgspec.Meta(ge=_INT32_MIN, le=_INT32_MAX)]

# msgspec raises DecodeError for malformed msgpack, UnicodeDecodeError for a str that is not
# UTF-8 and RecursionError for nesting deeper than the interpreter's recursion limit.
MSGPACK_ERRORS: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

_REQUEST: Final = msgspec.msgpack.Decoder(tuple[_Int16, _Int16, _Int32, str | None, msgspec.Raw])
# The slow path, for naming what is wrong with a header the fast path refused.
_LOOSE_REQUEST: Final = msgspec.msgpack.Decoder(tuple[object, object, object, object, msgspec.Raw])
_RESPONSE: Final = msgspec.msgpack.Decoder(tuple[_Int32, msgspec.Raw])
_LOOSE_RESPONSE: Final = msgspec.msgpack.Decoder(tuple[object, msgspec.Raw])
_ENCODER: Final = msgspec.msgpack.Encoder()
# A frame's length prefix (coordinator_protocol.framing's): 4 bytes, big-endian, unsigned.
_FRAME_LENGTH: Final = struct.Struct(">I")

Body: TypeAlias = Mapping[str, object] | msgspec.Struct
"""A body to encode: a map, or a message (every field, in declaration order)."""


class EnvelopeError(ProtocolError):
    """A payload that is not valid msgpack or whose envelope has the wrong shape."""


class RequestHeader(NamedTuple):
    """The four values before a request's body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


# What RequestHeader(...) does, minus the Python-level __new__ a NamedTuple adds: about a
# fifth of a heartbeat's envelope cost.
_new_tuple: Final = tuple.__new__


def _invalid_msgpack(error: Exception) -> EnvelopeError:
    return EnvelopeError(f"invalid msgpack: {str(error) or type(error).__name__}")


def _is_int_in(value: object, low: int, high: int) -> bool:
    # type() rather than isinstance(): bool (an int subclass) must not pass as a number.
    return type(value) is int and low <= value <= high


def _header_problem(payload: bytes) -> EnvelopeError:
    """What is wrong with a request the fast path refused, in the words of the contract."""
    try:
        api_key, api_version, correlation_id, client_id, _ = _LOOSE_REQUEST.decode(payload)
    except msgspec.ValidationError:
        return EnvelopeError("a request must be a 5-element array")
    except MSGPACK_ERRORS as e:
        return _invalid_msgpack(e)
    if not _is_int_in(api_key, _INT16_MIN, _INT16_MAX):
        return EnvelopeError("api_key must be an int16")
    if not _is_int_in(api_version, _INT16_MIN, _INT16_MAX):
        return EnvelopeError("api_version must be an int16")
    if not _is_int_in(correlation_id, _INT32_MIN, _INT32_MAX):
        return EnvelopeError("correlation_id must be an int32")
    if client_id is not None and type(client_id) is not str:
        return EnvelopeError("client_id must be a str or nil")
    return EnvelopeError("a request header of the wrong shape")


def split_request(payload: bytes) -> tuple[RequestHeader, msgspec.Raw]:
    """Split a request payload into its header and its still-encoded body.

    Returns:
        The header and the body's msgpack bytes (any msgpack value, not only a map), for
        `messages.parse_request` to decode and judge.

    Raises:
        EnvelopeError: invalid msgpack anywhere in the payload, bytes after the value, or a
            header of the wrong shape (not a 5-element array; api_key or api_version not an
            int16; correlation_id not an int32; client_id neither str nor nil).
    """
    try:
        api_key, api_version, correlation_id, client_id, body = _REQUEST.decode(payload)
    except msgspec.ValidationError:
        raise _header_problem(payload) from None
    except MSGPACK_ERRORS as e:
        raise _invalid_msgpack(e) from e
    return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, client_id)), body


def _response_problem(payload: bytes) -> EnvelopeError:
    """What is wrong with a response the fast path refused."""
    try:
        _LOOSE_RESPONSE.decode(payload)
    except msgspec.ValidationError:
        return EnvelopeError("a response must be a 2-element array")
    except MSGPACK_ERRORS as e:
        return _invalid_msgpack(e)
    return EnvelopeError("correlation_id must be an int32")


def split_response(payload: bytes) -> tuple[int, msgspec.Raw]:
    """Split a response payload into its correlation id and its still-encoded body (a map),
    for `messages.parse_response`.

    Raises:
        EnvelopeError: invalid msgpack anywhere in the payload, bytes after the value, not
            a 2-element array, correlation_id not an int32, or a body that is not a map.
    """
    try:
        correlation_id, body = _RESPONSE.decode(payload)
    except msgspec.ValidationError:
        raise _response_problem(payload) from None
    except MSGPACK_ERRORS as e:
        raise _invalid_msgpack(e) from e
    if _msgpack.kind_of(body) != "dict":
        raise EnvelopeError("a response body must be a map")
    return correlation_id, body


def _plain_value(encoded: bytes) -> object:
    try:
        return _msgpack.unpack(bytes(encoded))
    except ValueError as e:
        raise _invalid_msgpack(e) from e


def decode_request(payload: bytes) -> tuple[RequestHeader, object]:
    """`split_request`, with the body decoded to plain values (dict, list, str, bytes...).

    Raises:
        EnvelopeError: what `split_request` raises, and a body holding an ext type, a str
            that is not UTF-8 or a map key that is neither str nor bin.
    """
    header, body = split_request(payload)
    return header, _plain_value(body)


def decode_response(payload: bytes) -> tuple[int, dict[str, object]]:
    """`split_response`, with the body decoded to plain values.

    Raises:
        EnvelopeError: what `split_response` raises, and a body holding an ext type, a str
            that is not UTF-8 or a map key that is neither str nor bin.
    """
    correlation_id, body = split_response(payload)
    return correlation_id, cast("dict[str, object]", _plain_value(body))


def encode_request(header: RequestHeader, body: Body) -> bytes:
    """The payload (without the frame length) of a request."""
    return _ENCODER.encode(
        (header.api_key, header.api_version, header.correlation_id, header.client_id, body)
    )


def encode_response(correlation_id: int, body: Body) -> bytes:
    """The payload (without the frame length) of a response."""
    return _ENCODER.encode((correlation_id, body))


def encode_body(body: Body) -> bytes:
    """A response body alone, for `encode_response_of`: a body the server sends again and
    again (the same heartbeat answer) is encoded once."""
    return _ENCODER.encode(body)


def response_frame_of(correlation_id: int, encoded_body: bytes) -> bytes:
    """`encode_frame(encode_response_of(correlation_id, encoded_body))` in one step: the
    server writes one per request, and this spares the payload in between."""
    correlation = _ENCODER.encode(correlation_id)
    return b"".join(
        (
            _FRAME_LENGTH.pack(1 + len(correlation) + len(encoded_body)),
            b"\x92",
            correlation,
            encoded_body,
        )
    )


def encode_response_of(correlation_id: int, encoded_body: bytes) -> bytes:
    """`encode_response(correlation_id, body)` for a body `encode_body` encoded already:
    the same bytes (a msgpack array of two is 0x92 and the two values)."""
    return b"\x92" + _ENCODER.encode(correlation_id) + encoded_body
