"""The transaction coordinator's records: golden bytes, round trips, malformed values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.records import (
    CoordinatorRecord,
    ProducerIdBlockKey,
    RecordFormatError,
    TransactionKey,
    TransactionValue,
    decode_record,
    encode_key,
    encode_record,
    new_producer_id_block_record,
    new_transaction_record,
    new_transaction_tombstone_record,
)


def test_transaction_golden_bytes_and_tombstone() -> None:
    value = TransactionValue(
        5, -1, -1, 0, -1, 60000, 1, (("orders", (0, 1)),), (3,), 1764000000000, 1764000000000
    )
    key, raw = encode_record(new_transaction_record("t", value))
    assert key == bytes.fromhex("93 04 00 a1 74")  # [4 (transaction), 0, "t"]
    # [1, 5, -1, -1, 0, -1, 60000, 1 (Ongoing), [["orders", [0, 1]]], [3], ts, ts, []]
    assert raw == bytes.fromhex(
        "9d 01 05 ff ff 00 ff cd ea 60 01 91 92 a6 6f 72 64 65 72 73 92 00 01 91 03"
        " cf 00 00 01 9a b6 97 e8 00 cf 00 00 01 9a b6 97 e8 00 90"
    )
    assert decode_record(key, raw) == CoordinatorRecord(TransactionKey("t"), value)
    assert encode_record(new_transaction_tombstone_record("t")) == (key, None)


def test_a_completion_keeps_the_markers_refused_for_good() -> None:
    value = TransactionValue(
        5, -1, -1, 0, 0, 60000, 5, (), (), -1, 7, (("gone", 3, 3), ("orders", 0, 47))
    )
    key, raw = encode_record(new_transaction_record("t", value))
    # ..., 5 (CompleteCommit), [], [], -1, 7, [["gone", 3, 3], ["orders", 0, 47]]]
    assert raw.endswith(bytes.fromhex("92 93 a4 67 6f 6e 65 03 03 93 a6 6f 72 64 65 72 73 00 2f"))
    assert decode_record(key, raw).value == value


def test_values_of_version_0_have_no_refused_markers() -> None:
    import msgpack

    key = encode_key(TransactionKey("t"))
    older = msgpack.packb([0, 5, -1, -1, 0, -1, 100, 0, [], [], -1, 7])
    assert decode_record(key, older).value == TransactionValue(
        5, -1, -1, 0, -1, 100, 0, (), (), -1, 7
    )


def test_producer_id_block_golden_bytes() -> None:
    key, raw = encode_record(new_producer_id_block_record(2**48 + 1000))
    assert key == bytes.fromhex("92 05 00")  # [5 (producer id block), 0]
    assert raw == bytes.fromhex("92 00 cf 00 01 00 00 00 00 03 e8")  # [0, 2**48 + 1000]


def test_newer_transaction_values_may_append_fields() -> None:
    import msgpack

    key = encode_key(TransactionKey("t"))
    newer = msgpack.packb([2, 5, -1, -1, 0, -1, 100, 0, [], [], -1, 7, [], "from the future"])
    assert decode_record(key, newer).value == TransactionValue(
        5, -1, -1, 0, -1, 100, 0, (), (), -1, 7
    )


@pytest.mark.parametrize(
    "value",
    [
        [0, 5, -1, -1, 0, -1, 100, 0, [], []],  # missing fields
        [0, 5, -1, -1, 0, -1, 100, 0, "x", [], -1, 7],  # partitions not an array
        [0, 5, -1, -1, 0, -1, 100, 0, [["t", [True]]], [], -1, 7],  # a bool partition
        [0, 5, -1, -1, 0, -1, 100, 0, [[1, [0]]], [], -1, 7],  # a topic not a string
    ],
)
def test_malformed_transaction_values_are_rejected(value: list[object]) -> None:
    import msgpack

    with pytest.raises(RecordFormatError):
        decode_record(encode_key(TransactionKey("t")), msgpack.packb(value))
    with pytest.raises(RecordFormatError):
        decode_record(encode_key(ProducerIdBlockKey()), msgpack.packb([0, "x"]))


texts = st.text(max_size=12)
ints = st.integers(-(2**63), 2**63 - 1)
transaction_records = st.builds(
    new_transaction_record,
    texts,
    st.builds(
        TransactionValue,
        ints,
        ints,
        ints,
        st.integers(-1, 32767),
        st.integers(-1, 32767),
        st.integers(0, 2**31 - 1),
        st.integers(0, 7),
        st.lists(
            st.tuples(texts, st.lists(st.integers(0, 2**31 - 1), max_size=3).map(tuple)),
            max_size=3,
        ).map(tuple),
        st.lists(st.integers(0, 1000), max_size=3).map(tuple),
        ints,
        ints,
    ),
)
block_records = st.builds(new_producer_id_block_record, st.integers(0, 2**63 - 1))


@given(transaction_records | block_records | st.builds(new_transaction_tombstone_record, texts))
def test_every_transaction_record_round_trips(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert encode_key(record.key) == key
