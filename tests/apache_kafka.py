"""Apache Kafka for the tests: the bench's launcher (`coordinator_server.tools.bench.apache_kafka`,
over `deploy/kafka/run.sh`), so that the tests and the bench start their brokers one way."""

from __future__ import annotations

from coordinator_server.tools.bench.apache_kafka import (
    RUN_SH,
    SASL_PASSWORD,
    SASL_USERNAME,
    ApacheKafkaBroker,
    ApacheKafkaStartError,
    fetch_apache_kafka,
)

__all__ = [
    "RUN_SH",
    "SASL_PASSWORD",
    "SASL_USERNAME",
    "ApacheKafkaBroker",
    "ApacheKafkaStartError",
    "fetch_apache_kafka",
]
