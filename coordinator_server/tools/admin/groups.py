"""The `groups` command line and its sub-commands but `reset-offsets` (`reset_offsets`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TextIO

from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from coordinator_client import (
    ClientError,
    CoordinatorClient,
    KafkaLogReader,
    OffsetDeleteError,
)
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import DeleteGroupsRequest
from coordinator_server.storage.kafka.security import KafkaSecurityError
from coordinator_server.tools.admin.common import (
    CONNECT_CHECK_S,
    AdminError,
    Context,
    UsageError,
    check_reachable,
    configure_tool_logging,
    connection_options,
    kafka_cluster,
    new_coordinator_client,
)
from coordinator_server.tools.admin.group_views import (
    GroupView,
    MemberView,
    describe_any,
    members_table,
    state_warning,
    states_table,
    type_name,
    types_filter,
)
from coordinator_server.tools.admin.reset_offsets import parse_topics, reset_offsets

__all__ = ["add_parser", "main"]

_PROG: Final = "coordinator-server groups"


def _add_groups(parser: argparse.ArgumentParser) -> None:
    """The groups a command acts on, as Kafka's tool takes them (--group, repeatable, or
    --all-groups), and as positional arguments."""
    parser.add_argument("group", nargs="*", metavar="GROUP", help="a group (same as --group)")
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        dest="groups",
        metavar="GROUP",
        help="a group (repeatable)",
    )
    parser.add_argument("--all-groups", action="store_true", help="every group of the cluster")


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
    listing.add_argument(
        "--type",
        action="append",
        nargs="?",
        const="",
        dest="types",
        metavar="TYPES",
        help="show each group's type (classic or consumer); with TYPES (comma-separated, "
        "repeatable), only groups of these types",
    )

    describe = actions.add_parser(
        "describe", parents=[common], help="groups' state, protocol and members"
    )
    _add_groups(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument(
        "--members",
        action="store_true",
        help="one line per member: its host, client id and number of partitions",
    )
    view.add_argument(
        "--state",
        action="store_true",
        help="one line per group: its coordinator, assignor, state and number of members",
    )
    describe.add_argument(
        "--verbose",
        action="store_true",
        help="with --members, each member's epoch, current and target assignment; with "
        "--state, the group's epoch and its target assignment's",
    )

    offsets = actions.add_parser(
        "offsets",
        parents=[common],
        help="committed offset, log-end offset and lag of each partition of groups",
    )
    _add_groups(offsets)

    delete = actions.add_parser(
        "delete", parents=[common], help="delete groups without members, with their offsets"
    )
    _add_groups(delete)

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
        help="move groups' committed offsets (dry run unless --execute)",
        description="Plan new committed offsets for inactive groups, print the plan, and "
        "commit it with --execute (Kafka's kafka-consumer-groups --reset-offsets).",
    )
    _add_groups(reset)
    scope = reset.add_mutually_exclusive_group()
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
    target.add_argument(
        "--to-current",
        action="store_true",
        help="the committed offset (the end of the log where none is committed)",
    )
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    target.add_argument(
        "--to-datetime",
        metavar="ISO-8601",
        help="the first offset at or after this time, e.g. 2024-05-01T12:00:00Z "
        "(no zone: local time)",
    )
    target.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first offset at or after this long ago, e.g. PT1H30M or P1DT12H",
    )
    target.add_argument(
        "--from-file",
        metavar="CSV",
        help="the offsets in this file: topic,partition,offset lines (one group), or "
        "group,topic,partition,offset lines (what --export prints)",
    )
    reset.add_argument(
        "--export", action="store_true", help="print the plan as CSV, for --from-file"
    )
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="apply the plan")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (default)")


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed `groups` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    configure_tool_logging(err)
    command: Callable[[Context], Coroutine[Any, Any, None]] = _COMMANDS[args.groups_command]
    try:
        kafka, kafka_security = kafka_cluster(args)
        client = new_coordinator_client(args, "coordinator-server-groups")
        context = Context(args, out, err, client, kafka, kafka_security, _PROG)
        asyncio.run(_run(command, context))
    except UsageError as e:
        print(f"{_PROG}: error: {e}", file=err)
        return 2
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


async def _run(command: Callable[[Context], Coroutine[Any, Any, None]], context: Context) -> None:
    async with context.client:
        await check_reachable(context.client, min(CONNECT_CHECK_S, context.args.timeout_ms / 1000))
        await command(context)


@dataclass
class _Named:
    """The groups a command acts on."""

    ids: list[str]
    several: bool
    """Whether there may be several (--all-groups, or more than one named): then JSON is a
    list, and a plan's CSV names the group."""
    types: dict[str, str]
    """Each group's type, when ListGroups said it (--all-groups)."""


