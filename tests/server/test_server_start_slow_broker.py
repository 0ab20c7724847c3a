"""A broker that answers nothing while the server starts: the log's own start, once the
cluster has answered, and every component started beside the log (the transactions check,
the marker writer, the cluster membership) wait for it as the load does, with a few WARNING
lines, and the server comes up once it answers."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kafka_broker import KafkaBroker
from server_process import ServerProcess

from coordinator_server.markers import KafkaTxnMarkerWriter
from coordinator_server.starting import StartAbandoned, start_with_retries

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PAUSE_S = 8.0


def serve_args(broker: KafkaBroker, topic: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--transactions", "on",
        # Requests to the paused broker time out many times over while it is paused.
        "--offsets-commit-timeout-ms", "500",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("topic_exists", "paused_after"),
    [
        # Paused in the log's own start, between creating its topic and its first append.
        pytest.param(False, "created topic", id="in-the-logs-start"),
        # The topic exists, so that the start reaches the components beside the log
        # quickly: paused once the log's start is (nearly) done, so that what waits is
        # what starts beside it: the transactions check and the marker writer.
        pytest.param(True, "appends are", id="beside-the-log"),
    ],
)
async def test_a_server_started_against_a_paused_broker_comes_up_once_it_resumes(
    pausable_kafka_broker: KafkaBroker, unique_topic: str, topic_exists: bool, paused_after: str
) -> None:
    broker = pausable_kafka_broker
    if topic_exists:
        first = ServerProcess(serve_args(broker, unique_topic))
        first.start(timeout=60)
        assert first.terminate() == 0
    server = ServerProcess(serve_args(broker, unique_topic))
    resumed = True
    try:
        starting = asyncio.get_running_loop().run_in_executor(None, server.start, 120)
        deadline = time.monotonic() + 60
        while not any(paused_after in line for line in server.lines):
            assert time.monotonic() < deadline and not starting.done(), server.output()
            await asyncio.sleep(0.01)
        broker.pause()
        resumed = False
        await asyncio.sleep(PAUSE_S)
        assert server.proc is not None and server.proc.poll() is None, server.output()
        assert not starting.done(), server.output()
        broker.resume()
        resumed = True
        await starting
    finally:
        if not resumed:
            broker.resume()
    try:
        output = server.output()
        assert "Traceback" not in output, output
        assert server.proc is not None and server.proc.poll() is None, output
        # Whichever step the pause caught: a component started beside the log, the log's
        # own start, or the producer ids the log and the markers ask the cluster for.
        waits = ("could not start", "the log's start failed", "asking again")
        retried = [line for line in server.lines if any(wait in line for wait in waits)]
        # Waited, and said so with back-off: not a line per attempt (one every 0.5 s to
        # 10 s at most while paused), a few over the pause.
        assert retried and all("WARNING" in line for line in retried), output
        assert len(retried) <= 6, output
    finally:
        assert server.terminate() == 0, server.output()


async def test_the_marker_writer_waits_for_a_paused_broker(
    pausable_kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker = pausable_kafka_broker
    logger = logging.getLogger("test.start_retry")
    writer = KafkaTxnMarkerWriter(broker.bootstrap, request_timeout_ms=300)
    stop = asyncio.Event()
    broker.pause()
    try:
        resumed = False
        caplog.set_level(logging.WARNING, logger="test.start_retry")
        started = time.monotonic()
        starting = asyncio.ensure_future(
            start_with_retries(
                "the transaction marker writer",
                writer.start,
                retriable=(TimeoutError, OSError),
                stop=stop,
                logger=logger,
                backoff_s=0.1,
                backoff_max_s=0.5,
            )
        )
        await asyncio.sleep(4)
        assert not starting.done()
        broker.resume()
        resumed = True
        await asyncio.wait_for(starting, 30)
    finally:
        if not resumed:
            broker.resume()
    try:
        waited = [r for r in caplog.records if "could not start" in r.getMessage()]
        # At least 6 attempts timed out in 4 s; the first is said at once, the next after
        # 5 s: one line.
        assert len(waited) == 1, [r.getMessage() for r in caplog.records]
        assert any("started after" in r.getMessage() for r in caplog.records)
        assert time.monotonic() - started >= 4
        assert writer.queued_markers == 0
    finally:
        await writer.stop()


async def test_a_stop_ends_the_wait() -> None:
    stop = asyncio.Event()
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 3:
            stop.set()
        raise OSError("connection refused")

    with pytest.raises(StartAbandoned):
        await asyncio.wait_for(
            start_with_retries(
                "a component",
                refused,
                retriable=(OSError,),
                stop=stop,
                logger=logging.getLogger("test.start_retry"),
                backoff_s=0.01,
                backoff_max_s=0.02,
            ),
            10,
        )
    assert attempts == 3
