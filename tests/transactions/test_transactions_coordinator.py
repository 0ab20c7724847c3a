"""Kafka's TransactionCoordinatorTest, case by case where it applies (transaction versions 0
and 1; no pending states: a transition is replayed at once), through the shard's operations
and the shard test context."""

from __future__ import annotations

from dataclasses import replace

import pytest
from txn_harness import PID, TID, TIMEOUT_MS, seed, txn, txn_context

from coordinator_protocol.errors import ErrorCode
from coordinator_server.records import ProducerIdBlockKey, TransactionKey
from coordinator_server.transactions.metadata import TransactionState, TxnPartitions
from coordinator_server.transactions.producer_ids import BLOCK_SIZE, partition_range
from coordinator_server.transactions.results import (
    AddPartitionsToTxnResult,
    InitProducerIdResult,
    PendingCompleteTxn,
)

S = TransactionState
MAX_EPOCH = 32767


def test_invalid_request_when_transactional_id_is_empty() -> None:
    ctx = txn_context()
    answer = ctx.write(lambda s: s.init_producer_id("", TIMEOUT_MS))
    assert answer.error == ErrorCode.INVALID_REQUEST
    assert ctx.write(lambda s: s.end_txn("", 1, 0, True)).error == ErrorCode.INVALID_REQUEST
    assert ctx.write(lambda s: s.add_offsets_to_txn("", 1, 0, "g", 0)).error == (
        ErrorCode.INVALID_REQUEST
    )
    answer = ctx.write(lambda s: s.add_partitions_to_txn("", 1, 0, [("t", [0])]))
    assert answer == AddPartitionsToTxnResult(ErrorCode.INVALID_REQUEST)


def test_null_transactional_id_gets_the_next_producer_id_of_the_partition_range() -> None:
    ctx = txn_context()
    first, _ = partition_range(2**48, 2**63 - 1, 50, 0)
    answers = [ctx.write(lambda s: s.init_producer_id(None, TIMEOUT_MS)) for _ in range(3)]
    assert answers == [InitProducerIdResult(ErrorCode.NONE, first + i, 0) for i in range(3)]
    # One block reserved, with one record; the other ids come out of it without records.
    assert [r.key for r in ctx.records_written()] == [ProducerIdBlockKey()]
    assert ctx.shard.managers.transactions.producer_ids.next_block_start == first + BLOCK_SIZE


def test_init_pid_with_epoch_zero_for_new_transactional_id() -> None:
    ctx = txn_context()
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert answer.error == ErrorCode.NONE and answer.producer_epoch == 0
    metadata = txn(ctx)
    assert (metadata.state, metadata.producer_id, metadata.last_producer_epoch) == (
        S.EMPTY,
        answer.producer_id,
        -1,
    )


def test_new_producer_id_when_no_state_and_producer_id_and_epoch_given() -> None:
    # A producer recovering from UNKNOWN_PRODUCER_ID may present an id the coordinator lost.
    ctx = txn_context()
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, 10, 3))
    assert answer.error == ErrorCode.NONE and answer.producer_epoch == 0
    assert answer.producer_id != 10


@pytest.mark.parametrize(("producer_id", "epoch"), [(-1, 3), (10, -1)])
def test_producer_id_and_epoch_come_together(producer_id: int, epoch: int) -> None:
    ctx = txn_context()
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, producer_id, epoch))
    assert answer.error == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_invalid_transaction_timeout(timeout_ms: int) -> None:
    ctx = txn_context()
    answer = ctx.write(lambda s: s.init_producer_id(TID, timeout_ms))
    assert answer == InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    # Kafka accepts any timeout without a transactional id.
    assert ctx.write(lambda s: s.init_producer_id(None, timeout_ms)).error == ErrorCode.NONE


def test_new_producer_id_when_epochs_exhausted() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_epoch=MAX_EPOCH - 1)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert answer.error == ErrorCode.NONE and answer.producer_epoch == 0
    assert answer.producer_id != PID
    metadata = txn(ctx)
    assert (metadata.previous_producer_id, metadata.last_producer_epoch) == (PID, -1)


def test_add_partitions_without_transactional_id_is_invalid_mapping() -> None:
    ctx = txn_context()
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("t", [0, 1])]))
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert answer == AddPartitionsToTxnResult(code)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_concurrent_transactions_on_add_partitions_while_preparing(state: S) -> None:
    ctx = txn_context()
    seed(ctx, state)
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("t", [0])]))
    assert answer.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert ctx.write(lambda s: s.add_offsets_to_txn(TID, PID, 5, "g", 3)).error == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )


