"""The classic protocol driven the way production drives it, with GroupsContext's calls.

`ServiceGroupsContext` runs the server's own wiring in process (CoordinatorApp: the
service's handlers, the runtime as the server configures it, the shard and its managers) on
an in-memory log that commits each append, and a manual clock. A request goes to the
service's handler as a connection hands it over (no socket), so it takes the route a served
request takes: a write on an idle partition runs at once, its records are appended and its
answer waits for their commit. Each call then lets the event loop run until every partition
is idle, so the answers the commit releases have arrived when it returns; time moves only
in `sleep`, timer by timer. A reload is a restart: the app shuts down and a new one loads
the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from groups_harness import (
    GROUP,
    RC,
    commit_request,
    fetch_request,
    fetched,
    heartbeat_request,
    leave_request,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupResponse,
    Message,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
)
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.groups.classic import ClassicGroup
from coordinator_server.records import CoordinatorRecord, decode_record
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.replies import PendingReply
from coordinator_server.shard import LogPartitionShard
from coordinator_server.storage.memory import InMemoryLog

T = TypeVar("T")

# Turns of the event loop a call may take to leave every partition idle: an append and its
# commit take a few; a runtime that never settles is a failure, not a wait.
_SETTLE_TURNS = 1_000
# Timers one `sleep` may fire; past it something re-arms itself without end.
_SLEEP_TIMERS = 100_000


class Answer:
    """A caller's answer as its connection would write it: the handler's response, or its
    future's result, or the response its `on_error` makes of the future's failure."""

    def __init__(self, reply: Message | PendingReply) -> None:
        self._reply = reply

    @property
    def done(self) -> bool:
        reply = self._reply
        return not isinstance(reply, PendingReply) or reply.future.done()

    @property
    def completions(self) -> int:
        # A future is completed once at most; the shard context counts its handles' answers.
        return int(self.done)

    @property
    def response(self) -> Any:
        reply = self._reply
        if not isinstance(reply, PendingReply):
            return reply
        future = reply.future
        assert future.done(), "still waiting"
        error = asyncio.CancelledError() if future.cancelled() else future.exception()
        if error is None:
            return future.result()
        assert reply.on_error is not None, f"no answer for {error!r}"
        return reply.on_error(error)


class ServiceGroupsContext:
    def __init__(self, **settings: Any) -> None:
        settings.setdefault("metrics_port", -1)
        self.config = CoordinatorConfig(port=0, **settings)
        self.clock = ManualClock(start_ms=1_700_000_000_000)
        self.log = InMemoryLog(self.config.offsets_topic_partitions)
        self.loop = asyncio.new_event_loop()
        self._app: CoordinatorApp | None = None
        try:
            self._run(self._start())
        except BaseException:
            self.close()
            raise

    # Calls.

    def call(self, api_key: ApiKey, request: Message) -> Answer:
        """Any request, to the service's handler of its API."""
        return self._call(api_key, request)

    def join(self, request: JoinGroupRequest) -> Answer:
        return self._call(ApiKey.JOIN_GROUP, request)

    def sync_group(self, request: SyncGroupRequest) -> Answer:
        return self._call(ApiKey.SYNC_GROUP, request)

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = GROUP, instance: str | None = None
    ) -> int:
        request = heartbeat_request(member_id, generation, group=group, instance=instance)
        response = self._call(ApiKey.HEARTBEAT, request).response
        assert isinstance(response, HeartbeatResponse), response
        return response.error_code

    def leave(self, *members: tuple[str, str | None], group: str = GROUP) -> LeaveGroupResponse:
        response = self._call(ApiKey.LEAVE_GROUP, leave_request(*members, group=group)).response
        assert isinstance(response, LeaveGroupResponse), response
        return response

    def commit_offsets(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        group: str = GROUP,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
    ) -> OffsetCommitResponse:
        request = commit_request(
            offsets, group=group, generation=generation, member_id=member_id, instance=instance
        )
        response = self._call(ApiKey.OFFSET_COMMIT, request).response
        assert isinstance(response, OffsetCommitResponse), response
        return response

    def fetch(
        self,
        topics: dict[str, list[int]] | None = None,
        *,
        group: str = GROUP,
        latest: bool = False,
    ) -> dict[tuple[str, int], int]:
        """The group's committed offsets; `latest` asks as require_stable does (after the
        group's pending writes)."""
        request = OffsetFetchRequest(
            groups=[fetch_request(topics, group=group)], require_stable=latest
        )
        response = self._call(ApiKey.OFFSET_FETCH, request).response
        assert isinstance(response, OffsetFetchResponse), response
        (answer,) = response.groups
        assert answer.error_code == ErrorCode.NONE, answer
        return fetched(answer)

    def sleep(self, ms: int) -> None:
        """Move time on by `ms`, firing the timers that fall due one at a time, the event
        loop running between them as it would while time passes."""
        self._run(self._sleep(ms))

    def commit(self) -> None:
        """The log commits each append by itself: nothing is left to commit once a call
        has returned."""
        self._run(self._settle())

    def reload(self) -> None:
        """A restart: the app shuts down (its parked callers fail) and a new one loads the
        log."""
        self._run(self._restart())

    # State, for checks.

    def find_group(self, group_id: str) -> ClassicGroup | None:
        shard = self.runtime.shard(self.service_partition(group_id))
        return None if shard is None else shard.managers.groups.group(group_id)

    def all_groups(self) -> list[ClassicGroup]:
        runtime = self.runtime
        groups: list[ClassicGroup] = []
        for partition in sorted(runtime.partitions()):
            shard = runtime.shard(partition)
            assert shard is not None, f"partition {partition} is not active"
            groups.extend(shard.managers.groups.groups())
        return groups

    def records_written(self) -> list[CoordinatorRecord]:
        """Every record of the log, partition by partition (each in log order)."""
        writer = self.log.writer
        return [
            decode_record(key, value)
            for partition in range(self.log.num_partitions)
            for key, value in writer.entries(partition)
        ]

    @property
    def app(self) -> CoordinatorApp:
        assert self._app is not None, "not started"
        return self._app

    @property
    def runtime(self) -> CoordinatorRuntime[LogPartitionShard]:
        runtime = self.app.runtime
        assert runtime is not None
        return runtime

    def service_partition(self, group_id: str) -> int:
        service = self.app.service
        assert service is not None
        return service.partition_for(group_id)

    def close(self) -> None:
        loop = self.loop
        if loop.is_closed():
            return
        try:
            if self._app is not None:
                loop.run_until_complete(self._app.shutdown())
                self._app = None
            # The in-memory log's appends are tasks of their own; none may outlive the loop.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    # The event loop.

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def _call(self, api_key: ApiKey, request: Message) -> Answer:
        async def call() -> Answer:
            dispatch = self.app.dispatch
            assert dispatch is not None
            answer = Answer(dispatch.handlers[api_key](request, RC))
            await self._settle()
            return answer

        return self._run(call())

    async def _start(self) -> None:
        app = CoordinatorApp(self.config, log=self.log, clock=self.clock)
        self._app = app
        await app.start()
        await self._settle()

    async def _restart(self) -> None:
        await self._settle()
        await self.app.shutdown()
        self._app = None
        await self._start()

    async def _sleep(self, ms: int) -> None:
        clock = self.clock
        target_ms = clock.now_ms() + ms
        for _ in range(_SLEEP_TIMERS):
            due_ms = clock.next_due_ms()
            if due_ms is None or due_ms > target_ms:
                break
            clock.advance(max(due_ms - clock.now_ms(), 0))
            await self._settle()
        else:
            raise AssertionError(f"timers kept falling due within {ms} ms")
        clock.advance(target_ms - clock.now_ms())
        await self._settle()

    async def _settle(self) -> None:
        """Let the loop run until no partition has a write queued, parked for its commit
        or waiting in a batch."""
        runtime = self.runtime
        for _ in range(_SETTLE_TURNS):
            await asyncio.sleep(0)
            if all(self._idle(runtime, p) for p in runtime.partitions()):
                return
        raise AssertionError(f"the runtime was still busy after {_SETTLE_TURNS} loop turns")

    @staticmethod
    def _idle(runtime: CoordinatorRuntime[LogPartitionShard], partition: int) -> bool:
        stats = runtime.partition_stats(partition)
        return stats is None or (
            stats.queued_events == 0
            and stats.parked_operations == 0
            and stats.open_batch_records == 0
            and stats.pending_batches == 0
        )
