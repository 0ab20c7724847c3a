"""The Apache Kafka launcher the tests, the bench and local use share (deploy/kafka/run.sh)."""

from __future__ import annotations

import os
import re
import socket
import ssl
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from apache_kafka import ApacheKafkaBroker, fetch_apache_kafka

from coordinator_server.tools.bench import apache_kafka as apache_kafka_launcher
from coordinator_server.tools.bench.processes import free_port

pytestmark = pytest.mark.kafka


async def test_a_record_goes_through_plaintext_and_back(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        sent = await producer.send_and_wait(unique_topic, b"plain", key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        unique_topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await consumer.getone()
    finally:
        await consumer.stop()
    assert (record.offset, record.key, record.value) == (sent.offset, b"k", b"plain")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_the_sasl_ssl_listener_takes_each_mechanism(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, mechanism: str
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.sasl_ssl_bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_plain_username=kafka_broker.sasl_username,
        sasl_plain_password=kafka_broker.sasl_password,
        ssl_context=ssl.create_default_context(cafile=str(kafka_broker.ca_file)),
    )
    await producer.start()
    try:
        sent = await producer.send_and_wait(unique_topic, b"secret")
    finally:
        await producer.stop()
    assert sent.offset == 0


async def topics_of(broker: ApacheKafkaBroker) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_a_restart_keeps_the_data_and_an_empty_restart_forgets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of its own, with the run's jars and no class-data archive yet.
    fetch_apache_kafka()
    cache = tmp_path / "cache" / kafka_cache().name
    cache.mkdir(parents=True)
    (cache / "lib").symlink_to(kafka_cache() / "lib")
    (cache / "complete").touch()
    monkeypatch.setenv("COORDINATOR_KAFKA_CACHE", str(cache.parent))
    monkeypatch.setenv("KAFKA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseStringDeduplication")

    with ApacheKafkaBroker() as broker:
        assert broker.startup_s > 0
        # KAFKA_OPTS, as Kafka's own scripts take it.
        assert {"-XX:TieredStopAtLevel=1", "-XX:+UseStringDeduplication"} <= set(
            jvm_options(broker)
        )
        # The first start dumps the classes it loaded as it stops.
        assert any(o.startswith("-XX:ArchiveClassesAtExit=") for o in jvm_options(broker))
        port = broker.port
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait("kept", b"x")
        finally:
            await producer.stop()
        broker.pause()
        broker.resume()
        broker.restart()
        assert "kept" in await topics_of(broker)
        # Stopped cleanly, it left the archive, which every later start maps.
        [archive] = (cache / "cds").glob("*.jsa")
        assert f"-XX:SharedArchiveFile={archive}" in jvm_options(broker)
        assert not any(o.startswith("-XX:ArchiveClassesAtExit=") for o in jvm_options(broker))
        broker.restart_empty()
        assert broker.port == port
        assert "kept" not in await topics_of(broker)


def test_a_port_taken_before_the_broker_binds_it_starts_it_on_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another process takes the first port picked, between the pick and the broker's bind.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        picks = iter([taken_port])
        monkeypatch.setattr(
            apache_kafka_launcher, "free_port", lambda: next(picks, None) or free_port()
        )
        with ApacheKafkaBroker() as broker:
            assert broker.port != taken_port
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
                pass


def kafka_cache() -> Path:
    """The launcher's cache of this Kafka version's jars."""
    root = Path(apache_kafka_launcher.launcher()).parents[2]
    pom = (root / "deploy" / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>(.+)</kafka\.version>", pom)
    assert version is not None
    cache = Path(os.environ.get("COORDINATOR_KAFKA_CACHE", root / ".cache"))
    return cache / f"kafka-{version[1]}"


def jvm_options(broker: ApacheKafkaBroker) -> list[str]:
    arguments = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
    return [a.decode() for a in arguments if a.startswith(b"-XX:")]
