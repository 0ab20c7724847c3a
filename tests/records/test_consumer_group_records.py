"""Record types 9 to 14, the consumer group protocol's: golden bytes (the same as
docs/RECORDS.md shows), tombstones, round trips, later versions, and the malformed shapes a
reader rejects."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.consumer_groups.member import ReconciliationState
from coordinator_server.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    CoordinatorRecord,
    RecordFormatError,
    RecordType,
    decode_offset_commit,
    decode_record,
    encode_record,
    new_consumer_group_current_member_assignment_record,
    new_consumer_group_current_member_assignment_tombstone_record,
    new_consumer_group_member_metadata_record,
    new_consumer_group_member_metadata_tombstone_record,
    new_consumer_group_metadata_record,
    new_consumer_group_metadata_tombstone_record,
    new_consumer_group_regular_expression_record,
    new_consumer_group_regular_expression_tombstone_record,
    new_consumer_group_target_assignment_member_record,
    new_consumer_group_target_assignment_member_tombstone_record,
    new_consumer_group_target_assignment_metadata_record,
    new_consumer_group_target_assignment_metadata_tombstone_record,
)

RECORDS_DOC = Path(__file__).parents[2] / "docs" / "RECORDS.md"
TOPIC_ID = bytes(range(16))
ID_HEX = "c4 10 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
TS = 1764000000000
TS_HEX = "cf 00 00 01 9a b6 97 e8 00"

MEMBER = ConsumerGroupMemberMetadataValue(
    None, "r1", "c", "/10.0.0.1", ("orders",), None, 300000, "uniform"
)
CURRENT = ConsumerGroupCurrentMemberAssignmentValue(
    5, 4, ReconciliationState.UNREVOKED_PARTITIONS.value, ((TOPIC_ID, (0,)),), ((TOPIC_ID, (1,)),)
)

# (record, its tombstone, key hex, value hex), each as docs/RECORDS.md shows it.
GOLDEN = [
    (
        new_consumer_group_metadata_record("g", ConsumerGroupMetadataValue(5, 0x0123456789ABCDEF)),
        new_consumer_group_metadata_tombstone_record("g"),
        "93 09 00 a1 67",
        "93 00 05 cf 01 23 45 67 89 ab cd ef",
    ),
    (
        new_consumer_group_member_metadata_record("g", "m1", MEMBER),
        new_consumer_group_member_metadata_tombstone_record("g", "m1"),
        "94 0a 00 a1 67 a2 6d 31",
        "9a 00 c0 a2 72 31 a1 63 a9 2f 31 30 2e 30 2e 30 2e 31 91 a6 6f 72 64 65 72 73 c0"
        " ce 00 04 93 e0 a7 75 6e 69 66 6f 72 6d c0",
    ),
    (
        new_consumer_group_target_assignment_metadata_record(
            "g", ConsumerGroupTargetAssignmentMetadataValue(5, TS)
        ),
        new_consumer_group_target_assignment_metadata_tombstone_record("g"),
        "93 0b 00 a1 67",
        f"93 00 05 {TS_HEX}",
    ),
    (
        new_consumer_group_target_assignment_member_record(
            "g", "m1", ConsumerGroupTargetAssignmentMemberValue(((TOPIC_ID, (0, 1)),))
        ),
        new_consumer_group_target_assignment_member_tombstone_record("g", "m1"),
        "94 0c 00 a1 67 a2 6d 31",
        f"92 00 91 92 {ID_HEX} 92 00 01",
    ),
    (
        new_consumer_group_current_member_assignment_record("g", "m1", CURRENT),
        new_consumer_group_current_member_assignment_tombstone_record("g", "m1"),
        "94 0d 00 a1 67 a2 6d 31",
        f"96 00 05 04 01 91 92 {ID_HEX} 91 00 91 92 {ID_HEX} 91 01",
    ),
    (
        new_consumer_group_regular_expression_record(
            "g", "orders-.*", ConsumerGroupRegularExpressionValue(("orders-eu",), 17, TS)
        ),
        new_consumer_group_regular_expression_tombstone_record("g", "orders-.*"),
        "94 0e 00 a1 67 a9 6f 72 64 65 72 73 2d 2e 2a",
        f"94 00 91 a9 6f 72 64 65 72 73 2d 65 75 11 {TS_HEX}",
    ),
]


def documented_hex(text: str) -> set[str]:
    """The hex lines of the document's examples (`key   = ...`, `value = ...`)."""
    return {
        " ".join(match.group(1).split())
        for match in re.finditer(r"^(?:key|value)\s*=\s*((?:[0-9a-f]{2} ?)+)$", text, re.M)
    }


