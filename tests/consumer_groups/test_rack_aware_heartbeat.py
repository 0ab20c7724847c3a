"""Rack-aware assignment through the heartbeat: members that send a rack id are given the
partitions with a replica in their rack (the cluster's topics carrying each partition's
racks), and the group's metadata hash moves when the racks change."""

from __future__ import annotations

import pytest
from test_consumer_group_heartbeat import GROUP, NOW_MS, join, replay

from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    subscribed_topic_metadata,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.timeline import SnapshotRegistry

FOO = bytes(range(1, 17))
RACKS = ("r0", "r1", "r2")
# Partition p's replica in rack p % 3, its second one in the next rack's.
FOO_RACKS = tuple(frozenset({RACKS[p % 3], RACKS[(p + 1) % 3]}) for p in range(6))
ONE_RACK_EACH = tuple(frozenset({RACKS[p % 3]}) for p in range(6))


def topics_with(racks: tuple[frozenset[str], ...]) -> ClusterTopicsSnapshot:
    return ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 6, partition_racks=racks)})


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_with_rack_ids_are_given_their_rack_local_partitions(assignor: str) -> None:
    topics = topics_with(ONE_RACK_EACH)
    manager = ConsumerGroupManager(SnapshotRegistry(), 100, topics=lambda: topics)
    for member_id, rack in (("m-c", "r2"), ("m-a", "r0"), ("m-b", "r1")):
        request = join(member_id, "foo", assignor=assignor).replace(rack_id=rack)
        result = manager.heartbeat(
            request, client_id="client", client_host="/10.0.0.1", topics=topics, now_ms=NOW_MS
        )
        assert result.response is not None and result.response.error_code == 0
        for record in result.records:
            replay(manager, record)
    group = manager.group(GROUP)
    assert group is not None
    targets = {
        m: set(dict(partitions)[FOO]) for m, partitions in group.target_assignments().items()
    }
    rack_of = {"m-a": "r0", "m-b": "r1", "m-c": "r2"}
    if assignor == "range":
        # Not sticky: each member's share is the partitions of its rack.
        assert targets == {"m-a": {0, 3}, "m-b": {1, 4}, "m-c": {2, 5}}
    else:
        # Sticky: m-c, first alone with all six, kept its own rack's when the others came;
        # the others got what was handed out, the rack-local first where left.
        assert [len(targets[m]) for m in sorted(targets)] == [2, 2, 2]
        assert targets["m-c"] == {2, 5}
        local = sum(1 for m, ps in targets.items() for p in ps if rack_of[m] in ONE_RACK_EACH[p])
        assert local >= 4


def test_the_assignor_is_told_the_racks_the_cluster_knows_for_every_partition() -> None:
    metadata = subscribed_topic_metadata(topics_with(FOO_RACKS), {FOO: 6})
    assert metadata.racks_for_partition(FOO, 1) == {"r1", "r2"}
    assert list(metadata.topic_racks(FOO)) == list(FOO_RACKS)
    # Racks read for another number of partitions than the one assigned say nothing.
    assert subscribed_topic_metadata(topics_with(FOO_RACKS), {FOO: 7}).topic_racks(FOO) == ()
    assert subscribed_topic_metadata(topics_with(()), {FOO: 6}).topic_racks(FOO) == ()


def test_the_metadata_hash_moves_when_the_racks_change() -> None:
    without = subscribed_topics_hash({"foo"}, topics_with(()))
    with_racks = subscribed_topics_hash({"foo"}, topics_with(FOO_RACKS))
    other_racks = subscribed_topics_hash({"foo"}, topics_with(ONE_RACK_EACH))
    assert len({without, with_racks, other_racks}) == 3
    assert subscribed_topics_hash({"foo"}, topics_with(FOO_RACKS)) == with_racks
    # A topic without racks hashes as before racks were read (the value then, pinned): groups
    # written then are not moved on by an upgrade.
    assert without == -6365461962998220471
