"""Request and response envelopes: the msgpack value inside each frame.

A request payload is the array `[api_key, api_version, correlation_id, client_id, body]`
and a response payload is `[correlation_id, body]` (PROTOCOL.md, "Framing"). This module
checks the envelope and nothing more: a request's body comes back unvalidated, because a
body the server cannot use is answered (INVALID_REQUEST, connection kept) whereas a broken
envelope leaves no correlation id to answer and ends the connection (`EnvelopeError`).

Decoding is strict and encoding cheap; `protocol._msgpack` says how.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple, cast

from protocol import _msgpack
from protocol.errors import ProtocolError

__all__ = [
    "EnvelopeError",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
    "encode_response_of",
]

_INT16_MIN: Final = -(2**15)
_INT16_MAX: Final = 2**15 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1


class EnvelopeError(ProtocolError):
    """A payload that is not valid msgpack or whose envelope has the wrong shape."""


class RequestHeader(NamedTuple):
    """The four values before a request's body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _unpack(payload: bytes) -> object:
    try:
        return _msgpack.unpack(payload)
    except ValueError as e:
        raise EnvelopeError(f"invalid msgpack: {str(e) or type(e).__name__}") from e


def _is_int_in(value: object, low: int, high: int) -> bool:
    # type() rather than isinstance(): msgpack never yields int subclasses, and bool (an
    # int subclass) must not pass as a number.
    return type(value) is int and low <= value <= high


def decode_request(payload: bytes) -> tuple[RequestHeader, object]:
    """Split a request payload into its header and its (unvalidated) body.

    Returns:
        The header and the body exactly as msgpack decoded it; it may be any msgpack
        value, not only a map, and is for `protocol.messages.parse_request` to judge.

    Raises:
        EnvelopeError: invalid msgpack, bytes after the value, or a header of the wrong
            shape (not a 5-element array; api_key or api_version not an int16;
            correlation_id not an int32; client_id neither str nor nil).
    """
    value = _unpack(payload)
    if type(value) is not list or len(value) != 5:
        raise EnvelopeError("a request must be a 5-element array")
    api_key, api_version, correlation_id, client_id, body = value
    # The well-formed header, checked inline (once per request); the checks below name the
    # field that is wrong.
    if (
        type(api_key) is int
        and type(api_version) is int
        and type(correlation_id) is int
        and _INT16_MIN <= api_key <= _INT16_MAX
        and _INT16_MIN <= api_version <= _INT16_MAX
        and _INT32_MIN <= correlation_id <= _INT32_MAX
        and (client_id is None or type(client_id) is str)
    ):
        return RequestHeader(api_key, api_version, correlation_id, client_id), body
    if not _is_int_in(api_key, _INT16_MIN, _INT16_MAX):
        raise EnvelopeError("api_key must be an int16")
    if not _is_int_in(api_version, _INT16_MIN, _INT16_MAX):
        raise EnvelopeError("api_version must be an int16")
    if not _is_int_in(correlation_id, _INT32_MIN, _INT32_MAX):
        raise EnvelopeError("correlation_id must be an int32")
    if client_id is not None and type(client_id) is not str:
        raise EnvelopeError("client_id must be a str or nil")
    return RequestHeader(api_key, api_version, correlation_id, client_id), body


def encode_request(header: RequestHeader, body: Mapping[str, object]) -> bytes:
    """The payload (without the frame length) of a request."""
    payload: bytes = _msgpack.packer.pack(
        [header.api_key, header.api_version, header.correlation_id, header.client_id, body]
    )
    return payload


def encode_response(correlation_id: int, body: Mapping[str, object]) -> bytes:
    """The payload (without the frame length) of a response."""
    payload: bytes = _msgpack.packer.pack([correlation_id, body])
    return payload


def encode_body(body: Mapping[str, object]) -> bytes:
    """A response body alone, for `encode_response_of`: a body the server sends again and
    again (the same heartbeat answer) is encoded once."""
    data: bytes = _msgpack.packer.pack(body)
    return data


def encode_response_of(correlation_id: int, encoded_body: bytes) -> bytes:
    """`encode_response(correlation_id, body)` for a body `encode_body` encoded already:
    the same bytes (a msgpack array of two is 0x92 and the two values)."""
    correlation: bytes = _msgpack.packer.pack(correlation_id)
    return b"\x92" + correlation + encoded_body


def decode_response(payload: bytes) -> tuple[int, dict[str, object]]:
    """Split a response payload into its correlation id and body.

    Raises:
        EnvelopeError: invalid msgpack, bytes after the value, not a 2-element array,
            correlation_id not an int32, or a body that is not a map.
    """
    value = _unpack(payload)
    if type(value) is not list or len(value) != 2:
        raise EnvelopeError("a response must be a 2-element array")
    correlation_id, body = value
    if not _is_int_in(correlation_id, _INT32_MIN, _INT32_MAX):
        raise EnvelopeError("correlation_id must be an int32")
    if type(body) is not dict:
        raise EnvelopeError("a response body must be a map")
    return correlation_id, cast("dict[str, object]", body)
