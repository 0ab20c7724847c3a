"""The checker of a coordinator cluster's history: pure, given the history and the log.

What it verifies (the invariants of a coordinator cluster under faults):

(a) No acknowledged commit lost. Every key's final read (`final-read` operations, made once
    the faults stopped and the writers were done) is at least the greatest value a commit
    of the key was acknowledged with, and is a value some commit may have written.
(b) No stale read. A fetch invoked after a commit of value v completed `ok` reads at least
    v, and reads a value some commit may have written.
(c) No two nodes acknowledging writes for one partition in one epoch, read from the log
    itself. Each owner of a log partition first writes an ownership record (its node id
    and Kafka producer epoch); every record after it, up to the next one, is that owner's.
    So every acknowledged commit's value must be in the log, after an ownership record of
    the node that acknowledged it; every commit value in the log must follow an ownership
    record of a node it was sent to; and ownership epochs only grow.
(d) Every consumer group completes a rebalance once the faults stop: within a bound after
    the heal, there is a generation in which every member got its assignment (SyncGroup
    ok, answered after the heal), the assignments split the group's partitions between
    them, and every member then had a heartbeat of that generation answered ok. (The
    workload makes a member of each group rejoin at the heal, so that each group must.)

The checks rely on how the workload writes: each key's commit values are unique (a writer
never sends one value twice to two different nodes without the history saying so: every
attempt is an operation with its node) and grow in the order of intent (one writer per key
at a time, or writers a group generation keeps apart), so a greater value is a later write.

A commit answered with an error may still have been applied when the error is one Kafka's
coordinator answers for an append whose fate it does not know (`MAYBE_APPLIED_ERRORS`,
Kafka's CoordinatorOperationExceptionHelper): such a commit counts as possibly written, like
one whose answer never came (`info`). Any other error means not applied: finding its value
in the log is a violation.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from history import FAIL, INFO, NEMESIS_OPS, OK, Key, Op

# Kafka's coordinator answers these for an append whose fate is unknown (a timeout, a
# leader that moved, a partition that failed under the request): applied or not.
MAYBE_APPLIED_ERRORS = frozenset(
    {"COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "REQUEST_TIMED_OUT", "UNKNOWN_SERVER_ERROR"}
)
# A fetch reads -1 for a key with no committed offset.
NO_OFFSET = -1

# Final reads are (a)'s; (b) checks the reads made while the faults went on.
READS = frozenset({"fetch"})


@dataclass(frozen=True, slots=True)
class Ownership:
    """A takeover record: `node_id` owns the log partition from here, at this epoch."""

    node_id: int
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class Commit:
    """An offset commit record; `value` None is a tombstone."""

    group: str
    topic: str
    partition: int
    value: int | None

    @property
    def key(self) -> Key:
        return (self.group, self.topic, self.partition)


LogEntry = tuple[int, Ownership | Commit]
"""(offset in the log partition, record)."""


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A consumer group of the workload: its member processes and the partitions of its
    subscription."""

    members: frozenset[str]
    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    message: str
    ops: tuple[int, ...] = ()


@dataclass(slots=True)
class CheckResult:
    counts: dict[str, Any] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations

    def summary(self, most: int = 20) -> str:
        lines = [f"counts: {self.counts}"]
        by_kind = Counter(v.kind for v in self.violations)
        lines.append(f"violations: {dict(by_kind) or 'none'}")
        lines.extend(f"  {v.kind}: {v.message} (ops {list(v.ops)})" for v in self.violations[:most])
        if len(self.violations) > most:
            lines.append(f"  ... and {len(self.violations) - most} more")
        return "\n".join(lines)


def check(
    history: Sequence[Op],
    log: Mapping[int, Sequence[LogEntry]],
    groups: Mapping[str, GroupSpec],
    *,
    heal_ns: int,
    rebalance_bound_ns: int,
) -> CheckResult:
    """Check `history` (every operation, completed) against the `log` (each log partition's
    records in offset order) and the workload's consumer `groups`; the faults stopped at
    `heal_ns`, and every group must be stable again by `heal_ns + rebalance_bound_ns`."""
    result = CheckResult()
    commits = [op for op in history if op.f == "commit"]
    reads = [op for op in history if op.f in READS and op.outcome == OK]
    possible = _possibly_written(commits)
    result.counts = _counts(history, log)
    violations = result.violations
    violations.extend(_check_final_reads(history, commits, possible))
    violations.extend(_check_stale_reads(commits, reads, possible))
    violations.extend(_check_log(commits, log))
    violations.extend(_check_groups(history, groups, heal_ns, rebalance_bound_ns))
    return result


