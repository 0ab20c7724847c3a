"""`GroupMember`: one member of a consumer group, by either of Kafka's protocols (its
`group.protocol`), with the same rebalance callbacks:

- "classic" (the default): JoinGroup, SyncGroup, Heartbeat and LeaveGroup, eager (every
  rebalance revokes every partition of every member first); a leader assigns. Its rounds
  are `classic.ClassicRounds`, whose docstring tells how they go.
- "consumer": Kafka's consumer group protocol (KIP-848), through ConsumerGroupHeartbeat; the
  coordinator assigns and each member reconciles alone, giving up only the partitions it
  loses, while the others keep being consumed. `consumer_protocol.ConsumerMembership` runs
  it; its docstring tells how.

What both share lives here: the client, the callbacks (a listener's exception is logged and
the rebalance carries on), the wait for an assignment, the error that ends a membership
(`GroupMemberError`, also given to `on_error`), and commits as the member.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Final

from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_client.assignors import Assignor, RangeAssignor
from coordinator_client.errors import (
    AssignmentTimeoutError,
    CommitFailedError,
    GroupMemberError,
)
from coordinator_client.member.classic import (
    NO_GENERATION,
    RESET_CODES,
    ClassicRounds,
    MemberState,
    PartitionCounts,
)
from coordinator_client.member.consumer_protocol import ConsumerMembership, ConsumerMemberState
from coordinator_client.rpc.backoff import ExponentialBackoff
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.connection_problems import connect_cause
from coordinator_client.rpc.errors import ClientClosedError, OffsetCommitError
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.errors import ErrorCode, error_for_code

__all__ = [
    "GROUP_PROTOCOLS",
    "ConsumerMemberState",
    "GroupMember",
    "MemberState",
    "PartitionCounts",
    "PartitionsCallback",
]

log = logging.getLogger(__name__)

GROUP_PROTOCOLS: Final = ("classic", "consumer")
"""Kafka's `group.protocol` values."""

PartitionsCallback = Callable[[frozenset[TopicPartition]], Awaitable[None]]
"""An async callback given a set of partitions."""

# How the consumer protocol's states read as the classic ones.
_CLASSIC_STATE: Final = {
    ConsumerMemberState.JOINING: MemberState.PREPARING_REBALANCE,
    ConsumerMemberState.FENCED: MemberState.PREPARING_REBALANCE,
    ConsumerMemberState.RECONCILING: MemberState.COMPLETING_REBALANCE,
    ConsumerMemberState.ACKNOWLEDGING: MemberState.COMPLETING_REBALANCE,
    ConsumerMemberState.STABLE: MemberState.STABLE,
}


