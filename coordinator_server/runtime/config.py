"""The runtime's limits and timings, and their defaults.

The defaults are the server's: they and the settings behind these fields both come from
`coordinator_server.defaults`, so a runtime built with `RuntimeConfig()` runs as
`coordinator-server serve` does, and the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server import defaults
from coordinator_server.runtime.batch import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The runtime's limits and timings.

    Attributes:
        write_timeout_ms: how long a parked write waits for the high watermark before it
            fails with REQUEST_TIMED_OUT (Kafka's `offsets.commit.timeout.ms`).
        append_linger_ms: -1 flushes adaptively (once the writes already queued have run),
            0 after each write, and a positive value that many milliseconds after the batch
            opened (Kafka's `group.coordinator.append.linger.ms`).
        max_batch_bytes: the most bytes one appended batch may hold, header included.
        max_queued_events: the most events queued per partition; past it writes fail with
            COORDINATOR_NOT_AVAILABLE.
        timer_retry_backoff_ms: the default delay before a failed retrying timer runs again.
        append_failure_timeout_ms: a partition whose appends have all failed for this long
            (counted from the first failure after the last success) goes FAILED; 0: never.
        run_when_idle: a write scheduled while its partition has nothing queued or running
            runs at once, in the caller's call, instead of waiting for the partition's turn
            on the event loop (the order is the same; a write that needs no append is
            answered before `write` returns). This is how the server runs. Off, every write
            goes through the queue, which tests of the queue itself rely on.
        standby_fetch_max_wait_ms: how long a read of the standby partitions waits for new
            records when there are none (a long poll: a new record arrives within a round
            trip, and an idle log costs a request every this many milliseconds).
        standby_fetch_max_bytes: the most record bytes one read of the standby partitions
            brings in (a record batch larger than that still comes whole).
        standby_fetch_min_bytes: how many record bytes a read of the standby partitions
            waits for (up to `standby_fetch_max_wait_ms`) before it answers: a busy log is
            read in rounds of this many bytes, not one round per append.
        standby_max_pending_records: how many records a standby holds read but not yet
            replayed into its shard (the latest of each key, as compaction would leave
            them) before it replays them, looked at after each read (so up to one read's
            more); they are replayed too when a read brings the partition nothing new. A
            takeover replays what is held first.
    """

    write_timeout_ms: int = defaults.OFFSETS_COMMIT_TIMEOUT_MS
    append_linger_ms: int = defaults.APPEND_LINGER_MS
    max_batch_bytes: int = defaults.MAX_BATCH_BYTES
    max_queued_events: int = defaults.MAX_QUEUED_EVENTS
    # Not a setting of the server: timers that retry give their own delay.
    timer_retry_backoff_ms: int = 500
    run_when_idle: bool = True
    append_failure_timeout_ms: int = defaults.APPEND_FAILURE_TIMEOUT_MS
    standby_fetch_max_wait_ms: int = defaults.STANDBY_FETCH_MAX_WAIT_MS
    standby_fetch_max_bytes: int = defaults.STANDBY_FETCH_MAX_BYTES
    standby_fetch_min_bytes: int = defaults.STANDBY_FETCH_MIN_BYTES
    standby_max_pending_records: int = defaults.STANDBY_MAX_PENDING_RECORDS

    def __post_init__(self) -> None:
        if self.write_timeout_ms <= 0:
            raise ValueError(f"write_timeout_ms must be positive, got {self.write_timeout_ms}")
        if self.append_linger_ms < -1:
            raise ValueError(f"append_linger_ms must be -1 or more, got {self.append_linger_ms}")
        if self.max_batch_bytes <= BATCH_OVERHEAD_BYTES + RECORD_OVERHEAD_BYTES:
            raise ValueError(f"max_batch_bytes is too small: {self.max_batch_bytes}")
        if self.max_queued_events < 1:
            raise ValueError(f"max_queued_events must be positive, got {self.max_queued_events}")
        if self.timer_retry_backoff_ms < 0:
            raise ValueError(
                f"timer_retry_backoff_ms must be 0 or more, got {self.timer_retry_backoff_ms}"
            )
        if self.append_failure_timeout_ms < 0:
            raise ValueError(
                f"append_failure_timeout_ms must be 0 or more, got {self.append_failure_timeout_ms}"
            )
        if self.standby_fetch_max_wait_ms < 0:
            raise ValueError(
                f"standby_fetch_max_wait_ms must be 0 or more, got {self.standby_fetch_max_wait_ms}"
            )
        if self.standby_fetch_max_bytes < 1:
            raise ValueError(
                f"standby_fetch_max_bytes must be positive, got {self.standby_fetch_max_bytes}"
            )
        if self.standby_fetch_min_bytes < 1:
            raise ValueError(
                f"standby_fetch_min_bytes must be positive, got {self.standby_fetch_min_bytes}"
            )
        if self.standby_max_pending_records < 1:
            raise ValueError(
                "standby_max_pending_records must be positive, got "
                f"{self.standby_max_pending_records}"
            )


RUNTIME_DEFAULTS = RuntimeConfig()
"""The runtime as the server runs it by default."""


__all__ = ["RUNTIME_DEFAULTS", "RuntimeConfig"]