def _may_be_applied(op: Op) -> bool:
    return op.outcome in (OK, INFO) or (op.outcome == FAIL and op.error in MAYBE_APPLIED_ERRORS)


def _possibly_written(commits: Iterable[Op]) -> dict[Key, set[int]]:
    possible: dict[Key, set[int]] = defaultdict(set)
    for op in commits:
        if _may_be_applied(op) and op.value is not None:
            possible[op.key].add(op.value)
    return possible


def _counts(history: Sequence[Op], log: Mapping[int, Sequence[LogEntry]]) -> dict[str, Any]:
    by_type: dict[str, Counter[str]] = defaultdict(Counter)
    faults: Counter[str] = Counter()
    nodes: set[int] = set()
    keys: set[Key] = set()
    for op in history:
        if op.f in NEMESIS_OPS:
            faults[op.f] += 1
            continue
        by_type[op.f][op.outcome or "pending"] += 1
        if op.node is not None:
            nodes.add(op.node)
        if op.f == "commit":
            keys.add(op.key)
    ownerships = sum(1 for entries in log.values() for _, r in entries if isinstance(r, Ownership))
    commit_records = sum(1 for entries in log.values() for _, r in entries if isinstance(r, Commit))
    return {
        "ops": {f: dict(sorted(c.items())) for f, c in sorted(by_type.items())},
        "keys": len(keys),
        "nodes": sorted(nodes),
        "faults": dict(sorted(faults.items())),
        "log": {"ownership_records": ownerships, "commit_records": commit_records},
    }


def _check_final_reads(
    history: Sequence[Op], commits: Sequence[Op], possible: Mapping[Key, set[int]]
) -> list[Violation]:
    """(a): every key's last final read holds the greatest acknowledged value or more."""
    acked: dict[Key, Op] = {}
    for op in commits:
        if op.outcome == OK and op.value is not None:
            best = acked.get(op.key)
            if best is None or op.value > (best.value or NO_OFFSET):
                acked[op.key] = op
    final: dict[Key, Op] = {}
    for op in history:
        if op.f == "final-read" and op.outcome == OK:
            last = final.get(op.key)
            if last is None or op.invoke_ns >= last.invoke_ns:
                final[op.key] = op
    violations = []
    for key in sorted(set(acked) | set(possible)):
        read = final.get(key)
        best = acked.get(key)
        if read is None:
            if best is not None:
                violations.append(
                    Violation("unread", f"{key}: no final read of a key with acknowledged commits")
                )
            continue
        value = NO_OFFSET if read.value is None else read.value
        if best is not None and value < (best.value or NO_OFFSET):
            violations.append(
                Violation(
                    "lost-commit",
                    f"{key}: the final read is {value}, but {best.value} was acknowledged "
                    f"by node {best.node}",
                    (best.id, read.id),
                )
            )
        if value != NO_OFFSET and value not in possible.get(key, ()):
            violations.append(
                Violation(
                    "phantom-read",
                    f"{key}: the final read is {value}, which no commit may have written",
                    (read.id,),
                )
            )
    return violations


