"""Which offsets-topic partition, and so which coordinator, owns a group.

Routing must give the same answer in every process and language, so it cannot use Python's
`hash()` (salted per process). It uses Java's `String.hashCode`, as Kafka does: the
31-based polynomial over the string's UTF-16 code units, wrapped to a signed 32-bit int.
"""

from __future__ import annotations

import sys
from array import array
from typing import Final

__all__ = ["java_string_hash", "partition_for"]

_UTF16_NATIVE: Final = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def java_string_hash(s: str) -> int:
    """Java's `s.hashCode()`: a signed 32-bit int.

    A character outside the Basic Multilingual Plane counts as its two surrogate code
    units, as in Java; a lone surrogate (legal in a Python str) counts as itself.
    """
    # Native byte order lets array("H") read the code units without any swapping.
    units = array("H", s.encode(_UTF16_NATIVE, "surrogatepass"))
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFF_FFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The offsets-topic partition that owns `group_id`.

    `(java_string_hash(group_id) & 0x7fffffff) % num_partitions`, exactly as PROTOCOL.md
    states. This differs from Kafka's `Utils.abs(groupId.hashCode()) % n` for a negative
    hash (Kafka negates it; the mask adds 2**31 instead), so a group whose hash is negative
    may live on another partition than the one Kafka would pick. The contract is the rule.

    Raises:
        ValueError: `num_partitions` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (java_string_hash(group_id) & 0x7FFF_FFFF) % num_partitions
