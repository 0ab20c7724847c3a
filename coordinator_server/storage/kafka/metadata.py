"""The log topic's metadata, read without ever creating the topic, and the watch over it.

A broker that allows it (`auto.create.topics.enable`) creates any topic a MetadataRequest
names, unless the request forbids it: aiokafka's MetadataRequest allows it by default from v4
on, and versions before 4 cannot forbid it at all. A log topic created that way has the
broker's defaults (another partition count, so groups silently move partitions; no
compaction), and an empty log served as if it were the real one loses every group and offset.
So every metadata request about the log goes through `fetch_topic_metadata`, at v4 or later
with allow_auto_topic_creation false, and aiokafka's client is never told about the topic:
its background refresh then asks for every topic, which creates none.

`TopicWatcher` checks the answer each time the metadata is read (periodically every
`metadata.max.age.ms`, and on every refresh the produce and load paths make): a topic that is
gone, or whose partition count is not the one the log started with, means the log's state is
lost or misplaced. The log then stops for good (see `KafkaLog`); only an operator can tell a
deliberate change from an accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from coordinator_client.kafka_metadata_request import MetadataRequestWithoutAutoCreation
from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.api import LoadError
from coordinator_server.storage.error_codes import UNKNOWN_TOPIC_OR_PARTITION
from coordinator_server.storage.kafka.produce import Leader

__all__ = [
    "TopicLostError",
    "TopicMetadata",
    "TopicMetadataError",
    "TopicWatcher",
    "fetch_topic_metadata",
]

log = logging.getLogger(__name__)

NO_LEADER = -1


class TopicMetadataError(Exception):
    """The topic's metadata could not be read now (a broker down or busy): try again."""


class TopicLostError(LoadError):
    """The topic is gone or has another partition count than the log started with."""


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What one MetadataResponse says about the topic."""

    topic: str
    error_code: int
    """The topic's own error: 0, or 3 (UNKNOWN_TOPIC_OR_PARTITION) for a topic that does not
    exist, or another (a topic being created, not authorized...)."""
    leaders: dict[int, int]
    """Each partition's leader's node id (-1 while it has none)."""
    brokers: dict[int, tuple[str, int]]

    @property
    def exists(self) -> bool:
        return self.error_code != UNKNOWN_TOPIC_OR_PARTITION

    @property
    def partition_count(self) -> int:
        return len(self.leaders)

    def leader_addresses(self) -> dict[int, Leader]:
        """The leader of each partition that has one and whose broker is listed."""
        leaders: dict[int, Leader] = {}
        for partition, node_id in self.leaders.items():
            address = self.brokers.get(node_id)
            if node_id >= 0 and address is not None:
                leaders[partition] = Leader(node_id, address[0], address[1])
        return leaders


async def fetch_topic_metadata(
    client: AIOKafkaClient, topic: str, timeout_s: float
) -> TopicMetadata:
    """The topic's metadata from any broker the client knows, never creating the topic.

    Raises TopicMetadataError when no answer comes (in `timeout_s`), or the broker cannot
    answer without creating topics (a MetadataRequest before v4).
    """
    node_id = client.get_random_node()
    if node_id is None:
        raise TopicMetadataError("no broker is known")
    try:
        response = await asyncio.wait_for(
            client.send(node_id, MetadataRequestWithoutAutoCreation([topic])), timeout_s
        )
    except NotImplementedError as error:
        raise TopicMetadataError(
            f"the broker cannot read a topic's metadata without creating it: {error}"
        ) from error
    except (KafkaError, OSError, TimeoutError) as error:
        raise TopicMetadataError(f"no metadata from node {node_id}: {error!r}") from error
    brokers = {int(b[0]): (str(b[1]), int(b[2])) for b in response.brokers}
    for error_code, name, _internal, partitions in response.topics:
        if name != topic:
            continue
        leaders = {int(p[1]): int(p[2]) for p in partitions} if error_code == ErrorCode.NONE else {}
        return TopicMetadata(topic, int(error_code), leaders, brokers)
    raise TopicMetadataError(f"the metadata response does not mention topic {topic}")


class TopicWatcher:
    """Reads the topic's metadata and checks its partition count against the one the log
    started with; reports a loss once, to `on_lost`, with the reason.

    `refresh()` is what the produce and load paths call for leaders; `start()` runs it every
    `interval_s` as well, so that a lost topic is noticed even while nothing is written.
    """

    def __init__(
        self,
        topic: str,
        fetch: Callable[[], Awaitable[TopicMetadata]],
        on_lost: Callable[[str], None],
        interval_s: float,
    ) -> None:
        self.topic = topic
        self._fetch = fetch
        self._on_lost = on_lost
        self._interval_s = interval_s
        self.expected_partitions: int | None = None
        self.lost: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._reading: asyncio.Future[TopicMetadata] | None = None
        # Failed periodic reads in a row: the first is a warning, the rest wait for news.
        self._failures = 0

    async def refresh(self) -> TopicMetadata:
        """Fresh metadata, checked. Raises TopicLostError (the loss is reported first) or
        TopicMetadataError. Callers that ask while a read is on the way share it: the
        loads of a start look up their leaders with one request, not one each."""
        if self.lost is not None:
            raise TopicLostError(self.lost)
        reading = self._reading
        if reading is None:
            reading = self._reading = asyncio.ensure_future(self._read())
            reading.add_done_callback(self._read_done)
        # A caller that gives up (a cancelled load) leaves the read to the others.
        return await asyncio.shield(reading)

    async def _read(self) -> TopicMetadata:
        metadata = await self._fetch()
        self.check(metadata)
        return metadata

    def _read_done(self, reading: asyncio.Future[TopicMetadata]) -> None:
        if self._reading is reading:
            self._reading = None
        if not reading.cancelled():
            # Retrieved here too, in case every caller gave up.
            reading.exception()

    def check(self, metadata: TopicMetadata) -> None:
        expected = self.expected_partitions
        if expected is None or metadata.error_code not in (0, UNKNOWN_TOPIC_OR_PARTITION):
            # Not started yet, or an answer that says nothing about the partitions (a topic
            # being created, not authorized): neither proves a loss.
            return
        if not metadata.exists:
            reason = f"topic {self.topic} no longer exists"
        elif metadata.partition_count != expected:
            reason = (
                f"topic {self.topic} has {metadata.partition_count} partitions, not the "
                f"{expected} it had when the server started"
            )
        else:
            return
        self.report_lost(reason)
        raise TopicLostError(reason)

    def report_lost(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason
            self._on_lost(reason)

    def start(self, expected_partitions: int) -> None:
        self.expected_partitions = expected_partitions
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._watch(), name=f"watch-topic-{self.topic}"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        reading = self._reading
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading

    async def _watch(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self._interval_s)
            try:
                await self.refresh()
            except TopicLostError:
                return
            except TopicMetadataError as error:
                self._failures += 1
                if self._failures == 1:
                    log.warning("cannot read the metadata of topic %s: %s", self.topic, error)
                continue
            if self._failures:
                log.info(
                    "the metadata of topic %s can be read again (after %d failed reads)",
                    self.topic,
                    self._failures,
                )
                self._failures = 0