def _check_stale_reads(
    commits: Sequence[Op], reads: Sequence[Op], possible: Mapping[Key, set[int]]
) -> list[Violation]:
    """(b): a read never misses a commit acknowledged before it was sent."""
    # Per key: the acknowledged commits by completion time, and the greatest value so far.
    done: dict[Key, list[tuple[int, int, int]]] = defaultdict(list)
    for op in commits:
        if op.outcome == OK and op.value is not None and op.complete_ns is not None:
            done[op.key].append((op.complete_ns, op.value, op.id))
    prefix_max: dict[Key, tuple[list[int], list[tuple[int, int]]]] = {}
    for key, entries in done.items():
        entries.sort()
        times: list[int] = []
        best: list[tuple[int, int]] = []
        top = (NO_OFFSET, -1)
        for complete_ns, value, op_id in entries:
            if value > top[0]:
                top = (value, op_id)
            times.append(complete_ns)
            best.append(top)
        prefix_max[key] = (times, best)
    violations = []
    for read in reads:
        key = read.key
        value = NO_OFFSET if read.value is None else read.value
        if value != NO_OFFSET and value not in possible.get(key, ()):
            violations.append(
                Violation(
                    "phantom-read",
                    f"{key}: node {read.node} answered {value}, which no commit may have written",
                    (read.id,),
                )
            )
        known = prefix_max.get(key)
        if known is None:
            continue
        times, best = known
        # Commits that completed strictly before the read was sent.
        n = bisect.bisect_left(times, read.invoke_ns)
        if n == 0:
            continue
        expected, commit_id = best[n - 1]
        if value < expected:
            violations.append(
                Violation(
                    "stale-read",
                    f"{key}: node {read.node} answered {value} to a read sent after {expected} "
                    "was acknowledged",
                    (commit_id, read.id),
                )
            )
    return violations


@dataclass(frozen=True, slots=True)
class _Written:
    partition: int
    offset: int
    owner: Ownership | None


def _check_log(commits: Sequence[Op], log: Mapping[int, Sequence[LogEntry]]) -> list[Violation]:
    """(c): the log's ownership records say who wrote what; it must be who was asked."""
    violations: list[Violation] = []
    written: dict[tuple[Key, int], list[_Written]] = defaultdict(list)
    for partition, entries in sorted(log.items()):
        owner: Ownership | None = None
        for offset, record in entries:
            if isinstance(record, Ownership):
                if owner is not None and not _later_epoch(owner, record):
                    violations.append(
                        Violation(
                            "epoch-regression",
                            f"log partition {partition} offset {offset}: node {record.node_id} "
                            f"took over at producer {record.producer_id} epoch "
                            f"{record.producer_epoch}, not after node {owner.node_id}'s "
                            f"producer {owner.producer_id} epoch {owner.producer_epoch}",
                        )
                    )
                owner = record
            elif record.value is not None:
                written[(record.key, record.value)].append(_Written(partition, offset, owner))
    sent: dict[tuple[Key, int], list[Op]] = defaultdict(list)
    for op in commits:
        if op.value is not None:
            sent[(op.key, op.value)].append(op)
    for (key, value), places in sorted(written.items()):
        attempts = sent.get((key, value), [])
        nodes = {op.node for op in attempts}
        for place in places:
            where = f"log partition {place.partition} offset {place.offset}"
            if not attempts:
                violations.append(
                    Violation("phantom-write", f"{key}={value} at {where}: no client sent it")
                )
            elif place.owner is None:
                violations.append(
                    Violation(
                        "unowned-write",
                        f"{key}={value} at {where}: before any ownership record",
                        tuple(op.id for op in attempts),
                    )
                )
            elif place.owner.node_id not in nodes:
                violations.append(
                    Violation(
                        "foreign-write",
                        f"{key}={value} at {where}, in node {place.owner.node_id}'s epoch "
                        f"{place.owner.producer_epoch}, was only sent to nodes {sorted(nodes)}",
                        tuple(op.id for op in attempts),
                    )
                )
        if attempts and not any(_may_be_applied(op) for op in attempts):
            violations.append(
                Violation(
                    "failed-commit-in-log",
                    f"{key}={value} is in the log, but every attempt that sent it was refused "
                    f"({sorted({op.error or '' for op in attempts})})",
                    tuple(op.id for op in attempts),
                )
            )
    # Who acknowledged writes in each epoch of each log partition.
    acknowledged_in: dict[tuple[int, int, int], dict[int, int]] = defaultdict(dict)
    for op in commits:
        if op.outcome != OK or op.value is None:
            continue
        places = written.get((op.key, op.value), [])
        if not places:
            violations.append(
                Violation(
                    "acked-not-in-log",
                    f"{op.key}={op.value} was acknowledged by node {op.node} but is not in the log",
                    (op.id,),
                )
            )
            continue
        mine = [p for p in places if p.owner is not None and p.owner.node_id == op.node]
        if not mine:
            owners = sorted({p.owner.node_id for p in places if p.owner is not None})
            violations.append(
                Violation(
                    "ack-by-non-owner",
                    f"{op.key}={op.value} was acknowledged by node {op.node}, but the log has "
                    f"it only in epochs of nodes {owners}",
                    (op.id,),
                )
            )
        # A value retried on another node is in the log twice, once in each node's epoch;
        # the acknowledging node wrote the one in its own.
        for place in mine:
            assert place.owner is not None
            owned = (place.partition, place.owner.producer_id, place.owner.producer_epoch)
            acknowledged_in[owned].setdefault(place.owner.node_id, op.id)
    for (partition, producer_id, epoch), by_node in sorted(acknowledged_in.items()):
        if len(by_node) > 1:
            violations.append(
                Violation(
                    "two-owners-one-epoch",
                    f"log partition {partition} producer {producer_id} epoch {epoch}: writes "
                    f"acknowledged by nodes {sorted(by_node)}",
                    tuple(sorted(by_node.values())),
                )
            )
    return violations


