"""The write and load paths in process, printed (a command, not a test):
`python tests/runtime/bench_write_path.py [--rounds 7]`.

The server's own wiring (CoordinatorApp: the service's handlers, the runtime as the server
configures it, the shard) over the in-memory log, which commits each append as it takes it;
no sockets, no broker. A request goes to the service's handler as a connection hands it over.

- commits: ten-partition OffsetCommits of 100 groups, one at a time and 64 in flight;
- heartbeats: of the members of a Stable group, 64 in flight;
- rebalance: a group of `--members` members joins (two steps each) and syncs;
- load: a partition of `--records` offset commit records (runs of ten, a GroupMetadata
  record every 1,000) loaded into a fresh shard.

Each figure is the process's CPU time (not the wall clock's, which counts the time other
processes had the CPU): microseconds per request, or milliseconds for a rebalance and a
load; the median of `--rounds` rounds, the best beside it. To compare two trees, run this
for each in the same session, alternating, and compare medians.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent)]

from coordinator_protocol.api_keys import ApiKey  # noqa: E402
from coordinator_protocol.errors import ErrorCode  # noqa: E402
from coordinator_protocol.messages import (  # noqa: E402
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    Message,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator_server.app import CoordinatorApp  # noqa: E402
from coordinator_server.config import CoordinatorConfig  # noqa: E402
from coordinator_server.records import (  # noqa: E402
    GroupMetadataValue,
    encode_record,
    new_group_metadata_record,
    new_offset_commit_record,
)
from coordinator_server.runtime.api import RequestContext  # noqa: E402
from coordinator_server.runtime.clock import SystemClock  # noqa: E402
from coordinator_server.runtime.runtime import CoordinatorRuntime  # noqa: E402
from coordinator_server.service.replies import PendingReply  # noqa: E402
from coordinator_server.shard import LogPartitionShard, ShardConfig  # noqa: E402
from coordinator_server.storage.memory import InMemoryLog  # noqa: E402

RC = RequestContext(client_id="bench", client_host="/127.0.0.1")
GROUPS = 100
PARTITIONS = 10


def commit_request(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name="topic",
                partitions=[
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=offset)
                    for p in range(PARTITIONS)
                ],
            )
        ],
    )


def join_request(group: str, member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01subscription")],
    )


class Bench:
    def __init__(self) -> None:
        config = CoordinatorConfig(
            port=0,
            metrics_port=-1,
            offsets_topic_partitions=4,
            group_initial_rebalance_delay_ms=0,
        )
        self.app = CoordinatorApp(config, log=InMemoryLog(config.offsets_topic_partitions))

    async def start(self) -> None:
        await self.app.start()
        dispatch = self.app.dispatch
        assert dispatch is not None
        # Looked up once, as the listener's connections share it.
        self.handlers = dispatch.handlers

    async def stop(self) -> None:
        await self.app.shutdown()

    def call(self, api_key: ApiKey, request: Message) -> Any:
        return self.handlers[api_key](request, RC)

    async def answer(self, reply: Any) -> Any:
        return await reply.future if isinstance(reply, PendingReply) else reply

    async def requests(
        self, make: Callable[[int], Message], api_key: ApiKey, count: int, inflight: int
    ) -> float:
        """Microseconds per request, `inflight` at a time."""
        started = time.process_time()
        index = 0
        while index < count:
            replies = [self.call(api_key, make(i)) for i in range(index, index + inflight)]
            for reply in replies:
                response = await self.answer(reply)
                assert getattr(response, "error_code", 0) == 0, response
            index += inflight
        return (time.process_time() - started) / count * 1e6

    async def stable_group(self, group: str, members: int) -> tuple[list[str], int]:
        """A group of `members` members, joined (two steps each) and synced; its member ids
        and generation."""
        ids: list[str] = []
        for _ in range(members):
            first = await self.answer(self.call(ApiKey.JOIN_GROUP, join_request(group, "")))
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
            ids.append(first.member_id)
        joins = [self.call(ApiKey.JOIN_GROUP, join_request(group, member)) for member in ids]
        answers = [await self.answer(join) for join in joins]
        leader = next(a for a in answers if a.leader == a.member_id)
        generation = leader.generation_id
        syncs = []
        for member in ids:
            assignments = (
                [SyncGroupRequestAssignment(member_id=m, assignment=b"a" * 20) for m in ids]
                if member == leader.member_id
                else []
            )
            syncs.append(
                self.call(
                    ApiKey.SYNC_GROUP,
                    SyncGroupRequest(
                        group_id=group,
                        generation_id=generation,
                        member_id=member,
                        assignments=assignments,
                    ),
                )
            )
        for sync in syncs:
            answer = await self.answer(sync)
            assert answer.error_code == ErrorCode.NONE, answer
        return ids, generation


async def bench_commits(count: int, inflight: int) -> float:
    bench = Bench()
    await bench.start()
    try:
        await bench.requests(
            lambda i: commit_request(f"group-{i % GROUPS}", i), ApiKey.OFFSET_COMMIT, 1000, 1
        )
        return await bench.requests(
            lambda i: commit_request(f"group-{i % GROUPS}", i),
            ApiKey.OFFSET_COMMIT,
            count,
            inflight,
        )
    finally:
        await bench.stop()


async def bench_heartbeats(count: int) -> float:
    bench = Bench()
    await bench.start()
    try:
        members, generation = await bench.stable_group("hb", 64)

        def heartbeat(i: int) -> Message:
            return HeartbeatRequest(
                group_id="hb", generation_id=generation, member_id=members[i % len(members)]
            )

        return await bench.requests(heartbeat, ApiKey.HEARTBEAT, count, len(members))
    finally:
        await bench.stop()


async def bench_rebalance(members: int) -> float:
    bench = Bench()
    await bench.start()
    try:
        started = time.process_time()
        await bench.stable_group("big", members)
        return (time.process_time() - started) * 1e3
    finally:
        await bench.stop()


async def bench_load(records: int) -> float:
    log = InMemoryLog(1)
    entries: list[tuple[bytes, bytes | None]] = []
    member_value = GroupMetadataValue("consumer", 1, "range", None, 0)
    while len(entries) < records:
        group = f"group-{len(entries) // 10 % 1000}"
        if len(entries) % 1000 == 0:
            entries.append(encode_record(new_group_metadata_record(group, member_value)))
        entries.extend(
            encode_record(new_offset_commit_record(group, "topic", p, len(entries), -1, "", 1))
            for p in range(PARTITIONS)
        )
    await log.writer.append(0, entries)
    runtime: CoordinatorRuntime[LogPartitionShard] = CoordinatorRuntime(
        shard_builder=lambda context: LogPartitionShard(context, ShardConfig()),
        writer=log.writer,
        loader=log.loader,
        clock=SystemClock(),
    )
    gc.disable()
    try:
        started = time.process_time()
        runtime.schedule_load(0, 1)
        await runtime.wait_loaded(0)
        return (time.process_time() - started) * 1e3
    finally:
        gc.enable()
        runtime.close()


def report(name: str, unit: str, figures: list[float]) -> None:
    print(
        f"{name:<26} median {statistics.median(figures):10.2f} {unit}   "
        f"best {min(figures):10.2f}   all {', '.join(f'{f:.2f}' for f in figures)}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--heartbeats", type=int, default=64_000)
    parser.add_argument("--members", type=int, default=500)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument(
        "--only", choices=["commits", "heartbeats", "rebalance", "load"], action="append"
    )
    args = parser.parse_args()
    chosen = args.only or ["commits", "heartbeats", "rebalance", "load"]

    def rounds(measure: Callable[[], Awaitable[float]]) -> list[float]:
        return [asyncio.run(measure()) for _ in range(args.rounds)]

    if "commits" in chosen:
        report("commit, 1 in flight", "us", rounds(lambda: bench_commits(args.commits, 1)))
        report("commit, 64 in flight", "us", rounds(lambda: bench_commits(args.commits, 64)))
    if "heartbeats" in chosen:
        report("heartbeat, 64 in flight", "us", rounds(lambda: bench_heartbeats(args.heartbeats)))
    if "rebalance" in chosen:
        report(
            f"rebalance, {args.members} members",
            "ms",
            rounds(lambda: bench_rebalance(args.members)),
        )
    if "load" in chosen:
        report(f"load, {args.records} records", "ms", rounds(lambda: bench_load(args.records)))


if __name__ == "__main__":
    main()
