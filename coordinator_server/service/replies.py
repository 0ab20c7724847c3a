"""What a handler answers: a response now, or one still to come (`PendingReply`), and the
helpers that turn the runtime's outcome of an operation into either.

Every API of the front door answers through these, as Kafka's handlers chain futures:
- `reply_to`: an operation's outcome, its failure mapped by the API's own error answer; the
  connection waits on the runtime's own future, with no second future per request;
- `reply_then`: what an answer makes of the committed result, which may itself wait on
  something else (a new producer id, another node), after the result's `effect` (what it
  sets going, such as a transaction's markers): the answer builders have no side effects;
- `reply_after`: what a reply makes of another future's result once it has one (a
  verification, a new producer id), that future's failure mapped by the API;
- `reply_gathered`: one answer built once every part of a request is done;
- `settle`: a reply of the caller's own settled with what another reply answers, now or
  later (a request that waited for something before it was sent);
- `sliced_reply`: an answer built a slice at a time;
- `typed_handler`: a method of one request type as an entry of the dispatch table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypeVar, cast

from coordinator_protocol.messages import Message
from coordinator_server.runtime.api import RequestContext
from coordinator_server.runtime.events import WriteOutcome
from coordinator_server.service.slicing import SlicedAnswer

__all__ = [
    "Handler",
    "PendingReply",
    "Reply",
    "future_failure",
    "reply_after",
    "reply_gathered",
    "reply_then",
    "reply_to",
    "settle",
    "sliced_reply",
    "typed_handler",
]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
T = TypeVar("T")


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


def reply_then(
    name: str,
    outcome: WriteOutcome[T],
    answer: Callable[[T], Reply],
    on_error: Callable[[BaseException], Message],
    *,
    effect: Callable[[T], None] | None = None,
) -> Reply:
    """What `answer` makes of the operation's result once it is committed, after `effect`
    of the result; the operation's failure, or an `effect` or `answer` that fails (logged,
    with the operation's `name`), as `on_error` makes it."""

    def answered(result: T) -> Reply:
        try:
            if effect is not None:
                effect(result)
            return answer(result)
        except Exception as error:
            logger.exception("%s: the answer could not be made", name)
            return on_error(error)

    future = outcome.future
    if future is None:
        error = outcome.error
        return on_error(error) if error is not None else answered(cast(T, outcome.response))
    return reply_after(future, answered, on_error)


def reply_after(
    future: asyncio.Future[T],
    then: Callable[[T], Reply],
    on_error: Callable[[BaseException], Message],
    *,
    unused: Callable[[T], None] | None = None,
) -> Reply:
    """Once `future` has its result, what `then(result)` answers (now or later); its failure
    (or cancellation) as `on_error` makes it. `unused` is given a result that came after the
    reply was cancelled, so that nothing it holds is lost."""
    reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if reply.done():
            if unused is not None and not f.cancelled() and f.exception() is None:
                unused(f.result())
            return
        failure = asyncio.CancelledError() if f.cancelled() else f.exception()
        if failure is not None:
            reply.set_result(on_error(failure))
        else:
            settle(reply, lambda: then(f.result()))

    future.add_done_callback(done)
    return PendingReply(reply)


def reply_gathered(parts: Sequence[asyncio.Future[Any]], build: Callable[[], Message]) -> Reply:
    """`build()` once every one of `parts` is done (at once when they all are); the parts
    carry their own answers, never a failure."""
    pending = [part for part in parts if not part.done()]
    if not pending:
        return build()
    reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    left = len(pending)

    def one_done(_: asyncio.Future[Any]) -> None:
        nonlocal left
        left -= 1
        if left == 0 and not reply.done():
            settle(reply, build)

    for part in pending:
        part.add_done_callback(one_done)
    return PendingReply(reply)


def settle(reply: asyncio.Future[Message], send: Callable[[], Reply]) -> None:
    """Settle `reply` with what `send()` answers, now or once its pending answer is ready.
    Run from a loop callback: a failure of `send` is the connection's UNKNOWN_SERVER_ERROR."""
    try:
        answer = send()
    except Exception as error:
        reply.set_exception(error)
        return
    if not isinstance(answer, PendingReply):
        reply.set_result(answer)
        return
    on_error = answer.on_error

    def forward(done: asyncio.Future[Any]) -> None:
        if reply.done():
            return
        failure = None if done.cancelled() else done.exception()
        if failure is None and not done.cancelled():
            reply.set_result(done.result())
        elif on_error is not None:
            reply.set_result(on_error(failure or asyncio.CancelledError()))
        else:
            reply.set_exception(failure or asyncio.CancelledError())

    answer.future.add_done_callback(forward)


def sliced_reply(answer: Message | SlicedAnswer) -> Reply:
    """A bulk request's answer: at once, or still being built in slices."""
    return answer if isinstance(answer, Message) else PendingReply(answer.result, sliced=answer)


def typed_handler(request_type: type[M], method: Callable[[M, RequestContext], Reply]) -> Handler:
    """`method` as a handler of any message. The server gives it only `request_type`'s
    (parse_request builds the type registered for the handler's api key), so no wrapper
    checks the type again on every request; `request_type` documents the pairing."""
    return cast(Handler, method)


def future_failure(future: asyncio.Future[Any]) -> BaseException | None:
    """What a done future failed with: its exception, a CancelledError when it was cancelled,
    None when it has a result."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()
