"""One way into state: every record reaches the shard through its one `replay`, live and
loaded, and a load of the log builds the state the live writes built.

Production's route (`ServiceGroupsContext`: the server's wiring, the runtime, the in-memory
log) runs random requests that write every record type: offset commits (as runs) and their
tombstones (OffsetDelete, DeleteGroups, expiration), GroupMetadata records of forming and
emptied groups and their tombstones (DeleteGroups, expiration), some appends failing. Every
call of `LogPartitionShard.replay` is recorded with the bytes of what it was given. At
each restart, and at the end:

- what the live shard replayed, offset by offset (a reverted replay overwritten by the
  next write at its offset), is the log, byte for byte;
- the load replayed the log once, in order, byte for byte, through the same `replay`;
- the loaded state (every committed offset, whole, and every group as its record keeps it)
  is the live state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from groups_harness import join_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_context import ServiceGroupsContext

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    DeleteGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.records import CoordinatorRecord, OffsetCommitValue
from coordinator_server.runtime.api import RecordRun, encode_records
from coordinator_server.shard import LogPartitionShard
from coordinator_server.storage.api import RawRecord

GROUPS = ("g1", "g2", "g3")
TOPICS = ("t", "u")
# Sessions that outlive the test: groups are Stable or Empty whenever the state is compared.
SESSION_MS = 10**9


class ReplaySpy:
    """Every call of LogPartitionShard.replay, by shard: (offset, the bytes of what it
    replayed, one pair per record)."""

    def __init__(self) -> None:
        self.calls: dict[LogPartitionShard, list[tuple[int, list[RawRecord]]]] = {}

    @contextmanager
    def installed(self) -> Iterator[None]:
        original = LogPartitionShard.replay

        def replay(
            shard: LogPartitionShard, offset: int, record: CoordinatorRecord | RecordRun
        ) -> None:
            records = record if isinstance(record, RecordRun) else [record]
            self.calls.setdefault(shard, []).append((offset, list(encode_records(records))))
            original(shard, offset, record)

        LogPartitionShard.replay = replay  # type: ignore[method-assign]
        try:
            yield
        finally:
            LogPartitionShard.replay = original  # type: ignore[method-assign]

    def replayed(self, shard: LogPartitionShard) -> list[tuple[int, list[RawRecord]]]:
        return self.calls.get(shard, [])


def laid_out(calls: list[tuple[int, list[RawRecord]]]) -> dict[int, RawRecord]:
    """What each offset last replayed."""
    at: dict[int, RawRecord] = {}
    for offset, records in calls:
        for index, record in enumerate(records):
            at[offset + index] = record
    return at


class Clients:
    """The requests, and what the clients know: each group's members and generation."""

    def __init__(self, ctx: ServiceGroupsContext) -> None:
        self.ctx = ctx
        self.members: dict[str, tuple[list[str], int]] = {}

    def call(self, api_key: ApiKey, request: Any) -> Any:
        answer = self.ctx.call(api_key, request)
        return answer.response if answer.done else None

    def form(self, group: str, count: int) -> None:
        """`count` members join a group without members, and sync: it is Stable."""
        if group in self.members:
            return

        def join(member_id: str) -> Any:
            return self.ctx.join(join_request(member_id, group=group, session_ms=SESSION_MS))

        ids = []
        for _ in range(count):
            first = join("").response
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
            ids.append(first.member_id)
        joins = [join(member_id) for member_id in ids]
        self.ctx.sleep(0)  # the initial delay (none) ends the join phase
        answers = [answer.response for answer in joins]
        assert all(a.error_code == ErrorCode.NONE for a in answers), answers
        generation = answers[0].generation_id
        leader = answers[0].leader
        syncs = [
            self.ctx.sync_group(
                SyncGroupRequest(
                    group_id=group,
                    generation_id=generation,
                    member_id=member,
                    assignments=[
                        SyncGroupRequestAssignment(member_id=m, assignment=m.encode()) for m in ids
                    ]
                    if member == leader
                    else [],
                )
            )
            for member in ids
        ]
        assert all(sync.response.error_code == ErrorCode.NONE for sync in syncs)
        self.members[group] = (ids, generation)

    def leave(self, group: str) -> None:
        ids, _ = self.members.pop(group, ([], -1))
        if ids:
            self.ctx.leave(*[(member, None) for member in ids], group=group)

    def commit(self, group: str, offsets: list[tuple[str, int, int, str]]) -> None:
        ids, generation = self.members.get(group, ([""], -1))
        topics: list[OffsetCommitRequestTopic] = []
        for topic, partition, offset, metadata in offsets:
            if not topics or topics[-1].name != topic:
                topics.append(OffsetCommitRequestTopic(name=topic, partitions=[]))
            topics[-1].partitions.append(
                OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata
                )
            )
        self.call(
            ApiKey.OFFSET_COMMIT,
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=ids[0],
                topics=topics,
            ),
        )

    def delete_offsets(self, group: str, topic: str) -> None:
        partitions = [OffsetDeleteRequestPartition(partition_index=p) for p in range(3)]
        self.call(
            ApiKey.OFFSET_DELETE,
            OffsetDeleteRequest(
                group_id=group,
                topics=[OffsetDeleteRequestTopic(name=topic, partitions=partitions)],
            ),
        )

    def delete_groups(self, groups: list[str]) -> None:
        self.call(ApiKey.DELETE_GROUPS, DeleteGroupsRequest(groups_names=groups))