def test_the_record_types_follow_the_others() -> None:
    assert list(range(9, 15)) == [
        RecordType.CONSUMER_GROUP_METADATA,
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION,
    ]


@pytest.mark.parametrize(("record", "tombstone", "key_hex", "value_hex"), GOLDEN)
def test_golden_bytes_are_the_documented_ones(
    record: CoordinatorRecord, tombstone: CoordinatorRecord, key_hex: str, value_hex: str
) -> None:
    key, value = encode_record(record)
    assert (key, value) == (bytes.fromhex(key_hex), bytes.fromhex(value_hex))
    assert decode_record(key, value) == record
    assert {key_hex, value_hex} <= documented_hex(RECORDS_DOC.read_text())


@pytest.mark.parametrize(("record", "tombstone", "key_hex", "value_hex"), GOLDEN)
def test_tombstones_have_the_same_keys_and_no_value(
    record: CoordinatorRecord, tombstone: CoordinatorRecord, key_hex: str, value_hex: str
) -> None:
    key, value = encode_record(tombstone)
    assert (key, value) == (bytes.fromhex(key_hex), None)
    assert tombstone.is_tombstone and tombstone.key == record.key
    assert decode_record(key, None) == tombstone
    # Nor is any of them taken for an offset commit on the fast path of a load.
    assert decode_offset_commit(key, None) is None
    assert decode_offset_commit(key, bytes.fromhex(value_hex)) is None


def test_a_members_three_keys_are_three_keys() -> None:
    keys = {
        ConsumerGroupMemberMetadataKey("g", "m"),
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    }
    assert len(keys) == 3


def test_a_classic_member_keeps_its_classic_metadata() -> None:
    classic = ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x00\x01"),))
    record = new_consumer_group_member_metadata_record(
        "g", "m", dataclasses.replace(MEMBER, classic_member_metadata=classic)
    )
    key, value = encode_record(record)
    assert value is not None and value.endswith(
        bytes.fromhex("92 cd af c8 91 92 a5 72 61 6e 67 65 c4 02 00 01")
    )
    assert decode_record(key, value) == record


