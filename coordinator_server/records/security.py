"""The security partition's record types: an ACL (record type 7) and a SCRAM credential
(record type 8), Kafka's AccessControlEntryRecord and UserScramCredentialRecord.

Both live on log partition 0 only. An ACL record's key is the ACL itself (its seven fields,
Kafka's codes), so that an ACL is one key compaction keeps once and its tombstone deletes
it; its value is a marker with only a version, room for what a later version may add. A
SCRAM credential's key is (user, mechanism) and its value what the server checks a client
against (RFC 5802: salt, stored key, server key, iterations), never a password.

The key and value types and their msgpack fields; `coordinator_server.records` dispatches
to them like to its own types, and raises its RecordFormatError for what these reject
(ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

ACL_TYPE: Final = 7
SCRAM_CREDENTIAL_TYPE: Final = 8
ACL_VALUE_VERSION: Final = 0
SCRAM_CREDENTIAL_VALUE_VERSION: Final = 0

SECURITY_PARTITION: Final = 0
"""The log partition that holds every security record."""

# A key is a msgpack fixarray (header 0x90 | length) whose first element, the record type,
# is a positive fixint: its second byte.
_FIXARRAY_HEADERS: Final = range(0x90, 0xA0)
_SECURITY_TYPES: Final = frozenset({ACL_TYPE, SCRAM_CREDENTIAL_TYPE})


@dataclass(slots=True, unsafe_hash=True)
class AclKey:
    """An ACL as Kafka's codes state it (`authorizer.acls`: ResourceType, PatternType,
    AclOperation, AclPermissionType)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(slots=True, unsafe_hash=True)
class AclValue:
    """The ACL exists. No field yet: a later version appends them."""


@dataclass(slots=True, unsafe_hash=True)
class ScramCredentialKey:
    user: str
    # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    mechanism: int


@dataclass(slots=True, unsafe_hash=True)
class ScramCredentialValue:
    """What the server keeps of a SCRAM user's password (RFC 5802, section 3)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        # The keys check a client's proof: a log line or a traceback must not show them.
        return f"ScramCredentialValue(salt=<hidden>, keys=<hidden>, iterations={self.iterations})"


def is_security_key(key: bytes) -> bool:
    """Whether the encoded key is an ACL's or a SCRAM credential's, without decoding it: a
    reader of the security partition skips the groups' records sharing it at this cost."""
    return len(key) > 1 and key[0] in _FIXARRAY_HEADERS and key[1] in _SECURITY_TYPES


def acl_key_fields(key: AclKey, key_version: int) -> tuple[Any, ...]:
    return (
        ACL_TYPE,
        key_version,
        key.resource_type,
        key.resource_name,
        key.pattern_type,
        key.principal,
        key.host,
        key.operation,
        key.permission,
    )


def acl_key_from_fields(fields: list[Any]) -> AclKey:
    """The key of the fields after the type and version; ValueError when they are not a
    key's. Fields a later version appends are ignored."""
    # Fewer than seven fields fail to unpack (ValueError).
    resource_type, name, pattern_type, principal, host, operation, permission = fields[:7]
    return AclKey(
        _int(resource_type),
        _str(name),
        _int(pattern_type),
        _str(principal),
        _str(host),
        _int(operation),
        _int(permission),
    )


def acl_value_fields(value: AclValue) -> tuple[Any, ...]:
    return (ACL_VALUE_VERSION,)


def acl_value_from_fields(fields: list[Any]) -> AclValue:
    return AclValue()


def scram_credential_key_fields(key: ScramCredentialKey, key_version: int) -> tuple[Any, ...]:
    return (SCRAM_CREDENTIAL_TYPE, key_version, key.user, key.mechanism)


def scram_credential_key_from_fields(fields: list[Any]) -> ScramCredentialKey:
    user, mechanism = fields[:2]
    return ScramCredentialKey(_str(user), _int(mechanism))


def scram_credential_value_fields(value: ScramCredentialValue) -> tuple[Any, ...]:
    return (
        SCRAM_CREDENTIAL_VALUE_VERSION,
        value.salt,
        value.stored_key,
        value.server_key,
        value.iterations,
    )


def scram_credential_value_from_fields(fields: list[Any]) -> ScramCredentialValue:
    if len(fields) < 5:
        raise ValueError("a SCRAM credential value has four fields after its version")
    _, salt, stored_key, server_key, iterations = fields[:5]
    return ScramCredentialValue(
        _bytes(salt), _bytes(stored_key), _bytes(server_key), _int(iterations)
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"expected bytes, got {type(value).__name__}")
    return value


__all__ = [
    "ACL_TYPE",
    "ACL_VALUE_VERSION",
    "SCRAM_CREDENTIAL_TYPE",
    "SCRAM_CREDENTIAL_VALUE_VERSION",
    "SECURITY_PARTITION",
    "AclKey",
    "AclValue",
    "ScramCredentialKey",
    "ScramCredentialValue",
    "acl_key_fields",
    "acl_key_from_fields",
    "acl_value_fields",
    "acl_value_from_fields",
    "is_security_key",
    "scram_credential_key_fields",
    "scram_credential_key_from_fields",
    "scram_credential_value_fields",
    "scram_credential_value_from_fields",
]
