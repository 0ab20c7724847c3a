"""Where the runtime reports what its metrics are made of (Kafka's
`CoordinatorRuntimeMetrics`; `coordinator_server.metrics.RuntimeMetrics` is the server's)."""

from __future__ import annotations

from typing import Protocol


class RuntimeObserver(Protocol):
    def batch_appended(self, records: int, size_bytes: int, seconds: float) -> None: ...

    def append_failed(self) -> None: ...

    def event_ran(self, queued_seconds: float, processing_seconds: float) -> None:
        """A write operation ran on its partition (Kafka's event queue and processing
        times): how long it waited in the partition's queue (0 for one run at once), and
        how long it ran there (the operation, the replay of its records and their place in
        the batch; not the wait for the log)."""
        ...

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None: ...


class NoObserver:
    """Reports nothing."""

    __slots__ = ()

    def batch_appended(self, records: int, size_bytes: int, seconds: float) -> None:
        pass

    def append_failed(self) -> None:
        pass

    def event_ran(self, queued_seconds: float, processing_seconds: float) -> None:
        pass

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None:
        pass


__all__ = ["NoObserver", "RuntimeObserver"]