@pytest.mark.parametrize(
    ("producer_id", "epoch", "code"),
    [(PID, 4, ErrorCode.PRODUCER_FENCED), (PID, 6, ErrorCode.PRODUCER_FENCED), (PID + 1, 5, 49)],
)
def test_add_partitions_of_another_producer(producer_id: int, epoch: int, code: int) -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, producer_id, epoch, [("t", [0])]))
    assert answer.error == code


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_add_partitions_appends_ongoing_metadata(state: S) -> None:
    ctx = txn_context()
    seed(ctx, state)
    before = txn(ctx)
    ctx.clock.advance(10)
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("t", [2])]))
    assert answer.error == ErrorCode.NONE
    after = txn(ctx)
    assert after.state is S.ONGOING
    assert set(after.partitions) == set(before.partitions) | {("t", 2)}
    # A transaction that was not Ongoing starts now.
    started = ctx.clock.now_ms() if state is not S.ONGOING else before.txn_start_timestamp_ms
    assert after.txn_start_timestamp_ms == started
    assert len(ctx.records_written()) == 2


def test_add_partitions_already_in_the_transaction_writes_nothing() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    end = ctx.end_offset
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("orders", [1])]))
    assert answer.error == ErrorCode.NONE
    assert ctx.end_offset == end


def test_add_offsets_adds_the_group_log_partition() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY)
    assert ctx.write(lambda s: s.add_offsets_to_txn(TID, PID, 5, "g", 7)).error == ErrorCode.NONE
    assert (txn(ctx).state, txn(ctx).log_partitions) == (S.ONGOING, frozenset({7}))
    assert ctx.write(lambda s: s.add_offsets_to_txn(TID, PID, 5, "g", 50)).error == (
        ErrorCode.INVALID_REQUEST
    )


def test_too_many_partitions_in_a_transaction_is_refused() -> None:
    ctx = txn_context(max_partitions_per_transaction=2)
    seed(ctx, S.EMPTY)
    answer = ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("t", [0, 1, 2])]))
    assert answer.error == ErrorCode.POLICY_VIOLATION


def test_a_transactions_partitions_are_sets_by_topic_sorted_once() -> None:
    made = TxnPartitions.of([("t", [2, 0, 2]), ("s", [5]), ("t", [1]), ("u", [])])
    assert len(made) == 4
    assert set(made) == {("t", 0), ("t", 1), ("t", 2), ("s", 5)}
    assert made.by_topic() == (("s", (5,)), ("t", (0, 1, 2)))
    assert TxnPartitions.of([("t", [0])]) <= made
    assert not TxnPartitions.of([("t", [3])]) <= made
    grown = made | TxnPartitions.of([("t", [3]), ("v", [0])])
    assert grown.by_topic() == (("s", (5,)), ("t", (0, 1, 2, 3)), ("v", (0,)))
    # A topic the union leaves as it was keeps its sorted indexes.
    assert grown.sorted_indexes("s") is made.sorted_indexes("s")
    assert made | TxnPartitions() is made
    assert TxnPartitions.from_sorted(grown.by_topic()) == grown
    # What a record holds out of order is read all the same, and written in order.
    odd = TxnPartitions.from_sorted((("t", (3, 1)), ("s", (5,)), ("t", (1,))))
    assert odd.by_topic() == (("s", (5,)), ("t", (1, 3)))
    assert odd == {("t", 1), ("t", 3), ("s", 5)}


def test_end_txn_unknown_id_or_other_producer_is_invalid_mapping() -> None:
    ctx = txn_context()
    assert ctx.write(lambda s: s.end_txn(TID, PID, 5, True)).error == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    seed(ctx, S.ONGOING)
    assert ctx.write(lambda s: s.end_txn(TID, PID + 1, 5, True)).error == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


@pytest.mark.parametrize("epoch", [4, 6])
def test_end_txn_with_another_epoch_is_fenced(epoch: int) -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    answer = ctx.write(lambda s: s.end_txn(TID, PID, epoch, True))
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (
        ErrorCode.PRODUCER_FENCED,
        -1,
        -1,
    )


