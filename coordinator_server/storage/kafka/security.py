"""How to reach Kafka securely: the client security settings, under Kafka's client names
(librdkafka's for PEM files), and what each Kafka client made of them needs.

- `KafkaSecurity.ssl_context()`: the TLS context of every connection (ours and aiokafka's).
- `KafkaSecurity.aiokafka_options()`: keyword arguments of aiokafka's clients, admin client,
  consumer and producer.
- `KafkaSecurity.properties()` / `KafkaSecurity.from_properties()`: the settings as
  librdkafka-style properties (strings only: they travel to Spark's executors).
- `KafkaSecurity.spark_options()`: the same for Spark's own Kafka source (`kafka.*` options,
  the Java client's names, the PEM files' contents inline).

Our own connections (the log's produce path) authenticate with `sasl.KafkaConnector`.
A password is kept in a `Secret`, which never shows in a repr, a message or a log line.

This module imports nothing but the standard library: `serve` reads it before it starts.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast, get_args

__all__ = [
    "PLAINTEXT",
    "EndpointIdentification",
    "KafkaSecurity",
    "KafkaSecurityError",
    "SaslMechanism",
    "Secret",
    "SecurityProtocol",
    "is_security_property",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
EndpointIdentification = Literal["https", "none"]

PLAINTEXT: Final = "PLAINTEXT"
SECURITY_PROTOCOLS: Final = get_args(SecurityProtocol)
SASL_MECHANISMS: Final = get_args(SaslMechanism)
_HIDDEN: Final = "**********"

# librdkafka's property names, which the command line's options follow.
_PROPERTY_NAMES: Final = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification_algorithm",
}


def is_security_property(name: str) -> bool:
    """Whether `name` is one of the librdkafka-style property names `from_properties` reads."""
    return name.lower() in _PROPERTY_NAMES


class KafkaSecurityError(Exception):
    """Kafka refused us, or we refused Kafka: a certificate that cannot be trusted, a SASL
    authentication that failed, a mechanism or listener that does not match, a CA or key file
    that cannot be read. Waiting does not mend any of them."""


class Secret:
    """A password: `reveal()` gives it; its repr and str never do."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{_HIDDEN}')"

    def __str__(self) -> str:
        return _HIDDEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How every connection to Kafka is secured; the default is Kafka's, PLAINTEXT."""

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: Path | None = None
    ssl_certificate_location: Path | None = None
    ssl_key_location: Path | None = None
    ssl_key_password: Secret | None = None
    ssl_endpoint_identification_algorithm: EndpointIdentification = "https"

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security protocol {self.security_protocol!r} is not one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"SASL mechanism {self.sasl_mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}"
            )
        if self.ssl_endpoint_identification_algorithm not in ("https", "none"):
            raise ValueError("ssl endpoint identification algorithm must be https or none")
        if self.uses_sasl:
            if not self.sasl_username:
                raise ValueError(
                    f"{self.security_protocol} needs a SASL user name (kafka-sasl-username)"
                )
            if self.sasl_password is None:
                raise ValueError(
                    f"{self.security_protocol} needs a SASL password (kafka-sasl-password, "
                    "kafka-sasl-password-file or COORDINATOR_KAFKA_SASL_PASSWORD)"
                )
        elif self.sasl_username is not None or self.sasl_password is not None:
            raise ValueError(
                f"a SASL username or password is given but the security protocol is "
                f"{self.security_protocol} (SASL_SSL or SASL_PLAINTEXT use them)"
            )
        ssl_files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        if not self.uses_tls and (
            any(f is not None for f in ssl_files) or self.ssl_key_password is not None
        ):
            raise ValueError(
                f"TLS files are given but the security protocol is {self.security_protocol} "
                "(SSL or SASL_SSL use them)"
            )
        if (self.ssl_key_location is None) != (self.ssl_certificate_location is None):
            raise ValueError("a client certificate and its key go together: give both")
        if self.ssl_key_password is not None and self.ssl_key_location is None:
            raise ValueError("a key password is given without a key")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def is_plaintext(self) -> bool:
        return self.security_protocol == PLAINTEXT

    def describe(self) -> str:
        """The protocol, and who we are, for log lines (never the password)."""
        if self.uses_sasl:
            return f"{self.security_protocol}, {self.sasl_mechanism} as {self.sasl_username}"
        return self.security_protocol

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context every connection to Kafka uses, or None without TLS.

        The broker's certificate is verified against the CA file (or the system's CAs when
        none is given), and its host name too unless the endpoint identification algorithm
        is `none` (Kafka's default is `https`: checked). Raises KafkaSecurityError when a
        file cannot be read."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH,
                cafile=None if self.ssl_ca_location is None else str(self.ssl_ca_location),
            )
        except (OSError, ssl.SSLError) as error:
            raise KafkaSecurityError(
                f"cannot read the CA file {self.ssl_ca_location} (kafka-ssl-ca-location): "
                f"{_reason(error)}"
            ) from error
        context.check_hostname = self.ssl_endpoint_identification_algorithm == "https"
        if self.ssl_certificate_location is not None:
            password = self.ssl_key_password
            try:
                context.load_cert_chain(
                    str(self.ssl_certificate_location),
                    None if self.ssl_key_location is None else str(self.ssl_key_location),
                    # A callable: a key that needs a password and got none fails instead of
                    # asking on the terminal.
                    password=lambda: "" if password is None else password.reveal(),
                )
            except (OSError, ssl.SSLError) as error:
                raise KafkaSecurityError(
                    f"cannot load the client certificate {self.ssl_certificate_location} and "
                    f"key {self.ssl_key_location} (wrong kafka-ssl-key-password?): "
                    f"{_reason(error)}"
                ) from error
        return context

    def aiokafka_options(self, ssl_context: ssl.SSLContext | None = None) -> dict[str, Any]:
        """Keyword arguments for aiokafka's clients (AIOKafkaClient, AIOKafkaAdminClient,
        AIOKafkaConsumer, AIOKafkaProducer); empty for PLAINTEXT. `ssl_context`: one made
        by `ssl_context()` already."""
        if self.is_plaintext:
            return {}
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        context = ssl_context or self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.uses_sasl:
            assert self.sasl_password is not None
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password.reveal()
        return options

    def properties(self) -> dict[str, str]:
        """The settings as librdkafka-style properties (the inverse of `from_properties`),
        the ones that differ from the default only; these carry the password."""
        properties: dict[str, str] = {}
        default = KafkaSecurity()
        for name, attribute in _PROPERTY_NAMES.items():
            value = getattr(self, attribute)
            if value is None or value == getattr(default, attribute):
                continue
            properties[name] = value.reveal() if isinstance(value, Secret) else str(value)
        return properties

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> KafkaSecurity:
        """Settings from librdkafka-style properties (`security.protocol`, `sasl.mechanism`,
        `sasl.username`, `sasl.password`, `ssl.ca.location`, ...); other names are ignored."""
        values: dict[str, object] = {}
        for name, value in properties.items():
            attribute = _PROPERTY_NAMES.get(name.lower())
            if attribute is None:
                continue
            values[attribute] = value
        return cls.build(**values)

    @classmethod
    def build(
        cls,
        *,
        security_protocol: object = None,
        sasl_mechanism: object = None,
        sasl_username: object = None,
        sasl_password: object = None,
        sasl_password_file: object = None,
        ssl_ca_location: object = None,
        ssl_certificate_location: object = None,
        ssl_key_location: object = None,
        ssl_key_password: object = None,
        ssl_endpoint_identification_algorithm: object = None,
    ) -> KafkaSecurity:
        """Settings from loosely typed values (command-line strings, environment variables,
        pydantic's SecretStr): names in any case, `""` for no endpoint identification (as
        Kafka spells it), the password read from `sasl_password_file` (its first line).
        Raises ValueError saying what is wrong (never with the password in it)."""
        if sasl_password is not None and sasl_password_file is not None:
            raise ValueError("give a SASL password or a password file, not both")
        password = _secret(sasl_password)
        if sasl_password_file is not None:
            password = Secret(_read_password_file(Path(str(sasl_password_file))))
        protocol = str(security_protocol or PLAINTEXT).upper().replace("-", "_")
        mechanism = str(sasl_mechanism or "PLAIN").upper().replace("_", "-")
        algorithm = (
            "https"
            if ssl_endpoint_identification_algorithm is None
            else str(ssl_endpoint_identification_algorithm).lower() or "none"
        )
        return cls(
            security_protocol=cast(SecurityProtocol, protocol),
            sasl_mechanism=cast(SaslMechanism, mechanism),
            sasl_username=None if sasl_username is None else str(sasl_username),
            sasl_password=password,
            ssl_ca_location=_path(ssl_ca_location),
            ssl_certificate_location=_path(ssl_certificate_location),
            ssl_key_location=_path(ssl_key_location),
            ssl_key_password=_secret(ssl_key_password),
            ssl_endpoint_identification_algorithm=cast(EndpointIdentification, algorithm),
        )

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (`spark-sql-kafka-0-10`): `kafka.` and the Java
        client's setting. PEM files go inline (`ssl.truststore.certificates`,
        `ssl.keystore.certificate.chain` and `ssl.keystore.key`), so that executors need no
        copy of them. These carry the password (Spark redacts options named like one)."""
        if self.is_plaintext:
            return {}
        options: dict[str, str] = {"kafka.security.protocol": self.security_protocol}
        if self.uses_sasl:
            assert self.sasl_username is not None and self.sasl_password is not None
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = (
                f"{module} required username={_jaas_quote(self.sasl_username)} "
                f"password={_jaas_quote(self.sasl_password.reveal())};"
            )
        if self.uses_tls:
            options["kafka.ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification_algorithm == "https" else ""
            )
            if self.ssl_ca_location is not None:
                options["kafka.ssl.truststore.type"] = "PEM"
                options["kafka.ssl.truststore.certificates"] = _read_pem(self.ssl_ca_location)
            if self.ssl_certificate_location is not None and self.ssl_key_location is not None:
                options["kafka.ssl.keystore.type"] = "PEM"
                options["kafka.ssl.keystore.certificate.chain"] = _read_pem(
                    self.ssl_certificate_location
                )
                options["kafka.ssl.keystore.key"] = _read_pem(self.ssl_key_location)
                if self.ssl_key_password is not None:
                    options["kafka.ssl.key.password"] = self.ssl_key_password.reveal()
        return options


def _secret(value: object) -> Secret | None:
    if value is None or isinstance(value, Secret):
        return value
    reveal = getattr(value, "get_secret_value", None)
    return Secret(str(reveal() if callable(reveal) else value))


def _path(value: object) -> Path | None:
    return None if value is None or value == "" else Path(str(value))


def _read_password_file(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read the SASL password file {path}: {_reason(error)}") from None
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise ValueError(f"the SASL password file {path} is empty")
    return lines[0]


def _read_pem(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise KafkaSecurityError(f"cannot read {path}: {_reason(error)}") from error


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _reason(error: BaseException) -> str:
    """An OS or TLS error's own words, without the exception's class or arguments."""
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
