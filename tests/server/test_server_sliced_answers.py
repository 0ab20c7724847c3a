"""A connection builds one bulk answer in slices at a time: the frames behind it wait; an
answer that waits for a write does not hold them up meanwhile.

A fetch-all OffsetFetch of a large group, a DescribeGroups of many, a ListGroups: their
answers are built a slice at a time (see `slicing`) and counted against the connection's
`response_buffer_bytes` only once they are ready. Were a connection to start every frame of
a read at once, a client that pipelines hundreds of them (and perhaps never reads) would
have the server build hundreds of megabyte answers before any was counted. An answer that
waits for futures (an OffsetFetch with require_stable, for the writes of its group's
partition to be acknowledged) is parked, not built: the requests behind it are served, and
once the writes are acknowledged the parked answers go on one at a time. In process, with a
slice of no time at all, so that every bulk answer takes several slices."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets, until

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.messages import Message
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.service import slicing
from coordinator_server.service.slicing import BuildSlot, SlicedAnswer, Steps
from coordinator_server.storage import InMemoryLog

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 4
OFFSETS = 1000
PIPELINED = 50


class Builds:
    """Every slice of every sliced answer, in order, and what its answer was after it:
    being built (the slice paused), parked (it waits for futures) or done; and the
    connection's BuildSlot each answer was built in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[Steps, str]] = []
        self.slot_of: dict[Steps, BuildSlot] = {}
        advance = slicing.advance
        build_in = SlicedAnswer.build_in

        def advancing(generator: Steps) -> Any:
            try:
                outcome = advance(generator)
            except Exception:
                self.events.append((generator, "done"))
                raise
            if outcome is None:
                state = "building"
            else:
                state = "done" if isinstance(outcome, Message) else "parked"
            self.events.append((generator, state))
            return outcome

        def building_in(answer: SlicedAnswer, slot: BuildSlot) -> None:
            self.slot_of[answer.steps] = slot
            build_in(answer, slot)

        monkeypatch.setattr(slicing, "advance", advancing)
        monkeypatch.setattr(SlicedAnswer, "build_in", building_in)

    def most_at_once(self, state: str) -> list[int]:
        """For each connection that had answers in slices, the most of them that were in
        `state` at once."""
        now: dict[BuildSlot, set[Steps]] = defaultdict(set)
        most: dict[BuildSlot, int] = defaultdict(int)
        for generator, after in self.events:
            slot = self.slot_of.get(generator)
            if slot is None:
                continue  # answered within its first slice
            if after == state:
                now[slot].add(generator)
            else:
                now[slot].discard(generator)
            most[slot] = max(most[slot], len(now[slot]))
        return list(most.values())

    def slices(self, state: str) -> int:
        return sum(after == state for _, after in self.events)


async def start(log: InMemoryLog) -> CoordinatorApp:
    config = CoordinatorConfig(port=0, metrics_port=-1, offsets_topic_partitions=PARTITIONS)
    app = CoordinatorApp(config, log=log)
    await app.start()
    assert app.address is not None
    return app


async def test_one_answer_in_slices_at_a_time_per_connection_and_all_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)
    builds = Builds(monkeypatch)
    app = await start(InMemoryLog(PARTITIONS))
    assert app.address is not None
    try:
        writer = await WireClient.connect(*app.address)
        offsets = {("t", p): p for p in range(OFFSETS)}
        assert set(commit_errors(await writer.call(
            ApiKey.OFFSET_COMMIT, commit_body("big", offsets), timeout=30
        )).values()) == {0}  # fmt: skip
        await writer.close()

        piped = await WireClient.connect(*app.address)
        other = await WireClient.connect(*app.address)
        try:
            # One write: the server reads the frames together.
            answers: list[asyncio.Future[dict[str, Any]]] = [
                piped.send(ApiKey.OFFSET_FETCH, fetch_body("big", None)) for _ in range(PIPELINED)
            ]
            # Another connection is not held up by this one's queue.
            alone = await other.call(ApiKey.OFFSET_FETCH, fetch_body("big", None), timeout=30)
            assert len(fetched_offsets(alone)) == OFFSETS
            for answer in await asyncio.wait_for(asyncio.gather(*answers), 30):
                assert fetched_offsets(answer) == offsets
        finally:
            await piped.close()
            await other.close()
    finally:
        await app.shutdown()
    # Every answer took slices (else the test shows nothing), and no connection ever had
    # two being built.
    assert builds.slices("building") >= PIPELINED + 1
    assert builds.most_at_once("building") == [1, 1]


