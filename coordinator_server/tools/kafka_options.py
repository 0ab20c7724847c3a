"""The Kafka security options of the tools (`groups`, `bench`, `analyze`), the same as
`serve`'s: same names, same help, and the same COORDINATOR_KAFKA_* environment variables
when an option is not given (so one environment serves the server and its tools)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = [
    "KAFKA_SECURITY_SETTINGS",
    "add_kafka_security_options",
    "kafka_security_from_args",
    "serve_settings",
]

# The settings, as CoordinatorConfig names them.
KAFKA_SECURITY_SETTINGS = (
    "kafka_security_protocol",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "kafka_sasl_password_file",
    "kafka_ssl_ca_location",
    "kafka_ssl_certificate_location",
    "kafka_ssl_key_location",
    "kafka_ssl_key_password",
    "kafka_ssl_endpoint_identification_algorithm",
)


def add_kafka_security_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Kafka security", "how to reach Kafka: as `serve` does, and from the same environment"
    )
    for name in KAFKA_SECURITY_SETTINGS:
        field = CoordinatorConfig.model_fields[name]
        env = "COORDINATOR_" + name.upper()
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            metavar=name.split("_")[-1].upper(),
            help=f"{field.description} [env {env}; default {field.default}]",
        )


def kafka_security_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> KafkaSecurity:
    """The settings the options give, else the environment's. Raises ValueError saying what is
    wrong."""
    environ = os.environ if environ is None else environ
    # A password given on the command line (or its file) replaces the environment's, whichever
    # way the environment gives it.
    password_given = any(
        getattr(args, name, None) is not None
        for name in ("kafka_sasl_password", "kafka_sasl_password_file")
    )
    values = {}
    for name in KAFKA_SECURITY_SETTINGS:
        value = getattr(args, name, None)
        if value is None and not (password_given and name.startswith("kafka_sasl_password")):
            value = environ.get("COORDINATOR_" + name.upper()) or None
        values[name.removeprefix("kafka_")] = value
    return KafkaSecurity.build(**values)


def serve_settings(security: KafkaSecurity) -> tuple[list[str], dict[str, str]]:
    """The options and environment variables a `serve` child process needs for `security`:
    the passwords go in the environment (a command line is visible to every user of the
    machine), the rest as options."""
    options: list[str] = []
    environment: dict[str, str] = {}
    for name, value in security.properties().items():
        setting = "kafka_" + name.replace(".", "_")
        if "password" in name:
            environment["COORDINATOR_" + setting.upper()] = value
        else:
            options += ["--" + setting.replace("_", "-"), value]
    return options, environment