@pytest.mark.parametrize(
    ("state", "committed", "code"),
    [
        (S.COMPLETE_COMMIT, True, ErrorCode.NONE),
        (S.COMPLETE_ABORT, False, ErrorCode.NONE),
        (S.COMPLETE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (S.COMPLETE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
        (S.PREPARE_COMMIT, True, ErrorCode.CONCURRENT_TRANSACTIONS),
        (S.PREPARE_ABORT, False, ErrorCode.CONCURRENT_TRANSACTIONS),
        (S.PREPARE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (S.PREPARE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
        (S.EMPTY, True, ErrorCode.INVALID_TXN_STATE),
        (S.EMPTY, False, ErrorCode.INVALID_TXN_STATE),
    ],
)
def test_end_txn_retries_and_wrong_directions(state: S, committed: bool, code: int) -> None:
    ctx = txn_context()
    seed(ctx, state)
    end = ctx.end_offset
    answer = ctx.write(lambda s: s.end_txn(TID, PID, 5, committed))
    assert answer.error == code and answer.completion is None
    assert (answer.producer_id, answer.producer_epoch) == ((PID, 5) if code == 0 else (-1, -1))
    assert ctx.end_offset == end


@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_prepares_and_completion_completes(committed: bool) -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, log_partitions=(4,))
    answer = ctx.write(lambda s: s.end_txn(TID, PID, 5, committed))
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (ErrorCode.NONE, PID, 5)
    prepared = txn(ctx)
    assert prepared.state is (S.PREPARE_COMMIT if committed else S.PREPARE_ABORT)
    assert answer.completion == PendingCompleteTxn(
        TID,
        PID,
        5,
        committed,
        (("orders", (0, 1)),),
        (4,),
        prepared.txn_last_update_timestamp_ms,
        prepared.txn_start_timestamp_ms,
        timed_out=False,
    )
    assert ctx.shard.pending_completions() == [answer.completion]
    # Markers in flight: a retry is CONCURRENT_TRANSACTIONS, and so is InitProducerId.
    assert ctx.write(lambda s: s.end_txn(TID, PID, 5, committed)).error == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS)).error == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    # The wrong direction's completion is ignored; the right one completes, once.
    assert ctx.write(lambda s: s.complete_txn(TID, PID, 5, not committed)).error == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert ctx.write(lambda s: s.complete_txn(TID, PID, 5, committed, 0)).error == (
        ErrorCode.INVALID_TXN_STATE
    )
    completion = answer.completion
    assert completion is not None
    done = ctx.write(lambda s: s.complete_txn(TID, PID, 5, committed, completion.prepared_ms))
    assert (done.error, done.written) == (ErrorCode.NONE, True)
    completed = txn(ctx)
    assert completed.state is (S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT)
    assert (len(completed.partitions), completed.log_partitions) == (0, frozenset())
    assert completed.last_producer_epoch == 5
    end = ctx.end_offset
    # A completion repeated (a sweep that read the transaction prepared just before) writes
    # nothing, and says so: the metrics count each transaction once.
    repeated = ctx.write(lambda s: s.complete_txn(TID, PID, 5, committed))
    assert (repeated.error, repeated.written) == (ErrorCode.NONE, False)
    assert ctx.end_offset == end
    assert ctx.shard.pending_completions() == []
    # And EndTxn retried after the completion is answered NONE.
    assert ctx.write(lambda s: s.end_txn(TID, PID, 5, committed)).error == ErrorCode.NONE


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT])
def test_init_pid_bumps_the_epoch_of_an_idle_transactional_id(state: S) -> None:
    ctx = txn_context()
    seed(ctx, state)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS + 1))
    assert answer == InitProducerIdResult(ErrorCode.NONE, PID, 6)
    metadata = txn(ctx)
    assert (metadata.state, metadata.timeout_ms, metadata.txn_start_timestamp_ms) == (
        S.EMPTY,
        TIMEOUT_MS + 1,
        -1,
    )


def test_init_pid_aborts_an_ongoing_transaction_with_a_fencing_epoch() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, last_producer_epoch=4)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        -1,
        -1,
    )
    fenced = txn(ctx)
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch) == (
        S.PREPARE_ABORT,
        6,
        -1,
    )
    assert answer.completion is not None and answer.completion.producer_epoch == 6
    assert not answer.completion.committed
    # The old producer is fenced at once.
    assert ctx.write(lambda s: s.end_txn(TID, PID, 5, True)).error == ErrorCode.PRODUCER_FENCED
    # Once the abort's markers are written, the retry bumps the epoch again.
    ctx.write(lambda s: s.complete_txn(TID, PID, 6, False))
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS)) == InitProducerIdResult(
        ErrorCode.NONE, PID, 7
    )


