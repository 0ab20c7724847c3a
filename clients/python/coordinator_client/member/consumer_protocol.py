"""`ConsumerMembership`: a member's side of Kafka's consumer group protocol (KIP-848), what
`GroupMember(group_protocol="consumer")` runs (Kafka's ConsumerMembershipManager,
AbstractMembershipManager and ConsumerHeartbeatRequestManager).

Theory of operation. The coordinator computes every member's assignment; a member only
reconciles with it, through one API, ConsumerGroupHeartbeat. Two tasks:

- The heartbeat task sends it: to join (epoch 0 and the member id the member generated, with
  every field), then every `heartbeat_interval_ms` the coordinator answers. After the first,
  a request carries only the fields that changed since the one before (Kafka's rule: a null
  field, or -1 for the rebalance timeout, is "unchanged"); every field again after an error.
  A request goes out at once, not at the interval, to join and to acknowledge a reconciled
  assignment. Each answer brings the member epoch, the interval, and a new assignment when
  there is one (the whole assignment, topics by id and name).
- The reconciliation task runs the rebalance listener's callbacks, one operation at a time.
  For a new assignment: `on_partitions_revoked` with the partitions no longer assigned (a
  consumer commits them there first), then the acknowledgement (the next heartbeat, at once,
  owns the new assignment), then `on_partitions_assigned` with the partitions added (called
  even when none are, as Kafka's consumer does). The partitions kept are never given up: no
  stop-the-world.

The member id is generated once (KIP-1082) and kept for the member's life, rejoins included.

Errors, as Kafka's consumer reads them: FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID fence the
member; its partitions are lost (`on_partitions_lost`) and it joins again with epoch 0 and
the same member id. Coordinator moves and loads are retried by the client within a
heartbeat's deadline, then after the heartbeat's back-off (NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE at once, the coordinator looked up again). Every other error ends
the membership (GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST,
UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
UNSUPPORTED_VERSION from a coordinator without this protocol, anything unexpected): the
partitions are lost and the error is reported.

A listener's exception is logged and the reconciliation carries on, as the classic protocol's
member here does (Kafka's consumer hands it to the application and leaves the assignment
unacknowledged until the callback succeeds).

Leaving (`close`): the partitions are revoked (the consumer commits), then one heartbeat with
epoch -1 leaves; a static member's says -2, so that its partitions wait for it through the
session timeout.

Commits carry the member epoch and the member id. STALE_MEMBER_EPOCH (the epoch moved on
while the commit was out) is retried with the member's newest epoch while the member still
owns the partitions, as Kafka's consumer retries its commit before a revocation; the other
membership errors make it a `CommitFailedError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import logging
import ssl
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_client.errors import CommitFailedError
from coordinator_client.rpc.apis import RETRY_REDISCOVER
from coordinator_client.rpc.backoff import ExponentialBackoff
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.errors import ClientClosedError, ClientError, OffsetCommitError
from coordinator_protocol.consumer_groups import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
)
from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code

__all__ = ["ConsumerMemberState", "ConsumerMembership", "generate_member_id"]

log = logging.getLogger(__name__)

PartitionsHandler = Callable[[frozenset[TopicPartition]], Awaitable[None]]
"""Runs one of the listener's callbacks (the member logs what it raises)."""

TopicAssignment = Mapping[bytes, tuple[str, frozenset[int]]]
"""Partitions by topic id, each with its topic's name."""

