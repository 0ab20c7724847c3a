"""`coordinator-server groups` run as the command it is (a process of its own) against a real
server on Apache Kafka: the options of Kafka's kafka-consumer-groups (several groups,
`--all-groups`, `reset-offsets --to-current`, `--by-duration`, `--from-file`, `--export`, an
active group refused even for a dry run); a topic the tools only read is never created on a
broker that creates topics on request (Kafka's default), and is named as missing; a refused
connection ends a tool in well under a second, in one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_setup import PARTITIONS, PER_PARTITION, Setup, group_name, started
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker, cluster_topics, free_port

from coordinator_server.tools.pipeline.history import _log_ends

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

_CLI_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def setup(kafka_broker: KafkaBroker) -> Iterator[Setup]:
    with started(kafka_broker) as ready:
        yield ready


def cli(setup: Setup, *args: str, kafka: bool = True) -> subprocess.CompletedProcess[str]:
    """`coordinator-server ARGS` with the setup's servers, in a process of its own."""
    options = ["--bootstrap-server", setup.coordinator]
    if kafka:
        options += ["--kafka-bootstrap-servers", setup.broker.bootstrap]
    return subprocess.run(
        [sys.executable, "-m", "coordinator_server", *args, *options],
        capture_output=True,
        text=True,
        timeout=_CLI_TIMEOUT_S,
        check=False,
    )


def committed(setup: Setup, group: str) -> dict[TopicPartition, int]:
    fetched = setup.call(lambda c: c.fetch_offsets(group))
    return {tp: value.offset for tp, value in fetched.items()}