def test_init_pid_fence_that_fails_to_append_leaves_the_epoch_alone() -> None:
    # Kafka keeps hasFailedEpochFence for this; here the failed append reverts the bump.
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    ctx.fail_append(lambda s: s.init_producer_id(TID, TIMEOUT_MS), RuntimeError("append"))
    assert (txn(ctx).state, txn(ctx).producer_epoch) == (S.ONGOING, 5)
    ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert (txn(ctx).state, txn(ctx).producer_epoch) == (S.PREPARE_ABORT, 6)


def test_use_last_epoch_to_fence_when_epochs_are_exhausted() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, producer_epoch=MAX_EPOCH - 1, last_producer_epoch=MAX_EPOCH - 2)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert answer.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert (txn(ctx).state, txn(ctx).producer_epoch, txn(ctx).last_producer_epoch) == (
        S.PREPARE_ABORT,
        MAX_EPOCH,
        -1,
    )
    ctx.write(lambda s: s.complete_txn(TID, PID, MAX_EPOCH, False))
    retry = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert retry.error == ErrorCode.NONE and retry.producer_epoch == 0
    assert retry.producer_id != PID


def test_init_pid_without_last_producer_data_fences_a_stale_producer() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_epoch=6, last_producer_epoch=-1)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, 5))
    assert answer == InitProducerIdResult(ErrorCode.PRODUCER_FENCED, -1, -1)


def test_fence_producer_when_mapping_exists_with_different_producer_id() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_id=PID + 1, previous_producer_id=PID, last_producer_epoch=4)
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, 5))
    assert answer == InitProducerIdResult(ErrorCode.PRODUCER_FENCED, -1, -1)


def test_init_pid_with_current_epoch_and_its_retry() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_epoch=10, last_producer_epoch=9)
    expected = InitProducerIdResult(ErrorCode.NONE, PID, 11)
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, 10)) == expected
    # The answer was lost: the same request again gets the same epoch, no new bump.
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, 10)) == expected
    assert txn(ctx).producer_epoch == 11


def test_init_pid_stale_current_epoch() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_epoch=10, last_producer_epoch=9)
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS)) == InitProducerIdResult(
        ErrorCode.NONE, PID, 11
    )
    # A new producer took over: the old one, resuming from epoch 10, is fenced.
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, 10)) == (
        InitProducerIdResult(ErrorCode.PRODUCER_FENCED, -1, -1)
    )


def test_retry_init_pid_after_producer_id_rotation() -> None:
    ctx = txn_context()
    seed(ctx, S.EMPTY, producer_epoch=MAX_EPOCH - 1, last_producer_epoch=MAX_EPOCH - 2)
    rotated = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, MAX_EPOCH - 1))
    assert rotated.error == ErrorCode.NONE and rotated.producer_epoch == 0
    assert rotated.producer_id != PID
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, MAX_EPOCH - 1)) == rotated
    # An old producer with a stale epoch is fenced.
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, PID, MAX_EPOCH - 2)) == (
        InitProducerIdResult(ErrorCode.PRODUCER_FENCED, -1, -1)
    )


def test_abort_expired_transactions_in_ongoing_state_and_bump_epoch() -> None:
    ctx = txn_context()
    ctx.shard.on_loaded()
    seed(ctx, S.ONGOING)
    seed(ctx, S.EMPTY, tid="idle")
    results = ctx.sleep(TIMEOUT_MS)
    assert all(r.records == [] for r in results)  # not past the timeout yet
    results = ctx.sleep(10_000)
    [completions] = [r.response for r in results if r.response]
    started_ms = ctx.clock.now_ms() - TIMEOUT_MS - 10_000
    assert completions == (
        PendingCompleteTxn(
            TID, PID, 6, False, (("orders", (0, 1)),), (), ctx.clock.now_ms(), started_ms, True
        ),
    )
    # A sweep after a load finds it the same: an abort of a timed-out transaction.
    assert ctx.shard.pending_completions() == list(completions)
    assert (txn(ctx).state, txn(ctx).producer_epoch) == (S.PREPARE_ABORT, 6)
    assert ctx.shard.managers.transactions.aborted_by_timeout == 1
    # The aborted transaction is not aborted again while its markers are on their way.
    ctx.sleep(10_000)
    assert ctx.shard.managers.transactions.aborted_by_timeout == 1


