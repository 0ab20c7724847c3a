"""`coordinator-server serve` over Apache Kafka's SASL_SSL listener: each SASL mechanism
commits, restarts and loads its commits; settings that cannot work (a wrong password, a
certificate not trusted) stop the start with one clear line; a broker that refuses us later
is said plainly and clients get retriable errors; the password never shows."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

# A start that cannot work must end well before this (not hang).
START_FAILURE_TIMEOUT_S = 60


def sasl_ssl_args(broker: ApacheKafkaBroker, topic: str, mechanism: str, *extra: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.sasl_ssl_bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", "3",
        "--offsets-topic-replication-factor", "1",
        "--kafka-security-protocol", "SASL_SSL",
        "--kafka-sasl-mechanism", mechanism,
        "--kafka-sasl-username", broker.sasl_username,
        "--kafka-ssl-ca-location", str(broker.ca_file),
        *extra,
    ]  # fmt: skip


async def commit(server: ServerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    client = await WireClient.connect(server.host, server.port)
    try:
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, offsets), timeout=30)
        assert commit_errors(response) == dict.fromkeys(offsets, 0)
    finally:
        await client.close()


async def fetch(server: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    client = await WireClient.connect(server.host, server.port)
    try:
        for _ in range(600):
            response = await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, None))
            if response["groups"][0]["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return fetched_offsets(response)
            await asyncio.sleep(0.05)
        raise AssertionError("the group's partition never loaded")
    finally:
        await client.close()


def read_status(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/status", timeout=10) as answer:
        return str(answer.read().decode())


def run_serve(
    args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`serve` to its end: a start that cannot work must end by itself."""
    return subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--metrics-port", "-1", *args],
        capture_output=True,
        text=True,
        timeout=START_FAILURE_TIMEOUT_S,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_sasl_mechanism_commits_restarts_and_loads_over_sasl_ssl(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, mechanism: str, tmp_path: Path
) -> None:
    # The password each way it can be given: an option, a file, the environment.
    password = kafka_broker.sasl_password
    env: dict[str, str] = {}
    if mechanism == "PLAIN":
        extra = ["--kafka-sasl-password", password]
    elif mechanism == "SCRAM-SHA-256":
        password_file = tmp_path / "password"
        password_file.write_text(password + "\n")
        extra = ["--kafka-sasl-password-file", str(password_file)]
    else:
        extra = []
        env["COORDINATOR_KAFKA_SASL_PASSWORD"] = password
    args = sasl_ssl_args(kafka_broker, unique_topic, mechanism, *extra)
    offsets = {("orders", 0): 17, ("orders", 1): 42}
    with ServerProcess(args, env) as server:
        await commit(server, "secure-group", offsets)
        assert await fetch(server, "secure-group") == offsets
        status = await asyncio.get_running_loop().run_in_executor(
            None, read_status, server.metrics_port
        )
        assert f"(SASL_SSL, {mechanism} as {kafka_broker.sasl_username})" in status
        assert password not in status
        assert server.terminate() == 0
    first_output = server.output()
    assert f"SASL_SSL, {mechanism} as {kafka_broker.sasl_username}" in first_output
    with ServerProcess(args, env) as restarted:
        assert await fetch(restarted, "secure-group") == offsets
        restarted.terminate()
    for output in (first_output, restarted.output()):
        assert password not in output


