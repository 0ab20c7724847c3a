"""`coordinator-server groups`: Kafka's `kafka-consumer-groups` for coordinator-server.

Sub-commands: `list`, `describe GROUP`, `offsets GROUP`, `delete GROUP...`,
`delete-offsets GROUP --topic T`, `reset-offsets GROUP --topic T --to-...`. Each prints a
table for people, or JSON with `--json` for scripts, and exits 0 on success, 1 on an error
(with a one-line message on stderr), 2 on a usage error.

The tool talks to coordinator-server (`--bootstrap-server`, any node of a cluster) for
groups and committed offsets: `list` asks every node of the cluster (DescribeCluster names
them), a group's commands go to its coordinator (FindCoordinator, looked up again on
NOT_COORDINATOR); and to Kafka (`--kafka-bootstrap-servers`) for what only the log knows: the
log-end offset of each partition (the high watermark a Fetch reports, see
`rpc.kafka_log`), the log start, and offsets by time. Both are also read from the
environment, `COORDINATOR_BOOTSTRAP_SERVER` and `COORDINATOR_KAFKA_BOOTSTRAP_SERVERS`.

`reset-offsets` is a dry run unless `--execute` is given, and is refused while the group
has members (their commits would overwrite the reset), as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from coordinator_server.client import (
    ClientError,
    CoordinatorClient,
    KafkaLogReader,
    OffsetDeleteError,
    build_ssl_context,
)
from coordinator_server.kafka_options import add_kafka_security_options, kafka_security_from_args
from coordinator_server.storage.kafka_sasl import KafkaConnector
from coordinator_server.storage.kafka_security import KafkaSecurity, KafkaSecurityError
from protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
)
from protocol.errors import ApiError, ErrorCode
from protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
)

__all__ = [
    "AdminError",
    "add_parser",
    "connection_options",
    "coordinator_client",
    "kafka_cluster",
    "main",
]

BOOTSTRAP_SERVER_ENV: Final = "COORDINATOR_BOOTSTRAP_SERVER"
KAFKA_BOOTSTRAP_SERVERS_ENV: Final = "COORDINATOR_KAFKA_BOOTSTRAP_SERVERS"
_INACTIVE_STATES: Final = frozenset({"Empty", "Dead"})
_PROG: Final = "coordinator-server groups"


class AdminError(Exception):
    """A failure to report in one line, exit status 1."""


def connection_options() -> argparse.ArgumentParser:
    """The options of every admin sub-command: where coordinator-server and the Kafka cluster
    are, how to reach them, and the output's form (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="coordinator-server to connect to, host:port[,host:port] "
        f"[env {BOOTSTRAP_SERVER_ENV}]",
    )
    common.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOST:PORT",
        help=f"the Kafka cluster [env {KAFKA_BOOTSTRAP_SERVERS_ENV}]",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument(
        "--timeout-ms", type=int, default=30_000, help="bound of each request [default 30000]"
    )
    common.add_argument("--tls", action="store_true", help="connect with TLS (system CAs)")
    common.add_argument("--tls-cafile", help="CA certificates to verify the server with")
    common.add_argument("--tls-certfile", help="client certificate (PEM), for mutual TLS")
    common.add_argument("--tls-keyfile", help="key of --tls-certfile")
    common.add_argument("--tls-server-hostname", help="name to verify the certificate against")
    add_kafka_security_options(common)
    return common


def coordinator_client(args: argparse.Namespace, client_id: str) -> CoordinatorClient:
    """A client of the coordinator-server that `connection_options` name."""
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_SERVER_ENV)
    if not bootstrap:
        raise AdminError(f"give --bootstrap-server or set {BOOTSTRAP_SERVER_ENV}")
    tls = {
        "ssl_cafile": args.tls_cafile,
        "ssl_certfile": args.tls_certfile,
        "ssl_keyfile": args.tls_keyfile,
        "ssl_server_hostname": args.tls_server_hostname,
    }
    if args.tls and not (args.tls_cafile or args.tls_certfile):
        tls["ssl_context"] = build_ssl_context()
    return CoordinatorClient(
        bootstrap, client_id=client_id, request_timeout_ms=args.timeout_ms, **tls
    )