class GroupMember(ClassicRounds):
    """A member of the consumer group `group_id`, subscribed to `topics`.

    Args:
        client: the client to talk to the coordinator with (not closed by the member); or
            the coordinator's bootstrap servers, "host:port[,host:port]", for a client of
            the member's own (closed with it).
        group_id: the group.
        topics: the topics to subscribe to.
        group_protocol: "consumer" (KIP-848) or "classic", Kafka's `group.protocol`.
            None (the default): "classic" when `partitions_for_topics` or `assignors` is
            given (the classic protocol's assignment by the group's leader), "consumer"
            otherwise.
        partitions_for_topics: the partition count of topics, for when this member leads:
            a mapping, or an async function of the topic names (classic protocol only,
            where it is required).
        assignors: the assignors this member supports, preferred first (default: range,
            Kafka's classic default; classic protocol only).
        subscribed_topic_regex: with the consumer protocol, an RE2 regular expression the
            coordinator matches against whole topic names, beside `topics`.
        server_assignor: with the consumer protocol, the coordinator's assignor to use
            ("uniform", "range"; None: the coordinator's default).
        rack_id: with the consumer protocol, the member's rack, for rack-aware assignment.
        session_timeout_ms, rebalance_timeout_ms: Kafka's `session.timeout.ms` and
            `max.poll.interval.ms` (the rebalance timeout). The consumer protocol's session
            timeout is the coordinator's (`group.consumer.session.timeout.ms`).
        heartbeat_interval_ms: default a third of the session timeout; with the consumer
            protocol, only until the coordinator gives its own.
        group_instance_id: makes the member static (KIP-345).
        on_partitions_revoked, on_partitions_assigned, on_partitions_lost: async
            callbacks; `on_partitions_lost` defaults to `on_partitions_revoked`. The classic
            protocol revokes everything and assigns the whole assignment at each rebalance;
            the consumer protocol revokes only what the member loses and assigns only what
            it gains (possibly nothing: `on_partitions_assigned` runs after every
            reconciliation, as in Kafka's consumer).
        on_error: called (synchronously) once if the membership ends on an error.
        retry_backoff_ms: the first back-off between failed rounds (doubling to 1 s).
        security: how the member's own client secures its connections (`ClientSecurity`:
            Kafka's client settings, TLS and SASL); a client given has its own.

    An authentication the coordinator refuses ends the membership (`GroupMemberError`, its
    cause the Kafka error naming why), as a certificate that does not verify does: no retry
    mends either.
    """

    def __init__(
        self,
        client: CoordinatorClient | str,
        group_id: str,
        topics: Iterable[str],
        *,
        group_protocol: str | None = None,
        partitions_for_topics: PartitionCounts | Mapping[str, int] | None = None,
        assignors: Sequence[Assignor] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        rack_id: str | None = None,
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int | None = None,
        group_instance_id: str | None = None,
        on_partitions_revoked: PartitionsCallback | None = None,
        on_partitions_assigned: PartitionsCallback | None = None,
        on_partitions_lost: PartitionsCallback | None = None,
        on_error: Callable[[GroupMemberError], None] | None = None,
        retry_backoff_ms: int = 100,
        security: ClientSecurity | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        if group_protocol is None:
            client_side = partitions_for_topics is not None or assignors is not None
            group_protocol = "classic" if client_side else "consumer"
        elif group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol must be one of {GROUP_PROTOCOLS}")
        consumer_protocol = group_protocol == "consumer"
        if consumer_protocol and (partitions_for_topics is not None or assignors is not None):
            raise ValueError("the consumer protocol's coordinator assigns: no client assignors")
        if not consumer_protocol and (subscribed_topic_regex or server_assignor or rack_id):
            raise ValueError(
                "subscribed_topic_regex, server_assignor and rack_id need the consumer protocol"
            )
        if not consumer_protocol and partitions_for_topics is None:
            raise ValueError("the classic protocol needs partitions_for_topics")
        self.group_protocol = group_protocol
        self._owns_client = isinstance(client, str)
        if isinstance(client, str):
            client = CoordinatorClient(client, security=security)
        elif security is not None:
            raise ValueError("a client given has its own security; give it there")
        self.client = client
        self.group_id = group_id
        self._topics = frozenset(topics)
        if isinstance(partitions_for_topics, Mapping):
            counts = dict(partitions_for_topics)

            async def from_mapping(topics: Collection[str]) -> Mapping[str, int]:
                return {topic: counts[topic] for topic in topics if topic in counts}

            self._partitions_for_topics: PartitionCounts | None = from_mapping
        else:
            self._partitions_for_topics = partitions_for_topics
        self.assignors: list[Assignor] = list(assignors or [RangeAssignor()])
        if not self.assignors:
            raise ValueError("at least one assignor is needed")
        names = [assignor.name for assignor in self.assignors]
        if len(set(names)) != len(names):
            raise ValueError(f"assignor names must be unique: {names}")
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(session_timeout_ms // 3, 1)
        if self.heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.group_instance_id = group_instance_id
        self._on_revoked = on_partitions_revoked
        self._on_assigned = on_partitions_assigned
        self._on_lost = on_partitions_lost
        self._on_error = on_error
        self._backoff = ExponentialBackoff(retry_backoff_ms, max(retry_backoff_ms, 1000))

        self._member_id = ""
        self._generation_id = NO_GENERATION
        self._leader_id = ""
        self._protocol_name: str | None = None
        self._state = MemberState.UNJOINED
        self._assignment: frozenset[TopicPartition] = frozenset()
        # Whether partitions were handed out (a generation completed) and not given up yet.
        self._owns_assignment = False
        self._generation_lost = False
        self._rejoin_needed = True
        self._closing = False
        self._fatal: GroupMemberError | None = None
        self._wake = asyncio.Event()
        self._stable = asyncio.Event()
        self._started = False
        self._run_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        # Why the last round of join/sync failed, for the timeout `wait_for_assignment`
        # raises; cleared once the member is stable.
        self._last_failure: str | None = None
        self.rebalances = 0
        """Completed joins (generations this member took part in), or with the consumer
        protocol completed reconciliations."""
        self._consumer_protocol: ConsumerMembership | None = None
        if consumer_protocol:
            self._consumer_protocol = ConsumerMembership(
                client,
                group_id,
                topics=self._topics,
                topic_regex=subscribed_topic_regex,
                server_assignor=server_assignor,
                group_instance_id=group_instance_id,
                rack_id=rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                on_revoked=self._revoke,
                on_assigned=self._assign,
                on_lost=self._lose,
                on_stable=self._set_stable,
                on_fatal=self._fail,
                retry_backoff_ms=retry_backoff_ms,
            )

    # What the member knows

    @property
    def member_id(self) -> str:
        """The member id: the coordinator's (classic), or the member's own, generated once
        (consumer protocol, KIP-1082)."""
        cp = self._consumer_protocol
        return cp.member_id if cp is not None else self._member_id

    @property
    def generation_id(self) -> int:
        """The current generation, or with the consumer protocol the member epoch (as Kafka's
        ConsumerGroupMetadata says); -1 while the member has none."""
        cp = self._consumer_protocol
        if cp is not None:
            return cp.member_epoch if cp.in_group() else NO_GENERATION
        return self._generation_id

    @property
    def member_epoch(self) -> int:
        """The consumer protocol's member epoch (0 while joining, -1 or -2 once left); the
        generation with the classic protocol."""
        cp = self._consumer_protocol
        return cp.member_epoch if cp is not None else self._generation_id

    @property
    def leader_id(self) -> str:
        """The leader's member id (classic protocol; the consumer protocol has none)."""
        return self._leader_id

    @property
    def protocol_name(self) -> str | None:
        """The assignor the group chose, or with the consumer protocol the one asked for."""
        cp = self._consumer_protocol
        return cp.server_assignor if cp is not None else self._protocol_name

    @property
    def state(self) -> MemberState:
        """The classic protocol's state; a consumer-protocol member's reads as the nearest
        one (`consumer_state` has Kafka's own)."""
        cp = self._consumer_protocol
        if cp is not None:
            return _CLASSIC_STATE.get(cp.state, MemberState.UNJOINED)
        return self._state

    @property
    def consumer_state(self) -> ConsumerMemberState | None:
        """Kafka's consumer-protocol member state; None with the classic protocol."""
        cp = self._consumer_protocol
        return cp.state if cp is not None else None

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions assigned in the current generation (empty while rebalancing), or
        with the consumer protocol those held now (kept through reconciliations)."""
        cp = self._consumer_protocol
        return cp.assignment if cp is not None else self._assignment

    @property
    def topics(self) -> frozenset[str]:
        cp = self._consumer_protocol
        return cp.topics if cp is not None else self._topics

    @property
    def subscribed_topic_regex(self) -> str | None:
        cp = self._consumer_protocol
        return cp.topic_regex if cp is not None else None

    @property
    def error(self) -> GroupMemberError | None:
        """The error that ended the membership, if any."""
        return self._fatal

    # Life cycle

    async def start(self) -> None:
        """Start joining in the background; `wait_for_assignment` waits for the result."""
        if self._run_task is not None or self._started:
            raise RuntimeError("the member was already started")
        self._started = True
        if self._consumer_protocol is not None:
            self._consumer_protocol.start()
            return
        self._run_task = asyncio.create_task(self._run(), name=f"group member {self.group_id}")

    async def wait_for_assignment(
        self, timeout_s: float | None = None
    ) -> frozenset[TopicPartition]:
        """Wait until the member is stable and return its assignment.

        Raises:
            GroupMemberError: the membership ended on an error.
            AssignmentTimeoutError: not stable within `timeout_s` (a `TimeoutError`; its
                message names the coordinator and the last error reaching it). The member
                keeps trying.
        """
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    self._raise_if_failed()
                    if self._closing:
                        raise ClientClosedError(f"group {self.group_id}: the member was closed")
                    # Set only once `on_partitions_assigned` has run, so the caller sees a
                    # member whose partitions are ready.
                    if self._stable.is_set():
                        return self.assignment
                    await self._stable.wait()
        except TimeoutError:
            raise AssignmentTimeoutError(
                f"group {self.group_id!r}: no assignment from the coordinator at "
                f"{self.coordinator_address()} within {timeout_s:.1f} s{self._why_waiting()}"
            ) from None

    def coordinator_address(self) -> str:
        """Where the group's coordinator is, or the bootstrap servers while it is not known."""
        node = self.client.cached_coordinator(self.group_id)
        if node is not None:
            return f"{node.host}:{node.port}"
        return self.client.describe_bootstrap()

    def _why_waiting(self) -> str:
        node = self.client.cached_coordinator(self.group_id)
        addresses = [node.address] if node is not None else self.client.bootstrap_servers
        last_error = self.client.last_error(addresses)
        if last_error:
            return last_error
        if self._last_failure is not None:
            return f": last error: {self._last_failure}"
        state = self.consumer_state or self._state
        return f": no error seen; the member is {state.value}"

    def subscribe(self, topics: Iterable[str], *, topic_regex: str | None = None) -> None:
        """Change the subscription; the member rejoins if it changed (classic), or its next
        heartbeat carries it (consumer protocol, where `topic_regex` may replace it too)."""
        topics = frozenset(topics)
        if self._consumer_protocol is not None:
            self._consumer_protocol.subscribe(topics, topic_regex)
            return
        if topic_regex is not None:
            raise ValueError("a topic_regex subscription needs the consumer protocol")
        if topics != self._topics:
            self._topics = topics
            self.request_rejoin("the subscription changed")

    def request_rejoin(self, reason: str = "requested") -> None:
        """Rejoin the group soon (revoking first). The consumer protocol has no such request
        (the coordinator alone decides; Kafka's `enforceRebalance` does nothing with it)."""
        if self._consumer_protocol is not None:
            log.info("group %s: no rejoin with the consumer protocol (%s)", self.group_id, reason)
            return
        if not self._rejoin_needed:
            log.info("group %s: member %s will rejoin: %s", self.group_id, self._member_id, reason)
        self._rejoin_needed = True
        self._stable.clear()
        self._wake.set()

    async def close(self, *, leave_group: bool | None = None) -> None:
        """Stop: revoke the partitions (the callback runs), then leave the group.

        Args:
            leave_group: send LeaveGroup; by default only a dynamic member does (a static
                member keeps its place until its session times out, as in Kafka). With the
                consumer protocol a static member always says it leaves, with epoch -2 (it
                keeps its place) or with `leave_group=True` -1 (it gives it up).
        """
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        if self._consumer_protocol is not None:
            await self._consumer_protocol.close(leave_group=leave_group)
            self._stable.set()
            if self._owns_client:
                await self.client.close()
            return
        await self._stop_heartbeat()
        if self._run_task is not None:
            self._run_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._run_task
        await self._give_up_partitions()
        if leave_group is None:
            leave_group = self.group_instance_id is None
        if leave_group and self._member_id and not self.client.closed:
            await self._leave_group("the consumer is being closed")
        self._reset_generation()
        self._state = MemberState.UNJOINED
        self._stable.set()
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # Commits under this member's generation

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` as this member (with its member id and generation, or member
        epoch: the consumer protocol retries STALE_MEMBER_EPOCH with the newest epoch while
        it holds the partitions).

        Raises:
            CommitFailedError: the member has no valid generation, or the server says the
                group rebalanced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: the member resets
                and rejoins; REBALANCE_IN_PROGRESS: it rejoins; the consumer protocol's
                FENCED_MEMBER_EPOCH, or a stale epoch past the deadline).
            OffsetCommitError: other per-partition errors.
        """
        if self._consumer_protocol is not None:
            await self._consumer_protocol.commit_offsets(offsets, timeout_ms=timeout_ms)
            return
        generation, member_id = self._generation_id, self._member_id
        if generation == NO_GENERATION or not member_id:
            raise CommitFailedError(
                f"group {self.group_id}: the member has no generation (it is rebalancing or "
                "lost its membership); the partitions will be reassigned"
            )
        if not offsets:
            return
        try:
            await self.client.commit_offsets(
                self.group_id,
                offsets,
                generation=generation,
                member_id=member_id,
                group_instance_id=self.group_instance_id,
                timeout_ms=timeout_ms,
            )
        except OffsetCommitError as e:
            codes = {error.code for error in e.errors.values()}
            if codes & RESET_CODES:
                if (self._generation_id, self._member_id) == (generation, member_id):
                    self._lose_membership(f"a commit was answered {sorted(c.name for c in codes)}")
                raise CommitFailedError(
                    f"group {self.group_id}: commit failed, the group has rebalanced"
                ) from e
            if ErrorCode.REBALANCE_IN_PROGRESS in codes:
                self.request_rejoin("a commit was answered REBALANCE_IN_PROGRESS")
                raise CommitFailedError(
                    f"group {self.group_id}: commit failed, the group is rebalancing"
                ) from e
            if ErrorCode.FENCED_INSTANCE_ID in codes:
                self._fail(error_for_code(ErrorCode.FENCED_INSTANCE_ID))
            raise

    async def fetch_committed(
        self,
        partitions: Collection[TopicPartition],
        *,
        require_stable: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of `partitions` (those without one left out), asked
        as this member with the consumer protocol (member id and epoch)."""
        if self._consumer_protocol is not None:
            return await self._consumer_protocol.fetch_offsets(
                partitions, require_stable=require_stable, timeout_ms=timeout_ms
            )
        return await self.client.fetch_offsets(
            self.group_id, partitions, require_stable=require_stable, timeout_ms=timeout_ms
        )

    # The consumer protocol's callbacks (Kafka's: revoked and lost only when there is
    # something to give up, assigned after every reconciliation)

    async def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        await self._callback(self._on_revoked, partitions, "on_partitions_revoked")

    async def _lose(self, partitions: frozenset[TopicPartition]) -> None:
        callback = self._on_lost or self._on_revoked
        await self._callback(callback, partitions, "on_partitions_lost")

    async def _assign(self, partitions: frozenset[TopicPartition]) -> None:
        self.rebalances += 1
        await self._callback(self._on_assigned, partitions, "on_partitions_assigned")

    def _set_stable(self, stable: bool) -> None:
        if stable or self._fatal is not None or self._closing:
            self._stable.set()
        else:
            self._stable.clear()

    # The membership loop

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise GroupMemberError(str(self._fatal)) from self._fatal.__cause__

    def _fail(self, cause: BaseException) -> None:
        if self._fatal is None:
            reason = str(cause)
            if isinstance(cause, ssl.SSLError):
                reason = f"the coordinator at {self.coordinator_address()}: {connect_cause(cause)}"
            error = GroupMemberError(f"group {self.group_id}: membership ended: {reason}")
            error.__cause__ = cause
            self._fatal = error
            log.error("%s", error)
            if self._on_error is not None:
                self._on_error(error)
        self._stable.set()
        self._wake.set()

    async def _callback(
        self,
        callback: PartitionsCallback | None,
        partitions: frozenset[TopicPartition],
        name: str,
    ) -> None:
        if callback is None:
            return
        try:
            await callback(partitions)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Kafka hands a listener's exception to the application and carries on with
            # the rebalance; the member's part is to keep the group going.
            log.exception("group %s: %s failed", self.group_id, name)
