"""The history checker on hand-made histories: clean ones pass, and each broken invariant is
flagged (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from checker import (
    Commit,
    GroupSpec,
    LogEntry,
    Ownership,
    check,
)
from history import FAIL, INFO, OK, Op, Recorder, load_history

TOPIC = "t"
KEY = ("g", TOPIC, 0)
S = 1_000_000_000  # one second in nanoseconds


class History:
    """Operations with times given by hand (in seconds)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(
        self,
        f: str,
        start: float,
        end: float,
        outcome: str = OK,
        *,
        process: str = "p",
        node: int | None = 1,
        key: tuple[str, str, int] | None = KEY,
        value: int | None = None,
        error: str | None = None,
        group: str | None = None,
        extra: dict[str, object] | None = None,
    ) -> Op:
        op = Op(
            id=len(self.ops),
            process=process,
            f=f,
            node=node,
            group=key[0] if key else group,
            topic=key[1] if key else None,
            partition=key[2] if key else None,
            value=value,
            invoke_ns=int(start * S),
            complete_ns=int(end * S),
            outcome=outcome,
            error=error,
            extra=dict(extra or {}),
        )
        self.ops.append(op)
        return op

    def commit(self, value: int, start: float, end: float, outcome: str = OK, **kw: object) -> Op:
        return self.op("commit", start, end, outcome, value=value, **kw)  # type: ignore[arg-type]

    def read(self, value: int, start: float, end: float, **kw: object) -> Op:
        return self.op("fetch", start, end, value=value, **kw)  # type: ignore[arg-type]

    def final(self, value: int, at: float = 100.0, **kw: object) -> Op:
        return self.op("final-read", at, at + 0.01, value=value, **kw)  # type: ignore[arg-type]


def owned_by(node: int, epoch: int, *values: int, offset: int = 0) -> list[LogEntry]:
    entries: list[LogEntry] = [(offset, Ownership(node, 1000, epoch))]
    entries += [(offset + 1 + i, Commit(*KEY, v)) for i, v in enumerate(values)]
    return entries


def run(
    history: History,
    log: dict[int, Sequence[LogEntry]] | None = None,
    groups: dict[str, GroupSpec] | None = None,
    heal: float = 50.0,
    bound: float = 20.0,
) -> list[str]:
    result = check(
        history.ops,
        log if log is not None else {},
        groups or {},
        heal_ns=int(heal * S),
        rebalance_bound_ns=int(bound * S),
    )
    return sorted(v.kind for v in result.violations)


def test_a_clean_history_passes_and_is_counted() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4, INFO, error="timeout")
    h.commit(3, 5, 6, node=2)
    h.read(1, 2.5, 2.6)
    h.read(3, 7, 7.1, node=2)
    h.final(3, node=2)
    h.op("kill", 4, 4, node=1, key=None)
    log = {0: [*owned_by(1, 1, 1, 2), *owned_by(2, 2, 3, offset=3)]}
    result = check(h.ops, log, {}, heal_ns=50 * S, rebalance_bound_ns=20 * S)
    assert result.valid, result.summary()
    assert result.counts["ops"]["commit"] == {"info": 1, "ok": 2}
    assert result.counts["ops"]["fetch"] == {"ok": 2}
    assert result.counts["keys"] == 1
    assert result.counts["nodes"] == [1, 2]
    assert result.counts["faults"] == {"kill": 1}
    assert result.counts["log"] == {"ownership_records": 2, "commit_records": 3}


# (a) no acknowledged commit lost


def test_a_final_read_below_an_acknowledged_commit_is_a_lost_commit() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4)
    h.final(1)
    assert run(h, {0: owned_by(1, 1, 1, 2)}) == ["lost-commit"]


def test_a_final_read_of_nothing_after_an_acknowledged_commit_is_a_lost_commit() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.final(-1)
    assert run(h, {0: owned_by(1, 1, 1)}) == ["lost-commit"]


def test_a_final_read_of_a_value_never_written_is_a_phantom() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.final(7)
    assert run(h, {0: owned_by(1, 1, 1)}) == ["phantom-read"]


def test_a_final_read_may_hold_a_commit_whose_fate_was_unknown() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4, INFO, error="connection lost")
    h.commit(3, 5, 6, FAIL, error="COORDINATOR_NOT_AVAILABLE")
    h.final(3)
    assert run(h, {0: owned_by(1, 1, 1, 2, 3)}) == []


