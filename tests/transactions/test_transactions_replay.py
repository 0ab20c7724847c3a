"""Replay is the only mutation: the state live writes build (some appends failing and
reverted) is the state a load of the same log builds, and every transition a random client
drives stays one Kafka allows."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from shard_context import ShardTestContext
from txn_harness import TIMEOUT_MS, txn_context

from coordinator_server.shard import LogPartitionShard
from coordinator_server.transactions.metadata import VALID_PREVIOUS_STATES

IDS = ("a", "b", None)

steps = st.lists(
    st.tuples(
        st.sampled_from(["init", "resume", "add", "offsets", "end", "complete", "sleep"]),
        st.sampled_from(IDS),
        st.booleans(),  # commit or abort; for writes: whether the append fails
        st.booleans(),
    ),
    max_size=40,
)


def _operation(ctx: ShardTestContext, kind: str, tid: str | None, flag: bool) -> Any:
    shard = ctx.shard
    if tid is None or kind == "init":
        return lambda s: s.init_producer_id(tid, TIMEOUT_MS)
    txn = shard.managers.transactions.transaction(tid)
    pid, epoch = (-1, -1) if txn is None else (txn.producer_id, txn.producer_epoch)
    if kind == "resume":
        return lambda s: s.init_producer_id(tid, TIMEOUT_MS, pid, epoch)
    if kind == "add":
        return lambda s: s.add_partitions_to_txn(tid, pid, epoch, [("t", [int(flag)])])
    if kind == "offsets":
        return lambda s: s.add_offsets_to_txn(tid, pid, epoch, "g", 3)
    if kind == "end":
        return lambda s: s.end_txn(tid, pid, epoch, flag)
    return lambda s: s.complete_txn(tid, pid, epoch, flag)


def _state(shard: LogPartitionShard) -> tuple[Any, ...]:
    txns = shard.managers.transactions
    return (
        sorted(txns.transactions(), key=lambda t: t.transactional_id),
        txns.producer_ids.next_block_start,
    )


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_loaded_state_is_the_live_state(plan: list[tuple[str, str | None, bool, bool]]) -> None:
    ctx = txn_context(abort_timed_out_interval_ms=TIMEOUT_MS)
    ctx.shard.on_loaded()
    handed_out: set[int] = set()
    for kind, tid, flag, fail in plan:
        if kind == "sleep":
            ctx.sleep(TIMEOUT_MS if flag else 1)
            continue
        before = {
            t.transactional_id: t.state for t in ctx.shard.managers.transactions.transactions()
        }
        operation = _operation(ctx, kind, tid, flag)
        if fail:
            state = _state(ctx.shard)
            ctx.fail_append(operation, RuntimeError("append failed"))
            assert _state(ctx.shard) == state
            continue
        answer = ctx.write(operation)
        if tid is None:
            # An idempotent producer's id is new: no other producer ever had it.
            assert answer.producer_id not in handed_out
            assert answer.producer_id not in _producer_ids(ctx.shard)
            handed_out.add(answer.producer_id)
        elif kind in ("init", "resume") and answer.error == 0:
            assert answer.producer_id not in handed_out
        for txn in ctx.shard.managers.transactions.transactions():
            previous = before.get(txn.transactional_id)
            if previous is not None and previous is not txn.state:
                assert previous in VALID_PREVIOUS_STATES[txn.state] or (
                    # An Ongoing transaction fenced: PrepareEpochFence, then PrepareAbort.
                    previous.kafka_name == "Ongoing" and txn.state.kafka_name == "PrepareAbort"
                )
        ctx.commit()
    # Producer ids are never handed out twice, across reloads too.
    live = _state(ctx.shard)
    ctx.reload()
    assert _state(ctx.shard) == live
    again = ctx.write(lambda s: s.init_producer_id(None, TIMEOUT_MS))
    assert again.producer_id not in handed_out | _producer_ids(ctx.shard)
    # The load resumes the transactions whose markers are owed.
    assert {c.transactional_id for c in ctx.shard.pending_completions()} == {
        t.transactional_id
        for t in ctx.shard.managers.transactions.transactions()
        if t.state.kafka_name.startswith("Prepare")
    }


def _producer_ids(shard: LogPartitionShard) -> set[int]:
    return {t.producer_id for t in shard.managers.transactions.transactions()} | {
        t.previous_producer_id for t in shard.managers.transactions.transactions()
    }
