"""java_string_hash and partition_for against values computed by Java itself."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_protocol.hashing import java_string_hash, partition_for

# Java's String.hashCode values, computed by running Java 17 on these strings (written in
# the Java source with \u escapes, so each is exactly the Python string below).
JAVA_HASHES = [
    ("", 0),
    ("a", 97),
    ("group-0", 293427298),
    ("group-1", 293427299),
    ("my-consumer-group", 1513705513),
    ("console-consumer-12345", 158455506),
    ("orders", -1008770331),
    ("payments", 1382682413),
    ("zzzzzzzz", -1910022912),
    ("the quick brown fox jumps over the lazy dog", -2082818701),
    ("x" * 1000, -1715418112),
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
    ("gr\u00fc\u00dfe", 98768023),  # "grüße"
    ("\u7ec4", 32452),  # "组"
    ("\u6d88\u8d39\u8005\u7ec4", 871131088),  # "消费者组"
    ("\U0001f600", 1772899),  # "😀": surrogates \ud83d \ude00
    ("a\U0001d11eb", 57834039),  # "a𝄞b": surrogates \ud834 \udd1e
    ("\ud800", 55296),  # a lone surrogate counts as itself
]


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


# (group_id, partition of 50) per the contract: (hash & 0x7fffffff) % 50, computed in Java.
PARTITIONS_OF_50 = [
    ("", 0),
    ("a", 47),
    ("group-0", 48),
    ("group-1", 49),
    ("group-2", 0),
    ("group-3", 1),
    ("my-consumer-group", 13),
    ("\u6d88\u8d39\u8005\u7ec4", 38),
    ("\U0001f600", 49),
    # Negative hashes: here the contract's mask and Kafka's Utils.abs disagree (Kafka would
    # pick 31, 1, 12 and 12).
    ("orders", 17),
    ("the quick brown fox jumps over the lazy dog", 47),
    ("zzzzzzzz", 36),
    ("x" * 1000, 36),
    # Integer.MIN_VALUE: the mask gives 0 (Kafka's Utils.abs also gives 0).
    ("polygenelubricants", 0),
]


@pytest.mark.parametrize(("group_id", "expected"), PARTITIONS_OF_50)
def test_partition_for_50(group_id: str, expected: int) -> None:
    assert partition_for(group_id, 50) == expected


def test_partition_for_one_partition() -> None:
    assert partition_for("anything", 1) == 0


@pytest.mark.parametrize("num_partitions", [0, -1])
def test_partition_for_needs_partitions(num_partitions: int) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for("g", num_partitions)


def _reference_hash(text: str) -> int:
    # Java's definition read literally: s[0]*31^(n-1) + ... + s[n-1], in 32-bit arithmetic.
    data = text.encode("utf-16-be", "surrogatepass")
    units: tuple[int, ...] = struct.unpack(f">{len(data) // 2}H", data)
    n = len(units)
    total = sum(unit * pow(31, n - 1 - i, 2**32) for i, unit in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(st.text(max_size=50))
def test_matches_the_definition(text: str) -> None:
    assert java_string_hash(text) == _reference_hash(text)


@given(st.text(max_size=30), st.integers(min_value=1, max_value=1000))
def test_partition_is_in_range(group_id: str, num_partitions: int) -> None:
    partition = partition_for(group_id, num_partitions)
    assert 0 <= partition < num_partitions
    assert partition == (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


@given(st.text(max_size=30))
def test_hash_is_a_signed_32_bit_int(text: str) -> None:
    assert -(2**31) <= java_string_hash(text) < 2**31
