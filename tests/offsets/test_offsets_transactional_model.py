"""Transactional offsets against a model of Kafka's rules, which remembers the log offset of
every record (Kafka's OffsetAndMetadata.recordOffset): the live state, the state loaded from
the log, and the state loaded from the log compacted (the latest record per key, with or
without tombstones) all give the model's committed offsets, and go on giving them as the
transactions still open end."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st
from shard_context import ShardTestContext
from txn_offsets_harness import (
    committed_state,
    end_txn,
    fetch_stable,
    pending_state,
    plain_commit,
    txn_commit,
)

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

GROUPS = ("a", "b")
PRODUCERS = (1, 2, 3)
Key = tuple[str, str, int]


@dataclass
class KafkaModel:
    """Kafka's OffsetMetadataManager, reduced to offsets: record offsets decide."""

    next_record: int = 0
    committed: dict[Key, tuple[int, int]] = field(default_factory=dict)
    pending: dict[int, dict[Key, tuple[int, int]]] = field(default_factory=dict)

    def _record(self) -> int:
        self.next_record += 1
        return self.next_record

    def commit(self, key: Key, offset: int) -> None:
        self.committed[key] = (offset, self._record())

    def txn_commit(self, producer_id: int, key: Key, offset: int) -> None:
        self.pending.setdefault(producer_id, {})[key] = (offset, self._record())

    def end(self, producer_id: int, committed: bool) -> None:
        for key, (offset, record) in self.pending.pop(producer_id, {}).items():
            existing = self.committed.get(key)
            if committed and (existing is None or record > existing[1]):
                self.committed[key] = (offset, record)

    def delete(self, key: Key) -> None:
        self.committed.pop(key, None)
        for offsets in self.pending.values():
            offsets.pop(key, None)

    def delete_group(self, group: str) -> None:
        for key in [k for k in self.committed if k[0] == group]:
            self.delete(key)
        for offsets in self.pending.values():
            for key in [k for k in offsets if k[0] == group]:
                del offsets[key]

    def offsets(self) -> dict[Key, int]:
        return {key: offset for key, (offset, _) in self.committed.items()}

    def unstable(self) -> set[Key]:
        return {key for offsets in self.pending.values() for key in offsets}


# Few keys, so that producers and plain commits meet on the same partitions often.
keys = st.sampled_from([("a", "t", 0), ("a", "t", 1), ("b", "t", 0)])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), keys),
        st.tuples(st.just("txn"), keys, st.sampled_from(PRODUCERS)),
        st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("delete_group"), st.sampled_from(GROUPS)),
    ),
    max_size=30,
)


def run(ctx: ShardTestContext, model: KafkaModel, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    for number, op in enumerate(ops):
        offset = 1000 + number
        if op[0] == "commit":
            group, topic, partition = op[1]
            plain_commit(ctx, group, {(topic, partition): offset})
            model.commit(op[1], offset)
        elif op[0] == "txn":
            (group, topic, partition), producer_id = op[1], op[2]
            codes = txn_commit(ctx, group, producer_id, {(topic, partition): offset})
            assert set(codes.values()) == {ErrorCode.NONE}
            model.txn_commit(producer_id, op[1], offset)
        elif op[0] == "end":
            assert end_txn(ctx, op[1], op[2]) == ErrorCode.NONE
            model.end(op[1], op[2])
        elif op[0] == "delete":
            group, topic, partition = op[1]
            request = OffsetDeleteRequest(
                group_id=group,
                topics=[
                    OffsetDeleteRequestTopic(
                        name=topic,
                        partitions=[OffsetDeleteRequestPartition(partition_index=partition)],
                    )
                ],
            )
            ctx.write(lambda s, r=request: s.delete_offsets(r))  # type: ignore[misc]
            model.delete(op[1])
        else:
            ctx.write(lambda s, g=op[1]: s.delete_groups([g]))  # type: ignore[misc]
            model.delete_group(op[1])


def check(ctx: ShardTestContext, model: KafkaModel) -> None:
    assert {k: v.offset for k, v in committed_state(ctx).items()} == model.offsets()
    unstable = set()
    for group in GROUPS:
        for (topic, partition), (_, code) in fetch_stable(ctx, group, {"t": [0, 1]}).items():
            if code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                unstable.add((group, topic, partition))
    assert unstable == model.unstable()


def loaded(log: list[tuple[bytes, bytes | None]]) -> ShardTestContext:
    ctx = ShardTestContext()
    ctx.log = list(log)
    ctx.reload()
    return ctx


def compacted(
    log: list[tuple[bytes, bytes | None]], keep_tombstones: bool
) -> list[tuple[bytes, bytes | None]]:
    latest: dict[bytes, tuple[bytes, bytes | None]] = {}
    for key, value in log:
        latest.pop(key, None)  # a key moves to the position of its latest record
        latest[key] = (key, value)
    return [r for r in latest.values() if keep_tombstones or r[1] is not None]


def end_all(ctx: ShardTestContext, model: KafkaModel, order: list[int], commit: bool) -> None:
    for producer_id in order:
        assert end_txn(ctx, producer_id, commit) == ErrorCode.NONE
        model.end(producer_id, commit)


@settings(max_examples=500, deadline=None)
@given(ops=operations, end_order=st.permutations(PRODUCERS), finally_commit=st.booleans())
# The earlier producer's transaction commits first: the later one's pending offset wins.
@example(
    ops=[("txn", ("a", "t", 0), 1), ("txn", ("a", "t", 0), 2), ("end", 1, True)],
    end_order=[2, 1, 3],
    finally_commit=True,
)
def test_live_loaded_and_compacted_states_follow_kafkas_rules(
    ops: list[tuple],  # type: ignore[type-arg]
    end_order: list[int],
    finally_commit: bool,
) -> None:
    live, model = ShardTestContext(), KafkaModel()
    run(live, model, ops)
    check(live, model)
    log = list(live.log)
    for ctx in (loaded(log), loaded(compacted(log, True)), loaded(compacted(log, False))):
        check(ctx, model)
        assert pending_state(ctx) == pending_state(live)
    # The transactions still open end the same way everywhere.
    final = KafkaModel(model.next_record, dict(model.committed), {})
    for ctx in (live, loaded(compacted(log, False))):
        ended = KafkaModel(
            model.next_record,
            dict(model.committed),
            {pid: dict(offsets) for pid, offsets in model.pending.items()},
        )
        end_all(ctx, ended, end_order, finally_commit)
        check(ctx, ended)
        final = ended
    # And a load of the compacted log after the ends gives the same offsets.
    check(loaded(compacted(live.log, False)), final)
