"""The settings of Kafka's consumer group protocol (KIP-848), under Kafka's names
(`group.consumer.*` as `--group-consumer-*`), with Kafka's defaults and its checks of them.

Apart from `config` because they are one concern of their own, as the security settings
are; `CoordinatorConfig` inherits them, so they are options of `serve` and environment
variables like every other setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, JsonValue

# Kafka's class names for its assignors, which its `group.consumer.assignors` accepts too.
_KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}

KAFKA_MAX_GROUP_SIZE = 2_147_483_647
"""Kafka's default group.consumer.max.size (Integer.MAX_VALUE): no limit of its own."""

KNOWN_ASSIGNORS = ("uniform", "range")
"""The server-side assignors there are (`consumer_groups.assignors.ASSIGNORS`' names: a
test holds the two together; the settings sit below the state machines and name them)."""

MigrationPolicy = Literal["disabled", "upgrade", "downgrade", "bidirectional"]
"""Kafka's `group.consumer.migration.policy` values (`ConsumerGroupMigrationPolicy`'s)."""

DEFAULT_MAX_SUBSCRIBED_TOPICS = 10_000
DEFAULT_MAX_CLUSTER_TOPICS = 100_000


def _groups() -> dict[str, JsonValue]:
    return {"group": "groups"}


def _limits() -> dict[str, JsonValue]:
    return {"group": "limits"}


class ConsumerGroupSettings(BaseModel):
    group_consumer_session_timeout_ms: int = Field(
        45_000,
        ge=1,
        description="group.consumer.session.timeout.ms: a consumer group member without a "
        "heartbeat for this long is removed.",
        json_schema_extra=_groups(),
    )
    group_consumer_min_session_timeout_ms: int = Field(
        45_000,
        ge=1,
        description="group.consumer.min.session.timeout.ms: the least session timeout.",
        json_schema_extra=_groups(),
    )
    group_consumer_max_session_timeout_ms: int = Field(
        60_000,
        ge=1,
        description="group.consumer.max.session.timeout.ms: the largest session timeout.",
        json_schema_extra=_groups(),
    )
    group_consumer_heartbeat_interval_ms: int = Field(
        5_000,
        ge=1,
        description="group.consumer.heartbeat.interval.ms: how often consumer group members "
        "heartbeat (the coordinator tells them).",
        json_schema_extra=_groups(),
    )
    group_consumer_min_heartbeat_interval_ms: int = Field(
        5_000,
        ge=1,
        description="group.consumer.min.heartbeat.interval.ms: the least heartbeat interval.",
        json_schema_extra=_groups(),
    )
    group_consumer_max_heartbeat_interval_ms: int = Field(
        15_000,
        ge=1,
        description="group.consumer.max.heartbeat.interval.ms: the largest heartbeat interval.",
        json_schema_extra=_groups(),
    )
    group_consumer_assignors: str = Field(
        "uniform,range",
        description="group.consumer.assignors: the server-side assignors members may name "
        "(uniform, range), the first one the default.",
        json_schema_extra=_groups(),
    )
    group_consumer_assignment_interval_ms: int = Field(
        1_000,
        ge=0,
        description="group.consumer.assignment.interval.ms: the least time between two "
        "computations of a group's target assignment; the changes in between share the next "
        "(0: one at every change).",
        json_schema_extra=_groups(),
    )
    group_consumer_regex_refresh_interval_ms: int = Field(
        600_000,
        ge=10_000,
        description="group.consumer.regex.refresh.interval.ms: how long a group's resolution "
        "of a subscribed regular expression stands before a heartbeat resolves it again (a "
        "change of the data cluster's topics resolves it sooner, at most every 10 s).",
        json_schema_extra=_groups(),
    )
    group_consumer_migration_policy: MigrationPolicy = Field(
        "bidirectional",
        description="group.consumer.migration.policy: whether a classic group becomes a "
        "consumer group online when a member joins it with the consumer protocol (upgrade), "
        "and a consumer group a classic one when its last member on that protocol leaves "
        "while classic members stay (downgrade): disabled, upgrade, downgrade or "
        "bidirectional.",
        json_schema_extra=_groups(),
    )
    group_consumer_max_size: int = Field(
        KAFKA_MAX_GROUP_SIZE,
        ge=1,
        description="group.consumer.max.size: most members in one consumer group (and "
        "--group-max-size bounds it too).",
        json_schema_extra=_groups(),
    )
    group_consumer_topics_file: Path | None = Field(
        None,
        description="For a node without the consumers' Kafka cluster (the embedded log, no "
        "--lag-bootstrap-servers): a JSON file of the topics consumer groups are assigned "
        'from, {"name": partitions, ...}, read again when it changes (given with a data '
        "cluster, it is used instead of that cluster's metadata).",
        json_schema_extra=_groups(),
    )
    max_subscribed_topics: int = Field(
        DEFAULT_MAX_SUBSCRIBED_TOPICS,
        ge=1,
        description="Most topics one consumer group heartbeat may name, subscribed or owned.",
        json_schema_extra=_limits(),
    )
    max_cluster_topics: int = Field(
        DEFAULT_MAX_CLUSTER_TOPICS,
        ge=1,
        description="Most of the data cluster's topics the node keeps for consumer groups "
        "(the first ones by name beyond; a topics file with more is refused).",
        json_schema_extra=_limits(),
    )

    def consumer_group_assignors(self) -> list[str]:
        """The configured assignors' names, in order, without repeats (Kafka's class names
        read as their short names); an unknown name raises ValueError."""
        names: list[str] = []
        for given in self.group_consumer_assignors.split(","):
            name = given.strip()
            if not name:
                continue
            name = _KAFKA_ASSIGNOR_CLASSES.get(name, name)
            if name not in KNOWN_ASSIGNORS:
                raise ValueError(
                    f"group-consumer-assignors: unknown assignor {given.strip()!r} "
                    f"(known: {', '.join(KNOWN_ASSIGNORS)})"
                )
            if name not in names:
                names.append(name)
        if not names:
            raise ValueError("group-consumer-assignors must name at least one assignor")
        return names

    def check_consumer_groups(self) -> None:
        """Refuse settings Kafka's GroupCoordinatorConfig refuses."""
        self.consumer_group_assignors()
        session = self.group_consumer_session_timeout_ms
        low, high = (
            self.group_consumer_min_session_timeout_ms,
            self.group_consumer_max_session_timeout_ms,
        )
        if not low <= session <= high:
            raise ValueError(
                f"group-consumer-session-timeout-ms {session} must be within "
                f"group-consumer-min-session-timeout-ms {low} and "
                f"group-consumer-max-session-timeout-ms {high}"
            )
        interval = self.group_consumer_heartbeat_interval_ms
        low, high = (
            self.group_consumer_min_heartbeat_interval_ms,
            self.group_consumer_max_heartbeat_interval_ms,
        )
        if not low <= interval <= high:
            raise ValueError(
                f"group-consumer-heartbeat-interval-ms {interval} must be within "
                f"group-consumer-min-heartbeat-interval-ms {low} and "
                f"group-consumer-max-heartbeat-interval-ms {high}"
            )
        if interval >= session:
            raise ValueError(
                "group-consumer-heartbeat-interval-ms must be less than "
                "group-consumer-session-timeout-ms"
            )


__all__ = ["ConsumerGroupSettings"]
