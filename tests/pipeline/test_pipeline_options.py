"""What `analyze` hands Spark, without starting it: the Kafka source's options (the security
settings under the Java client's names, the isolation level, data loss failing the read),
the package matching PySpark, and the data cluster's settings for the lag."""

from __future__ import annotations

import ssl
from pathlib import Path

import pyspark
from pipeline_scenario import self_signed_ca

from coordinator_server.cli import build_parser
from coordinator_server.tools.pipeline import cli as analyze
from coordinator_server.tools.pipeline.history import aiokafka_options
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic, kafka_source_conf

PASSWORD = "s3cr3t-pa55word"


def test_analyze_hands_the_security_settings_to_sparks_kafka_source(tmp_path: Path) -> None:
    ca = self_signed_ca(tmp_path)
    args = build_parser().parse_args(
        [
            "analyze", "history", "--bootstrap-servers", "127.0.0.1:9093",
            "--offsets-topic", "the-log", "--output", str(tmp_path),
            "--kafka-security-protocol", "SASL_SSL",
            "--kafka-sasl-mechanism", "SCRAM-SHA-256",
            "--kafka-sasl-username", "coordinator",
            "--kafka-sasl-password", PASSWORD,
            "--kafka-ssl-ca-location", str(ca),
        ]
    )  # fmt: skip
    security = analyze.kafka_security(args)
    location = analyze.location_of(args, security)
    assert isinstance(location, KafkaLogTopic)
    assert location.source_options() == {
        "kafka.bootstrap.servers": "127.0.0.1:9093",
        "subscribe": "the-log",
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "kafka.allow.auto.create.topics": "false",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="coordinator" password="{PASSWORD}";',
        "kafka.ssl.endpoint.identification.algorithm": "https",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": ca.read_text(),
    }
    assert PASSWORD not in location.describe()
    assert PASSWORD not in repr(location)

    # The lag's offsets come from the data cluster through aiokafka, on the same settings.
    lag_options = aiokafka_options({**security.properties(), "client_id": "lag"})
    assert isinstance(lag_options.pop("ssl_context"), ssl.SSLContext)
    assert lag_options == {
        "client_id": "lag",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "coordinator",
        "sasl_plain_password": PASSWORD,
    }


def test_the_session_loads_the_kafka_source_of_the_running_pyspark() -> None:
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    conf = kafka_source_conf({"spark.executor.memory": "1g"})
    assert conf == {
        "spark.executor.memory": "1g",
        "spark.jars.packages": package,
        "spark.jars.excludes": "org.apache.hadoop:hadoop-client-api,"
        "org.apache.hadoop:hadoop-client-runtime,at.yawk.lz4:lz4-java,"
        "org.xerial.snappy:snappy-java,org.slf4j:slf4j-api,"
        "org.scala-lang.modules:scala-parallel-collections_2.13",
    }
    # Packages the user lists stay; a version of the source the user chose is kept.
    assert (
        kafka_source_conf({"spark.jars.packages": "a:b:1"})["spark.jars.packages"]
        == f"a:b:1,{package}"
    )
    chosen = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0-custom"
    assert kafka_source_conf({"spark.jars.packages": chosen})["spark.jars.packages"] == chosen