async def test_parked_answers_hold_back_nothing_and_go_on_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On one connection, stable fetches (parked: a commit of their group's partition is not
    acknowledged yet) between plain ones: the plain ones are all answered while the stable
    ones wait, and once the commit is acknowledged the stable ones, all able to go on at
    once, are built one at a time."""
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)
    builds = Builds(monkeypatch)
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    partition = partition_for("big", PARTITIONS)
    app = await start(log)
    assert app.address is not None
    try:
        writer = await WireClient.connect(*app.address)
        piped = await WireClient.connect(*app.address)
        try:
            offsets = {("t", p): p for p in range(OFFSETS)}
            first = writer.send(ApiKey.OFFSET_COMMIT, commit_body("big", offsets))
            await until(lambda: log.writer.end_offset(partition) > 0)
            log.writer.commit(partition)
            assert set(commit_errors(await asyncio.wait_for(first, 30)).values()) == {0}
            end = log.writer.end_offset(partition)
            second = writer.send(ApiKey.OFFSET_COMMIT, commit_body("big", {("t", 0): 5000}))
            await until(lambda: log.writer.end_offset(partition) > end)

            stable: list[asyncio.Future[dict[str, Any]]] = []
            plain: list[asyncio.Future[dict[str, Any]]] = []
            for _ in range(PIPELINED // 2):
                stable.append(piped.send(ApiKey.OFFSET_FETCH, fetch_body("big", None, True)))
                plain.append(piped.send(ApiKey.OFFSET_FETCH, fetch_body("big", None)))
            # The committed state, while every stable fetch waits.
            for answer in await asyncio.wait_for(asyncio.gather(*plain), 30):
                assert fetched_offsets(answer) == offsets
            assert not second.done() and not any(answer.done() for answer in stable)

            log.writer.commit(partition)
            assert commit_errors(await asyncio.wait_for(second, 30)) == {("t", 0): 0}
            for answer in await asyncio.wait_for(asyncio.gather(*stable), 30):
                assert fetched_offsets(answer) == {**offsets, ("t", 0): 5000}
        finally:
            await writer.close()
            await piped.close()
    finally:
        await app.shutdown()
    # Every stable fetch was parked at once (so that all could go on at once), and still
    # the connection never had two answers being built.
    assert builds.most_at_once("parked") == [PIPELINED // 2]
    assert builds.most_at_once("building") == [1]


async def test_an_answer_cancelled_while_parked_leaves_the_slot_free() -> None:
    """At shutdown the service cancels the answers under way, parked ones too; the futures
    a parked one waited for complete later (the runtime flushes its writes), and must not
    hand it a slot it would never leave: the connection's waiting requests would never be
    taken, and its drain would wait for them until its timeout."""
    loop = asyncio.get_running_loop()
    write: asyncio.Future[None] = loop.create_future()
    freed: list[bool] = []

    def steps(clock: slicing.SliceClock) -> Steps:
        yield [write]
        yield slicing.PAUSE
        return Message()

    requests = slicing.SlicedRequests()
    slot = BuildSlot(lambda: freed.append(True))
    parked = requests.run(steps)
    assert isinstance(parked, SlicedAnswer) and parked.parked
    parked.build_in(slot)
    assert slot.building is None
    requests.cancel_all()
    write.set_result(None)
    await asyncio.sleep(0)
    assert parked.result.cancelled() and slot.building is None and len(requests) == 0


@pytest.mark.parametrize(("response_buffer_bytes", "most_parked"), [(10_000, 1), (4 << 20, 20)])
async def test_what_parked_answers_have_built_counts_with_the_unread_answers(
    monkeypatch: pytest.MonkeyPatch, response_buffer_bytes: int, most_parked: int
) -> None:
    """Stable fetches that name a large group, then one whose partition has a commit not yet
    acknowledged: each builds the first group's part (some 10 KB) and parks on the second.
    What they have built counts against `response_buffer_bytes` as the answers ready to be
    written do: past it, the connection takes no more requests until answers leave; under
    it, every one of them parks at once."""
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)
    builds = Builds(monkeypatch)
    waits = next(
        f"waits-{i}"
        for i in range(1000)
        if partition_for(f"waits-{i}", PARTITIONS) != partition_for("big", PARTITIONS)
    )
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        offsets_topic_partitions=PARTITIONS,
        response_buffer_bytes=response_buffer_bytes,
    )
    app = CoordinatorApp(config, log=log)
    await app.start()
    assert app.address is not None
    pipelined = 20
    try:
        writer = await WireClient.connect(*app.address)
        piped = await WireClient.connect(*app.address)
        try:
            offsets = {("t", p): p for p in range(OFFSETS)}
            big = writer.send(ApiKey.OFFSET_COMMIT, commit_body("big", offsets))
            await until(lambda: log.writer.end_offset(partition_for("big", PARTITIONS)) > 0)
            log.writer.commit(partition_for("big", PARTITIONS))
            assert set(commit_errors(await asyncio.wait_for(big, 30)).values()) == {0}
            pending = writer.send(ApiKey.OFFSET_COMMIT, commit_body(waits, {("t", 0): 1}))
            await until(lambda: log.writer.end_offset(partition_for(waits, PARTITIONS)) > 0)

            both = {
                "groups": [
                    {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}
                    for group in ("big", waits)
                ],
                "require_stable": True,
            }
            answers = [piped.send(ApiKey.OFFSET_FETCH, both) for _ in range(pipelined)]
            await until(lambda: builds.most_at_once("parked") == [most_parked])
            await asyncio.sleep(0.2)
            assert builds.most_at_once("parked") == [most_parked]
            assert not any(answer.done() for answer in answers)

            log.writer.commit(partition_for(waits, PARTITIONS))
            assert commit_errors(await asyncio.wait_for(pending, 30)) == {("t", 0): 0}
            for answer in await asyncio.wait_for(asyncio.gather(*answers), 30):
                first, second = answer["groups"]
                assert len(first["topics"][0]["partitions"]) == OFFSETS
                assert second["topics"][0]["partitions"][0]["committed_offset"] == 1
        finally:
            await writer.close()
            await piped.close()
    finally:
        await app.shutdown()
    assert builds.most_at_once("building") == [1]
