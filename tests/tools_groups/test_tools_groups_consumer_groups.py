"""`coordinator-server groups` with consumer groups (KIP-848) against a scripted coordinator:
`list --type`, `describe` of each type, `describe --members [--verbose]` and `describe --state
[--verbose]` with kafka-consumer-groups.sh's columns, how the tool learns a group's type
(ListGroups, or DescribeGroups then ConsumerGroupDescribe), a server that does not serve
ConsumerGroupDescribe, and the exit codes."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from client_fake_server import FakeCoordinator, Received

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_server.cli import main

pytestmark = pytest.mark.timeout(60)

FOO = bytes(range(1, 17))
BAR = bytes(range(17, 33))
GONE = bytes(range(33, 49))


def topic_partitions(topic_id: bytes, name: str, *partitions: int) -> dict[str, Any]:
    return {"topic_id": topic_id, "topic_name": name, "partitions": list(partitions)}


def consumer_member(
    member_id: str,
    epoch: int,
    assigned: list[dict[str, Any]],
    target: list[dict[str, Any]],
    instance_id: str | None = None,
    member_type: int = 1,
) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "instance_id": instance_id,
        "rack_id": "rack-1",
        "member_epoch": epoch,
        "client_id": f"client-{member_id}",
        "client_host": "/10.0.0.7",
        "subscribed_topic_names": ["foo", "bar"],
        "subscribed_topic_regex": "ba.*" if member_id == "B" else None,
        "assignment": {"topic_partitions": assigned},
        "target_assignment": {"topic_partitions": target},
        "member_type": member_type,
    }


ORDERS = {
    "error_code": 0,
    "error_message": None,
    "group_id": "orders-app",
    "group_state": "Reconciling",
    "group_epoch": 7,
    "assignment_epoch": 6,
    "assignor_name": "uniform",
    "members": [
        consumer_member(
            "A",
            6,
            [topic_partitions(FOO, "foo", 0, 1), topic_partitions(BAR, "bar", 0)],
            [topic_partitions(FOO, "foo", 0)],
            instance_id="a-1",
        ),
        consumer_member(
            "B", 5, [], [topic_partitions(FOO, "foo", 1), topic_partitions(GONE, "", 2)]
        ),
    ],
    "authorized_operations": -(2**31),
}


def classic_described(group_id: str) -> dict[str, Any]:
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": "Stable",
        "protocol_type": "consumer",
        "protocol_data": "range",
        "members": [
            {
                "member_id": "C",
                "group_instance_id": None,
                "client_id": "client-C",
                "client_host": "/10.0.0.8",
                "member_metadata": ConsumerProtocolSubscription(topics=["foo"]).encode(),
                "member_assignment": ConsumerProtocolAssignment(
                    partitions=[TopicPartitions(topic="foo", partitions=[2, 0])]
                ).encode(),
            }
        ],
    }


@dataclass
class Script:
    """What the scripted coordinator holds: classic groups (DescribeGroups), consumer groups
    (ConsumerGroupDescribe, unless `serves_consumer_groups` is False: then it answers
    UNSUPPORTED_VERSION as a server without KIP-848 does) and what ListGroups lists."""

    classic: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"classic-app": classic_described("classic-app")}
    )
    consumer: dict[str, dict[str, Any]] = field(default_factory=lambda: {"orders-app": ORDERS})
    serves_consumer_groups: bool = True

    def handle(self, received: Received) -> dict[str, Any] | None:
        body = received.body
        if received.api_key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": []}
        if received.api_key == ApiKey.LIST_GROUPS:
            listed = [
                {"group_id": g, "protocol_type": "consumer", "group_state": d["group_state"],
                 "group_type": "classic"}
                for g, d in self.classic.items()
            ] + [
                {"group_id": g, "protocol_type": "consumer", "group_state": d["group_state"],
                 "group_type": "consumer"}
                for g, d in self.consumer.items()
            ]  # fmt: skip
            types = [t.lower() for t in body["types_filter"]]
            states = [s.lower() for s in body["states_filter"]]
            return {
                "error_code": 0,
                "groups": [
                    g
                    for g in listed
                    if (not types or g["group_type"] in types)
                    and (not states or g["group_state"].lower() in states)
                ],
            }
        if received.api_key == ApiKey.DESCRIBE_GROUPS:
            (group_id,) = body["groups"]
            if group_id in self.classic:
                return {"groups": [self.classic[group_id]]}
            return {
                "groups": [
                    {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "group_id": group_id,
                     "group_state": "Dead"}
                ]
            }  # fmt: skip
        if received.api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            if not self.serves_consumer_groups:
                return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
            (group_id,) = body["group_ids"]
            if group_id in self.consumer:
                return {"groups": [self.consumer[group_id]]}
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in self.classic
                else f"Group {group_id} not found."
            )
            return {
                "groups": [
                    {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": message,
                     "group_id": group_id}
                ]
            }  # fmt: skip
        if received.api_key == ApiKey.OFFSET_FETCH:
            (group,) = body["groups"]
            return {
                "groups": [
                    {
                        "group_id": group["group_id"],
                        "topics": [
                            {"name": "foo", "partitions": [
                                {"partition_index": 0, "committed_offset": 12},
                                {"partition_index": 3, "committed_offset": 4},
                            ]}
                        ],
                    }
                ]
            }  # fmt: skip
        return None


@dataclass
class Running:
    fake: FakeCoordinator
    script: Script

    def requests(self, api_key: int) -> list[Received]:
        return self.fake.requests(api_key)


@contextmanager
def scripted(script: Script) -> Iterator[Running]:
    """The scripted coordinator on a thread of its own (the tool runs its own event loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="groups tool server", daemon=True)
    thread.start()
    fake = FakeCoordinator(script.handle)

    async def start() -> None:
        await fake.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield Running(fake, script)
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def server() -> Iterator[Running]:
    with scripted(Script()) as running:
        yield running


