"""Record types 7 and 8, the ACL and the SCRAM credential: golden bytes (the same as
docs/RECORDS.md shows), tombstones, round trips, the skip of other keys, and the malformed
shapes a reader rejects."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.records import (
    AclKey,
    AclValue,
    CoordinatorRecord,
    RecordFormatError,
    RecordType,
    ScramCredentialKey,
    ScramCredentialValue,
    decode_offset_commit,
    decode_record,
    encode_record,
    new_acl_record,
    new_acl_tombstone_record,
    new_offset_commit_record,
    new_scram_credential_record,
    new_scram_credential_tombstone_record,
)
from coordinator_server.records.security import is_security_key

RECORDS_DOC = Path(__file__).parents[2] / "docs" / "RECORDS.md"

# ALLOW (3) READ (3) on the LITERAL (3) Topic (2) "orders" for User:alice from any host.
ALICE_READS_ORDERS = AclKey(2, "orders", 3, "User:alice", "*", 3, 3)
ACL_KEY_HEX = "99 07 00 02 a6 6f 72 64 65 72 73 03 aa 55 73 65 72 3a 61 6c 69 63 65 a1 2a 03 03"
ACL_VALUE_HEX = "91 00"
CREDENTIAL = ScramCredentialValue(b"salt", bytes(range(4)), bytes(range(4, 8)), 4096)
CREDENTIAL_KEY_HEX = "94 08 00 a5 61 6c 69 63 65 01"
CREDENTIAL_VALUE_HEX = "95 00 c4 04 73 61 6c 74 c4 04 00 01 02 03 c4 04 04 05 06 07 cd 10 00"


def documented_hex(text: str) -> set[str]:
    """The hex lines of the document's examples (`key   = ...`, `value = ...`)."""
    return {
        " ".join(match.group(1).split())
        for match in re.finditer(r"^(?:key|value)\s*=\s*((?:[0-9a-f]{2} ?)+)$", text, re.M)
    }


def test_acl_golden_bytes_are_the_documented_ones() -> None:
    key, value = encode_record(new_acl_record(ALICE_READS_ORDERS))
    # [7 (ACL), 0 (key version), 2 (Topic), "orders", 3 (LITERAL), "User:alice", "*",
    #  3 (READ), 3 (ALLOW)]
    assert key == bytes.fromhex(ACL_KEY_HEX)
    # [0 (value version)]
    assert value == bytes.fromhex(ACL_VALUE_HEX)
    assert RecordType.ACL == 7
    assert {ACL_KEY_HEX, ACL_VALUE_HEX} <= documented_hex(RECORDS_DOC.read_text())


def test_scram_credential_golden_bytes_are_the_documented_ones() -> None:
    key, value = encode_record(new_scram_credential_record("alice", 1, CREDENTIAL))
    # [8 (SCRAM credential), 0 (key version), "alice", 1 (SCRAM-SHA-256)]
    assert key == bytes.fromhex(CREDENTIAL_KEY_HEX)
    # [0 (value version), salt (bin), stored key (bin), server key (bin), 4096]
    assert value == bytes.fromhex(CREDENTIAL_VALUE_HEX)
    assert RecordType.SCRAM_CREDENTIAL == 8
    assert {CREDENTIAL_KEY_HEX, CREDENTIAL_VALUE_HEX} <= documented_hex(RECORDS_DOC.read_text())


def test_tombstones_have_the_same_keys_and_no_value() -> None:
    for record, key_hex in (
        (new_acl_tombstone_record(ALICE_READS_ORDERS), ACL_KEY_HEX),
        (new_scram_credential_tombstone_record("alice", 1), CREDENTIAL_KEY_HEX),
    ):
        key, value = encode_record(record)
        assert (key, value) == (bytes.fromhex(key_hex), None)
        assert decode_record(key, None) == record
        assert record.is_tombstone


def test_security_keys_are_told_from_the_others_by_their_first_bytes() -> None:
    acl_key, _ = encode_record(new_acl_record(ALICE_READS_ORDERS))
    credential_key, _ = encode_record(new_scram_credential_record("bob", 2, CREDENTIAL))
    commit_key, commit_value = encode_record(
        new_offset_commit_record("g", "orders", 0, 1, -1, "", 1)
    )
    assert is_security_key(acl_key) and is_security_key(credential_key)
    assert not is_security_key(commit_key)
    assert not is_security_key(b"") and not is_security_key(b"\x07\x99")
    # Nor is a security record taken for an offset commit on the fast path of a load.
    assert decode_offset_commit(acl_key, bytes.fromhex(ACL_VALUE_HEX)) is None
    assert decode_offset_commit(commit_key, commit_value) is not None


def test_a_credential_never_shows_its_keys() -> None:
    shown = repr(decode_record(*encode_record(new_scram_credential_record("a", 1, CREDENTIAL))))
    assert "salt=<hidden>" in shown and "4096" in shown
    assert "\\x00\\x01" not in shown and "b'salt'" not in shown


def test_newer_versions_may_append_fields() -> None:
    key = msgpack.packb([7, 1, 2, "t", 3, "User:a", "*", 3, 3, "a later key field"])
    value = msgpack.packb([1, "a later value field"])
    assert decode_record(key, value) == CoordinatorRecord(
        AclKey(2, "t", 3, "User:a", "*", 3, 3), AclValue()
    )
    key = msgpack.packb([8, 1, "u", 2, "later"])
    value = msgpack.packb([1, b"s", b"k", b"v", 5000, "later"])
    assert decode_record(key, value) == CoordinatorRecord(
        ScramCredentialKey("u", 2), ScramCredentialValue(b"s", b"k", b"v", 5000)
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (msgpack.packb([7, 0, 2, "t", 3, "User:a", "*", 3]), None),  # no permission
        (msgpack.packb([7, 0, "2", "t", 3, "User:a", "*", 3, 3]), None),  # type not an int
        (msgpack.packb([7, 0, 2, 5, 3, "User:a", "*", 3, 3]), None),  # name not a str
        (msgpack.packb([8, 0, "u"]), None),  # no mechanism
        (msgpack.packb([8, 0, b"u", 1]), None),  # user not a str
        (msgpack.packb([8, 0, "u", 1]), msgpack.packb([0, b"s", b"k", b"v"])),  # short
        (msgpack.packb([8, 0, "u", 1]), msgpack.packb([0, "s", b"k", b"v", 4096])),  # salt str
        (msgpack.packb([8, 0, "u", 1]), msgpack.packb([0, b"s", b"k", b"v", True])),
    ],
)
def test_malformed_records_are_rejected(key: bytes, value: bytes | None) -> None:
    with pytest.raises(RecordFormatError):
        decode_record(key, value)


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_codes = st.integers(min_value=0, max_value=127)


@given(_codes, _texts, _codes, _texts, _texts, _codes, _codes)
def test_acl_records_round_trip(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> None:
    record = new_acl_record(
        AclKey(resource_type, name, pattern_type, principal, host, operation, permission)
    )
    key, value = encode_record(record)
    assert is_security_key(key)
    assert decode_record(key, value) == record


@given(_texts, st.integers(1, 2), st.binary(max_size=64), st.integers(0, 2**31 - 1))
def test_scram_credential_records_round_trip(
    user: str, mechanism: int, secret: bytes, iterations: int
) -> None:
    record = new_scram_credential_record(
        user, mechanism, ScramCredentialValue(secret, secret[::-1], secret * 2, iterations)
    )
    key, value = encode_record(record)
    assert is_security_key(key)
    assert decode_record(key, value) == record
