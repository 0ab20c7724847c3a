"""What `groups` shows of a group of either type: a classic group (DescribeGroups, its
"consumer" protocol bytes decoded) or a consumer group (KIP-848, ConsumerGroupDescribe), and
the views kafka-consumer-groups.sh prints of them (`--describe --members [--verbose]`,
`--describe --state [--verbose]`, `--list --type`).

A group's type comes from ListGroups when the command listed the groups (`--all-groups`);
otherwise DescribeGroups is asked first, and an id it does not know (GROUP_ID_NOT_FOUND, its
answer for a consumer group's id too) is asked of ConsumerGroupDescribe. A server that does
not serve ConsumerGroupDescribe (UNSUPPORTED_VERSION) has classic groups only.

The tables' columns are Kafka's (ConsumerGroupCommand's `printMembers` and `printStates`),
laid out as the tool's other tables are.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from aiokafka.structs import TopicPartition

from coordinator_client import CoordinatorClient
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
)
from coordinator_protocol.consumer_groups import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupDescribeResponseMember,
)
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import DescribeGroupsResponseGroup, DescribeGroupsResponseMember
from coordinator_server.tools.admin.common import UsageError

__all__ = [
    "CLASSIC",
    "CONSUMER",
    "GroupView",
    "MemberView",
    "describe_any",
    "kafka_assignment_text",
    "members_table",
    "state_warning",
    "states_table",
    "type_name",
    "types_filter",
]

CLASSIC: Final = "classic"
CONSUMER: Final = "consumer"
"""The group types ListGroups answers (Kafka's coordinator's `Group.GroupType` names)."""

_TYPE_NAMES: Final = {CLASSIC: "Classic", CONSUMER: "Consumer"}

# Kafka's tool shows a missing value as "-" (MISSING_COLUMN_VALUE).
_MISSING: Final = "-"

# States in which Kafka's tool warns that the group is rebalancing.
_REBALANCING: Final = frozenset(
    {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
)


@dataclass
class MemberView:
    """A member as the tool shows it: a classic member's "consumer" protocol bytes decoded,
    or a consumer group member's description."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscription: list[str] | None
    """Subscribed topics; None when not decodable (or not a "consumer" group)."""
    assignment: dict[str, list[int]] | None
    """Assigned partitions by topic; None when not decodable."""
    subscribed_regex: str | None = None
    rack_id: str | None = None
    member_epoch: int | None = None
    """A consumer group member's epoch; None for a classic group's member."""
    target_assignment: dict[str, list[int]] | None = None
    """A consumer group member's target assignment by topic; None for a classic member."""
    upgraded: bool | None = None
    """Kafka's "upgraded": whether a consumer group's member speaks the consumer protocol
    (ConsumerGroupHeartbeat) rather than the classic one; None when not known."""

    @classmethod
    def of_classic(
        cls, group: DescribeGroupsResponseGroup, member: DescribeGroupsResponseMember
    ) -> MemberView:
        subscription: list[str] | None = None
        assignment: dict[str, list[int]] | None = None
        if group.protocol_type == CONSUMER:
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

    @classmethod
    def of_consumer(cls, member: ConsumerGroupDescribeResponseMember) -> MemberView:
        upgraded = {MEMBER_TYPE_CONSUMER: True, MEMBER_TYPE_CLASSIC: False}.get(member.member_type)
        return cls(
            member.member_id,
            member.instance_id,
            member.client_id,
            member.client_host,
            sorted(member.subscribed_topic_names),
            _by_topic(member.assignment),
            subscribed_regex=member.subscribed_topic_regex,
            rack_id=member.rack_id,
            member_epoch=member.member_epoch,
            target_assignment=_by_topic(member.target_assignment),
            upgraded=upgraded,
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
            "rack_id": self.rack_id,
            "subscription": self.subscription,
            "subscribed_topic_regex": self.subscribed_regex,
            "assignment": _assignment_json(self.assignment),
            "member_epoch": self.member_epoch,
            "target_assignment": _assignment_json(self.target_assignment),
            "upgraded": self.upgraded,
        }

    def subscription_text(self) -> str | None:
        """The topics subscribed to, and a regular expression as `/regex/`."""
        if self.subscription is None:
            return None
        topics = list(self.subscription)
        if self.subscribed_regex:
            topics.append(f"/{self.subscribed_regex}/")
        return ",".join(topics)

    def assignment_text(self) -> str:
        if self.assignment is None:
            return _MISSING
        return (
            " ".join(
                f"{topic}:{','.join(map(str, indexes))}"
                for topic, indexes in self.assignment.items()
            )
            or "(none)"
        )


def _by_topic(assignment: ConsumerGroupDescribeResponseAssignment) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic in assignment.topic_partitions:
        by_topic.setdefault(_topic_name(topic.topic_name, topic.topic_id), []).extend(
            topic.partitions
        )
    return {topic: sorted(p) for topic, p in sorted(by_topic.items())}


def _topic_name(name: str, topic_id: bytes) -> str:
    # A topic the server could not name: its id, as Kafka prints a Uuid.
    return name or base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


def _assignment_json(assignment: dict[str, list[int]] | None) -> list[dict[str, object]] | None:
    if assignment is None:
        return None
    return [{"topic": t, "partitions": p} for t, p in assignment.items()]


