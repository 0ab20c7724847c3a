"""The coordinator log's appends, sent to Kafka as ProduceRequests the log writes itself.

aiokafka's producer was most of the cost of a commit: its sender task, the per-batch
futures and tasks and the request encoding in Python took about 38% of the server's time
per ten-partition OffsetCommit. This sender does only what the log needs. Each append
arrives as a finished record batch (built by aiokafka's C batch builder); every batch
waiting for the same broker leaves in one ProduceRequest (acks=all), with at most
`max_inflight_requests` requests on the way to a broker. Appends of many partitions then
share one request, as the writes of one partition share one batch in the runtime, and one
request costs the broker one round trip instead of one per partition. This module decides
what goes when and what an answer means for each append (Kafka's `Sender` and
`RecordAccumulator`); the requests and responses on the wire, and the connections that
carry them, are `produce_request`'s.

Ordering: one batch per partition is on the way at a time; a second append of the same
partition waits for the first to finish (the runtime never sends two, but the log's
contract does not depend on it). A batch is sent again after an error that proves it was
not written (the partition has no leader there, not enough replicas). With a producer id
(`idempotence`, which says why and how), a batch is also sent again, unchanged, after
a timeout, a lost connection or an error that leaves its fate unknown, until it is answered
or its delivery timeout passes: the broker writes it once. Without one, a lost connection
or a timeout fail the append, its fate unknown, and the runtime, which checks the offset of
its next append, reloads the partition if it was written after all. With a producer per
partition (`producer_fencing`) a batch goes again the same ways, but a failure that
would move the topic's producer to a new epoch stops the partition instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.api import AppendError, ReadyListener
from coordinator_server.storage.error_codes import (
    DUPLICATE_SEQUENCE_NUMBER,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    NETWORK_EXCEPTION,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from coordinator_server.storage.kafka.idempotence import (
    IdempotentProducer,
    ProducerIdSource,
    renew_producer_id,
)
from coordinator_server.storage.kafka.produce_request import (
    PRODUCE_VERSION,
    ProduceConnection,
    correlation_id_of,
    encode_produce_request,
    read_produce_response,
)
from coordinator_server.storage.kafka.producer_fencing import FENCED_ERRORS, PartitionProducers
from coordinator_server.storage.kafka.security import KafkaSecurityError

__all__ = ["Leader", "ProduceSender"]

log = logging.getLogger(__name__)

# The broker refused these batches before writing them: they may go again once the
# partition's leader is known again.
_NOT_WRITTEN = frozenset(
    {UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS}
)
# After these the batch may be in the log or not (the broker timed out waiting for its
# replicas, or lost its disk): sent again only with a producer id, which makes the broker
# drop the copy it has.
_FATE_UNKNOWN = frozenset(
    {REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR}
)
RECONNECT_BACKOFF_S = 0.1
METADATA_RETRY_BACKOFF_S = 0.1


@dataclass(frozen=True, slots=True)
class Leader:
    """Where a partition's leader is."""

    node_id: int
    host: str
    port: int


MetadataSource = Callable[[], Awaitable[dict[int, Leader]]]
"""Returns the leader of every partition of the topic that has one."""

Connect = Callable[
    [Callable[[], ProduceConnection], str, int],
    Awaitable[tuple[asyncio.Transport, ProduceConnection]],
]
"""Opens a connection to a broker for a protocol (secured as the log's settings say)."""


async def _plain_connect(
    protocol_factory: Callable[[], ProduceConnection], host: str, port: int
) -> tuple[asyncio.Transport, ProduceConnection]:
    return await asyncio.get_running_loop().create_connection(protocol_factory, host, port)


