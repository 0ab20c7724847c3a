"""The Kafka security settings: what each client gets of them, what is refused, and the
password never showing (reprs, validation errors, `--help`); SCRAM against RFC 7677's
example exchange."""

from __future__ import annotations

import argparse
import pickle
import ssl
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator_server.cli import build_parser
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.kafka.sasl import ScramClient, bootstrap_addresses
from coordinator_server.storage.kafka.security import (
    KafkaSecurity,
    KafkaSecurityError,
    Secret,
)
from coordinator_server.tools.kafka_options import (
    add_kafka_security_options,
    kafka_security_from_args,
    serve_settings,
)

PASSWORD = "s3cr3t-pa55word"


def sasl_ssl(**extra: object) -> KafkaSecurity:
    values: dict[str, object] = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "coordinator",
        "sasl_password": PASSWORD,
    }
    values.update(extra)
    return KafkaSecurity.build(**values)


def test_the_password_shows_in_no_repr_or_str_and_survives_pickling() -> None:
    security = sasl_ssl(
        ssl_certificate_location="c.pem", ssl_key_location="k.pem", ssl_key_password="key-pass"
    )
    for text in (repr(security), str(security), security.describe()):
        assert PASSWORD not in text
        assert "key-pass" not in text
    assert "SCRAM-SHA-512 as coordinator" in security.describe()
    copy = pickle.loads(pickle.dumps(security))
    assert copy == security
    assert copy.sasl_password is not None and copy.sasl_password.reveal() == PASSWORD
    assert repr(Secret(PASSWORD)) == "Secret('**********')"


def test_settings_keep_the_password_out_of_reprs_and_validation_errors() -> None:
    config = CoordinatorConfig(
        kafka_security_protocol="sasl_ssl",
        kafka_sasl_username="coordinator",
        kafka_sasl_password=PASSWORD,
    )
    assert PASSWORD not in repr(config)
    assert config.kafka_security.security_protocol == "SASL_SSL"
    assert config.kafka_security.aiokafka_options()["sasl_plain_password"] == PASSWORD
    # A setting that fails beside the password: the error names the problem, not the inputs.
    with pytest.raises(ValidationError) as raised:
        CoordinatorConfig(kafka_security_protocol="SASL_SSL", kafka_sasl_password=PASSWORD)
    assert "needs a SASL user name (kafka-sasl-username)" in str(raised.value)
    assert PASSWORD not in str(raised.value)
    with pytest.raises(ValidationError) as raised:
        CoordinatorConfig(kafka_sasl_password=PASSWORD, port="not a port")
    assert PASSWORD not in str(raised.value)


def test_the_password_is_read_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    from_file = CoordinatorConfig(
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_username="u",
        kafka_sasl_password_file=password_file,
    )
    assert from_file.kafka_security.aiokafka_options()["sasl_plain_password"] == PASSWORD
    monkeypatch.setenv("COORDINATOR_KAFKA_SASL_PASSWORD", "from-env")
    from_env = CoordinatorConfig(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_username="u")
    assert from_env.kafka_security.aiokafka_options()["sasl_plain_password"] == "from-env"
    with pytest.raises(ValidationError, match="not both"):
        CoordinatorConfig(
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_sasl_username="u",
            kafka_sasl_password_file=password_file,
        )
    with pytest.raises(ValidationError, match="cannot read the SASL password file"):
        CoordinatorConfig(
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_sasl_username="u",
            kafka_sasl_password=None,
            kafka_sasl_password_file=tmp_path / "missing",
        )


