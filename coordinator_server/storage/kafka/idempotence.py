"""Idempotent appends: the log's producer id and epoch, and the sequence numbers of its
batches (Kafka's `TransactionManager` and `TxnPartitionEntry`, for a producer that is
idempotent and not transactional).

Why. A ProduceRequest that gets no answer in time, or whose connection is lost, may have
been written or not. Sent again as it was, it could be written twice. Every batch carries the
producer id and epoch from InitProducerId and a base sequence (the partition's count of
records sent before it, per epoch): the broker writes a batch only if its sequence follows
the last one it wrote for that producer on that partition, and answers a copy of one of the
last five it wrote with that batch's offsets, without writing it again. So the sender sends
a batch again, unchanged, after a timeout or a lost connection, until it is answered or its
delivery timeout passes; whichever copy reaches the broker first is written, once.

The design, with the runtime's contract (an append that fails is reverted; the offset each
append returns is checked against the state, and a difference reloads the partition):
- One batch per partition is on the way at a time (the runtime's rule, which the sender
  enforces too), so a batch sent again is always the partition's newest, the one the
  broker's duplicate check remembers, and sequences are assigned in the order batches leave.
- A batch takes its sequence when it first leaves. One that never left fails without
  consequence; one that left and was not answered within the delivery timeout fails with
  REQUEST_TIMED_OUT, its fate unknown ("unresolved", in Kafka's words). The runtime reverts
  it and writes other records next, at the same offset: they must not carry the sequence the
  lost batch had, or the broker would take them for a copy of it if it had been written. So,
  as Kafka's producer does, the epoch is bumped (locally: the broker accepts a higher epoch
  starting at sequence 0) and every partition starts its sequences again from 0 in the new
  epoch with its next batch. Where the lost batch landed before that next batch, the
  runtime sees the next batch end past where it expected and reloads (the records are in the
  log, and now in the state); once the next batch is written, the broker refuses a late copy
  of the lost one (its epoch is older than the partition's), so it can never land after.
- OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID mean the broker lost track of the
  producer's sequence on the partition; INVALID_PRODUCER_EPOCH, PRODUCER_FENCED and
  INVALID_PRODUCER_ID_MAPPING that it holds a newer epoch or no longer knows the id. The
  batch was not written: the sender bumps the epoch (Kafka's answer to the first two) or
  asks for a new producer id (the others), restamps the batch and sends it again; the
  runtime sees an ordinary append, and its offset check covers what the broker lost.
- Any other error of a batch that left bumps the epoch too (Kafka's idempotent producer
  after a batch fails), so that the next batch never leaves a gap in the sequence.
- A broker that does not hand out producer ids (no InitProducerId, or one that refuses it,
  as tansu does) gets batches without one, as before: a timed-out append then fails and may
  still be written, and the runtime's offset check reloads the partition when it was.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.record.util import calc_crc32c

from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.error_codes import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    NETWORK_EXCEPTION,
    NOT_COORDINATOR,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
    UNKNOWN_PRODUCER_ID,
)

__all__ = [
    "NEW_EPOCH_ERRORS",
    "NEW_PRODUCER_ID_ERRORS",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "IdempotentProducer",
    "ProducerIdAndEpoch",
    "ProducerIdError",
    "ProducerIdSource",
    "broker_api_versions",
    "choose_produce_version",
    "init_producer_id",
    "renew_producer_id",
    "restamp",
    "stamp_of",
]

log = logging.getLogger(__name__)

PRODUCE_API_KEY = 0
INIT_PRODUCER_ID_API_KEY = 22
# The Produce versions this log speaks: v3 is the first that carries record batches with a
# producer id (magic 2), and the oldest Kafka 4 still serves; up to v8 the request is the
# same, and the answer adds the log start offset (v5) and the broker's error message (v8).
# v9 on are "flexible" (another encoding).
MIN_PRODUCE_VERSION = 3
MAX_PRODUCE_VERSION = 8

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
MAX_EPOCH = 32767
# What Kafka's idempotent producer asks for: no transaction, so no timeout.
NO_TRANSACTION_TIMEOUT_MS = 2**31 - 1

# The broker lost track of this producer's sequence on the partition: a new epoch starts it
# again from 0.
NEW_EPOCH_ERRORS = frozenset({OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID})
# The broker holds a newer epoch for the id, or no longer knows it: only a new id will do.
NEW_PRODUCER_ID_ERRORS = frozenset(
    {INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED}
)

# InitProducerId answers that waiting mends (the broker's id manager or transaction
# coordinator is not ready yet).
_RETRIABLE_INIT_ERRORS = frozenset(
    {
        REQUEST_TIMED_OUT,
        NETWORK_EXCEPTION,
        COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE,
        NOT_COORDINATOR,
        CONCURRENT_TRANSACTIONS,
    }
)
INIT_RETRY_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0)
# Between attempts at a new producer id while the log runs.
RENEW_RETRY_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0)

# Where a record batch (magic 2) keeps its CRC and its producer fields: producer id (int64),
# epoch (int16) and base sequence (int32), all inside what the CRC-32C covers (from the
# attributes to the end).
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_PRODUCER_OFFSET = 43
_PRODUCER_FIELDS = struct.Struct(">qhi")
_CRC = struct.Struct(">I")


class ProducerIdError(Exception):
    """No producer id now, for a reason waiting may mend (the start tries again)."""


class ProducerIdAndEpoch:
    """A producer id and epoch; compared by identity, since a bump makes a new one."""

    __slots__ = ("epoch", "producer_id")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"producer id {self.producer_id} epoch {self.epoch}"


NO_PRODUCER = ProducerIdAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

ProducerIdSource = Callable[[], Awaitable["ProducerIdAndEpoch | None"]]
"""Returns a new producer id and epoch, or None when the broker no longer hands them out."""


def stamp_of(batch: bytes) -> tuple[int, int, int]:
    """The producer id, epoch and base sequence a record batch carries."""
    producer_id, epoch, sequence = _PRODUCER_FIELDS.unpack_from(batch, _PRODUCER_OFFSET)
    return producer_id, epoch, sequence


def restamp(batch: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    """The batch with other producer fields, and the CRC that goes with them."""
    stamped = bytearray(batch)
    _PRODUCER_FIELDS.pack_into(stamped, _PRODUCER_OFFSET, producer_id, epoch, sequence)
    _CRC.pack_into(stamped, _CRC_OFFSET, calc_crc32c(stamped[_ATTRIBUTES_OFFSET:]))
    return bytes(stamped)


class _PartitionSequence:
    """What a partition's next batch carries (Kafka's TxnPartitionEntry)."""

    __slots__ = ("next_sequence", "producer")

    def __init__(self, producer: ProducerIdAndEpoch) -> None:
        self.producer = producer
        self.next_sequence = 0


class IdempotentProducer:
    """The producer id and epoch, and each partition's next sequence.

    The sender calls `prepare` and `assign` as a batch first leaves, `unresolved` when one
    that left fails (whatever the reason: see the module's docstring), and `epoch_rejected`
    or `id_rejected` for the broker's answers about the producer. While `needs_new_id`
    holds (the epochs are used up, or the broker fenced or forgot the id) the sender asks
    for a new id and hands it to `renewed`; batches that have not left wait for it.
    """

    def __init__(self, producer: ProducerIdAndEpoch) -> None:
        self.current = producer
        self._partitions: dict[int, _PartitionSequence] = {}
        self._bump_required = False
        # No usable id until a new one comes (fenced, forgotten, or the epochs used up).
        self.needs_new_id = False
        # False once the broker stopped handing out ids: batches go without one.
        self.enabled = producer.producer_id != NO_PRODUCER_ID
        self.epoch_bumps = 0
        self.new_ids = 0

    def next_stamp(self, partition: int) -> tuple[int, int, int]:
        """What the partition's next batch carries if nothing changes before it leaves (a
        batch built with it is sent as it is; otherwise `assign` restamps it)."""
        if not self.enabled:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
        current = self.current
        entry = self._partitions.get(partition)
        sequence = 0 if entry is None or entry.producer is not current else entry.next_sequence
        return current.producer_id, current.epoch, sequence

    def prepare(self) -> bool:
        """Before batches take sequences: the epoch bump that failures asked for, once.
        False while they cannot take one (a new producer id is needed first)."""
        if self._bump_required:
            self._bump()
        return not self.needs_new_id

    def assign(self, partition: int, batch: bytes, count: int) -> bytes:
        """The batch as it leaves for the first time (after `prepare()` said yes): the
        current producer id and epoch and the partition's next sequence (restamped if it was
        built with others); the partition's sequence moves past its `count` records."""
        if not self.enabled:
            if stamp_of(batch)[0] != NO_PRODUCER_ID:
                return restamp(batch, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
            return batch
        current = self.current
        entry = self._partitions.get(partition)
        if entry is None or entry.producer is not current:
            # A new epoch (or id) starts the partition's sequence again.
            entry = self._partitions[partition] = _PartitionSequence(current)
        sequence = entry.next_sequence
        if stamp_of(batch) != (current.producer_id, current.epoch, sequence):
            batch = restamp(batch, current.producer_id, current.epoch, sequence)
        # Sequences wrap after the largest int32, as Kafka's do.
        entry.next_sequence = (sequence + count) & 0x7FFFFFFF
        return batch

    def refused(self, partition: int, error_code: int, described: str) -> bool:
        """The broker refused a batch of the partition that left: True when the error is
        about the producer (the batch was not written, and goes again with the new epoch or
        producer id it takes as it leaves), False when the batch fails."""
        new_epoch = error_code in NEW_EPOCH_ERRORS
        if not self.enabled or not (new_epoch or error_code in NEW_PRODUCER_ID_ERRORS):
            return False
        log.warning(
            "partition %d: the broker refused a batch of %r: %s; it goes again with a new %s",
            partition,
            self.current,
            described,
            "epoch" if new_epoch else "producer id",
        )
        if new_epoch:
            self.epoch_rejected()
        else:
            self.id_rejected()
        return True

    def unresolved(self) -> None:
        """A batch that left failed: the next batches start a new epoch (see the module's
        docstring), once, however many failed meanwhile."""
        if self.enabled:
            self._bump_required = True

    def epoch_rejected(self) -> None:
        """OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID: a new epoch."""
        self.unresolved()

    def id_rejected(self) -> None:
        """INVALID_PRODUCER_EPOCH, PRODUCER_FENCED or INVALID_PRODUCER_ID_MAPPING: a new
        producer id before any batch takes a sequence again."""
        if self.enabled:
            self.needs_new_id = True

    def renewed(self, producer: ProducerIdAndEpoch) -> None:
        self.current = producer
        self.needs_new_id = False
        self._bump_required = False
        self.new_ids += 1
        log.info("the log produces with %r from now on", producer)

    def disable(self, reason: str) -> None:
        """The broker no longer hands out producer ids: batches go without one."""
        if not self.enabled:
            return
        self.enabled = False
        self.needs_new_id = False
        self.current = NO_PRODUCER
        log.warning(
            "appends are not idempotent from now on (%s): an append that times out may be "
            "written after all, and the partition then reloads",
            reason,
        )

    def _bump(self) -> None:
        self._bump_required = False
        current = self.current
        if current.epoch >= MAX_EPOCH:
            # Kafka's producer, too, asks for a new id once the epochs are used up.
            self.needs_new_id = True
            return
        self.current = ProducerIdAndEpoch(current.producer_id, current.epoch + 1)
        self.epoch_bumps += 1
        log.info(
            "the log's producer epoch is now %d: sequences start again from 0",
            self.current.epoch,
        )


async def broker_api_versions(
    client: AIOKafkaClient, timeout_s: float
) -> dict[int, tuple[int, int]]:
    """The API versions (api key -> (min, max)) of any broker the client knows."""
    node_id = client.get_random_node()
    if node_id is None:
        raise ProducerIdError("no broker is known")
    try:
        response = await asyncio.wait_for(client.send(node_id, ApiVersionRequest()), timeout_s)
    except (KafkaError, OSError, TimeoutError) as error:
        raise ProducerIdError(f"no ApiVersions answer from node {node_id}: {error!r}") from error
    return {int(api_key): (int(low), int(high)) for api_key, low, high, *_ in response.api_versions}


def choose_produce_version(versions: Mapping[int, tuple[int, int]]) -> int | None:
    """The newest Produce version both this log and the broker speak; None if none."""
    low, high = versions.get(PRODUCE_API_KEY, (0, -1))
    version = min(high, MAX_PRODUCE_VERSION)
    if version < max(low, MIN_PRODUCE_VERSION):
        return None
    return version


async def init_producer_id(
    client: AIOKafkaClient,
    versions: Mapping[int, tuple[int, int]],
    timeout_s: float,
) -> ProducerIdAndEpoch | None:
    """A new producer id and epoch from InitProducerId without a transactional id, as
    Kafka's idempotent producer gets one; None from a broker that does not hand them out
    (it does not list the API, or refuses it with an error waiting does not mend).

    Answers waiting mends are tried again for up to `timeout_s`; then ProducerIdError.
    """
    if INIT_PRODUCER_ID_API_KEY not in versions:
        log.warning("the broker does not offer InitProducerId")
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    attempt = 0
    while True:
        node_id = client.get_random_node()
        problem: str
        if node_id is None:
            problem = "no broker is known"
        else:
            try:
                response = await asyncio.wait_for(
                    client.send(node_id, InitProducerIdRequest(None, NO_TRANSACTION_TIMEOUT_MS)),
                    max(deadline - loop.time(), 0.001),
                )
            except (KafkaError, OSError, TimeoutError) as error:
                problem = f"no InitProducerId answer from node {node_id}: {error!r}"
            else:
                error_code = int(response.error_code)
                if error_code == ErrorCode.NONE:
                    return ProducerIdAndEpoch(
                        int(response.producer_id), int(response.producer_epoch)
                    )
                if error_code not in _RETRIABLE_INIT_ERRORS:
                    log.warning("the broker refused InitProducerId: error %d", error_code)
                    return None
                problem = f"InitProducerId answered error {error_code}"
        backoff_s = INIT_RETRY_BACKOFF_S[min(attempt, len(INIT_RETRY_BACKOFF_S) - 1)]
        attempt += 1
        if loop.time() + backoff_s > deadline:
            raise ProducerIdError(f"no producer id within {timeout_s:.1f} s: {problem}")
        await asyncio.sleep(backoff_s)


async def renew_producer_id(
    producer: IdempotentProducer,
    source: ProducerIdSource,
    running: Callable[[], bool],
    topic: str,
) -> None:
    """Get the producer a new id while it needs one and `running()` holds, trying again
    with a growing back-off; a broker that no longer hands ids out disables it."""
    failures = 0
    while running() and producer.needs_new_id:
        try:
            renewed = await source()
        except Exception as error:
            backoff_s = RENEW_RETRY_BACKOFF_S[min(failures, len(RENEW_RETRY_BACKOFF_S) - 1)]
            failures += 1
            if failures & (failures - 1) == 0:
                log.warning(
                    "cannot get a new producer id for the appends to %s (%r); trying again "
                    "in %.1f s",
                    topic,
                    error,
                    backoff_s,
                )
            await asyncio.sleep(backoff_s)
            continue
        if renewed is None:
            producer.disable("the broker no longer hands out producer ids")
        else:
            producer.renewed(renewed)
