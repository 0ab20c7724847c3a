"""`bench transactions`: transactions a second and commit latency of transactional producers,
coordinated by our server and by Kafka's own transaction coordinator, in the same run.

Ours is the client library's `TransactionalProducer` against `coordinator-server serve
--transactions on`; the peer is aiokafka's `AIOKafkaProducer(transactional_id=...)` against
the transaction coordinator inside the broker. Both write their records to the same broker
(the one holding our log), which runs with `transaction.partition.verification.enable=false`
as ours needs and Kafka's own coordinator does not mind. Records, batches and Produce
requests are aiokafka's on both sides; what differs is who answers InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn and writes the markers.

A transaction: begin, `records` sends of RECORD_BYTES each, the i-th to partition
(producer + i) mod `--partitions` of the bench's topic, with `--send-offsets` also the
offset of one input partition committed for a consumer group in the transaction
(send_offsets_to_transaction, the consume-transform-produce shape), then commit. Its latency
runs from begin until commit_transaction returns (the records delivered, EndTxn answered).
`--producers` producers, each with its own transactional id, run transactions back to back.
The targets are measured in turns on the same CPU budget as the other scenarios: our server
and the broker on `--server-cpu`, the producers on `--generator-cpu`, each target measured
once every process the bench started is quiet, and the CPU time our server and the broker
spent per transaction reported beside the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator_client import ClientSecurity
from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.tools.bench.environment import Environment
from coordinator_server.tools.bench.loops import measure
from coordinator_server.tools.bench.processes import wait_until_quiet
from coordinator_server.tools.bench.scenarios import cpu_per_request
from coordinator_server.tools.bench.stats import latency_summary_ms, median_row, ratio_row

TRANSACTION_COLUMNS = [
    "target",
    "records_per_txn",
    "send_offsets",
    "producers",
    "transactions_per_s",
    "records_per_s",
    "p50_ms",
    "p99_ms",
    "errors",
    "generator_cpu",
    "server_cpu_us",
    "broker_cpu_us",
    "core_cpu_us",
    "others_cpu_us",
]
RATIO_COLUMNS = ["transactions_per_s", "records_per_s", "p50_ms", "p99_ms", "core_cpu_us"]
# Each record's value: small, so that a transaction costs its coordination more than its bytes.
RECORD_BYTES = 100
# The topic whose offsets a consume-transform-produce transaction commits: a Kafka
# coordinator refuses offsets of partitions that do not exist.
INPUT_TOPIC = "bench-topic"
INPUT_PARTITIONS = 100
# How long a producer may take to start: Kafka creates `__transaction_state` on the first
# FindCoordinator for a transactional id, seconds on one busy core.
START_TIMEOUT_S = 120.0
# A transaction left open by a producer that stopped mid-way is aborted after this long.
TRANSACTION_TIMEOUT_MS = 60_000


class TxnProducer(Protocol):
    """What the loop needs of a transactional producer (aiokafka's shape)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def begin_transaction(self) -> None: ...

    async def send(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]: ...

    async def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group: str) -> None:
        """Commit `offsets` (TopicPartition -> OffsetAndMetadata) for `group` in the
        transaction."""

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...


class OursProducer:
    """The client library's TransactionalProducer: records to Kafka, coordination by our
    server."""

    def __init__(
        self,
        bootstrap_servers: str,
        coordinator: str,
        transactional_id: str,
        coordinator_options: Mapping[str, Any],
        security: ClientSecurity | None = None,
    ) -> None:
        from coordinator_client import TransactionalProducer

        self._producer = TransactionalProducer(
            bootstrap_servers=bootstrap_servers,
            coordinator_bootstrap_servers=coordinator,
            transactional_id=transactional_id,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            client_id="bench",
            coordinator_options=coordinator_options,
            security=security,
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def begin_transaction(self) -> None:
        await self._producer.begin_transaction()

    async def send(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        return await self._producer.send(topic, value, partition=partition)

    async def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group: str) -> None:
        await self._producer.send_offsets_to_transaction(offsets, group)

    async def commit_transaction(self) -> None:
        await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        await self._producer.abort_transaction()


class KafkaProducer:
    """aiokafka's transactional producer: records and coordination by the Kafka broker."""

    def __init__(self, bootstrap_servers: str, transactional_id: str) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            transactional_id=transactional_id,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            client_id="bench",
        )
        forbid_auto_topic_creation(self._producer.client)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def begin_transaction(self) -> None:
        await self._producer.begin_transaction()

    async def send(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        future: Awaitable[Any] = await self._producer.send(topic, value, partition=partition)
        return future

    async def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group: str) -> None:
        await self._producer.send_offsets_to_transaction(dict(offsets), group)

    async def commit_transaction(self) -> None:
        await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        await self._producer.abort_transaction()


