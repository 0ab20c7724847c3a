"""`coordinator-server groups reset-offsets`: Kafka's `kafka-consumer-groups --reset-offsets`
(its `GroupOffsetsResetter`).

For each group named (or every group, `--all-groups`): refused unless the group is inactive
(Empty or Dead: a member's next commit would overwrite the reset), whether or not the run
executes, with Kafka's sentence; otherwise a plan, one new offset per partition, printed, and
committed only with `--execute`. The targets are Kafka's: `--to-earliest`, `--to-latest`,
`--to-current`, `--to-offset`, `--shift-by`, `--to-datetime`, `--by-duration` and
`--from-file` (Kafka's CSV, `topic,partition,offset` for one group or
`group,topic,partition,offset`); `--export` prints the plan in that CSV, so that a dry run's
output can be edited and fed back with `--from-file`. New offsets are kept inside the log
(between its start and its end) when the Kafka cluster is known, and never below zero.

A topic named by `--topic` or `--from-file` that the Kafka cluster does not have is an error
naming it, and is never created (see `kafka_metadata_request`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import io
import re
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Final

from aiokafka.structs import TopicPartition
from pydantic import TypeAdapter, ValidationError

from coordinator_client import CoordinatorClient, KafkaLogReader
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_server.tools.admin.common import AdminError, Context, UsageError
from coordinator_server.tools.admin.group_views import describe_any

__all__ = ["parse_duration_ms", "parse_topics", "read_plan_file", "reset_offsets"]

INACTIVE_STATES: Final = frozenset({"Empty", "Dead"})
# Java's Duration.parse form, which Kafka's --by-duration takes: days, hours, minutes and
# (fractional) seconds, no years or months.
_DURATION: Final = re.compile(r"[-+]?P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?")
_TIMEDELTA: Final = TypeAdapter(datetime.timedelta)


def parse_topics(values: Sequence[str]) -> list[tuple[str, list[int] | None]]:
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


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 to epoch milliseconds; a time without a zone is local time."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError(f"--to-datetime {text!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """An ISO 8601 duration in Kafka's form (`PnDTnHnMnS`, e.g. PT1H30M) in milliseconds."""
    upper = text.strip().upper()
    bare = upper.lstrip("+-")
    if not _DURATION.fullmatch(upper) or bare in ("P", "PT") or bare.endswith("T"):
        raise AdminError(
            f"--by-duration {text!r} is not a duration like PT1H30M or P1DT12H "
            "(ISO 8601's PnDTnHnMnS, as Kafka's tool takes it)"
        )
    try:
        delta = _TIMEDELTA.validate_python(upper.lstrip("+"))
    except ValidationError:
        raise AdminError(f"--by-duration {text!r} is not a duration like PT1H30M") from None
    return int(delta / datetime.timedelta(milliseconds=1))


def read_plan_file(path: str, groups: Sequence[str]) -> dict[str, dict[TopicPartition, int]]:
    """Kafka's reset plan CSV: `topic,partition,offset` lines when one group is named,
    `group,topic,partition,offset` lines for any number of groups."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise AdminError(f"--from-file {path}: {error.strerror or error}") from None
    plan: dict[str, dict[TopicPartition, int]] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        fields = [field.strip() for field in row]
        if not any(fields):
            continue
        where = f"--from-file {path} line {number}"
        if len(fields) == 3:
            if len(groups) != 1:
                raise AdminError(
                    f"{where}: topic,partition,offset lines need exactly one --group; for "
                    "several groups write group,topic,partition,offset"
                )
            group, (topic, partition, offset) = groups[0], fields
        elif len(fields) == 4:
            group, topic, partition, offset = fields
        else:
            raise AdminError(
                f"{where}: expected topic,partition,offset or group,topic,partition,offset"
            )
        try:
            tp, value = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            raise AdminError(f"{where}: partition and offset must be integers") from None
        plan.setdefault(group, {})[tp] = value
    return plan


def export_csv(plans: Mapping[str, Mapping[TopicPartition, int]], with_group: bool) -> str:
    """The plans as Kafka's `--export` writes them (what `--from-file` reads back)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for group, plan in plans.items():
        for tp in sorted(plan):
            prefix = [group] if with_group else []
            writer.writerow([*prefix, tp.topic, tp.partition, plan[tp]])
    return buffer.getvalue()


