"""The coordinator log in a compacted Kafka topic.

This is the production deployment and Kafka's own design: the topic plays the part of
`__consumer_offsets`, one coordinator partition per topic partition. An append is one
record batch produced with acks=all (by `produce.ProduceSender`, which puts the
batches of many partitions in one ProduceRequest); the log end offset it returns is the
batch's base offset plus its record count. A load replays a partition from its start to the
high watermark the first Fetch response reports (`load.PartitionLoad`, which keeps going
on a slow broker), or from where a standby stopped; standbys follow it (`follow`).
Topic administration and loads go through aiokafka; metadata requests are the log's own,
which never create the topic (`metadata`).

The topic's partition count is the one the log found or created at start. Whenever the
topic's metadata is read (every `metadata_max_age_ms`, and whenever appends or loads look up
leaders), a topic that is gone or has another count stops the log for good: appends and
loads fail, the failure listener hears why (the server stops every partition and turns
unready), and nothing is read from or written to the topic again until a restart. Serving
from a topic that came back empty, or from partitions that no longer hold their groups,
would answer from lost or misplaced state; only an operator can tell which.

Appends are idempotent (`idempotence`): at start the log asks the broker for a producer
id (InitProducerId) and for the Produce versions it speaks (ApiVersions), and every batch
carries the id, its epoch and a sequence, so a batch sent again after a timeout or a lost
connection is written once. An append is sent again for up to its delivery timeout
(`DELIVERY_TIMEOUT_FACTOR` request timeouts) before it fails.

Ownership fencing (opt in: `ownership_transactional_id_prefix`; without it the log runs as
above). For a cluster of coordinators, each owning some partitions: the log takes no producer
id at start; `acquire(partition)` takes one for the partition, with the transactional id
`<prefix><partition>`, at the Kafka cluster's transaction coordinator, which fences every
earlier epoch of that id, and returns the epoch; `release(partition)` forgets it. Appends go
as ordinary idempotent batches with the partition's producer id and epoch; the log never
moves an epoch by itself, and a fenced or failed batch stops the partition until the next
acquire. `producer_fencing` says how, with which errors, what the Kafka cluster must
allow, and where the brokers' fence ends.

Limits to know about:
- An append that fails after its delivery timeout, or any append to a broker that hands
  out no producer ids (tansu: the log then writes batches without one, and says so once),
  may still have been written. The log then ends somewhere other than where the caller
  expects; the runtime detects that from the offset the next append returns (Kafka's
  log/state divergence check) and reloads. With a producer id, the next append's new epoch
  makes the broker refuse the lost batch from then on (see `idempotence`).
- `high_watermark(partition)` is what this process last learned: from its own appends,
  or from the Fetch responses of a load. It is 0 for a partition it has not touched. A load
  that finds a partition ending below it stops the log as a lost topic does: a topic
  deleted and created again with the same partition count shows only that way (Metadata
  before v10 carries no topic id).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.storage.api import (
    AppendError,
    HighWatermarkListener,
    LoadError,
    LoadSummary,
    LogFailureListener,
    RawRecord,
    ReadyListener,
    RecordSink,
)
from coordinator_server.storage.error_codes import (
    MESSAGE_TOO_LARGE,
    NOT_COORDINATOR,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from coordinator_server.storage.kafka.follow import KafkaFollower
from coordinator_server.storage.kafka.idempotence import (
    INIT_PRODUCER_ID_API_KEY,
    IdempotentProducer,
    ProducerIdAndEpoch,
    ProducerIdError,
    broker_api_versions,
    choose_produce_version,
    init_producer_id,
)
from coordinator_server.storage.kafka.load import (
    FETCH_MAX_WAIT_MS,
    MAX_TIMEOUT_FACTOR,
    PartitionLoad,
    unreadable_partitions,
)
from coordinator_server.storage.kafka.metadata import (
    TopicLostError,
    TopicMetadata,
    TopicMetadataError,
    TopicWatcher,
    fetch_topic_metadata,
)
from coordinator_server.storage.kafka.produce import Leader, ProduceSender
from coordinator_server.storage.kafka.producer_fencing import (
    OwnershipError,
    PartitionProducers,
    init_transactional_producer_id,
)
from coordinator_server.storage.kafka.sasl import KafkaConnector
from coordinator_server.storage.kafka.security import KafkaSecurity, KafkaSecurityError
from coordinator_server.storage.kafka.topic import (
    KafkaLogError,
    OffsetsTopic,
    ensure_topic,
    offsets_topic_configs,
)

__all__ = ["KafkaLog", "KafkaLogError", "OwnershipError", "offsets_topic_configs"]

log = logging.getLogger(__name__)

# Between two checks that the cluster can fence partitions, while it does not answer.
_CHECK_RETRY_S = 1.0

T = TypeVar("T")

# Tries of each step of the start, and the back-off between them (times the attempt).
START_ATTEMPTS = 4
START_RETRY_BACKOFF_S = 0.25
START_RETRY_BACKOFF_MAX_S = 2.0
START_WARNING_INTERVAL_S = 10.0
# After failed metadata requests, how often to check whether the brokers refuse us.
REFUSAL_CHECK_S = 10.0
# Room for the request and batch headers around a batch of max_batch_bytes.
PRODUCE_REQUEST_OVERHEAD_BYTES = 64 * 1024
# Record batches as an idempotent producer writes them: magic 2, no compression, not
# transactional; the producer id, epoch and base sequence come from the sender.
BATCH_MAGIC = 2
NO_COMPRESSION = 0
NOT_TRANSACTIONAL = 0
# An append is sent again (after timeouts, lost connections, errors that leave its fate
# unknown) for this many request timeouts before it fails: long enough to outlast a broker
# that stalls for a few request timeouts (a long GC pause, a leader moving) without a
# reload, short enough that a partition whose broker is gone stops within seconds.
# Kafka's producer allows four (delivery.timeout.ms 120 s, request.timeout.ms 30 s). The
# cost: while an append is being sent again, the partition's next writes wait behind it in
# the runtime (its parked writes time out after the write timeout meanwhile).
DELIVERY_TIMEOUT_FACTOR = 3


class KafkaLog:
    """A CoordinatorLog (and its PartitionWriter and CoordinatorLoader) in a Kafka topic."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        num_partitions: int,
        replication_factor: int,
        *,
        request_timeout_ms: int = 5000,
        client_id: str = "coordinator-server",
        max_batch_bytes: int = 1_048_576,
        max_concurrent_loads: int = 16,
        max_inflight_produce_requests: int = 1,
        metadata_max_age_ms: int = 30000,
        security: KafkaSecurity | None = None,
        idempotent: bool = True,
        answer_turns: int = 0,
        ownership_transactional_id_prefix: str | None = None,
    ) -> None:
        """`security`: how every connection to the cluster is secured (PLAINTEXT by
        default). `idempotent` False writes batches without a producer id, as a broker that
        hands out none gets them (for tests and measurements). `answer_turns`: the turns of
        the event loop the process takes to answer the writes a produce response commits;
        the next ProduceRequest waits for them (see `ProduceSender`).
        `ownership_transactional_id_prefix` turns on ownership fencing: no producer for the
        log, a producer per partition from `acquire` (transactional id: the prefix and the
        partition number) instead; see `producer_fencing`."""
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        if replication_factor < 1:
            raise ValueError(f"replication_factor must be at least 1, got {replication_factor}")
        if max_concurrent_loads < 1:
            raise ValueError(f"max_concurrent_loads must be at least 1, got {max_concurrent_loads}")
        if max_inflight_produce_requests < 1:
            raise ValueError(
                "max_inflight_produce_requests must be at least 1, "
                f"got {max_inflight_produce_requests}"
            )
        if request_timeout_ms <= FETCH_MAX_WAIT_MS:
            raise ValueError(f"request_timeout_ms must exceed {FETCH_MAX_WAIT_MS}")
        if metadata_max_age_ms < 1:
            raise ValueError(f"metadata_max_age_ms must be positive, got {metadata_max_age_ms}")
        if ownership_transactional_id_prefix is not None:
            if not ownership_transactional_id_prefix:
                raise ValueError("ownership_transactional_id_prefix must not be empty")
            if not idempotent:
                # Fencing is the brokers' check of the producer id and epoch a batch carries.
                raise ValueError(
                    "ownership_transactional_id_prefix needs idempotent appends: a batch "
                    "without a producer id cannot be fenced"
                )
        self._bootstrap_servers = bootstrap_servers
        self._security = security or KafkaSecurity()
        # Made at start: reading the TLS files may fail, and says why there.
        self._connector: KafkaConnector | None = None
        self._client_options: dict[str, object] = {}
        self._topic = topic
        self._configured_partitions = num_partitions
        self._num_partitions = num_partitions
        self._replication_factor = replication_factor
        self._request_timeout_ms = request_timeout_ms
        # What a slow broker may take for a load's fetch, the start's bootstrap or a new
        # topic's leaders.
        self._longest_timeout_ms = request_timeout_ms * MAX_TIMEOUT_FACTOR
        self._client_id = client_id
        self._max_batch_bytes = max_batch_bytes
        self._max_inflight_produce_requests = max_inflight_produce_requests
        self._idempotent = idempotent
        self._answer_turns = answer_turns
        self._ownership_prefix = ownership_transactional_id_prefix
        # Made at start, when the partition count is known.
        self._owners: PartitionProducers | None = None
        # One per partition acquired (bounded by the partition count): acquires of one
        # partition run one at a time.
        self._acquiring: dict[int, asyncio.Lock] = {}
        self._api_versions: dict[int, tuple[int, int]] = {}
        self._sender: ProduceSender | None = None
        self._started = False
        self._closed = False
        # Whether a step of the start got an answer: from then on a slow broker is waited for.
        self._cluster_answered = False
        self._next_refusal_check = 0.0
        self._listener: HighWatermarkListener | None = None
        self._ready_listener: ReadyListener | None = None
        self._high_watermarks: dict[int, int] = {}
        self._load_slots = asyncio.Semaphore(max_concurrent_loads)
        self._loader_lock = asyncio.Lock()
        self._load_client: AIOKafkaClient | None = None
        self._watcher = TopicWatcher(
            topic, self._fetch_metadata, self._stop_for_good, metadata_max_age_ms / 1000
        )
        self._follower = self._new_follower("follower")
        # Followers with connections of their own (`new_follower`), closed with the log.
        self._more_followers: list[KafkaFollower] = []
        self._failure_listener: LogFailureListener | None = None
        # Loads in progress now, and the most there have been at once (for tests).
        self.loads_running = 0
        self.most_loads_running = 0

    # CoordinatorLog

    @property
    def num_partitions(self) -> int:
        """The topic's real partition count once started (the configured one before)."""
        return self._num_partitions

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def writer(self) -> KafkaLog:
        return self

    @property
    def loader(self) -> KafkaLog:
        return self

    @property
    def follower(self) -> KafkaFollower:
        return self._follower

    def new_follower(self, role: str) -> KafkaFollower:
        """A follower with a client of its own, named after `role`: the broker answers one
        connection's requests in order, so a reader that must not wait behind the standbys'
        long-polled Fetches (the security image's) takes its own."""
        follower = self._new_follower(role)
        self._more_followers.append(follower)
        return follower

    def _new_follower(self, role: str) -> KafkaFollower:
        async def new_client() -> AIOKafkaClient:
            return await self._following(role)

        return KafkaFollower(
            self._topic,
            new_client=new_client,
            metadata=self._watcher.refresh,
            stopped=lambda: self._watcher.lost,
            request_timeout_ms=self._request_timeout_ms,
        )

    @property
    def failure(self) -> str | None:
        """Why the log stopped for good (its topic is gone or resized), or None."""
        return self._watcher.lost

    def register_failure_listener(self, listener: LogFailureListener) -> None:
        self._failure_listener = listener

    async def start(self) -> None:
        if self._started or self._closed:
            raise RuntimeError("a KafkaLog starts once")
        self._started = True
        try:
            security = self._security
            self._connector = connector = KafkaConnector(security, self._client_id)
            if not security.is_plaintext:
                self._client_options = security.aiokafka_options(connector.ssl_context)
                # Settings that cannot work fail the start here, with why, not as a cluster
                # that cannot be reached.
                await self._at_start(self._check_security)
            self._num_partitions = await self._at_start(self._ensure_topic)
            self._watcher.start(self._num_partitions)
            produce_version, producer = await self._at_start(self._producer_identity)
            if self._ownership_prefix is not None:
                self._owners = PartitionProducers(self._topic, self._num_partitions)
            sender = ProduceSender(
                self._topic,
                self._leaders,
                client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms,
                max_inflight_requests=self._max_inflight_produce_requests,
                max_request_bytes=self._max_batch_bytes + PRODUCE_REQUEST_OVERHEAD_BYTES,
                connect=connector.connect,
                produce_version=produce_version,
                producer=producer,
                new_producer_id=self._new_producer_id,
                owners=self._owners,
                delivery_timeout_ms=self._request_timeout_ms * DELIVERY_TIMEOUT_FACTOR,
                answer_turns=self._answer_turns,
            )
            sender.ready_listener = self._ready_listener
            await self._at_start(sender.start)
            self._sender = sender
        except BaseException:
            await self.close()
            raise

    async def _check_security(self) -> None:
        """Connect to a bootstrap server and authenticate, as the produce path does:
        KafkaSecurityError (not retried) when the broker refuses us or we cannot trust it."""
        assert self._connector is not None
        host, port = await self._connector.check_bootstrap(
            self._bootstrap_servers, self._request_timeout_ms / 1000
        )
        log.info("authenticated to %s:%d (%s)", host, port, self._security.describe())

    async def _at_start(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run a step of the start again after an error that waiting may mend (a broker
        that did not answer in time). Until the cluster has answered one step, up to
        START_ATTEMPTS times, so that a cluster that cannot be reached fails the start in
        bounded time; once it has, for as long as it takes, as the load waits for a slow
        broker, with a WARNING at the first failure and then at most one per
        START_WARNING_INTERVAL_S."""
        attempt = 0
        next_warning = 0.0
        while True:
            attempt += 1
            try:
                result = await step()
            except (
                KafkaError,
                OSError,
                TimeoutError,
                TopicMetadataError,
                ProducerIdError,
            ) as error:
                permanent = isinstance(error, KafkaError) and not error.retriable
                if attempt >= START_ATTEMPTS and (permanent or not self._cluster_answered):
                    raise
                backoff_s = min(START_RETRY_BACKOFF_S * attempt, START_RETRY_BACKOFF_MAX_S)
                now = time.monotonic()
                if now >= next_warning:
                    log.warning(
                        "the log's start failed (%r, attempt %d); trying again in %.1f s",
                        error,
                        attempt,
                        backoff_s,
                    )
                    next_warning = now + START_WARNING_INTERVAL_S
                await asyncio.sleep(backoff_s)
            else:
                self._cluster_answered = True
                return result

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._watcher.stop()
        sender, self._sender = self._sender, None
        if sender is not None:
            await sender.close()
        await self._follower.close()
        for follower in self._more_followers:
            await follower.close()
        client, self._load_client = self._load_client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_ms / 1000)

    # PartitionWriter

    def register_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    @property
    def sender(self) -> ProduceSender | None:
        """The produce path while the log is started (None before and after): how it
        writes, whether idempotently, and what it sent again."""
        return self._sender

    def high_watermark(self, partition: int) -> int:
        self._check_partition(partition)
        return self._high_watermarks.get(partition, 0)

    def append(self, partition: int, records: Sequence[RawRecord]) -> asyncio.Future[int]:
        try:
            if self._watcher.lost is not None:
                raise AppendError(
                    UNKNOWN_TOPIC_OR_PARTITION, f"the log stopped: {self._watcher.lost}"
                )
            if not 0 <= partition < self._num_partitions:
                raise AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition}")
            if not records:
                raise ValueError("cannot append an empty batch")
            sender = self._sender
            if sender is None:
                raise AppendError(UNKNOWN_SERVER_ERROR, "the Kafka log is not running")
            owners = self._owners
            if owners is not None:
                refusal = owners.refusal(partition)
                if refusal is not None:
                    raise refusal
            batch = self._batch(records, sender.next_stamp(partition))
        except (AppendError, ValueError) as error:
            refused: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            refused.set_exception(error)
            return refused
        future = sender.submit(partition, batch, len(records))
        # Added before the caller's own callbacks, so the high watermark is reported
        # before the caller hears of the append.
        future.add_done_callback(functools.partial(self._appended, partition))
        return future

    def backlogged(self, partition: int) -> bool:
        sender = self._sender
        return sender is not None and sender.backlogged(partition)

    def register_ready_listener(self, listener: ReadyListener) -> None:
        self._ready_listener = listener
        if self._sender is not None:
            self._sender.ready_listener = listener

    # Ownership fencing (see `producer_fencing`)

    async def acquire(self, partition: int) -> int:
        """Take the partition's producer: InitProducerId with transactional id
        `<ownership_transactional_id_prefix><partition>` at the Kafka cluster's transaction
        coordinator, which fences every earlier epoch of the id. The partition's appends go
        with that producer id and epoch from now on, sequences from 0 (a stopped partition
        starts again). Returns the epoch.

        Raises OwnershipError (the partition then stays as it was) when the cluster refuses,
        or gives no producer id within the log's longest timeout (`request_timeout_ms`
        times `load.MAX_TIMEOUT_FACTOR`); RuntimeError without ownership fencing.
        """
        prefix = self._require_ownership()
        self._check_partition(partition)
        owners = self._owners
        if owners is None or self._closed:
            raise OwnershipError(UNKNOWN_SERVER_ERROR, "the Kafka log is not running")
        if self._watcher.lost is not None:
            raise OwnershipError(
                UNKNOWN_TOPIC_OR_PARTITION, f"the log stopped: {self._watcher.lost}"
            )
        transactional_id = f"{prefix}{partition}"
        loop = asyncio.get_running_loop()
        timeout_s = self._longest_timeout_ms / 1000
        deadline = loop.time() + timeout_s
        async with self._acquiring.setdefault(partition, asyncio.Lock()):
            token = owners.begin(partition)
            try:
                client = await asyncio.wait_for(self._loader(), max(deadline - loop.time(), 0))
            except (KafkaError, OSError, TimeoutError) as error:
                raise OwnershipError(
                    REQUEST_TIMED_OUT,
                    f"cannot reach the Kafka cluster to acquire partition {partition} "
                    f"(transactional id {transactional_id}) within {timeout_s:.1f} s: {error!r}",
                ) from error
            producer = await init_transactional_producer_id(
                client, transactional_id, max(deadline - loop.time(), 0.001)
            )
            if not owners.acquired(partition, token, producer):
                raise OwnershipError(
                    NOT_COORDINATOR,
                    f"partition {partition} was released while it was being acquired",
                )
        return producer.epoch

    async def check_fencing(self) -> None:
        """That the Kafka cluster can fence partitions to their owner: InitProducerId of the
        transactional id `<prefix>check` (never used for appends) at its transaction
        coordinator. A cluster that does not answer in time is asked again for as long as
        it takes (a slow or absent broker is waited out, as loads wait it out); one that
        answers it cannot raises OwnershipError, saying what the cluster must allow (a
        broker without transactions, a missing WRITE ACL on the transactional ids)."""
        prefix = self._require_ownership()
        transactional_id = f"{prefix}check"
        timeout_s = self._longest_timeout_ms / 1000
        while True:
            try:
                client = await asyncio.wait_for(self._loader(), timeout_s)
                await init_transactional_producer_id(client, transactional_id, timeout_s)
                return
            except (KafkaError, OSError, TimeoutError) as error:
                log.warning("the Kafka cluster did not answer (%r); asking again", error)
                await asyncio.sleep(_CHECK_RETRY_S)
            except OwnershipError as error:
                if error.error_code != REQUEST_TIMED_OUT:
                    raise OwnershipError(
                        error.error_code,
                        f"the Kafka cluster cannot fence the log's partitions to their owner "
                        f"({error}); a cluster needs Kafka's transactions (and, with ACLs, "
                        f"WRITE on the transactional ids {prefix}*); a broker without them "
                        "can only serve a node alone (--cluster off)",
                    ) from error
                log.warning("%s; asking again", error)
                await asyncio.sleep(_CHECK_RETRY_S)

    def producer_of(self, partition: int) -> tuple[int, int] | None:
        """The producer id and epoch the partition's appends carry, while it is acquired."""
        owners = self._owners
        producer = None if owners is None else owners.producer(partition)
        return None if producer is None else (producer.producer_id, producer.epoch)

    def release(self, partition: int) -> None:
        """Forget the partition's producer: its appends that have not left fail now, and
        every later one fails at once (NOT_COORDINATOR) until the next acquire; a batch
        already on its way goes on to its answer. RuntimeError without ownership fencing."""
        self._require_ownership()
        self._check_partition(partition)
        owners = self._owners
        if owners is None:
            return
        owners.release(partition)
        if self._sender is not None:
            self._sender.drop_refused()

    def _require_ownership(self) -> str:
        prefix = self._ownership_prefix
        if prefix is None:
            raise RuntimeError("the log was not given an ownership_transactional_id_prefix")
        return prefix

    def _appended(self, partition: int, done: asyncio.Future[int]) -> None:
        if not done.cancelled() and done.exception() is None:
            self._advance_high_watermark(partition, done.result(), notify=True)

    def _batch(self, records: Sequence[RawRecord], stamp: tuple[int, int, int]) -> bytes:
        """The records as one record batch, offsets relative to its start, with the
        producer id, epoch and base sequence of `stamp`."""
        max_bytes = self._max_batch_bytes
        producer_id, epoch, sequence = stamp
        builder = DefaultRecordBatchBuilder(
            BATCH_MAGIC, NO_COMPRESSION, NOT_TRANSACTIONAL, producer_id, epoch, sequence, max_bytes
        )
        timestamp_ms = int(time.time() * 1000)
        for relative_offset, (key, value) in enumerate(records):
            if builder.append(relative_offset, timestamp_ms, key, value, []) is None:
                raise AppendError(
                    MESSAGE_TOO_LARGE,
                    f"a batch of {len(records)} records exceeds {max_bytes} bytes",
                )
        batch = bytes(builder.build())
        if len(batch) > max_bytes:
            # The builder always takes the first record, however large.
            raise AppendError(
                MESSAGE_TOO_LARGE, f"a batch of {len(batch)} bytes exceeds {max_bytes} bytes"
            )
        return batch

    async def _producer_identity(self) -> tuple[int, IdempotentProducer | None]:
        """The Produce version to speak and the producer appends go with (None: none, they
        are not idempotent), from the broker's ApiVersions and InitProducerId."""
        client = await self._loader()
        versions = await broker_api_versions(client, self._request_timeout_ms / 1000)
        produce_version = choose_produce_version(versions)
        if produce_version is None:
            low, high = versions.get(0, (0, -1))
            raise KafkaLogError(
                f"the broker speaks Produce v{low} to v{high}; the log needs one of v3 to v8"
            )
        self._api_versions = versions
        if self._ownership_prefix is not None:
            if INIT_PRODUCER_ID_API_KEY not in versions:
                raise KafkaLogError(
                    "the broker does not offer InitProducerId, which ownership fencing needs"
                )
            log.info(
                "appends are idempotent with a producer per partition, from transactional ids "
                "%s<partition>; Produce v%d",
                self._ownership_prefix,
                produce_version,
            )
            return produce_version, None
        if not self._idempotent:
            log.info("appends are not idempotent (as configured); Produce v%d", produce_version)
            return produce_version, None
        producer_id = await init_producer_id(client, versions, self._longest_timeout_ms / 1000)
        if producer_id is None:
            log.warning(
                "the broker hands out no producer ids: appends are not idempotent, and one that "
                "times out may be written after all (the partition then reloads); Produce v%d",
                produce_version,
            )
            return produce_version, None
        log.info("appends are idempotent with %r; Produce v%d", producer_id, produce_version)
        return produce_version, IdempotentProducer(producer_id)

    async def _new_producer_id(self) -> ProducerIdAndEpoch | None:
        """Another producer id, when the broker fenced or forgot the one the log had."""
        client = await self._loader()
        return await init_producer_id(client, self._api_versions, self._longest_timeout_ms / 1000)

    async def _leaders(self) -> dict[int, Leader]:
        """The leader of each partition that has one, from fresh metadata (checked: a topic
        gone or resized stops the log and raises TopicLostError)."""
        metadata = await self._watcher.refresh()
        return metadata.leader_addresses()

    async def _fetch_metadata(self) -> TopicMetadata:
        try:
            client = await self._loader()
        except (KafkaError, OSError, TimeoutError) as error:
            await self._say_if_refused()
            raise TopicMetadataError(f"cannot reach the cluster: {error!r}") from error
        try:
            return await fetch_topic_metadata(client, self._topic, self._request_timeout_ms / 1000)
        except TopicMetadataError:
            await self._say_if_refused()
            raise

    async def _say_if_refused(self) -> None:
        """After a failed metadata request: whether the brokers now refuse this server
        (credentials changed there, a certificate no longer trusted), said as an ERROR at
        most every REFUSAL_CHECK_S. aiokafka's client, which asks for the metadata, reports a
        refused authentication as a node that is not ready."""
        connector = self._connector
        now = time.monotonic()
        if connector is None or self._security.is_plaintext or now < self._next_refusal_check:
            return
        self._next_refusal_check = now + REFUSAL_CHECK_S
        try:
            await connector.check_bootstrap(
                self._bootstrap_servers, self._request_timeout_ms / 1000
            )
        except KafkaSecurityError as error:
            log.error("the Kafka cluster refuses this server: %s", error)
        except (KafkaError, OSError, TimeoutError):
            pass

    def _stop_for_good(self, reason: str) -> None:
        """The topic is gone or resized: nothing more is written or read (see the module's
        docstring); what waits for an append fails now."""
        log.error(
            "the log stopped: %s. Every partition stops serving (NOT_COORDINATOR) and nothing "
            "more is read from or written to topic %s until the server restarts; restore the "
            "topic (or accept the loss of its groups and offsets) first",
            reason,
            self._topic,
        )
        listener = self._failure_listener
        if listener is not None:
            try:
                listener(reason)
            except Exception:
                log.exception("the log failure listener failed")
        sender = self._sender
        if sender is not None:
            sender.stop(AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"the log stopped: {reason}"))

    # CoordinatorLoader

    async def load(
        self, partition: int, sink: RecordSink, *, start_offset: int | None = None
    ) -> LoadSummary:
        """Replay the partition into `sink` (from `start_offset` on, when given), up to the
        high watermark of the first Fetch response. Records without a key are skipped (they
        are not ours). Exceptions raised by `sink` propagate unchanged.

        Loads send Fetch requests themselves through one client of their own, and up to
        `max_concurrent_loads` run in parallel. A consumer per load (what this did first)
        builds a ConsumerRecord per record and bootstraps a client per partition: a third of
        the time of loading a million records. Here each record batch is read as it comes,
        its records handed to `sink` straight from aiokafka's batch reader.
        """
        if not 0 <= partition < self._num_partitions:
            raise LoadError(f"no partition {partition}")
        if not self._started or self._closed:
            raise LoadError("the Kafka log is not running")
        if self._watcher.lost is not None:
            raise TopicLostError(f"the log stopped: {self._watcher.lost}")
        async with self._load_slots:
            self.loads_running += 1
            self.most_loads_running = max(self.most_loads_running, self.loads_running)
            try:
                summary = await self._load_partition(partition, sink, start_offset)
            finally:
                self.loads_running -= 1
        self._advance_high_watermark(partition, summary.end_offset, notify=False)
        return summary

    async def _loader(self) -> AIOKafkaClient:
        async with self._loader_lock:
            client = self._load_client
            if client is None:
                client = self._load_client = await self._new_client("loader")
            return client

    async def _following(self, role: str) -> AIOKafkaClient:
        if not self._started or self._closed:
            raise LoadError("the Kafka log is not running")
        return await self._new_client(role)

    async def _new_client(self, role: str) -> AIOKafkaClient:
        client = AIOKafkaClient(
            bootstrap_servers=self._bootstrap_servers,
            client_id=f"{self._client_id}-{role}",
            # Each request has a timeout of its own (a load's grows on a slow broker);
            # aiokafka's, which closes the connection, is only a backstop.
            request_timeout_ms=self._longest_timeout_ms * 2,
            **self._client_options,
        )
        forbid_auto_topic_creation(client)
        try:
            await asyncio.wait_for(client.bootstrap(), self._longest_timeout_ms / 1000)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        return client

    async def _load_partition(
        self, partition: int, sink: RecordSink, start_offset: int | None
    ) -> LoadSummary:
        client = await self._until_connected()
        load = PartitionLoad(
            client,
            self._topic,
            partition,
            metadata=self._watcher.refresh,
            report_lost=self._watcher.report_lost,
            request_timeout_ms=self._request_timeout_ms,
            known_high_watermark=self._high_watermarks.get(partition, 0),
        )
        summary = await load.run(sink, start_offset)
        if load.retries or load.timeouts:
            log.info(
                "partition=%d loaded after %d timeouts and %d retries",
                partition,
                load.timeouts,
                load.retries,
            )
        return summary

    async def _until_connected(self) -> AIOKafkaClient:
        """The loads' client, waiting out a cluster that cannot be reached now."""
        failures = 0
        while True:
            try:
                return await self._loader()
            except (KafkaError, OSError, TimeoutError) as error:
                failures += 1
                if failures & (failures - 1) == 0:
                    log.warning("cannot reach the cluster to load from it: %r", error)
                await asyncio.sleep(min(0.1 * 2**failures, 5.0))

    # Internals

    async def _ensure_topic(self) -> int:
        """Create the topic when it does not exist; return its real partition count."""
        # Bootstrapping first: a cluster that cannot be reached fails the start at once. One
        # that answered is there: from now on the start waits for it while it is slow.
        await self._loader()
        self._cluster_answered = True
        return await ensure_topic(
            OffsetsTopic(
                name=self._topic,
                partitions=self._configured_partitions,
                replication_factor=self._replication_factor,
                bootstrap_servers=self._bootstrap_servers,
                client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms,
                client_options=self._client_options,
                ready_timeout_s=self._longest_timeout_ms / 1000,
            ),
            self._fetch_metadata,
            self._unreadable_partitions,
        )

    async def _unreadable_partitions(self, leaders: dict[int, int]) -> set[int]:
        client = await self._loader()
        return await unreadable_partitions(
            client, self._topic, leaders, self._request_timeout_ms / 1000
        )

    def _advance_high_watermark(self, partition: int, offset: int, *, notify: bool) -> None:
        if offset <= self._high_watermarks.get(partition, 0):
            return
        self._high_watermarks[partition] = offset
        listener = self._listener
        if notify and listener is not None:
            try:
                listener(partition, offset)
            except Exception:
                # The batch is committed whatever the listener does; failing the append
                # would tell the caller the opposite.
                log.exception("high-watermark listener failed for partition %d", partition)

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._num_partitions:
            raise ValueError(
                f"partition {partition} is outside the log's {self._num_partitions} partitions"
            )