async def _named(context: Context) -> _Named:
    args = context.args
    named = list(dict.fromkeys([*args.group, *args.groups]))
    if args.all_groups:
        if named:
            raise UsageError("give groups or --all-groups, not both")
        listed = await context.client.list_all_groups()
        return _Named(
            [group.group_id for group in listed],
            True,
            {group.group_id: group.group_type for group in listed},
        )
    if not named:
        raise UsageError("give a group (GROUP or --group GROUP) or --all-groups")
    return _Named(named, len(named) > 1, {})


async def _groups(context: Context) -> tuple[list[str], bool]:
    """The groups the command names, and whether there may be several."""
    named = await _named(context)
    return named.ids, named.several


# list


async def _list(context: Context) -> None:
    types = types_filter(context.args.types)
    groups = await context.client.list_all_groups(
        states_filter=context.args.state, types_filter=types or ()
    )
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
    if types is None:
        context.table(
            ["GROUP", "STATE", "PROTOCOL-TYPE"],
            [(g.group_id, g.group_state, g.protocol_type or "") for g in groups],
        )
        return
    # --type shows each group's type, as kafka-consumer-groups.sh --list --type does.
    context.table(
        ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
        [(g.group_id, type_name(g.group_type), g.group_state, g.protocol_type or "")
         for g in groups],
    )  # fmt: skip


# describe


async def _describe_group(context: Context) -> None:
    named = await _named(context)
    args = context.args
    found: list[GroupView] = []
    missing: list[str] = []
    for group_id in named.ids:
        try:
            found.append(await describe_any(context.client, group_id, named.types.get(group_id)))
        except ApiError as error:
            if not named.several or error.code is not ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            context.warn(f"error: consumer group {group_id!r} does not exist")
            missing.append(group_id)
    if args.json:
        described = [group.to_json() for group in found]
        context.emit(described if named.several else described[0])
    elif args.members or args.state:
        for group in found:
            warning = state_warning(group)
            if warning is not None:
                context.warn(warning)
        if args.members:
            context.table(*members_table(found, args.verbose))
        else:
            context.table(
                *states_table(
                    ((group, _coordinator(context, group.group_id)) for group in found),
                    args.verbose,
                )
            )
    else:
        for index, group in enumerate(found):
            if index:
                print(file=context.out)
            _print_group(context, group)
    if missing:
        raise AdminError(f"{len(missing)} of {len(named.ids)} groups do not exist")


def _coordinator(context: Context, group_id: str) -> str | None:
    """The group's coordinator as Kafka's tool shows it (the one that just answered)."""
    node = context.client.cached_coordinator(group_id)
    return None if node is None else f"{node.host}:{node.port} ({node.node_id})"


def _print_group(context: Context, group: GroupView) -> None:
    members = group.members
    context.table(
        ["GROUP", "STATE", "PROTOCOL-TYPE", "PROTOCOL", "MEMBERS"],
        [(group.group_id, group.state, group.protocol_type, group.protocol, len(members))],
    )
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
                m.subscription_text(),
                m.assignment_text(),
            )
            for m in members
        ],
    )


# offsets


async def _view_or_none(
    client: CoordinatorClient, group_id: str, group_type: str | None
) -> GroupView | None:
    try:
        return await describe_any(client, group_id, group_type)
    except ApiError as e:
        if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        raise


@dataclass
class _GroupOffsets:
    group_id: str
    state: str | None
    rows: list[dict[str, Any]]

    def to_json(self) -> dict[str, object]:
        return {"group_id": self.group_id, "state": self.state, "partitions": self.rows}


