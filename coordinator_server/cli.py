"""The `coordinator-server` command."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args, get_origin

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from coordinator_server import __version__
from coordinator_server.cluster.membership import ClusterMembershipError
from coordinator_server.config import SETTING_GROUPS, CoordinatorConfig, setting_group
from coordinator_server.event_loop import run_async
from coordinator_server.markers.check import KafkaTransactionsCheckError
from coordinator_server.starting import StartError
from coordinator_server.storage.kafka.producer_fencing import OwnershipError
from coordinator_server.storage.kafka.security import KafkaSecurityError


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    """One --option per setting, under its group's heading (the group each setting's
    declaration names); unset options fall back to COORDINATOR_<OPTION>, then to the
    default."""
    groups = {
        name: parser.add_argument_group(name, description)
        for name, description in SETTING_GROUPS.items()
    }
    for name, field in CoordinatorConfig.model_fields.items():
        option = "--" + name.replace("_", "-")
        env = "COORDINATOR_" + name.upper()
        default = field.default
        if isinstance(default, bool):
            # A switch reads on or off (pydantic also takes true/false, yes/no, 1/0).
            default = "on" if default else "off"
        groups[setting_group(field)].add_argument(
            option,
            dest=name,
            default=None,
            metavar=setting_metavar(name, field),
            help=f"{field.description} [env {env}; default {default}]",
        )


# A setting's unit, from its name's ending (Kafka's convention: offsets.commit.timeout.ms).
_UNITS = (("_ms", "MS"), ("_bytes", "BYTES"), ("_minutes", "MINUTES"))


def setting_metavar(name: str, field: FieldInfo) -> str:
    """What kind of value the option takes: its unit, its choices, or its type."""
    for ending, unit in _UNITS:
        if name.endswith(ending):
            return unit
    kind = field.annotation
    if get_origin(kind) is not Literal:
        # X | None: the kind is X.
        kind = next((k for k in get_args(kind) if k is not type(None)), kind)
    if get_origin(kind) is Literal:
        return "{" + ",".join(str(choice) for choice in get_args(kind)) + "}"
    if kind is bool:
        return "{on,off}"
    if name.endswith("bootstrap_servers"):
        return "HOST:PORT[,...]"
    if name.endswith(("host", "_host")):
        return "HOST"
    if kind is int:
        return "PORT" if name.endswith("port") else "N"
    if kind is Path:
        return "PATH"
    if kind is SecretStr:
        return "SECRET"
    return "TEXT"


def build_parser(*, tools: bool = True) -> argparse.ArgumentParser:
    """The command line; without `tools`, `serve` alone. The other commands' modules (the
    admin tool, the bench, the Spark pipeline) take tens of milliseconds to import, which
    `serve` should not spend before it starts loading."""
    parser = argparse.ArgumentParser(
        prog="coordinator-server",
        description="A standalone group coordinator for Apache Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the coordinator",
        description="Run the coordinator. Every option is also an environment variable "
        "COORDINATOR_<OPTION> (upper case, dashes as underscores); options win.",
    )
    _add_config_options(serve)
    if tools:
        from coordinator_server.tools import admin, bench
        from coordinator_server.tools.pipeline import cli as analyze

        analyze.add_parser(commands)
        admin.add_parsers(commands)
        bench.add_parser(commands)
    return parser


def load_config(args: argparse.Namespace) -> CoordinatorConfig:
    given = {
        name: value
        for name in CoordinatorConfig.model_fields
        if (value := getattr(args, name, None)) is not None
    }
    if "log_level" in given:
        given["log_level"] = given["log_level"].upper()
    return CoordinatorConfig(**given)


def describe_invalid_settings(error: ValidationError) -> str:
    """Every invalid value in one line, each named as the option that set it."""
    problems = []
    for item in error.errors():
        name = "_".join(str(part) for part in item["loc"])
        option = "--" + name.replace("_", "-") if name else "the settings"
        # A secret's value stays out of the line, as out of pydantic's own message.
        shown = name and "password" not in name and not isinstance(item["input"], dict)
        given = f" {item['input']!r}" if shown else ""
        problems.append(f"{option}{given}: {item['msg']}")
    return "invalid settings: " + "; ".join(problems)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line. Lines about a log partition ("partition=N" in the text, as
    the runtime and storage write them) carry it as a field, for filtering by partition."""

    _PARTITION = re.compile(r"\bpartition=(\d+)")

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        partition = getattr(record, "partition", None)
        if partition is None and (match := self._PARTITION.search(message)):
            partition = int(match.group(1))
        if partition is not None:
            entry["partition"] = partition
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        formatter: logging.Formatter = JsonLogFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # The ready line is shown at any level: a start that says nothing at WARNING is not
    # known to have happened. Named here, not imported: the app module is imported only
    # once the server runs.
    logging.getLogger("coordinator_server.ready").setLevel(logging.INFO)
    # aiokafka reports every retry at WARNING; its errors still reach us as exceptions.
    logging.getLogger("aiokafka").setLevel(max(logging.getLevelName(level), logging.ERROR))
    # On the handler: a logger's filter does not see what its children (aiokafka.conn,
    # aiokafka.consumer.group_coordinator) log.
    handler.addFilter(_without_aiokafka_retries)


