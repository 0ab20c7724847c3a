"""A consume-transform-produce job in a process of its own, for the exactly-once test that
kills it (SIGKILL) at random moments.

It is Kafka's exactly-once processor (the `ExactlyOnceMessageProcessor` of Kafka's examples)
on the client library: a `CoordinatedConsumer` (read_committed, no auto-commit) reads the
input in a group; for each batch a `TransactionalProducer` with a fixed transactional id
begins a transaction, writes one output record per input record (the input's id in the
value), adds the consumed offsets with the consumer's group metadata, and commits. A
transaction that fails is aborted and the consumer goes back to the committed offsets; a
fenced producer ends the job (a newer instance owns the transactional id).

It prints one line per event on stdout:
"S <producer id> <epoch>" once the producer has its id, "A <p,p,...>" when partitions are
assigned, "B <transaction> <records>" when a transaction begins, "C <transaction> <records>"
after each commit, "X <transaction> <error>" after an
abort, "F" when fenced (then it exits 3). SIGTERM stops it between transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import ConsumerRecord, TopicPartition

from coordinator_client import (
    ApiError,
    CommitFailedError,
    CoordinatedConsumer,
    ErrorCode,
    TransactionalProducer,
)
from coordinator_client.rpc.errors import ClientError

FENCED_EXIT = 3


def partitions_text(partitions: set[TopicPartition]) -> str:
    return ",".join(str(tp.partition) for tp in sorted(partitions))


class PrintingListener(ConsumerRebalanceListener):  # type: ignore[misc]
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        print(f"A {partitions_text(assigned)}", flush=True)


def transform(record: ConsumerRecord[Any, bytes]) -> bytes:
    value: bytes = record.value
    return b"out-" + value


async def rewind(consumer: CoordinatedConsumer) -> None:
    """Go back to the group's committed offsets (Kafka's example:
    resetToLastCommittedPositions). A stable fetch: an offset of a transaction still being
    completed is waited for, not read as it was before."""
    while True:
        partitions = consumer.assignment()
        if not partitions:
            return
        try:
            committed = await consumer.coordinator_client.fetch_offsets(
                consumer.group_id, partitions, require_stable=True
            )
        except ApiError as e:
            if e.code != ErrorCode.UNSTABLE_OFFSET_COMMIT:
                raise
            await asyncio.sleep(0.05)
            continue
        try:
            for tp in partitions:
                # The input topic is never truncated: no committed offset means offset 0.
                consumer.seek(tp, committed[tp].offset if tp in committed else 0)
        except ValueError:
            # A rebalance took partitions away meanwhile; the next assignment starts each
            # at its committed offset anyway.
            continue
        return


async def run(args: argparse.Namespace) -> int:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    producer = TransactionalProducer(
        bootstrap_servers=args.kafka,
        coordinator_bootstrap_servers=args.coordinator,
        transactional_id=args.transactional_id,
        transaction_timeout_ms=args.transaction_timeout_ms,
        client_id="eos-job",
        coordinator_options={"request_timeout_ms": 5000, "retry_backoff_ms": 50},
        linger_ms=5,
    )
    # The producer first: its InitProducerId fences an earlier instance and waits until that
    # instance's open transaction is aborted (or its prepared one completed).
    await producer.start()
    print(f"S {producer.producer_id} {producer.producer_epoch}", flush=True)
    consumer = CoordinatedConsumer(
        bootstrap_servers=args.kafka,
        coordinator_bootstrap_servers=args.coordinator,
        group_id=args.group,
        client_id="eos-job",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 3,
        max_poll_interval_ms=args.session_timeout_ms * 2,
        coordinator_options={"request_timeout_ms": 5000, "retry_backoff_ms": 50},
    )
    consumer.subscribe([args.input], listener=PrintingListener())
    await consumer.start()
    transaction = 0
    try:
        while not stopping.is_set():
            member = consumer.member
            metadata = (member.generation_id, member.member_id)
            batches = await consumer.getmany(timeout_ms=200, max_records=args.batch)
            if not batches:
                continue
            if (member.generation_id, member.member_id) != metadata:
                # The records were read across a rebalance: which generation they belong to
                # is not known, so they are read again from the committed offsets.
                await rewind(consumer)
                continue
            transaction += 1
            offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
            count = sum(len(records) for records in batches.values())
            print(f"B {transaction} {count}", flush=True)
            try:
                await producer.begin_transaction()
                for tp, records in batches.items():
                    for record in records:
                        await producer.send(
                            args.output,
                            transform(record),
                            key=f"{producer.producer_epoch}/{transaction}".encode(),
                            partition=tp.partition,
                        )
                        if args.work_ms:
                            # The transformation's time: the transaction stays open while
                            # its first records are already in the log.
                            await asyncio.sleep(args.work_ms / 1000)
                await producer.send_offsets_to_transaction(
                    offsets, args.group, generation_id=metadata[0], member_id=metadata[1]
                )
                await producer.commit_transaction()
            except ProducerFenced:
                print("F", flush=True)
                return FENCED_EXIT
            except (KafkaError, CommitFailedError, ApiError, ClientError) as e:
                try:
                    if producer.in_transaction():
                        await producer.abort_transaction()
                except ProducerFenced:
                    print("F", flush=True)
                    return FENCED_EXIT
                print(f"X {transaction} {type(e).__name__}", flush=True)
                await rewind(consumer)
                continue
            print(f"C {transaction} {count}", flush=True)
    finally:
        await consumer.stop()
        await producer.stop()
    return 0


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(created).1f %(name)s %(levelname)s %(message)s"
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--kafka", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--work-ms", type=float, default=0.0)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--transaction-timeout-ms", type=int, default=15_000)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
