"""The log's record format: golden bytes, round trips, and compaction semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shard_context import ShardTestContext

from coordinator_server.records import (
    CoordinatorRecord,
    GroupMemberValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_record,
    encode_key,
    encode_offset_commits,
    encode_record,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
    new_partition_ownership_record,
)


def test_offset_commit_golden_bytes() -> None:
    key, value = encode_record(
        new_offset_commit_record("g", "orders", 3, 42, -1, "", 1764000000000)
    )
    # [1 (offset commit), 0 (key version), "g", "orders", 3]
    assert key == bytes.fromhex("95 01 00 a1 67 a6 6f 72 64 65 72 73 03")
    # [0 (value version), 42, -1, "", 1764000000000 (uint64), nil]
    assert value == bytes.fromhex("96 00 2a ff a0 cf 00 00 01 9a b6 97 e8 00 c0")


def test_group_metadata_golden_bytes_and_tombstone() -> None:
    member = GroupMemberValue("m1", None, "c", "/1.2.3.4", 300000, 10000, b"\x01", b"")
    value = GroupMetadataValue("consumer", 2, "range", "m1", 5, (member,))
    key, raw = encode_record(new_group_metadata_record("g", value))
    assert key == bytes.fromhex("93 02 00 a1 67")  # [2 (group metadata), 0, "g"]
    assert raw is not None and raw[:2] == bytes.fromhex("97 00")  # [0 (value version), ...]
    assert decode_record(key, raw) == CoordinatorRecord(GroupMetadataKey("g"), value)
    assert encode_record(new_group_metadata_tombstone_record("g")) == (key, None)


def test_newer_versions_may_append_fields_that_readers_ignore() -> None:
    import msgpack

    key = encode_key(OffsetCommitKey("g", "t", 0))
    newer = msgpack.packb([1, 5, 0, "m", 7, None, "a field from the future"])
    assert decode_record(key, newer).value == OffsetCommitValue(5, 0, "m", 7, None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\xc1", None),
        (bytes.fromhex("92 09 00"), None),  # unknown record type
        (bytes.fromhex("93 01 00 a1 67"), None),  # offset commit key missing fields
        (encode_key(OffsetCommitKey("g", "t", 0)), b"\x91\x00"),  # value missing fields
        (encode_key(OffsetCommitKey("g", "t", 0)), bytes.fromhex("96 00 a1 78 ff a0 01 c0")),
    ],
)
def test_malformed_records_are_rejected(key: bytes, value: bytes | None) -> None:
    with pytest.raises(RecordFormatError):
        decode_record(key, value)


texts = st.text(max_size=12)
offset_records = st.builds(
    new_offset_commit_record,
    texts,
    texts,
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    texts,
    st.integers(0, 2**63 - 1),
    st.none() | st.integers(0, 2**63 - 1),
)
members = st.builds(
    GroupMemberValue,
    texts,
    st.none() | texts,
    texts,
    texts,
    st.integers(-1, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=16),
    st.binary(max_size=16),
)


def test_partition_ownership_golden_bytes() -> None:
    key, value = encode_record(new_partition_ownership_record(2, 1007, 3, 1764000000000))
    assert key == bytes.fromhex("92 03 00")  # [3 (partition ownership), 0]
    # [0 (value version), 2 (node id), 1007 (producer id), 3 (epoch), 1764000000000]
    assert value == bytes.fromhex("95 00 02 cd 03 ef 03 cf 00 00 01 9a b6 97 e8 00")


ownership_records = st.builds(
    new_partition_ownership_record,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**63 - 1),
)


group_records = st.builds(
    new_group_metadata_record,
    texts,
    st.builds(
        GroupMetadataValue,
        texts,
        st.integers(0, 2**31 - 1),
        st.none() | texts,
        st.none() | texts,
        st.integers(-1, 2**63 - 1),
        st.lists(members, max_size=3).map(tuple),
    ),
)


@given(offset_records | group_records | ownership_records)
def test_every_record_round_trips(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    # Equal keys encode to equal bytes: compaction depends on it.
    assert encode_key(record.key) == key


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(["t", "u"]),
            st.integers(0, 2),
            st.none() | st.integers(0, 100),  # None: a tombstone
        ),
        max_size=40,
    )
)
def test_compacting_the_log_keeps_the_state_it_replays_to(
    writes: list[tuple[str, str, int, int | None]],
) -> None:
    """Latest value per key wins and a tombstone deletes: replaying the compacted log gives
    the same state as replaying all of it."""
    log = [
        new_offset_commit_tombstone_record(g, t, p)
        if offset is None
        else new_offset_commit_record(g, t, p, offset, -1, "", 1)
        for g, t, p, offset in writes
    ]
    latest: dict[bytes, tuple[bytes, bytes | None]] = {}
    for record in log:
        key, value = encode_record(record)
        latest.pop(key, None)  # a key moves to the position of its latest record
        latest[key] = (key, value)
    compacted = [decode_record(k, v) for k, v in latest.values() if v is not None]

    full, small = ShardTestContext(), ShardTestContext()
    full.replay_all(log)
    small.replay_all(compacted)
    for g in ("a", "b"):
        for t in ("t", "u"):
            for p in range(3):
                assert full.shard.managers.offsets.committed_offset(
                    g, t, p
                ) == small.shard.managers.offsets.committed_offset(g, t, p)


# Any text msgpack can carry (no lone surrogates), of lengths across every str header.
_texts = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.sampled_from(["", "x" * 31, "x" * 32, "é" * 200, "x" * 70_000]),
)
# Integers of every msgpack integer encoding, and their edges.
_ints = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(
        [
            *(0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1),
            *(-1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)),
        ]
    ),
)


@given(
    group=_texts,
    commits=st.lists(
        st.tuples(
            st.sampled_from(["t", "orders", "ü" * 20]),
            _ints,
            st.builds(
                OffsetCommitValue,
                _ints,
                _ints,
                _texts,
                _ints,
                st.none() | _ints,
            ),
        ),
        max_size=12,
    ),
)
def test_encoded_offset_commits_are_the_bytes_of_their_records(
    group: str, commits: list[tuple[str, int, OffsetCommitValue]]
) -> None:
    encoded = encode_offset_commits(
        group, [((topic, partition), value) for topic, partition, value in commits]
    )
    records = [
        CoordinatorRecord(OffsetCommitKey(group, topic, partition), value)
        for topic, partition, value in commits
    ]
    assert encoded == [encode_record(record) for record in records]
    assert [decode_record(key, value) for key, value in encoded] == records


# Values a record's fields may hold, right or wrong: msgpack's types (bool apart from int,
# str apart from bin) and integers on both sides of msgpack's widths.
field_values = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([0, 1, 2, -1, True, False, None, 2**63, -(2**63) - 0]),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.floats(allow_nan=False),
)
commit_keys = st.one_of(
    st.tuples(st.sampled_from([1, 0, 2, True]), field_values, texts, texts, field_values).map(list),
    st.lists(field_values, max_size=7),
    st.builds(
        lambda k, extra: [*k, *extra],
        st.tuples(st.just(1), st.just(0), texts, texts, st.integers(0, 9)).map(list),
        st.lists(field_values, min_size=1, max_size=2),
    ),
)
commit_values = st.one_of(
    st.none(),
    st.tuples(
        st.integers(0, 3), field_values, field_values, field_values, field_values, field_values
    ).map(list),
    st.lists(field_values, max_size=8),
    st.builds(
        lambda v, extra: [*v, *extra],
        st.tuples(
            st.just(0),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            texts,
            st.integers(0, 2**40),
            st.none(),
        ).map(list),
        st.lists(field_values, min_size=1, max_size=2),
    ),
)


@given(commit_keys, commit_values)
def test_offset_commits_of_any_shape_decode_as_field_by_field(
    key: list[object], value: list[object] | None
) -> None:
    import msgpack

    from coordinator_server.records import _decode_offset_commit_fields, decode_offset_commit

    raw_key = msgpack.packb(key)
    raw_value = None if value is None else msgpack.packb(value)
    assert decode_offset_commit(raw_key, raw_value) == _decode_offset_commit_fields(
        raw_key, raw_value
    )