def groups(server: Running, *args: str) -> int:
    return main(["groups", args[0], "--bootstrap-server", server.fake.bootstrap, *args[1:]])


def lines(capsys: pytest.CaptureFixture[str]) -> tuple[list[list[str]], str]:
    """The tables' lines split into cells on runs of two spaces or more (an empty cell
    disappears), and stderr."""
    captured = capsys.readouterr()
    return [re.split(r" {2,}", line) if line else [] for line in captured.out.splitlines()], (
        captured.err
    )


def test_list_shows_the_type_column_with_type_and_filters_by_it(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "list") == 0
    rows, _ = lines(capsys)
    assert rows[0] == ["GROUP", "STATE", "PROTOCOL-TYPE"]

    assert groups(server, "list", "--type") == 0
    rows, _ = lines(capsys)
    assert rows == [
        ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
        ["classic-app", "Classic", "Stable", "consumer"],
        ["orders-app", "Consumer", "Reconciling", "consumer"],
    ]
    assert server.requests(ApiKey.LIST_GROUPS)[-1].body["types_filter"] == []

    assert groups(server, "list", "--type", "CONSUMER", "--state", "reconciling") == 0
    rows, _ = lines(capsys)
    assert rows[1:] == [["orders-app", "Consumer", "Reconciling", "consumer"]]
    assert server.requests(ApiKey.LIST_GROUPS)[-1].body["types_filter"] == ["consumer"]

    assert groups(server, "list", "--type", "classic,consumer", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(g["group_id"], g["group_type"]) for g in listed} == {
        ("classic-app", "classic"),
        ("orders-app", "consumer"),
    }


def test_list_refuses_a_type_kafka_does_not_list(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "list", "--type", "consumer,share") == 2
    assert "invalid types list 'consumer,share'" in capsys.readouterr().err
    assert server.requests(ApiKey.LIST_GROUPS) == []


def test_describe_members_verbose_shows_kafkas_columns_for_a_consumer_group(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "describe", "orders-app", "--members", "--verbose") == 0
    rows, err = lines(capsys)
    assert rows == [
        ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
         "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"],
        ["orders-app", "A", "a-1", "/10.0.0.7", "client-A", "3", "6", "bar:0;foo:0,1", "6",
         "foo:0"],
        # B has no instance id (an empty cell) and nothing yet; a topic the server could not
        # name is shown by its id.
        ["orders-app", "B", "/10.0.0.7", "client-B", "0", "5", "-", "6",
         "ISIjJCUmJygpKissLS4vMA:2;foo:1"],
    ]  # fmt: skip
    assert "consumer group 'orders-app' is rebalancing" in err
    # DescribeGroups did not know it: ConsumerGroupDescribe did.
    assert [r.body for r in server.requests(ApiKey.CONSUMER_GROUP_DESCRIBE)] == [
        {"group_ids": ["orders-app"], "include_authorized_operations": False}
    ]


def test_describe_members_without_verbose_and_of_a_classic_group(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "describe", "--group", "orders-app", "--group", "classic-app",
                  "--members") == 0  # fmt: skip
    rows, _ = lines(capsys)
    assert rows[0] == [
        "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
    ]  # fmt: skip
    assert rows[1][:2] == ["orders-app", "A"] and rows[3] == [
        "classic-app", "C", "/10.0.0.8", "client-C", "2",
    ]  # fmt: skip
    # A classic group's member has no epoch nor target: "-" with --verbose.
    assert groups(server, "describe", "classic-app", "--members", "--verbose") == 0
    rows, _ = lines(capsys)
    assert rows == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
         "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"],
        ["classic-app", "C", "/10.0.0.8", "client-C", "2", "-", "foo:0,2", "-", "-"],
    ]  # fmt: skip
    assert server.requests(ApiKey.CONSUMER_GROUP_DESCRIBE)[-1].body["group_ids"] == ["orders-app"]


