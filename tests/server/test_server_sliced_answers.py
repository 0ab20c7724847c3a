"""A connection builds one bulk answer in slices at a time: the frames behind it wait.

A fetch-all OffsetFetch of a large group, a DescribeGroups of many, a ListGroups: their
answers are built a slice at a time (see `slicing`) and counted against the connection's
`response_buffer_bytes` only once they are ready. Were a connection to start every frame of
a read at once, a client that pipelines hundreds of them (and perhaps never reads) would
have the server build hundreds of megabyte answers before any was counted. In process, with
a slice of no time at all, so that every bulk answer takes several slices."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_server import slicing
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.server.connection import CoordinatorConnection
from coordinator_server.storage import InMemoryLog
from protocol.api_keys import ApiKey

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 4
OFFSETS = 1000
PIPELINED = 50


async def test_one_answer_in_slices_at_a_time_per_connection_and_all_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)
    most_sliced: dict[int, int] = {}
    dispatch = CoordinatorConnection._dispatch

    def dispatching(self: CoordinatorConnection, payload: bytes) -> None:
        dispatch(self, payload)
        key = id(self)
        most_sliced[key] = max(most_sliced.get(key, 0), self._sliced_inflight)

    monkeypatch.setattr(CoordinatorConnection, "_dispatch", dispatching)
    config = CoordinatorConfig(port=0, metrics_port=-1, offsets_topic_partitions=PARTITIONS)
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
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
    # Answers took slices (without any, the most would be 0 and the test show nothing), and
    # no connection ever had two under way.
    assert most_sliced and max(most_sliced.values()) == 1, most_sliced