def test_a_wrong_password_stops_the_start_with_one_clear_line(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    wrong = "not-the-password"
    result = run_serve(
        sasl_ssl_args(kafka_broker, unique_topic, "SCRAM-SHA-512"),
        {"COORDINATOR_KAFKA_SASL_PASSWORD": wrong},
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert "refused SASL authentication of user 'coordinator' with SCRAM-SHA-512" in errors[0]
    assert "Traceback" not in result.stderr
    assert wrong not in result.stderr


@pytest.mark.parametrize("ca", ["none", "another"])
def test_an_untrusted_broker_certificate_stops_the_start_with_one_clear_line(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, ca: str, tmp_path: Path
) -> None:
    args = sasl_ssl_args(kafka_broker, unique_topic, "PLAIN")
    ca_option = args.index("--kafka-ssl-ca-location")
    if ca == "none":
        del args[ca_option : ca_option + 2]
    else:
        args[ca_option + 1] = str(another_ca(tmp_path))
    result = run_serve(args, {"COORDINATOR_KAFKA_SASL_PASSWORD": kafka_broker.sasl_password})
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert "TLS: the certificate of the broker at" in errors[0]
    assert "is not trusted" in errors[0]
    assert ("no kafka-ssl-ca-location is given" if ca == "none" else "not signed by") in errors[0]
    assert "Traceback" not in result.stderr


def another_ca(directory: Path) -> Path:
    """A CA certificate of its own (not the one that signed the broker's)."""
    key, certificate = directory / "other-ca.key", directory / "other-ca.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=another CA", "-keyout", str(key), "-out", str(certificate),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return certificate


PLAIN_LOGIN = "listener.name.sasl_ssl.plain.sasl.jaas.config"
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def restart_with_plain_password(broker: ApacheKafkaBroker, password: str) -> None:
    """The broker again on the same ports, its PLAIN user now with `password`."""
    login = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{broker.sasl_username}="{password}";'
    )
    broker.restart({PLAIN_LOGIN: login})


@pytest.mark.slow
async def test_a_broker_that_refuses_us_later_is_logged_and_clients_get_retriable_errors(
    fresh_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    broker = fresh_kafka_broker
    args = sasl_ssl_args(broker, unique_topic, "PLAIN", "--offsets-commit-timeout-ms", "1500")
    env = {"COORDINATOR_KAFKA_SASL_PASSWORD": broker.sasl_password}
    loop = asyncio.get_running_loop()
    with ServerProcess(args, env) as server:
        await commit(server, "g", {("t", 0): 1})
        # The broker forgets our password (it was changed there): the connections it drops on
        # restart cannot be made again.
        await loop.run_in_executor(None, restart_with_plain_password, broker, "changed")
        client = await WireClient.connect(server.host, server.port)
        try:
            refused = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 2}), timeout=30
            )
            assert commit_errors(refused)[("t", 0)] in RETRIABLE, refused
        finally:
            await client.close()
        # Said once the server connects again, which a loaded machine may do after the
        # commit above was answered.
        deadline = time.monotonic() + 30
        while not any(
            " ERROR " in line
            and "refused SASL authentication of user 'coordinator' with PLAIN" in line
            for line in server.lines
        ):
            assert time.monotonic() < deadline, server.output()
            await asyncio.sleep(0.1)
        # Taken again: the server carries on by itself.
        await loop.run_in_executor(None, restart_with_plain_password, broker, broker.sasl_password)
        client = await WireClient.connect(server.host, server.port)
        try:
            for _ in range(120):
                response = await client.call(
                    ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 3}), timeout=30
                )
                code = commit_errors(response)[("t", 0)]
                if code == 0:
                    break
                assert code in RETRIABLE, response
                await asyncio.sleep(0.5)
            assert await fetch(server, "g") == {("t", 0): 3}
        finally:
            await client.close()
    assert broker.sasl_password not in server.output()
    assert "Traceback" not in server.output()


@pytest.fixture(scope="module")
def listeners_broker() -> Iterator[ApacheKafkaBroker]:
    """A broker with an SSL listener that requires a client certificate (mutual TLS) and a
    SASL_PLAINTEXT one, beside PLAINTEXT and SASL_SSL."""
    with ApacheKafkaBroker(ssl_listener=True, sasl_plaintext_listener=True) as broker:
        yield broker


async def test_ssl_with_a_client_certificate_commits_restarts_and_loads(
    listeners_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    broker = listeners_broker
    args = [
        "--port", "0",
        "--bootstrap-servers", broker.ssl_bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--kafka-security-protocol", "SSL",
        "--kafka-ssl-ca-location", str(broker.ca_file),
        "--kafka-ssl-certificate-location", str(broker.client_certificate),
        "--kafka-ssl-key-location", str(broker.client_key),
    ]  # fmt: skip
    offsets = {("orders", 3): 9}
    with ServerProcess(args) as server:
        await commit(server, "mtls-group", offsets)
        assert server.terminate() == 0
    assert "(SSL)" in server.output()
    with ServerProcess(args) as restarted:
        assert await fetch(restarted, "mtls-group") == offsets


def test_ssl_without_the_client_certificate_the_broker_requires_stops_the_start(
    listeners_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    args = [
        "--port", "0",
        "--bootstrap-servers", listeners_broker.ssl_bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-replication-factor", "1",
        "--kafka-security-protocol", "SSL",
        "--kafka-ssl-ca-location", str(listeners_broker.ca_file),
    ]  # fmt: skip
    result = run_serve(args)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert "refused the connection" in errors[0]
    assert "give kafka-ssl-certificate-location and kafka-ssl-key-location" in errors[0]
    assert "Traceback" not in result.stderr


async def test_sasl_plaintext_commits_restarts_and_loads(
    listeners_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    broker = listeners_broker
    args = [
        "--port", "0",
        "--bootstrap-servers", broker.sasl_plaintext_bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--kafka-sasl-mechanism", "SCRAM-SHA-512",
        "--kafka-sasl-username", broker.sasl_username,
    ]  # fmt: skip
    env = {"COORDINATOR_KAFKA_SASL_PASSWORD": broker.sasl_password}
    offsets = {("orders", 1): 5}
    with ServerProcess(args, env) as server:
        await commit(server, "sasl-plaintext-group", offsets)
        assert server.terminate() == 0
    assert "(SASL_PLAINTEXT, SCRAM-SHA-512 as coordinator)" in server.output()
    with ServerProcess(args, env) as restarted:
        assert await fetch(restarted, "sasl-plaintext-group") == offsets
