"""Exactly-once consume-transform-produce under a nemesis, on Apache Kafka.

A job built on the client library (`eos_job.py`, in a process of its own) reads an input
topic in a group coordinated by coordinator-server and, in one transaction per batch, writes
one output record per input record and commits the consumed offsets. While the input is
written, a seeded nemesis kills (-9) the job at random moments and restarts it after a short
pause, and kills (-9) coordinator-server and restarts it at once on the same log. Then the
job runs until the group has committed the whole input, and a stock aiokafka consumer reads
the output: with read_committed, every input id exactly once and nothing else; with
read_uncommitted, at least as much (the aborted records are in the log, and hidden).

`TXN_CHAOS_SEED` replays a run's faults (the seed is printed first and in any failure).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord, TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess

from coordinator_client import ApiError, CoordinatorClient, ErrorCode

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "eos_job.py"
PARTITIONS = 4
RECORDS = 3000
# The input is written over this long; the nemesis strikes FAULTS times meanwhile.
CHAOS_S = 35.0
FAULTS = 7
# After the faults, how long the job may take to commit the rest of the input.
DRAIN_S = 60.0
SESSION_TIMEOUT_MS = 3000
BATCH = 50
# Per record: the job is busy most of the run (the input comes at about 70 records/s and
# each restart sets it back), so that a kill often finds a transaction open.
WORK_MS = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("TXN_CHAOS_SEED") or random.randrange(2**32))
    print(f"\nTXN_CHAOS_SEED={value}", file=sys.stderr)
    return value


@dataclass
class Names:
    log: str
    input: str
    output: str
    group: str
    transactional_id: str

    @classmethod
    def unique(cls) -> Names:
        suffix = uuid.uuid4().hex[:8]
        return cls(
            f"__txn_eos_log_{suffix}",
            f"eos-in-{suffix}",
            f"eos-out-{suffix}",
            f"eos-group-{suffix}",
            f"eos-job-{suffix}",
        )


class Server:
    """coordinator-server, restarted on the same port and log after each kill."""

    def __init__(self, broker: ApacheKafkaBroker, names: Names) -> None:
        self.port = free_port()
        self.args = [
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--bootstrap-servers", broker.bootstrap,
            "--offsets-topic", names.log,
            "--offsets-topic-partitions", "4",
            "--offsets-topic-replication-factor", "1",
            "--transactions", "on",
            # A node alone, back as soon as it has loaded the log (a cluster's node replacing
            # itself waits a session timeout for Kafka to drop its earlier self: the
            # cluster's own tests cover that).
            "--cluster", "off",
            "--group-min-session-timeout-ms", "500",
            "--group-initial-rebalance-delay-ms", "0",
            # The job's consumer takes the consumer group protocol (the default where the
            # server knows the data cluster's topics), whose session is the server's: a
            # job killed -9 gives its partitions up as soon as with the classic protocol.
            "--group-consumer-min-session-timeout-ms", "500",
            "--group-consumer-session-timeout-ms", str(SESSION_TIMEOUT_MS),
            "--group-consumer-min-heartbeat-interval-ms", "100",
            "--group-consumer-heartbeat-interval-ms", str(SESSION_TIMEOUT_MS // 3),
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "1000",
            *broker.coordinator_args,
        ]  # fmt: skip
        self.process: ServerProcess | None = None
        self.kills = 0
        self.outputs: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        process = ServerProcess(self.args)
        await asyncio.to_thread(process.start)
        self.process = process

    async def kill(self) -> None:
        if self.process is not None:
            await asyncio.to_thread(self.process.kill)
            self.outputs.append(self.process.output())
            self.kills += 1
            self.process = None

    async def close(self) -> None:
        if self.process is not None:
            await asyncio.to_thread(self.process.kill)
            self.outputs.append(self.process.output())
            self.process = None


@dataclass
class Job:
    """eos_job.py, restarted whenever it is killed or exits."""

    args: list[str]
    process: asyncio.subprocess.Process | None = None
    kills: int = 0
    exits: list[int] = field(default_factory=list)
    commits: int = 0
    aborts: int = 0
    starts: int = 0
    lines: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    _readers: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(JOB), *self.args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )  # fmt: skip
        self.starts += 1
        self._readers += [
            asyncio.create_task(self._read_stdout(self.process)),
            asyncio.create_task(self._read_stderr(self.process, self.starts)),
        ]

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode().strip()
            self.lines.append(f"{time.monotonic():.1f} {line}")
            if line.startswith("C "):
                self.commits += 1
            elif line.startswith("X "):
                self.aborts += 1

    async def _read_stderr(self, process: asyncio.subprocess.Process, run: int) -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            self.stderr.append(f"[job run {run}] {time.monotonic():.1f} {raw.decode().rstrip()}")

    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def kill(self) -> None:
        if self.running():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
            await self.process.wait()
            self.kills += 1

    async def restart_if_exited(self) -> None:
        """A job that ended by itself (fenced, or failed) is started again."""
        if self.process is not None and self.process.returncode is not None:
            self.exits.append(self.process.returncode)
            self.process = None
            await asyncio.sleep(0.5)
            await self.start()

    async def stop(self) -> None:
        """SIGTERM (it stops between transactions), then SIGKILL if it does not."""
        if self.running():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        for reader in self._readers:
            await reader


def schedule(rng: random.Random) -> list[tuple[float, str, float]]:
    """(gap, what, pause): `gap` seconds after the previous fault was repaired, kill the
    job, the server or both; a killed job is restarted `pause` seconds later, the server at
    once (it is back once it has loaded the log)."""
    return [
        (
            rng.uniform(2.0, 6.0),
            rng.choices(["job", "server", "both"], weights=[5, 4, 1])[0],
            rng.uniform(0.1, 2.0),
        )
        for _ in range(FAULTS)
    ]


async def nemesis(
    events: list[tuple[float, str, float]], job: Job, server: Server, log: list[str]
) -> None:
    start = time.monotonic()
    for gap, what, pause in events:
        await asyncio.sleep(gap)
        await job.restart_if_exited()
        log.append(f"{time.monotonic():.1f} {time.monotonic() - start:6.1f}s kill {what}")
        if what in ("server", "both"):
            await server.kill()
        if what in ("job", "both"):
            await job.kill()
        if what in ("job", "both"):
            await asyncio.sleep(pause)
            await job.start()
        if what in ("server", "both"):
            await server.start()
        log.append(f"{time.monotonic():.1f} {time.monotonic() - start:6.1f}s repaired")


async def write_input(broker: ApacheKafkaBroker, topic: str) -> None:
    """RECORDS records with unique ids, spread over CHAOS_S."""
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    try:
        chunk = 50
        pause = CHAOS_S / (RECORDS / chunk)
        for start in range(0, RECORDS, chunk):
            futures = [
                await producer.send(topic, str(i).encode(), partition=i % PARTITIONS)
                for i in range(start, min(start + chunk, RECORDS))
            ]
            await asyncio.gather(*futures)
            await asyncio.sleep(pause)
    finally:
        await producer.stop()


async def create_topics(broker: ApacheKafkaBroker, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    finally:
        await admin.close()


async def end_offsets(broker: ApacheKafkaBroker, topic: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        return ends
    finally:
        await consumer.stop()


async def committed_offsets(server: Server, group: str) -> dict[TopicPartition, int] | None:
    """The group's stable committed offsets; None while one is pending or unreachable."""
    client = CoordinatorClient(server.address, request_timeout_ms=3000)
    try:
        offsets = await client.fetch_offsets(group, require_stable=True)
    except ApiError as e:
        if e.code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
            return None
        raise
    except OSError:
        return None
    finally:
        await client.close()
    return {tp: value.offset for tp, value in offsets.items()}


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        await asyncio.sleep(0.5)


