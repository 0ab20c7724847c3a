"""`ensure_topic`'s wait for a topic it created: until every partition's leader serves it,
polled with the metadata, bounded, and never for a topic that was there already."""

from __future__ import annotations

import logging

import pytest

from coordinator_server.storage.kafka import topic as kafka_topic
from coordinator_server.storage.kafka.metadata import TopicMetadata
from coordinator_server.storage.kafka.topic import OffsetsTopic, ensure_topic

TOPIC = OffsetsTopic(
    name="log",
    partitions=3,
    replication_factor=1,
    bootstrap_servers="127.0.0.1:1",
    client_id="test",
    request_timeout_ms=1000,
    ready_timeout_s=0.3,
)


class Cluster:
    """The topic (there from the start, or once created) with a leader for every partition,
    and what each ask of which partitions cannot be read yet answers, in turn (the last one
    from then on)."""

    def __init__(self, exists: bool, unreadable_answers: list[set[int] | Exception]) -> None:
        self.exists = exists
        self.answers = unreadable_answers
        self.created: list[OffsetsTopic] = []
        self.asked = 0

    async def metadata(self) -> TopicMetadata:
        leaders = dict.fromkeys(range(TOPIC.partitions), 1) if self.exists else {}
        return TopicMetadata(TOPIC.name, 0 if self.exists else 3, leaders, {1: ("h", 1)})

    async def create(self, topic: OffsetsTopic) -> None:
        self.created.append(topic)
        self.exists = True

    async def unreadable(self, leaders: dict[int, int]) -> set[int]:
        assert leaders == dict.fromkeys(range(TOPIC.partitions), 1)
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def on(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setattr(kafka_topic, "create_topic", cluster.create)
    monkeypatch.setattr(kafka_topic, "READY_POLL_S", 0.001)
    return cluster


async def test_a_created_topic_is_waited_on_until_every_partition_can_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[set[int] | Exception] = [{0, 1, 2}, OSError("refused"), {2}, set()]
    cluster = on(Cluster(False, answers), monkeypatch)
    assert await ensure_topic(TOPIC, cluster.metadata, cluster.unreadable) == 3
    assert cluster.created == [TOPIC]
    # A failed ask is asked again, like a partition not served yet; none after the answer.
    assert cluster.asked == 4


async def test_a_topic_that_was_there_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = on(Cluster(True, [{0}]), monkeypatch)
    assert await ensure_topic(TOPIC, cluster.metadata, cluster.unreadable) == 3
    assert cluster.created == [] and cluster.asked == 0


async def test_the_wait_ends_at_the_ready_timeout_and_says_what_is_left(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = on(Cluster(False, [{1, 2}]), monkeypatch)
    with caplog.at_level(logging.INFO, logger="coordinator_server.storage.kafka.log"):
        assert await ensure_topic(TOPIC, cluster.metadata, cluster.unreadable) == 3
    assert cluster.asked > 1
    assert (
        "topic log: not every partition could be read within 0 s (partitions [1, 2]); "
        "the loads wait for them" in caplog.text
    )
