"""Our server-side assignors alone, timed on the group Kafka quotes for its own: 1,000 members,
1,000 topics, 50,000 partitions spread evenly over the topics.

Kafka's figure is in KIP-1263 (Group Coordinator Assignment Batching and Offload), whose
motivation says that the uniform assignor without racks, on heterogeneous subscriptions (its
slowest path), takes 15 to 20 ms on that group. The subscriptions are made as Kafka's
assignor benchmark makes them: every member subscribed to every topic (homogeneous), or the
members and the topics cut into five buckets, each member subscribing to its bucket's topics
(heterogeneous). A third kind is ours: each bucket also subscribed to the first half of the
next bucket's topics (overlapping), so that the group is one part and the heterogeneous
builder runs over all of it (the `uniform` assignor cuts Kafka's heterogeneous group into its
five buckets: `assignors/components.py`).

- fresh: the first assignment, nobody owning anything;
- sticky: the next one, with one more member joining.

With `racks` N, member m is in rack m % N and each partition p has two replicas, in racks
p % N and (p + 1) % N: the rack-aware assignment.

A figure is the process's CPU time for one assignment, building the group's spec included
(as the coordinator builds it), the median of the rounds, with the best beside it; the
assignment is freed after the clock stops, as the coordinator keeps the target it computes.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping
from typing import Any

from coordinator_server.consumer_groups.assignors import ASSIGNORS
from coordinator_server.consumer_groups.assignors.api import (
    EMPTY_ASSIGNMENT,
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    SubscribedTopicMetadata,
)

BUCKETS = 5
# KIP-1263's figure for Kafka's uniform assignor on heterogeneous subscriptions, in ms.
KAFKA_PUBLISHED_MS = (15.0, 20.0)
KAFKA_SOURCE = "KIP-1263"
# The group of that figure: members, topics, partitions.
KAFKA_GROUP = (1000, 1000, 50_000)

ASSIGNOR_COLUMNS = [
    "target",
    "assignor",
    "subscriptions",
    "members",
    "topics",
    "partitions",
    "fresh_ms",
    "fresh_best_ms",
    "sticky_ms",
    "sticky_best_ms",
]


def _topic_id(n: int) -> bytes:
    return n.to_bytes(16, "big")


SUBSCRIPTION_KINDS = ("homogeneous", "heterogeneous", "overlapping")


def subscriptions(members: int, topics: list[bytes], kind: str) -> dict[str, frozenset[bytes]]:
    if kind == "homogeneous":
        every = frozenset(topics)
        return {f"member-{m}": every for m in range(members)}
    buckets = min(BUCKETS, members)
    topics_per_bucket = -(-len(topics) // buckets)
    members_per_bucket = -(-members // buckets)
    # Overlapping: the first half of the next bucket's topics too (the last bucket's, the
    # first's), so that every bucket shares topics with two others.
    shared = topics_per_bucket // 2 if kind == "overlapping" else 0
    chosen: dict[str, frozenset[bytes]] = {}
    for m in range(members):
        bucket = m // members_per_bucket
        own = topics[bucket * topics_per_bucket :][:topics_per_bucket]
        following = ((bucket + 1) % buckets) * topics_per_bucket
        chosen[f"member-{m}"] = frozenset(own + topics[following:][:shared])
    return chosen


def _spec(
    subscribed: Mapping[str, frozenset[bytes]], previous: GroupAssignment | None, racks: int = 0
) -> GroupSpec:
    return GroupSpec(
        {
            member_id: MemberSubscription(
                topics,
                previous.members.get(member_id, EMPTY_ASSIGNMENT) if previous else EMPTY_ASSIGNMENT,
                rack_id=f"rack-{n % racks}" if racks else None,
            )
            for n, (member_id, topics) in enumerate(subscribed.items())
        }
    )


def _partition_racks(count: int, racks: int) -> tuple[frozenset[str], ...]:
    names = [f"rack-{r}" for r in range(racks)]
    sets = [frozenset({names[r], names[(r + 1) % racks]}) for r in range(racks)]
    return tuple(sets[p % racks] for p in range(count))


def _time(
    rounds: int,
    assignor: PartitionAssignor,
    subscribed: Mapping[str, frozenset[bytes]],
    previous: GroupAssignment | None,
    metadata: SubscribedTopicMetadata,
    racks: int = 0,
) -> tuple[float, float]:
    """Median and best CPU milliseconds of one assignment over `rounds`."""
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.process_time()
        result = assignor.assign(_spec(subscribed, previous, racks), metadata)
        times.append((time.process_time() - started) * 1000)
        # Freed after the clock stops: the coordinator keeps the target it computes.
        del result
    return statistics.median(times), min(times)


def measure(
    members: int,
    topics: int,
    partitions: int,
    rounds: int,
    assignor_name: str = "uniform",
    racks: int = 0,
) -> list[dict[str, Any]]:
    """A row per subscription type for our assignor, then Kafka's published figure and, on
    Kafka's group, our heterogeneous figures over its low end (15 ms: ahead of Kafka only
    below 1)."""
    if members < 1 or topics < 1 or partitions < topics:
        raise ValueError("the assignor needs a member, a topic and a partition per topic")
    topic_ids = [_topic_id(n) for n in range(topics)]
    per_topic, extra = divmod(partitions, topics)
    counts = {t: per_topic + (1 if n < extra else 0) for n, t in enumerate(topic_ids)}
    metadata = SubscribedTopicMetadata(
        counts,
        {t: _partition_racks(count, racks) for t, count in counts.items()} if racks else {},
    )
    assignor = ASSIGNORS[assignor_name]
    rows: list[dict[str, Any]] = []
    for kind in SUBSCRIPTION_KINDS:
        subscribed = subscriptions(members, topic_ids, kind)
        first = assignor.assign(_spec(subscribed, None, racks), metadata)
        joined = subscriptions(members + 1, topic_ids, kind)
        fresh = _time(max(1, rounds), assignor, subscribed, None, metadata, racks)
        sticky = _time(max(1, rounds), assignor, joined, first, metadata, racks)
        rows.append(
            {
                "target": "ours",
                "assignor": assignor_name,
                "subscriptions": kind,
                "members": members,
                "topics": topics,
                "partitions": partitions,
                "fresh_ms": round(fresh[0], 2),
                "fresh_best_ms": round(fresh[1], 2),
                "sticky_ms": round(sticky[0], 2),
                "sticky_best_ms": round(sticky[1], 2),
                "rounds": max(1, rounds),
                "racks": racks,
            }
        )
    low, high = KAFKA_PUBLISHED_MS
    rows.append(
        {
            "target": f"kafka ({KAFKA_SOURCE})",
            "assignor": "uniform",
            "subscriptions": "heterogeneous",
            "members": 1000,
            "topics": 1000,
            "partitions": 50_000,
            "fresh_ms": f"{low:g}-{high:g}",
            "source": f"{KAFKA_SOURCE}'s motivation: Kafka's uniform assignor without racks "
            "on heterogeneous subscriptions, 1,000 members x 1,000 topics x 50,000 "
            "partitions, 15 to 20 ms",
        }
    )
    if (members, topics, partitions) != KAFKA_GROUP:
        return rows
    heterogeneous = rows[1]
    rows.append(
        {
            "target": f"ours/kafka {low:g} ms",
            "assignor": assignor_name,
            "subscriptions": "heterogeneous",
            "fresh_ms": float(f"{heterogeneous['fresh_ms'] / low:.3g}"),
            "sticky_ms": float(f"{heterogeneous['sticky_ms'] / low:.3g}"),
        }
    )
    return rows
