"""Record type 6, the transactional offset: golden bytes, tombstones, round trips, and the
malformed shapes a reader rejects."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.records import (
    CoordinatorRecord,
    RecordFormatError,
    RecordType,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    decode_offset_commit,
    decode_record,
    encode_key,
    encode_record,
    new_transactional_offset_record,
    new_transactional_offset_tombstone_record,
)


def test_transactional_offset_golden_bytes() -> None:
    key, value = encode_record(
        new_transactional_offset_record(
            "g", "orders", 3, 1007, TransactionalOffsetValue(2, 42, -1, "", 1764000000000)
        )
    )
    # [6 (transactional offset), 0 (key version), "g", "orders", 3, 1007 (producer id)]
    assert key == bytes.fromhex("96 06 00 a1 67 a6 6f 72 64 65 72 73 03 cd 03 ef")
    # [0 (value version), 2 (producer epoch), 42, -1, "", 1764000000000 (uint64)]
    assert value == bytes.fromhex("96 00 02 2a ff a0 cf 00 00 01 9a b6 97 e8 00")
    assert RecordType.TRANSACTIONAL_OFFSET == 6


def test_tombstone_has_the_same_key_and_no_value() -> None:
    record = new_transactional_offset_tombstone_record("g", "orders", 3, 1007)
    key, value = encode_record(record)
    assert value is None
    assert key == bytes.fromhex("96 06 00 a1 67 a6 6f 72 64 65 72 73 03 cd 03 ef")
    assert decode_record(key, None) == record
    assert record.is_tombstone


def test_is_not_taken_for_an_offset_commit() -> None:
    key, value = encode_record(
        new_transactional_offset_record("g", "t", 0, 5, TransactionalOffsetValue(0, 1, -1, "", 1))
    )
    assert decode_offset_commit(key, value) is None
    assert decode_offset_commit(key, None) is None


def test_newer_versions_may_append_fields() -> None:
    key = msgpack.packb([6, 1, "g", "t", 0, 9, "a later key field"])
    value = msgpack.packb([1, 3, 10, 4, "m", 7, "a later value field"])
    assert decode_record(key, value) == CoordinatorRecord(
        TransactionalOffsetKey("g", "t", 0, 9), TransactionalOffsetValue(3, 10, 4, "m", 7)
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (msgpack.packb([6, 0, "g", "t", 0]), None),  # no producer id
        (msgpack.packb([6, 0, "g", "t", 0, "5"]), None),  # producer id not an int
        (msgpack.packb([6, 0, "g", 1, 0, 5]), None),  # topic not a str
        (msgpack.packb([6, 0, "g", "t", 0, 5]), msgpack.packb([0, 1, 2, 3, "m"])),  # short
        (msgpack.packb([6, 0, "g", "t", 0, 5]), msgpack.packb([0, 1, 2, 3, 4, 5])),  # metadata
        (msgpack.packb([6, 0, "g", "t", 0, 5]), msgpack.packb([0, True, 2, 3, "m", 5])),
    ],
)
def test_malformed_records_are_rejected(key: bytes, value: bytes | None) -> None:
    with pytest.raises(RecordFormatError):
        decode_record(key, value)


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_ints = st.integers(-(2**63), 2**63 - 1)


@given(
    st.builds(
        new_transactional_offset_record,
        _texts,
        _texts,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**63 - 1),
        st.builds(TransactionalOffsetValue, st.integers(0, 2**15 - 1), _ints, _ints, _texts, _ints),
    )
    | st.builds(
        new_transactional_offset_tombstone_record,
        _texts,
        _texts,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**63 - 1),
    )
)
def test_every_record_round_trips(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert encode_key(record.key) == key
