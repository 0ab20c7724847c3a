"""The `--group-consumer-*` settings as Kafka checks them, where a node reads the data cluster's
topics from, and the consumer group service's read of them again for a topic it lacks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError

from coordinator_server.cluster_topics_file import StaticClusterTopics
from coordinator_server.config import CoordinatorConfig
from coordinator_server.consumer_group_settings import KNOWN_ASSIGNORS
from coordinator_server.consumer_groups.assignors import ASSIGNORS
from coordinator_server.consumer_groups.heartbeat import (
    NO_CLUSTER_TOPICS,
    ClusterTopic,
    ClusterTopicsSnapshot,
)
from coordinator_server.node_consumer_groups import NodeConsumerGroups, consumer_group_config
from coordinator_server.service import consumer_group_service
from coordinator_server.service.consumer_group_service import ConsumerGroupService
from coordinator_server.service.limits import RequestLimits
from coordinator_server.starting import StartError
from coordinator_server.storage.kafka.cluster_topics import KafkaClusterTopics


def test_the_settings_know_the_assignors_there_are() -> None:
    assert set(KNOWN_ASSIGNORS) == set(ASSIGNORS)


def test_assignors_by_kafkas_names_and_class_names_in_order() -> None:
    config = CoordinatorConfig(
        group_consumer_assignors=(
            "range, org.apache.kafka.coordinator.group.assignor.UniformAssignor, range"
        )
    )
    assert list(consumer_group_config(config).assignors) == ["range", "uniform"]
    assert consumer_group_config(config).default_assignor == "range"


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"group_consumer_assignors": "uniform,sticky"}, "unknown assignor 'sticky'"),
        ({"group_consumer_assignors": " , "}, "at least one assignor"),
        ({"group_consumer_session_timeout_ms": 30_000}, "group-consumer-session-timeout-ms"),
        ({"group_consumer_heartbeat_interval_ms": 20_000}, "group-consumer-heartbeat-interval-ms"),
        (
            {
                "group_consumer_min_session_timeout_ms": 5_000,
                "group_consumer_session_timeout_ms": 5_000,
            },
            "less than group-consumer-session-timeout-ms",
        ),
    ],
)
def test_settings_kafka_refuses_stop_the_start(settings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        CoordinatorConfig(**settings)


def test_where_a_node_reads_the_topics_from(tmp_path: Path) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"orders": 3}))
    assert NodeConsumerGroups(CoordinatorConfig()).source is None
    assert NodeConsumerGroups(CoordinatorConfig()).topics() is NO_CLUSTER_TOPICS
    from_kafka = NodeConsumerGroups(CoordinatorConfig(lag_bootstrap_servers="127.0.0.1:1"))
    assert isinstance(from_kafka.source, KafkaClusterTopics)
    # A file given with a data cluster is used instead of the cluster's metadata.
    both = NodeConsumerGroups(
        CoordinatorConfig(lag_bootstrap_servers="127.0.0.1:1", group_consumer_topics_file=topics)
    )
    assert isinstance(both.source, StaticClusterTopics)


async def test_a_topics_file_that_cannot_be_read_ends_the_start_in_one_line(
    tmp_path: Path,
) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"orders": 0}')
    node = NodeConsumerGroups(CoordinatorConfig(group_consumer_topics_file=topics))
    with pytest.raises(StartError, match=r"topics\.json"):
        await node.start(asyncio.Event())
    await node.stop()


class _Source:
    """The topics as a heartbeat's service reads them, and its reads again: each read waits
    for the test to let it end, and then shows the topics `appear` has given."""

    def __init__(self) -> None:
        self.snapshot = ClusterTopicsSnapshot({"orders": ClusterTopic(b"\x01" * 16, 3)})
        self.reads = 0
        self.ended = asyncio.Event()
        self.release = asyncio.Event()
        self.appear: dict[str, ClusterTopic] = {}

    async def refresh_now(self) -> None:
        self.reads += 1
        await self.release.wait()
        self.release.clear()
        topics = {name: self.snapshot.topic(name) for name in self.snapshot.topic_names()}
        self.snapshot = ClusterTopicsSnapshot(
            {**{k: v for k, v in topics.items() if v is not None}, **self.appear}
        )
        self.ended.set()

    async def read(self) -> None:
        """Let one read end, and wait until it has."""
        self.ended.clear()
        self.release.set()
        await asyncio.wait_for(self.ended.wait(), 5)
        await asyncio.sleep(0)


def service_of(source: _Source, max_subscribed_topics: int = 10) -> ConsumerGroupService:
    routing = SimpleNamespace(partition_for=lambda group_id: 0)
    return ConsumerGroupService(
        cast(Any, None),
        cast(Any, routing),
        RequestLimits(max_subscribed_topics=max_subscribed_topics),
        None,
        topics=lambda: source.snapshot,
        refresh_topics=source.refresh_now,
    )


async def test_a_topic_not_read_yet_is_read_for_until_it_appears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_group_service, "WANTED_READ_FIRST_S", 0.01)
    source = _Source()
    service = service_of(source)
    service._maybe_refresh_topics(["orders"])
    await asyncio.sleep(0.05)
    assert source.reads == 0, "every topic is known: nothing to read"

    waits = service._maybe_refresh_topics(["orders", "created-since"])
    # A heartbeat naming it again while it is read for does not wait for the read.
    assert service._maybe_refresh_topics(["created-since"]) is None
    await asyncio.sleep(0)
    assert source.reads == 1, "one read at a time, whoever asks"
    assert waits is not None and not waits.done(), "the first waits for the read to end"
    # Not there yet: read again after a pause, though no heartbeat names it again (a
    # member names its topics only when they change).
    await source.read()
    assert waits.done()
    await asyncio.sleep(0.05)
    assert source.reads == 2
    source.appear = {"created-since": ClusterTopic(b"\x02" * 16, 1)}
    await source.read()
    await asyncio.sleep(0.1)
    assert source.reads == 2, "the topic appeared: no more reads"
    assert service._wanted == {}


async def test_topics_that_never_appear_are_read_for_ever_less_often_then_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_group_service, "WANTED_READ_FIRST_S", 0.01)
    monkeypatch.setattr(consumer_group_service, "WANTED_READ_MAX_S", 0.04)
    monkeypatch.setattr(consumer_group_service, "WANTED_FOR_S", 0.3)
    source = _Source()
    source.release.set()
    # The names wanted are bounded: the oldest are dropped.
    service = service_of(source, max_subscribed_topics=2)
    service._maybe_refresh_topics(["a", "b", "c"])
    assert list(service._wanted) == ["b", "c"]
    started = asyncio.get_running_loop().time()
    task = service._reading_wanted
    assert task is not None
    # Every read returns at once; the pauses double to their bound, and the reads stop
    # after WANTED_FOR_S.
    while not task.done():
        source.release.set()
        await asyncio.sleep(0.005)
    elapsed = asyncio.get_running_loop().time() - started
    assert 0.3 <= elapsed < 2
    # 0.01 + 0.02 + 0.04 * n over 0.3 s: about ten reads, not one per pause of the first.
    assert 4 <= source.reads <= 12, source.reads
    assert service._wanted == {}


async def test_a_heartbeat_waits_for_a_read_that_hangs_no_longer_than_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_group_service, "TOPICS_READ_WAIT_S", 0.05)
    source = _Source()  # its reads end only when the test lets them: this one never does
    service = service_of(source, max_subscribed_topics=1000)
    started = asyncio.get_running_loop().time()
    waits = [service._maybe_refresh_topics([f"missing-{n}"]) for n in range(100)]
    assert all(wait is not None for wait in waits)
    await asyncio.wait_for(asyncio.gather(*(w for w in waits if w is not None)), 2)
    assert asyncio.get_running_loop().time() - started < 1
    assert source.reads == 1
    # The heartbeats the timer let go are dropped by the next that waits, while the read
    # still hangs.
    later = service._maybe_refresh_topics(["missing-later"])
    assert later is not None and service._read_waiters == [later]
    task = service._reading_wanted
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
