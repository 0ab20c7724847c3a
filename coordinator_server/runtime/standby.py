"""Warm standbys: partitions kept loaded from the log without being served, so that taking
one over reads only what was appended since, not the whole partition.

Kafka's coordinators have no such thing: a broker that becomes a partition's leader loads the
whole partition. Here a STANDBY partition has a shard built as a loaded one is, fed through
the same `load_replay` a load uses, but no writes, reads or timers: every request for it gets
NOT_COORDINATOR, as for a partition not hosted.

One task follows every STANDBY partition at once: each round asks the log's follower for the
records of all of them, each from its own position (`LogFollower.follow`, a long poll: the
round returns as soon as a record commits, or after `standby_fetch_max_wait_ms` with
nothing), at most `standby_fetch_max_bytes` a round. A partition the log cannot read now is
asked for again after a back-off that grows with its failures in a row, and logged on the
1st, 2nd, 4th, 8th... of them; one the log cannot read on from its position (records lost
below it), or whose shard refused a record, starts over from a fresh shard at the log's
start; a round that fails as a whole backs off the same way. None of it ever serves.

A standby does not replay each record as it comes: the follower hands it, per partition and
round, the latest record of each key read (as compaction would leave them), which it adds to
those it holds; it replays them into its shard, in the order of their offsets, when it holds
`standby_max_pending_records` of them (looked at after each round's records, so it may hold
up to one round's more), when a round brings the partition nothing new, and when it is
promoted. Replaying every record as it came cost the standby's node about as much CPU as the
owner's serving of the same commits (a consumer commits the same partitions again and
again); a compacted replay leaves the same state, as a load of a compacted log does. Handing
records over one call each cost the standby twice what reading them does (see
`storage.kafka.load.latest_records`).

`promote` ends a partition's standby, replays what it holds, and hands its shard's load
replay and position to the load that makes it ACTIVE (`PartitionLoader.resume`). A record
counts as the standby's once it holds it, so the load goes on from exactly there, whatever
round was under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator_server.runtime.api import CoordinatorShard, LoadReplay
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import CoordinatorContext, CoordinatorState
from coordinator_server.storage.api import FollowSink, LatestRecords, LogFollower

# Waits before a partition (or a whole round) is read again, by failures in a row.
RETRY_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(slots=True)
class _Standby:
    context: CoordinatorContext
    # The shard's load replay; None when the shard must be built again first.
    sink: LoadReplay | None = None
    # Records read but not yet replayed into the shard: the latest of each key (replayed in
    # the order of their offsets).
    pending: LatestRecords = field(default_factory=dict)
    # The next offset to read (None: the log's start).
    position: int | None = None
    failures: int = 0
    retry_at: float = 0.0
    # The records the follower handed over: the latest of each key of each round.
    records: int = 0


class StandbyFollower:
    """The runtime's STANDBY partitions and the task that keeps their shards up to date."""

    __slots__ = (
        "_config",
        "_failed_rounds",
        "_follower",
        "_log",
        "_new_shard",
        "_standbys",
        "_task",
        "_wake",
    )

    def __init__(
        self,
        *,
        follower: LogFollower | None,
        new_shard: Callable[[CoordinatorContext], CoordinatorShard],
        config: RuntimeConfig,
        log: logging.Logger,
    ) -> None:
        """`new_shard` builds a fresh shard on the context (`PartitionLoader.new_shard`)."""
        self._follower = follower
        self._new_shard = new_shard
        self._config = config
        self._log = log
        # At most one per partition of the log.
        self._standbys: dict[int, _Standby] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._failed_rounds = 0

    @property
    def available(self) -> bool:
        """Whether the log can be followed at all (standbys exist only in a cluster, whose
        Kafka log always can)."""
        return self._follower is not None

    def start(self, context: CoordinatorContext) -> None:
        """Make the INITIAL partition STANDBY and follow it from the log's start."""
        if self._follower is None:
            raise NotImplementedError("this log has no follower: there is nothing to stand by with")
        context.transition_to(CoordinatorState.STANDBY)
        standby = self._standbys[context.partition] = _Standby(context)
        self._rebuild(standby)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._follow(), name="standby-follower"
            )
            self._task.add_done_callback(self._stopped)
        self._wake.set()

    def promote(self, context: CoordinatorContext) -> tuple[LoadReplay, int] | None:
        """End the partition's standby: its load replay and the offset to load on from, or
        None when its shard has nothing to hand over (it never read, or must be rebuilt)."""
        standby = self._standbys.pop(context.partition, None)
        if standby is None or standby.context is not context:
            return None
        if standby.sink is None or standby.position is None:
            return None
        if not self._replay_pending(standby, asyncio.get_running_loop().time()):
            return None
        self._log.info(
            "partition=%d ends its standby at offset %d (%d records kept while following)",
            context.partition,
            standby.position,
            standby.records,
        )
        return standby.sink, standby.position

    def discard(self, context: CoordinatorContext) -> None:
        """Forget the partition's standby, if it has one (it is unloaded)."""
        standby = self._standbys.get(context.partition)
        if standby is not None and standby.context is context:
            del self._standbys[context.partition]

    def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._standbys.clear()

    # The task.

    def _stopped(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled() and task.exception() is not None:
            # A bug: the standbys stay STANDBY, never served, and follow again once one
            # more partition stands by.
            self._log.error("the standby follower stopped", exc_info=task.exception())

    async def _follow(self) -> None:
        follower = self._follower
        assert follower is not None
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            due = {p: s for p, s in self._standbys.items() if s.retry_at <= now}
            for waiting in list(due.values()):
                if waiting.sink is None and not self._rebuild(waiting):
                    del due[waiting.context.partition]
            if not due:
                await self._idle(loop)
                continue
            positions_before = {p: s.position for p, s in due.items()}
            try:
                result = await follower.follow(
                    {p: s.position for p, s in due.items()},
                    self._sink(due),
                    max_wait_ms=self._config.standby_fetch_max_wait_ms,
                    min_bytes=self._config.standby_fetch_min_bytes,
                    max_bytes=self._config.standby_fetch_max_bytes,
                )
            except Exception as error:
                self._failed_rounds += 1
                backoff_s = _backoff(self._failed_rounds)
                if _seldom(self._failed_rounds):
                    self._log.warning(
                        "standbys of %d partitions cannot read the log (%s); trying again in "
                        "%.2f s (%d failures in a row)",
                        len(due),
                        error,
                        backoff_s,
                        self._failed_rounds,
                    )
                await asyncio.sleep(backoff_s)
                continue
            self._failed_rounds = 0
            now = loop.time()
            for partition, position in result.positions.items():
                standby = self._current(due, partition)
                if standby is None or standby.sink is None:
                    continue
                if standby.position == positions_before[partition] and not self._replay_pending(
                    standby, now
                ):
                    continue
                if standby.position is None or position > standby.position:
                    standby.position = position
                standby.failures = 0
                context = standby.context
                context.last_written_offset = context.last_committed_offset = standby.position
                context.latest_high_watermark = result.high_watermarks.get(partition, position)
            for partition, why in result.retry.items():
                standby = self._current(due, partition)
                if standby is not None:
                    self._back_off(standby, now, f"cannot read the log now: {why}")
            for partition, why in result.lost.items():
                standby = self._current(due, partition)
                if standby is not None:
                    standby.sink = None
                    self._back_off(
                        standby, now, f"cannot read on from where it is ({why}): starting over"
                    )

    async def _idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until a standby starts or one's back-off ends."""
        self._wake.clear()
        retries = [s.retry_at for s in self._standbys.values()]
        timeout = max(min(retries) - loop.time(), 0.0) if retries else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _sink(self, due: dict[int, _Standby]) -> FollowSink:
        max_pending = self._config.standby_max_pending_records

        def sink(partition: int, latest: LatestRecords, after: int) -> None:
            standby = self._current(due, partition)
            if standby is None or standby.sink is None:
                # Promoted, unloaded or broken meanwhile: its records are someone else's.
                return
            if standby.pending:
                standby.pending.update(latest)
            else:
                standby.pending = latest
            standby.position = after
            standby.records += len(latest)
            if len(standby.pending) >= max_pending:
                self._replay_pending(standby, asyncio.get_running_loop().time())

        return sink

    def _replay_pending(self, standby: _Standby, now: float) -> bool:
        """Replay the records the standby holds into its shard; False (starting over) if the
        shard refused one."""
        sink = standby.sink
        pending, standby.pending = standby.pending, {}
        if sink is None:
            return False
        offset = -1
        try:
            for key, (offset, value) in sorted(pending.items(), key=_offset_of):
                sink(offset, key, value)
            sink.close()
        except Exception as error:
            self._log.exception(
                "partition=%d the standby's shard failed", standby.context.partition
            )
            standby.sink = None
            self._back_off(
                standby, now, f"refused the record at offset {offset} ({error!r}): starting over"
            )
            return False
        return True

    def _current(self, due: dict[int, _Standby], partition: int) -> _Standby | None:
        """The partition's standby as the round asked for it, if it is still the one."""
        standby = due.get(partition)
        if standby is None or self._standbys.get(partition) is not standby:
            return None
        return standby

    def _rebuild(self, standby: _Standby) -> bool:
        """A fresh shard for the standby, read from the log's start; False (backing off) if
        it cannot be built."""
        context = standby.context
        old = context.shard
        if old is not None:
            try:
                old.on_unloaded()
            except Exception:
                self._log.exception("partition=%d on_unloaded failed", context.partition)
        standby.position = None
        standby.records = 0
        standby.pending = {}
        try:
            shard = self._new_shard(context)
        except Exception as error:
            standby.sink = None
            loop = asyncio.get_running_loop()
            self._back_off(standby, loop.time(), f"building its shard failed: {error!r}")
            return False
        standby.sink = shard.load_replay()
        return True

    def _back_off(self, standby: _Standby, now: float, why: str) -> None:
        standby.failures += 1
        backoff_s = _backoff(standby.failures)
        standby.retry_at = now + backoff_s
        if _seldom(standby.failures):
            self._log.warning(
                "partition=%d standby %s; again in %.2f s (%d failures in a row)",
                standby.context.partition,
                why,
                backoff_s,
                standby.failures,
            )


def _offset_of(record: tuple[bytes, tuple[int, bytes | None]]) -> int:
    return record[1][0]


def _backoff(failures: int) -> float:
    return RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1]


def _seldom(count: int) -> bool:
    """True for the 1st, 2nd, 4th, 8th... time: a log line for a condition that lasts."""
    return count & (count - 1) == 0


__all__ = ["StandbyFollower"]
