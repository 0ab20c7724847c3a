"""The order of what the server writes around a ProduceRequest, in process, over a real
Kafka broker the test pauses (the shared `pausable_kafka_broker`: a pause holds up only the
tests that pause, which run one at a time in a test process, and the broker is resumed
before the test ends, so no broker of the test's own is needed).

The answers a produce response completes must leave before the next ProduceRequest does
(see ANSWER_TURNS where the server is wired, in app.py): the commits the answered clients
send next then join that request instead of waiting a whole round for the one after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka_broker import KafkaBroker
from wire_client import WireClient, commit_body, commit_errors, until

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.hashing import partition_for
from coordinator_server import app as wiring
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.server.connection import CoordinatorConnection
from coordinator_server.storage.kafka.produce import ProduceSender

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(60)]

PARTITIONS = 4


@contextmanager
def paused(broker: KafkaBroker) -> Iterator[None]:
    """The broker takes requests into its socket but answers none until resumed. `pause`
    returns once every thread of the broker has stopped: a bare SIGSTOP takes effect a
    moment later, and the broker sometimes answered the first commit in that moment."""
    broker.pause()
    try:
        yield
    finally:
        broker.resume()


def record_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """("produce", the partitions of a ProduceRequest) and ("answers", how many responses
    one write to a client carries), in the order the server writes them."""
    writes: list[tuple[str, Any]] = []
    encode = ProduceSender.encode
    flush = CoordinatorConnection.flush

    def encoding(self: ProduceSender, request: Any) -> bytes:
        writes.append(("produce", sorted(request.appends)))
        return encode(self, request)

    def flushing(self: CoordinatorConnection) -> None:
        if self.answers_ready:
            writes.append(("answers", self.answers_ready))
        flush(self)

    monkeypatch.setattr(ProduceSender, "encode", encoding)
    monkeypatch.setattr(CoordinatorConnection, "flush", flushing)
    return writes


async def two_rounds(
    broker: KafkaBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, Any]]:
    """What the server writes (see `record_writes`) when group b's commit is appended
    while group a's is in a ProduceRequest the broker has not answered yet."""
    writes = record_writes(monkeypatch)
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        bootstrap_servers=broker.bootstrap,
        offsets_topic=topic,
        offsets_topic_partitions=PARTITIONS,
        offsets_topic_replication_factor=1,
        # A node alone: the order of answers and requests is the log's, and a cluster's
        # membership (its heartbeats, its takeovers) and the transaction coordinator's sweep
        # of prepared transactions would add turns of their own to count.
        cluster="off",
        transactions="off",
    )
    app = CoordinatorApp(config)
    await app.start()
    assert app.address is not None
    client = await WireClient.connect(*app.address)
    try:
        # Loaded partitions and a produce connection before the broker pauses.
        for group in ("a", "b"):
            response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, {("t", 0): 1}))
            assert commit_errors(response) == {("t", 0): 0}
        writes.clear()
        with paused(broker):
            first = client.send(ApiKey.OFFSET_COMMIT, commit_body("a", {("t", 0): 2}))
            await until(lambda: len(writes) == 1)
            # Read and appended while the first request waits for the broker: it leaves
            # in the next request.
            second = client.send(ApiKey.OFFSET_COMMIT, commit_body("b", {("t", 0): 2}))
            await asyncio.sleep(0.2)
            assert not first.done() and len(writes) == 1
        assert commit_errors(await first) == {("t", 0): 0}
        assert commit_errors(await second) == {("t", 0): 0}
        return writes
    finally:
        await client.close()
        await app.shutdown()


async def test_the_answers_a_produce_response_completes_leave_before_the_next_request(
    pausable_kafka_broker: KafkaBroker, unique_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = await two_rounds(pausable_kafka_broker, unique_topic, monkeypatch)
    a, b = partition_for("a", PARTITIONS), partition_for("b", PARTITIONS)
    assert writes == [("produce", [a]), ("answers", 1), ("produce", [b]), ("answers", 1)]


async def test_one_turn_fewer_and_the_next_request_overtakes_the_answers(
    pausable_kafka_broker: KafkaBroker, unique_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANSWER_TURNS is as many turns as the answers take, no more: if the way from a
    produce response to the clients' sockets grows a turn, the test above fails; if it
    loses one, this one does."""
    monkeypatch.setattr(wiring, "ANSWER_TURNS", wiring.ANSWER_TURNS - 1)
    writes = await two_rounds(pausable_kafka_broker, unique_topic, monkeypatch)
    b = partition_for("b", PARTITIONS)
    assert writes[1:3] == [("produce", [b]), ("answers", 1)]
