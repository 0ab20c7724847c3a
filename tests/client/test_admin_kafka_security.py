"""`coordinator-server groups` beside a server whose log is behind Apache Kafka's SASL_SSL
listener: list, describe and offsets (log-end offsets read over SASL_SSL), the settings
from the server's environment, and a refusal or an untrusted broker as one clear line."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatorClient
from coordinator_server.cli import main
from coordinator_server.storage.kafka.security import KafkaSecurity

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 2
RECORDS = 5  # in each partition


def security_of(broker: ApacheKafkaBroker) -> KafkaSecurity:
    return KafkaSecurity.build(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username=broker.sasl_username,
        sasl_password=broker.sasl_password,
        ssl_ca_location=broker.ca_file,
    )


class Setup:
    def __init__(self, broker: ApacheKafkaBroker, server: ServerProcess, topic: str) -> None:
        self.broker = broker
        self.server = server
        self.topic = topic

    @property
    def coordinator(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    def run(self, *args: str) -> int:
        return main(
            [
                "groups", *args,
                "--bootstrap-server", self.coordinator,
                "--kafka-bootstrap-servers", self.broker.sasl_ssl_bootstrap,
                "--kafka-security-protocol", "SASL_SSL",
                "--kafka-sasl-mechanism", "SCRAM-SHA-256",
                "--kafka-sasl-username", self.broker.sasl_username,
                "--kafka-ssl-ca-location", str(self.broker.ca_file),
            ]
        )  # fmt: skip

    def commit(self, group: str, offsets: dict[int, int]) -> None:
        async def run() -> None:
            async with CoordinatorClient(self.coordinator) as client:
                await client.commit_offsets(
                    group, {TopicPartition(self.topic, p): o for p, o in offsets.items()}
                )

        asyncio.run(run())


@pytest.fixture(scope="module")
def setup(kafka_broker: ApacheKafkaBroker) -> Iterator[Setup]:
    topic = f"admin-sasl-{uuid.uuid4().hex[:10]}"
    options = security_of(kafka_broker).aiokafka_options()

    async def produce() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.sasl_ssl_bootstrap, **options)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.sasl_ssl_bootstrap, **options)
        await producer.start()
        try:
            for p in range(PARTITIONS):
                for i in range(RECORDS):
                    await producer.send_and_wait(topic, f"r{i}".encode(), partition=p)
        finally:
            await producer.stop()

    asyncio.run(produce())
    args = [
        "--port", "0",
        "--bootstrap-servers", kafka_broker.sasl_ssl_bootstrap,
        "--offsets-topic", f"{topic}-offsets",
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--kafka-security-protocol", "SASL_SSL",
        "--kafka-sasl-mechanism", "SCRAM-SHA-256",
        "--kafka-sasl-username", kafka_broker.sasl_username,
        "--kafka-ssl-ca-location", str(kafka_broker.ca_file),
    ]  # fmt: skip
    env = {"COORDINATOR_KAFKA_SASL_PASSWORD": kafka_broker.sasl_password}
    with ServerProcess(args, env) as server:
        yield Setup(kafka_broker, server, topic)


def output_json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_list_describe_and_offsets_over_sasl_ssl(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The password from the environment the server reads too.
    monkeypatch.setenv("COORDINATOR_KAFKA_SASL_PASSWORD", setup.broker.sasl_password)
    group = f"admin-group-{uuid.uuid4().hex[:8]}"
    setup.commit(group, {0: 2, 1: 5})
    assert setup.run("list", "--json") == 0
    assert {"group_id": group, "state": "Empty"}.items() <= {
        g["group_id"]: g for g in output_json(capsys)
    }[group].items()
    assert setup.run("describe", group, "--json") == 0
    assert output_json(capsys)["state"] == "Empty"
    assert setup.run("offsets", group, "--json") == 0
    rows = {r["partition"]: r for r in output_json(capsys)["partitions"]}
    assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (2, 5, 3)
    assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (5, 5, 0)


def test_a_refused_password_is_one_clear_line(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COORDINATOR_KAFKA_SASL_PASSWORD", "not-the-password")
    group = f"admin-group-{uuid.uuid4().hex[:8]}"
    setup.commit(group, {0: 1})
    capsys.readouterr()
    assert setup.run("offsets", group) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "refused SASL authentication of user 'coordinator' with SCRAM-SHA-256" in err[0]
    assert "not-the-password" not in err[0]


def test_an_untrusted_broker_is_one_clear_line(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COORDINATOR_KAFKA_SASL_PASSWORD", setup.broker.sasl_password)
    group = f"admin-group-{uuid.uuid4().hex[:8]}"
    setup.commit(group, {0: 1})
    capsys.readouterr()
    code = main(
        [
            "groups", "offsets", group,
            "--bootstrap-server", setup.coordinator,
            "--kafka-bootstrap-servers", setup.broker.sasl_ssl_bootstrap,
            "--kafka-security-protocol", "SASL_SSL",
            "--kafka-sasl-username", setup.broker.sasl_username,
        ]
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "TLS: the certificate of the broker at" in err[0]
    assert "no kafka-ssl-ca-location is given" in err[0]