def kafka_cluster(args: argparse.Namespace) -> tuple[str | None, KafkaSecurity]:
    """The Kafka cluster that `connection_options` name (None: not given) and its security."""
    bootstrap = args.kafka_bootstrap_servers or os.environ.get(KAFKA_BOOTSTRAP_SERVERS_ENV)
    try:
        security = kafka_security_from_args(args)
    except ValueError as error:
        raise AdminError(f"kafka security: {error}") from None
    return bootstrap or None, security


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `groups` and its sub-commands on the `coordinator-server` parser."""
    common = connection_options()

    groups = commands.add_parser(
        "groups",
        help="list, describe and manage consumer groups",
        description="List, describe and manage consumer groups and their offsets "
        "(Kafka's kafka-consumer-groups). Exit status: 0 ok, 1 error, 2 usage.",
    )
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    listing = actions.add_parser("list", parents=[common], help="list the groups")
    listing.add_argument(
        "--state", action="append", default=[], help="only groups in this state (repeatable)"
    )

    describe = actions.add_parser(
        "describe", parents=[common], help="a group's state, protocol and members"
    )
    describe.add_argument("group")

    offsets = actions.add_parser(
        "offsets",
        parents=[common],
        help="committed offset, log-end offset and lag of each partition",
    )
    offsets.add_argument("group")

    delete = actions.add_parser(
        "delete", parents=[common], help="delete groups without members, with their offsets"
    )
    delete.add_argument("group", nargs="+")

    delete_offsets = actions.add_parser(
        "delete-offsets", parents=[common], help="delete a group's committed offsets of topics"
    )
    delete_offsets.add_argument("group")
    delete_offsets.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,P...]",
        help="topic, or topic:partitions (repeatable)",
    )

    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="move a group's committed offsets (dry run unless --execute)",
    )
    reset.add_argument("group")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P...]",
        help="topic, or topic:partitions (repeatable)",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the start of the log")
    target.add_argument("--to-latest", action="store_true", help="the end of the log")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    target.add_argument(
        "--to-datetime",
        metavar="ISO-8601",
        help="the first offset at or after this time, e.g. 2024-05-01T12:00:00Z "
        "(no zone: local time)",
    )
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="apply the plan")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (default)")


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed `groups` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    logging.basicConfig(
        level=logging.WARNING, stream=err, format="%(levelname)s %(name)s: %(message)s"
    )
    # aiokafka logs every retry; failures reach us as exceptions.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    command: Callable[[_Context], Coroutine[Any, Any, None]] = _COMMANDS[args.groups_command]
    try:
        context = _Context.from_args(args, out, err)
        asyncio.run(_run(command, context))
    except (AdminError, KafkaSecurityError) as e:
        print(f"{_PROG}: error: {e}", file=err)
        return 1
    except (ApiError, ClientError, KafkaError, OSError, TimeoutError, ValueError) as e:
        print(f"{_PROG}: error: {_describe(e)}", file=err)
        return 1
    return 0


def _describe(error: BaseException) -> str:
    if isinstance(error, ApiError):
        return str(error)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclass
class _Context:
    args: argparse.Namespace
    out: TextIO
    err: TextIO
    client: CoordinatorClient
    kafka_bootstrap_servers: str | None
    kafka_security: KafkaSecurity

    @classmethod
    def from_args(cls, args: argparse.Namespace, out: TextIO, err: TextIO) -> _Context:
        kafka, kafka_security = kafka_cluster(args)
        client = coordinator_client(args, "coordinator-server-groups")
        return cls(args, out, err, client, kafka, kafka_security)

    @contextlib.asynccontextmanager
    async def kafka(self) -> AsyncIterator[KafkaLogReader]:
        bootstrap = self.kafka_bootstrap_servers
        if not bootstrap:
            raise AdminError(
                f"this needs the Kafka cluster: give --kafka-bootstrap-servers or set "
                f"{KAFKA_BOOTSTRAP_SERVERS_ENV}"
            )
        security = self.kafka_security
        options = {}
        if not security.is_plaintext:
            connector = KafkaConnector(security, "coordinator-server-groups")
            # A refusal said plainly (aiokafka's would only say it could not bootstrap).
            await connector.check_bootstrap(bootstrap, self.args.timeout_ms / 1000)
            options = security.aiokafka_options(connector.ssl_context)
        async with KafkaLogReader(bootstrap, timeout_ms=self.args.timeout_ms, **options) as reader:
            yield reader

    def emit(self, value: object) -> None:
        json.dump(value, self.out, indent=2, sort_keys=False)
        self.out.write("\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        cells = [[_cell(value) for value in row] for row in rows]
        widths = [len(header) for header in headers]
        for row in cells:
            widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
        for row in [list(headers), *cells]:
            line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            print(line.rstrip(), file=self.out)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


async def _run(command: Callable[[_Context], Coroutine[Any, Any, None]], context: _Context) -> None:
    async with context.client:
        await command(context)


# list


async def _list(context: _Context) -> None:
    groups = await context.client.list_all_groups(states_filter=context.args.state)
    if context.args.json:
        context.emit(
            [
                {
                    "group_id": g.group_id,
                    "state": g.group_state,
                    "protocol_type": g.protocol_type,
                    "group_type": g.group_type,
                }
                for g in groups
            ]
        )
        return
    context.table(
        ["GROUP", "STATE", "PROTOCOL-TYPE"],
        [(g.group_id, g.group_state, g.protocol_type or "") for g in groups],
    )


# describe


@dataclass
class _MemberView:
    """A member as the tool shows it, its "consumer" protocol bytes decoded."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscription: list[str] | None
    """Subscribed topics; None when not decodable (or not a "consumer" group)."""
    assignment: dict[str, list[int]] | None
    """Assigned partitions by topic; None when not decodable."""

    @classmethod
    def of(
        cls, group: DescribeGroupsResponseGroup, member: DescribeGroupsResponseMember
    ) -> _MemberView:
        subscription: list[str] | None = None
        assignment: dict[str, list[int]] | None = None
        if group.protocol_type == "consumer":
            with contextlib.suppress(InvalidConsumerProtocolError):
                subscription = sorted(
                    ConsumerProtocolSubscription.decode(member.member_metadata).topics
                )
            with contextlib.suppress(InvalidConsumerProtocolError):
                by_topic: dict[str, list[int]] = {}
                for item in ConsumerProtocolAssignment.decode(member.member_assignment).partitions:
                    by_topic.setdefault(item.topic, []).extend(item.partitions)
                assignment = {topic: sorted(p) for topic, p in sorted(by_topic.items())}
        return cls(
            member.member_id,
            member.group_instance_id,
            member.client_id,
            member.client_host,
            subscription,
            assignment,
        )

    def partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, p)
            for topic, indexes in (self.assignment or {}).items()
            for p in indexes
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscription": self.subscription,
            "assignment": None
            if self.assignment is None
            else [{"topic": t, "partitions": p} for t, p in self.assignment.items()],
        }

    def assignment_text(self) -> str:
        if self.assignment is None:
            return "-"
        return (
            " ".join(
                f"{topic}:{','.join(map(str, indexes))}"
                for topic, indexes in self.assignment.items()
            )
            or "(none)"
        )


