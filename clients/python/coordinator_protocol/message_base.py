"""What every message of the contract is built from: `Message`, the base of each request,
response and nested item, and the int and uuid types of Kafka's schemas with their ranges.

Apart from `messages` so that the modules holding the messages of one family of
APIs (`transactions`) build on it while `messages` keeps the one registry
of every API.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Self, TypeAlias, cast

import msgspec

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ProtocolError

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "NO_UUID",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "InvalidResponseError",
    "Message",
    "Uuid",
]

Int8: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**7), le=2**7 - 1)]
Int16: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**15), le=2**15 - 1)]
Int32: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
# Kafka's uuid (a topic id): 16 bytes, a msgpack bin (PROTOCOL.md, "Extending the contract").
Uuid: TypeAlias = Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]

NO_UUID: Final = bytes(16)
"""Kafka's zero uuid (`Uuid.ZERO_UUID`), the default of a uuid field."""
# Kafka's "authorized operations not requested" (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


class InvalidResponseError(ProtocolError):
    """A response body that does not match its API's response schema."""


class Message(msgspec.Struct, kw_only=True, gc=False):
    """A request or response body, or an item nested in one.

    Every subclass is `kw_only=True` (msgspec applies it per class), so fields are named
    at construction and a required field may follow one with a default.

    `gc=False` (inherited): the cyclic garbage collector does not track messages. They hold
    only scalars and lists of other messages, built top-down, so they cannot form a cycle,
    and a request decodes about 10% faster with fewer collections triggered. A field that
    could hold an arbitrary object would have to give this up.
    """

    # Set on top-level requests and responses only (nested items have no API key).
    API_KEY: ClassVar[ApiKey]
    # The api_version whose body this is: a changed body shape is a class of its own, of
    # the next version (`messages` registers each pair under its version).
    API_VERSION: ClassVar[int] = 0

    def to_body(self) -> dict[str, object]:
        """The wire map as plain values: every field present, None as nil, bytes as bytes,
        items as maps, error codes as plain ints."""
        return cast("dict[str, object]", msgspec.to_builtins(self, builtin_types=(bytes,)))

    def replace(self, **changes: object) -> Self:
        """A copy with `changes` applied; the message itself is left as it was."""
        return msgspec.structs.replace(self, **changes)

    def reported_error_code(self) -> int:
        """The error a response reports: its top-level error code, 0 for one without."""
        code = getattr(self, "error_code", 0)
        return code if type(code) is int else int(code)
