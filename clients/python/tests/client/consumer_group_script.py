"""A scripted coordinator of one consumer-protocol group (KIP-848) for the client's tests:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) answered from a script the test
writes, OffsetCommit and OffsetFetch checked against the member epochs it hands out.

It is not Kafka's reconciliation (the server's own tests hold that): a test says what each
member is assigned and at which epoch (`assign`), and the next heartbeat of that member
answers it. Until then a heartbeat answers the member's epoch and no assignment. A member
joining (epoch 0) is given what `on_join` says (by default every partition of the topics it
subscribes to). `codes` answers error codes first, per API, as the classic script does.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from client_fake_server import Received

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode


@dataclass
class ScriptedMember:
    member_id: str
    epoch: int = 0
    instance_id: str | None = None
    topics: list[str] = field(default_factory=list)
    regex: str | None = None
    # The assignment last sent, and those still to send with their epochs.
    assignment: dict[str, list[int]] = field(default_factory=dict)
    pending: deque[tuple[int, dict[str, list[int]]]] = field(default_factory=deque)


class ScriptedConsumerGroup:
    """The handler of a `FakeCoordinator` for group `group_id`; topics by name with their
    partition counts (each gets a random topic id)."""

    def __init__(
        self, topics: Mapping[str, int], *, group_id: str = "g", heartbeat_interval_ms: int = 200
    ) -> None:
        self.group_id = group_id
        self.partition_counts = dict(topics)
        self.topic_ids = {name: uuid.uuid4().bytes for name in topics}
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.members: dict[str, ScriptedMember] = {}
        self.codes: dict[int, list[int]] = {}
        self.commits: dict[tuple[str, int], int] = {}
        self.on_join: Callable[[ScriptedMember], dict[str, list[int]]] = self._everything
        # Heartbeats left unanswered (a lost answer: the client's deadline passes).
        self.drop_heartbeats = 0
        # Topics whose names the heartbeat answers leave out (their ids only).
        self.nameless: set[str] = set()

    def topic_name(self, topic_id: bytes) -> str:
        return next(name for name, known in self.topic_ids.items() if known == topic_id)

    def assign(self, member_id: str, epoch: int, assignment: Mapping[str, list[int]]) -> None:
        """The next heartbeat of `member_id` answers `assignment` at `epoch`; the epoch is the
        member's at once (as the coordinator's is before its answer arrives)."""
        member = self.members[member_id]
        member.pending.append((epoch, {topic: list(ps) for topic, ps in assignment.items()}))
        member.epoch = epoch

    def only_member(self) -> ScriptedMember:
        (member,) = self.members.values()
        return member

    def _everything(self, member: ScriptedMember) -> dict[str, list[int]]:
        return {
            topic: list(range(self.partition_counts[topic]))
            for topic in member.topics
            if topic in self.partition_counts
        }

    def _next_code(self, api_key: int) -> int:
        script = self.codes.get(api_key)
        return script.pop(0) if script else 0

    def __call__(self, received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            if self.drop_heartbeats:
                self.drop_heartbeats -= 1
                return None
            return self._heartbeat(received.body)
        if received.api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            return self._describe(received.body)
        if received.api_key == ApiKey.OFFSET_COMMIT:
            return self._commit(received.body)
        if received.api_key == ApiKey.OFFSET_FETCH:
            return self._fetch(received.body)
        return None

    def _topics_body(self, assignment: Mapping[str, list[int]]) -> list[dict[str, Any]]:
        return [
            {
                "topic_id": self.topic_ids[topic],
                "topic_name": "" if topic in self.nameless else topic,
                "partitions": partitions,
            }
            for topic, partitions in sorted(assignment.items())
        ]

    def _heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        code = self._next_code(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        if code:
            return {"error_code": code, "error_message": f"scripted {ErrorCode(code).name}"}
        member_id, epoch = body["member_id"], body["member_epoch"]
        if epoch in (-1, -2):
            self.members.pop(member_id, None)
            return {"error_code": 0, "member_id": member_id, "member_epoch": epoch}
        answer: dict[str, Any] = {
            "error_code": 0,
            "member_id": member_id,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
        }
        if epoch == 0:
            member = ScriptedMember(member_id, instance_id=body.get("instance_id"))
            member.topics = list(body.get("subscribed_topic_names") or [])
            member.regex = body.get("subscribed_topic_regex")
            member.epoch = 1 + max((m.epoch for m in self.members.values()), default=0)
            self.members[member_id] = member
            member.assignment = self.on_join(member)
            answer["member_epoch"] = member.epoch
            answer["assignment"] = {"topic_partitions": self._topics_body(member.assignment)}
            return answer
        member = self.members.get(member_id)
        if member is None:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        if body.get("subscribed_topic_names") is not None:
            member.topics = list(body["subscribed_topic_names"])
        if body.get("subscribed_topic_regex") is not None:
            member.regex = body["subscribed_topic_regex"] or None
        if member.pending:
            epoch, member.assignment = member.pending.popleft()
            answer["member_epoch"] = epoch
            answer["assignment"] = {"topic_partitions": self._topics_body(member.assignment)}
            return answer
        answer["member_epoch"] = member.epoch
        return answer

    def _member_check(self, member_id: str, epoch: int) -> int:
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch > member.epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if epoch < member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def _commit(self, body: dict[str, Any]) -> dict[str, Any]:
        code = self._next_code(ApiKey.OFFSET_COMMIT) or self._member_check(
            body["member_id"], body["generation_id_or_member_epoch"]
        )
        topics = []
        for topic in body["topics"]:
            partitions = []
            for partition in topic["partitions"]:
                if code == ErrorCode.NONE:
                    key = (topic["name"], partition["partition_index"])
                    self.commits[key] = partition["committed_offset"]
                partitions.append(
                    {"partition_index": partition["partition_index"], "error_code": code}
                )
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"topics": topics}

    def _fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        groups = []
        for group in body["groups"]:
            topics = [
                {
                    "name": topic["name"],
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": self.commits.get((topic["name"], index), -1),
                            "metadata": "",
                            "error_code": 0,
                        }
                        for index in topic["partition_indexes"]
                    ],
                }
                for topic in group["topics"] or []
            ]
            groups.append({"group_id": group["group_id"], "topics": topics, "error_code": 0})
        return {"groups": groups}

    def _describe(self, body: dict[str, Any]) -> dict[str, Any]:
        groups = []
        for group_id in body["group_ids"]:
            if group_id != self.group_id:
                groups.append({"group_id": group_id, "error_code": ErrorCode.GROUP_ID_NOT_FOUND})
                continue
            members = [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "member_epoch": m.epoch,
                    "subscribed_topic_names": m.topics,
                    "subscribed_topic_regex": m.regex,
                    "assignment": {"topic_partitions": self._topics_body(m.assignment)},
                    "target_assignment": {"topic_partitions": self._topics_body(m.assignment)},
                    "member_type": 1,
                }
                for m in self.members.values()
            ]
            epoch = max((m.epoch for m in self.members.values()), default=0)
            groups.append(
                {
                    "group_id": group_id,
                    "error_code": 0,
                    "group_state": "Stable" if members else "Empty",
                    "group_epoch": epoch,
                    "assignment_epoch": epoch,
                    "assignor_name": "uniform",
                    "members": members,
                }
            )
        return {"groups": groups}
