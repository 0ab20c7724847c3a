"""Simulated members of a consumer group under Kafka's consumer group protocol (KIP-848),
and what the bench learns from their answers.

A member is its id, its epoch and the partitions it owns, driven as Kafka's consumer drives
its own: it joins (epoch 0, its subscription), then heartbeats every heartbeat interval (the
one the coordinator answers) with its epoch alone; when an answer changes its assignment it
gives up the partitions no longer named and takes the new ones at once, and acknowledges in a
heartbeat sent right away with every partition it now owns. A member fenced or forgotten by the
coordinator drops its partitions and joins again, as Kafka's consumer does. Many members share
a side's connections: a member is a small task, not a client.

`GroupTracker` keeps, answer by answer, who owns what: how many partitions have an owner, how
many have two (never, under a correct coordinator: a member gives a partition up before the
coordinator gives it to another), every member's epoch and partition count. The group is
settled in the members' eyes when every partition has one owner, every member has the same
epoch and a balanced share (the uniform assignor's: the partitions over the members, give or
take one). `MemberDriver.settle` then asks the coordinator (ConsumerGroupDescribe) to confirm:
state Stable, each member at that epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from coordinator_server.tools.bench.loops import LoopRun
from coordinator_server.tools.bench.scenarios import BenchError

TopicPartition = tuple[bytes, int]
"""(topic id, partition)."""

UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
# Answered while the coordinator is not ready for the group: asked again after a pause.
RETRIABLE = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
# Answered to a member the coordinator no longer knows at its epoch: it joins again.
REJOIN = frozenset({UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH})
RETRY_S = 0.1
# A heartbeat unanswered this long ends the run (the coordinator is stuck or gone).
REQUEST_TIMEOUT_S = 30.0
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True)
class Beat:
    """One heartbeat as a member sends it. `subscribed_topic_names` and `owned` are None when
    unchanged since the member's last heartbeat (Kafka's rule)."""

    group_id: str
    member_id: str
    member_epoch: int
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    owned: frozenset[TopicPartition] | None = None


@dataclass(frozen=True)
class Answer:
    error_code: int
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    # None: the assignment has not changed since the last answer.
    assignment: frozenset[TopicPartition] | None


@dataclass(frozen=True)
class GroupSnapshot:
    """What ConsumerGroupDescribe says of the group."""

    error_code: int
    state: str
    group_epoch: int
    assignment_epoch: int
    member_epochs: dict[str, int]


class ConsumerSide(Protocol):
    """A coordinator the members drive: ours over the wire contract, or a Kafka broker's."""

    name: str
    # Processes whose CPU time the measured loop reports, and the other started processes.
    watched: dict[str, int]
    others: list[int]
    # Whether a member makes up its own id (KIP-1082), or takes the coordinator's.
    member_made_ids: bool

    async def heartbeat(self, index: int, beat: Beat) -> Answer: ...

    async def describe(self, group_id: str) -> GroupSnapshot: ...

    async def heartbeat_loop(
        self,
        group_id: str,
        members: list[tuple[str, int]],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        """Steady heartbeats of `members` ((member id, epoch)), `inflight` at a time."""
        ...

    async def close(self) -> None: ...


@dataclass(eq=False)
class SimMember:
    index: int
    member_id: str
    epoch: int = JOIN_EPOCH
    owned: frozenset[TopicPartition] = frozenset()
    # The owned partitions changed since the last heartbeat sent: the next one names them,
    # and goes at once.
    must_acknowledge: bool = False
    # The partitions it gave up since `lost` was last cleared, and when its owned partitions
    # last changed.
    lost: set[TopicPartition] = field(default_factory=set)
    changed_at: float = 0.0
    heartbeats: int = 0
    # The interval the coordinator's last answer gave this member (0: the configured one),
    # which it keeps to, as Kafka's consumer does: a coordinator may give each member its own.
    interval_ms: int = 0

    def beat(self, group_id: str, topic: str, rebalance_timeout_ms: int) -> Beat:
        if self.epoch == JOIN_EPOCH:
            return Beat(
                group_id,
                self.member_id,
                JOIN_EPOCH,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=[topic],
                owned=self.owned,
            )
        return Beat(
            group_id,
            self.member_id,
            self.epoch,
            owned=self.owned if self.must_acknowledge else None,
        )


def new_member_id(member_made: bool) -> str:
    """A member id the member makes up (KIP-1082), or none for the coordinator to give."""
    return str(uuid.uuid4()) if member_made else ""


class GroupTracker:
    """Who owns what, as the members' answers say (the module's docstring says what for)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._owners: Counter[TopicPartition] = Counter()
        self._epochs: Counter[int] = Counter()
        self._counts: Counter[int] = Counter()
        self._members: dict[int, tuple[int, int]] = {}
        self.covered = 0
        self.doubled = 0
        # The most partitions owned by two members at once, ever: 0 under a correct
        # coordinator.
        self.most_doubled = 0

    @property
    def members(self) -> int:
        return len(self._members)

    def add(self, member: SimMember) -> None:
        self._members[member.index] = (member.epoch, len(member.owned))
        self._epochs[member.epoch] += 1
        self._counts[len(member.owned)] += 1
        self._own(member.owned, 1)

    def remove(self, member: SimMember) -> None:
        epoch, count = self._members.pop(member.index)
        self._drop(self._epochs, epoch)
        self._drop(self._counts, count)
        self._own(member.owned, -1)

    def update(self, member: SimMember, epoch: int, owned: frozenset[TopicPartition]) -> None:
        """Record `member`'s new epoch and partitions (the member is updated by the caller)."""
        old_epoch, old_count = self._members[member.index]
        if old_epoch != epoch:
            self._drop(self._epochs, old_epoch)
            self._epochs[epoch] += 1
        if owned is not member.owned:
            self._own(member.owned - owned, -1)
            self._own(owned - member.owned, 1)
            self._drop(self._counts, old_count)
            self._counts[len(owned)] += 1
        self._members[member.index] = (epoch, len(owned))

    def _own(self, partitions: Iterable[TopicPartition], step: int) -> None:
        owners = self._owners
        for partition in partitions:
            before = owners[partition]
            after = before + step
            if after:
                owners[partition] = after
            else:
                del owners[partition]
            if before == 0 and after == 1:
                self.covered += 1
            elif before == 1 and after == 0:
                self.covered -= 1
            elif before == 1 and after == 2:
                self.doubled += 1
            elif before == 2 and after == 1:
                self.doubled -= 1
        self.most_doubled = max(self.most_doubled, self.doubled)

    @staticmethod
    def _drop(counter: Counter[int], key: int) -> None:
        counter[key] -= 1
        if not counter[key]:
            del counter[key]

    def epoch(self) -> int | None:
        """The members' epoch when they all have the same one."""
        if len(self._epochs) != 1:
            return None
        (epoch,) = self._epochs
        return epoch

    def settled(self) -> bool:
        members = len(self._members)
        if not members or self.covered != self.partitions or self.doubled:
            return False
        epoch = self.epoch()
        if epoch is None or epoch <= 0:
            return False
        least, extra = divmod(self.partitions, members)
        return all(count in (least, least + bool(extra)) for count in self._counts)


class MemberDriver:
    """Runs the members of one group against one side, each at the pace the module's
    docstring says, and tells when the group has settled."""

    def __init__(
        self,
        side: ConsumerSide,
        group_id: str,
        topic: str,
        partitions: int,
        heartbeat_interval_ms: int,
        rebalance_timeout_ms: int,
    ) -> None:
        self.side = side
        self.group_id = group_id
        self.topic = topic
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.tracker = GroupTracker(partitions)
        self.members: list[SimMember] = []
        self.errors: Counter[int] = Counter()
        # When the tracker last found the group settled (None: not settled now).
        self.settled_at: float | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._stopping = False
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()

    def add(self, index: int) -> SimMember:
        member = SimMember(index, new_member_id(self.side.member_made_ids))
        self.members.append(member)
        self.tracker.add(member)
        self._note_change()
        return member

    def start(self, members: Iterable[SimMember], spread_s: float = 0.0) -> None:
        """The members start heartbeating: at once, or their first heartbeats spread evenly
        over `spread_s` (members that have been in a group a while are not in step)."""
        self._stopping = False
        starting = list(members)
        for i, member in enumerate(starting):
            delay = spread_s * i / len(starting)
            self._tasks[member.index] = asyncio.ensure_future(self._run(member, delay))

    async def stop(self, raise_failures: bool = True) -> None:
        """Stop heartbeating once each member's heartbeat in flight is answered (or after
        REQUEST_TIMEOUT_S, when the coordinator answers no more)."""
        self._stopping = True
        self._wake.set()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._wake = asyncio.Event()
        if raise_failures:
            _raise_failure(tasks)

    async def leave(self) -> None:
        """Every member leaves (epoch -1), so that no session of theirs expires later, while
        the other side is measured on the same core. Never raises: it also ends a run that
        failed."""
        await self.stop(raise_failures=False)
        beats = [
            asyncio.ensure_future(
                self.side.heartbeat(m.index, Beat(self.group_id, m.member_id, LEAVE_EPOCH))
            )
            for m in self.members
            if m.member_id
        ]
        if beats:
            _, late = await asyncio.wait(beats, timeout=REQUEST_TIMEOUT_S)
            for beat in late:
                beat.cancel()
            await asyncio.gather(*beats, return_exceptions=True)

    async def _run(self, member: SimMember, delay_s: float) -> None:
        try:
            await self._heartbeats(member, delay_s)
        finally:
            # Whoever waits on the group hears of a member that stopped (with an error).
            self._changed.set()

    async def _heartbeats(self, member: SimMember, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        if delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_s)
        while not self._stopping:
            beat = member.beat(self.group_id, self.topic, self.rebalance_timeout_ms)
            sent = loop.time()
            try:
                answer = await asyncio.wait_for(
                    self.side.heartbeat(member.index, beat), REQUEST_TIMEOUT_S
                )
            except TimeoutError:
                raise BenchError(
                    f"{self.side.name}: member {member.index} of {self.group_id}: no answer "
                    f"to a heartbeat in {REQUEST_TIMEOUT_S:g} s"
                ) from None
            member.heartbeats += 1
            pause = self._apply(member, beat, answer)
            if member.must_acknowledge and not pause:
                continue
            interval_ms = member.interval_ms or self.heartbeat_interval_ms
            wait = pause or sent + interval_ms / 1000 - loop.time()
            if wait > 0 and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)

    def _apply(self, member: SimMember, beat: Beat, answer: Answer) -> float:
        """Take an answer in; seconds to wait before the next heartbeat when the coordinator
        asks for a pause (0: the usual interval)."""
        code = answer.error_code
        if code in RETRIABLE:
            self.errors[code] += 1
            return RETRY_S
        if code in REJOIN:
            self.errors[code] += 1
            self._set(member, JOIN_EPOCH, frozenset())
            member.must_acknowledge = False
            if not self.side.member_made_ids:
                member.member_id = ""
            return 0.0
        if code:
            raise BenchError(
                f"{self.side.name}: member {member.index} of {self.group_id}: "
                f"ConsumerGroupHeartbeat answered error {code}"
            )
        if beat.owned is not None:
            member.must_acknowledge = False
        if answer.member_id:
            member.member_id = answer.member_id
        if answer.heartbeat_interval_ms > 0:
            member.interval_ms = answer.heartbeat_interval_ms
        owned = member.owned if answer.assignment is None else answer.assignment
        if owned != member.owned:
            member.must_acknowledge = True
        self._set(member, answer.member_epoch, owned)
        return 0.0

    def _set(self, member: SimMember, epoch: int, owned: frozenset[TopicPartition]) -> None:
        if owned == member.owned:
            owned = member.owned
        else:
            member.lost.update(member.owned - owned)
            member.changed_at = time.perf_counter()
        if epoch == member.epoch and owned is member.owned:
            return
        self.tracker.update(member, epoch, owned)
        member.epoch = epoch
        member.owned = owned
        self._note_change()

    def _note_change(self) -> None:
        settled = self.tracker.settled()
        if settled and self.settled_at is None:
            self.settled_at = time.perf_counter()
        elif not settled:
            self.settled_at = None
        self._changed.set()

    async def _until(self, condition: Callable[[], bool], deadline: float, what: str) -> None:
        while not condition():
            _raise_failure(self._tasks.values())
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise BenchError(f"{self.side.name}: {self.group_id} {what} in time")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 1.0))

    async def settle(self, timeout_s: float, extra: Callable[[], bool] = lambda: True) -> float:
        """Wait until the group has settled in the members' eyes (and `extra` holds) and the
        coordinator confirms it; when it first settled for good (perf_counter)."""
        deadline = time.perf_counter() + timeout_s
        while True:
            await self._until(
                lambda: self.settled_at is not None and extra(), deadline, "never settled"
            )
            at = self.settled_at
            view = await asyncio.wait_for(
                self.side.describe(self.group_id),
                max(0.0, deadline - time.perf_counter()) + REQUEST_TIMEOUT_S,
            )
            if self._confirmed(view) and self.settled_at == at:
                assert at is not None
                return at
            # Not yet as the coordinator sees it (a heartbeat in flight, a new target on its
            # way): the members go on, and the next change or interval asks again.
            self._changed.clear()
            pause = min(deadline - time.perf_counter(), self.heartbeat_interval_ms / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, pause))
            if time.perf_counter() > deadline:
                raise BenchError(
                    f"{self.side.name}: {self.group_id} settled as its members see it but the "
                    f"coordinator describes it as {view.state!r} (group epoch "
                    f"{view.group_epoch}, assignment epoch {view.assignment_epoch})"
                )

    def _confirmed(self, view: GroupSnapshot) -> bool:
        epoch = self.tracker.epoch()
        return (
            view.error_code == 0
            and view.state.lower() == "stable"
            and view.assignment_epoch == epoch
            and len(view.member_epochs) == len(self.members)
            and all(e == epoch for e in view.member_epochs.values())
        )


def _raise_failure(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Raise what a finished member task raised (a connection lost, an unexpected error)."""
    for task in tasks:
        if task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error


@dataclass(frozen=True)
class JoinProof:
    """What the members already in the group saw while one more joined."""

    # Partitions the newcomer holds once settled.
    moved: int
    # Members that gave up a partition.
    revoking: int
    # Partitions given up by a member and not given to the newcomer: 0 when nothing moved
    # between the others.
    lost_elsewhere: int
    # Members that gave up a partition they hold again at the end: their consumption of it
    # stopped although it stayed theirs.
    interrupted: int


def join_proof(others: list[SimMember], newcomer: SimMember) -> JoinProof:
    moved = newcomer.owned
    return JoinProof(
        moved=len(moved),
        revoking=sum(1 for m in others if m.lost),
        lost_elsewhere=sum(len(m.lost - moved) for m in others),
        interrupted=sum(1 for m in others if m.lost & m.owned),
    )