@dataclass
class TxnTarget:
    """Whose transaction coordinator the producers use: ours (`coordinator`: our server's
    address) or the broker's own (`coordinator` None)."""

    name: str
    bootstrap_servers: str
    coordinator: str | None
    # Processes whose CPU time is reported per transaction (name -> pid), and the started
    # processes the target does not use ("others").
    watched: dict[str, int] = field(default_factory=dict)
    others: list[int] = field(default_factory=list)
    # More `CoordinatorClient` arguments for ours (its retry back-off, say).
    coordinator_options: dict[str, Any] = field(default_factory=dict)
    # How ours's connections are secured (--command-config; None: PLAINTEXT).
    security: ClientSecurity | None = None

    def producer(self, transactional_id: str) -> TxnProducer:
        if self.coordinator is None:
            return KafkaProducer(self.bootstrap_servers, transactional_id)
        return OursProducer(
            self.bootstrap_servers,
            self.coordinator,
            transactional_id,
            self.coordinator_options,
            self.security,
        )


@dataclass(frozen=True)
class TxnShape:
    """What each transaction of a row does."""

    records: int
    send_offsets: bool
    producers: int
    topic: str
    partitions: int


@dataclass
class TxnCounts:
    """What the producers' loops saw while measuring (errors: at any time)."""

    latencies: list[float] = field(default_factory=list)
    transactions: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    measuring: bool = False
    stopping: bool = False

    def failed(self, error: BaseException) -> None:
        self.errors += 1
        kind = type(error).__name__
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


async def producer_loop(
    producer: TxnProducer, index: int, shape: TxnShape, group: str, counts: TxnCounts
) -> None:
    """Transactions back to back until told to stop. A failed transaction is counted and
    aborted; a producer that cannot abort either (fenced, say) stops."""
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    value = bytes(RECORD_BYTES)
    partitions = [(index + i) % shape.partitions for i in range(shape.records)]
    consumed = TopicPartition(INPUT_TOPIC, index % INPUT_PARTITIONS)
    offset = 0
    while not counts.stopping:
        started = time.perf_counter()
        try:
            await producer.begin_transaction()
            for partition in partitions:
                await producer.send(shape.topic, value, partition)
            if shape.send_offsets:
                offset += shape.records
                await producer.send_offsets_to_transaction(
                    {consumed: OffsetAndMetadata(offset, "")}, group
                )
            await producer.commit_transaction()
        except Exception as error:
            counts.failed(error)
            try:
                await producer.abort_transaction()
            except Exception as abort_error:
                counts.failed(abort_error)
                return
            continue
        if counts.measuring:
            counts.latencies.append(time.perf_counter() - started)
            counts.transactions += 1


async def transactions(
    target: TxnTarget, run_id: str, shape: TxnShape, warmup_s: float, duration_s: float
) -> dict[str, Any]:
    """One row: `shape.producers` producers run transactions for `warmup_s`, then
    `duration_s` measured."""
    prefix = f"bench-txn-{target.name}-{run_id}"
    group = prefix
    producers = [target.producer(f"{prefix}-{i}") for i in range(shape.producers)]
    counts = TxnCounts()
    tasks: list[asyncio.Task[None]] = []
    try:
        # InitProducerId for every producer, before anything is measured.
        await asyncio.wait_for(
            asyncio.gather(*(producer.start() for producer in producers)), START_TIMEOUT_S
        )
        # The broker serves both targets: what it still does for the previous one (its
        # JIT compiler's queue, say) must not land on this one's figures.
        waited = await wait_until_quiet([*target.watched.values(), *target.others])

        def start() -> None:
            for index, producer in enumerate(producers):
                tasks.append(
                    asyncio.ensure_future(producer_loop(producer, index, shape, group, counts))
                )

        def set_measuring(on: bool) -> None:
            counts.measuring = on

        def stop() -> list[asyncio.Future[None]]:
            counts.stopping = True
            return list(tasks)

        seconds, generator_cpu, spent, quiet_s = await measure(
            start, set_measuring, stop, warmup_s, duration_s, target.watched, target.others
        )
    finally:
        for task in tasks:
            task.cancel()
        for producer in producers:
            with contextlib.suppress(Exception):
                await producer.stop()
    row: dict[str, Any] = {
        "transactions_per_s": round(counts.transactions / seconds, 1),
        "records_per_s": round(counts.transactions * shape.records / seconds, 1),
        **latency_summary_ms(counts.latencies),
        "transactions": counts.transactions,
        "errors": counts.errors,
    }
    if counts.error_kinds:
        row["error_kinds"] = dict(counts.error_kinds)
    row["generator_cpu"] = round(generator_cpu, 3)
    row["quiet_wait_s"] = round(waited + quiet_s, 1)
    row.update(cpu_per_request(spent, counts.transactions))
    return row


