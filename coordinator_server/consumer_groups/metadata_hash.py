"""The hash of a group's subscribed topics as the cluster describes them (KIP-1101): what
the group's epoch was last bumped for, kept in the group's metadata record.

A heartbeat that finds the hash of the topics its group subscribes to changed (a topic
created or deleted, partitions added, a topic re-created under a new id) bumps the group's
epoch, so that the target assignment is computed again. Only this coordinator reads the
hash back, so it need not be Kafka's function; it must be the same in every process and
across restarts (Python's `hash` of a str is not), hence a keyed digest of a canonical
encoding.

The racks of each partition's replicas count too (as in KIP-1101, where they are part of
the topic's hash), so that a change of racks computes the assignment again when assignors
use them; a topic whose racks are unknown hashes as it did before racks were read.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from coordinator_server.consumer_groups.heartbeat import ClusterTopics

NO_METADATA_HASH = 0
"""The hash of a group subscribed to nothing (and of a group written before hashes)."""


def subscribed_topics_hash(topic_names: Iterable[str], topics: ClusterTopics) -> int:
    """A signed 64-bit hash of each subscribed topic's name, id, partition count and, when
    known, its partitions' racks (a topic the cluster does not have counts by its name
    alone); NO_METADATA_HASH for none."""
    digest = hashlib.blake2b(digest_size=8, person=b"cg-topics-v1")
    empty = True
    for name in sorted(topic_names):
        empty = False
        encoded = name.encode()
        digest.update(len(encoded).to_bytes(2, "big"))
        digest.update(encoded)
        topic = topics.topic(name)
        if topic is None:
            digest.update(b"\x00")
        elif not topic.partition_racks:
            digest.update(b"\x01")
            digest.update(topic.topic_id)
            digest.update(topic.partition_count.to_bytes(4, "big"))
        else:
            digest.update(b"\x02")
            digest.update(topic.topic_id)
            digest.update(topic.partition_count.to_bytes(4, "big"))
            digest.update(b"".join(map(_encoded_racks, topic.partition_racks)))
    if empty:
        return NO_METADATA_HASH
    value = int.from_bytes(digest.digest(), "big", signed=True)
    # 0 says "none": a real subscription never hashes to it.
    return value or 1


@functools.lru_cache(maxsize=1024)
def _encoded_racks(racks: frozenset[str]) -> bytes:
    """One partition's racks, sorted, each with its length, after their number: a cluster
    has few distinct sets, so each is encoded once."""
    out = [len(racks).to_bytes(2, "big")]
    for rack in sorted(racks):
        encoded = rack.encode()
        out.append(len(encoded).to_bytes(2, "big"))
        out.append(encoded)
    return b"".join(out)


__all__ = ["NO_METADATA_HASH", "subscribed_topics_hash"]
