"""The clients of the history test, each recording every attempt it makes.

- `CommitWriter`: one per group, over the bare wire client. It finds the group's
  coordinator (FindCoordinator to the nodes in turn), commits a new, greater offset to each
  of its partitions with every attempt, and follows NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
  (look the coordinator up again), COORDINATOR_LOAD_IN_PROGRESS (same node, after a
  back-off) and a lost or silent connection (closed, the coordinator looked up again), as a
  Kafka client does.
- `OffsetReader`: fetches the committed offsets of the writers' groups the same way.
- `RecordingClient`: the client library's `CoordinatorClient`, recording every request it
  sends (each retry too) with the node it went to, for the consumer groups' members
  (`GroupMember`), which commit a new offset to their partitions while they are stable.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from history import FAIL, INFO, OK, Op, Recorder
from wire_client import WireClient, commit_body, fetch_body

from coordinator_client import Assignment, GroupMember, RangeAssignor
from coordinator_client.errors import CommitFailedError
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.errors import ClientError, ConnectionClosedError, RequestTimeoutError
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

Address = tuple[str, int]

# Look the coordinator up again.
REDISCOVER = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# Same coordinator, after a back-off.
RETRY_SAME = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT})


def code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class WireSession:
    """One client's connections and coordinator cache, over the bare wire client."""

    def __init__(
        self,
        process: str,
        recorder: Recorder,
        nodes: Mapping[int, Address],
        *,
        timeout_s: float,
        rng: random.Random,
    ) -> None:
        self.process = process
        self.recorder = recorder
        self.nodes = dict(nodes)
        self.timeout_s = timeout_s
        self.rng = rng
        self._connections: dict[int, WireClient] = {}
        self._coordinators: dict[str, int] = {}
        self._bootstrap = itertools.cycle(sorted(nodes))
        for _ in range(rng.randrange(len(nodes))):
            next(self._bootstrap)

    async def connection(self, node: int) -> WireClient:
        client = self._connections.get(node)
        if client is not None:
            if not client.closed:
                return client
            # The server closed it.
            await self.drop(node)
        host, port = self.nodes[node]
        client = await asyncio.wait_for(WireClient.connect(host, port), self.timeout_s)
        self._connections[node] = client
        return client

    async def drop(self, node: int) -> None:
        """After a timeout or a lost connection, as Kafka's client: close, forget."""
        client = self._connections.pop(node, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        for group, coordinator in list(self._coordinators.items()):
            if coordinator == node:
                del self._coordinators[group]

    def forget(self, group: str) -> None:
        self._coordinators.pop(group, None)

    async def call(self, node: int, api: ApiKey, body: Any) -> dict[str, Any]:
        client = await self.connection(node)
        return await client.call(api, body, timeout=self.timeout_s)

    async def coordinator(self, group: str) -> int | None:
        """The group's coordinator: cached, or asked of the next node (one attempt)."""
        cached = self._coordinators.get(group)
        if cached is not None:
            return cached
        node = next(self._bootstrap)
        op = self.recorder.invoke(self.process, "find", node=node, group=group)
        try:
            response = await self.call(
                node, ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": [group]}
            )
        except (OSError, TimeoutError) as exc:
            self.recorder.complete(op, INFO, error=type(exc).__name__)
            await self.drop(node)
            return None
        (answer,) = response["coordinators"]
        if answer["error_code"] != ErrorCode.NONE:
            self.recorder.complete(op, FAIL, error=code_name(answer["error_code"]))
            return None
        found: int = answer["node_id"]
        self.recorder.complete(op, OK, value=found)
        if found not in self.nodes:
            return None
        self._coordinators[group] = found
        return found

    async def close(self) -> None:
        for node in list(self._connections):
            await self.drop(node)


async def _settle(ops: Sequence[Op], recorder: Recorder, outcome: str, error: str) -> None:
    for op in ops:
        recorder.complete(op, outcome, error=error)


class CommitWriter:
    """Commits ever greater offsets to `partitions` of `topic` for `group`, one request at a
    time; each attempt carries a value of its own."""

    def __init__(
        self,
        session: WireSession,
        group: str,
        topic: str,
        partitions: Sequence[int],
        *,
        pause_s: float,
    ) -> None:
        self.session = session
        self.group = group
        self.topic = topic
        self.partitions = list(partitions)
        self.pause_s = pause_s
        self._values = itertools.count(1)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.attempt()
            await asyncio.sleep(self.pause_s)

    async def attempt(self) -> None:
        session, recorder = self.session, self.session.recorder
        node = await session.coordinator(self.group)
        if node is None:
            await asyncio.sleep(0.1)
            return
        value = next(self._values)
        attempt = recorder.new_attempt()
        ops = {
            p: recorder.invoke(
                session.process,
                "commit",
                node=node,
                group=self.group,
                topic=self.topic,
                partition=p,
                value=value,
                attempt=attempt,
            )
            for p in self.partitions
        }
        body = commit_body(self.group, {(self.topic, p): value for p in self.partitions})
        try:
            response = await session.call(node, ApiKey.OFFSET_COMMIT, body)
        except (OSError, TimeoutError) as exc:
            await _settle(list(ops.values()), recorder, INFO, type(exc).__name__)
            await session.drop(node)
            return
        codes: set[int] = set()
        for topic in response["topics"]:
            for answer in topic["partitions"]:
                code = answer["error_code"]
                codes.add(code)
                op = ops[answer["partition_index"]]
                if code == ErrorCode.NONE:
                    recorder.complete(op, OK)
                else:
                    recorder.complete(op, FAIL, error=code_name(code))
        await _settle(list(ops.values()), recorder, INFO, "not in the answer")
        if codes & REDISCOVER:
            session.forget(self.group)
        elif codes & RETRY_SAME:
            await asyncio.sleep(0.1)


async def fetch_offsets(
    session: WireSession, group: str, topic: str, partitions: Sequence[int], f: str
) -> bool:
    """One attempt to read the group's committed offsets; True when it was answered."""
    recorder = session.recorder
    node = await session.coordinator(group)
    if node is None:
        await asyncio.sleep(0.1)
        return False
    attempt = recorder.new_attempt()
    ops = {
        p: recorder.invoke(
            session.process, f, node=node, group=group, topic=topic, partition=p, attempt=attempt
        )
        for p in partitions
    }
    try:
        response = await session.call(
            node, ApiKey.OFFSET_FETCH, fetch_body(group, {topic: list(partitions)})
        )
    except (OSError, TimeoutError) as exc:
        await _settle(list(ops.values()), recorder, INFO, type(exc).__name__)
        await session.drop(node)
        return False
    (answer,) = response["groups"]
    code = answer["error_code"]
    if code != ErrorCode.NONE:
        await _settle(list(ops.values()), recorder, FAIL, code_name(code))
        if code in REDISCOVER:
            session.forget(group)
        else:
            await asyncio.sleep(0.1)
        return False
    for t in answer["topics"]:
        for p in t["partitions"]:
            op = ops.get(p["partition_index"])
            if op is None:
                continue
            if p["error_code"] == ErrorCode.NONE:
                recorder.complete(op, OK, value=p["committed_offset"])
            else:
                recorder.complete(op, FAIL, error=code_name(p["error_code"]))
    await _settle(list(ops.values()), recorder, INFO, "not in the answer")
    return all(op.outcome == OK for op in ops.values())


class OffsetReader:
    """Reads the committed offsets of random groups, one request at a time."""

    def __init__(
        self, session: WireSession, keys: Mapping[str, tuple[str, Sequence[int]]], *, pause_s: float
    ) -> None:
        self.session = session
        self.keys = dict(keys)
        self.pause_s = pause_s

    async def run(self, stop: asyncio.Event) -> None:
        groups = sorted(self.keys)
        while not stop.is_set():
            group = self.session.rng.choice(groups)
            topic, partitions = self.keys[group]
            await fetch_offsets(self.session, group, topic, partitions, "fetch")
            await asyncio.sleep(self.pause_s)


async def final_reads(
    session: WireSession, keys: Mapping[str, tuple[str, Sequence[int]]], timeout_s: float
) -> list[str]:
    """Read every group's offsets once answered; the groups that could not be read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    unread = []
    for group, (topic, partitions) in sorted(keys.items()):
        while not await fetch_offsets(session, group, topic, partitions, "final-read"):
            if loop.time() > deadline:
                unread.append(group)
                break
            await asyncio.sleep(0.2)
    return unread


class RecordingClient(CoordinatorClient):
    """The library's client, recording each request it sends: one operation per attempt,
    with the node it was sent to."""

    def __init__(
        self,
        bootstrap: str,
        *,
        process: str,
        recorder: Recorder,
        nodes: Mapping[int, Address],
        **options: Any,
    ) -> None:
        super().__init__(bootstrap, **options)
        self.process = process
        self.recorder = recorder
        self._node_of = {address: node for node, address in nodes.items()}

    async def _send(  # type: ignore[override]
        self, address: Address, request: Message, response_type: Any, deadline: float
    ) -> Any:
        ops = self._invoke(request, self._node_of.get(address))
        try:
            response = await super()._send(address, request, response_type, deadline)
        except (ConnectionClosedError, RequestTimeoutError) as exc:
            await _settle(ops, self.recorder, INFO, type(exc).__name__)
            raise
        except BaseException as exc:
            await _settle(ops, self.recorder, INFO, type(exc).__name__)
            raise
        self._complete(request, response, ops)
        return response

    def _invoke(self, request: Message, node: int | None) -> list[Op]:
        invoke = self.recorder.invoke
        p = self.process
        if isinstance(request, OffsetCommitRequest):
            attempt = self.recorder.new_attempt()
            return [
                invoke(
                    p,
                    "commit",
                    node=node,
                    group=request.group_id,
                    topic=topic.name,
                    partition=partition.partition_index,
                    value=partition.committed_offset,
                    attempt=attempt,
                    extra={"generation": request.generation_id_or_member_epoch},
                )
                for topic in request.topics
                for partition in topic.partitions
            ]
        if isinstance(request, FindCoordinatorRequest):
            return [invoke(p, "find", node=node, group=request.keys[0] if request.keys else None)]
        if isinstance(request, JoinGroupRequest):
            member = {"member_id": request.member_id}
            return [invoke(p, "join", node=node, group=request.group_id, extra=member)]
        if isinstance(request, SyncGroupRequest):
            return [
                invoke(
                    p,
                    "sync",
                    node=node,
                    group=request.group_id,
                    value=request.generation_id,
                    extra={"member_id": request.member_id},
                )
            ]
        if isinstance(request, HeartbeatRequest):
            return [
                invoke(
                    p,
                    "heartbeat",
                    node=node,
                    group=request.group_id,
                    value=request.generation_id,
                    extra={"member_id": request.member_id},
                )
            ]
        if isinstance(request, LeaveGroupRequest):
            return [invoke(p, "leave", node=node, group=request.group_id)]
        return [invoke(p, type(request).__name__, node=node)]

    def _complete(self, request: Message, response: Any, ops: list[Op]) -> None:
        complete = self.recorder.complete
        if isinstance(response, OffsetCommitResponse):
            by_key = {(op.topic, op.partition): op for op in ops}
            for topic in response.topics:
                for partition in topic.partitions:
                    op = by_key.get((topic.name, partition.partition_index))
                    if op is None:
                        continue
                    code = partition.error_code
                    if code == ErrorCode.NONE:
                        complete(op, OK)
                    else:
                        complete(op, FAIL, error=code_name(code))
            for op in ops:
                complete(op, INFO, error="not in the answer")
            return
        (op,) = ops
        if isinstance(response, FindCoordinatorResponse):
            answer = response.coordinators[0] if response.coordinators else None
            if answer is None or answer.error_code != ErrorCode.NONE:
                complete(op, FAIL, error=code_name(answer.error_code if answer else -1))
            else:
                complete(op, OK, value=answer.node_id)
            return
        code = getattr(response, "error_code", ErrorCode.NONE)
        if code != ErrorCode.NONE:
            complete(op, FAIL, error=code_name(code))
            return
        if isinstance(response, JoinGroupResponse):
            complete(op, OK, value=response.generation_id, extra={"member_id": response.member_id})
        elif isinstance(response, SyncGroupResponse):
            assigned = Assignment.decode(response.assignment) if response.assignment else None
            partitions = [
                [tp.topic, tp.partition] for tp in (assigned.partitions if assigned else ())
            ]
            complete(op, OK, extra={"assignment": partitions})
        elif isinstance(response, (HeartbeatResponse, LeaveGroupResponse)):
            complete(op, OK)
        else:
            complete(op, OK)


class MemberRunner:
    """A consumer group member (the client library's `GroupMember`) that commits a new
    offset to each of its partitions every `pause_s` while it is stable. The offsets come
    from counters shared by the group's members, so that a partition's next owner commits
    greater values than its last one did."""

    def __init__(
        self,
        client: RecordingClient,
        group: str,
        topic: str,
        partitions: int,
        counters: dict[tuple[str, int], Callable[[], int]],
        *,
        session_timeout_ms: int,
        pause_s: float,
    ) -> None:
        self.client = client
        self.counters = counters
        self.pause_s = pause_s
        self.member = GroupMember(
            client,
            group,
            [topic],
            partitions_for_topics={topic: partitions},
            assignors=[RangeAssignor()],
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=session_timeout_ms // 6,
        )

    async def run(self, stop: asyncio.Event) -> None:
        await self.member.start()
        while not stop.is_set():
            await asyncio.sleep(self.pause_s)
            assignment = self.member.assignment
            if not assignment or self.member.error is not None:
                continue
            offsets = {tp: self.counters[(tp.topic, tp.partition)]() for tp in assignment}
            with contextlib.suppress(CommitFailedError, ClientError, ApiError):
                await self.member.commit_offsets(offsets, timeout_ms=5000)

    def rejoin(self, reason: str) -> None:
        self.member.request_rejoin(reason)

    async def close(self) -> None:
        await self.member.close()
        await self.client.close()


def rebalance(members: Sequence[MemberRunner], reason: str) -> None:
    """Make the group of `members` rebalance: its leader rejoins (a follower that rejoins
    with the same subscription is only given the current generation again, as in Kafka)."""
    leader = next((m for m in members if m.member.is_leader), members[0])
    leader.rejoin(reason)


async def churn(
    groups: Mapping[str, Sequence[MemberRunner]],
    rng: random.Random,
    every_s: tuple[float, float],
    stop: asyncio.Event,
) -> None:
    """Make a random group rebalance now and then, under the faults."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(*every_s))
        if not stop.is_set():
            rebalance(groups[rng.choice(sorted(groups))], "churn")
