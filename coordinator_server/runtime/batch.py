"""A batch of records on its way to one append (Kafka's `CoordinatorBatch`), and how its
bytes are counted against `max_batch_bytes`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coordinator_server.runtime.clock import Cancellable
from coordinator_server.storage.api import RawRecord

BATCH_OVERHEAD_BYTES: Final = 61
"""Bytes a batch takes besides its records (Kafka's record batch v2 header)."""

RECORD_OVERHEAD_BYTES: Final = 21
"""Most bytes a record takes besides its key and value (Kafka's DefaultRecord varints)."""


def record_sizes(raw: Sequence[RawRecord]) -> list[int]:
    """What each record counts for against a batch's size."""
    return [
        len(key) + (0 if value is None else len(value)) + RECORD_OVERHEAD_BYTES
        for key, value in raw
    ]


class CoordinatorBatch:
    """Records on their way to one append, and where they start in the log."""

    __slots__ = (
        "base_offset",
        "epoch",
        "flush_due",
        "linger_handle",
        "next_offset",
        "records",
        "size_bytes",
    )

    def __init__(self, base_offset: int, epoch: int) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        # Which of the partition's batches this is: a flush event names the batch it was
        # queued for, and finds it gone if a newer one is open.
        self.epoch = epoch
        self.records: list[RawRecord] = []
        self.size_bytes = BATCH_OVERHEAD_BYTES
        # A flush was asked for while an append was in flight: go out when it completes.
        self.flush_due = False
        self.linger_handle: Cancellable | None = None


__all__ = ["BATCH_OVERHEAD_BYTES", "RECORD_OVERHEAD_BYTES", "CoordinatorBatch", "record_sizes"]
