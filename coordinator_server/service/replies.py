"""What a handler answers: a response now, or one still to come (`PendingReply`), and the
helpers that turn the runtime's outcome of an operation into either.

Every API of the front door answers through these: `reply_to` (a write or read's outcome,
its failure mapped by the API's own error answer), `sliced_reply` (an answer built a slice at
a time), and `typed_handler` (a method of one request type as an entry of the dispatch
table). The connection waits on the runtime's own future, with no second future per request
to turn a failure into an error response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, cast

from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.events import WriteOutcome
from coordinator_server.service.slicing import SlicedAnswer
from protocol.messages import Message

__all__ = ["Handler", "PendingReply", "Reply", "reply_to", "sliced_reply", "typed_handler"]

M = TypeVar("M", bound=Message)


class PendingReply:
    """A response still to come: `future`'s result, or where the future fails,
    `on_error(exc)` (None: the connection answers UNKNOWN_SERVER_ERROR).

    `sliced`: the answer is being built a slice at a time (see `slicing`), and may be large;
    the connection has it built in its BuildSlot, one such answer at a time."""

    __slots__ = ("future", "on_error", "sliced")

    def __init__(
        self,
        future: asyncio.Future[Any],
        on_error: Callable[[BaseException], Message] | None = None,
        *,
        sliced: SlicedAnswer | None = None,
    ) -> None:
        self.future = future
        self.on_error = on_error
        self.sliced = sliced


Reply: TypeAlias = "Message | PendingReply"
Handler: TypeAlias = Callable[[Message, RequestContext], Reply]


def reply_to(outcome: WriteOutcome[M], on_error: Callable[[BaseException], Message]) -> Reply:
    """The response, or the future of it with `on_error` for its failure. An operation that
    was over before the runtime returned (it runs one at once when its partition is idle) is
    answered without a future at all."""
    future = outcome.future
    if future is None:
        error = outcome.error
        return cast(Message, outcome.response) if error is None else on_error(error)
    if future.done():
        if future.cancelled():
            return on_error(asyncio.CancelledError())
        error = future.exception()
        return future.result() if error is None else on_error(error)
    return PendingReply(future, on_error)


def sliced_reply(answer: Message | SlicedAnswer) -> Reply:
    """A bulk request's answer: at once, or still being built in slices."""
    return answer if isinstance(answer, Message) else PendingReply(answer.result, sliced=answer)


def typed_handler(request_type: type[M], method: Callable[[M, RequestContext], Reply]) -> Handler:
    """`method` as a handler of any message. The server gives it only `request_type`'s
    (parse_request builds the type registered for the handler's api key), so no wrapper
    checks the type again on every request; `request_type` documents the pairing."""
    return cast(Handler, method)