# What aiokafka logs at ERROR although it tries again by itself: a connection it could not
# open (it raises it too; the start and the log report it once, with their back-off), and
# a group coordinator not available yet (a fresh cluster creates __consumer_offsets at the
# cluster membership's first join: an ERROR on every healthy first start). The membership
# reports a join that does not end, with its last error.
_AIOKAFKA_RETRIES = ("Unable connect to", "Group Coordinator Request failed")


def _without_aiokafka_retries(record: logging.LogRecord) -> bool:
    return not (
        record.name.startswith("aiokafka") and str(record.msg).startswith(_AIOKAFKA_RETRIES)
    )


def serve(config: CoordinatorConfig) -> None:
    from coordinator_server.app import CoordinatorApp
    from coordinator_server.compiled import running_build

    logging.getLogger("coordinator_server").info("hot path: %s", running_build())

    app = CoordinatorApp(config)
    run_async(app.run)


def serve_workers(config: CoordinatorConfig, arguments: Sequence[str]) -> int:
    """`serve --workers N`: the workers run, supervised, until SIGTERM or SIGINT."""
    from coordinator_server.workers import WorkerSupervisor

    supervisor = WorkerSupervisor(config, arguments)
    result: list[int] = []

    async def run() -> None:
        result.append(await supervisor.run())

    run_async(run)
    return result[0] if result else 1


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(tools=not arguments or arguments[0] != "serve")
    args = parser.parse_args(arguments)
    if args.command == "serve":
        try:
            config = load_config(args)
        except ValidationError as exc:
            configure_logging("INFO")
            logging.getLogger("coordinator_server").error(
                "cannot start: %s", describe_invalid_settings(exc)
            )
            return 1
        configure_logging(config.log_level, config.log_format)
        if config.workers > 1:
            return serve_workers(config, arguments[1:])
        try:
            serve(config)
        except KeyboardInterrupt:
            return 130
        except (
            StartError,
            KafkaSecurityError,
            KafkaTransactionsCheckError,
            ClusterMembershipError,
            OwnershipError,
        ) as error:
            # Settings that cannot work: what to fix, in one line, not a stack trace.
            logging.getLogger("coordinator_server").error("cannot start: %s", error)
            return 1
        return 0
    if args.command in ("groups", "transactions", "acls", "users"):
        from coordinator_server.tools import admin

        return admin.main(args)
    if args.command == "bench":
        from coordinator_server.tools import bench

        return bench.main(args)
    if args.command == "analyze":
        from coordinator_server.tools.pipeline import cli as analyze

        return analyze.main(args)
    parser.error(f"unknown command {args.command}")
    return 2