def test_describe_state_shows_the_assignor_state_and_with_verbose_the_epochs(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    coordinator = f"{server.fake.bootstrap} (0)"
    assert groups(server, "describe", "orders-app", "classic-app", "--state") == 0
    rows, _ = lines(capsys)
    assert rows == [
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        ["orders-app", coordinator, "uniform", "Reconciling", "2"],
        ["classic-app", coordinator, "range", "Stable", "1"],
    ]
    assert groups(server, "describe", "orders-app", "classic-app", "--state", "--verbose") == 0
    rows, _ = lines(capsys)
    assert rows == [
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
         "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
        ["orders-app", coordinator, "uniform", "Reconciling", "7", "6", "2"],
        ["classic-app", coordinator, "range", "Stable", "-", "-", "1"],
    ]  # fmt: skip


def test_describe_json_and_table_of_a_consumer_group(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "describe", "orders-app", "--json") == 0
    described = json.loads(capsys.readouterr().out)
    assert {k: described[k] for k in ("group_type", "state", "protocol", "group_epoch",
                                      "target_assignment_epoch")} == {
        "group_type": "consumer", "state": "Reconciling", "protocol": "uniform",
        "group_epoch": 7, "target_assignment_epoch": 6,
    }  # fmt: skip
    a, b = described["members"]
    assert a["assignment"] == [
        {"topic": "bar", "partitions": [0]},
        {"topic": "foo", "partitions": [0, 1]},
    ]
    assert a["target_assignment"] == [{"topic": "foo", "partitions": [0]}]
    assert (a["member_epoch"], a["group_instance_id"], a["rack_id"], a["upgraded"]) == (
        6, "a-1", "rack-1", True,
    )  # fmt: skip
    assert b["subscribed_topic_regex"] == "ba.*"

    assert groups(server, "describe", "orders-app") == 0
    rows, _ = lines(capsys)
    assert rows[:2] == [
        ["GROUP", "STATE", "PROTOCOL-TYPE", "PROTOCOL", "MEMBERS"],
        ["orders-app", "Reconciling", "consumer", "uniform", "2"],
    ]
    members = {row[0]: row for row in rows[4:]}
    assert members["B"] == ["B", "-", "client-B", "/10.0.0.7", "bar,foo,/ba.*/", "(none)"]
    assert members["A"] == ["A", "a-1", "client-A", "/10.0.0.7", "bar,foo", "bar:0 foo:0,1"]


def test_all_groups_takes_each_groups_type_from_the_listing(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "describe", "--all-groups", "--state") == 0
    rows, _ = lines(capsys)
    assert [row[0] for row in rows[1:]] == ["classic-app", "orders-app"]
    # Each was asked of its own API only.
    assert [r.body["groups"] for r in server.requests(ApiKey.DESCRIBE_GROUPS)] == [["classic-app"]]
    assert [r.body["group_ids"] for r in server.requests(ApiKey.CONSUMER_GROUP_DESCRIBE)] == [
        ["orders-app"]
    ]


def test_a_group_neither_api_knows_does_not_exist(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "describe", "nope", "--members") == 1
    assert "GROUP_ID_NOT_FOUND (69): Group nope not found." in capsys.readouterr().err
    assert groups(server, "describe", "nope", "orders-app", "--state") == 1
    rows, err = lines(capsys)
    assert [row[0] for row in rows[1:]] == ["orders-app"]
    assert "consumer group 'nope' does not exist" in err


def test_a_server_without_consumer_groups_has_classic_groups_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with scripted(Script(serves_consumer_groups=False)) as server:
        assert groups(server, "describe", "classic-app", "--members") == 0
        assert lines(capsys)[0][1][:2] == ["classic-app", "C"]
        assert groups(server, "describe", "orders-app") == 1
        err = capsys.readouterr().err
        # DescribeGroups' answer, not the UNSUPPORTED_VERSION of the API it does not serve.
        assert "GROUP_ID_NOT_FOUND" in err and "UNSUPPORTED_VERSION" not in err
        assert len(server.requests(ApiKey.CONSUMER_GROUP_DESCRIBE)) == 1


def test_offsets_of_a_consumer_group_name_each_partitions_member(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert groups(server, "offsets", "orders-app", "--json") == 0
    offsets = json.loads(capsys.readouterr().out)
    assert offsets["state"] == "Reconciling"
    owners = {(r["topic"], r["partition"]): r["member_id"] for r in offsets["partitions"]}
    assert owners == {("bar", 0): "A", ("foo", 0): "A", ("foo", 1): "A", ("foo", 3): None}


def test_describe_takes_one_view_at_a_time(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        groups(server, "describe", "orders-app", "--members", "--state")
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
