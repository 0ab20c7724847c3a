"""The assignor's timing (`bench consumer-groups`' table, and the script in
tests/consumer_groups): a row per subscription type, each with its times and racks, the
rack-aware path when racks are asked for."""

from __future__ import annotations

from coordinator_server.consumer_groups.assignors.components import independent_parts
from coordinator_server.tools.bench import assignor_time


def test_a_small_group_with_racks_is_timed_on_each_kind_of_subscriptions() -> None:
    rows = assignor_time.measure(20, 4, 40, 1, "uniform", racks=2)
    ours = [row for row in rows if row["target"] == "ours"]
    assert [row["subscriptions"] for row in ours] == ["homogeneous", "heterogeneous", "overlapping"]
    for row in ours:
        assert row["racks"] == 2 and row["rounds"] == 1
        assert 0 < row["fresh_best_ms"] <= row["fresh_ms"]
        assert 0 < row["sticky_best_ms"] <= row["sticky_ms"]
    # Kafka's published figure is beside ours; the ratio only on Kafka's own group.
    assert rows[-1]["target"] == "kafka (KIP-1263)"


def test_members_and_partitions_get_racks_only_when_asked() -> None:
    subscribed = assignor_time.subscriptions(4, [b"\x01" * 16], "homogeneous")
    spec = assignor_time._spec(subscribed, None, racks=3)
    assert [m.rack_id for m in spec.members.values()] == ["rack-0", "rack-1", "rack-2", "rack-0"]
    assert all(m.rack_id is None for m in assignor_time._spec(subscribed, None).members.values())
    assert assignor_time._partition_racks(4, 3) == (
        frozenset({"rack-0", "rack-1"}),
        frozenset({"rack-1", "rack-2"}),
        frozenset({"rack-2", "rack-0"}),
        frozenset({"rack-0", "rack-1"}),
    )


def test_the_kinds_of_subscriptions_split_the_group_as_named() -> None:
    """Heterogeneous: five buckets sharing nothing (five parts); overlapping: each bucket also
    subscribed to half of the next one's topics (one part)."""
    topics = [n.to_bytes(16, "big") for n in range(10)]
    heterogeneous = assignor_time.subscriptions(10, topics, "heterogeneous")
    assert heterogeneous["member-0"] == frozenset(topics[0:2])
    assert heterogeneous["member-9"] == frozenset(topics[8:10])
    overlapping = assignor_time.subscriptions(10, topics, "overlapping")
    assert overlapping["member-0"] == frozenset(topics[0:3])
    assert overlapping["member-9"] == frozenset([*topics[8:10], topics[0]])
    parts = independent_parts(assignor_time._spec(heterogeneous, None))
    assert parts is not None and len(parts) == 5
    assert independent_parts(assignor_time._spec(overlapping, None)) is None
