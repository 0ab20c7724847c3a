"""The data cluster's topics from a JSON file, for a node without a data cluster to read them
from (the embedded default): consumer groups then subscribe to the topics the file names.

The file maps each topic's name to its partition count::

    {"orders": 12, "payments": 3}

Each topic's id is derived from its name (a version 5 UUID in a namespace of this project's
own, `TOPIC_ID_NAMESPACE`), not drawn at random: the log's records name partitions by topic
id, so the same file must give the same ids across restarts (and on every node reading it),
or the groups' assignments read back from the log would name topics that no longer exist.
Unlike Kafka's, an id is therefore not unique to one life of a topic: a topic taken out of the
file and put back has its old id again. No derived id is Kafka's zero or metadata topic id
(a version 5 UUID has its version bits set).

The file is checked as Kafka checks what a cluster may hold: names of Kafka's legal
characters (`[a-zA-Z0-9._-]`), at most 249 of them, neither "." nor ".."; counts of at least
1, and at most `MAX_TOTAL_PARTITIONS` for all topics together. A file that breaks a rule, is
not JSON or cannot be read raises ValueError with one line naming the file and the problem.

`StaticClusterTopics` reads the file at `start()` (a bad file ends the start), then a task of
its own looks at the file's modification time, size and inode every `refresh_interval_ms`
and reads it again when one changed: a snapshot with other topics gets the next version. A
file that breaks a rule later keeps the last good snapshot, with one WARNING until it is
fixed. `refresh_now()` looks at the file at once (at most every `min_refresh_interval_ms`).
The reads run in a worker thread: a file of many topics is parsed off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Final

from coordinator_server.consumer_groups.heartbeat import ClusterTopic, ClusterTopicsSnapshot

__all__ = [
    "KAFKA_INTERNAL_TOPICS",
    "MAX_TOPIC_NAME_LENGTH",
    "MAX_TOTAL_PARTITIONS",
    "TOPIC_ID_NAMESPACE",
    "StaticClusterTopics",
    "read_cluster_topics_file",
    "topic_id_of",
]

logger = logging.getLogger(__name__)

TOPIC_ID_NAMESPACE: Final = uuid.UUID("5d0c3f0e-8a7b-4c1e-9f42-6b1d2e7a9c35")
"""The namespace of the topic ids derived from names: this project's own, fixed for good
(changing it would change every id the log's records hold)."""

MAX_TOPIC_NAME_LENGTH: Final = 249
"""Kafka's longest topic name (`Topic.MAX_NAME_LENGTH`)."""

MAX_TOTAL_PARTITIONS: Final = 1_000_000
"""The most partitions the file may give all its topics together. Kafka bounds a topic's
count only by what its controller accepts (far more than a consumer group can be assigned);
a million partitions is past what one Kafka cluster is run with, yet keeps a mistyped count
(a stray zero or three) from becoming assignments of millions of partitions."""

KAFKA_INTERNAL_TOPICS: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state"}
)
"""Kafka's internal topics (`Topic.isInternal`): flagged internal when the file names them."""

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")

# Bytes a topic may take in the file, on average, before the file is refused unread: a name,
# its count and the JSON around them with generous indentation.
_BYTES_PER_TOPIC = 512
_BYTES_OVERHEAD = 4096


def topic_id_of(name: str) -> bytes:
    """The id of the topic of that name: the same for the same name, always."""
    return uuid.uuid5(TOPIC_ID_NAMESPACE, name).bytes


def _name_problem(name: str) -> str | None:
    if not name:
        return "a topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"topic name {name[:40]!r}... is {len(name)} characters long, more than "
            f"Kafka's {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_NAME.fullmatch(name):
        return (
            f"topic name {name!r} has a character Kafka does not allow (only ASCII letters, "
            "digits, '.', '_' and '-')"
        )
    return None


def read_cluster_topics_file(
    path: str | os.PathLike[str],
    *,
    max_topics: int,
    internal_topics: Collection[str] = (),
) -> dict[str, ClusterTopic]:
    """The topics `path` names, by name, each with its derived id; a topic of
    `KAFKA_INTERNAL_TOPICS` or `internal_topics` flagged internal. Raises ValueError, one line
    naming the file and the problem, for a file that cannot be read or breaks a rule (more
    than `max_topics` topics among them)."""
    where = os.fspath(path)
    limit = max_topics * _BYTES_PER_TOPIC + _BYTES_OVERHEAD
    try:
        with open(where, "rb") as file:
            text = file.read(limit + 1)
    except OSError as error:
        raise ValueError(f"{where}: cannot be read: {error.strerror or error}") from error
    if len(text) > limit:
        raise ValueError(
            f"{where}: more than {limit} bytes, too large for at most {max_topics} topics"
        )
    try:
        content = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: not JSON: {error}") from error
    if not isinstance(content, dict):
        raise ValueError(
            f"{where}: must be a JSON object of topic names and partition counts, "
            f"not {type(content).__name__}"
        )
    if len(content) > max_topics:
        raise ValueError(
            f"{where}: names {len(content)} topics, more than the {max_topics} allowed"
        )
    topics: dict[str, ClusterTopic] = {}
    total = 0
    for name, count in content.items():
        problem = _name_problem(name)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
        # JSON's true and false are Python's ints too: refused as any other non-integer.
        if type(count) is not int or count < 1:
            raise ValueError(
                f"{where}: topic {name!r} has partition count {json.dumps(count)}, not an "
                "integer of at least 1"
            )
        total += count
        if total > MAX_TOTAL_PARTITIONS:
            raise ValueError(
                f"{where}: more than {MAX_TOTAL_PARTITIONS} partitions in all (at topic {name!r})"
            )
        internal = name in KAFKA_INTERNAL_TOPICS or name in internal_topics
        topics[name] = ClusterTopic(topic_id_of(name), count, internal)
    return topics