async def _state(client: CoordinatorClient, group_id: str) -> str:
    """The group's state, whichever protocol it follows ("Dead" when no group has the id):
    a consumer group (KIP-848) is active as a classic one is."""
    try:
        return (await describe_any(client, group_id)).state
    except ApiError as error:
        if error.code is ErrorCode.GROUP_ID_NOT_FOUND:
            return "Dead"
        raise


async def _check_exist(
    kafka: KafkaLogReader, partitions: Collection[TopicPartition], what: str
) -> None:
    """AdminError naming every topic (or partition) of `partitions` the cluster lacks."""
    counts = await kafka.partition_counts({tp.topic for tp in partitions})
    topics = sorted({tp.topic for tp in partitions if tp.topic not in counts})
    if topics:
        names = ", ".join(repr(topic) for topic in topics)
        raise AdminError(f"{what}: topic {names} does not exist in Kafka")
    beyond = sorted(tp for tp in partitions if tp.partition >= counts[tp.topic])
    if beyond:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in beyond)
        raise AdminError(f"{what}: no such partition {names} in Kafka")


async def _partitions(
    context: Context,
    committed: Mapping[TopicPartition, int],
    kafka: KafkaLogReader | None,
    from_file: Mapping[TopicPartition, int] | None,
) -> list[TopicPartition]:
    args = context.args
    if from_file is not None:
        partitions = set(from_file)
    elif args.all_topics:
        partitions = set(committed)
        if kafka is not None:
            # Offsets of a topic deleted since are left as they are (they name no log).
            counts = await kafka.partition_counts({tp.topic for tp in partitions})
            gone = sorted({tp.topic for tp in partitions if tp.topic not in counts})
            if gone:
                context.warn(f"skipping topics that no longer exist in Kafka: {', '.join(gone)}")
            partitions = {tp for tp in partitions if tp.partition < counts.get(tp.topic, 0)}
        return sorted(partitions)
    else:
        partitions = set()
        for topic, indexes in parse_topics(args.topic):
            if indexes is not None:
                partitions.update(TopicPartition(topic, p) for p in indexes)
            elif kafka is not None:
                counts = await kafka.partition_counts([topic])
                if topic not in counts:
                    raise AdminError(f"topic {topic!r} does not exist in Kafka")
                partitions.update(TopicPartition(topic, p) for p in range(counts[topic]))
            else:
                partitions.update(tp for tp in committed if tp.topic == topic)
    if kafka is not None and partitions:
        await _check_exist(kafka, partitions, "cannot reset offsets")
    return sorted(partitions)


async def _plan(
    context: Context,
    committed: Mapping[TopicPartition, int],
    partitions: list[TopicPartition],
    kafka: KafkaLogReader | None,
    from_file: Mapping[TopicPartition, int] | None,
) -> dict[TopicPartition, int]:
    args = context.args
    earliest: dict[TopicPartition, int] = {}
    latest: dict[TopicPartition, int] = {}
    if kafka is not None:
        earliest = await kafka.beginning_offsets(partitions)
        latest = await kafka.end_offsets(partitions, starting_offsets=earliest)
    plan: dict[TopicPartition, int]
    if from_file is not None:
        plan = {tp: from_file[tp] for tp in partitions}
    elif args.to_earliest:
        plan = dict(earliest)
    elif args.to_latest:
        plan = dict(latest)
    elif args.to_current:
        missing = [tp for tp in partitions if tp not in committed]
        if missing and kafka is None:
            raise AdminError(
                "--to-current takes the log end of partitions without a committed offset: "
                "give --kafka-bootstrap-servers"
            )
        # Kafka's resetToCurrent: the committed offset, else the end of the log.
        plan = {tp: committed[tp] if tp in committed else latest[tp] for tp in partitions}
    elif args.to_datetime is not None or args.by_duration is not None:
        assert kafka is not None
        if args.to_datetime is not None:
            timestamp_ms = parse_datetime_ms(args.to_datetime)
        else:
            timestamp_ms = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        plan = await kafka.offsets_for_time(partitions, timestamp_ms)
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
    return plan


