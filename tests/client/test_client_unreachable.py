"""A client pointed at the wrong place says so: the connection problems are logged at
WARNING as they happen (a bounded number of lines however often the client retries), and
the timeouts the user sees name the coordinator and the last error. Real sockets only: a
port nobody listens on, a server process killed mid-way, a Kafka broker, a TLS server whose
certificate the client does not trust."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from client_servers import sqlite_server, write_self_signed_certificate
from kafka_broker import KafkaBroker, free_port
from server_process import ServerProcess

from coordinator_client import CoordinatorClient
from coordinator_client.consumer import CoordinatedConsumer
from coordinator_client.errors import AssignmentTimeoutError, GroupMemberError
from coordinator_client.member import GroupMember
from coordinator_client.producer import TransactionalProducer
from coordinator_client.rpc.errors import ConnectionClosedError, RequestTimeoutError
from coordinator_client.txn_sender import TransactionStepError

PROBLEMS_LOGGER = "coordinator_client.rpc.connection_problems"
NOT_A_COORDINATOR = "does not speak the coordinator protocol (is it a Kafka broker?)"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == PROBLEMS_LOGGER and record.levelno == logging.WARNING
    ]


@contextmanager
def untrusted_tls_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server on TLS with a self-signed certificate, which no default context trusts."""
    cert, key = write_self_signed_certificate(tmp_path)
    with sqlite_server(
        tmp_path / "data", "--tls-certfile", str(cert), "--tls-keyfile", str(key)
    ) as server:
        yield server


def member_of(client: CoordinatorClient) -> GroupMember:
    return GroupMember(client, "unreachable", ["t"], partitions_for_topics={"t": 1})


async def test_a_refused_connection_is_logged_with_back_off_and_named_in_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    # Retries every 10-20 ms for 3 s: about 200 refused connections.
    async with CoordinatorClient(
        f"127.0.0.1:{port}", retry_backoff_ms=10, retry_backoff_max_ms=20
    ) as client:
        member = member_of(client)
        await member.start()
        with pytest.raises(TimeoutError) as raised:
            await member.wait_for_assignment(3.0)
        await member.close()
    assert isinstance(raised.value, AssignmentTimeoutError)
    assert str(raised.value) == (
        f"group 'unreachable': no assignment from the coordinator at 127.0.0.1:{port} "
        "within 3.0 s: last error: connection refused"
    )
    lines = warnings(caplog)
    # The first at once, then at most one per 10 s (with a count): one line in 3 s.
    assert lines == [f"coordinator 127.0.0.1:{port}: connection refused"]
    assert client.problems.cause(("127.0.0.1", port)) == "connection refused"


async def test_repeats_are_counted_in_the_next_line() -> None:
    port = free_port()
    async with CoordinatorClient(
        f"127.0.0.1:{port}", retry_backoff_ms=10, retry_backoff_max_ms=20
    ) as client:
        client.problems.interval_s = 0.5
        logger = logging.getLogger(PROBLEMS_LOGGER)
        records: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                records.append(record.getMessage())

        handler = Collect(logging.WARNING)
        logger.addHandler(handler)
        try:
            # The deadline passes during a back-off (the last error) or a connect (a
            # timeout naming it): either way the cause is said.
            with pytest.raises(
                (ConnectionClosedError, RequestTimeoutError), match="connection refused"
            ):
                await client.api_versions(timeout_ms=1600)
        finally:
            logger.removeHandler(handler)
    # 1.6 s at one line per 0.5 s: 4 lines at most, the later ones counting the repeats.
    assert 2 <= len(records) <= 4, records
    assert records[0] == f"coordinator 127.0.0.1:{port}: connection refused"
    assert "more times since the last warning)" in records[1]