class _Append:
    __slots__ = ("assigned", "batch", "count", "deadline", "future", "partition")

    def __init__(
        self,
        partition: int,
        batch: bytes,
        count: int,
        future: asyncio.Future[int],
        deadline: float,
    ) -> None:
        self.partition = partition
        self.batch = batch
        self.count = count
        self.future = future
        # When the append fails unless it was answered: its delivery timeout.
        self.deadline = deadline
        # The batch took its producer fields and sequence as it first left: from then on it
        # may be in the log, and goes again only as it is.
        self.assigned = False


class _Request:
    __slots__ = ("appends", "correlation_id", "deadline")

    def __init__(self, correlation_id: int, appends: dict[int, _Append], deadline: float) -> None:
        self.correlation_id = correlation_id
        self.appends = appends
        self.deadline = deadline


class _Node:
    """What is queued for one broker, what is on the way to it, and its connection."""

    def __init__(self, sender: ProduceSender, leader: Leader) -> None:
        self.sender = sender
        self.node_id = leader.node_id
        self.host = leader.host
        self.port = leader.port
        self.link: ProduceConnection | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.connect_failures = 0
        self.pending: deque[_Append] = deque()
        self.inflight: deque[_Request] = deque()

    def describe(self) -> str:
        return f"node {self.node_id} ({self.host}:{self.port})"

    def connect(self) -> None:
        if self.link is None and self.connecting is None and not self.sender.closed:
            self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            _, link = await asyncio.wait_for(
                self.sender.connect(lambda: ProduceConnection(self), self.host, self.port),
                self.sender.request_timeout_s,
            )
        except KafkaSecurityError as error:
            # Refused (credentials changed, a certificate no longer trusted): said plainly,
            # and tried again, less often the longer it lasts (up to every 0.8 s; Kafka's
            # reconnect.backoff.max.ms is 1 s); the appends time out meanwhile.
            self.connect_failures += 1
            if self.connect_failures & (self.connect_failures - 1) == 0:
                log.error(
                    "cannot connect to %s for produce requests (%d times): %s",
                    self.describe(),
                    self.connect_failures,
                    error,
                )
            await asyncio.sleep(RECONNECT_BACKOFF_S * 2 ** min(self.connect_failures - 1, 3))
            self.connecting = None
            if self.pending:
                self.connect()
            return
        except (OSError, TimeoutError) as error:
            log.warning("cannot connect to %s for produce requests: %r", self.describe(), error)
            # The leader may have moved; either way, try again shortly while anything waits.
            await asyncio.sleep(RECONNECT_BACKOFF_S)
            self.connecting = None
            self.sender.refresh_metadata()
            if self.pending:
                self.connect()
            return
        self.connecting = None
        if self.sender.closed:
            if link.transport is not None:
                link.transport.abort()
            return
        self.connect_failures = 0
        self.link = link
        self.sender.schedule_flush()

    def send(self) -> None:
        """Send what is queued, in as few requests as the in-flight limit allows."""
        link = self.link
        if link is None or link.transport is None:
            self.connect()
            return
        sender = self.sender
        producer = sender.producer
        owners = sender.owners
        while self.pending and len(self.inflight) < sender.max_inflight_requests:
            appends: dict[int, _Append] = {}
            held: list[_Append] = []
            size = 0
            pending = self.pending
            while pending:
                append = pending[0]
                if append.future.done():
                    # Its caller dropped it (the runtime threw the partition's state away):
                    # it must not be written now.
                    sender.abandon(pending.popleft())
                    continue
                owner = sender.busy.get(append.partition)
                if append.partition in appends or (owner is not None and owner is not append):
                    # One batch of a partition on the way at a time, in the order they came.
                    held.append(pending.popleft())
                    continue
                if appends and size + len(append.batch) > sender.max_request_bytes:
                    break
                if not append.assigned:
                    if owners is not None:
                        refusal = owners.refusal(append.partition)
                        if refusal is not None:
                            # Released, or stopped while the append waited.
                            sender.give_up(pending.popleft(), refusal)
                            continue
                        append.batch = owners.assign(append.partition, append.batch, append.count)
                        append.assigned = True
                    elif producer is not None:
                        if not producer.prepare():
                            # No sequence until a new producer id comes.
                            sender.renew_producer_id()
                            held.append(pending.popleft())
                            continue
                        append.batch = producer.assign(append.partition, append.batch, append.count)
                        append.assigned = True
                pending.popleft()
                appends[append.partition] = append
                sender.busy[append.partition] = append
                size += len(append.batch)
            pending.extendleft(reversed(held))
            if not appends:
                return
            request = _Request(sender.next_correlation_id(), appends, sender.deadline())
            self.inflight.append(request)
            link.transport.write(sender.encode(request))

    def response(self, link: ProduceConnection, payload: bytes) -> None:
        if link is not self.link or not self.inflight:
            raise ValueError("a response nobody asked for")
        correlation_id = correlation_id_of(payload)
        request = self.inflight[0]
        if correlation_id != request.correlation_id:
            raise ValueError(
                f"correlation id {correlation_id} where {request.correlation_id} was due"
            )
        self.inflight.popleft()
        sender = self.sender
        # Before the appends complete, so that nothing they start flushes sooner.
        sender.schedule_flush(sender.answer_turns)
        sender.finish(request, payload)
        # Room on the way again: the writers that held their batches for it hand them over
        # now; they leave with what the answered callers send next (see `answer_turns`).
        sender.notify_ready()

    def connection_lost(self, link: ProduceConnection, exc: Exception | None) -> None:
        if link is not self.link:
            return
        self.link = None
        inflight, self.inflight = self.inflight, deque()
        if inflight:
            log.warning(
                "the produce connection to %s closed with %d requests unanswered: %r",
                self.describe(),
                len(inflight),
                exc,
            )
        error = AppendError(
            REQUEST_TIMED_OUT,
            f"the connection to {self.describe()} closed before the broker answered",
        )
        if self.sender.idempotent and not self.sender.closed:
            # Sent again as they are, first, in their order: the broker writes each once.
            again = [a for request in inflight for a in self.sender.retry_or_fail(request, error)]
            self.pending.extendleft(reversed(again))
        else:
            for request in inflight:
                self.sender.fail_request(request, error)
        if not self.sender.closed:
            self.sender.refresh_metadata()
            self.sender.notify_ready()
            if self.pending:
                self.connect()

    def close(self) -> None:
        if self.connecting is not None:
            self.connecting.cancel()
            self.connecting = None
        if self.link is not None and self.link.transport is not None:
            self.link.transport.abort()


