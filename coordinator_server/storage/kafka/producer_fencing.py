"""Per-partition ownership of the Kafka log, fenced by Kafka's own producer fencing: the
mode `KafkaLog` runs in when given `ownership_transactional_id_prefix`.

Why. In a cluster of coordinators each partition of the log has one owner at a time, and
ownership moves. The old owner may not know it yet (a long pause, a node cut off from the
others but not from Kafka). Whatever it appends after the new owner took over must never
reach the log: the new owner's state, loaded from the log, and the log would part ways, and
the old owner could acknowledge writes nobody will serve.

How. Kafka fences producers by transactional id: InitProducerId with a transactional id, at
the Kafka cluster's transaction coordinator of that id (FindCoordinator, key type 1), returns
the same producer id each time with its epoch bumped. The owner of partition p takes the
transactional id `<prefix><p>` (`KafkaLog.acquire`) and appends ordinary idempotent batches
(not transactional: no AddPartitionsToTxn, no EndTxn) stamped with that producer id, that
epoch and sequences from 0. A partition's leader keeps the newest epoch it has written for
each producer id, replicated with the log: once a batch of the new epoch is written, every
batch of an older one is refused (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED) by whichever
broker leads the partition. So a new owner appends a record first (its ownership record) and
loads the log after it: a batch of the old owner either landed before that record, and the
load reads it, or is never written.

In this mode the log never moves an epoch nor takes a new producer id by itself. A batch
refused as fenced (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING) or
out of sequence (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID: with one writer per
epoch, only another writer or a broker that lost the producer's state explains them) fails
with PRODUCER_FENCED. A batch that left and failed otherwise (its fate still unknown when its
delivery timeout passed, or refused for another reason) fails with its own error code (a
timeout's is REQUEST_TIMED_OUT). Either way the partition stops: that append, those queued
behind it and every later one fail with the same code until the next acquire, which brings a
new epoch; the caller reloads the partition then (a lost batch that was written after all is
in the log). Appends to a partition that was never acquired, or was released, fail at once
with NOT_COORDINATOR.

What the Kafka cluster must allow. InitProducerId with a transactional id uses the
transaction state topic (`__transaction_state`, which the brokers create on first use: its
`transaction.state.log.replication.factor` and `transaction.state.log.min.isr` must be
satisfiable). With ACLs on, the log's principal needs WRITE on the transactional ids (a
PREFIXED ACL on the prefix; WRITE implies the DESCRIBE that FindCoordinator needs) besides
its rights on the log topic.

Bounds. The brokers fence what they remember. A producer's state on a partition is dropped
`producer.id.expiration.ms` (Kafka's default: 1 day) after its last batch there, and a
transactional id is forgotten `transactional.id.expiration.ms` (7 days) after its last
InitProducerId (appends do not count); a forgotten id is given a new producer id, which no
broker relates to the old one. An owner paused for longer than these is not fenced by the
brokers; whoever runs the owners must keep them from writing after such a pause (and
acquire again, which costs one round trip, more often than the latter).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import KafkaError
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.transaction import InitProducerIdRequest

from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.api import AppendError
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
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_PRODUCER_ID,
)
from coordinator_server.storage.kafka.idempotence import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ProducerIdAndEpoch,
    restamp,
    stamp_of,
)

__all__ = [
    "FENCED_ERRORS",
    "OwnershipError",
    "PartitionProducers",
    "init_transactional_producer_id",
]

log = logging.getLogger(__name__)

# FindCoordinator's key type for a transactional id.
TRANSACTION_COORDINATOR = 1
# No transaction ever begins under these ids, so the timeout never runs; Kafka's default
# transaction.timeout.ms, which every broker's transaction.max.timeout.ms allows by default.
OWNERSHIP_TRANSACTION_TIMEOUT_MS = 60_000
RETRY_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0)

# A batch refused with these was not written, and the partition's producer can write no more
# (see the module's docstring).
FENCED_ERRORS = frozenset(
    {
        INVALID_PRODUCER_EPOCH,
        PRODUCER_FENCED,
        INVALID_PRODUCER_ID_MAPPING,
        OUT_OF_ORDER_SEQUENCE_NUMBER,
        UNKNOWN_PRODUCER_ID,
    }
)
# FindCoordinator and InitProducerId answers that waiting mends; the coordinator may have
# moved after the first two.
_FIND_AGAIN = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})
_RETRIABLE = _FIND_AGAIN | {
    COORDINATOR_LOAD_IN_PROGRESS,
    CONCURRENT_TRANSACTIONS,
    REQUEST_TIMED_OUT,
    NETWORK_EXCEPTION,
}


class OwnershipError(Exception):
    """A partition could not be acquired; `error_code` is Kafka's code for why (e.g. 7
    REQUEST_TIMED_OUT when no answer came in time, 53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


