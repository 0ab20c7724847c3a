"""A test context for the pure layers, in the manner of Kafka's GroupMetadataManagerTestContext.

It calls a handler on a real shard, replays the records it returns at the next log offsets
through the shard's one `replay` and applies its in-memory updates (as the runtime does),
keeps every record written as the "log", delivers completions to parked callers' handles,
moves the runtime's ManualClock, firing timers as write operations, and can commit, fail an append
(revert), or throw the shard away and rebuild it from the log.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coordinator_server.records import CoordinatorRecord, decode_record
from coordinator_server.runtime.api import (
    CoordinatorResult,
    ResponseHandle,
    ShardContext,
    TimeoutOperation,
    encode_records,
    replay_records,
)
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.timeline import SnapshotRegistry

T = TypeVar("T")


@dataclass(order=True)
class _Timeout:
    deadline_ms: int
    seq: int
    key: str = field(compare=False)
    operation: TimeoutOperation = field(compare=False)


class MockTimer:
    """Timers that fire only when the test context moves the clock."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._timeouts: dict[str, _Timeout] = {}
        self._seq = 0

    def schedule(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        self._seq += 1
        self._timeouts[key] = _Timeout(self._clock.now_ms() + delay_ms, self._seq, key, operation)

    def schedule_if_absent(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        if key not in self._timeouts:
            self.schedule(key, delay_ms, operation)

    def reschedule(self, key: str, delay_ms: int) -> bool:
        timeout = self._timeouts.get(key)
        if timeout is None:
            return False
        self.schedule(key, delay_ms, timeout.operation)
        return True

    def cancel(self, key: str) -> None:
        self._timeouts.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._timeouts

    def size(self) -> int:
        return len(self._timeouts)

    def pop_expired(self) -> list[_Timeout]:
        now = self._clock.now_ms()
        expired = [t for t in self._timeouts.values() if t.deadline_ms <= now]
        heapq.heapify(expired)
        result = []
        while expired:
            timeout = heapq.heappop(expired)
            del self._timeouts[timeout.key]
            result.append(timeout)
        return result


class Parked:
    """What a test holds for a parked caller: its response once some operation gives it."""

    def __init__(self) -> None:
        self.handle = ResponseHandle(self)
        self.done = False
        self.response: Any = None
        self.completions = 0

    def complete(self, response: object) -> None:
        self.completions += 1
        if not self.done:
            self.done = True
            self.response = response

    def __repr__(self) -> str:
        return f"Parked(done={self.done}, response={self.response!r})"


def parked_of(handle: ResponseHandle) -> Parked:
    sink = handle.sink
    assert isinstance(sink, Parked)
    return sink


class ShardTestContext:
    def __init__(self, config: ShardConfig | None = None) -> None:
        self.config = config or ShardConfig()
        self.clock = ManualClock(start_ms=1_700_000_000_000)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.build()

    def build(self) -> None:
        """A fresh shard on a fresh registry and timer (the clock goes on)."""
        self.registry = SnapshotRegistry()
        self.timer = MockTimer(self.clock)
        self.shard = LogPartitionShard(
            ShardContext(0, self.clock, self.timer, self.registry), self.config
        )

    @property
    def end_offset(self) -> int:
        return len(self.log)

    def write(self, operation: Callable[[LogPartitionShard], CoordinatorResult[T]]) -> T:
        """Run a write operation and replay its records, as the runtime does."""
        result = self.write_result(operation)
        assert result.response is not None
        return result.response

    def write_result(
        self, operation: Callable[[LogPartitionShard], CoordinatorResult[T]]
    ) -> CoordinatorResult[T]:
        result = operation(self.shard)
        self.apply_result(result)
        return result

    def write_parkable(
        self,
        operation: Callable[[LogPartitionShard, ResponseHandle], CoordinatorResult[Any]],
    ) -> Parked:
        """Run a parkable write: its response is either given now or parked for later."""
        parked = Parked()
        result = operation(self.shard, parked.handle)
        self.apply_result(result)
        if not result.park:
            parked.complete(result.response)
        return parked

    def apply_result(self, result: CoordinatorResult[Any]) -> None:
        """What the runtime does with a result whose append succeeds."""
        records = result.records
        if records:
            base = self.end_offset
            self.registry.set_epoch(base)
            self.log.extend(encode_records(records))
            replay_records(self.shard, base, records)
        elif result.updates:
            self.registry.set_epoch_at(self.end_offset)
        for update in result.updates:
            self.shard.apply(update)
        for handle, response in result.completions:
            parked_of(handle).complete(response)

    def fail_append(
        self,
        operation: Callable[[LogPartitionShard], CoordinatorResult[Any]],
        error: Exception,
    ) -> CoordinatorResult[Any]:
        """Run a write whose append fails: its changes are reverted and its completions get
        the error; its on_append_failure operation then runs."""
        base = self.end_offset
        result = operation(self.shard)
        self.registry.set_epoch(base)
        records = result.records
        replay_records(self.shard, base, records)
        for update in result.updates:
            self.shard.apply(update)
        self.registry.revert_to(base)
        for handle, _ in result.completions:
            parked_of(handle).complete(error)
        if result.on_append_failure is not None:
            self.apply_result(result.on_append_failure())
        return result

    def fail_append_parkable(
        self,
        operation: Callable[[LogPartitionShard, ResponseHandle], CoordinatorResult[Any]],
        error: Exception,
    ) -> Parked:
        """A parkable write whose append fails: as `fail_append`, and its own caller gets the
        error too (the runtime fails the caller of a failed write, parked or not)."""
        parked = Parked()
        self.fail_append(lambda shard: operation(shard, parked.handle), error)
        parked.complete(error)
        return parked

    def replay_all(self, records: Any) -> None:
        self.apply_result(CoordinatorResult(records=list(records)))

    def commit(self) -> None:
        """The log commits everything written so far."""
        self.registry.commit(self.end_offset)

    def revert_to(self, offset: int) -> None:
        """The append of everything from `offset` failed."""
        self.registry.revert_to(offset)
        del self.log[offset:]

    def sleep(self, ms: int) -> list[CoordinatorResult[Any]]:
        """Move time on and run the timers that expire, in deadline order, replaying their
        results; timers that those operations arm and that are already due run too."""
        self.clock.advance(ms)
        results = []
        while expired := self.timer.pop_expired():
            for timeout in expired:
                result = timeout.operation()
                self.apply_result(result)
                results.append(result)
        return results

    def reload(self) -> None:
        """Throw the shard away and rebuild it from the committed log, as a load does."""
        self.commit()
        self.build()
        self.registry.set_tracking(False)
        # The runtime's load hands the shard the records as the log holds them.
        sink = self.shard.load_replay()
        for offset, (key, value) in enumerate(self.log):
            sink(offset, key, value)
        sink.close()
        self.registry.reset(self.end_offset)
        self.registry.set_tracking(True)
        self.shard.on_loaded()

    def records_written(self, since: int = 0) -> list[CoordinatorRecord]:
        return [decode_record(key, value) for key, value in self.log[since:]]