# Errors that fence the member: its partitions are lost and it joins again.
_FENCING_CODES: Final = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors a commit gets when the member no longer owns what it commits as.
_COMMIT_FENCED_CODES: Final = frozenset(
    {
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)
# The server refused to authenticate the connection: no retry mends it.
_AUTHENTICATION_CODES: Final = frozenset(
    {
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        ErrorCode.ILLEGAL_SASL_STATE,
    }
)
_LEAVE_TIMEOUT_MS: Final = 5000
_UNSUPPORTED_MESSAGE: Final = (
    "the coordinator does not serve the consumer group protocol (ConsumerGroupHeartbeat); "
    'use group_protocol="classic" until it does'
)


class ConsumerMemberState(enum.Enum):
    """Kafka's MemberState of the consumer group protocol (its consumer's side)."""

    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    FATAL = "FATAL"


_State = ConsumerMemberState
# States in which the member sends no heartbeat: it is not in the group, or it is sending
# its last one itself.
_SILENT: Final = frozenset({_State.UNSUBSCRIBED, _State.FENCED, _State.FATAL, _State.LEAVING})
# States whose heartbeat goes out at once rather than at the interval.
_URGENT: Final = frozenset({_State.JOINING, _State.ACKNOWLEDGING})
# States that take a new assignment from a heartbeat's answer.
_TAKES_ASSIGNMENTS: Final = frozenset(
    {_State.JOINING, _State.RECONCILING, _State.ACKNOWLEDGING, _State.STABLE}
)


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def generate_member_id() -> str:
    """A member id as Kafka's consumer makes one (KIP-1082): a random uuid in Kafka's text
    form (url-safe base64 of its 16 bytes, unpadded), drawn again if it starts with "-" as
    Kafka's `Uuid.randomUuid` does (such a string reads as a command-line option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class _LocalAssignment:
    """Kafka's LocalAssignment: an assignment and a local epoch bumped for each new one, so
    that each is acknowledged even when equal to one before it."""

    local_epoch: int
    topics: TopicAssignment

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(
            TopicPartition(name, partition)
            for name, partitions in self.topics.values()
            for partition in partitions
        )

    def request_topics(self) -> list[ConsumerGroupHeartbeatRequestTopicPartitions]:
        return [
            ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=topic_id, topic_name=name, partitions=sorted(partitions)
            )
            for topic_id, (name, partitions) in sorted(
                self.topics.items(), key=lambda item: (item[1][0], item[0])
            )
        ]


_NO_ASSIGNMENT: Final = _LocalAssignment(-1, {})


@dataclass
class _SentFields:
    """What the last heartbeat carried of the fields sent only when they change (Kafka's
    HeartbeatState.SentFields); forgotten after an error, so the next carries them all."""

    rebalance_timeout_ms: int = -1
    topic_names: frozenset[str] | None = None
    topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: _LocalAssignment | None = None


class _Outcome(enum.Enum):
    """What the heartbeat task does after a heartbeat."""

    DONE = "done"
    BACK_OFF = "back off"
    AT_ONCE = "at once"


class ConsumerMembership:
    """One member of a consumer-protocol group; see the module docstring.

    Args:
        client: the coordinator's client.
        group_id: the group.
        topics, topic_regex: the subscription, by topic names and by an RE2 regular
            expression the coordinator resolves (either or both).
        server_assignor: the assignor to ask the coordinator for (None: its default).
        group_instance_id: makes the member static.
        rack_id: the member's rack, for rack-aware assignors.
        rebalance_timeout_ms: how long the member may take to revoke partitions.
        heartbeat_interval_ms: the interval until the coordinator gives its own.
        on_revoked, on_assigned, on_lost: run the listener's callbacks.
        on_stable: told whether the member is stable (its assignment reconciled, the
            callbacks done), each time that may have changed.
        on_fatal: told the error that ended the membership, once.
        retry_backoff_ms: the first back-off after a failed heartbeat (doubling to 1 s).
    """

    def __init__(
        self,
        client: CoordinatorClient,
        group_id: str,
        *,
        topics: Iterable[str],
        topic_regex: str | None,
        server_assignor: str | None,
        group_instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        on_revoked: PartitionsHandler,
        on_assigned: PartitionsHandler,
        on_lost: PartitionsHandler,
        on_stable: Callable[[bool], None],
        on_fatal: Callable[[BaseException], None],
        retry_backoff_ms: int,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.member_id = generate_member_id()
        self.server_assignor = server_assignor
        self.group_instance_id = group_instance_id
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self._topics = frozenset(topics)
        self._topic_regex = topic_regex
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned
        self._on_lost = on_lost
        self._on_stable = on_stable
        self._on_fatal = on_fatal
        self._backoff = ExponentialBackoff(retry_backoff_ms, max(retry_backoff_ms, 1000))
        self._interval_s = heartbeat_interval_ms / 1000

        self._epoch = JOIN_GROUP_MEMBER_EPOCH
        self._state = _State.UNSUBSCRIBED
        # The last assignment received, and the last one reconciled (acknowledged).
        self._target = _NO_ASSIGNMENT
        self._current = _NO_ASSIGNMENT
        # The partitions the application holds: handed to on_partitions_assigned and not
        # yet revoked or lost.
        self._held: frozenset[TopicPartition] = frozenset()
        self._sent = _SentFields()
        self._reconciling = False
        self._closing = False
        # Fenced while revoking to leave: no heartbeat, no leave, no rejoin.
        self._fenced_while_leaving = False
        self._heartbeat_wake = asyncio.Event()
        self._work = asyncio.Event()
        # Set (and replaced) each time the epoch changes: a stale commit waits on it.
        self._epoch_changed = asyncio.Event()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._reconcile_task: asyncio.Task[None] | None = None

    # What the member knows

    @property
    def state(self) -> ConsumerMemberState:
        return self._state

    @property
    def member_epoch(self) -> int:
        """The epoch the coordinator gave: 0 while joining, -1 or -2 once left."""
        return self._epoch

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the application holds now."""
        return self._held

    @property
    def topics(self) -> frozenset[str]:
        return self._topics

    @property
    def topic_regex(self) -> str | None:
        return self._topic_regex

    def in_group(self) -> bool:
        """Whether the member has an epoch it can commit with."""
        return self._epoch > 0 and self._state not in _SILENT

    # Life cycle

    def start(self) -> None:
        self._transition_to_joining()
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat_loop(), name=f"consumer group heartbeat {self.group_id}"
        )
        self._reconcile_task = asyncio.create_task(
            self._reconcile_loop(), name=f"consumer group reconciliation {self.group_id}"
        )

    def subscribe(self, topics: Iterable[str], topic_regex: str | None) -> None:
        """Change the subscription; the next heartbeat carries it (the member stays in the
        group, and the coordinator answers with the assignment that follows from it)."""
        self._topics = frozenset(topics)
        self._topic_regex = topic_regex

    async def close(self, *, leave_group: bool | None = None) -> None:
        """Revoke the partitions (on_partitions_revoked, or on_partitions_lost for a member
        no longer in the group), then leave with one heartbeat: epoch -1, or -2 for a static
        member (which keeps its place through the session timeout). With `leave_group`
        False a dynamic member sends none, and with True a static member sends -1 (Kafka's
        close options REMAIN_IN_GROUP and LEAVE_GROUP)."""
        if self._closing:
            return
        self._closing = True
        if self._state in _TAKES_ASSIGNMENTS:
            self._transition(_State.PREPARE_LEAVING)
        self._work.set()
        if self._reconcile_task is not None:
            # It ends by itself once the partitions are given up (the heartbeats go on
            # meanwhile, so that a commit in on_partitions_revoked is accepted).
            await asyncio.shield(self._reconcile_task)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
        static = self.group_instance_id is not None
        if (
            self._state is _State.PREPARE_LEAVING
            and not self._fenced_while_leaving
            and (static or leave_group is not False)
            and not self.client.closed
        ):
            epoch = (
                LEAVE_GROUP_STATIC_MEMBER_EPOCH
                if static and not leave_group
                else LEAVE_GROUP_MEMBER_EPOCH
            )
            self._set_epoch(epoch)
            self._transition(_State.LEAVING)
            await self._send_leave(epoch)
        if self._state is not _State.FATAL:
            self._transition(_State.UNSUBSCRIBED)

    # Commits as this member

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` with this member's id and epoch.

        Raises:
            CommitFailedError: the member is not in the group, or the coordinator says it no
                longer is (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, FENCED_INSTANCE_ID), or the
                epoch stayed stale until the deadline or the partitions moved.
            OffsetCommitError: other per-partition errors.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout_ms or self.client.request_timeout_ms) / 1000
        pending = dict(offsets)
        while True:
            if not self.in_group():
                raise CommitFailedError(
                    f"group {self.group_id}: the member is not in the group (epoch "
                    f"{self._epoch}, {self._state.value}); the partitions will be reassigned"
                )
            if not pending:
                return
            epoch, epoch_changed = self._epoch, self._epoch_changed
            try:
                await self.client.commit_offsets(
                    self.group_id,
                    pending,
                    generation=epoch,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                    timeout_ms=max(1, int((deadline - loop.time()) * 1000)),
                )
                return
            except OffsetCommitError as e:
                codes = {error.code for error in e.errors.values()}
                if not codes & _COMMIT_FENCED_CODES:
                    raise
                if (
                    codes == {ErrorCode.STALE_MEMBER_EPOCH}
                    and self._held.issuperset(e.errors)
                    and await self._newer_epoch(epoch, epoch_changed, deadline - loop.time())
                ):
                    log.info(
                        "group %s: commit at stale epoch %d; again at epoch %d",
                        self.group_id,
                        epoch,
                        self._epoch,
                    )
                    pending = {tp: pending[tp] for tp in e.errors}
                    continue
                raise CommitFailedError(
                    f"group {self.group_id}: commit failed ({sorted(c.name for c in codes)}); "
                    "the member's partitions have moved or will be reassigned"
                ) from e

    async def _newer_epoch(self, epoch: int, changed: asyncio.Event, timeout_s: float) -> bool:
        """Whether the member's epoch moves past `epoch` within `timeout_s`: a commit the
        coordinator found stale left before the heartbeat answer with the newer epoch came
        back, and that answer comes within an interval."""
        if self._epoch == epoch and timeout_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout_s)
        return self._epoch != epoch

    async def fetch_offsets(
        self,
        partitions: Collection[TopicPartition],
        *,
        require_stable: bool,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of `partitions`, asked with the member id and epoch while
        the member is in the group (as Kafka's consumer asks)."""
        in_group = self.in_group()
        return await self.client.fetch_offsets(
            self.group_id,
            partitions,
            require_stable=require_stable,
            member_id=self.member_id if in_group else None,
            member_epoch=self._epoch if in_group else -1,
            timeout_ms=timeout_ms,
        )

    # State

    def _transition(self, state: ConsumerMemberState) -> None:
        if state is not self._state:
            log.info(
                "group %s: member %s (epoch %d): %s -> %s",
                self.group_id,
                self.member_id,
                self._epoch,
                self._state.value,
                state.value,
            )
            self._state = state
        self._heartbeat_wake.set()
        self._report_stable()

    def _report_stable(self) -> None:
        self._on_stable(
            self._state in (_State.STABLE, _State.ACKNOWLEDGING)
            and not self._reconciling
            and self._current is not _NO_ASSIGNMENT
            and self._current.local_epoch == self._target.local_epoch
        )

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._epoch = epoch
            changed, self._epoch_changed = self._epoch_changed, asyncio.Event()
            changed.set()

    def _reconciled(self) -> bool:
        return self._current.local_epoch == self._target.local_epoch

    def _transition_to_joining(self) -> None:
        self._set_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._target = _NO_ASSIGNMENT
        self._sent = _SentFields()
        self._transition(_State.JOINING)

    def _transition_to_fenced(self, reason: str) -> None:
        state = self._state
        if state is _State.PREPARE_LEAVING:
            # Kafka's consumer finishes giving up its partitions, and neither leaves nor
            # joins again: the group has already removed it.
            self._fenced_while_leaving = True
            self._set_epoch(JOIN_GROUP_MEMBER_EPOCH)
            return
        if state not in _TAKES_ASSIGNMENTS:
            return
        log.info("group %s: member %s was fenced: %s", self.group_id, self.member_id, reason)
        self._set_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._transition(_State.FENCED)
        self._work.set()

    def _fail(self, error: BaseException) -> None:
        if self._state is _State.FATAL:
            return
        self._transition(_State.FATAL)
        self._work.set()
        self._on_fatal(error)

    # The assignment

    def _assignment_received(self, assignment: ConsumerGroupHeartbeatResponseAssignment) -> None:
        # A topic already held keeps its name if an answer leaves it out (Kafka's consumer
        # keeps the names of its assigned topics for the same reason).
        names = {topic_id: name for topic_id, (name, _) in self._current.topics.items()}
        topics: dict[bytes, tuple[str, frozenset[int]]] = {}
        for topic in assignment.topic_partitions:
            name = topic.topic_name or names.get(topic.topic_id, "")
            _, partitions = topics.get(topic.topic_id, (name, frozenset()))
            topics[topic.topic_id] = (name, partitions | set(topic.partitions))
        if self._target is _NO_ASSIGNMENT or topics != self._target.topics:
            self._target = _LocalAssignment(self._target.local_epoch + 1, topics)
        if not self._reconciled():
            self._transition(_State.RECONCILING)
            self._work.set()
        elif self._state in (_State.RECONCILING, _State.JOINING):
            self._transition(_State.STABLE)

    async def _reconcile_loop(self) -> None:
        try:
            while True:
                state = self._state
                if state is _State.FENCED:
                    await self._release(self._on_lost)
                    if self._state is _State.FENCED:
                        if self._closing:
                            self._transition(_State.UNSUBSCRIBED)
                            return
                        self._transition_to_joining()
                    continue
                if state is _State.FATAL:
                    await self._release(self._on_lost)
                    return
                if state is _State.PREPARE_LEAVING:
                    lost = self._epoch <= 0 or self._fenced_while_leaving
                    await self._release(self._on_lost if lost else self._on_revoked)
                    return
                if state is _State.RECONCILING and not self._reconciled():
                    await self._reconcile()
                    continue
                if self._closing:
                    return
                self._work.clear()
                await self._work.wait()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("group %s: the reconciliation failed", self.group_id)
            self._fail(e)

    async def _release(self, handler: PartitionsHandler) -> None:
        """Give up every partition held (the callback sees them still held, so a consumer
        can commit them), and forget the assignment."""
        if self._held:
            await handler(self._held)
        self._held = frozenset()
        self._current = _NO_ASSIGNMENT
        self._target = _NO_ASSIGNMENT
        self._report_stable()

    async def _reconcile(self) -> None:
        target = self._target
        self._reconciling = True
        self._report_stable()
        try:
            named = {topic_id: t for topic_id, t in target.topics.items() if t[0]}
            if len(named) != len(target.topics):
                # Kafka's consumer waits for its metadata to name such a topic; the contract
                # names every topic, so a nameless one is a topic the coordinator cannot name
                # either, and the member cannot read it.
                log.warning(
                    "group %s: assigned topics without a name are left out: %s",
                    self.group_id,
                    sorted(t.hex() for t in target.topics.keys() - named.keys()),
                )
            resolved = _LocalAssignment(target.local_epoch, named)
            assigned = resolved.partitions()
            revoked = self._held - assigned
            added = assigned - self._held
            log.info(
                "group %s: member %s reconciling epoch %d: revoking %s, adding %s",
                self.group_id,
                self.member_id,
                self._epoch,
                sorted(revoked),
                sorted(added),
            )
            if revoked:
                await self._on_revoked(revoked)
                self._held -= revoked
                if self._state is not _State.RECONCILING:
                    return
            self._current = resolved
            self._held |= added
            # The acknowledgement goes out now; the coordinator can hand the revoked
            # partitions on while the added ones are being set up.
            self._transition(_State.ACKNOWLEDGING)
            await self._on_assigned(added)
        finally:
            self._reconciling = False
            self._report_stable()

    # Heartbeats

    def _build_request(self) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat (Kafka's HeartbeatState.buildRequestData): everything when
        joining, else only what changed since the last one."""
        send_all = self._state is _State.JOINING
        sent = self._sent
        rebalance_timeout_ms = -1
        if send_all or sent.rebalance_timeout_ms != self.rebalance_timeout_ms:
            rebalance_timeout_ms = sent.rebalance_timeout_ms = self.rebalance_timeout_ms
        topic_names = None
        if send_all or sent.topic_names != self._topics:
            topic_names = sorted(self._topics)
            sent.topic_names = self._topics
        topic_regex = None
        if (send_all and self._topic_regex is not None) or self._topic_regex != sent.topic_regex:
            # An empty regex takes a regex subscription back.
            topic_regex = self._topic_regex if self._topic_regex is not None else ""
            sent.topic_regex = self._topic_regex
        server_assignor = None
        if self.server_assignor is not None and (
            send_all or self.server_assignor != sent.server_assignor
        ):
            server_assignor = sent.server_assignor = self.server_assignor
        owned = None
        if send_all or sent.assignment != self._current:
            owned = self._current.request_topics()
            sent.assignment = self._current
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self._epoch,
            instance_id=self.group_instance_id,
            rack_id=self.rack_id if send_all else None,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=topic_names,
            subscribed_topic_regex=topic_regex,
            server_assignor=server_assignor,
            topic_partitions=owned,
        )

    def _on_request_generated(self) -> None:
        # An acknowledgement ends ACKNOWLEDGING when it goes out (Kafka's
        # onHeartbeatRequestGenerated).
        if self._state is _State.ACKNOWLEDGING:
            if self._reconciled():
                self._transition(_State.STABLE)
            else:
                self._transition(_State.RECONCILING)
                self._work.set()

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = retry_at = loop.time()
        attempts = 0
        try:
            while True:
                self._heartbeat_wake.clear()
                state = self._state
                if state in _SILENT or self._fenced_while_leaving:
                    await self._heartbeat_wake.wait()
                    continue
                now = loop.time()
                due = max(retry_at, now if state in _URGENT else next_at)
                if due > now:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._heartbeat_wake.wait(), due - now)
                    continue
                interval_s = self._interval_s
                next_at = now + interval_s
                outcome = await self._heartbeat()
                now = loop.time()
                if self._interval_s != interval_s:
                    next_at = now + self._interval_s
                if outcome is _Outcome.DONE:
                    attempts = 0
                    retry_at = now
                    continue
                # After a failure the next heartbeat does not wait for the interval.
                next_at = now
                if outcome is _Outcome.AT_ONCE:
                    attempts = 0
                    retry_at = now
                else:
                    retry_at = now + self._backoff.backoff_ms(attempts) / 1000
                    attempts += 1
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("group %s: the heartbeat failed", self.group_id)
            self._fail(e)

    async def _heartbeat(self) -> _Outcome:
        request = self._build_request()
        self._on_request_generated()
        try:
            response = await self.client.consumer_group_heartbeat(
                request, timeout_ms=self.client.request_timeout_ms
            )
        except ClientClosedError as e:
            if not self._closing:
                self._fail(e)
            return _Outcome.BACK_OFF
        except ssl.SSLError as e:
            # A certificate that does not verify does not verify on the next try either.
            self._fail(e)
            return _Outcome.BACK_OFF
        except (ClientError, ApiError) as e:
            self._sent = _SentFields()
            if isinstance(e, ApiError) and (e.code in _AUTHENTICATION_CODES or not e.retriable):
                self._fail(e)
            else:
                # The connection's own problems are logged by the client, with back-off.
                log.debug("group %s: heartbeat failed: %s", self.group_id, e)
            return _Outcome.BACK_OFF
        if response.error_code == ErrorCode.NONE:
            self._heartbeat_answered(response)
            return _Outcome.DONE
        self._sent = _SentFields()
        return self._heartbeat_refused(response)

    def _heartbeat_answered(self, response: ConsumerGroupHeartbeatResponse) -> None:
        """Kafka's onHeartbeatSuccess."""
        if response.heartbeat_interval_ms > 0:
            self._interval_s = response.heartbeat_interval_ms / 1000
        state = self._state
        if state in _SILENT or self._fenced_while_leaving or response.member_epoch < 0:
            return
        self._set_epoch(response.member_epoch)
        if response.assignment is not None and state in _TAKES_ASSIGNMENTS:
            self._assignment_received(response.assignment)

    def _heartbeat_refused(self, response: ConsumerGroupHeartbeatResponse) -> _Outcome:
        """Kafka's onErrorResponse."""
        code = response.error_code
        name = _code_name(code)
        if code in _FENCING_CODES:
            self._transition_to_fenced(f"a heartbeat was answered {name}")
            return _Outcome.AT_ONCE
        if code in RETRY_REDISCOVER:
            # The client retried until the heartbeat's deadline; look the coordinator up
            # afresh and go again.
            self.client.forget_coordinator(self.group_id)
            log.info(
                "group %s: heartbeat answered %s; finding the coordinator", self.group_id, name
            )
            return _Outcome.AT_ONCE
        if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT):
            log.info("group %s: heartbeat answered %s; retrying", self.group_id, name)
            return _Outcome.BACK_OFF
        if code == ErrorCode.UNSUPPORTED_VERSION:
            self._fail(error_for_code(code, _UNSUPPORTED_MESSAGE))
        else:
            self._fail(error_for_code(code, response.error_message))
        return _Outcome.BACK_OFF

    async def _send_leave(self, epoch: int) -> None:
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.group_instance_id,
        )
        try:
            response = await self.client.consumer_group_heartbeat(
                request, timeout_ms=_LEAVE_TIMEOUT_MS
            )
        except (ClientError, ApiError, ssl.SSLError) as e:
            # Best effort, as in Kafka: the session timeout removes the member anyway.
            log.warning("group %s: the heartbeat to leave failed: %s", self.group_id, e)
            return
        if response.error_code != ErrorCode.NONE:
            log.warning(
                "group %s: the heartbeat to leave was answered %s",
                self.group_id,
                error_for_code(response.error_code, response.error_message),
            )
            return
        log.info(
            "group %s: member %s left the group (epoch %d)", self.group_id, self.member_id, epoch
        )
