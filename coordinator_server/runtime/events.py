"""What a write's caller gets back.

`WriteOutcome` is the one shape of a write's answer, whichever way the write ran: at once on
an idle partition or later from its queue, answered before `write` returned or parked until
the log commits its records.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class WriteOutcome(Generic[T]):
    """A write's answer: over, or still to come.

    While `future` is None the write is over: `error` is why it failed, or else `response`
    is its answer. Otherwise the answer comes through `future` (done already, perhaps).

    A write run at once that needs no append (a heartbeat) is answered in an outcome with
    no future: the busiest operations spare one on every call. A write that waits for the
    log is its own outcome (a WriteEvent), with the future its caller waits on.
    """

    __slots__ = ("error", "future", "response")

    def __init__(
        self,
        response: T | None = None,
        error: BaseException | None = None,
        future: asyncio.Future[T] | None = None,
    ) -> None:
        self.response = response
        self.error = error
        self.future = future

    def __repr__(self) -> str:
        if self.future is not None:
            return f"{type(self).__name__}(future={self.future!r})"
        if self.error is not None:
            return f"{type(self).__name__}(error={self.error!r})"
        return f"{type(self).__name__}(response={self.response!r})"


__all__ = ["WriteOutcome"]