def start(partitions: int) -> ServiceGroupsContext:
    return ServiceGroupsContext(
        offsets_topic_partitions=partitions,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
        group_initial_rebalance_delay_ms=0,
        group_max_session_timeout_ms=SESSION_MS,
        # A partition whose appends keep failing would stop serving; here they fail one at
        # a time, however long apart.
        append_failure_timeout_ms=10**12,
    )


def shards(ctx: ServiceGroupsContext) -> dict[int, LogPartitionShard]:
    runtime = ctx.runtime
    found = {}
    for partition in sorted(runtime.partitions()):
        shard = runtime.shard(partition)
        assert shard is not None, f"partition {partition} is not active"
        found[partition] = shard
    return found


def state_of(shard: LogPartitionShard) -> tuple[dict[Any, OffsetCommitValue], dict[str, Any]]:
    """Every offset of the shard, whole, and every group as its record keeps it."""
    manager = shard.managers.offsets
    offsets = {
        (group, topic, partition): value
        for group in manager.groups()
        for (topic, partition), value in (manager.group_offsets(group) or {}).items()
    }
    groups = {}
    for group in shard.managers.groups.groups():
        assert group.state in (ClassicGroupState.STABLE, ClassicGroupState.EMPTY), group
        groups[group.group_id] = group.persisted_view()
    return offsets, groups


def check_live(ctx: ServiceGroupsContext, spy: ReplaySpy) -> None:
    """Each live shard has replayed its partition's log, byte for byte, through `replay`."""
    for partition, shard in shards(ctx).items():
        log = ctx.log.writer.entries(partition)
        at = laid_out(spy.replayed(shard))
        assert [at.get(offset) for offset in range(len(log))] == log


def restart_and_check(ctx: ServiceGroupsContext, spy: ReplaySpy) -> None:
    ctx.commit()
    check_live(ctx, spy)
    before = {partition: state_of(shard) for partition, shard in shards(ctx).items()}
    ctx.reload()
    for partition, shard in shards(ctx).items():
        log = ctx.log.writer.entries(partition)
        calls = spy.replayed(shard)
        # The load: in log order, each record once, as the log holds it.
        offsets = [offset + index for offset, records in calls for index in range(len(records))]
        assert offsets == list(range(len(log)))
        assert [record for _, records in calls for record in records] == log
        assert state_of(shard) == before[partition]


offset_lists = st.lists(
    st.tuples(
        st.sampled_from(TOPICS),
        st.integers(0, 2),
        st.integers(0, 2**40),
        st.sampled_from(["", "m"]),
    ),
    min_size=1,
    max_size=5,
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("form"), st.sampled_from(GROUPS), st.integers(1, 3)),
        st.tuples(st.just("leave"), st.sampled_from(GROUPS)),
        st.tuples(st.just("commit"), st.sampled_from(GROUPS), offset_lists, st.booleans()),
        st.tuples(st.just("delete_offsets"), st.sampled_from(GROUPS), st.sampled_from(TOPICS)),
        st.tuples(
            st.just("delete_groups"), st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2)
        ),
        st.tuples(st.just("time_passes"), st.sampled_from([1_000, 30_000, 70_000])),
        st.tuples(st.just("restart")),
    ),
    min_size=4,
    max_size=30,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps)
def test_every_record_goes_through_the_one_replay_live_and_loaded(
    steps: list[tuple[Any, ...]],
) -> None:
    spy = ReplaySpy()
    with spy.installed():
        ctx = start(2)
        try:
            clients = Clients(ctx)
            actions: dict[str, Callable[..., None]] = {
                "form": clients.form,
                "leave": clients.leave,
                "delete_offsets": clients.delete_offsets,
                "delete_groups": clients.delete_groups,
                "time_passes": ctx.sleep,
            }
            for step in steps:
                name = step[0]
                if name == "restart":
                    restart_and_check(ctx, spy)
                elif name == "commit":
                    _, group, offsets, fails = step
                    if fails:
                        partition = ctx.service_partition(group)
                        ctx.log.writer.inject_append_failure(partition, 19, "not enough replicas")
                    clients.commit(group, offsets)
                else:
                    actions[name](*step[1:])
                check_live(ctx, spy)
            restart_and_check(ctx, spy)
        finally:
            ctx.close()


def test_the_steps_write_every_record_type() -> None:
    """The property above sees every record type: offset commits and their tombstones,
    GroupMetadata records and their tombstones."""
    spy = ReplaySpy()
    with spy.installed():
        ctx = start(1)
        try:
            clients = Clients(ctx)
            clients.form("g1", 2)
            clients.commit("g1", [("t", 0, 5, ""), ("u", 1, 6, "m")])
            clients.delete_offsets("g1", "u")
            clients.leave("g1")
            clients.commit("g2", [("t", 0, 1, "")])
            clients.delete_groups(["g1"])
            ctx.sleep(70_000)
            kinds = {
                (type(record.key).__name__, record.value is None)
                for record in ctx.records_written()
            }
            assert kinds == {
                ("OffsetCommitKey", False),
                ("OffsetCommitKey", True),
                ("GroupMetadataKey", False),
                ("GroupMetadataKey", True),
            }
            restart_and_check(ctx, spy)
        finally:
            ctx.close()
