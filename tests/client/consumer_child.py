"""A CoordinatedConsumer in a process of its own, for tests that kill it with SIGKILL.

It prints one line per event on stdout: "A <p,p,...>" when partitions are assigned,
"V <p,p,...>" when they are revoked, "R <partition> <offset>" per record processed. A line
"slow <ms>" on stdin makes it take that long per record from then on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from aiokafka import ConsumerRebalanceListener
from aiokafka.structs import TopicPartition

from coordinator_client import CoordinatedConsumer, StickyAssignor

delay_s = 0.0


def read_commands() -> None:
    global delay_s
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "slow":
            delay_s = float(argument) / 1000


def partitions_text(partitions: set[TopicPartition]) -> str:
    return ",".join(str(tp.partition) for tp in sorted(partitions))


class PrintingListener(ConsumerRebalanceListener):  # type: ignore[misc]
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        print(f"V {partitions_text(revoked)}", flush=True)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        print(f"A {partitions_text(assigned)}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--kafka", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--auto-commit-interval-ms", type=int, default=200)
    args = parser.parse_args()
    threading.Thread(target=read_commands, daemon=True).start()
    consumer = CoordinatedConsumer(
        bootstrap_servers=args.kafka,
        coordinator_bootstrap_servers=args.coordinator,
        group_id=args.group,
        client_id="consumer-child",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=args.auto_commit_interval_ms,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 3,
        max_poll_interval_ms=10_000,
        partition_assignment_strategy=[StickyAssignor()],
    )
    consumer.subscribe([args.topic], listener=PrintingListener())
    async with consumer:
        async for record in consumer:
            print(f"R {record.partition} {record.offset}", flush=True)
            if delay_s:
                await asyncio.sleep(delay_s)


if __name__ == "__main__":
    asyncio.run(main())
