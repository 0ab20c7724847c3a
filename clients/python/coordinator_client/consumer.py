"""`CoordinatedConsumer`: an aiokafka consumer whose group lives in coordinator-server.

Records are fetched by an `AIOKafkaConsumer` in manual-assignment mode (its own group_id is
None, so it never talks to a Kafka group coordinator); which partitions it reads comes from
a `GroupMember`, and where it starts and what it commits go to coordinator-server.

Positions. The consumer counts a record as consumed once it has handed it to the
application (`getone`, `getmany`, `async for`); a commit stores, per partition, the offset
after the last record handed out. So a record fetched but never handed out is never
committed, and the partition's next owner reads it.

Rebalances, by the group protocol (`group_protocol`): Kafka's consumer group protocol
(KIP-848: a reconciliation revokes only the partitions this member loses and assigns only
those it gains; the others are read on throughout), the default wherever the coordinator
serves it, or Kafka's classic one (eager: every rebalance revokes every partition of every
member, then assigns the whole assignment). The steps are the same for the partitions
concerned:

- Revoked: the consumer first stops handing out records of those partitions, then commits
  their positions (with auto-commit on; the generation or member epoch is still valid, so
  the commit is accepted), then calls the listener's `on_partitions_revoked` (where an
  application that commits by hand commits), then stops fetching them. The next owner
  starts exactly where this one stopped.
- Lost (the member was fenced: its session expired or the group moved on without it): no
  commit, which the coordinator would refuse anyway; the listener's
  `on_partitions_revoked` runs, as Kafka's default `onPartitionsLost` does.
- Assigned: each partition starts at its committed offset (a stable one: an offset a
  transaction is committing is waited for); with none, at
  `auto_offset_reset`: "earliest" (the log start), "latest" (the high watermark a Fetch
  reports, see `rpc.kafka_log`) or "none" (an error). Then `on_partitions_assigned` runs
  (with the consumer protocol, with the partitions added: after every reconciliation, with
  none if none were).

Auto-commit (on by default) commits the consumed positions every `auto_commit_interval_ms`
and when the consumer stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import ConsumerStoppedError, KafkaError, NoOffsetForPartitionError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from coordinator_client.assignors import Assignor, RangeAssignor
from coordinator_client.errors import CommitFailedError
from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_client.member import GROUP_PROTOCOLS, GroupMember
from coordinator_client.rpc.backoff import ExponentialBackoff
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.errors import ClientError
from coordinator_client.rpc.kafka_log import KafkaLogReader, stop_consumer
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ApiError

__all__ = ["CoordinatedConsumer"]

log = logging.getLogger(__name__)

_OFFSET_RESETS: Final = ("earliest", "latest", "none")


class CoordinatedConsumer:
    """A Kafka consumer in a group coordinated by coordinator-server.

    Args:
        *topics: topics to subscribe to (or call `subscribe` before `start`).
        bootstrap_servers: the Kafka cluster, for records.
        coordinator_bootstrap_servers: coordinator-server, "host:port[,host:port]"; or
            pass `coordinator_client` to share a `CoordinatorClient` (not closed here).
        group_id: the consumer group.
        group_instance_id: makes the member static (KIP-345).
        group_protocol: "consumer" (Kafka's consumer group protocol, KIP-848: the
            coordinator assigns; `partition_assignment_strategy` does not apply) or
            "classic". None (the default): "classic" when `partition_assignment_strategy`
            is given (assignment by the client is asked for), "consumer" when
            `subscribed_topic_regex` or `server_assignor` is; otherwise "consumer" if the
            coordinator serves it (its ApiVersions lists ConsumerGroupHeartbeat: it knows
            the data cluster's topics), "classic" if not, decided by `start` and logged.
        subscribed_topic_regex: with the consumer protocol, an RE2 regular expression the
            coordinator matches against whole topic names (Kafka's
            `subscribe(SubscriptionPattern)`), beside or instead of `topics`.
        server_assignor: with the consumer protocol, the coordinator's assignor to ask for
            (Kafka's `group.remote.assignor`: "uniform", "range"; None: its default).
        client_id: for both Kafka and the coordinator.
        auto_offset_reset: where to start a partition with no committed offset:
            "earliest", "latest" (default, as in aiokafka) or "none" (raise).
        enable_auto_commit, auto_commit_interval_ms: commit consumed positions in the
            background (default every 5 s), and before partitions are revoked.
        session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms: the group
            member's session timeout, heartbeat interval and rebalance timeout (aiokafka's
            defaults: 10 s, 3 s, 300 s); with the consumer protocol the coordinator sets
            the first two.
        partition_assignment_strategy: assignors, preferred first (default: range; classic
            protocol only).
        key_deserializer, value_deserializer: as in aiokafka.
        coordinator_options: more `CoordinatorClient` arguments (TLS, timeouts).
        security: how the coordinator connections are secured (`ClientSecurity`: Kafka's
            client settings, TLS and SASL), for the `CoordinatorClient` made here; a shared
            `coordinator_client` has its own. It does not touch the Kafka connections, which
            take aiokafka's security options.
        **kafka_options: more `AIOKafkaConsumer` arguments (fetch sizes, Kafka security,
            ...); its group settings do not apply, the group being ours.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str,
        group_id: str,
        coordinator_bootstrap_servers: str | None = None,
        coordinator_client: CoordinatorClient | None = None,
        group_instance_id: str | None = None,
        group_protocol: str | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        client_id: str = "coordinated-consumer",
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Sequence[Assignor] | None = None,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        coordinator_options: Mapping[str, Any] | None = None,
        security: ClientSecurity | None = None,
        **kafka_options: Any,
    ) -> None:
        if (coordinator_bootstrap_servers is None) == (coordinator_client is None):
            raise ValueError("give one of coordinator_bootstrap_servers and coordinator_client")
        if security is not None and coordinator_client is not None:
            raise ValueError("a shared coordinator_client has its own security; give it there")
        if auto_offset_reset not in _OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {_OFFSET_RESETS}")
        if group_protocol is None:
            if partition_assignment_strategy is not None:
                group_protocol = "classic"
            elif subscribed_topic_regex or server_assignor:
                group_protocol = "consumer"
        elif group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol must be one of {GROUP_PROTOCOLS}")
        if group_protocol == "consumer" and partition_assignment_strategy is not None:
            # As Kafka's consumer refuses partition.assignment.strategy with it.
            raise ValueError("the consumer protocol's coordinator assigns: no client assignors")
        if group_protocol == "classic" and (subscribed_topic_regex or server_assignor):
            raise ValueError(
                "subscribed_topic_regex and server_assignor need the consumer protocol"
            )
        self.group_protocol: str | None = group_protocol
        """The group protocol; None until `start` asks the coordinator, when not given."""
        self._server_assignor = server_assignor
        self._assignors = list(partition_assignment_strategy or [RangeAssignor()])
        self._topics = frozenset(topics)
        self._topic_regex = subscribed_topic_regex
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self._owns_client = coordinator_client is None
        self._client = coordinator_client or CoordinatorClient(
            coordinator_bootstrap_servers or "",
            client_id=client_id,
            security=security,
            **dict(coordinator_options or {}),
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            # Starting points are set explicitly; this covers only a committed offset the
            # log no longer has (OFFSET_OUT_OF_RANGE), as in aiokafka.
            auto_offset_reset=auto_offset_reset,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            **kafka_options,
        )
        forbid_auto_topic_creation(self._consumer._client)
        self._log = KafkaLogReader(bootstrap_servers, **_security_options(kafka_options))
        self._member_options: dict[str, Any] = {
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "rebalance_timeout_ms": max_poll_interval_ms,
        }
        self._listener: ConsumerRebalanceListener | None = None
        self._member: GroupMember | None = None
        # Partitions whose records may be handed out; empty while rebalancing.
        self._active: frozenset[TopicPartition] = frozenset()
        # Offset of the next record to hand out, per assigned partition.
        self._positions: dict[TopicPartition, int] = {}
        # The last offset known committed, per assigned partition.
        self._committed: dict[TopicPartition, int] = {}
        self._commit_lock = asyncio.Lock()
        # What stops the consumer for good (the membership ended, no offset to start
        # from), raised to the application by the next read.
        self._error: BaseException | None = None
        self._failed = asyncio.Event()
        self._assigned = asyncio.Event()
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    # Life cycle

    async def start(self) -> None:
        """Check that the coordinator answers, connect to Kafka and join the group (the
        assignment arrives in the background; `wait_for_assignment` waits for it).

        Raises:
            ConnectionClosedError: the coordinator cannot be reached, or the peer does not
                speak the coordinator protocol (the message says which).
            RequestTimeoutError: the coordinator did not answer in time.
            ssl.SSLError: the TLS handshake with the coordinator failed.
            SaslAuthenticationFailedError, UnsupportedSaslMechanismError,
            IllegalSaslStateError: the coordinator refused the authentication `security`
                asks for (the message says why).
        """
        if self._started:
            raise RuntimeError("the consumer was already started")
        if not self._topics and not self._topic_regex:
            raise ValueError("subscribe to at least one topic before start()")
        self._started = True
        # As aiokafka's start fails when no bootstrap server answers, this one fails when the
        # coordinator does not (a wrong port, a stopped server, a Kafka broker: the error
        # says which, within the client's request timeout). Later outages are retried, with
        # WARNING lines, as aiokafka retries a lost group coordinator.
        try:
            await self._client.start()
        except BaseException:
            if self._owns_client:
                await self._client.close()
            raise
        try:
            protocol = self.group_protocol
            if protocol is None:
                protocol = await self._served_protocol()
        except BaseException:
            if self._owns_client:
                await self._client.close()
            raise
        self.group_protocol = protocol
        await self._consumer.start()
        try:
            await self._log.start()
            options = {**self._member_options, "group_protocol": protocol}
            if protocol == "consumer":
                options["subscribed_topic_regex"] = self._topic_regex
                options["server_assignor"] = self._server_assignor
            else:
                options["partitions_for_topics"] = self._log.partition_counts
                options["assignors"] = self._assignors
            self._member = GroupMember(
                self._client,
                self.group_id,
                self._topics,
                group_instance_id=self.group_instance_id,
                on_partitions_revoked=self._on_partitions_revoked,
                on_partitions_assigned=self._on_partitions_assigned,
                on_partitions_lost=self._on_partitions_lost,
                on_error=self._fail,
                **options,
            )
            await self._member.start()
        except BaseException:
            await stop_consumer(self._consumer)
            await self._log.close()
            raise
        if self.enable_auto_commit:
            self._auto_commit_task = asyncio.create_task(
                self._auto_commit_loop(), name=f"auto-commit {self.group_id}"
            )

    async def _served_protocol(self) -> str:
        """The consumer protocol when the coordinator serves it, the classic one when not
        (a coordinator that does not know the data cluster's topics); a subscription by
        regular expression needs the consumer protocol either way."""
        versions = await self._client.api_versions()
        served = any(key.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT for key in versions.api_keys)
        if not served and self._topic_regex:
            raise ValueError(
                "subscribed_topic_regex needs the consumer protocol, which the coordinator "
                "does not serve (it has no data cluster's topics)"
            )
        if served:
            log.info(
                "group %s: the consumer group protocol (KIP-848), which the coordinator "
                "serves; its session timeout and heartbeat interval are the coordinator's",
                self.group_id,
            )
            return "consumer"
        log.info(
            "group %s: the classic group protocol (the coordinator does not serve the "
            "consumer group protocol: it does not know the data cluster's topics)",
            self.group_id,
        )
        return "classic"

    async def stop(self) -> None:
        """Commit (with auto-commit on), leave the group, and close. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._auto_commit_task is not None:
            self._auto_commit_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._auto_commit_task
        if self._member is not None:
            # Revokes first, which commits, then sends LeaveGroup (dynamic members).
            await self._member.close()
        await stop_consumer(self._consumer)
        await self._log.close()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> CoordinatedConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # Subscription and assignment

    def subscribe(
        self,
        topics: Iterable[str] = (),
        listener: ConsumerRebalanceListener | None = None,
        *,
        subscribed_topic_regex: str | None = None,
    ) -> None:
        """Subscribe to `topics` (replacing the subscription), with an aiokafka
        `ConsumerRebalanceListener` whose methods may be coroutines; with the consumer
        protocol, to the topics `subscribed_topic_regex` matches too (RE2, matched by the
        coordinator)."""
        if subscribed_topic_regex is not None and self.group_protocol == "classic":
            raise ValueError("subscribed_topic_regex needs the consumer protocol")
        self._topics = frozenset(topics)
        self._topic_regex = subscribed_topic_regex
        self._listener = listener
        if self._member is not None:
            if self.group_protocol == "consumer":
                self._member.subscribe(self._topics, topic_regex=self._topic_regex)
            else:
                self._member.subscribe(self._topics)

    def subscription(self) -> frozenset[str]:
        return self._topics

    def subscribed_topic_regex(self) -> str | None:
        return self._topic_regex

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned to this consumer (empty while rebalancing)."""
        return set(self._active)

    @property
    def member(self) -> GroupMember:
        """The group member (its id, generation or member epoch, leadership)."""
        if self._member is None:
            raise RuntimeError("the consumer is not started")
        return self._member

    @property
    def coordinator_client(self) -> CoordinatorClient:
        return self._client

    async def wait_for_assignment(self, timeout_s: float | None = None) -> set[TopicPartition]:
        """Wait until the group is stable and this consumer's partitions are ready."""
        await self.member.wait_for_assignment(timeout_s)
        return self.assignment()

    # Reading

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._failed.set()

    def _check(self) -> None:
        if self._closed:
            raise ConsumerStoppedError()
        if self._error is not None:
            raise self._error

    def _accept(self, record: ConsumerRecord[Any, Any]) -> bool:
        """Whether `record` may be handed out; if so, it is now consumed."""
        tp = TopicPartition(record.topic, record.partition)
        position = self._positions.get(tp)
        if tp not in self._active or position is None or record.offset < position:
            return False
        self._positions[tp] = record.offset + 1
        return True

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[Any, Any]:
        """The next record (of `partitions`, or of any assigned partition); waits for one.

        Raises:
            GroupMemberError: the membership ended on an error.
            NoOffsetForPartitionError: `auto_offset_reset="none"` and a partition has no
                committed offset.
            ConsumerStoppedError: the consumer was stopped.
        """
        while True:
            self._check()
            if self._active:
                # Buffered records first, without a task per record.
                fetched = await self._consumer.getmany(*partitions, timeout_ms=0, max_records=1)
                records = [record for batch in fetched.values() for record in batch]
                for record in records:
                    if self._accept(record):
                        return record
                if records:
                    continue
            record = await self._wait_for_record(partitions)
            if record is not None and self._accept(record):
                return record

    async def _wait_for_assignment_or_failure(self, timeout_s: float) -> None:
        waiters = {
            asyncio.ensure_future(self._assigned.wait()),
            asyncio.ensure_future(self._failed.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _wait_for_record(
        self, partitions: tuple[TopicPartition, ...]
    ) -> ConsumerRecord[Any, Any] | None:
        """The next record, or None if the consumer failed first."""
        getter = asyncio.ensure_future(self._consumer.getone(*partitions))
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({getter, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
            if not getter.done():
                getter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getter
        if getter.cancelled():
            return None
        return getter.result()

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Records by partition, waiting up to `timeout_ms` for some (aiokafka's getmany)."""
        self._check()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        if not self._active:
            # aiokafka waits for an assignment without a timeout; this waits at most
            # timeout_ms for ours.
            await self._wait_for_assignment_or_failure(timeout_ms / 1000)
            self._check()
            if not self._active:
                return {}
        fetched = await self._consumer.getmany(
            *partitions,
            timeout_ms=max(0, int((deadline - loop.time()) * 1000)),
            max_records=max_records,
        )
        result: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        for tp, records in fetched.items():
            accepted = [record for record in records if self._accept(record)]
            if accepted:
                result[tp] = accepted
        return result

    def __aiter__(self) -> CoordinatedConsumer:
        if self._closed:
            raise ConsumerStoppedError()
        return self

    async def __anext__(self) -> ConsumerRecord[Any, Any]:
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be handed out for `partition`."""
        if partition not in self._positions:
            raise ValueError(f"{partition} is not assigned to this consumer")
        return self._positions[partition]

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read `partition` from `offset` next (it counts as the consumed position)."""
        if partition not in self._active:
            raise ValueError(f"{partition} is not assigned to this consumer")
        self._consumer.seek(partition, offset)
        self._positions[partition] = offset

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last high watermark a Fetch reported for `partition`."""
        value: int | None = self._consumer.highwater(partition)
        return value

    def pause(self, *partitions: TopicPartition) -> None:
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._consumer.resume(*partitions)

    # Offsets

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit `offsets`, or by default the consumed position of every assigned
        partition, under this member's generation (or member epoch).

        Raises:
            CommitFailedError: the group rebalanced; the partitions will be reassigned.
            OffsetCommitError: some partitions were refused.
        """
        if offsets is None:
            # Every assigned partition, including those being revoked (so a listener's
            # on_partitions_revoked can commit them).
            offsets = dict(self._positions)
        await self._commit(offsets)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The committed offset of `partition` in this group, or None."""
        if self._member is not None:
            offsets = await self._member.fetch_committed([partition])
        else:
            offsets = await self._client.fetch_offsets(self.group_id, [partition])
        committed = offsets.get(partition)
        return None if committed is None else committed.offset

    async def _commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        async with self._commit_lock:
            wanted = {
                tp: value
                for tp, value in offsets.items()
                if self._committed.get(tp) != _offset_of(value)
            }
            if not wanted:
                return
            await self.member.commit_offsets(wanted)
            for tp, value in wanted.items():
                self._committed[tp] = _offset_of(value)

    async def _commit_consumed(self, partitions: Iterable[TopicPartition], why: str) -> None:
        offsets = {tp: self._positions[tp] for tp in partitions if tp in self._positions}
        try:
            await self._commit(offsets)
        except CommitFailedError as e:
            log.info("group %s: %s commit not possible: %s", self.group_id, why, e)
        except (ClientError, ApiError) as e:
            log.warning("group %s: %s commit failed: %s", self.group_id, why, e)

    async def _auto_commit_loop(self) -> None:
        interval_s = self.auto_commit_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if self._active:
                await self._commit_consumed(self._active, "auto")

    # Rebalance callbacks of the group member (whole assignments with the classic protocol,
    # the partitions that change with the consumer protocol: handled alike, partition by
    # partition)

    async def _on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._deactivate(partitions)
        if self.enable_auto_commit:
            await self._commit_consumed(partitions, "pre-revoke")
        await self._call_listener("on_partitions_revoked", partitions)
        self._unassign(partitions)

    async def _on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._deactivate(partitions)
        await self._call_listener("on_partitions_revoked", partitions)
        self._unassign(partitions)

    def _deactivate(self, partitions: frozenset[TopicPartition]) -> None:
        self._active -= partitions
        if not self._active:
            self._assigned.clear()

    def _unassign(self, partitions: frozenset[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
        # Paused rather than unassigned until the next assignment replaces them: aiokafka's
        # fetcher can lose the cancellation of a stop() that follows an assignment change
        # (see rpc.kafka_log._idle).
        self._consumer.pause(*(partitions & self._consumer.assignment()))

    async def _on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        member = self.member
        generation = member.generation_id
        backoff = ExponentialBackoff(100, 2000)
        attempt = 0
        while True:
            try:
                starts, committed = await self._starting_offsets(partitions)
                break
            except NoOffsetForPartitionError as e:
                self._fail(e)
                return
            except (ClientError, ApiError, OSError, KafkaError) as e:
                # Without a starting point nothing can be read; keep trying while the member
                # holds the partitions (heartbeats keep the membership meanwhile): its
                # generation lasts (classic), it is in the group (consumer protocol, whose
                # epoch moves on without taking them away).
                if self._closed or not _still_held(member, generation):
                    return
                log.warning(
                    "group %s: cannot find where to start %s: %s", self.group_id, partitions, e
                )
                await asyncio.sleep(backoff.backoff_ms(attempt) / 1000)
                attempt += 1
        if partitions:
            self._add_to_consumer(partitions, starts)
        self._positions.update(starts)
        self._committed.update(committed)
        self._active |= partitions
        if self._active:
            self._assigned.set()
        await self._call_listener("on_partitions_assigned", partitions)

    def _add_to_consumer(
        self, partitions: frozenset[TopicPartition], starts: Mapping[TopicPartition, int]
    ) -> None:
        """Fetch `partitions` from `starts` too, and the partitions kept from where they are:
        aiokafka's assignment is replaced whole, which forgets the positions it had (and
        its pauses: the application's are put back)."""
        kept = self._active
        paused = self._consumer.paused() & kept
        self._consumer.assign(sorted(kept | partitions))
        for tp in kept:
            self._consumer.seek(tp, self._positions[tp])
        for tp, offset in starts.items():
            self._consumer.seek(tp, offset)
        if paused:
            self._consumer.pause(*paused)

    async def _starting_offsets(
        self, partitions: frozenset[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        if not partitions:
            return {}, {}
        # A stable fetch, as Kafka's consumer always asks (KIP-447): an offset a transaction
        # committed is pending until its markers land; read before that, the partition would
        # start at the offset before it and hand out the transaction's input again. The
        # coordinator answers UNSTABLE_OFFSET_COMMIT meanwhile, and the caller retries.
        fetched = await self.member.fetch_committed(partitions, require_stable=True)
        committed = {tp: value.offset for tp, value in fetched.items()}
        starts = dict(committed)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            if self.auto_offset_reset == "none":
                raise NoOffsetForPartitionError(f"no committed offset for {sorted(missing)}")
            if self.auto_offset_reset == "earliest":
                starts.update(await self._log.beginning_offsets(missing))
            else:
                starts.update(await self._log.end_offsets(missing))
        return starts, committed

    async def _call_listener(self, method: str, partitions: frozenset[TopicPartition]) -> None:
        if self._listener is None:
            return
        result = getattr(self._listener, method)(set(partitions))
        if asyncio.iscoroutine(result):
            await result


def _still_held(member: GroupMember, generation: int) -> bool:
    """Whether the partitions handed to the member at `generation` are still its own."""
    if member.group_protocol == "consumer":
        return member.generation_id != -1
    return member.generation_id == generation


def _offset_of(value: int | OffsetAndMetadata) -> int:
    return value.offset if isinstance(value, OffsetAndMetadata) else value


_SECURITY_OPTIONS: Final = (
    "security_protocol",
    "ssl_context",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider",
    "api_version",
    "connections_max_idle_ms",
    "metadata_max_age_ms",
)


def _security_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The consumer options that also apply to the log reader (how to reach Kafka)."""
    return {name: value for name, value in options.items() if name in _SECURITY_OPTIONS}