def _needs_kafka(args: argparse.Namespace) -> bool:
    return bool(
        args.to_earliest
        or args.to_latest
        or args.to_datetime is not None
        or args.by_duration is not None
    )


async def reset_offsets(context: Context, groups: Sequence[str], several: bool) -> None:
    """Plan (and with --execute, commit) the reset of each of `groups`; `several`: the groups
    were not named one by one (--all-groups) or more than one was."""
    args = context.args
    if args.from_file is None and not args.topic and not args.all_topics:
        raise UsageError("give the partitions to reset: --topic, --all-topics or --from-file")
    if args.from_file is not None and (args.topic or args.all_topics):
        raise UsageError("--from-file names its own partitions: drop --topic and --all-topics")
    if args.by_duration is not None:
        parse_duration_ms(args.by_duration)  # a bad duration before anything is asked
    file_plans = read_plan_file(args.from_file, groups) if args.from_file else None
    client = context.client
    plans: dict[str, dict[TopicPartition, int]] = {}
    currents: dict[str, dict[TopicPartition, int]] = {}
    refused: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        kafka: KafkaLogReader | None = None
        if _needs_kafka(args) or context.kafka_bootstrap_servers:
            kafka = await stack.enter_async_context(context.kafka())
        for group_id in groups:
            state = await _state(client, group_id)
            if state not in INACTIVE_STATES:
                refused.append(
                    f"Assignments can only be reset if the group '{group_id}' is inactive, but "
                    f"the current state is {state}."
                )
                continue
            from_file: dict[TopicPartition, int] | None = None
            if file_plans is not None:
                if group_id not in file_plans:
                    context.warn(f"No reset plan for group {group_id} found.")
                    continue
                from_file = file_plans[group_id]
            fetched = await client.fetch_offsets(group_id)
            committed = {tp: value.offset for tp, value in fetched.items()}
            partitions = await _partitions(context, committed, kafka, from_file)
            if not partitions:
                if several:
                    continue  # nothing of this group to reset; Kafka's tool says nothing
                raise AdminError(f"group {group_id!r}: no partitions to reset")
            plan = await _plan(context, committed, partitions, kafka, from_file)
            if args.execute:
                await client.commit_offsets(group_id, plan)
            plans[group_id], currents[group_id] = plan, committed
    if len(refused) == 1 and not several:
        raise AdminError(refused[0])
    for message in refused:
        context.warn(f"error: {message}")
    _print(context, plans, currents, several)
    if not args.execute:
        context.warn("dry run, nothing changed; add --execute to apply")
    if refused:
        raise AdminError(f"{len(refused)} of {len(groups)} groups are active and were not reset")


def _print(
    context: Context,
    plans: Mapping[str, Mapping[TopicPartition, int]],
    currents: Mapping[str, Mapping[TopicPartition, int]],
    several: bool,
) -> None:
    args = context.args
    if args.export:
        context.out.write(export_csv(plans, with_group=several))
        return
    rows = [
        (group_id, tp, currents[group_id].get(tp), plan[tp])
        for group_id, plan in plans.items()
        for tp in sorted(plan)
    ]
    if args.json:
        results = [
            {
                "group_id": group_id,
                "executed": bool(args.execute),
                "partitions": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "current_offset": current,
                        "new_offset": new,
                    }
                    for group, tp, current, new in rows
                    if group == group_id
                ],
            }
            for group_id in plans
        ]
        context.emit(results if several else (results[0] if results else None))
        return
    context.table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [(group_id, tp.topic, tp.partition, current, new) for group_id, tp, current, new in rows],
    )
