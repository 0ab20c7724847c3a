"""The classic protocol's rounds of a `GroupMember` (Kafka's AbstractCoordinator and
ConsumerCoordinator, eager protocol): `ClassicRounds`, the part of `GroupMember` that joins,
syncs, heartbeats and leaves by JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Theory of operation. A background task keeps the member in the group:

1. Before (re)joining, the member gives up its partitions: `on_partitions_revoked` runs
   with them while the generation is still valid (so a consumer can commit), or
   `on_partitions_lost` when the generation was already lost (then committing is
   pointless: the partitions may have a new owner).
2. JoinGroup. A new dynamic member first gets MEMBER_ID_REQUIRED with its member id and
   joins again with it (KIP-394); a static member (`group_instance_id`) joins in one step.
   The server parks the JoinGroup until every member has joined.
3. The leader decodes every member's subscription (the "consumer" embedded protocol), asks
   for the partition counts of their topics and runs the assignor the group agreed on
   (the first of ours every member supports); everyone sends SyncGroup, the leader with
   the assignments, and gets its own assignment back.
4. Stable: `on_partitions_assigned` runs; a heartbeat goes out every
   `heartbeat_interval_ms` (a third of the session timeout by default).

A heartbeat answered REBALANCE_IN_PROGRESS makes the member rejoin (from step 1, keeping
its member id); ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, from a heartbeat, a JoinGroup, a
SyncGroup or a commit, reset the generation and the member id, as Kafka does, and the
member rejoins as a new one, its partitions lost. FENCED_INSTANCE_ID and the other errors a
member cannot fix end the membership (`GroupMemberError`). Coordinator moves and load are
the client's retries.

`close()` revokes (so the consumer commits), then sends LeaveGroup so the group rebalances
at once, except for a static member, which does not leave (Kafka's consumer): its
partitions wait for it until its session times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Final

from aiokafka.structs import TopicPartition

from coordinator_client.assignors import (
    Assignment,
    Assignor,
    Subscription,
    from_topic_partitions,
)
from coordinator_client.errors import GroupMemberError
from coordinator_client.rpc.backoff import ExponentialBackoff
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.errors import ClientClosedError, ClientError
from coordinator_protocol.consumer import (
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
)
from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code
from coordinator_protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupRequestMember,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)

__all__ = ["NO_GENERATION", "RESET_CODES", "ClassicRounds", "MemberState", "PartitionCounts"]

log = logging.getLogger("coordinator_client.member")

PROTOCOL_TYPE: Final = "consumer"

PartitionCounts = Callable[[Collection[str]], Awaitable[Mapping[str, int]]]
"""How the leader learns the partition count of the topics it assigns (topics that do
not exist are left out)."""

_Callback = Callable[[frozenset[TopicPartition]], Awaitable[None]]

# Errors that reset the member: it rejoins as a new member, its partitions lost.
RESET_CODES: Final = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors no retry can fix.
_FATAL_CODES: Final = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
        # The coordinator holds as many groups as it may (max_groups).
        ErrorCode.POLICY_VIOLATION,
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
NO_GENERATION: Final = -1
_LEAVE_TIMEOUT_MS: Final = 5000


class MemberState(enum.Enum):
    """Kafka's MemberState."""

    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


class _Rejoin(Exception):
    """This round of join/sync ended; start another (after the back-off if `backoff`)."""

    def __init__(self, reason: str, *, backoff: bool = True) -> None:
        super().__init__(reason)
        self.backoff = backoff