async def _describe_group(context: _Context) -> None:
    group = await context.client.describe_group(context.args.group)
    members = [_MemberView.of(group, member) for member in group.members]
    if context.args.json:
        context.emit(
            {
                "group_id": group.group_id,
                "state": group.group_state,
                "protocol_type": group.protocol_type,
                "protocol": group.protocol_data,
                "members": [m.to_json() for m in members],
            }
        )
        return
    context.table(
        ["GROUP", "STATE", "PROTOCOL-TYPE", "PROTOCOL", "MEMBERS"],
        [(group.group_id, group.group_state, group.protocol_type, group.protocol_data,
          len(members))],
    )  # fmt: skip
    if not members:
        return
    print(file=context.out)
    context.table(
        ["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "TOPICS", "ASSIGNMENT"],
        [
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                None if m.subscription is None else ",".join(m.subscription),
                m.assignment_text(),
            )
            for m in members
        ],
    )


# offsets


async def _describe_or_none(
    client: CoordinatorClient, group_id: str
) -> DescribeGroupsResponseGroup | None:
    try:
        return await client.describe_group(group_id)
    except ApiError as e:
        if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        raise


async def _offsets(context: _Context) -> None:
    group_id = context.args.group
    group = await _describe_or_none(context.client, group_id)
    committed = await context.client.fetch_offsets(group_id)
    if group is None and not committed:
        raise AdminError(f"consumer group {group_id!r} does not exist")
    owners: dict[TopicPartition, _MemberView] = {}
    if group is not None:
        for member in group.members:
            view = _MemberView.of(group, member)
            for tp in view.partitions():
                owners[tp] = view
    partitions = sorted(set(committed) | set(owners))
    log_end: dict[TopicPartition, int] = {}
    if context.kafka_bootstrap_servers:
        async with context.kafka() as kafka:
            existing = set(await kafka.partitions_of({tp.topic for tp in partitions}))
            wanted = [tp for tp in partitions if tp in existing]
            log_end = await kafka.end_offsets(
                wanted,
                starting_offsets={tp: committed[tp].offset for tp in wanted if tp in committed},
            )
    elif not context.args.json:
        print(f"{_PROG}: log-end offsets and lag need --kafka-bootstrap-servers", file=context.err)
    rows = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = log_end.get(tp)
        lag = end - current if end is not None and current is not None else None
        owner = owners.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "member_id": owner.member_id if owner else None,
                "client_host": owner.client_host if owner else None,
                "client_id": owner.client_id if owner else None,
            }
        )
    if context.args.json:
        context.emit(
            {
                "group_id": group_id,
                "state": group.group_state if group else None,
                "partitions": rows,
            }
        )
        return
    context.table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
         "HOST", "CLIENT-ID"],
        [(group_id, r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"],
          r["lag"], r["member_id"], r["client_host"], r["client_id"]) for r in rows],
    )  # fmt: skip


