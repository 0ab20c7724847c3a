"""Fixtures shared by every test directory.

The Kafka tests run against Apache Kafka: `kafka_broker` (one for the whole run; tests keep
apart by their `unique_topic`) and `fresh_kafka_broker` (a broker of the test's own, ~5 s to
start: only for tests that stop, pause or break it). tansu, a Kafka-protocol broker that is
not Apache Kafka, serves a smaller compatibility set through `tansu_broker`,
`fresh_tansu_broker` and `each_broker` (the test runs once on each broker). Tests are marked
`kafka` or `tansu` by the brokers they use, so either set can be selected (`-m kafka`), and
`container` when they use the private Docker daemon (tests/container/).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_kafka import ApacheKafkaBroker, ApacheKafkaStartError, fetch_apache_kafka
from kafka_broker import KafkaBroker
from server_process import ServerProcess
from tansu_broker import TansuBroker

# The tests' brokers (the bench's too, when a test runs it) live seconds to minutes under
# little load, where the JVM's optimizing compiler spends more than it saves: with its first
# tier alone, the broker-heavy tests took 179 s instead of 229 s on 2 cores, and 193 s of
# CPU instead of 304 s. Users' and the bench's own brokers keep both tiers.
os.environ.setdefault("KAFKA_OPTS", "-XX:TieredStopAtLevel=1")

# The suite starts hundreds of Python processes (servers, command lines, the bench) that
# import the project from the clone. Where the environment says not to write bytecode (as
# container images often do), each of them compiled every module again at its start: the
# tests of the command lines and server processes took 69 s instead of 66 s, and 90 s of CPU
# instead of 87 s. The clone's __pycache__ folders are ignored by git; pytest keeps its
# rewritten test modules there too, for the next run.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The client library's scripted coordinator (client_fake_server) is its own tests' helper;
# the tests of its transactional producer against Apache Kafka (tests/client) script it too.
sys.path.append(
    str(Path(__file__).resolve().parents[1] / "clients" / "python" / "tests" / "client")
)

APACHE_KAFKA_FIXTURES = frozenset({"kafka_broker", "fresh_kafka_broker", "pausable_kafka_broker"})
TANSU_FIXTURES = frozenset({"tansu_broker", "fresh_tansu_broker"})


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[ApacheKafkaBroker]:
    """One Apache Kafka broker for the whole run (PLAINTEXT and SASL_SSL listeners); tests
    keep apart by using `unique_topic` names. Its log cleaner looks for work every second
    instead of Kafka's 15 s, so that a test of compaction waits for a second pass seconds,
    not tens of seconds."""
    with ApacheKafkaBroker(config={"log.cleaner.backoff.ms": "1000"}) as broker:
        yield broker


@pytest.fixture(scope="session")
def pausable_kafka_broker() -> Iterator[ApacheKafkaBroker]:
    """An Apache Kafka broker shared by the tests that pause it (SIGSTOP) and resume it, apart
    from the session broker so that a pause never holds up another test's broker."""
    with ApacheKafkaBroker() as broker:
        yield broker


@pytest.fixture
def fresh_kafka_broker() -> Iterator[ApacheKafkaBroker]:
    """An Apache Kafka broker of the test's own, for tests that stop, pause or break it."""
    with ApacheKafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[TansuBroker]:
    """One tansu broker for the whole run; tests keep apart by using `unique_topic` names."""
    with TansuBroker() as broker:
        yield broker


@pytest.fixture
def fresh_tansu_broker() -> Iterator[TansuBroker]:
    """A tansu broker of the test's own, for tests that stop or break it."""
    with TansuBroker() as broker:
        yield broker


@pytest.fixture(
    params=[
        pytest.param("kafka_broker", marks=pytest.mark.kafka, id="kafka"),
        pytest.param("tansu_broker", marks=pytest.mark.tansu, id="tansu"),
    ]
)
def each_broker(request: pytest.FixtureRequest) -> KafkaBroker:
    """The session's Apache Kafka broker, then its tansu broker: for the compatibility set,
    the tests that show the log works with a Kafka-protocol broker that is not Apache Kafka."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (legal in Kafka: letters, digits, '.', '_', '-')."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"test-{readable}-{uuid.uuid4().hex[:10]}"


def pytest_collection_finish(session: pytest.Session) -> None:
    # On a machine's first run Maven fetches Apache Kafka's jars: minutes on a slow network,
    # which must not count against the first Kafka test's timeout. Done here, before any test;
    # a failure is left for the broker fixtures to report (each fetches again).
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("kafka") for item in session.items):
        with contextlib.suppress(ApacheKafkaStartError):
            fetch_apache_kafka()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test is marked by the broker fixtures it uses, so that no test can be left out of
    # `-m kafka` or `-m tansu` by a forgotten mark. (`each_broker` marks its own parameters;
    # tests that start a broker themselves carry the mark explicitly.)
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & APACHE_KAFKA_FIXTURES:
            item.add_marker(pytest.mark.kafka)
        if fixtures & TANSU_FIXTURES:
            item.add_marker(pytest.mark.tansu)
        if "docker" in fixtures:
            item.add_marker(pytest.mark.container)


@pytest.fixture
def nodes() -> Iterator[list[ServerProcess]]:
    """The test's nodes: each killed at the end (a paused one resumed first), by its PID."""
    started: list[ServerProcess] = []
    yield started
    for process in started:
        if process.proc is not None and process.proc.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        process.kill()
