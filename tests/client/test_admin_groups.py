"""`coordinator-server groups` against a real server whose log is Kafka and a real broker:
every sub-command, tables and JSON, the environment variables, and the exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from admin_setup import PARTITIONS, Setup, group_name, started
from kafka_broker import KafkaBroker, free_port

from coordinator_server.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def setup(kafka_broker: KafkaBroker) -> Iterator[Setup]:
    with started(kafka_broker) as ready:
        yield ready


def output_json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_list_and_describe(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    idle, active = group_name(), group_name()
    setup.commit(idle, {0: 1})
    member_id = setup.join(active)
    try:
        assert setup.run("list", "--json") == 0
        listed = {g["group_id"]: g for g in output_json(capsys)}
        assert listed[idle]["state"] == "Empty"
        assert listed[active] == {
            "group_id": active, "state": "Stable", "protocol_type": "consumer",
            "group_type": "classic",
        }  # fmt: skip
        assert setup.run("list", "--state", "Stable", "--json") == 0
        assert idle not in {g["group_id"] for g in output_json(capsys)}
        assert setup.run("list") == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == ["GROUP", "STATE", "PROTOCOL-TYPE"]
        assert f"{active}  Stable" in "\n".join(table).replace("   ", "  ")

        assert setup.run("describe", active, "--json") == 0
        described = output_json(capsys)
        assert described["state"] == "Stable" and described["protocol"] == "range"
        (member,) = described["members"]
        assert member["member_id"] == member_id
        assert member["group_instance_id"] == "admin-test"
        assert member["subscription"] == [setup.topic]
        assert member["assignment"] == [{"topic": setup.topic, "partitions": [0, 1]}]
        assert setup.run("describe", active) == 0
        table = capsys.readouterr().out
        assert "MEMBER-ID" in table and f"{setup.topic}:0,1" in table and member_id in table

        assert setup.run("describe", "no-such-group") == 1
        assert "GROUP_ID_NOT_FOUND" in capsys.readouterr().err
    finally:
        setup.leave(active, member_id)


def test_offsets_show_committed_log_end_and_lag(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    group = group_name()
    setup.commit(group, {0: 4, 1: 10})
    assert setup.run("offsets", group, "--json") == 0
    result = output_json(capsys)
    assert result["state"] == "Empty"
    rows = {r["partition"]: r for r in result["partitions"]}
    assert set(rows) == {0, 1}
    assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (4, 10, 6)
    assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (10, 10, 0)

    assert setup.run("offsets", group) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"
    ]  # fmt: skip
    assert lines[1].split()[:6] == [group, setup.topic, "0", "4", "10", "6"]

    # Without Kafka: committed offsets only, and a word about it.
    assert setup.run("offsets", group, kafka=False) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1].split()[:6] == [group, setup.topic, "0", "4", "-", "-"]
    assert "--kafka-bootstrap-servers" in captured.err

    assert setup.run("offsets", "no-such-group") == 1
    assert "does not exist" in capsys.readouterr().err


def test_delete_groups(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    empty, busy = group_name(), group_name()
    setup.commit(empty, {0: 1})
    member_id = setup.join(busy)
    try:
        assert setup.run("delete", empty) == 0
        assert f"('{empty}') was successful" in capsys.readouterr().out
        assert setup.committed(empty) == {}
        assert setup.run("delete", busy, "no-such-group", "--json") == 1
        captured = capsys.readouterr()
        assert json.loads(captured.out) == {
            busy: "NON_EMPTY_GROUP", "no-such-group": "GROUP_ID_NOT_FOUND"
        }  # fmt: skip
        assert "2 of 2 groups could not be deleted" in captured.err
    finally:
        setup.leave(busy, member_id)


def test_delete_offsets(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    group = group_name()
    setup.commit(group, {0: 1, 1: 2, 2: 3})
    assert setup.run("delete-offsets", group, "--topic", f"{setup.topic}:1", "--json") == 0
    assert output_json(capsys)["partitions"] == [
        {"topic": setup.topic, "partition": 1, "status": "Successful"}
    ]
    assert setup.committed(group) == {0: 1, 2: 3}
    assert setup.run("delete-offsets", group, "--topic", setup.topic) == 0
    assert setup.committed(group) == {}
    assert setup.run("delete-offsets", group, "--topic", setup.topic) == 1
    assert "no committed offsets" in capsys.readouterr().err

    # A topic the group's members subscribe to keeps its offsets (Kafka's rule).
    busy = group_name()
    member_id = setup.join(busy)
    try:
        setup.call(
            lambda c: c.commit_offsets(
                busy,
                {setup.tp(0): 5},
                generation=1,
                member_id=member_id,
                group_instance_id="admin-test",
            )
        )
        assert setup.run("delete-offsets", busy, "--topic", f"{setup.topic}:0") == 1
        captured = capsys.readouterr()
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in captured.out
        assert setup.committed(busy) == {0: 5}
    finally:
        setup.leave(busy, member_id)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        (["--to-earliest"], {0: 0, 1: 0, 2: 0}),
        (["--to-latest"], {0: 10, 1: 10, 2: 10}),
        (["--to-offset", "7"], {0: 7, 1: 7, 2: 7}),
        (["--to-offset", "99"], {0: 10, 1: 10, 2: 10}),
        (["--shift-by", "-3"], {0: 1, 1: 0, 2: 5}),
        (["--shift-by", "4"], {0: 8, 1: 6, 2: 10}),
    ],
)
def test_reset_offsets(
    setup: Setup, capsys: pytest.CaptureFixture[str], how: list[str], expected: dict[int, int]
) -> None:
    group = group_name()
    before = {0: 4, 1: 2, 2: 8}
    setup.commit(group, before)
    # A dry run by default: the plan is printed, nothing changes.
    assert setup.run("reset-offsets", group, "--topic", setup.topic, *how, "--json") == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["executed"] is False
    assert {r["partition"]: (r["current_offset"], r["new_offset"]) for r in plan["partitions"]} == {
        p: (before[p], expected[p]) for p in range(PARTITIONS)
    }
    assert "dry run" in captured.err
    assert setup.committed(group) == before
    assert setup.run("reset-offsets", group, "--topic", setup.topic, *how, "--execute") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert setup.committed(group) == expected


def test_reset_offsets_to_a_datetime(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    group = group_name()
    setup.commit(group, {0: 10, 1: 10, 2: 10})

    def reset_to(moment: str) -> int:
        return setup.run(
            "reset-offsets", group, "--all-topics", "--to-datetime", moment, "--execute"
        )

    middle = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(setup.middle_ms / 1000))
    assert reset_to(f"{middle}.{setup.middle_ms % 1000:03d}+00:00") == 0
    # The first records at or after the middle are the "late" half.
    assert setup.committed(group) == {0: 5, 1: 5, 2: 5}
    assert reset_to("2000-01-01T00:00:00Z") == 0
    assert setup.committed(group) == {0: 0, 1: 0, 2: 0}
    # Later than every record: the end of the log. No zone: local time.
    assert reset_to("2999-01-01T00:00:00") == 0
    assert setup.committed(group) == {0: 10, 1: 10, 2: 10}
    assert reset_to("yesterday") == 1
    assert "ISO 8601" in capsys.readouterr().err


def test_reset_offsets_is_refused_while_the_group_has_members(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    group = group_name()
    member_id = setup.join(group)
    try:
        code = setup.run("reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
        assert code == 1
        assert "inactive, but the current state is Stable" in capsys.readouterr().err
        # The plan alone is refused too, as Kafka's tool refuses it.
        code = setup.run("reset-offsets", group, "--topic", f"{setup.topic}:0", "--to-offset", "3")
        assert code == 1
        captured = capsys.readouterr()
        assert "inactive, but the current state is Stable" in captured.err
        assert captured.out == ""
    finally:
        setup.leave(group, member_id)


def test_shift_needs_a_committed_offset_and_dates_need_kafka(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    group = group_name()
    setup.commit(group, {0: 1})
    assert setup.run("reset-offsets", group, "--topic", setup.topic, "--shift-by", "1") == 1
    assert "without a committed offset" in capsys.readouterr().err
    assert setup.run("reset-offsets", group, "--all-topics", "--to-latest", kafka=False) == 1
    assert "--kafka-bootstrap-servers" in capsys.readouterr().err
    # Without Kafka an explicit offset is taken as given (nothing to clamp against).
    code = setup.run(
        "reset-offsets", group, "--all-topics", "--to-offset", "99", "--execute", kafka=False
    )
    assert code == 0
    assert setup.committed(group) == {0: 99}


def test_settings_from_the_environment(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    group = group_name()
    setup.commit(group, {2: 3})
    monkeypatch.setenv("COORDINATOR_BOOTSTRAP_SERVER", setup.coordinator)
    monkeypatch.setenv("COORDINATOR_KAFKA_BOOTSTRAP_SERVERS", setup.broker.bootstrap)
    assert main(["groups", "offsets", group, "--json"]) == 0
    (row,) = output_json(capsys)["partitions"]
    assert (row["partition"], row["committed_offset"], row["lag"]) == (2, 3, 7)


def test_errors_exit_non_zero_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COORDINATOR_BOOTSTRAP_SERVER", raising=False)
    assert main(["groups", "list"]) == 1
    assert "give --bootstrap-server" in capsys.readouterr().err
    nobody = f"127.0.0.1:{free_port()}"
    assert main(["groups", "list", "--bootstrap-server", nobody, "--timeout-ms", "500"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("coordinator-server groups: error:") and "cannot connect" in err
    with pytest.raises(SystemExit) as usage:
        main(["groups", "reset-offsets", "g", "--topic", "t"])
    assert usage.value.code == 2
