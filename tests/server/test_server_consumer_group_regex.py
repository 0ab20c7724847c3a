"""A consumer group member subscribed by regular expression through a real server process,
its topics from a topics file that changes while the server runs: the member is given the
matching topics, an invalid pattern is refused with Kafka's INVALID_REGULAR_EXPRESSION, and
once the file is read again (every `--metadata-max-age-ms`) and the group's least interval
between two resolutions has passed, a topic created is given and a topic deleted is taken
back."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from server_process import ServerProcess, sqlite_args
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_server.consumer_groups.heartbeat import ConsumerGroupConfig

GROUP = "regex-readers"
# The least time between two resolutions of a group's patterns: Kafka's constant, no setting.
MIN_REFRESH_S = ConsumerGroupConfig().regex_refresh_min_interval_ms / 1000


def write_topics(path: Path, topics: dict[str, int]) -> None:
    path.write_text(json.dumps(topics))


def join(member_id: str, regex: str) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_regex": regex,
        "topic_partitions": [],
    }


Owned = dict[tuple[bytes, str], list[int]]


def beat(member_id: str, epoch: int, owned: Owned) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": epoch,
        "topic_partitions": [
            {"topic_id": topic_id, "topic_name": name, "partitions": partitions}
            for (topic_id, name), partitions in owned.items()
        ],
    }


def owned_of(response: dict[str, Any]) -> Owned:
    return {
        (tp["topic_id"], tp["topic_name"]): sorted(tp["partitions"])
        for tp in response["assignment"]["topic_partitions"]
    }


def by_name(owned: Owned) -> dict[str, list[int]]:
    return {name: partitions for (_, name), partitions in owned.items()}


async def test_a_regex_member_follows_the_topics_file_as_it_changes(tmp_path: Path) -> None:
    topics = tmp_path / "topics.json"
    write_topics(topics, {"orders-eu": 2, "audit": 1})
    member = str(uuid.uuid4())
    args = sqlite_args(
        tmp_path / "data",
        "--group-consumer-topics-file",
        str(topics),
        "--metadata-max-age-ms",
        "200",
        "--group-consumer-min-heartbeat-interval-ms",
        "100",
        "--group-consumer-heartbeat-interval-ms",
        "200",
        "--group-consumer-assignment-interval-ms",
        "0",
    )
    process = ServerProcess(args).start()
    try:
        client = await WireClient.connect(process.host, process.port)
        refused = await client.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, join(str(uuid.uuid4()), "orders-(eu")
        )
        assert refused["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION, refused
        assert refused["error_message"] == (
            "SubscribedTopicRegex `orders-(eu` is not a valid regular expression: "
            "missing closing )."
        )

        joined = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(member, "orders-.*"))
        assert (joined["error_code"], joined["member_epoch"]) == (0, 1), joined
        owned = owned_of(joined)
        assert by_name(owned) == {"orders-eu": [0, 1]}
        resolved_at = time.monotonic()

        # orders-eu is deleted and orders-us created, in one change of the file.
        write_topics(topics, {"orders-us": 3, "audit": 1})
        epoch = joined["member_epoch"]
        deadline = time.monotonic() + MIN_REFRESH_S + 20
        while time.monotonic() < deadline and by_name(owned) != {"orders-us": [0, 1, 2]}:
            await asyncio.sleep(0.3)
            response = await client.call(
                ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(member, epoch, owned)
            )
            assert response["error_code"] == 0, response
            epoch = response["member_epoch"]
            if response["assignment"] is not None:
                owned = owned_of(response)
        assert by_name(owned) == {"orders-us": [0, 1, 2]}
        # Not before the group's least interval between two resolutions.
        assert time.monotonic() - resolved_at > MIN_REFRESH_S
        assert epoch > 1

        described = await client.call(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [GROUP]})
        (group,) = described["groups"]
        (shown,) = group["members"]
        assert shown["subscribed_topic_regex"] == "orders-.*"
        assert [tp["topic_name"] for tp in shown["assignment"]["topic_partitions"]] == ["orders-us"]
        await client.close()
    finally:
        process.terminate()
