"""A history of operations against a coordinator cluster, recorded as Jepsen records one.

Every attempt a client makes is an operation: who made it (`process`, a client's name), what
it is (`f`: commit, fetch, final-read, find, join, sync, heartbeat, leave; the nemesis's
kill, pause, resume, start, heal), the node it was sent to, the key it is about (group,
topic, partition), its value (the offset a commit writes or a fetch reads, a generation),
when it was invoked and when it completed (monotonic nanoseconds), and how it ended:

- `ok`: the server answered without an error;
- `fail`: the server answered an error code (`error` names it);
- `info`: nobody knows (a timeout, a lost connection, an attempt still out at the end).

A request about several keys (a commit or a fetch of several partitions) is one operation
per key, sharing the request's `attempt` number. The recorder writes each operation as one
JSON line as soon as it completes, so that a run that fails can be read afterwards (and
checked again with `load_history`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OK = "ok"
FAIL = "fail"
INFO = "info"
OUTCOMES = (OK, FAIL, INFO)

# The nemesis's operations: their `node` is the node acted on.
NEMESIS_OPS = frozenset({"kill", "pause", "resume", "start", "heal"})

Key = tuple[str, str, int]
"""(group, topic, partition): what one committed offset is about."""


@dataclass(slots=True)
class Op:
    id: int
    process: str
    f: str
    node: int | None = None
    group: str | None = None
    topic: str | None = None
    partition: int | None = None
    value: int | None = None
    invoke_ns: int = 0
    complete_ns: int | None = None
    outcome: str | None = None
    error: str | None = None
    # The request this operation is part of, when one request is about several keys.
    attempt: int | None = None
    # What else an operation answered: a member id, a group assignment.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        assert self.group is not None and self.topic is not None and self.partition is not None
        return (self.group, self.topic, self.partition)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Op:
        return cls(**json.loads(line))


class Recorder:
    """Hands out operations and writes each one, completed, to a JSON-lines file."""

    def __init__(self, path: Path | None, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = path
        self._clock = clock
        self._ids = itertools.count()
        self._attempts = itertools.count(1)
        self.ops: list[Op] = []
        self._pending: dict[int, Op] = {}
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8", buffering=1)

    def now_ns(self) -> int:
        return self._clock()

    def new_attempt(self) -> int:
        return next(self._attempts)

    def invoke(
        self,
        process: str,
        f: str,
        *,
        node: int | None = None,
        group: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        value: int | None = None,
        attempt: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Op:
        op = Op(
            id=next(self._ids),
            process=process,
            f=f,
            node=node,
            group=group,
            topic=topic,
            partition=partition,
            value=value,
            invoke_ns=self._clock(),
            attempt=attempt,
            extra=dict(extra or {}),
        )
        self.ops.append(op)
        self._pending[op.id] = op
        return op

    def complete(
        self,
        op: Op,
        outcome: str,
        *,
        value: int | None = None,
        error: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """End `op` (once: a second completion is ignored, the first answer stands)."""
        assert outcome in OUTCOMES, outcome
        if self._pending.pop(op.id, None) is None:
            return
        op.complete_ns = self._clock()
        op.outcome = outcome
        if value is not None:
            op.value = value
        op.error = error
        if extra:
            op.extra.update(extra)
        if self._file is not None:
            self._file.write(op.to_json() + "\n")

    def event(self, process: str, f: str, *, node: int | None = None, **extra: Any) -> Op:
        """An operation that happens at once (the nemesis's): invoked and completed ok."""
        op = self.invoke(process, f, node=node, extra=extra)
        self.complete(op, OK)
        return op

    def close(self) -> None:
        """Complete every operation still out as `info`: nobody will learn how it ended."""
        for op in list(self._pending.values()):
            self.complete(op, INFO, error="still out when the history ended")
        if self._file is not None:
            self._file.close()
            self._file = None


def load_history(path: Path) -> list[Op]:
    """The operations of a JSON-lines history, in the order they were invoked."""
    with path.open(encoding="utf-8") as lines:
        ops = [Op.from_json(line) for line in lines if line.strip()]
    return sorted(ops, key=lambda op: op.id)


def write_history(path: Path, ops: Iterable[Op]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for op in ops:
            out.write(op.to_json() + "\n")


def completed(ops: Sequence[Op]) -> list[Op]:
    return [op for op in ops if op.outcome is not None]