def test_help_never_shows_a_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COORDINATOR_KAFKA_SASL_PASSWORD", PASSWORD)
    for command in (["serve", "--help"], ["groups", "list", "--help"], ["bench", "--help"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(command)
        shown = capsys.readouterr().out
        assert "--kafka-sasl-password" in shown
        assert PASSWORD not in shown


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"security_protocol": "SASL_SSL", "sasl_password": "p"}, "needs a SASL user name"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "needs a SASL password"),
        ({"sasl_username": "u"}, "the security protocol is PLAINTEXT"),
        ({"ssl_ca_location": "ca.pem"}, "TLS files are given"),
        ({"security_protocol": "SSL", "ssl_key_location": "k.pem"}, "go together"),
        ({"security_protocol": "TLS"}, "is not one of"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "is not one of"),
    ],
)
def test_settings_that_cannot_work_are_refused(values: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        KafkaSecurity.build(**values)


def test_plaintext_gives_aiokafka_nothing_and_tls_a_verifying_context(tmp_path: Path) -> None:
    assert KafkaSecurity().aiokafka_options() == {}
    assert KafkaSecurity().ssl_context() is None
    options = sasl_ssl().aiokafka_options()
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert (options["security_protocol"], options["sasl_mechanism"]) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
    )
    unchecked = sasl_ssl(ssl_endpoint_identification_algorithm="").ssl_context()
    assert unchecked is not None and not unchecked.check_hostname
    assert unchecked.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(KafkaSecurityError, match="cannot read the CA file"):
        sasl_ssl(ssl_ca_location=tmp_path / "missing.pem").ssl_context()


def test_properties_round_trip_and_spark_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    security = sasl_ssl(ssl_ca_location=ca)
    properties = security.properties()
    assert properties == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "coordinator",
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca),
    }
    assert KafkaSecurity.from_properties({**properties, "client.id": "x"}) == security
    spark = security.spark_options()
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="coordinator" password="{PASSWORD}";'
    )
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.certificates"] == ca.read_text()
    assert spark["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert KafkaSecurity().spark_options() == {}


def test_tool_options_fall_back_to_the_servers_environment(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_kafka_security_options(parser)
    environ = {
        "COORDINATOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "COORDINATOR_KAFKA_SASL_USERNAME": "coordinator",
        "COORDINATOR_KAFKA_SASL_PASSWORD": PASSWORD,
    }
    from_env = kafka_security_from_args(parser.parse_args([]), environ)
    assert from_env == sasl_ssl(sasl_mechanism="PLAIN")
    password_file = tmp_path / "password"
    password_file.write_text("from-file")
    given = parser.parse_args(
        [
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-256",
            "--kafka-sasl-password-file",
            str(password_file),
        ]
    )
    security = kafka_security_from_args(given, environ)
    assert security.sasl_mechanism == "SCRAM-SHA-256"
    assert security.sasl_password == Secret("from-file")
    options, environment = serve_settings(security)
    assert PASSWORD not in options and "from-file" not in options
    assert environment == {"COORDINATOR_KAFKA_SASL_PASSWORD": "from-file"}
    assert options == [
        "--kafka-security-protocol", "SASL_SSL",
        "--kafka-sasl-mechanism", "SCRAM-SHA-256",
        "--kafka-sasl-username", "coordinator",
    ]  # fmt: skip


def test_scram_sha_256_follows_rfc_7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    steps = client.steps()
    assert next(steps) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    client_final = steps.send(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client_final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    with pytest.raises(StopIteration):
        steps.send(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_scram_refuses_a_server_that_does_not_know_the_password() -> None:
    steps = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO").steps()
    next(steps)
    steps.send(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ValueError, match="does not know us"):
        steps.send(b"v=AAAA")
    other_nonce = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce="abc").steps()
    next(other_nonce)
    with pytest.raises(ValueError, match="nonce"):
        other_nonce.send(b"r=zzz,s=AAAA,i=4096")


def test_bootstrap_addresses() -> None:
    assert bootstrap_addresses("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(ValueError):
        bootstrap_addresses("nothing")


def test_an_encrypted_client_key_needs_its_password(tmp_path: Path) -> None:
    certificate, key = tmp_path / "client.pem", tmp_path / "client.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1",
            "-subj", "/CN=client", "-passout", "pass:key-secret",
            "-keyout", str(key), "-out", str(certificate),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    client = {
        "security_protocol": "SSL",
        "ssl_certificate_location": certificate,
        "ssl_key_location": key,
    }
    assert KafkaSecurity.build(**client, ssl_key_password="key-secret").ssl_context() is not None
    for wrong in ("not-it", None):
        with pytest.raises(KafkaSecurityError, match="wrong kafka-ssl-key-password") as raised:
            KafkaSecurity.build(**client, ssl_key_password=wrong).ssl_context()
        assert "key-secret" not in str(raised.value)