def test_a_final_read_of_a_commit_refused_outright_is_a_phantom() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4, FAIL, error="ILLEGAL_GENERATION")
    h.final(2)
    kinds = run(h, {0: owned_by(1, 1, 1, 2)})
    assert kinds == ["failed-commit-in-log", "phantom-read"]


def test_a_key_with_acknowledged_commits_and_no_final_read_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2)
    assert run(h, {0: owned_by(1, 1, 1)}) == ["unread"]


# (b) no stale read


def test_a_read_sent_after_a_commit_was_acknowledged_must_see_it() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4, node=2)
    h.read(1, 5, 6, node=1)
    h.final(2, node=2)
    assert run(h, {0: [*owned_by(1, 1, 1), *owned_by(2, 2, 2, offset=2)]}) == ["stale-read"]


def test_a_read_concurrent_with_a_commit_may_miss_it() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 6)
    h.read(1, 5, 7)
    h.read(-1, 0.5, 3)
    h.final(2)
    assert run(h, {0: owned_by(1, 1, 1, 2)}) == []


def test_a_read_of_a_value_never_written_is_a_phantom() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.read(5, 3, 4)
    h.final(1)
    assert run(h, {0: owned_by(1, 1, 1)}) == ["phantom-read"]


# (c) one writer per partition and epoch, from the log


def test_a_write_acknowledged_by_a_node_that_did_not_own_the_epoch_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2, node=1)
    h.commit(2, 3, 4, node=2)
    h.final(2, node=1)
    kinds = run(h, {0: owned_by(1, 1, 1, 2)})
    assert kinds == ["ack-by-non-owner", "foreign-write"]


def test_a_value_written_in_the_epoch_of_a_node_it_was_not_sent_to_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2, node=1)
    h.commit(2, 3, 4, INFO, node=2, error="timeout")
    h.final(2, node=1)
    assert run(h, {0: owned_by(1, 1, 1, 2)}) == ["foreign-write"]


@pytest.mark.parametrize(
    ("outcome", "error", "old_owner_wrote"),
    [(FAIL, "NOT_COORDINATOR", False), (INFO, "timeout", True)],
    ids=["refused", "timed out but written"],
)
def test_a_value_retried_on_the_new_owner_is_that_owners_write(
    outcome: str, error: str, old_owner_wrote: bool
) -> None:
    # Value 2 went to node 1 first; node 1 acknowledged value 1 in the same epoch. Written
    # by both, value 2 counts for the epoch of node 2, which acknowledged it.
    h = History()
    h.commit(1, 1, 2, node=1)
    h.commit(2, 3, 4, outcome, node=1, error=error)
    h.commit(2, 5, 6, node=2)
    h.final(2, node=2)
    old = owned_by(1, 1, 1, 2) if old_owner_wrote else owned_by(1, 1, 1)
    assert run(h, {0: [*old, *owned_by(2, 2, 2, offset=len(old))]}) == []


def test_an_acknowledged_commit_missing_from_the_log_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.commit(2, 3, 4)
    h.final(2)
    assert run(h, {0: owned_by(1, 1, 1)}) == ["acked-not-in-log"]


def test_a_commit_before_any_ownership_record_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.final(1)
    assert run(h, {0: [(0, Commit(*KEY, 1)), (1, Ownership(1, 1000, 1))]}) == [
        "ack-by-non-owner",
        "unowned-write",
    ]


def test_an_ownership_record_at_an_older_epoch_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2, node=1)
    h.commit(2, 3, 4, node=2)
    h.final(2, node=2)
    log = {0: [*owned_by(1, 5, 1), *owned_by(2, 4, 2, offset=2)]}
    assert run(h, log) == ["epoch-regression"]
    # The same epoch taken over by two nodes: each acknowledged a write in it.
    log = {0: [*owned_by(1, 5, 1), *owned_by(2, 5, 2, offset=2)]}
    assert run(h, log) == ["epoch-regression", "two-owners-one-epoch"]


def test_a_new_producer_id_starts_its_epochs_again() -> None:
    h = History()
    h.commit(1, 1, 2, node=1)
    h.commit(2, 3, 4, node=2)
    h.final(2, node=2)
    log = {0: [*owned_by(1, 5, 1), (2, Ownership(2, 2000, 0)), (3, Commit(*KEY, 2))]}
    assert run(h, log) == []