async def test_a_server_killed_mid_way(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with sqlite_server(tmp_path) as server:
        client = CoordinatorClient(
            f"127.0.0.1:{server.port}", retry_backoff_ms=10, retry_backoff_max_ms=20
        )
        member = GroupMember(
            client,
            "killed",
            ["t"],
            partitions_for_topics={"t": 1},
            session_timeout_ms=1000,
            heartbeat_interval_ms=100,
        )
        await member.start()
        await member.wait_for_assignment(30)
        server.kill()
    try:
        member.request_rejoin("the test asks")
        with pytest.raises(AssignmentTimeoutError) as raised:
            await member.wait_for_assignment(3.0)
        message = str(raised.value)
        assert message.startswith(
            f"group 'killed': no assignment from the coordinator at 127.0.0.1:{server.port} "
            "within 3.0 s: last error: "
        )
        lines = warnings(caplog)
        # The loss, then the refusals: a line each, the repeats held back.
        assert any("closed the connection" in line or "lost" in line for line in lines), lines
        assert f"coordinator 127.0.0.1:{server.port}: connection refused" in lines
        assert len(lines) <= 3, lines
    finally:
        await member.close()
        await client.close()


async def test_a_tls_server_with_a_certificate_the_client_does_not_trust(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with untrusted_tls_server(tmp_path) as server:
        async with CoordinatorClient(
            f"127.0.0.1:{server.port}", ssl_context=ssl.create_default_context()
        ) as client:
            member = member_of(client)
            await member.start()
            # Not retried: the member ends at once, saying why.
            with pytest.raises(GroupMemberError) as raised:
                await member.wait_for_assignment(10)
            await member.close()
    assert str(raised.value).startswith(
        f"group unreachable: membership ended: the coordinator at 127.0.0.1:{server.port}: "
        "TLS handshake failed: certificate verify failed"
    )
    lines = warnings(caplog)
    assert len(lines) == 1
    assert lines[0].startswith(
        f"coordinator 127.0.0.1:{server.port}: TLS handshake failed: certificate verify failed"
    )


async def test_a_kafka_broker_is_named_for_what_it_is(
    kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    address = f"127.0.0.1:{kafka_broker.port}"
    async with CoordinatorClient(address, retry_backoff_ms=10, retry_backoff_max_ms=20) as client:
        member = member_of(client)
        await member.start()
        with pytest.raises(AssignmentTimeoutError) as raised:
            await member.wait_for_assignment(3.0)
        await member.close()
    assert NOT_A_COORDINATOR in str(raised.value)
    assert f"the coordinator at {address} within 3.0 s" in str(raised.value)
    lines = warnings(caplog)
    assert 1 <= len(lines) <= 2, lines
    assert f"the peer at {address} {NOT_A_COORDINATOR}" in lines[0]


async def test_a_consumer_pointed_at_a_kafka_broker_does_not_start(
    kafka_broker: KafkaBroker,
) -> None:
    consumer = CoordinatedConsumer(
        "t",
        bootstrap_servers=kafka_broker.bootstrap,
        coordinator_bootstrap_servers=kafka_broker.bootstrap,
        group_id="wrong-address",
        coordinator_options={"request_timeout_ms": 3000, "retry_backoff_ms": 10},
    )
    with pytest.raises(ConnectionClosedError, match=r"is it a Kafka broker\?"):
        await asyncio.wait_for(consumer.start(), 30)
    await consumer.stop()


async def test_a_consumer_pointed_at_a_port_nobody_listens_on_does_not_start(
    kafka_broker: KafkaBroker,
) -> None:
    port = free_port()
    consumer = CoordinatedConsumer(
        "t",
        bootstrap_servers=kafka_broker.bootstrap,
        coordinator_bootstrap_servers=f"127.0.0.1:{port}",
        group_id="wrong-port",
        coordinator_options={"request_timeout_ms": 2000},
    )
    with pytest.raises(ConnectionClosedError, match=f"127.0.0.1:{port}: connection refused"):
        await asyncio.wait_for(consumer.start(), 30)
    await consumer.stop()


async def test_a_producer_pointed_at_a_port_nobody_listens_on_keeps_asking_and_says_why(
    kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    producer = TransactionalProducer(
        bootstrap_servers=kafka_broker.bootstrap,
        transactional_id="unreachable-tx",
        coordinator_bootstrap_servers=f"127.0.0.1:{port}",
        coordinator_options={
            "request_timeout_ms": 1000,
            "retry_backoff_ms": 10,
            "retry_backoff_max_ms": 20,
        },
    )
    # As aiokafka's transactional producer: start() keeps asking for a producer id; the
    # application bounds it.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3.5):
            await producer.start()
    await producer.stop()
    assert warnings(caplog) == [f"coordinator 127.0.0.1:{port}: connection refused"]
    attempts = [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and record.name != PROBLEMS_LOGGER
    ]
    # One line an attempt (each lasts request_timeout_ms), each naming the cause.
    assert 1 <= len(attempts) <= 4, attempts
    assert all(
        line.startswith("InitProducerId for 'unreachable-tx' failed, retrying: ")
        and f"127.0.0.1:{port}" in line
        and "connection refused" in line
        for line in attempts
    ), attempts


async def test_a_producer_that_does_not_trust_the_servers_certificate_ends_saying_so(
    kafka_broker: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with untrusted_tls_server(tmp_path) as server:
        producer = TransactionalProducer(
            bootstrap_servers=kafka_broker.bootstrap,
            transactional_id="untrusted-tx",
            coordinator_bootstrap_servers=f"127.0.0.1:{server.port}",
            coordinator_options={"ssl_context": ssl.create_default_context()},
        )
        # Not retried: a certificate that does not verify will not on the next try.
        with pytest.raises(TransactionStepError) as raised:
            await asyncio.wait_for(producer.start(), 10)
        await producer.stop()
    # aiokafka's errors put their class name first.
    assert str(raised.value).startswith(
        f"TransactionStepError: InitProducerId: the coordinator at 127.0.0.1:{server.port}: "
        "TLS handshake failed: certificate verify failed"
    )
    lines = warnings(caplog)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"coordinator 127.0.0.1:{server.port}: TLS handshake failed: certificate verify failed"
    )
