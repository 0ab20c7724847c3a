"""The consumer group scenario's pieces without a broker: Kafka's ConsumerGroupHeartbeat and
ConsumerGroupDescribe as the bench encodes and decodes them, the tracker of who owns what, the
proof of a join, and simulated members driven against a small coordinator of the test's own
that revokes before it assigns."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from io import BytesIO
from typing import Any

import pytest
from aiokafka.protocol.types import CompactArray, CompactString, Int8, Int16, Int32, TaggedFields

from coordinator_server.tools.bench.assignor_time import measure as measure_assignor
from coordinator_server.tools.bench.consumer_groups import consumer_settings, serve_args
from coordinator_server.tools.bench.consumer_members import (
    FENCED_MEMBER_EPOCH,
    Answer,
    Beat,
    BenchError,
    GroupSnapshot,
    GroupTracker,
    MemberDriver,
    SimMember,
    TopicPartition,
    join_proof,
)
from coordinator_server.tools.bench.kafka_consumer_protocol import (
    ConsumerGroupDescribe,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse_v1,
)
from coordinator_server.tools.bench.loops import LoopRun

TOPIC_ID = bytes(range(16))


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def test_a_heartbeat_encodes_as_kafkas_schema_at_each_version() -> None:
    owned = [(TOPIC_ID, [3, 1])]
    heartbeat = ConsumerGroupHeartbeat(
        "g", "m-1", 4, rebalance_timeout_ms=60_000, subscribed_topic_names=["t"],
        topic_partitions=owned,
    )  # fmt: skip
    v1 = heartbeat.prepare({68: (0, 1)})
    v0 = heartbeat.prepare({68: (0, 0)})
    assert (v1.API_VERSION, v0.API_VERSION) == (1, 0)
    head = (
        _uvarint(2) + b"g" + _uvarint(4) + b"m-1" + Int32.encode(4)
        + b"\x00\x00"  # no instance id, no rack
        + Int32.encode(60_000)
        + _uvarint(2) + _uvarint(2) + b"t"
    )  # fmt: skip
    tail = (
        b"\x00"  # no server assignor
        + _uvarint(2) + TOPIC_ID + _uvarint(3) + Int32.encode(3) + Int32.encode(1) + b"\x00"
        + b"\x00"
    )  # fmt: skip
    # Version 1 has the regular expression (null) after the topic names.
    assert v1.encode() == head + b"\x00" + tail
    assert v0.encode() == head + tail
    # Unchanged fields are null: a steady heartbeat is the group, the member and its epoch.
    steady = ConsumerGroupHeartbeat("g", "m-1", 4).prepare({68: (0, 1)}).encode()
    assert steady.endswith(Int32.encode(-1) + b"\x00" + b"\x00\x00\x00" + b"\x00")
    describe = ConsumerGroupDescribe(["g"]).prepare({69: (0, 1)})
    assert (describe.API_VERSION, describe.encode()) == (
        0,
        _uvarint(2) + _uvarint(2) + b"g\x00\x00",
    )


@pytest.mark.parametrize("assigned", [None, [1, 5]])
def test_a_heartbeat_answer_with_or_without_an_assignment_decodes(
    assigned: list[int] | None,
) -> None:
    body = (
        Int32.encode(0) + Int16.encode(0) + CompactString("utf-8").encode(None)
        + CompactString("utf-8").encode("m-1") + Int32.encode(7) + Int32.encode(1000)
    )  # fmt: skip
    if assigned is None:
        body += Int8.encode(-1)
    else:
        # Kafka writes a nullable struct as 1 and the struct.
        body += Int8.encode(1) + _uvarint(2) + TOPIC_ID
        body += CompactArray(Int32).encode(assigned) + TaggedFields.encode({})
        body += TaggedFields.encode({})
    body += TaggedFields.encode({})
    answer = ConsumerGroupHeartbeatResponse_v1.decode(BytesIO(body))
    assert (answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == ("m-1", 7, 1000)
    if assigned is None:
        assert answer.assignment is None
    else:
        topic_partitions, _ = answer.assignment
        assert [(t, p) for t, p, _ in topic_partitions] == [(TOPIC_ID, assigned)]


def _member(index: int, epoch: int = 0, owned: set[int] | None = None) -> SimMember:
    return SimMember(index, f"m-{index}", epoch, frozenset((TOPIC_ID, p) for p in owned or ()))


def _owned(*partitions: int) -> frozenset[TopicPartition]:
    return frozenset((TOPIC_ID, p) for p in partitions)


def test_the_tracker_settles_on_one_epoch_one_owner_each_and_balanced_shares() -> None:
    tracker = GroupTracker(partitions=4)
    a, b = _member(0), _member(1)
    tracker.add(a)
    tracker.add(b)
    assert not tracker.settled()
    tracker.update(a, 1, _owned(0, 1, 2, 3))
    a.epoch, a.owned = 1, _owned(0, 1, 2, 3)
    tracker.update(b, 1, frozenset())
    b.epoch = 1
    # One epoch, every partition owned, but not balanced.
    assert not tracker.settled()
    tracker.update(a, 2, _owned(0, 1))
    a.epoch, a.owned = 2, _owned(0, 1)
    assert not tracker.settled()  # partitions 2 and 3 have no owner, epochs differ
    tracker.update(b, 2, _owned(2, 3))
    b.epoch, b.owned = 2, _owned(2, 3)
    assert tracker.settled() and tracker.epoch() == 2
    # A partition owned twice is never settled, and is remembered.
    tracker.update(b, 2, _owned(1, 2, 3))
    assert not tracker.settled() and tracker.most_doubled == 1


def test_the_proof_of_a_join_counts_what_went_elsewhere_and_who_stopped() -> None:
    newcomer = _member(9, 2, {4})
    clean = _member(0, 2, {0})
    clean.lost = {(TOPIC_ID, 4)}
    elsewhere = _member(1, 2, {1})
    elsewhere.lost = {(TOPIC_ID, 5)}
    stopped = _member(2, 2, {2})
    stopped.lost = {(TOPIC_ID, 2)}
    proof = join_proof([clean, elsewhere, stopped], newcomer)
    assert (proof.moved, proof.revoking, proof.lost_elsewhere, proof.interrupted) == (1, 3, 2, 1)


class RevokingCoordinator:
    """One topic's partitions shared round robin among the members in the order they
    joined, each new target at a new epoch. A member told to give partitions up keeps its
    epoch until a heartbeat says it no longer owns them, and until then nobody else is given
    them (the consumer group protocol's rule, in miniature)."""

    name = "fake"
    member_made_ids = True

    def __init__(self, partitions: int, interval_ms: int, fence_once: str | None = None) -> None:
        self.partitions = partitions
        self.interval_ms = interval_ms
        self.epoch = 0
        self.members: list[str] = []
        self.epochs: dict[str, int] = {}
        # What each member was told it owns, and what it must still give up.
        self.assigned: dict[str, set[int]] = {}
        self.revoking: dict[str, set[int]] = {}
        self.target: dict[str, set[int]] = {}
        self.beats: list[Beat] = []
        # Members whose last answer changed their partitions, since when; and how long each
        # took to say what it owns then.
        self.unacknowledged: dict[str, float] = {}
        self.acknowledged_after: list[float] = []
        self.fence_once = fence_once
        self.watched: dict[str, int] = {}
        self.others: list[int] = []

    def _retarget(self) -> None:
        self.epoch += 1
        self.target = {m: set() for m in self.members}
        for p in range(self.partitions):
            self.target[self.members[p % len(self.members)]].add(p)

    def _forget(self, member: str) -> None:
        self.members.remove(member)
        self.assigned.pop(member, None)
        self.revoking.pop(member, None)
        self.epochs.pop(member, None)
        self._retarget()

    async def heartbeat(self, index: int, beat: Beat) -> Answer:
        await asyncio.sleep(0)
        self.beats.append(beat)
        member = beat.member_id
        now = asyncio.get_running_loop().time()
        told = self.unacknowledged.pop(member, None)
        if told is not None:
            assert beat.owned is not None, beat
            self.acknowledged_after.append(now - told)
        before = set(self.assigned.get(member, set()))
        answer = self._answer(beat)
        if answer.assignment is not None and {p for _, p in answer.assignment} != before:
            self.unacknowledged[member] = now
        return answer

    def _answer(self, beat: Beat) -> Answer:
        member = beat.member_id
        if beat.member_epoch == -1:
            self._forget(member)
            return Answer(0, member, -1, self.interval_ms, None)
        if member == self.fence_once and beat.member_epoch > 0:
            self.fence_once = None
            self._forget(member)
            return Answer(FENCED_MEMBER_EPOCH, None, -1, 0, None)
        if beat.member_epoch == 0:
            self.members.append(member)
            self.assigned[member] = set()
            self.revoking[member] = set()
            self._retarget()
        assigned, revoking = self.assigned[member], self.revoking[member]
        if beat.owned is not None and not revoking & {p for _, p in beat.owned}:
            revoking.clear()
        epoch = self.epochs.get(member, 0)
        if assigned - self.target[member]:
            revoking |= assigned - self.target[member]
            assigned &= self.target[member]
            return Answer(0, member, epoch, self.interval_ms, _owned(*assigned))
        if revoking:
            return Answer(0, member, epoch, self.interval_ms, None)
        taken = set().union(
            *(self.assigned[m] | self.revoking[m] for m in self.members if m != member)
        )
        given = assigned | {p for p in self.target[member] if p not in taken}
        self.epochs[member] = self.epoch
        changed = given != assigned
        assigned |= given
        return Answer(0, member, self.epoch, self.interval_ms, _owned(*given) if changed else None)

    async def describe(self, group_id: str) -> GroupSnapshot:
        settled = all(
            self.assigned[m] == self.target[m] and not self.revoking[m] for m in self.members
        )
        return GroupSnapshot(
            0, "Stable" if settled else "Reconciling", self.epoch, self.epoch,
            {m: self.epochs.get(m, 0) for m in self.members},
        )  # fmt: skip

    async def heartbeat_loop(self, *args: Any) -> LoopRun:
        raise NotImplementedError

    async def close(self) -> None:
        pass


async def test_members_settle_acknowledging_at_once_and_one_more_takes_only_what_moves() -> None:
    side = RevokingCoordinator(partitions=6, interval_ms=50)
    driver = MemberDriver(side, "g", "t", 6, heartbeat_interval_ms=50, rebalance_timeout_ms=1000)
    members = [driver.add(i) for i in range(3)]
    driver.start(members)
    try:
        await driver.settle(timeout_s=10)
        assert sorted(len(m.owned) for m in members) == [2, 2, 2]
        # A member told of new partitions said what it owns in its very next heartbeat, at
        # once rather than an interval later.
        assert side.acknowledged_after
        assert max(side.acknowledged_after) < 0.025
        steady = [b for b in side.beats if b.member_epoch > 0 and b.owned is None]
        assert steady, "between changes a member sends its epoch alone"
        for member in members:
            member.lost.clear()
        newcomer = driver.add(3)
        driver.start([newcomer])
        await driver.settle(timeout_s=10, extra=lambda: bool(newcomer.owned))
    finally:
        await driver.leave()
    # Round robin moves more than the newcomer takes: the proof says so.
    proof = join_proof(members, newcomer)
    assert proof.moved == len(newcomer.owned) > 0
    assert proof.lost_elsewhere > 0
    assert driver.tracker.most_doubled == 0
    assert side.members == []


async def test_a_fenced_member_drops_its_partitions_and_joins_again() -> None:
    side = RevokingCoordinator(partitions=4, interval_ms=20, fence_once="m-0")
    driver = MemberDriver(side, "g", "t", 4, heartbeat_interval_ms=20, rebalance_timeout_ms=1000)
    first = driver.add(0)
    first.member_id = "m-0"
    second = driver.add(1)
    driver.start([first, second])
    try:
        await driver.settle(timeout_s=10)
    finally:
        await driver.leave()
    assert driver.errors[FENCED_MEMBER_EPOCH] == 1
    assert first.owned and second.owned


async def test_an_unexpected_error_ends_the_run() -> None:
    class Refusing(RevokingCoordinator):
        async def heartbeat(self, index: int, beat: Beat) -> Answer:
            return Answer(42, None, 0, 0, None)

    driver = MemberDriver(Refusing(2, 10), "g", "t", 2, 10, 1000)
    driver.start([driver.add(0)])
    with pytest.raises(BenchError, match="error 42"):
        await driver.settle(timeout_s=5)
    with pytest.raises(BenchError):
        await driver.stop()


def test_both_sides_get_the_same_settings_within_kafkas_bounds() -> None:
    class Args:
        group_consumer_session_timeout_ms = 10_000
        group_consumer_heartbeat_interval_ms = 200
        group_consumer_assignment_interval_ms = 20_000

    settings = consumer_settings(Args())  # type: ignore[arg-type]
    assert settings["group.consumer.min.session.timeout.ms"] == 10_000
    assert settings["group.consumer.min.heartbeat.interval.ms"] == 200
    assert settings["group.consumer.max.assignment.interval.ms"] == 20_000
    args = serve_args(settings)
    assert args[args.index("--group-consumer-heartbeat-interval-ms") + 1] == "200"
    assert "--group-consumer-max-assignment-interval-ms" not in args


def test_the_assignor_rows_quote_kafka_only_on_its_group() -> None:
    rows = measure_assignor(members=20, topics=10, partitions=100, rounds=1)
    assert [(r["target"], r["subscriptions"]) for r in rows] == [
        ("ours", "homogeneous"),
        ("ours", "heterogeneous"),
        ("ours", "overlapping"),
        ("kafka (KIP-1263)", "heterogeneous"),
    ]
    assert all(r["fresh_ms"] > 0 and r["sticky_ms"] > 0 for r in rows[:3])
    assert "KIP-1263" in rows[3]["source"]


def test_the_scenario_refuses_a_group_the_newcomer_would_get_nothing_of() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "bench", "consumer-groups",
            "--members", "10", "--consumer-partitions", "10", "--no-pin",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    assert "--consumer-partitions must exceed --members" in completed.stderr