# The command.


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr, flush=True)


async def _create_topics(bootstrap_servers: str, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30000)
    forbid_auto_topic_creation(admin._client)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(name, count, 1)
            for name, count in ((topic, partitions), (INPUT_TOPIC, INPUT_PARTITIONS))
            if name not in existing
        ]
        if wanted:
            await admin.create_topics(wanted)
    finally:
        await admin.close()


def check_args(args: argparse.Namespace) -> None:
    """Refuse what cannot run, before any broker starts."""
    if args.bootstrap is not None and args.bootstrap_servers is None:
        raise SystemExit(
            "bench transactions: with --bootstrap, give the Kafka cluster of that server's "
            "log with --bootstrap-servers (the transactions' records go there)"
        )
    if args.broker != "kafka" and args.bootstrap_servers is None:
        raise SystemExit("bench transactions needs Kafka's transactions: use --broker kafka")
    if args.producers < 1 or not args.records_per_txn or min(args.records_per_txn) < 1:
        raise SystemExit("bench transactions: --producers and --records-per-txn must be >= 1")


def _targets(env: Environment, args: argparse.Namespace) -> list[TxnTarget]:
    bootstrap_servers = env.kafka()
    ours = TxnTarget("ours", bootstrap_servers, env.ours(), security=env.coordinator_security)
    if args.coordinator_retry_backoff_ms is not None:
        ours.coordinator_options["retry_backoff_ms"] = args.coordinator_retry_backoff_ms
    peer = TxnTarget("peer", bootstrap_servers, None)
    env.peer_address = bootstrap_servers
    env.peer_coordinator = "transaction coordinator"
    running = env.pids()
    for name in ("server", "broker"):
        if name in running:
            ours.watched[name] = running[name]
    if "broker" in running:
        peer.watched["broker"] = running["broker"]
    for target in (ours, peer):
        used = set(target.watched.values())
        target.others = [pid for pid in running.values() if pid not in used]
    return [ours, peer]


async def run_transactions(env: Environment, args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = _targets(env, args)
    topic = f"bench-txn-{os.getpid()}"
    await _create_topics(targets[0].bootstrap_servers, topic, args.partitions)
    offsets = {"on": [True], "off": [False], "both": [False, True]}[args.send_offsets]
    records = args.records_per_txn

    def shape(records: int, send_offsets: bool) -> TxnShape:
        return TxnShape(records, send_offsets, args.producers, topic, args.partitions)

    if args.jit_warmup > 0:
        # Each target's heaviest row, unmeasured: the broker (and Kafka's coordinator in it)
        # is then measured on compiled code, and Kafka's `__transaction_state` exists.
        heaviest = shape(max(records), max(offsets))
        for target in targets:
            _say(args, f"transactions: {target.name}, warming up")
            await transactions(target, f"{os.getpid()}-warmup", heaviest, 0.0, args.jit_warmup)
    rows: list[dict[str, Any]] = []
    for count in records:
        for send_offsets in offsets:
            by_target: dict[str, dict[str, Any]] = {}
            for target in targets:
                _say(
                    args,
                    f"transactions: {target.name}, {count} records"
                    f"{', offsets' if send_offsets else ''}",
                )
                row_shape = shape(count, send_offsets)
                row = median_row(
                    [
                        await transactions(
                            target, f"{os.getpid()}-{run}", row_shape, args.warmup, args.duration
                        )
                        for run in range(args.runs)
                    ]
                )
                by_target[target.name] = {
                    "target": target.name,
                    "records_per_txn": count,
                    "send_offsets": "yes" if send_offsets else "no",
                    "producers": args.producers,
                    **row,
                }
                rows.append(by_target[target.name])
            rows.append(ratio_row(by_target["ours"], by_target["peer"], RATIO_COLUMNS))
    return rows