@dataclass
class GroupView:
    """A group of either type as the tool shows it."""

    group_id: str
    group_type: str
    state: str
    protocol_type: str
    protocol: str
    """A classic group's protocol (its assignor, for a "consumer" group); a consumer
    group's server-side assignor."""
    members: list[MemberView] = field(default_factory=list)
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None

    @classmethod
    def of_classic(cls, group: DescribeGroupsResponseGroup) -> GroupView:
        return cls(
            group.group_id,
            CLASSIC,
            group.group_state,
            group.protocol_type,
            group.protocol_data,
            [MemberView.of_classic(group, member) for member in group.members],
        )

    @classmethod
    def of_consumer(cls, group: ConsumerGroupDescribeResponseGroup) -> GroupView:
        return cls(
            group.group_id,
            CONSUMER,
            group.group_state,
            CONSUMER,
            group.assignor_name,
            [MemberView.of_consumer(member) for member in group.members],
            group_epoch=group.group_epoch,
            target_assignment_epoch=group.assignment_epoch,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "group_id": self.group_id,
            "group_type": self.group_type,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "group_epoch": self.group_epoch,
            "target_assignment_epoch": self.target_assignment_epoch,
            "members": [m.to_json() for m in self.members],
        }


async def describe_any(
    client: CoordinatorClient, group_id: str, group_type: str | None = None
) -> GroupView:
    """The group of that id, whichever its type (`group_type` when ListGroups said it).

    Raises:
        ApiError: GROUP_ID_NOT_FOUND when no group has the id; any other error either API
            answers.
    """
    not_classic: ApiError | None = None
    if group_type != CONSUMER:
        try:
            return GroupView.of_classic(await client.describe_group(group_id))
        except ApiError as error:
            if error.code is not ErrorCode.GROUP_ID_NOT_FOUND or group_type == CLASSIC:
                raise
            not_classic = error
    try:
        return GroupView.of_consumer(await client.describe_consumer_group(group_id))
    except ApiError as error:
        if error.code is ErrorCode.UNSUPPORTED_VERSION and not_classic is not None:
            # A server without consumer groups: DescribeGroups' answer is the last word.
            raise not_classic from None
        raise


def types_filter(values: Sequence[str] | None) -> list[str] | None:
    """`--type`'s values as ListGroups' types filter (Kafka's `consumerGroupTypesFromString`:
    comma-separated, case-insensitive, classic or consumer); None without `--type`, empty
    for `--type` alone (every type, the TYPE column shown)."""
    if values is None:
        return None
    types = [t.strip().lower() for value in values for t in value.split(",") if t.strip()]
    if not set(types) <= _TYPE_NAMES.keys():
        raise UsageError(
            f"invalid types list '{','.join(values)}': valid types are {', '.join(_TYPE_NAMES)}"
        )
    return list(dict.fromkeys(types))


def type_name(group_type: str) -> str:
    """A group type as Kafka's tool prints it (`GroupType.toString`)."""
    return _TYPE_NAMES.get(group_type.lower(), "Unknown")


def state_warning(group: GroupView) -> str | None:
    """What Kafka's tool says on stderr of a group's state before its members or state."""
    if group.state == "Empty":
        return f"consumer group '{group.group_id}' has no active members"
    if group.state in _REBALANCING:
        return f"warning: consumer group '{group.group_id}' is rebalancing"
    return None


def kafka_assignment_text(assignment: dict[str, list[int]] | None) -> str:
    """An assignment as Kafka's tool prints it (`getAssignmentString`): `topic:0,1;other:2`,
    "-" when empty."""
    if not assignment:
        return _MISSING
    return ";".join(
        sorted(
            f"{topic}:{','.join(map(str, sorted(indexes)))}"
            for topic, indexes in assignment.items()
            if indexes
        )
    )


def _cell(value: object | None) -> object:
    return _MISSING if value is None else value


def members_table(
    groups: Iterable[GroupView], verbose: bool
) -> tuple[list[str], list[list[object]]]:
    """`--describe --members [--verbose]`: a line per member of each group. The
    GROUP-INSTANCE-ID column is shown when some member has an instance id, and UPGRADED
    (with --verbose) when a group mixes classic and consumer protocol members."""
    members = [(group, member) for group in groups for member in group.members]
    with_instance = any(member.group_instance_id for _, member in members)
    kinds = {member.upgraded for _, member in members if member.upgraded is not None}
    with_upgraded = verbose and kinds == {True, False}
    headers = ["GROUP", "CONSUMER-ID"]
    if with_instance:
        headers.append("GROUP-INSTANCE-ID")
    headers += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    if with_upgraded:
        headers.append("UPGRADED")
    rows: list[list[object]] = []
    for group, member in members:
        row: list[object] = [group.group_id, member.member_id]
        if with_instance:
            row.append(member.group_instance_id or "")
        row += [member.client_host, member.client_id, len(member.partitions())]
        if verbose:
            row += [
                _cell(member.member_epoch),
                kafka_assignment_text(member.assignment),
                _cell(group.target_assignment_epoch),
                kafka_assignment_text(member.target_assignment),
            ]
        if with_upgraded:
            row.append(_MISSING if member.upgraded is None else str(member.upgraded).lower())
        rows.append(row)
    return headers, rows


def states_table(
    groups: Iterable[tuple[GroupView, str | None]], verbose: bool
) -> tuple[list[str], list[list[object]]]:
    """`--describe --state [--verbose]`: a line per group, with its coordinator (as
    `host:port (id)`, None when not known)."""
    headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    if verbose:
        headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
    headers.append("#MEMBERS")
    rows: list[list[object]] = []
    for group, coordinator in groups:
        row: list[object] = [group.group_id, _cell(coordinator), group.protocol or _MISSING]
        row.append(group.state)
        if verbose:
            row += [_cell(group.group_epoch), _cell(group.target_assignment_epoch)]
        row.append(len(group.members))
        rows.append(row)
    return headers, rows