def test_a_value_no_client_sent_is_flagged() -> None:
    h = History()
    h.commit(1, 1, 2)
    h.final(1)
    assert run(h, {0: owned_by(1, 1, 1, 9)}) == ["phantom-write"]


# (d) every group stable again after the heal


MEMBERS = frozenset({"a", "b"})
PARTITIONS = frozenset({(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)})
GROUPS = {"cg": GroupSpec(MEMBERS, PARTITIONS)}


def member_ops(
    h: History,
    generation: int,
    synced: float,
    beat: float,
    assignment: dict[str, list[tuple[str, int]]] | None = None,
    members: Sequence[str] = ("a", "b"),
) -> None:
    assignment = assignment or {"a": [(TOPIC, 0), (TOPIC, 1)], "b": [(TOPIC, 2)]}
    for member in members:
        h.op(
            "sync",
            synced - 0.1,
            synced,
            process=member,
            key=None,
            group="cg",
            value=generation,
            extra={"assignment": assignment.get(member, [])},
        )
        h.op("heartbeat", beat, beat + 0.01, process=member, key=None, group="cg", value=generation)


def test_a_group_stable_soon_after_the_heal_passes() -> None:
    h = History()
    member_ops(h, 3, synced=52, beat=54)
    assert run(h, groups=GROUPS) == []


def test_a_group_stable_through_the_faults_must_still_rebalance_after_the_heal() -> None:
    h = History()
    member_ops(h, 3, synced=10, beat=51)
    assert run(h, groups=GROUPS) == ["no-rebalance"]
    member_ops(h, 4, synced=53, beat=55)
    assert run(h, groups=GROUPS) == []


def test_a_group_that_never_heartbeats_after_its_rebalance_is_flagged() -> None:
    h = History()
    member_ops(h, 3, synced=52, beat=51)
    assert run(h, groups=GROUPS) == ["no-rebalance"]


def test_a_group_stable_too_late_is_flagged() -> None:
    h = History()
    member_ops(h, 3, synced=75, beat=76)
    assert run(h, groups=GROUPS) == ["slow-rebalance"]


def test_a_group_missing_a_member_is_flagged() -> None:
    h = History()
    member_ops(h, 3, synced=52, beat=54, members=["a"])
    assert run(h, groups=GROUPS) == ["no-rebalance"]


def test_a_group_whose_assignments_overlap_or_miss_partitions_is_flagged() -> None:
    overlap = {"a": [(TOPIC, 0), (TOPIC, 1)], "b": [(TOPIC, 1), (TOPIC, 2)]}
    missing = {"a": [(TOPIC, 0)], "b": [(TOPIC, 2)]}
    for assignment in (overlap, missing):
        h = History()
        member_ops(h, 3, synced=52, beat=54, assignment=assignment)
        assert run(h, groups=GROUPS) == ["no-rebalance"]


def test_members_in_different_generations_are_not_stable() -> None:
    h = History()
    member_ops(h, 3, synced=52, beat=54, members=["a"])
    member_ops(h, 4, synced=52, beat=54, members=["b"])
    assert run(h, groups=GROUPS) == ["no-rebalance"]


# The recorder


def test_the_recorder_writes_every_operation_as_it_completes(tmp_path: Path) -> None:
    ticks = iter(range(100))
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path, clock=lambda: next(ticks))
    commit = recorder.invoke("w1", "commit", node=2, group="g", topic=TOPIC, partition=0, value=5)
    pending = recorder.invoke("w1", "fetch", node=1, group="g", topic=TOPIC, partition=0)
    recorder.complete(commit, OK)
    recorder.complete(commit, FAIL, error="late")
    assert [op.id for op in load_history(path)] == [commit.id]
    recorder.event("nemesis", "kill", node=3, signal="SIGKILL")
    recorder.close()
    ops = load_history(path)
    assert [(op.f, op.outcome) for op in ops] == [("commit", OK), ("fetch", INFO), ("kill", OK)]
    assert ops[0] == commit
    assert (commit.invoke_ns, commit.complete_ns) == (0, 2)
    assert ops[1].error == "still out when the history ended" and pending.outcome == INFO
    assert ops[2].extra == {"signal": "SIGKILL"}
