"""SecurityImageLoader: every node's reader of the security partition, which keeps its
SecurityImage to what the log has committed there (Kafka's MetadataLoader with its
AclPublisher and ScramPublisher, over log partition 0 instead of the metadata log).

One task follows the partition through the log's `LogFollower` (`follow`: the committed
records past a position, the latest of each key) on every node, the partition's owner too:
a round at once until it has caught up, then one every `max_wait_ms`, or as soon as a write
of the partition is answered through this node (`poke`). The image changes only when the log
has committed, so no node ever authorizes against an ACL a failed write left behind. The
partition is read from its start when the node starts (compaction keeps each key's latest
record: exactly the current ACLs and credentials), and again from its start when the log says
the position is lost (the records it held are gone): that image is built apart and put in
place once it has caught up, so the node's ACLs are never a partial set. Records of other
types (the groups of partition 0) are skipped by their key's first bytes.

After each round that changed the image, the change listeners are called (the authorizer
drops its cached decisions there). Whatever fails (the log not running yet, a broker down)
is logged, the 1st, 2nd, 4th... time, and the round is tried again after a back-off that
doubles up to `backoff_max_s`: the node never stops for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from coordinator_server.records import CoordinatorRecord, RecordFormatError, decode_record
from coordinator_server.records.security import SECURITY_PARTITION, is_security_key
from coordinator_server.security.image import SecurityImage, SecurityImageBuilder
from coordinator_server.storage.api import LatestRecords, LogFollower

__all__ = ["ChangeListener", "SecurityImageLoader"]

logger = logging.getLogger(__name__)

ChangeListener = Callable[[], None]
"""Called after a round that changed the image."""


def _worth_logging(count: int) -> bool:
    """True for the 1st, 2nd, 4th, 8th... time: a log line for a condition that lasts."""
    return count & (count - 1) == 0


class SecurityImageLoader:
    """Keeps `image` to the committed records of the security partition."""

    def __init__(
        self,
        image: SecurityImage,
        follower: LogFollower,
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition: int = SECURITY_PARTITION,
        backoff_s: float = 0.1,
        backoff_max_s: float = 5.0,
    ) -> None:
        self.image = image
        self._follower = follower
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        # Set by `poke`: a write of the security partition was answered, read it now.
        self._poked = asyncio.Event()
        # Who waits for a round that starts after they asked (`settled`), and those the
        # round under way will answer.
        self._waiting: list[asyncio.Future[None]] = []
        self._answering: list[asyncio.Future[None]] = []
        self._partition = partition
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._listeners: list[ChangeListener] = []
        self._task: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()
        self._round_records: list[tuple[int, bytes, bytes | None]] = []
        # The next offset to read (None: the partition's start), and the image being
        # rebuilt from there (None: the image is kept round by round).
        self.position: int | None = None
        self._building: SecurityImageBuilder | None = SecurityImageBuilder()
        self.high_watermark = 0
        self.rounds = 0
        self.failures = 0
        self.restarts = 0

    def add_listener(self, listener: ChangeListener) -> None:
        """Call `listener()` after each round that changed the image."""
        self._listeners.append(listener)

    @property
    def caught_up(self) -> bool:
        """Whether the image has held, once at least, every record committed when a round
        read."""
        return self._caught_up.is_set()

    async def wait_caught_up(self) -> None:
        """Until `caught_up`."""
        await self._caught_up.wait()

    def poke(self) -> None:
        """A write of the security partition was just committed (here, or by the node this
        one sent it on to): read the partition now rather than at the next round."""
        self._poked.set()

    def settled(self, timeout_s: float) -> asyncio.Future[None]:
        """Done once a round that starts now or later has read the partition, or after
        `timeout_s` (the log not answering): the image then holds every record committed
        before this call (a write's answer waits for it, so that its client sees the change
        on this node at once). Pokes the reader."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(timeout_s, _settle, waiter)
        waiter.add_done_callback(lambda _: timer.cancel())
        self._waiting.append(waiter)
        self.poke()
        return waiter

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="security-image-loader"
            )

    async def stop(self) -> None:
        for waiter in (*self._waiting, *self._answering):
            _settle(waiter)
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        backoff_s = self._backoff_s
        loop = asyncio.get_running_loop()
        period_s = self._max_wait_ms / 1000
        while True:
            started = loop.time()
            was_caught_up = self.caught_up
            self._answering, self._waiting = self._waiting, []
            try:
                retry = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.failures += 1
                if _worth_logging(self.failures):
                    logger.warning(
                        "reading the security partition %d failed (%d times so far), trying "
                        "again: %r",
                        self._partition,
                        self.failures,
                        error,
                    )
                retry = True
            if retry:
                # Those waiting wait for the next round that reads.
                self._waiting[:0] = self._answering
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, self._backoff_max_s)
                continue
            for waiter in self._answering:
                _settle(waiter)
            self._answering = []
            backoff_s = self._backoff_s
            if was_caught_up:
                # A round per `max_wait_ms`, sooner when poked: the groups' commits share
                # the partition, and a reader woken by each record would pay a round (and
                # on Kafka, the broker a Fetch) per commit there.
                rest_s = started + period_s - loop.time()
                if rest_s > 0 and not self._poked.is_set() and not self._waiting:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._poked.wait(), rest_s)
            self._poked.clear()

    async def _round(self) -> bool:
        """One round; True when it must be tried again after a back-off."""
        partition = self._partition
        self._round_records = []
        result = await self._follower.follow(
            {partition: self.position},
            self._take,
            # A round takes what is there without waiting for more (the rounds are paced
            # by `_run`). 1 ms, not 0: a broker may leave a partition with nothing new out
            # of a Fetch that may not wait at all, as tansu does.
            max_wait_ms=1,
            max_bytes=self._max_bytes,
        )
        self.rounds += 1
        lost = result.lost.get(partition)
        if lost is not None:
            self.restarts += 1
            logger.warning(
                "the security partition %d cannot be read on from offset %s (%s): reading it "
                "again from its start",
                partition,
                self.position,
                lost,
            )
            self.position = None
            self._building = SecurityImageBuilder()
            return False
        retry = result.retry.get(partition)
        if retry is not None or partition not in result.positions:
            self.failures += 1
            if _worth_logging(self.failures):
                logger.warning(
                    "the security partition %d cannot be read now (%d times so far): %s",
                    partition,
                    self.failures,
                    retry,
                )
            return True
        self.position = result.positions[partition]
        self.high_watermark = result.high_watermarks.get(partition, self.position)
        records = self._decoded()
        at_end = self.position >= self.high_watermark
        building = self._building
        changed = False
        if building is not None:
            for record in records:
                building.apply(record)
            if at_end:
                changed = self.image.replace(building)
                self._building = None
        else:
            changed = self.image.apply(records)
        if self._building is None and at_end:
            self._caught_up.set()
        if changed:
            self._changed()
        return False

    def _take(self, partition: int, latest: LatestRecords, after: int) -> None:
        """The follower's sink: the round's security records, kept for after the round."""
        if partition != self._partition:
            return
        self._round_records.extend(
            (offset, key, value) for key, (offset, value) in latest.items() if is_security_key(key)
        )

    def _decoded(self) -> list[CoordinatorRecord]:
        records: list[CoordinatorRecord] = []
        for offset, key, value in sorted(self._round_records, key=lambda record: record[0]):
            try:
                records.append(decode_record(key, value))
            except RecordFormatError as error:
                logger.error(
                    "the security partition %d holds a record not in the format at offset %d, "
                    "left out: %s",
                    self._partition,
                    offset,
                    error,
                )
        self._round_records = []
        return records

    def _changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                logger.exception("a listener of the security image's changes failed")


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
