"""Where the runtime reports what its metrics are made of (Kafka's
`CoordinatorRuntimeMetrics`; `coordinator_server.metrics.RuntimeMetrics` is the server's)."""

from __future__ import annotations

from typing import Protocol


class RuntimeObserver(Protocol):
    def batch_appended(self, records: int, size_bytes: int, seconds: float) -> None: ...

    def append_failed(self) -> None: ...

    def event_queued(self, seconds: float) -> None: ...

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None: ...


class NoObserver:
    """Reports nothing."""

    __slots__ = ()

    def batch_appended(self, records: int, size_bytes: int, seconds: float) -> None:
        pass

    def append_failed(self) -> None:
        pass

    def event_queued(self, seconds: float) -> None:
        pass

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None:
        pass


__all__ = ["NoObserver", "RuntimeObserver"]
