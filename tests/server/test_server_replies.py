"""The reply helpers (service/replies.py): what each answers, now or later, and what becomes
of a failure or a result that comes too late."""

from __future__ import annotations

import asyncio

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import HeartbeatResponse, Message
from coordinator_server.runtime.events import WriteOutcome
from coordinator_server.service.replies import (
    PendingReply,
    Reply,
    reply_after,
    reply_gathered,
    reply_then,
    settle,
)


def answer(code: ErrorCode) -> Message:
    return HeartbeatResponse(error_code=code)


def failed(_: BaseException) -> Message:
    return answer(ErrorCode.UNKNOWN_SERVER_ERROR)


async def settled(reply: Reply) -> Message:
    return await reply.future if isinstance(reply, PendingReply) else reply


async def test_reply_then_runs_the_effect_before_the_answer_and_only_once_committed() -> None:
    seen: list[str] = []
    write: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    reply = reply_then(
        "op",
        WriteOutcome(future=write),
        lambda result: (seen.append(f"answer {result}"), answer(ErrorCode.NONE))[1],
        failed,
        effect=lambda result: seen.append(f"effect {result}"),
    )
    assert seen == [] and isinstance(reply, PendingReply)
    write.set_result(7)
    assert await settled(reply) == answer(ErrorCode.NONE)
    assert seen == ["effect 7", "answer 7"]


async def test_reply_then_answers_a_failed_write_or_a_failing_effect_with_the_error() -> None:
    ran: list[int] = []
    over = reply_then(
        "op", WriteOutcome(error=RuntimeError("no")), lambda _: answer(ErrorCode.NONE), failed,
        effect=ran.append,
    )  # fmt: skip
    assert over == answer(ErrorCode.UNKNOWN_SERVER_ERROR) and ran == []

    def broken(_: int) -> None:
        raise ValueError("effect")

    assert reply_then(
        "op", WriteOutcome(response=1), lambda _: answer(ErrorCode.NONE), failed, effect=broken
    ) == answer(ErrorCode.UNKNOWN_SERVER_ERROR)


async def test_reply_after_gives_back_a_result_that_comes_after_the_reply_was_cancelled() -> None:
    taking: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    given_back: list[int] = []
    reply = reply_after(taking, lambda _: answer(ErrorCode.NONE), failed, unused=given_back.append)
    assert isinstance(reply, PendingReply)
    reply.future.cancel()
    taking.set_result(42)
    await asyncio.sleep(0)
    assert given_back == [42]


async def test_reply_after_maps_a_failure_and_chains_a_pending_answer() -> None:
    loop = asyncio.get_running_loop()
    failing: asyncio.Future[int] = loop.create_future()
    reply = reply_after(failing, lambda _: answer(ErrorCode.NONE), failed)
    failing.set_exception(TimeoutError())
    assert await settled(reply) == answer(ErrorCode.UNKNOWN_SERVER_ERROR)

    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[Message] = loop.create_future()
    chained = reply_after(first, lambda _: PendingReply(second), failed)
    first.set_result(1)
    await asyncio.sleep(0)
    second.set_result(answer(ErrorCode.NOT_COORDINATOR))
    assert await settled(chained) == answer(ErrorCode.NOT_COORDINATOR)


async def test_settle_answers_a_failed_pending_reply_with_its_own_error_answer() -> None:
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[Message] = loop.create_future()
    inner: asyncio.Future[Message] = loop.create_future()
    settle(reply, lambda: PendingReply(inner, failed))
    inner.set_exception(RuntimeError("lost"))
    assert await reply == answer(ErrorCode.UNKNOWN_SERVER_ERROR)


async def test_reply_gathered_builds_once_every_part_is_done() -> None:
    loop = asyncio.get_running_loop()
    parts: list[asyncio.Future[int]] = [loop.create_future() for _ in range(3)]
    built: list[int] = []

    def build() -> Message:
        built.append(sum(part.result() for part in parts))
        return answer(ErrorCode.NONE)

    parts[0].set_result(1)
    reply = reply_gathered(parts, build)
    assert isinstance(reply, PendingReply)
    parts[2].set_result(2)
    await asyncio.sleep(0)
    assert built == []
    parts[1].set_result(3)
    assert await settled(reply) == answer(ErrorCode.NONE)
    assert built == [6]
    assert reply_gathered(parts, build) == answer(ErrorCode.NONE)