class ProduceSender:
    """Sends record batches to the partitions of one topic; see the module's docstring."""

    def __init__(
        self,
        topic: str,
        metadata: MetadataSource,
        *,
        client_id: str,
        request_timeout_ms: int,
        max_inflight_requests: int,
        max_request_bytes: int,
        connect: Connect = _plain_connect,
        produce_version: int = PRODUCE_VERSION,
        producer: IdempotentProducer | None = None,
        new_producer_id: ProducerIdSource | None = None,
        owners: PartitionProducers | None = None,
        delivery_timeout_ms: int | None = None,
        answer_turns: int = 0,
    ) -> None:
        """`producer` (with `new_producer_id`, where new ids come from) makes appends
        idempotent with one producer for the topic; `owners` instead, with a producer per
        partition that the log acquires (`producer_fencing`). `delivery_timeout_ms`
        (at least, and by default, the request timeout) bounds how long an append is sent
        again before it fails. After a response the next
        request waits `answer_turns` more turns of the event loop: the turns the process
        takes to answer the writes the response commits, so that the writes those answers
        bring join that request (the server says how many; the log alone cannot know)."""
        if answer_turns < 0:
            raise ValueError("answer_turns must not be negative")
        if producer is not None and owners is not None:
            raise ValueError("one producer for the topic, or one per partition: not both")
        if max_inflight_requests < 1:
            raise ValueError("max_inflight_requests must be at least 1")
        self.connect = connect
        if not 3 <= produce_version <= 8:
            raise ValueError(f"Produce v{produce_version} is not one this sender speaks")
        delivery_timeout_ms = delivery_timeout_ms or request_timeout_ms
        if delivery_timeout_ms < request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be at least request_timeout_ms")
        self.topic = topic
        self._topic_bytes = topic.encode()
        self._metadata = metadata
        self._client_id = client_id.encode()
        self.request_timeout_ms = request_timeout_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.delivery_timeout_ms = delivery_timeout_ms
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_inflight_requests = max_inflight_requests
        self.max_request_bytes = max_request_bytes
        self.answer_turns = answer_turns
        self.produce_version = produce_version
        self.producer = producer
        self.owners = owners
        self._dropping = False
        self._new_producer_id = new_producer_id
        self._renewing: asyncio.Task[None] | None = None
        # Appends sent again after a timeout, a lost connection or a retriable error (for
        # tests and the logs).
        self.resent = 0
        self.closed = False
        # The append that holds each partition's one place on the way (sent, or waiting to
        # be sent again after an error that proves it was not written).
        self.busy: dict[int, _Append] = {}
        self._leaders: dict[int, _Node] = {}
        self._nodes: dict[int, _Node] = {}
        # Appends of partitions whose leader is not known (yet, or any more).
        self._unrouted: deque[_Append] = deque()
        self._correlation_id = 0
        self._flush_scheduled = False
        self._flush_turns = 0
        self._refreshing: asyncio.Task[None] | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ready_listener: ReadyListener | None = None

    async def start(self) -> None:
        """Learn the partitions' leaders; a missing leader is looked up again when needed."""
        self._loop = asyncio.get_running_loop()
        self._route(await self._metadata())

    def submit(self, partition: int, batch: bytes, count: int) -> asyncio.Future[int]:
        """Queue one record batch of `count` records; the future gets the offset after it
        once the broker has it (acks=all), or an AppendError."""
        loop = self._loop
        assert loop is not None, "start() first"
        future: asyncio.Future[int] = loop.create_future()
        if self.closed:
            future.set_exception(AppendError(UNKNOWN_SERVER_ERROR, "the Kafka log is closed"))
            return future
        # An append that is not idempotent is never sent again after a timeout: its delivery
        # timeout is the request's.
        timeout_s = self.delivery_timeout_s if self.idempotent else self.request_timeout_s
        append = _Append(partition, batch, count, future, loop.time() + timeout_s)
        node = self._leaders.get(partition)
        if node is None:
            self._unrouted.append(append)
            self.refresh_metadata()
        else:
            node.pending.append(append)
            self.schedule_flush()
        if self._sweep is None:
            self._sweep = loop.call_later(self._sweep_interval(), self._expire)
        return future

    @property
    def idempotent(self) -> bool:
        producer = self.producer
        return self.owners is not None or (producer is not None and producer.enabled)

    def next_stamp(self, partition: int) -> tuple[int, int, int]:
        """The producer id, epoch and base sequence to build the partition's next batch
        with: those it leaves with unless something changes first."""
        if self.owners is not None:
            return self.owners.next_stamp(partition)
        producer = self.producer
        if producer is None:
            return -1, -1, -1
        return producer.next_stamp(partition)

    def drop_refused(self) -> None:
        """Fail the queued appends that have not left and whose partition's producer is
        gone (released, or stopped): they would only fail when their turn came."""
        self._dropping = False
        owners = self.owners
        if owners is None or self.closed:
            return
        for queue in [*(node.pending for node in self._nodes.values()), self._unrouted]:
            waiting = list(queue)
            queue.clear()
            for append in waiting:
                refusal = None if append.assigned else owners.refusal(append.partition)
                if refusal is None:
                    queue.append(append)
                else:
                    self.give_up(append, refusal)

    def backlogged(self, partition: int) -> bool:
        """True while the partition's broker has all the requests it may have on the way:
        a batch handed over now would wait for the next one anyway."""
        node = self._leaders.get(partition)
        return node is not None and len(node.inflight) >= self.max_inflight_requests

    def notify_ready(self) -> None:
        listener = self.ready_listener
        if listener is not None:
            try:
                listener()
            except Exception:
                log.exception("the ready listener failed")

    async def close(self) -> None:
        self.stop(AppendError(UNKNOWN_SERVER_ERROR, "the Kafka log closed"))
        refreshing = self._refreshing
        if refreshing is not None and refreshing is not asyncio.current_task():
            with contextlib.suppress(BaseException):
                await refreshing

    def stop(self, error: AppendError) -> None:
        """Fail every append queued or on the way with `error`, close the connections and
        take no more appends (they fail at once); `close()` still waits for the rest."""
        if self.closed:
            return
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._refreshing is not None:
            self._refreshing.cancel()
        if self._renewing is not None:
            self._renewing.cancel()
        for node in self._nodes.values():
            node.close()
            for request in node.inflight:
                self.fail_request(request, error)
            node.inflight.clear()
            for append in node.pending:
                _fail(append, error)
            node.pending.clear()
        for append in self._unrouted:
            _fail(append, error)
        self._unrouted.clear()

    # For the nodes.

    def next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def deadline(self) -> float:
        loop = self._loop
        assert loop is not None
        return loop.time() + self.request_timeout_s

    def schedule_flush(self, turns: int = 0) -> None:
        """Send what is queued in the next turn of the event loop, or `turns` turns after
        it (a flush already scheduled waits as long); appends made meanwhile leave
        together."""
        if turns > self._flush_turns:
            self._flush_turns = turns
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def encode(self, request: _Request) -> bytes:
        return encode_produce_request(
            self.produce_version,
            request.correlation_id,
            self._client_id,
            self._topic_bytes,
            self.request_timeout_ms,
            ((partition, append.batch) for partition, append in request.appends.items()),
        )

    def finish(self, request: _Request, payload: bytes) -> None:
        """Settle a request's appends from its ProduceResponse (v3 to v8)."""
        appends = request.appends
        for partition, error_code, base_offset, message in read_produce_response(
            payload, self.produce_version
        ):
            append = appends.pop(partition, None)
            if append is None:
                continue
            if error_code == ErrorCode.NONE or (
                error_code == DUPLICATE_SEQUENCE_NUMBER and base_offset >= 0 and append.assigned
            ):
                # A duplicate is a copy of a batch the broker has, at that offset.
                self.release(append)
                if not append.future.done():
                    append.future.set_result(base_offset + append.count)
            else:
                self._refused(append, error_code, message)
        for append in appends.values():
            self.give_up(
                append,
                AppendError(UNKNOWN_SERVER_ERROR, "the broker did not answer for the partition"),
            )
        appends.clear()

    def _refused(self, append: _Append, error_code: int, message: str | None) -> None:
        """What a batch the broker answered with `error_code` becomes."""
        described = f"error {error_code}" + (f" ({message})" if message else "")
        if self.closed:
            self.give_up(
                append, AppendError(error_code, f"the broker refused the batch: {described}")
            )
            return
        if error_code in _NOT_WRITTEN:
            # Keeps the partition's place: nothing of it may overtake this batch.
            self._reroute(append, error_code)
            return
        if append.assigned and self.idempotent:
            if error_code in _FATE_UNKNOWN:
                self.resent += 1
                self._reroute(append, error_code)
                return
            owners, producer = self.owners, self.producer
            if owners is not None and error_code in FENCED_ERRORS:
                # Never a new epoch here: the partition stops until it is acquired again.
                self.give_up(append, owners.fenced(append.partition, append.batch, described))
                return
            if producer is not None and producer.refused(append.partition, error_code, described):
                # Not written: the batch goes again with the new epoch or id it gets.
                self.renew_producer_id()
                append.assigned = False
                self.resent += 1
                self._reroute(append, error_code)
                return
        if error_code == DUPLICATE_SEQUENCE_NUMBER:
            # Written, but the broker does not say where: failed as a timeout is (the
            # runtime's offset check finds the records), not as an error it passes on.
            error_code = REQUEST_TIMED_OUT
            described = "a duplicate of a batch the broker has, at an offset it did not give"
        self.give_up(append, AppendError(error_code, f"the broker refused the batch: {described}"))

    def retry_or_fail(self, request: _Request, error: AppendError) -> list[_Append]:
        """After a request's connection closed unanswered (idempotent appends only): the
        appends to send again; those past their delivery timeout, or dropped by their
        caller, fail (their fate unknown)."""
        assert self._loop is not None
        now = self._loop.time()
        again: list[_Append] = []
        for append in request.appends.values():
            if append.future.done() or append.deadline <= now:
                self.give_up(append, error)
            else:
                again.append(append)
        request.appends.clear()
        self.resent += len(again)
        return again

    def fail_request(self, request: _Request, error: AppendError) -> None:
        for append in request.appends.values():
            self.give_up(append, error)
        request.appends.clear()

    def give_up(self, append: _Append, error: AppendError) -> None:
        """Fail the append; one that left may be in the log (see unresolved())."""
        self.release(append)
        if append.assigned and self._unresolved(append, error) and not error.stops_partition:
            # Its own error: one error may fail a whole request's appends.
            error = AppendError(error.error_code, str(error), stops_partition=True)
        _fail(append, error)

    def abandon(self, append: _Append) -> None:
        """Forget an append its caller dropped before it left (again)."""
        self.release(append)
        if append.assigned:
            self._unresolved(append, None)

    def _unresolved(self, append: _Append, error: AppendError | None) -> bool:
        """A batch that left failed, or was dropped (`error` None) before its answer: it may
        be in the log. One producer for the topic moves to a new epoch; a partition's own
        producer stops the partition instead. True if the partition stopped now."""
        owners = self.owners
        if owners is None:
            if self.producer is not None:
                self.producer.unresolved()
            return False
        if self.closed:
            # Closing fails what is on the way; the partitions' state goes with the log.
            return False
        error = error or AppendError(REQUEST_TIMED_OUT, "dropped by its caller on its way")
        stopped = owners.unresolved(append.partition, append.batch, error)
        if stopped and not self._dropping and self._loop is not None:
            # What waits behind it fails now, in a turn of its own: this may run while a
            # queue is being walked.
            self._dropping = True
            self._loop.call_soon(self.drop_refused)
        return stopped

    def release(self, append: _Append) -> None:
        if self.busy.get(append.partition) is append:
            del self.busy[append.partition]
            # A later batch of the partition may be waiting for this one.
            self.schedule_flush()

    def renew_producer_id(self) -> None:
        """Ask for a new producer id (once at a time) while the producer needs one."""
        if (
            self._renewing is None
            and not self.closed
            and self._loop is not None
            and self.producer is not None
            and self.producer.needs_new_id
            and self._new_producer_id is not None
        ):
            self._renewing = self._loop.create_task(self._renew())

    def refresh_metadata(self) -> None:
        if self._refreshing is None and not self.closed and self._loop is not None:
            self._refreshing = self._loop.create_task(self._refresh())

    # Internals.

    def _flush(self) -> None:
        if self._flush_turns > 0 and self._loop is not None:
            self._flush_turns -= 1
            self._loop.call_soon(self._flush)
            return
        self._flush_scheduled = False
        for node in self._nodes.values():
            if node.pending:
                node.send()

    def _reroute(self, append: _Append, error_code: int) -> None:
        node = self._leaders.pop(append.partition, None)
        log.info(
            "partition %d of %s: error %d from %s; looking up its leader again",
            append.partition,
            self.topic,
            error_code,
            "?" if node is None else node.describe(),
        )
        self._unrouted.append(append)
        self.refresh_metadata()

    async def _refresh(self) -> None:
        try:
            while not self.closed:
                try:
                    leaders = await asyncio.wait_for(self._metadata(), self.request_timeout_s)
                except Exception as error:
                    if self.closed:
                        # The log stopped (a lost topic says so itself) or is closing.
                        return
                    log.warning("cannot read the leaders of %s: %r", self.topic, error)
                    await asyncio.sleep(METADATA_RETRY_BACKOFF_S)
                    if self._unrouted:
                        continue
                    return
                self._route(leaders)
                if not self._unrouted:
                    return
                # Some partitions still have no leader: ask again shortly (their appends
                # fail when their deadline passes).
                await asyncio.sleep(METADATA_RETRY_BACKOFF_S)
        finally:
            if asyncio.current_task() is self._refreshing:
                self._refreshing = None

    async def _renew(self) -> None:
        assert self.producer is not None and self._new_producer_id is not None
        try:
            await renew_producer_id(
                self.producer, self._new_producer_id, lambda: not self.closed, self.topic
            )
        finally:
            if asyncio.current_task() is self._renewing:
                self._renewing = None
            # What waited for the id goes now.
            self.schedule_flush()

    def _route(self, leaders: dict[int, Leader]) -> None:
        for leader in leaders.values():
            node = self._nodes.get(leader.node_id)
            if node is not None and (node.host, node.port) != (leader.host, leader.port):
                # The broker moved: what was on the way to the old address is lost with it.
                node.close()
                node.host, node.port = leader.host, leader.port
            elif node is None:
                self._nodes[leader.node_id] = _Node(self, leader)
        self._leaders = {
            partition: self._nodes[leader.node_id] for partition, leader in leaders.items()
        }
        unrouted, self._unrouted = self._unrouted, deque()
        for node in self._nodes.values():
            # Appends queued for a broker that no longer leads their partition go elsewhere.
            if any(self._leaders.get(a.partition) is not node for a in node.pending):
                unrouted.extend(node.pending)
                node.pending.clear()
        for append in unrouted:
            node = self._leaders.get(append.partition)
            if node is None:
                self._unrouted.append(append)
            else:
                node.pending.append(append)
        self.schedule_flush()

    def _sweep_interval(self) -> float:
        return max(self.request_timeout_s / 8, 0.01)

    def _expire(self) -> None:
        """Fail what waited past its deadline; a broker that does not answer in time loses
        its connection (its late answers could not be told apart from new ones)."""
        self._sweep = None
        loop = self._loop
        if loop is None or self.closed:
            return
        now = loop.time()
        outstanding = False
        for node in self._nodes.values():
            if node.inflight and node.inflight[0].deadline <= now and node.link is not None:
                # Losing the link fails what is in flight on it.
                node.link.abort(f"no answer within {self.request_timeout_ms} ms")
            node.pending = _expire_appends(node.pending, now, self)
            outstanding = outstanding or bool(node.pending or node.inflight)
        self._unrouted = _expire_appends(self._unrouted, now, self)
        if outstanding or self._unrouted:
            self._sweep = loop.call_later(self._sweep_interval(), self._expire)


def _expire_appends(appends: deque[_Append], now: float, sender: ProduceSender) -> deque[_Append]:
    if all(append.deadline > now for append in appends):
        return appends
    kept: deque[_Append] = deque()
    for append in appends:
        if append.deadline <= now:
            # Not on the way: never sent, refused unwritten, or waiting to go again.
            sender.give_up(append, AppendError(REQUEST_TIMED_OUT, "produce timed out"))
        else:
            kept.append(append)
    return kept


def _fail(append: _Append, error: AppendError) -> None:
    if not append.future.done():
        append.future.set_exception(error)
