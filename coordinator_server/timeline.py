"""Timeline collections: state that can be read as of the committed offset and reverted.

A shard replays records into its state as soon as a write operation produces them, long
before the log commits them. Reads must still see committed state only, and a failed append
must leave no trace. Kafka solves this with timeline data structures and a snapshot
registry; this is the same idea in a smaller form: every change made while the registry's
write epoch is E (the log offset at which the batch being written starts) remembers the
value it replaced. A read "as of offset C" ignores changes of epochs >= C, `revert_to(O)`
undoes changes of epochs >= O, and `commit(C)` forgets the history below C.

Some changes belong to no batch (in-memory updates made while no batch is open): they are
part of the state *at* offset O, the log's end. They sit half a step below O: visible as of
O, kept by `revert_to(O)`, forgotten by `commit(O)`. Internally epochs are doubled so that
half step is an integer.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class SnapshotRegistry:
    """Orders the changes of every timeline collection of one shard by write epoch."""

    __slots__ = ("_changes", "_committed_offset", "_epoch", "_tracking")

    def __init__(self) -> None:
        self._epoch = 0
        self._committed_offset = 0
        self._tracking = True
        # (epoch, collection, key), in the order the changes were made; epochs never decrease.
        self._changes: deque[tuple[int, TimelineDict[object, object], object]] = deque()

    @property
    def epoch(self) -> int:
        """The internal epoch: twice the batch offset, minus one for `set_epoch_at`."""
        return self._epoch

    @property
    def committed_offset(self) -> int:
        return self._committed_offset

    @property
    def uncommitted_changes(self) -> int:
        return len(self._changes)

    def set_epoch(self, offset: int) -> None:
        """Changes from now on belong to the batch that starts at `offset`."""
        self._set(2 * offset)

    def set_epoch_at(self, offset: int) -> None:
        """Changes from now on belong to the state at `offset` (no batch is open): visible as
        of `offset` and kept when a batch starting at `offset` is reverted."""
        self._set(2 * offset - 1)

    def _set(self, epoch: int) -> None:
        assert epoch >= self._epoch, f"epoch went back from {self._epoch} to {epoch}"
        self._epoch = epoch

    def set_tracking(self, tracking: bool) -> None:
        """Loading replays committed records only, so it needs no history."""
        assert not self._changes or tracking, "cannot stop tracking with uncommitted changes"
        self._tracking = tracking

    def reset(self, offset: int) -> None:
        """Start over at `offset` with everything committed (after a load)."""
        assert not self._changes, "reset with uncommitted changes"
        self._epoch = 2 * offset - 1
        self._committed_offset = offset

    def commit(self, offset: int) -> None:
        """Every change of an epoch below `offset` is committed: forget its history."""
        assert offset >= self._committed_offset, "the committed offset went back"
        self._committed_offset = offset
        changes = self._changes
        bound = 2 * offset
        while changes and changes[0][0] < bound:
            epoch, collection, key = changes.popleft()
            collection._forget(key, epoch)

    def revert_to(self, offset: int) -> None:
        """Undo every change of an epoch at or above `offset`, newest first."""
        assert offset >= self._committed_offset, "cannot revert below the committed offset"
        changes = self._changes
        bound = 2 * offset
        while changes and changes[-1][0] >= bound:
            epoch, collection, key = changes.pop()
            collection._undo(key, epoch)
        # What comes next starts at `offset`: a batch there, or changes at it.
        self._epoch = bound - 1

    def _record(self, collection: TimelineDict[object, object], key: object) -> None:
        self._changes.append((self._epoch, collection, key))


class TimelineDict(Generic[K, V]):
    """A dict whose past values, back to the committed offset, stay readable."""

    __slots__ = ("_data", "_history", "_registry")

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._data: dict[K, V] = {}
        # key -> [(epoch, the value before the first change of that epoch)], oldest first.
        self._history: dict[K, list[tuple[int, V | _Missing]]] = {}

    # Latest state (what write operations read).

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def keys(self) -> Iterator[K]:
        return iter(self._data.keys())

    def values(self) -> Iterator[V]:
        return iter(self._data.values())

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self._data.items())

    def __setitem__(self, key: K, value: V) -> None:
        # _remember, inline: every write of every offset comes through here.
        registry = self._registry
        if registry._tracking:
            epoch = registry._epoch
            data = self._data
            history = self._history.get(key)
            if history is None:
                self._history[key] = [(epoch, data.get(key, MISSING))]
                registry._changes.append((epoch, cast("TimelineDict[object, object]", self), key))
            elif history[-1][0] != epoch:
                history.append((epoch, data.get(key, MISSING)))
                registry._changes.append((epoch, cast("TimelineDict[object, object]", self), key))
            data[key] = value
        else:
            self._data[key] = value

    def pop(self, key: K) -> V | None:
        if key not in self._data:
            return None
        self._remember(key)
        return self._data.pop(key)

    # State as of an offset (what read operations see).

    def get_at(self, key: K, offset: int) -> V | None:
        """The value as of `offset`: changes of epochs >= offset are not visible."""
        history = self._history.get(key)
        if history is not None:
            bound = 2 * offset
            for epoch, before in history:
                if epoch >= bound:
                    return None if before is MISSING else cast(V, before)
        return self._data.get(key)

    def items_at(self, offset: int) -> Iterator[tuple[K, V]]:
        if not self._history:
            yield from self._data.items()
            return
        for key in self._data:
            value = self.get_at(key, offset)
            if value is not None:
                yield key, value
        for key in self._history:
            if key not in self._data:
                value = self.get_at(key, offset)
                if value is not None:
                    yield key, value

    def is_empty_everywhere(self) -> bool:
        """Empty now and at every uncommitted point in the past."""
        return not self._data and not self._history

    # History kept for the registry.

    def _remember(self, key: K) -> None:
        registry = self._registry
        if not registry._tracking:
            return
        epoch = registry._epoch
        history = self._history.get(key)
        if history is None:
            self._history[key] = [(epoch, self._data.get(key, MISSING))]
        elif history[-1][0] == epoch:
            return
        else:
            history.append((epoch, self._data.get(key, MISSING)))
        registry._record(cast("TimelineDict[object, object]", self), key)

    def _forget(self, key: object, epoch: int) -> None:
        k = cast(K, key)
        history = self._history[k]
        assert history[0][0] == epoch
        del history[0]
        if not history:
            del self._history[k]

    def _undo(self, key: object, epoch: int) -> None:
        k = cast(K, key)
        history = self._history[k]
        last_epoch, before = history.pop()
        assert last_epoch == epoch
        if not history:
            del self._history[k]
        if before is MISSING:
            self._data.pop(k, None)
        else:
            self._data[k] = cast(V, before)
