"""The end of prepared transactions: their markers written, then their completion.

Kafka's `TransactionMarkerChannelManager` with `TransactionMarkerRequestCompletionHandler`:
a transaction in PrepareCommit or PrepareAbort owes a COMMIT or ABORT marker on every
partition it wrote to. Here those are of two kinds:

- the Kafka data partitions its producer wrote records to: WriteTxnMarkers to their leaders
  (`KafkaTxnMarkerWriter`);
- the coordinator log's own partitions that hold its transactional offsets (the groups of
  AddOffsetsToTxn): one write on each, which commits or drops the producer's pending
  offsets there (`complete_transaction_offsets`). A partition this node does not own goes
  to the node that owns it (`Peers`, WriteTxnMarkers between nodes).

Both kinds are written at once, and only when every marker landed or was refused for good
does the transaction's own partition get its CompleteCommit or CompleteAbort record. Each
step is retried with back-off until it succeeds, or the transaction is no longer this node's
to end (asked before every marker: the node lost its lease or the partition, whose next
owner finds the transaction prepared when it loads and ends it, or the transaction is no
longer the one prepared there).

A data marker is refused for good when its partition stays unknown to the cluster (its topic
deleted) or the partition has a newer producer or coordinator epoch than the marker's
(INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) while this node still owns the
transaction: no newer coordinator of ours exists, so another writer uses the producer id (a
deployment with an overlapping producer id range, say). Kafka's coordinator takes a
partition it cannot write a marker to out of the transaction (`removePartition`) and
completes it; so does this one, the rest of the markers written, so that the transactional
id can be used again. Nobody else would end it: left prepared, every request of its id would
be answered CONCURRENT_TRANSACTIONS for good. Each such transaction is logged once as an
ERROR, its markers counted (`TransactionMetrics.markers_refused`), the latest kept for
`/status` (`refusals`), and the refused partitions kept in its record for
DescribeTransactions.

What is prepared is found again every `sweep_interval_s` on every active partition, so a
transaction prepared by a timer (a timed-out abort), before a crash or on another node is
ended too; one already under way is not started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.writer import DROPPED_ERRORS, FENCED_ERRORS, KafkaTxnMarkerWriter
from coordinator_server.metrics import TransactionMetrics
from coordinator_server.records import RefusedMarkers
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.transaction_ends import TransactionEnds
from coordinator_server.shard import TransactionShard
from coordinator_server.transactions.results import PendingCompleteTxn

log = logging.getLogger(__name__)

Peers = Callable[[int, int, int, bool], Awaitable[int]]
"""(log partition, producer id, producer epoch, committed) -> the error code of the end of
the producer's transaction on a log partition another node owns (WriteTxnMarkers to it)."""

CoordinatorEpoch = Callable[[int], int]
"""The coordinator epoch of a log partition this node serves: what the brokers fence stale
markers with (at least every earlier owner's)."""

RETRY_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)

# Transactions with refused markers kept for /status, and partitions named per transaction.
KEPT_REFUSALS = 20
NAMED_PARTITIONS = 10