# delete


async def _delete(context: _Context) -> None:
    response = await context.client.delete_groups(
        DeleteGroupsRequest(groups_names=list(context.args.group))
    )
    results = {r.group_id: r.error_code for r in response.results}
    failed = {g: code for g, code in results.items() if code != ErrorCode.NONE}
    if context.args.json:
        context.emit({g: ErrorCode(code).name if code else "OK" for g, code in results.items()})
    else:
        deleted = [g for g in results if g not in failed]
        if deleted:
            names = ", ".join(f"'{g}'" for g in deleted)
            print(
                f"Deletion of requested consumer groups ({names}) was successful.", file=context.out
            )
        for g, code in failed.items():
            print(f"Group '{g}' could not be deleted: {ErrorCode(code).name}.", file=context.out)
    if failed:
        raise AdminError(f"{len(failed)} of {len(results)} groups could not be deleted")


# delete-offsets


def _parse_topics(values: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """ "topic" or "topic:0,1,2"."""
    parsed: list[tuple[str, list[int] | None]] = []
    for value in values:
        topic, sep, partitions = value.partition(":")
        if not topic:
            raise AdminError(f"bad --topic {value!r}")
        if not sep:
            parsed.append((topic, None))
            continue
        try:
            parsed.append((topic, sorted({int(p) for p in partitions.split(",")})))
        except ValueError:
            raise AdminError(f"bad partitions in --topic {value!r}") from None
    return parsed


async def _delete_offsets(context: _Context) -> None:
    group_id = context.args.group
    committed = await context.client.fetch_offsets(group_id)
    partitions: list[TopicPartition] = []
    for topic, indexes in _parse_topics(context.args.topic):
        if indexes is None:
            of_topic = sorted(tp for tp in committed if tp.topic == topic)
            if not of_topic:
                raise AdminError(f"group {group_id!r} has no committed offsets for topic {topic!r}")
            partitions.extend(of_topic)
        else:
            partitions.extend(TopicPartition(topic, p) for p in indexes)
    errors: dict[TopicPartition, ApiError] = {}
    try:
        await context.client.delete_offsets(group_id, partitions)
    except OffsetDeleteError as e:
        errors = e.errors
    rows = [
        (tp.topic, tp.partition, errors[tp].code.name if tp in errors else "Successful")
        for tp in partitions
    ]
    if context.args.json:
        context.emit(
            {"group_id": group_id,
             "partitions": [{"topic": t, "partition": p, "status": s} for t, p, s in rows]}
        )  # fmt: skip
    else:
        context.table(["TOPIC", "PARTITION", "STATUS"], rows)
    if errors:
        raise AdminError(f"{len(errors)} of {len(partitions)} partitions kept their offsets")


# reset-offsets


def _parse_datetime(text: str) -> int:
    """ISO 8601 to epoch milliseconds; a time without a zone is local time."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError(f"--to-datetime {text!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


async def _reset_offsets(context: _Context) -> None:
    args = context.args
    group_id = args.group
    client = context.client
    committed = {tp: value.offset for tp, value in (await client.fetch_offsets(group_id)).items()}
    group = await _describe_or_none(client, group_id)
    state = group.group_state if group else "Dead"
    if args.execute and state not in _INACTIVE_STATES:
        raise AdminError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
            f"current state is {state}."
        )
    needs_kafka = args.to_earliest or args.to_latest or args.to_datetime is not None
    wants_kafka = needs_kafka or context.kafka_bootstrap_servers
    async with contextlib.AsyncExitStack() as stack:
        kafka = await stack.enter_async_context(context.kafka()) if wants_kafka else None
        partitions = await _reset_partitions(args, committed, kafka)
        if not partitions:
            raise AdminError("no partitions to reset")
        earliest: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        if kafka is not None:
            earliest = await kafka.beginning_offsets(partitions)
            latest = await kafka.end_offsets(partitions, starting_offsets=earliest)
        plan: dict[TopicPartition, int] = {}
        if args.to_earliest:
            plan = dict(earliest)
        elif args.to_latest:
            plan = dict(latest)
        elif args.to_datetime is not None:
            assert kafka is not None
            plan = await kafka.offsets_for_time(partitions, _parse_datetime(args.to_datetime))
        elif args.to_offset is not None:
            plan = dict.fromkeys(partitions, args.to_offset)
        else:
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
                raise AdminError(f"cannot shift partitions without a committed offset: {names}")
            plan = {tp: committed[tp] + args.shift_by for tp in partitions}
    for tp, offset in plan.items():
        # Kafka's tool keeps new offsets inside the log, and never below zero.
        if tp in earliest and offset < earliest[tp]:
            plan[tp] = earliest[tp]
        elif tp in latest and offset > latest[tp]:
            plan[tp] = latest[tp]
        elif offset < 0:
            plan[tp] = 0
    if args.execute:
        await client.commit_offsets(group_id, plan)
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "current_offset": committed.get(tp),
         "new_offset": plan[tp]}
        for tp in sorted(plan)
    ]  # fmt: skip
    if args.json:
        context.emit({"group_id": group_id, "executed": bool(args.execute), "partitions": rows})
    else:
        context.table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
            [(group_id, r["topic"], r["partition"], r["current_offset"], r["new_offset"])
             for r in rows],
        )  # fmt: skip
    if not args.execute:
        print(f"{_PROG}: dry run, nothing changed; add --execute to apply", file=context.err)


async def _reset_partitions(
    args: argparse.Namespace, committed: dict[TopicPartition, int], kafka: KafkaLogReader | None
) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    partitions: set[TopicPartition] = set()
    for topic, indexes in _parse_topics(args.topic):
        if indexes is not None:
            partitions.update(TopicPartition(topic, p) for p in indexes)
        elif kafka is not None:
            of_topic = await kafka.partitions_of([topic])
            if not of_topic:
                raise AdminError(f"topic {topic!r} does not exist in Kafka")
            partitions.update(of_topic)
        else:
            partitions.update(tp for tp in committed if tp.topic == topic)
    return sorted(partitions)


_COMMANDS: Final[dict[str, Callable[[_Context], Coroutine[Any, Any, None]]]] = {
    "list": _list,
    "describe": _describe_group,
    "offsets": _offsets,
    "delete": _delete,
    "delete-offsets": _delete_offsets,
    "reset-offsets": _reset_offsets,
}