def _file_key(path: str) -> tuple[int, int, int] | None:
    """What tells that the file changed: its modification time, size and inode (a file
    replaced by a rename has another inode, maybe the same time); None when it is missing."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class StaticClusterTopics:
    """`ClusterTopicsSource` over a JSON file (the module's docstring says how): the topics
    a node without a data cluster offers its consumer groups."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        refresh_interval_ms: int = 30_000,
        min_refresh_interval_ms: int = 100,
        max_topics: int = 100_000,
        internal_topics: Collection[str] = (),
    ) -> None:
        for name, value, least in (
            ("refresh_interval_ms", refresh_interval_ms, 1),
            ("min_refresh_interval_ms", min_refresh_interval_ms, 0),
            ("max_topics", max_topics, 1),
        ):
            if value < least:
                raise ValueError(f"{name} must be at least {least}, got {value}")
        self._path = os.fspath(path)
        self._refresh_interval_s = refresh_interval_ms / 1000
        self._min_refresh_interval_s = min_refresh_interval_ms / 1000
        self._max_topics = max_topics
        self._internal_topics = frozenset(internal_topics)
        self._topics: dict[str, ClusterTopic] = {}
        self._snapshot = ClusterTopicsSnapshot({}, 0)
        self._key: tuple[int, int, int] | None = None
        self._started = False
        self._task: asyncio.Task[None] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._last_checked = float("-inf")
        self._failing = False

    @property
    def path(self) -> Path:
        return Path(self._path)

    def snapshot(self) -> ClusterTopicsSnapshot:
        return self._snapshot

    async def start(self) -> None:
        """Read the file (ValueError for a bad one) and start watching it."""
        if self._started:
            raise RuntimeError("a StaticClusterTopics starts once")
        key = await asyncio.to_thread(_file_key, self._path)
        topics = await asyncio.to_thread(self._read)
        self._started = True
        self._key = key
        self._last_checked = asyncio.get_running_loop().time()
        self._take(topics)
        logger.info("%d topics offered to consumer groups, from %s", len(topics), self._path)
        self._task = asyncio.create_task(self._watch(), name="cluster-topics-file")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._checking) if t is not None]
        self._task = self._checking = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def wait_ready(self, timeout_s: float) -> None:
        """Ready once started: `start()` reads the file."""
        if not self._started:
            raise RuntimeError("StaticClusterTopics.wait_ready before start")

    async def refresh_now(self) -> None:
        """Look at the file now (or `min_refresh_interval_ms` after the last look), reading it
        again if it changed. Callers meanwhile share the one look."""
        if not self._started:
            return
        checking = self._checking
        if checking is None or checking.done():
            checking = self._checking = asyncio.create_task(self._check_when_due())
        await asyncio.wait([checking])

    async def _check_when_due(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._last_checked + self._min_refresh_interval_s - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        self._last_checked = loop.time()
        await self._check()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # A look refresh_now took meanwhile moves the next one later.
            delay = self._last_checked + self._refresh_interval_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            await self.refresh_now()

    async def _check(self) -> None:
        # The key before the content: a change made while the file is read is seen at the
        # next look, by a key that differs again.
        key = await asyncio.to_thread(_file_key, self._path)
        if key == self._key:
            return
        self._key = key
        try:
            topics = await asyncio.to_thread(self._read)
        except ValueError as error:
            if not self._failing:
                self._failing = True
                logger.warning(
                    "the topics offered to consumer groups are kept as last read (%d topics): %s",
                    len(self._topics),
                    error,
                )
            return
        if self._failing:
            self._failing = False
            logger.info("%s is read again", self._path)
        self._take(topics)

    def _read(self) -> dict[str, ClusterTopic]:
        return read_cluster_topics_file(
            self._path, max_topics=self._max_topics, internal_topics=self._internal_topics
        )

    def _take(self, topics: dict[str, ClusterTopic]) -> None:
        if topics != self._topics:
            self._topics = topics
            self._snapshot = ClusterTopicsSnapshot(topics, self._snapshot.version + 1)
            logger.debug(
                "%s: %d topics, version %d", self._path, len(topics), self._snapshot.version
            )