@dataclass
class Read:
    values: list[bytes]
    keys: list[bytes]


async def read_topic(broker: ApacheKafkaBroker, topic: str, isolation_level: str) -> Read:
    """Everything of `topic` a consumer of that isolation level reads, up to the end the
    topic has now (for read_committed, its last stable offset: which must reach the log end,
    no transaction being left open)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    read = Read([], [])
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await end_offsets(broker, topic)
        deadline = time.monotonic() + 30
        async for records in _batches(consumer):
            for record in records:
                read.values.append(record.value)
                read.keys.append(record.key or b"")
            positions = {tp: await consumer.position(tp) for tp in partitions}
            if all(positions[tp] >= ends[tp] for tp in partitions):
                return read
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{isolation_level} read of {topic} stopped at {positions}, log ends at "
                    f"{ends}: a transaction was left open"
                )
    finally:
        await consumer.stop()
    return read


async def _batches(consumer: AIOKafkaConsumer) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    while True:
        fetched = await consumer.getmany(timeout_ms=200)
        yield [record for records in fetched.values() for record in records]


async def test_every_input_record_is_in_the_output_exactly_once(
    kafka_broker: ApacheKafkaBroker, seed: int
) -> None:
    rng = random.Random(seed)
    names = Names.unique()
    await create_topics(kafka_broker, names.input, names.output)
    server = Server(kafka_broker, names)
    job = Job(
        [
            "--coordinator", server.address,
            "--kafka", kafka_broker.bootstrap,
            "--group", names.group,
            "--input", names.input,
            "--output", names.output,
            "--transactional-id", names.transactional_id,
            "--batch", str(BATCH),
            "--work-ms", str(WORK_MS),
            "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
        ]
    )  # fmt: skip
    events = schedule(rng)
    faults: list[str] = []
    await server.start()
    try:
        await job.start()
        await asyncio.gather(
            write_input(kafka_broker, names.input), nemesis(events, job, server, faults)
        )
        inputs = await end_offsets(kafka_broker, names.input)

        async def everything_committed() -> bool:
            await job.restart_if_exited()
            return await committed_offsets(server, names.group) == inputs

        await until(everything_committed, DRAIN_S, "the job to commit the whole input")
        await job.stop()

        source = await read_topic(kafka_broker, names.input, "read_uncommitted")
        committed = await read_topic(kafka_broker, names.output, "read_committed")
        everything = await read_topic(kafka_broker, names.output, "read_uncommitted")
    except BaseException:
        print(f"TXN_CHAOS_SEED={seed} faults:\n" + "\n".join(faults), file=sys.stderr)
        print("\n".join(job.stderr[-200:]), file=sys.stderr)
        await job.stop()
        await server.close()
        print("".join(server.outputs)[-20_000:], file=sys.stderr)
        raise
    await server.close()

    ids = Counter(source.values)
    assert len(source.values) == RECORDS and len(ids) == RECORDS, "the input has unique ids"
    produced = Counter(committed.values)
    duplicates = {value: count for value, count in produced.items() if count > 1}
    expected = {b"out-" + value for value in ids}
    missing = expected - set(produced)
    foreign = set(produced) - expected
    transactions = len(set(committed.keys))
    report = (
        f"TXN_CHAOS_SEED={seed}: {RECORDS} records in, {len(committed.values)} out committed, "
        f"{len(everything.values)} out uncommitted "
        f"({len(everything.values) - len(committed.values)} aborted), "
        f"job killed {job.kills}x (exited by itself {job.exits}), server killed "
        f"{server.kills}x, {transactions} transactions with records committed "
        f"({job.commits} commits and {job.aborts} aborts reported by the job)\n" + "\n".join(faults)
    )
    # The timeline, shown by pytest when a check fails.
    print("\n".join(job.lines + job.stderr), file=sys.stderr)
    print("".join(server.outputs)[-20_000:], file=sys.stderr)
    print(report, file=sys.stderr)
    # Which transactions (producer epoch/transaction of the job) wrote each duplicate.
    writers: dict[bytes, list[bytes]] = {}
    for value, key in zip(committed.values, committed.keys, strict=True):
        if value in duplicates:
            writers.setdefault(value, []).append(key)
    first = list(writers.items())[:10]
    assert not duplicates, f"{len(duplicates)} ids more than once: {first}\n{report}"
    assert not missing, f"{len(missing)} ids missing: {sorted(missing)[:20]}\n{report}"
    assert not foreign, f"records that are no input's: {sorted(foreign)[:20]}\n{report}"
    assert len(everything.values) >= len(committed.values), report
    assert Counter(everything.values).keys() >= produced.keys(), report
    assert job.kills + server.kills >= 3, f"the nemesis struck too seldom\n{report}"