class TxnMarkerChannel:
    """Ends prepared transactions (Kafka's `TransactionMarkerChannelManager`); `start()` once
    the runtime runs, `stop()` at shutdown."""

    def __init__(
        self,
        runtime: CoordinatorRuntime[TransactionShard],
        writer: KafkaTxnMarkerWriter | None,
        *,
        coordinator_epoch: CoordinatorEpoch,
        peers: Peers | None = None,
        max_in_flight: int = 10_000,
        sweep_interval_s: float = 1.0,
        metrics: TransactionMetrics | None = None,
    ) -> None:
        """`writer` None: no Kafka cluster to write data markers to (a transaction that
        wrote to one cannot end, and stays prepared). `max_in_flight`: transactions being
        ended at once; past it, submissions wait for the next sweep. `metrics` counts the
        transactions ended here."""
        self._runtime = runtime
        self._ends = TransactionEnds(runtime)
        self._writer = writer
        self._coordinator_epoch = coordinator_epoch
        self._peers = peers
        self._max_in_flight = max_in_flight
        self._sweep_interval_s = sweep_interval_s
        self._in_flight: dict[tuple[int, str, int, int, int], asyncio.Task[None]] = {}
        # By transactional id (the latest submitted of each): done once its end is in the
        # partition's state (the completion written, not yet committed) or given up.
        self._by_id: dict[str, asyncio.Future[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._stopped = False
        self.metrics = metrics or TransactionMetrics()
        # The latest transactions completed without some of their markers, newest last.
        self.refusals: deque[dict[str, object]] = deque(maxlen=KEPT_REFUSALS)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def ending(self, transactional_id: str) -> asyncio.Future[None] | None:
        """The end under way here of the transactional id's prepared transaction, if any:
        done once the transaction's completion is written to its partition's state. The
        next write of the transactional id can run from then on: it lands after the
        completion in the log, so it is committed after it, or fails with it. Kafka waits
        for the completion to be committed before the transactional id's next request can
        change anything; waiting here for that round trip to the log too would only delay
        the answer, which waits for its own record anyway."""
        settled = self._by_id.get(transactional_id)
        return None if settled is None or settled.done() else settled

    def start(self) -> None:
        if self._sweeper is None and not self._stopped:
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep(), name="txn-completions-sweep"
            )

    async def stop(self) -> None:
        self._stopped = True
        tasks = [task for task in (self._sweeper, *self._in_flight.values()) if task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._in_flight.clear()
        self._by_id.clear()

    def submit(self, partition: int, completion: PendingCompleteTxn) -> None:
        """End `completion`, prepared on `partition` (committed in the log)."""
        if self._stopped:
            return
        key = (
            partition,
            completion.transactional_id,
            completion.producer_id,
            completion.producer_epoch,
            completion.prepared_ms,
        )
        if key in self._in_flight or len(self._in_flight) >= self._max_in_flight:
            return
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[None] = loop.create_future()

        def in_state() -> None:
            if not settled.done():
                settled.set_result(None)

        task = loop.create_task(
            self._complete(partition, completion, in_state),
            name=f"txn-complete-{completion.transactional_id}",
        )
        self._in_flight[key] = task
        transactional_id = completion.transactional_id
        self._by_id[transactional_id] = settled

        def ended(_: asyncio.Task[None]) -> None:
            self._in_flight.pop(key, None)
            in_state()
            if self._by_id.get(transactional_id) is settled:
                del self._by_id[transactional_id]

        task.add_done_callback(ended)

    async def _sweep(self) -> None:
        while True:
            for partition, state in sorted(self._runtime.partitions().items()):
                if state is not CoordinatorState.ACTIVE:
                    continue
                try:
                    prepared = await self._runtime.schedule_read(
                        "pending-completions",
                        partition,
                        lambda shard, offset: shard.pending_completions(offset),
                    )
                except Exception:
                    # Unloaded meanwhile, or closing: its next owner sweeps it.
                    continue
                for completion in prepared:
                    self.submit(partition, completion)
            await asyncio.sleep(self._sweep_interval_s)

    def _serving(self, partition: int) -> bool:
        return self._runtime.partition_state(partition) is CoordinatorState.ACTIVE

    async def _still_ours(self, partition: int, completion: PendingCompleteTxn) -> bool:
        """Whether this node may still end `completion`: it serves the transaction's
        partition under its lease and the transaction is still the one prepared there.

        Asked before every marker sent. The brokers fence a stale coordinator's data markers
        by coordinator epoch, but nothing fences the end of its offsets on a log partition
        (WriteTxnMarkers to another node, or a write here): a node resumed after a pause,
        whose partition another node took over and ended the transaction of meanwhile,
        would otherwise commit or drop the offsets of the producer's next transaction (the
        same producer id and epoch); so would a completion a sweep found just before
        another task ended it. A read needs the lease, as a request does."""
        try:
            return await self._runtime.schedule_read(
                "txn-still-prepared",
                partition,
                lambda shard, offset: shard.is_prepared(completion, offset),
            )
        except Exception:
            return False

    async def _complete(
        self, partition: int, completion: PendingCompleteTxn, in_state: Callable[[], None]
    ) -> None:
        what = (
            f"transactional id {completion.transactional_id!r} (producer {completion.producer_id}"
            f" epoch {completion.producer_epoch}, "
            f"{'commit' if completion.committed else 'abort'})"
        )
        try:
            # Every marker at once, as Kafka's coordinator sends them: the data partitions'
            # and the log partitions' (a transaction's outcome is its Prepare record's, so
            # none of them waits on another).
            data, *landed = await asyncio.gather(
                self._data_markers(partition, completion, what),
                *(
                    self._log_markers(partition, log_partition, completion, what)
                    for log_partition in completion.log_partitions
                ),
            )
            refused = cast("RefusedMarkers | None", data)
            if refused is None or not all(landed):
                return
            await self._completed(partition, completion, what, refused, in_state)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: ending the transaction failed; the next sweep retries", what)

    async def _backoff(self, attempt: int) -> None:
        self.metrics.retries += 1
        await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])

    async def _data_markers(
        self, partition: int, completion: PendingCompleteTxn, what: str
    ) -> RefusedMarkers | None:
        """The markers refused for good once every other one is written (empty: all were);
        None when the transaction is not this node's to end."""
        if not completion.partitions:
            return ()
        writer = self._writer
        if writer is None:
            log.error("%s: no Kafka cluster to write its markers to; it stays prepared", what)
            return None
        partitions = {topic: list(indexes) for topic, indexes in completion.partitions}
        refused: list[tuple[str, int, int]] = []
        attempt = 0
        while await self._still_ours(partition, completion):
            outcome = await writer.write(
                completion.producer_id,
                completion.producer_epoch,
                self._coordinator_epoch(partition),
                completion.committed,
                partitions,
            )
            if outcome.fenced and not await self._still_ours(partition, completion):
                self.metrics.fenced += 1
                log.warning(
                    "%s: its markers are fenced (%s): a newer coordinator ends it",
                    what,
                    _some(outcome.errors),
                )
                return None
            # Only the partitions still owed; fenced ones are refused for good, as the
            # transaction is still this node's to end.
            partitions = {}
            for (topic, index), code in outcome.errors.items():
                if code in FENCED_ERRORS or code in DROPPED_ERRORS:
                    refused.append((topic, index, code))
                else:
                    partitions.setdefault(topic, []).append(index)
            if not partitions:
                if refused:
                    self._refused(completion, tuple(sorted(refused)), what)
                return tuple(sorted(refused))
            if attempt == 0 or attempt % 20 == 0:
                log.warning("%s: markers refused (%s); retrying", what, _some(outcome.errors))
            await self._backoff(attempt)
            attempt += 1
        return None

    def _refused(self, completion: PendingCompleteTxn, refused: RefusedMarkers, what: str) -> None:
        """Once per transaction: an ERROR, the counter, the latest kept for /status."""
        self.metrics.markers_refused += len(refused)
        by_error: dict[str, list[str]] = {}
        for topic, index, code in refused:
            by_error.setdefault(_name(code), []).append(f"{topic}-{index}")
        named = {
            error: names[:NAMED_PARTITIONS] + ([f"and {len(names) - NAMED_PARTITIONS} more"]
                                               if len(names) > NAMED_PARTITIONS else [])
            for error, names in by_error.items()
        }  # fmt: skip
        fenced = any(code in FENCED_ERRORS for _, _, code in refused)
        log.error(
            "%s: the brokers refused %d of its markers for good (%s); completed without them%s",
            what,
            len(refused),
            "; ".join(f"{error}: {', '.join(names)}" for error, names in named.items()),
            ": another writer uses producer id "
            f"{completion.producer_id} (a deployment with an overlapping producer id range?)"
            if fenced
            else "",
        )
        self.refusals.append(
            {
                "transactional_id": completion.transactional_id,
                "producer_id": completion.producer_id,
                "producer_epoch": completion.producer_epoch,
                "result": "commit" if completion.committed else "abort",
                "time_ms": self._runtime.clock.now_ms(),
                "refused": len(refused),
                "partitions": named,
            }
        )

    async def _log_markers(
        self, partition: int, log_partition: int, completion: PendingCompleteTxn, what: str
    ) -> bool:
        attempt = 0
        while await self._still_ours(partition, completion):
            code = await self._end_on_log_partition(log_partition, completion)
            if code == ErrorCode.NONE:
                return True
            if attempt == 0 or attempt % 20 == 0:
                log.warning(
                    "%s: its offsets on log partition %d are not settled yet (%s); retrying",
                    what,
                    log_partition,
                    ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
                )
            await self._backoff(attempt)
            attempt += 1
        return False

    async def _end_on_log_partition(
        self, log_partition: int, completion: PendingCompleteTxn
    ) -> int:
        if self._runtime.partition_state(log_partition) is not CoordinatorState.ACTIVE:
            peers = self._peers
            if peers is None:
                return ErrorCode.NOT_COORDINATOR
            return await peers(
                log_partition,
                completion.producer_id,
                completion.producer_epoch,
                completion.committed,
            )
        return await self._ends.end_offsets(
            log_partition, completion.producer_id, completion.producer_epoch, completion.committed
        )

    async def _completed(
        self,
        partition: int,
        completion: PendingCompleteTxn,
        what: str,
        refused: RefusedMarkers,
        in_state: Callable[[], None],
    ) -> None:
        attempt = 0
        while self._serving(partition):
            result = await self._ends.complete(partition, completion, refused, in_state)
            if isinstance(result, ErrorCode):
                log.warning("%s: its completion failed (%s); retrying", what, result.name)
                await self._backoff(attempt)
                attempt += 1
                continue
            if result.written:
                self._count(completion)
            elif result.error != ErrorCode.NONE:
                log.info("%s: its completion was not needed (%s)", what, result.error)
            return

    def _count(self, completion: PendingCompleteTxn) -> None:
        """A completion this node wrote: counted once (a repeated one writes nothing)."""
        started_ms = completion.started_ms
        seconds = (
            -1.0 if started_ms < 0 else max(0, self._runtime.clock.now_ms() - started_ms) / 1000
        )
        self.metrics.transaction_completed(completion.committed, completion.timed_out, seconds)


def _some(errors: Mapping[tuple[str, int], int]) -> str:
    """A few partitions' errors, for a log line however many there are."""
    named = [f"{topic}-{index}: {_name(code)}" for (topic, index), code in list(errors.items())[:5]]
    more = len(errors) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
