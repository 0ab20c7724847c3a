"""Storage throughput, printed (a command, not a test):
`python tests/storage/bench_storage.py [--broker kafka|tansu]`.

SQLite: appends of 10-record batches per synchronous mode, one at a time and 64 in flight,
and a load of 100k records. Kafka (an Apache Kafka broker started here, or tansu with
`--broker tansu`): appends, a load of 100k
records from one partition, and 50 partitions loaded at once, empty and holding 100k
records, with loads in parallel and one at a time; then what the broker's CPU spends on a
ProduceRequest, on each partition's batch in it and on each record (the cost our appends
put on the broker, which shares a core with the server in `coordinator-server bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

from apache_kafka import ApacheKafkaBroker  # noqa: E402
from kafka_broker import KafkaBroker  # noqa: E402
from tansu_broker import TansuBroker  # noqa: E402

from coordinator_server.records import encode_record, new_offset_commit_record  # noqa: E402
from coordinator_server.storage.kafka.log import KafkaLog  # noqa: E402
from coordinator_server.storage.sqlite import SqliteLog  # noqa: E402
from coordinator_server.tools.bench.processes import cpu_seconds  # noqa: E402

VALUE = b"x" * 80


def batch_of(count: int, prefix: bytes = b"group") -> list[tuple[bytes, bytes | None]]:
    return [(b"%s-%d" % (prefix, i), VALUE) for i in range(count)]


def ignore(offset: int, key: bytes, value: bytes | None) -> None:
    pass


async def append_limited(
    log: SqliteLog,
    partition: int,
    batch: list[tuple[bytes, bytes | None]],
    in_flight: asyncio.Semaphore,
) -> None:
    async with in_flight:
        await log.append(partition, batch)


async def bench_sqlite(directory: Path) -> None:
    for synchronous in ("FULL", "NORMAL"):
        log = SqliteLog(directory / f"{synchronous}.db", 4, synchronous=synchronous)
        await log.start()
        batch = batch_of(10)
        count = 2000
        in_flight = asyncio.Semaphore(64)
        started = time.perf_counter()
        for i in range(count):
            await log.append(i % 4, batch)
        serial = count / (time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.gather(*(append_limited(log, i % 4, batch, in_flight) for i in range(count)))
        concurrent = count / (time.perf_counter() - started)
        print(
            f"sqlite {synchronous:6}: {serial:7.0f} batches/s one at a time, "
            f"{concurrent:7.0f} batches/s with 64 in flight (10 records of ~90 bytes each)"
        )
        await log.close()

    log = SqliteLog(directory / "load.db", 1, synchronous="OFF")
    await log.start()
    for _ in range(100):
        await log.append(0, batch_of(1000))
    started = time.perf_counter()
    summary = await log.load(0, ignore)
    print(f"sqlite load of {summary.records} records: {time.perf_counter() - started:.3f} s")
    await log.close()


async def bench_kafka(bootstrap: str) -> None:
    one = KafkaLog(bootstrap, "bench-one", 1, 1)
    await one.start()
    started = time.perf_counter()
    for _ in range(1000):
        await one.append(0, batch_of(10))
    elapsed = time.perf_counter() - started
    print(f"kafka: {1000 / elapsed:.0f} batches/s of 10 records, one at a time")
    for _ in range(99):
        await one.append(0, batch_of(1000))
    started = time.perf_counter()
    summary = await one.load(0, ignore)
    print(
        f"kafka load of {summary.records} records from one partition: "
        f"{time.perf_counter() - started:.3f} s"
    )
    await one.close()

    for label, per_partition in (("empty", 0), ("100k records", 2000)):
        topic = f"bench-fifty-{per_partition}"
        writer = KafkaLog(bootstrap, topic, 50, 1)
        await writer.start()
        if per_partition:
            await asyncio.gather(
                *(
                    writer.append(p, batch_of(1000, b"p%d" % p))
                    for p in range(50)
                    for _ in range(per_partition // 1000)
                )
            )
        await writer.close()
        for concurrency in (16, 1):
            reader = KafkaLog(bootstrap, topic, 50, 1, max_concurrent_loads=concurrency)
            await reader.start()
            started = time.perf_counter()
            await asyncio.gather(*(reader.load(p, ignore) for p in range(50)))
            elapsed = time.perf_counter() - started
            print(
                f"kafka load of 50 partitions ({label}), {concurrency:2} at a time: {elapsed:.3f} s"
            )
            await reader.close()


async def bench_broker_cost(bootstrap: str, broker_pid: int) -> None:
    log = KafkaLog(bootstrap, "bench-cost", 50, 1)
    await log.start()
    # An offset commit record as the server writes it.
    record = encode_record(
        new_offset_commit_record("group-123", "topic", 5, 1000, -1, "", 1_764_000_000_000)
    )
    shapes = ((1, 1, 2000), (1, 100, 1000), (50, 1, 300), (50, 10, 300))
    for partitions, records, requests in shapes:
        before = cpu_seconds(broker_pid)
        for _ in range(requests):
            # Appends of one turn of the event loop leave in one ProduceRequest.
            await asyncio.gather(*(log.append(p, [record] * records) for p in range(partitions)))
        spent = cpu_seconds(broker_pid) - before
        print(
            f"broker CPU, requests of {partitions:2} partitions x {records:3} records: "
            f"{spent / requests * 1e6:6.0f} us a request, "
            f"{spent / (requests * partitions) * 1e6:5.1f} us a batch, "
            f"{spent / (requests * partitions * records) * 1e6:5.2f} us a record"
        )
    await log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Storage throughput, printed.")
    parser.add_argument("--broker", choices=["kafka", "tansu"], default="kafka")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(bench_sqlite(Path(directory)))
    started: contextlib.AbstractContextManager[KafkaBroker] = (
        ApacheKafkaBroker() if arguments.broker == "kafka" else TansuBroker()
    )
    with started as broker:
        asyncio.run(bench_kafka(broker.bootstrap))
        asyncio.run(bench_broker_cost(broker.bootstrap, broker.pid))


if __name__ == "__main__":
    main()
