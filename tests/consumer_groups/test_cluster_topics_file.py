"""The topics a node without a data cluster offers its consumer groups, from a JSON file:
the file's rules, the ids derived from names, the re-reads when the file changes and the
snapshots' versions; and the snapshot class itself."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from coordinator_server import cluster_topics_file
from coordinator_server.cluster_topics_file import (
    MAX_TOPIC_NAME_LENGTH,
    MAX_TOTAL_PARTITIONS,
    TOPIC_ID_NAMESPACE,
    StaticClusterTopics,
    read_cluster_topics_file,
    topic_id_of,
)
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ClusterTopicsSource,
)

LOGGER = "coordinator_server.cluster_topics_file"


def write(path: Path, content: Any) -> Path:
    """`content` as the file's JSON, replacing it at once (a rename, as an operator's tool
    would), with a modification time of its own."""
    staged = path.with_suffix(".tmp")
    staged.write_text(content if isinstance(content, str) else json.dumps(content))
    os.replace(staged, path)
    return path


@pytest.fixture
def topics_file(tmp_path: Path) -> Path:
    return write(tmp_path / "topics.json", {"orders": 12, "payments": 3})


# -- the snapshot ------------------------------------------------------------------------


def test_a_snapshot_answers_by_name_and_by_id_and_lists_names_without_internal_ones() -> None:
    orders = ClusterTopic(b"o" * 16, 12)
    offsets = ClusterTopic(b"c" * 16, 50, internal=True)
    snapshot = ClusterTopicsSnapshot({"orders": orders, "__consumer_offsets": offsets}, 7)

    assert snapshot.version == 7
    assert len(snapshot) == 2
    assert snapshot.topic("orders") == orders
    assert snapshot.topic("missing") is None
    assert snapshot.topic_name(b"c" * 16) == "__consumer_offsets"
    assert snapshot.topic_name(b"x" * 16) is None
    assert snapshot.topic_names() == ["__consumer_offsets", "orders"]
    assert snapshot.topic_names(include_internal=False) == ["orders"]
    # What a caller does with a list it is given never changes the snapshot.
    snapshot.topic_names().clear()
    assert snapshot.topic_names() == ["__consumer_offsets", "orders"]


def test_a_snapshot_is_version_0_by_default_and_of_copies_a_sources_descriptions() -> None:
    assert ClusterTopicsSnapshot({}).version == 0
    assert ClusterTopic(b"o" * 16, 1).internal is False

    class Described:
        topic_id = b"d" * 16
        partition_count = 2
        internal = True
        partition_racks = (frozenset({"r1"}), frozenset({"r1", "r2"}))

    snapshot = ClusterTopicsSnapshot.of({"d": Described()}, 3)
    assert snapshot.version == 3
    assert snapshot.topic("d") == ClusterTopic(
        b"d" * 16, 2, internal=True, partition_racks=Described.partition_racks
    )


# -- the file's rules and ids ------------------------------------------------------------


def test_ids_are_derived_from_names_for_good(topics_file: Path) -> None:
    topics = read_cluster_topics_file(topics_file, max_topics=10)

    assert topics == {
        "orders": ClusterTopic(topic_id_of("orders"), 12),
        "payments": ClusterTopic(topic_id_of("payments"), 3),
    }
    # Pinned: the log's records hold these ids, so they may never change.
    assert topic_id_of("orders").hex() == "bc902c57553153ffa51ad851df68401b"
    assert topic_id_of("payments").hex() == "685658cfbd605d2eafaed3ff99dc0f20"
    assert uuid.UUID(bytes=topic_id_of("orders")) == uuid.uuid5(TOPIC_ID_NAMESPACE, "orders")
    # Never Kafka's zero id nor its metadata topic's id (Uuid(0, 1)): version 5 is set.
    assert uuid.UUID(bytes=topic_id_of("")).version == 5


def test_kafkas_internal_topics_and_the_ones_named_internal_are_flagged(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "t.json",
        {"__consumer_offsets": 50, "__transaction_state": 50, "coordinator-log": 8, "a": 1},
    )
    topics = read_cluster_topics_file(path, max_topics=10, internal_topics={"coordinator-log"})

    assert {name for name, topic in topics.items() if topic.internal} == {
        "__consumer_offsets",
        "__transaction_state",
        "coordinator-log",
    }


def test_the_longest_name_and_the_most_partitions_are_accepted(tmp_path: Path) -> None:
    longest = "a" * MAX_TOPIC_NAME_LENGTH
    path = write(tmp_path / "t.json", {longest: MAX_TOTAL_PARTITIONS - 1, "._-Zz09": 1})

    topics = read_cluster_topics_file(path, max_topics=2)

    assert topics[longest].partition_count == MAX_TOTAL_PARTITIONS - 1
    assert topics["._-Zz09"].partition_count == 1


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object of topic names and partition counts, not list"),
        ('"orders"', "not str"),
        ({"": 1}, "a topic name is empty"),
        ({".": 1}, "topic name '.' is not allowed"),
        ({"..": 1}, "topic name '..' is not allowed"),
        ({"a" * (MAX_TOPIC_NAME_LENGTH + 1): 1}, "is 250 characters long, more than Kafka's 249"),
        ({"a b": 1}, "topic name 'a b' has a character Kafka does not allow"),
        ({"a/b": 1}, "has a character Kafka does not allow"),
        ({"é": 1}, "has a character Kafka does not allow"),
        ({"a": 0}, "topic 'a' has partition count 0, not an integer of at least 1"),
        ({"a": -3}, "partition count -3"),
        ({"a": 1.5}, "partition count 1.5"),
        ({"a": True}, "partition count true"),
        ({"a": "12"}, 'partition count "12"'),
        ({"a": None}, "partition count null"),
        (
            {"a": MAX_TOTAL_PARTITIONS, "b": 1},
            f"more than {MAX_TOTAL_PARTITIONS} partitions in all (at topic 'b')",
        ),
        ({"a": 1, "b": 1, "c": 1, "d": 1}, "names 4 topics, more than the 3 allowed"),
    ],
)
def test_a_file_that_breaks_a_rule_is_refused_in_one_line_naming_it(
    tmp_path: Path, content: Any, problem: str
) -> None:
    path = write(tmp_path / "topics.json", content)

    with pytest.raises(ValueError) as refused:
        read_cluster_topics_file(path, max_topics=3)

    message = str(refused.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_a_missing_or_oversized_file_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(ValueError, match=r"missing\.json: cannot be read: No such file"):
        read_cluster_topics_file(missing, max_topics=3)

    # Refused before it is parsed: its size is bounded by the number of topics allowed.
    huge = write(tmp_path / "huge.json", json.dumps({"a": 1}) + " " * 10_000)
    with pytest.raises(ValueError, match=r"huge\.json: more than 4608 bytes"):
        read_cluster_topics_file(huge, max_topics=1)


# -- the source ---------------------------------------------------------------------------


async def test_the_source_reads_the_file_at_start_and_answers_at_once(topics_file: Path) -> None:
    source = StaticClusterTopics(topics_file)
    assert source.snapshot().version == 0
    assert len(source.snapshot()) == 0
    await source.start()
    try:
        await source.wait_ready(0)
        snapshot = source.snapshot()
        assert snapshot.version == 1
        assert snapshot.topic("orders") == ClusterTopic(topic_id_of("orders"), 12)
        assert snapshot.topic_name(topic_id_of("payments")) == "payments"
        assert source.snapshot() is snapshot
        # Another node, or this one after a restart, derives the same ids.
        again = StaticClusterTopics(topics_file)
        await again.start()
        assert again.snapshot().topic("orders") == snapshot.topic("orders")
        await again.stop()
    finally:
        await source.stop()


async def test_a_bad_file_ends_the_start(tmp_path: Path) -> None:
    source = StaticClusterTopics(write(tmp_path / "t.json", {"a": 0}))
    with pytest.raises(ValueError, match=r"t\.json: topic 'a' has partition count 0"):
        await source.start()
    with pytest.raises(ValueError, match="refresh_interval_ms must be at least 1"):
        StaticClusterTopics(tmp_path / "t.json", refresh_interval_ms=0)


def satisfies_the_protocol(source: StaticClusterTopics) -> ClusterTopicsSource:
    return source


async def test_a_changed_file_is_read_again_by_the_task_with_the_next_version(
    topics_file: Path,
) -> None:
    source = satisfies_the_protocol(StaticClusterTopics(topics_file, refresh_interval_ms=20))
    await source.start()
    try:
        write(topics_file, {"orders": 16, "refunds": 1})
        for _ in range(1000):
            if source.snapshot().version >= 2:
                break
            await asyncio.sleep(0.01)
        snapshot = source.snapshot()
        assert snapshot.version == 2
        assert snapshot.topic_names() == ["orders", "refunds"]
        assert snapshot.topic("orders") == ClusterTopic(topic_id_of("orders"), 16)

        # The same topics written again: a new file, the same snapshot.
        write(topics_file, {"refunds": 1, "orders": 16})
        await asyncio.sleep(0.2)
        assert source.snapshot() is snapshot
    finally:
        await source.stop()


async def test_refresh_now_reads_a_changed_file_at_once(topics_file: Path) -> None:
    source = StaticClusterTopics(
        topics_file, refresh_interval_ms=600_000, min_refresh_interval_ms=0
    )
    await source.start()
    try:
        write(topics_file, {"orders": 12, "payments": 3, "refunds": 2})
        await source.refresh_now()
        assert source.snapshot().version == 2
        assert source.snapshot().topic("refunds") == ClusterTopic(topic_id_of("refunds"), 2)
        # Nothing changed: nothing read, the same version.
        await source.refresh_now()
        assert source.snapshot().version == 2
    finally:
        await source.stop()


async def test_a_file_broken_later_keeps_the_last_snapshot_with_one_warning_until_fixed(
    topics_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = StaticClusterTopics(
        topics_file, refresh_interval_ms=600_000, min_refresh_interval_ms=0
    )
    await source.start()
    try:
        good = source.snapshot()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            write(topics_file, {"orders": "twelve"})
            await source.refresh_now()
            write(topics_file, "{")
            await source.refresh_now()
            await asyncio.to_thread(topics_file.unlink)
            await source.refresh_now()
            assert source.snapshot() is good
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1
            assert "kept as last read (2 topics)" in warnings[0].getMessage()
            assert 'partition count "twelve"' in warnings[0].getMessage()

            write(topics_file, {"orders": 12})
            await source.refresh_now()
        assert source.snapshot().version == good.version + 1
        assert source.snapshot().topic_names() == ["orders"]
        assert f"{topics_file} is read again" in caplog.text
    finally:
        await source.stop()


async def test_refresh_now_is_shared_and_spaced(
    topics_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[float] = []
    file_key = cluster_topics_file._file_key

    def counted(path: str) -> tuple[int, int, int] | None:
        looks.append(time.monotonic())
        return file_key(path)

    monkeypatch.setattr(cluster_topics_file, "_file_key", counted)
    source = StaticClusterTopics(
        topics_file, refresh_interval_ms=600_000, min_refresh_interval_ms=300
    )
    await source.start()
    try:
        started = time.monotonic()
        looks.clear()
        # Many heartbeats asking at once: one look, after the bound since the start's read.
        await asyncio.gather(*(source.refresh_now() for _ in range(50)))
        assert len(looks) == 1
        first = looks[0]
        assert first - started >= 0.2
        await source.refresh_now()
        assert len(looks) == 2
        assert looks[1] - first >= 0.29
    finally:
        await source.stop()


async def test_stop_ends_the_watch_and_a_stopped_source_keeps_its_snapshot(
    topics_file: Path,
) -> None:
    source = StaticClusterTopics(topics_file, refresh_interval_ms=10)
    await source.start()
    snapshot = source.snapshot()
    await source.stop()
    write(topics_file, {"other": 1})
    await asyncio.sleep(0.1)
    assert source.snapshot() is snapshot