def _later_epoch(before: Ownership, after: Ownership) -> bool:
    # One transactional id keeps its producer id while Kafka bumps its epoch; a new producer
    # id (the epoch ran out, or the id expired) starts its epochs again.
    if after.producer_id != before.producer_id:
        return True
    return after.producer_epoch > before.producer_epoch


def _check_groups(
    history: Sequence[Op],
    groups: Mapping[str, GroupSpec],
    heal_ns: int,
    bound_ns: int,
) -> list[Violation]:
    """(d): every group is stable again, every member in one generation, within the bound."""
    violations = []
    for group, spec in sorted(groups.items()):
        settled = _settled_at(history, group, spec, heal_ns)
        if settled is None:
            violations.append(
                Violation(
                    "no-rebalance",
                    f"group {group}: no rebalance completed after the heal in which every "
                    f"member of {sorted(spec.members)} was assigned the group's partitions "
                    "between them and then heartbeated ok",
                )
            )
        elif settled - heal_ns > bound_ns:
            violations.append(
                Violation(
                    "slow-rebalance",
                    f"group {group}: stable {(settled - heal_ns) / 1e9:.1f} s after the heal, "
                    f"later than {bound_ns / 1e9:.1f} s",
                )
            )
    return violations


def _settled_at(history: Sequence[Op], group: str, spec: GroupSpec, heal_ns: int) -> int | None:
    """The earliest time by which a rebalance completed after `heal_ns`: a generation whose
    SyncGroup answers all came after the heal, whose assignments split `spec.partitions`
    between the members, and in which every member then heartbeated ok; None if none did."""
    # (member process, generation) -> its assignment, and when it was answered.
    syncs: dict[tuple[str, int], tuple[frozenset[tuple[str, int]], int]] = {}
    # (member process, generation) -> (sent, answered) of its heartbeats answered ok.
    beats: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for op in history:
        if op.group != group or op.process not in spec.members or op.outcome != OK:
            continue
        if op.value is None or op.complete_ns is None:
            continue
        if op.f == "sync":
            assignment = frozenset((t, p) for t, p in op.extra.get("assignment", ()))
            syncs[(op.process, op.value)] = (assignment, op.complete_ns)
        elif op.f == "heartbeat":
            beats[(op.process, op.value)].append((op.invoke_ns, op.complete_ns))
    generations = {generation for _, generation in syncs}
    best: int | None = None
    for generation in sorted(generations):
        assignments = [syncs.get((member, generation)) for member in spec.members]
        if any(a is None for a in assignments):
            continue
        if any(a[1] < heal_ns for a in assignments if a is not None):
            # A generation that completed before the heal is not a rebalance after it.
            continue
        parts = [a[0] for a in assignments if a is not None]
        if sum(len(p) for p in parts) != len(spec.partitions) or (
            frozenset().union(*parts) != spec.partitions
        ):
            continue
        settled = 0
        for member in spec.members:
            synced_ns = syncs[(member, generation)][1]
            after = max(heal_ns, synced_ns)
            later = [done for sent, done in beats.get((member, generation), []) if sent >= after]
            if not later:
                break
            settled = max(settled, min(later))
        else:
            if best is None or settled < best:
                best = settled
    return best