async def _offsets(context: Context) -> None:
    named = await _named(context)
    groups, several = named.ids, named.several
    found: list[_GroupOffsets] = []
    missing: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        kafka = None
        if context.kafka_bootstrap_servers:
            kafka = await stack.enter_async_context(context.kafka())
        elif not context.args.json:
            context.warn("log-end offsets and lag need --kafka-bootstrap-servers")
        gone: set[str] = set()
        for group_id in groups:
            offsets = await _group_offsets(
                context, group_id, named.types.get(group_id), kafka, gone
            )
            if offsets is None:
                if not several:
                    raise AdminError(f"consumer group {group_id!r} does not exist")
                context.warn(f"error: consumer group {group_id!r} does not exist")
                missing.append(group_id)
            else:
                found.append(offsets)
    if gone:
        # Kafka's tool shows such offsets without a log end too; they are not an error.
        context.warn(f"topics that do not exist in Kafka (no log end): {', '.join(sorted(gone))}")
    if context.args.json:
        context.emit([g.to_json() for g in found] if several else found[0].to_json())
    else:
        context.table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"],
            [(g.group_id, r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"],
              r["lag"], r["member_id"], r["client_host"], r["client_id"])
             for g in found for r in g.rows],
        )  # fmt: skip
    if missing:
        raise AdminError(f"{len(missing)} of {len(groups)} groups do not exist")


async def _group_offsets(
    context: Context,
    group_id: str,
    group_type: str | None,
    kafka: KafkaLogReader | None,
    gone: set[str],
) -> _GroupOffsets | None:
    """One group's rows (None: no such group); `gone` collects the topics Kafka lacks."""
    group = await _view_or_none(context.client, group_id, group_type)
    committed = await context.client.fetch_offsets(group_id)
    if group is None and not committed:
        return None
    owners: dict[TopicPartition, MemberView] = {}
    if group is not None:
        for member in group.members:
            for tp in member.partitions():
                owners[tp] = member
    partitions = sorted(set(committed) | set(owners))
    log_end: dict[TopicPartition, int] = {}
    if kafka is not None:
        counts = await kafka.partition_counts({tp.topic for tp in partitions})
        gone.update(tp.topic for tp in partitions if tp.topic not in counts)
        wanted = [tp for tp in partitions if tp.partition < counts.get(tp.topic, 0)]
        log_end = await kafka.end_offsets(
            wanted,
            starting_offsets={tp: committed[tp].offset for tp in wanted if tp in committed},
        )
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
    return _GroupOffsets(group_id, group.state if group else None, rows)


# delete


async def _delete(context: Context) -> None:
    groups, _ = await _groups(context)
    names: list[str | None] = list(groups)
    response = await context.client.delete_groups(DeleteGroupsRequest(groups_names=names))
    results = {r.group_id: r.error_code for r in response.results}
    failed = {g: code for g, code in results.items() if code != ErrorCode.NONE}
    if context.args.json:
        context.emit({g: ErrorCode(code).name if code else "OK" for g, code in results.items()})
    else:
        deleted = [g for g in results if g not in failed]
        if deleted:
            listed = ", ".join(f"'{g}'" for g in deleted)
            print(
                f"Deletion of requested consumer groups ({listed}) was successful.",
                file=context.out,
            )
        for g, code in failed.items():
            print(f"Group '{g}' could not be deleted: {ErrorCode(code).name}.", file=context.out)
    if failed:
        raise AdminError(f"{len(failed)} of {len(results)} groups could not be deleted")


# delete-offsets


async def _delete_offsets(context: Context) -> None:
    group_id = context.args.group
    committed = await context.client.fetch_offsets(group_id)
    partitions: list[TopicPartition] = []
    for topic, indexes in parse_topics(context.args.topic):
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


async def _reset_offsets(context: Context) -> None:
    groups, several = await _groups(context)
    await reset_offsets(context, groups, several)


_COMMANDS: Final[dict[str, Callable[[Context], Coroutine[Any, Any, None]]]] = {
    "list": _list,
    "describe": _describe_group,
    "offsets": _offsets,
    "delete": _delete,
    "delete-offsets": _delete_offsets,
    "reset-offsets": _reset_offsets,
}