def test_newer_versions_may_append_fields() -> None:
    key = msgpack.packb([9, 1, "g", "a later key field"])
    value = msgpack.packb([1, 5, 0, "a later value field"])
    assert decode_record(key, value) == new_consumer_group_metadata_record(
        "g", ConsumerGroupMetadataValue(5, 0)
    )
    key = msgpack.packb([13, 1, "g", "m", "later"])
    value = msgpack.packb([1, 5, 4, 0, [[TOPIC_ID, [0], "later"]], [], "later"])
    assert decode_record(key, value) == new_consumer_group_current_member_assignment_record(
        "g", "m", ConsumerGroupCurrentMemberAssignmentValue(5, 4, 0, ((TOPIC_ID, (0,)),), ())
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (msgpack.packb([9, 0]), None),  # no group
        (msgpack.packb([10, 0, "g"]), None),  # no member id
        (msgpack.packb([12, 0, "g", 7]), None),  # member id not a str
        (msgpack.packb([14, 0, "g"]), None),  # no regular expression
        (msgpack.packb([9, 0, "g"]), msgpack.packb([0, 5])),  # no metadata hash
        (msgpack.packb([11, 0, "g"]), msgpack.packb([0, True, 0])),  # a bool epoch
        (msgpack.packb([12, 0, "g", "m"]), msgpack.packb([0, [[b"short", [0]]]])),
        (msgpack.packb([12, 0, "g", "m"]), msgpack.packb([0, [[TOPIC_ID.hex(), [0]]]])),
        (msgpack.packb([12, 0, "g", "m"]), msgpack.packb([0, [[TOPIC_ID, "0"]]])),
        (msgpack.packb([13, 0, "g", "m"]), msgpack.packb([0, 5, 4, 0, [], "x"])),
        (msgpack.packb([10, 0, "g", "m"]), msgpack.packb([0, None, None, "c", "h", "t"])),
        (
            msgpack.packb([10, 0, "g", "m"]),
            msgpack.packb([0, None, None, "c", "h", "orders", None, 1, None, None]),
        ),
        (
            msgpack.packb([10, 0, "g", "m"]),
            msgpack.packb([0, None, None, "c", "h", [], None, 1, None, [1, [["r", "x"]]]]),
        ),
        (msgpack.packb([14, 0, "g", "r"]), msgpack.packb([0, [1], 17, 0])),
    ],
)
def test_malformed_records_are_rejected(key: bytes, value: bytes | None) -> None:
    with pytest.raises(RecordFormatError):
        decode_record(key, value)


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_optional_texts = st.none() | _texts
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_partitions = st.lists(
    st.tuples(
        st.binary(min_size=16, max_size=16),
        st.lists(st.integers(0, 2**31 - 1), max_size=8, unique=True).map(
            lambda p: tuple(sorted(p))
        ),
    ),
    max_size=4,
    unique_by=lambda entry: entry[0],
).map(lambda entries: tuple(sorted(entries)))
_classic = st.none() | st.builds(
    ClassicMemberMetadata,
    _int32,
    st.lists(st.builds(ClassicProtocol, _texts, st.binary(max_size=16)), max_size=3).map(tuple),
)
_members = st.builds(
    ConsumerGroupMemberMetadataValue,
    _optional_texts,
    _optional_texts,
    _texts,
    _texts,
    st.lists(_texts, max_size=4).map(lambda names: tuple(sorted(names))),
    _optional_texts,
    _int32,
    _optional_texts,
    _classic,
)
_records = st.one_of(
    st.builds(
        new_consumer_group_metadata_record,
        _texts,
        st.builds(ConsumerGroupMetadataValue, _int32, _int64),
    ),
    st.builds(new_consumer_group_member_metadata_record, _texts, _texts, _members),
    st.builds(
        new_consumer_group_target_assignment_metadata_record,
        _texts,
        st.builds(ConsumerGroupTargetAssignmentMetadataValue, _int32, _int64),
    ),
    st.builds(
        new_consumer_group_target_assignment_member_record,
        _texts,
        _texts,
        st.builds(ConsumerGroupTargetAssignmentMemberValue, _partitions),
    ),
    st.builds(
        new_consumer_group_current_member_assignment_record,
        _texts,
        _texts,
        st.builds(
            ConsumerGroupCurrentMemberAssignmentValue,
            _int32,
            _int32,
            st.sampled_from([state.value for state in ReconciliationState]),
            _partitions,
            _partitions,
        ),
    ),
    st.builds(
        new_consumer_group_regular_expression_record,
        _texts,
        _texts,
        st.builds(
            ConsumerGroupRegularExpressionValue,
            st.lists(_texts, max_size=4).map(lambda topics: tuple(sorted(topics))),
            _int64,
            _int64,
        ),
    ),
)


@given(_records)
def test_consumer_group_records_round_trip(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert decode_record(key, None) == CoordinatorRecord(record.key, None)
    assert decode_offset_commit(key, value) is None


def test_every_record_type_has_its_row_in_the_documented_key_table() -> None:
    rows = set(re.findall(r"^\| (\d+) \| [a-zA-Z]", RECORDS_DOC.read_text(), re.M))
    assert {str(int(record_type)) for record_type in RecordType} <= rows