class ClassicRounds:
    """The classic protocol's part of `GroupMember`, which sets the state below and gives
    the methods declared at the end (its shared ones)."""

    client: CoordinatorClient
    group_id: str
    assignors: list[Assignor]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    group_instance_id: str | None
    rebalances: int
    _topics: frozenset[str]
    _partitions_for_topics: PartitionCounts | None
    _on_revoked: _Callback | None
    _on_assigned: _Callback | None
    _on_lost: _Callback | None
    _backoff: ExponentialBackoff
    _member_id: str
    _generation_id: int
    _leader_id: str
    _protocol_name: str | None
    _state: MemberState
    _assignment: frozenset[TopicPartition]
    _owns_assignment: bool
    _generation_lost: bool
    _rejoin_needed: bool
    _closing: bool
    _fatal: GroupMemberError | None
    _wake: asyncio.Event
    _stable: asyncio.Event
    _heartbeat_task: asyncio.Task[None] | None
    _last_failure: str | None

    @property
    def is_leader(self) -> bool:
        return bool(self._member_id) and self._leader_id == self._member_id

    if TYPE_CHECKING:
        # GroupMember's, which both protocols share: declared for the type checker only,
        # so that nothing here can be called without them.

        def request_rejoin(self, reason: str = "requested") -> None: ...

        def _fail(self, cause: BaseException) -> None: ...

        async def _callback(
            self, callback: _Callback | None, partitions: frozenset[TopicPartition], name: str
        ) -> None: ...

    async def _run(self) -> None:
        attempts = 0
        try:
            while not self._closing and self._fatal is None:
                if not self._rejoin_needed:
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                try:
                    await self._join_group()
                    attempts = 0
                    self._last_failure = None
                except _Rejoin as e:
                    self._last_failure = str(e)
                    log.info("group %s: rejoining: %s", self.group_id, e)
                    if e.backoff:
                        await asyncio.sleep(self._backoff.backoff_ms(attempts) / 1000)
                        attempts += 1
        except ClientClosedError as e:
            self._fail(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("group %s: the membership loop failed", self.group_id)
            self._fail(e)

    async def _join_group(self) -> None:
        """One rebalance: give up the partitions, join, sync; raises `_Rejoin` to go again."""
        self._stable.clear()
        await self._stop_heartbeat()
        await self._give_up_partitions()
        self._rejoin_needed = False
        self._state = MemberState.PREPARING_REBALANCE
        join = await self._send_join()
        self._generation_id = join.generation_id
        self._member_id = join.member_id
        self._leader_id = join.leader
        self._protocol_name = join.protocol_name
        self._generation_lost = False
        self._state = MemberState.COMPLETING_REBALANCE
        self._start_heartbeat()
        assignments: list[SyncGroupRequestAssignment] = []
        if join.leader == join.member_id and not join.skip_assignment:
            assignments = await self._perform_assignment(join)
        assignment = await self._send_sync(join, assignments)
        self._assignment = frozenset(assignment.partitions)
        self._owns_assignment = True
        self._state = MemberState.STABLE
        self.rebalances += 1
        log.info(
            "group %s: member %s joined generation %d%s with %d partitions",
            self.group_id,
            self._member_id,
            self._generation_id,
            " as leader" if self.is_leader else "",
            len(self._assignment),
        )
        for assignor in self.assignors:
            if assignor.name == self._protocol_name:
                assignor.on_assignment(assignment, self._generation_id)
        await self._callback(self._on_assigned, self._assignment, "on_partitions_assigned")
        if not self._rejoin_needed:
            self._stable.set()

    async def _send_join(self) -> JoinGroupResponse:
        while True:
            request = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self._member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=self._protocols(),
            )
            try:
                response = await self.client.join_group(request, raise_on_error=False)
            except ClientClosedError:
                raise
            except (ClientError, ApiError) as e:
                raise self._retry_or_fail(e, "JoinGroup") from e
            except ssl.SSLError as e:
                raise self._tls_failed(e) from e
            code = response.error_code
            if code == ErrorCode.NONE:
                return response
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                # KIP-394: join again at once with the member id the coordinator chose.
                self._member_id = response.member_id
                continue
            raise self._on_error_code(code, response.error_message, "JoinGroup")

    async def _send_sync(
        self, join: JoinGroupResponse, assignments: list[SyncGroupRequestAssignment]
    ) -> Assignment:
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=join.generation_id,
            member_id=join.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=join.protocol_name,
            assignments=assignments,
        )
        try:
            response = await self.client.sync_group(request, raise_on_error=False)
        except ClientClosedError:
            raise
        except (ClientError, ApiError) as e:
            raise self._retry_or_fail(e, "SyncGroup") from e
        except ssl.SSLError as e:
            raise self._tls_failed(e) from e
        if response.error_code != ErrorCode.NONE:
            raise self._on_error_code(response.error_code, response.error_message, "SyncGroup")
        try:
            return Assignment.decode(response.assignment)
        except InvalidConsumerProtocolError as e:
            self._fail(e)
            raise _Rejoin("the assignment cannot be decoded") from e

    def _retry_or_fail(self, error: ClientError | ApiError, api: str) -> _Rejoin:
        # Retriable: the coordinator moved or was busy past the call's deadline, or the
        # connection broke; the next round finds it again.
        self._rejoin_needed = True
        if not error.retriable:
            self._fail(error)
        return _Rejoin(f"{api} failed: {error}")

    def _tls_failed(self, error: ssl.SSLError) -> _Rejoin:
        # A certificate that does not verify does not verify on the next try either.
        self._fail(error)
        return _Rejoin(f"TLS handshake failed: {error}")

    def _on_error_code(self, code: int, message: str | None, api: str) -> _Rejoin:
        self._rejoin_needed = True
        if code in RESET_CODES:
            # Kafka's resetGenerationOnResponseError: a new member id, partitions lost.
            self._lose_membership(f"{api} answered {ErrorCode(code).name}")
            return _Rejoin(f"{api} answered {ErrorCode(code).name}", backoff=False)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return _Rejoin(f"{api} answered REBALANCE_IN_PROGRESS", backoff=False)
        error = error_for_code(code, message)
        if code in _FATAL_CODES:
            self._fail(error)
        else:
            log.warning("group %s: %s failed: %s", self.group_id, api, error)
        return _Rejoin(f"{api} failed: {error}")

    def _protocols(self) -> list[JoinGroupRequestProtocol]:
        topics = sorted(self._topics)
        return [
            JoinGroupRequestProtocol(
                name=assignor.name,
                # Eager protocol: everything was revoked before joining, so nothing is owned
                # (Kafka sends no owned partitions either); stickiness travels in user_data.
                metadata=ConsumerProtocolSubscription(
                    topics=topics, user_data=assignor.subscription_user_data(self._topics)
                ).encode(),
            )
            for assignor in self.assignors
        ]

    async def _perform_assignment(
        self, join: JoinGroupResponse
    ) -> list[SyncGroupRequestAssignment]:
        assignor = next((a for a in self.assignors if a.name == join.protocol_name), None)
        if assignor is None:
            error = error_for_code(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the group chose assignor {join.protocol_name!r}, which this member lacks",
            )
            self._fail(error)
            raise _Rejoin(str(error))
        subscriptions: dict[str, Subscription] = {}
        for member in join.members:
            try:
                decoded = ConsumerProtocolSubscription.decode(member.metadata)
            except InvalidConsumerProtocolError as e:
                log.warning(
                    "group %s: member %s sent a subscription that cannot be decoded (%s); "
                    "it gets no partitions",
                    self.group_id,
                    member.member_id,
                    e,
                )
                decoded = ConsumerProtocolSubscription(topics=[])
            subscriptions[member.member_id] = Subscription(
                topics=tuple(decoded.topics),
                user_data=decoded.user_data,
                owned_partitions=tuple(from_topic_partitions(decoded.owned_partitions)),
                group_instance_id=member.group_instance_id,
            )
        topics = sorted({topic for s in subscriptions.values() for topic in s.topics})
        try:
            assert self._partitions_for_topics is not None  # required by the classic protocol
            counts = await self._partitions_for_topics(topics)
        except Exception as e:
            raise _Rejoin(f"cannot read the partition counts of {topics}: {e!r}") from e
        assigned = assignor.assign(
            {topic: count for topic, count in counts.items() if topic in set(topics)},
            subscriptions,
        )
        log.debug(
            "group %s: leader %s assigned generation %d with %s: %s",
            self.group_id,
            self._member_id,
            join.generation_id,
            assignor.name,
            {member: list(a.partitions) for member, a in assigned.items()},
        )
        return [
            SyncGroupRequestAssignment(member_id=member_id, assignment=a.encode())
            for member_id, a in assigned.items()
        ]

    async def _give_up_partitions(self) -> None:
        if not self._owns_assignment:
            return
        partitions = self._assignment
        self._owns_assignment = False
        if self._generation_lost:
            callback = self._on_lost or self._on_revoked
            await self._callback(callback, partitions, "on_partitions_lost")
        else:
            await self._callback(self._on_revoked, partitions, "on_partitions_revoked")
        self._assignment = frozenset()

    def _reset_generation(self) -> None:
        self._generation_id = NO_GENERATION
        self._member_id = ""
        self._leader_id = ""

    def _lose_membership(self, reason: str) -> None:
        log.info(
            "group %s: member %s lost its membership: %s", self.group_id, self._member_id, reason
        )
        self._reset_generation()
        self._generation_lost = True
        self.request_rejoin(reason)

    async def _leave_group(self, reason: str) -> None:
        request = LeaveGroupRequest(
            group_id=self.group_id,
            members=[
                LeaveGroupRequestMember(
                    member_id=self._member_id,
                    group_instance_id=self.group_instance_id,
                    reason=reason,
                )
            ],
        )
        try:
            await self.client.leave_group(request, timeout_ms=_LEAVE_TIMEOUT_MS)
            log.info("group %s: member %s left the group", self.group_id, self._member_id)
        except (ClientError, ApiError, ssl.SSLError) as e:
            # Best effort, as in Kafka: the session timeout removes the member anyway.
            log.warning("group %s: LeaveGroup failed: %s", self.group_id, e)

    # Heartbeats

    def _start_heartbeat(self) -> None:
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat_loop(self._generation_id, self._member_id),
            name=f"heartbeat {self.group_id}",
        )

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _is_current(self, generation: int, member_id: str) -> bool:
        return (self._generation_id, self._member_id) == (generation, member_id)

    async def _heartbeat_loop(self, generation: int, member_id: str) -> None:
        interval_s = self.heartbeat_interval_ms / 1000
        # A heartbeat may keep retrying until the session would have expired anyway.
        timeout_ms = min(self.session_timeout_ms, self.client.request_timeout_ms)
        while True:
            await asyncio.sleep(interval_s)
            if not self._is_current(generation, member_id) or self._state not in (
                MemberState.COMPLETING_REBALANCE,
                MemberState.STABLE,
            ):
                return
            request = HeartbeatRequest(
                group_id=self.group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=self.group_instance_id,
            )
            try:
                response = await self.client.heartbeat(
                    request, raise_on_error=False, timeout_ms=timeout_ms
                )
            except ClientClosedError:
                return
            except (ClientError, ApiError, ssl.SSLError) as e:
                if isinstance(e, ApiError) and e.code in _AUTHENTICATION_CODES:
                    # Credentials refused (a password changed, a token expired): the session
                    # would only run out before the next JoinGroup is refused the same way.
                    self._fail(e)
                    return
                # The connection's own problems are logged by the client, with back-off.
                log.debug("group %s: heartbeat failed: %s", self.group_id, e)
                continue
            if not self._is_current(generation, member_id):
                return
            code = response.error_code
            if code == ErrorCode.NONE:
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                # While the SyncGroup is out, its own answer says what to do.
                if self._state is MemberState.STABLE:
                    self.request_rejoin("a heartbeat was answered REBALANCE_IN_PROGRESS")
                    return
                continue
            if code in RESET_CODES:
                self._lose_membership(f"a heartbeat was answered {ErrorCode(code).name}")
                return
            if code in _FATAL_CODES:
                self._fail(error_for_code(code, response.error_message))
                return
            log.warning("group %s: heartbeat answered %s", self.group_id, error_for_code(code))