def test_only_an_abort_past_the_timeout_is_a_timed_out_one() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, tid="in-time")
    seed(ctx, S.ONGOING, tid="late")
    seed(ctx, S.ONGOING, tid="late-commit")
    ctx.clock.advance(TIMEOUT_MS)
    in_time = ctx.write(lambda s: s.end_txn("in-time", PID, 5, False)).completion
    ctx.clock.advance(1)
    late = ctx.write(lambda s: s.end_txn("late", PID, 5, False)).completion
    late_commit = ctx.write(lambda s: s.end_txn("late-commit", PID, 5, True)).completion
    assert in_time is not None and late is not None and late_commit is not None
    assert (in_time.timed_out, late.timed_out, late_commit.timed_out) == (False, True, False)
    assert late.started_ms == late.prepared_ms - TIMEOUT_MS - 1


def test_the_gauges_count_transactional_ids_by_state_and_pending_offsets() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, tid="a")
    seed(ctx, S.ONGOING, tid="b")
    seed(ctx, S.PREPARE_COMMIT, tid="c")
    seed(ctx, S.COMPLETE_ABORT, tid="d")
    assert ctx.shard.count_transactions_by_state() == {
        "Ongoing": 2,
        "PrepareCommit": 1,
        "CompleteAbort": 1,
    }
    assert ctx.shard.num_transactional_ids() == 4
    assert ctx.shard.num_pending_transactional_offsets() == 0


def test_transactional_ids_expire_when_idle() -> None:
    ctx = txn_context(transactional_id_expiration_ms=100_000, remove_expired_interval_ms=50_000)
    ctx.shard.on_loaded()
    seed(ctx, S.COMPLETE_COMMIT, tid="done")
    seed(ctx, S.EMPTY, tid="empty")
    seed(ctx, S.PREPARE_COMMIT, tid="preparing")
    seed(ctx, S.ONGOING, tid="ongoing", start_ms=ctx.clock.now_ms() + 10**9)
    ctx.sleep(50_000)
    assert ctx.shard.managers.transactions.num_transactional_ids() == 4
    ctx.sleep(50_000)
    remaining = {t.transactional_id for t in ctx.shard.managers.transactions.transactions()}
    assert remaining == {"preparing", "ongoing"}
    tombstones = [r.key for r in ctx.records_written() if r.value is None]
    assert set(tombstones) == {TransactionKey("done"), TransactionKey("empty")}


def test_describe_transactions() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, partitions=(("b", (1,)), ("a", (2, 0))))
    [empty, missing, found] = ctx.shard.describe_transactions(["", "nope", TID])
    assert empty.error == ErrorCode.INVALID_REQUEST
    assert missing.error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert (found.error, found.state, found.producer_id, found.producer_epoch) == (
        ErrorCode.NONE,
        "Ongoing",
        PID,
        5,
    )
    assert found.topics == (("a", (0, 2)), ("b", (1,)))
    assert (found.timeout_ms, found.start_time_ms) == (TIMEOUT_MS, ctx.clock.now_ms())


def test_describe_sees_committed_state_only() -> None:
    ctx = txn_context()
    committed = ctx.end_offset
    ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS))
    assert ctx.shard.describe_transactions([TID], committed)[0].error == (
        ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    )
    ctx.commit()
    assert ctx.shard.describe_transactions([TID], ctx.end_offset)[0].state == "Empty"


def test_list_transactions_filters() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING, tid="a", producer_id=1, previous_producer_id=1)
    ctx.clock.advance(5000)
    seed(ctx, S.EMPTY, tid="b", producer_id=2, previous_producer_id=2)
    seed(ctx, S.ONGOING, tid="c", producer_id=3, previous_producer_id=3)

    def ids(states: list[str], pids: list[int], duration: int = -1) -> set[str]:
        listed = ctx.shard.list_transactions(states, pids, duration)
        return {t.transactional_id for t in listed.transactions}

    assert ids([], []) == {"a", "b", "c"}
    assert ids(["Ongoing"], []) == {"a", "c"}
    assert ids([], [2, 3]) == {"b", "c"}
    assert ids(["Ongoing"], [], 1000) == {"a"}
    listed = ctx.shard.list_transactions(["Bogus", "Empty"], [], -1)
    assert listed.unknown_state_filters == ("Bogus",)
    assert [t.transactional_id for t in listed.transactions] == ["b"]
    assert ids(["Bogus"], []) == set()