async def describe_as_aiokafka_does(bootstrap: str, topic: str) -> None:
    """aiokafka's own describe_topics: a MetadataRequest that allows auto-creation."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.describe_topics([topic])
    finally:
        await admin.close()


def test_reading_tools_never_create_a_missing_topic(setup: Setup, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    control, gone, typo, typo_partition, in_file, history_topic = (
        f"missing-{name}-{suffix}"
        for name in ("control", "gone", "typo", "typo-partition", "in-file", "history")
    )
    bootstrap = setup.broker.bootstrap
    # The broker creates a topic that a metadata request names unless the request forbids
    # it (Kafka's default, which the tools' requests used to meet).
    asyncio.run(describe_as_aiokafka_does(bootstrap, control))
    deadline = time.monotonic() + 10
    while control not in asyncio.run(cluster_topics(bootstrap)):
        assert time.monotonic() < deadline, "the broker does not create topics on request"
        time.sleep(0.2)

    group = group_name()
    setup.call(lambda c: c.commit_offsets(group, {TopicPartition(gone, 0): 3}))
    # offsets: the committed offset of a topic Kafka lacks, without a log end, and said.
    shown = cli(setup, "groups", "offsets", group, "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)["partitions"]
    assert (row["topic"], row["committed_offset"], row["log_end_offset"]) == (gone, 3, None)
    assert f"topics that do not exist in Kafka (no log end): {gone}" in shown.stderr

    # reset-offsets: a missing topic, named or in a plan, is an error naming it.
    prefix = "coordinator-server groups: error: "
    named = cli(setup, "groups", "reset-offsets", group, "--topic", typo, "--to-earliest")
    assert named.returncode == 1
    assert named.stderr == f"{prefix}topic '{typo}' does not exist in Kafka\n"
    with_partition = cli(
        setup, "groups", "reset-offsets", group, "--topic", f"{typo_partition}:0",
        "--to-offset", "0", "--execute",
    )  # fmt: skip
    assert with_partition.returncode == 1
    assert with_partition.stderr == (
        f"{prefix}cannot reset offsets: topic '{typo_partition}' does not exist in Kafka\n"
    )
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{in_file},0,0\n")
    from_file = cli(setup, "groups", "reset-offsets", group, "--from-file", str(plan), "--execute")
    assert from_file.returncode == 1
    assert f"topic '{in_file}' does not exist in Kafka" in from_file.stderr
    every = cli(setup, "groups", "reset-offsets", group, "--all-topics", "--to-latest")
    assert every.returncode == 1
    assert f"skipping topics that no longer exist in Kafka: {gone}" in every.stderr
    assert "no partitions to reset" in every.stderr
    assert committed(setup, group) == {TopicPartition(gone, 0): 3}

    # `analyze history` reads the data topics' ends through the same reader.
    ends, at_times = asyncio.run(_log_ends(bootstrap, [(history_topic, 0)], [0], {}))
    assert (ends, at_times) == ({}, {})

    existing = asyncio.run(cluster_topics(bootstrap))
    assert {gone, typo, typo_partition, in_file, history_topic}.isdisjoint(existing)


def test_several_groups_and_all_groups(setup: Setup) -> None:
    first, second = group_name(), group_name()
    setup.commit(first, {0: 1})
    setup.commit(second, {1: 2})

    described = cli(setup, "groups", "describe", "--group", first, "--group", second, "--json")
    assert described.returncode == 0, described.stderr
    assert [(g["group_id"], g["state"]) for g in json.loads(described.stdout)] == [
        (first, "Empty"), (second, "Empty")
    ]  # fmt: skip
    # One group: an object, as before.
    assert json.loads(cli(setup, "groups", "describe", first, "--json").stdout)["group_id"] == first

    offsets = cli(setup, "groups", "offsets", first, "--group", second, "--json")
    assert offsets.returncode == 0, offsets.stderr
    assert {
        (g["group_id"], r["partition"], r["committed_offset"], r["lag"])
        for g in json.loads(offsets.stdout)
        for r in g["partitions"]
    } == {(first, 0, 1, PER_PARTITION - 1), (second, 1, 2, PER_PARTITION - 2)}
    table = cli(setup, "groups", "offsets", "--group", first, "--group", second)
    lines = [line.split()[:4] for line in table.stdout.splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET"]
    assert [first, setup.topic, "0", "1"] in lines and [second, setup.topic, "1", "2"] in lines

    everything = cli(setup, "groups", "offsets", "--all-groups", "--json")
    assert everything.returncode == 0, everything.stderr
    assert {first, second} <= {g["group_id"] for g in json.loads(everything.stdout)}

    # A group that does not exist is said, the others are shown, the status is 1.
    partly = cli(setup, "groups", "describe", "--group", first, "--group", "no-such-group")
    assert partly.returncode == 1
    assert first in partly.stdout
    assert "consumer group 'no-such-group' does not exist" in partly.stderr

    # --all-groups with reset-offsets: the plan names each group (dry run, as --export).
    exported = cli(
        setup, "groups", "reset-offsets", "--all-groups", "--all-topics", "--to-current",
        "--export",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    lines = set(exported.stdout.splitlines())
    assert {f"{first},{setup.topic},0,1", f"{second},{setup.topic},1,2"} <= lines

    deleted = cli(setup, "groups", "delete", "--group", first, "--group", second)
    assert deleted.returncode == 0, deleted.stderr
    assert committed(setup, first) == {} and committed(setup, second) == {}

    for usage in (["describe"], ["describe", first, "--all-groups"]):
        refused = cli(setup, "groups", *usage)
        assert refused.returncode == 2
        assert refused.stderr.startswith("coordinator-server groups: error: give ")


def test_reset_to_current_and_by_duration(setup: Setup) -> None:
    group = group_name()
    setup.commit(group, {0: 4, 1: 2})

    def reset(*how: str) -> dict[int, int]:
        done = cli(setup, "groups", "reset-offsets", group, "--all-topics", *how, "--execute")
        assert done.returncode == 0, done.stderr
        return {tp.partition: offset for tp, offset in committed(setup, group).items()}

    # The committed offsets where there are, the log end where not (Kafka's resetToCurrent).
    current = cli(
        setup, "groups", "reset-offsets", group, "--topic", setup.topic, "--to-current",
        "--execute",
    )  # fmt: skip
    assert current.returncode == 0, current.stderr
    assert {tp.partition: o for tp, o in committed(setup, group).items()} == {
        0: 4, 1: 2, 2: PER_PARTITION
    }  # fmt: skip
    # Every record is younger than a day: the first of each partition.
    assert reset("--by-duration", "P1D") == dict.fromkeys(range(PARTITIONS), 0)
    # None is as recent as now: the log end.
    assert reset("--by-duration", "PT0S") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert reset("--by-duration", "P1DT12H30M0.5S") == dict.fromkeys(range(PARTITIONS), 0)
    for wrong in ("1h", "P1Y", "PT", "yesterday"):
        refused = cli(
            setup, "groups", "reset-offsets", group, "--all-topics", "--by-duration", wrong
        )
        assert refused.returncode == 1
        assert refused.stderr.startswith(
            f"coordinator-server groups: error: --by-duration {wrong!r} is not a duration"
        )


def test_a_plan_exported_edited_and_read_back(setup: Setup, tmp_path: Path) -> None:
    topic = setup.topic
    group, other = group_name(), group_name()
    setup.commit(group, {0: 1, 1: 1, 2: 1})
    setup.commit(other, {0: 2})

    planned = cli(
        setup, "groups", "reset-offsets", group, "--topic", f"{topic}:0,1", "--to-offset", "3",
        "--export",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout == f"{topic},0,3\n{topic},1,3\n"
    assert "dry run" in planned.stderr
    assert committed(setup, group) == {setup.tp(p): 1 for p in range(PARTITIONS)}

    plan = tmp_path / "plan.csv"
    plan.write_text(planned.stdout.replace(f"{topic},1,3", f"{topic},1,7"))
    applied = cli(setup, "groups", "reset-offsets", group, "--from-file", str(plan), "--execute")
    assert applied.returncode == 0, applied.stderr
    assert committed(setup, group) == {setup.tp(0): 3, setup.tp(1): 7, setup.tp(2): 1}

    # Several groups: the group is the first column, read back the same way.
    both = ["--group", group, "--group", other]
    planned = cli(
        setup, "groups", "reset-offsets", *both, "--topic", f"{topic}:2", "--to-offset", "8",
        "--export",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout == f"{group},{topic},2,8\n{other},{topic},2,8\n"
    plan.write_text(planned.stdout + f"{other},{topic},0,99\n")
    applied = cli(setup, "groups", "reset-offsets", *both, "--from-file", str(plan), "--execute")
    assert applied.returncode == 0, applied.stderr
    assert committed(setup, group)[setup.tp(2)] == 8
    # An offset past the log end is brought back to it, as Kafka's tool does.
    assert committed(setup, other) == {setup.tp(0): PER_PARTITION, setup.tp(2): 8}

    mixed = cli(setup, "groups", "reset-offsets", group, "--from-file", str(plan), "--all-topics")
    assert mixed.returncode == 2
    assert "--from-file names its own partitions" in mixed.stderr
    unscoped = cli(setup, "groups", "reset-offsets", group, "--to-earliest")
    assert unscoped.returncode == 2
    assert "give the partitions to reset" in unscoped.stderr

    plan.write_text(f"{topic},0\n")
    bad = cli(setup, "groups", "reset-offsets", group, "--from-file", str(plan))
    assert bad.returncode == 1
    assert "line 1: expected topic,partition,offset or group,topic,partition,offset" in bad.stderr
    plan.write_text(f"{topic},0,5\n")
    bad = cli(setup, "groups", "reset-offsets", *both, "--from-file", str(plan))
    assert bad.returncode == 1
    assert "need exactly one --group" in bad.stderr


def test_an_active_group_is_not_reset_even_in_a_dry_run(setup: Setup) -> None:
    active, idle = group_name(), group_name()
    setup.commit(idle, {0: 6})
    member_id = setup.join(active)
    try:
        for run in ([], ["--execute"]):
            refused = cli(
                setup, "groups", "reset-offsets", "--group", active, "--group", idle,
                "--all-topics", "--to-earliest", *run,
            )  # fmt: skip
            assert refused.returncode == 1
            assert (
                f"Assignments can only be reset if the group '{active}' is inactive, but the "
                "current state is Stable." in refused.stderr
            )
            assert "1 of 2 groups are active and were not reset" in refused.stderr
            assert active not in refused.stdout and idle in refused.stdout
        assert committed(setup, idle) == {setup.tp(0): 0}
    finally:
        setup.leave(active, member_id)


@pytest.mark.parametrize("tool", ["groups", "transactions"])
def test_a_refused_connection_ends_the_tool_at_once_in_one_line(tool: str) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "coordinator_server", tool, "list", "--bootstrap-server", nobody],
        capture_output=True,
        text=True,
        timeout=_CLI_TIMEOUT_S,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr == (
        f"coordinator-server {tool}: error: cannot connect to {nobody}: Connection refused\n"
    )
    # The process's own start (imports) is most of it; the client retried for 29 s before.
    assert elapsed < 5, elapsed


def test_a_refused_kafka_connection_is_one_line_naming_the_cluster(setup: Setup) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    group = group_name()
    setup.commit(group, {0: 1})
    shown = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "groups", "offsets", group,
         "--bootstrap-server", setup.coordinator, "--kafka-bootstrap-servers", nobody],
        capture_output=True, text=True, timeout=_CLI_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert shown.returncode == 1
    assert shown.stderr.endswith(
        f"coordinator-server groups: error: cannot connect to the Kafka cluster at {nobody}: "
        "Connection refused\n"
    )
    producers = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "transactions", "describe-producers",
         "--topic", setup.topic, "--partition", "0", "--kafka-bootstrap-servers", nobody],
        capture_output=True, text=True, timeout=_CLI_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert producers.returncode == 1
    assert producers.stderr == (
        f"coordinator-server transactions: error: cannot connect to the Kafka cluster at "
        f"{nobody}: Connection refused\n"
    )
