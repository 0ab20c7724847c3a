"""Fixtures shared by every test directory."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from apache_kafka import ApacheKafkaBroker
from kafka_broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One broker for the whole run; tests keep apart by using `unique_topic` names."""
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture
def fresh_kafka_broker() -> Iterator[KafkaBroker]:
    """A broker of the test's own, for tests that stop or break it."""
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[ApacheKafkaBroker]:
    """One Apache Kafka broker for the whole run (PLAINTEXT and SASL_SSL listeners); tests
    keep apart by using `unique_topic` names."""
    with ApacheKafkaBroker() as broker:
        yield broker


@pytest.fixture
def fresh_apache_kafka() -> Iterator[ApacheKafkaBroker]:
    """An Apache Kafka broker of the test's own, for tests that stop, pause or break it."""
    with ApacheKafkaBroker() as broker:
        yield broker


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (legal in Kafka: letters, digits, '.', '_', '-')."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"test-{readable}-{uuid.uuid4().hex[:10]}"