def test_too_many_transactional_ids_is_refused() -> None:
    ctx = txn_context(max_transactional_ids=1)
    assert ctx.write(lambda s: s.init_producer_id("a", TIMEOUT_MS)).error == ErrorCode.NONE
    assert ctx.write(lambda s: s.init_producer_id("b", TIMEOUT_MS)).error == (
        ErrorCode.POLICY_VIOLATION
    )
    assert ctx.write(lambda s: s.init_producer_id("a", TIMEOUT_MS)).error == ErrorCode.NONE


def test_a_completion_is_owed_only_while_its_transaction_is_the_one_prepared() -> None:
    """A sweep's completion that another task finished meanwhile must not write markers: the
    producer's next transaction (same id and epoch) would be ended on the brokers early."""
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    first = ctx.write(lambda s: s.end_txn(TID, PID, 5, True)).completion
    assert first is not None
    assert ctx.shard.is_prepared(first)
    assert not ctx.shard.is_prepared(replace(first, committed=False))
    ctx.write(lambda s: s.complete_txn(TID, PID, 5, True, first.prepared_ms))
    assert not ctx.shard.is_prepared(first)
    # The next transaction of the same producer, prepared later: the old completion is not it.
    ctx.clock.advance(10)
    ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("orders", [0])]))
    second = ctx.write(lambda s: s.end_txn(TID, PID, 5, True)).completion
    assert second is not None and second.prepared_ms != first.prepared_ms
    assert ctx.shard.is_prepared(second)
    assert not ctx.shard.is_prepared(first)


# Producer ids from the Kafka cluster (no range set): the request brings the id.

KAFKA_ID = 4242


def test_ids_from_the_cluster_are_the_ones_the_request_brings() -> None:
    ctx = txn_context(producer_ids_from_cluster=True)
    assert ctx.write(
        lambda s: s.init_producer_id(None, TIMEOUT_MS, fresh_producer_id=KAFKA_ID)
    ) == (InitProducerIdResult(ErrorCode.NONE, KAFKA_ID, 0))
    answer = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, fresh_producer_id=KAFKA_ID))
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (
        ErrorCode.NONE,
        KAFKA_ID,
        0,
    )
    # No block of a range is reserved: the transaction's own record only.
    assert [r.key for r in ctx.records_written()] == [TransactionKey(TID)]
    # A known id needs no new producer id: the one brought is not used.
    again = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, fresh_producer_id=7))
    assert (again.producer_id, again.producer_epoch) == (KAFKA_ID, 1)


def test_a_request_that_needs_a_new_id_and_brings_none_writes_nothing() -> None:
    ctx = txn_context(producer_ids_from_cluster=True)
    end = ctx.end_offset
    for transactional_id in (None, TID):
        answer = ctx.write(lambda s, tid=transactional_id: s.init_producer_id(tid, TIMEOUT_MS))
        assert answer.needs_producer_id
        assert answer.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert ctx.end_offset == end
    assert ctx.shard.managers.transactions.transaction(TID) is None
    # Exhausted epochs need a new id too.
    seed(ctx, S.EMPTY, producer_epoch=MAX_EPOCH - 1)
    assert ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS)).needs_producer_id
    rotated = ctx.write(lambda s: s.init_producer_id(TID, TIMEOUT_MS, fresh_producer_id=KAFKA_ID))
    assert (rotated.error, rotated.producer_id, rotated.producer_epoch) == (
        ErrorCode.NONE,
        KAFKA_ID,
        0,
    )


def test_a_completion_keeps_the_refused_markers_until_the_next_one() -> None:
    ctx = txn_context()
    seed(ctx, S.ONGOING)
    ctx.write(lambda s: s.end_txn(TID, PID, 5, True))
    refused = (("orders", 0, ErrorCode.INVALID_PRODUCER_EPOCH),)
    done = ctx.write(lambda s: s.complete_txn(TID, PID, 5, True, -1, refused))
    assert done.written and txn(ctx).state is S.COMPLETE_COMMIT
    assert txn(ctx).refused_markers == refused
    (described,) = ctx.shard.describe_transactions([TID])
    assert described.refused_markers == refused
    # Replayed from the record as it was written (a load on another node).
    assert ctx.records_written()[-1].value.refused_markers == refused
    # The next transaction keeps them while it runs; its completion replaces them.
    ctx.write(lambda s: s.add_partitions_to_txn(TID, PID, 5, [("orders", [1])]))
    assert txn(ctx).refused_markers == refused
    ctx.write(lambda s: s.end_txn(TID, PID, 5, False))
    ctx.write(lambda s: s.complete_txn(TID, PID, 5, False))
    assert txn(ctx).refused_markers == ()