async def init_transactional_producer_id(
    client: AIOKafkaClient, transactional_id: str, timeout_s: float
) -> ProducerIdAndEpoch:
    """The producer id and the next epoch of `transactional_id`, from InitProducerId at its
    transaction coordinator: every earlier epoch of the id is fenced from then on.

    Answers that waiting mends are tried again (the coordinator found again after
    NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE) for up to `timeout_s`; then, or on an
    answer waiting does not mend, OwnershipError.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    coordinator: int | None = None
    attempt = 0
    while True:
        error_code = REQUEST_TIMED_OUT
        node_id = coordinator
        try:
            if coordinator is None:
                node_id = client.get_random_node()
                if node_id is None:
                    problem = "no broker is known"
                else:
                    found = await asyncio.wait_for(
                        client.send(
                            node_id,
                            FindCoordinatorRequest(transactional_id, TRANSACTION_COORDINATOR),
                        ),
                        max(deadline - loop.time(), 0.001),
                    )
                    error_code = int(found.error_code)
                    problem = f"FindCoordinator answered error {error_code}"
                    if error_code == ErrorCode.NONE:
                        coordinator = int(found.coordinator_id)
            if coordinator is not None:
                node_id = coordinator
                response = await asyncio.wait_for(
                    client.send(
                        coordinator,
                        InitProducerIdRequest(transactional_id, OWNERSHIP_TRANSACTION_TIMEOUT_MS),
                        group=ConnectionGroup.COORDINATION,
                    ),
                    max(deadline - loop.time(), 0.001),
                )
                error_code = int(response.error_code)
                if error_code == ErrorCode.NONE:
                    return ProducerIdAndEpoch(
                        int(response.producer_id), int(response.producer_epoch)
                    )
                problem = f"InitProducerId answered error {error_code} (coordinator {coordinator})"
                if error_code in _FIND_AGAIN:
                    coordinator = None
        except (KafkaError, OSError, TimeoutError) as error:
            # The coordinator may be gone, or not in the client's metadata yet. No answer is
            # a timeout, whatever an earlier request of this attempt answered (a
            # FindCoordinator's NONE must not make InitProducerId's silence final).
            error_code = REQUEST_TIMED_OUT
            problem = f"no answer from node {node_id}: {error!r}"
            coordinator = None
            client.force_metadata_update().add_done_callback(_consume)
        if error_code not in _RETRIABLE:
            hint = ""
            if error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                hint = "; the log's principal needs WRITE on the transactional id (its prefix)"
            raise OwnershipError(
                error_code, f"transactional id {transactional_id}: {problem}{hint}"
            )
        backoff_s = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
        attempt += 1
        if loop.time() + backoff_s > deadline:
            raise OwnershipError(
                REQUEST_TIMED_OUT,
                f"no producer id for transactional id {transactional_id} within "
                f"{timeout_s:.1f} s: {problem}",
            )
        await asyncio.sleep(backoff_s)


def _consume(done: asyncio.Future[object]) -> None:
    # A metadata update asked for by the way: its outcome is the client's business.
    if not done.cancelled():
        done.exception()


class _Ownership:
    """One partition's producer (None: not acquired, or released), its next sequence, and
    why it stopped (error code and message) if it did."""

    __slots__ = ("generation", "next_sequence", "producer", "stopped")

    def __init__(self) -> None:
        self.producer: ProducerIdAndEpoch | None = None
        self.next_sequence = 0
        self.stopped: tuple[int, str] | None = None
        # Moves with every acquire and release: an acquire that a release overtook is void.
        self.generation = 0


class PartitionProducers:
    """Each partition's producer id, epoch and next sequence, from its acquire (Kafka's
    `TxnPartitionEntry`, with a producer per partition instead of one for the log).

    The log calls `begin` and `acquired` around an acquire's InitProducerId, and `release`.
    The sender asks `refusal` before a batch of the partition first leaves, stamps it with
    `assign`, and reports a batch that left and failed with `unresolved`.
    """

    def __init__(self, topic: str, num_partitions: int) -> None:
        self._topic = topic
        # One entry per partition of the log: bounded by its partition count.
        self._partitions = [_Ownership() for _ in range(num_partitions)]

    def begin(self, partition: int) -> int:
        """Before an acquire asks for the producer: the token `acquired` takes."""
        return self._partitions[partition].generation

    def acquired(self, partition: int, token: int, producer: ProducerIdAndEpoch) -> bool:
        """The partition's appends go with `producer` from now on, sequences from 0, unless
        the partition was released (or acquired) since `begin` gave `token`: False then."""
        entry = self._partitions[partition]
        if entry.generation != token:
            return False
        entry.generation += 1
        entry.producer = producer
        entry.next_sequence = 0
        entry.stopped = None
        # One a partition, at every start and takeover: the cluster's line names them all.
        log.debug("partition %d of %s: acquired, %r", partition, self._topic, producer)
        return True

    def release(self, partition: int) -> None:
        entry = self._partitions[partition]
        entry.generation += 1
        entry.producer = None
        entry.stopped = None

    def producer(self, partition: int) -> ProducerIdAndEpoch | None:
        """The partition's producer while it is acquired (stopped or not)."""
        return self._partitions[partition].producer

    def epoch(self, partition: int) -> int | None:
        """The partition's producer epoch while it is acquired and not stopped."""
        entry = self._partitions[partition]
        if entry.producer is None or entry.stopped is not None:
            return None
        return entry.producer.epoch

    def refusal(self, partition: int) -> AppendError | None:
        """Why an append of the partition cannot go now; None when it can."""
        entry = self._partitions[partition]
        if entry.producer is None:
            return AppendError(
                NOT_COORDINATOR,
                f"partition {partition} of {self._topic} is not acquired: this log holds no "
                "producer for it",
                stops_partition=True,
            )
        if entry.stopped is not None:
            return AppendError(*entry.stopped, stops_partition=True)
        return None

    def next_stamp(self, partition: int) -> tuple[int, int, int]:
        """What the partition's next batch carries if nothing changes before it leaves."""
        entry = self._partitions[partition]
        producer = entry.producer
        if producer is None or entry.stopped is not None:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
        return producer.producer_id, producer.epoch, entry.next_sequence

    def assign(self, partition: int, batch: bytes, count: int) -> bytes:
        """The batch as it first leaves (after `refusal` said None): the partition's producer
        id, epoch and next sequence; the sequence moves past its `count` records."""
        entry = self._partitions[partition]
        producer = entry.producer
        assert producer is not None and entry.stopped is None, "refusal() first"
        sequence = entry.next_sequence
        if stamp_of(batch) != (producer.producer_id, producer.epoch, sequence):
            batch = restamp(batch, producer.producer_id, producer.epoch, sequence)
        # Sequences wrap after the largest int32, as Kafka's do.
        entry.next_sequence = (sequence + count) & 0x7FFFFFFF
        return batch

    def fenced(self, partition: int, batch: bytes, described: str) -> AppendError:
        """The error a batch refused with one of FENCED_ERRORS fails with."""
        producer_id, epoch, _ = stamp_of(batch)
        return AppendError(
            PRODUCER_FENCED,
            f"partition {partition} of {self._topic}: the broker refused a batch of producer "
            f"id {producer_id} epoch {epoch} ({described}): another owner took the partition, "
            "or the broker lost this producer's state",
            stops_partition=True,
        )

    def unresolved(self, partition: int, batch: bytes, error: AppendError) -> bool:
        """A batch that left failed with `error`: the partition stops (see the module's
        docstring) if the batch carries its current producer; True if it stopped now."""
        entry = self._partitions[partition]
        producer = entry.producer
        if producer is None or entry.stopped is not None:
            return False
        if stamp_of(batch)[:2] != (producer.producer_id, producer.epoch):
            # From an earlier acquire: the partition's new epoch fences it anyway.
            return False
        entry.stopped = (
            error.error_code,
            f"partition {partition} of {self._topic} stopped after a batch of {producer!r} "
            f"failed ({error}); its appends fail until it is acquired again",
        )
        log.warning("%s", entry.stopped[1])
        return True
