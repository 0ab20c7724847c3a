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

History is kept per epoch rather than per key: a collection changed during an epoch holds
one dict of the values its keys had before the epoch's first change of each, and the
registry one entry per collection and epoch. A batch of offset commits changes many keys of
one collection in one epoch; committing it then forgets one dict, not every key one by one.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, Final, Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


class SnapshotRegistry:
    """Orders the changes of every timeline collection of one shard by write epoch."""

    __slots__ = ("_changes", "_committed_offset", "_epoch", "_tracking")

    def __init__(self) -> None:
        self._epoch = 0
        self._committed_offset = 0
        self._tracking = True
        # (epoch, collection) for each collection changed in each uncommitted epoch, in the
        # order of the collection's first change in the epoch; epochs never decrease.
        self._changes: deque[tuple[int, TimelineDict[Any, Any]]] = deque()

    @property
    def epoch(self) -> int:
        """The internal epoch: twice the batch offset, minus one for `set_epoch_at`."""
        return self._epoch

    @property
    def committed_offset(self) -> int:
        return self._committed_offset

    @property
    def uncommitted_changes(self) -> int:
        """Collections changed, counted once per uncommitted epoch that changed them."""
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
            epoch, collection = changes.popleft()
            collection._forget_oldest(epoch)

    def revert_to(self, offset: int) -> None:
        """Undo every change of an epoch at or above `offset`, newest first."""
        assert offset >= self._committed_offset, "cannot revert below the committed offset"
        changes = self._changes
        bound = 2 * offset
        while changes and changes[-1][0] >= bound:
            epoch, collection = changes.pop()
            collection._undo_newest(epoch)
        # What comes next starts at `offset`: a batch there, or changes at it.
        self._epoch = bound - 1


class TimelineDict(Generic[K, V]):
    """A dict whose past values, back to the committed offset, stay readable."""

    __slots__ = ("_data", "_epochs", "_registry")

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._data: dict[K, V] = {}
        # (epoch, {key: its value before the epoch's first change of it, or MISSING}), one
        # per uncommitted epoch that changed this dict, oldest first.
        self._epochs: list[tuple[int, dict[K, V | _Missing]]] = []

    # Latest state (what write operations read).

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        # Spelled out: a class compiled by mypyc does not fall back to __len__ for truth.
        return bool(self._data)

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def keys(self) -> Iterator[K]:
        return iter(self._data.keys())

    def values(self) -> Iterator[V]:
        return iter(self._data.values())

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self._data.items())

    def __setitem__(self, key: K, value: V) -> None:
        # _before_values and the remembering, inline: most changes come through here.
        registry = self._registry
        if registry._tracking:
            epoch = registry._epoch
            epochs = self._epochs
            if epochs and epochs[-1][0] == epoch:
                before = epochs[-1][1]
                if key not in before:
                    before[key] = self._data.get(key, MISSING)
            else:
                epochs.append((epoch, {key: self._data.get(key, MISSING)}))
                registry._changes.append((epoch, self))
        self._data[key] = value

    def set_all(self, items: Sequence[tuple[K, V]]) -> None:
        """`self[key] = value` for each pair, in order (a later pair of a key wins), with one
        look-up of the epoch's history for them all."""
        registry = self._registry
        data = self._data
        if registry._tracking and items:
            get = data.get
            epoch = registry._epoch
            epochs = self._epochs
            if epochs and epochs[-1][0] == epoch:
                before = epochs[-1][1]
                for key, _ in items:
                    if key not in before:
                        before[key] = get(key, MISSING)
            else:
                # The first change of this dict in the epoch: every key's value is the one
                # before it (a key given twice reads the same value twice).
                epochs.append((epoch, {key: get(key, MISSING) for key, _ in items}))
                registry._changes.append((epoch, self))
        data.update(items)

    def pop(self, key: K) -> V | None:
        data = self._data
        if key not in data:
            return None
        if self._registry._tracking:
            before = self._before_values()
            if key not in before:
                before[key] = data[key]
        return data.pop(key)

    # State as of an offset (what read operations see).

    def get_at(self, key: K, offset: int) -> V | None:
        """The value as of `offset`: changes of epochs >= offset are not visible."""
        bound = 2 * offset
        for epoch, before in self._epochs:
            if epoch >= bound and key in before:
                value = before[key]
                return None if value is MISSING else cast(V, value)
        return self._data.get(key)

    def items_at(self, offset: int) -> Iterator[tuple[K, V]]:
        bound = 2 * offset
        changed: dict[K, V | _Missing] = {}
        for epoch, before in self._epochs:
            if epoch >= bound:
                for key, value in before.items():
                    # The earliest epoch's value of a key is the one as of `offset`.
                    changed.setdefault(key, value)
        if not changed:
            yield from self._data.items()
            return
        for key, value in self._data.items():
            old = changed.pop(key, value)
            if old is not MISSING:
                yield key, cast(V, old)
        # Keys deleted since `offset`.
        for key, old in changed.items():
            if old is not MISSING:
                yield key, cast(V, old)

    def keys_at(self, offset: int) -> list[K]:
        """The keys as of `offset`, in no particular order: a copy of the latest keys, set
        right by the few changes made since."""
        bound = 2 * offset
        changed: dict[K, V | _Missing] = {}
        for epoch, before in self._epochs:
            if epoch >= bound:
                for key, value in before.items():
                    changed.setdefault(key, value)
        if not changed:
            return list(self._data)
        data = self._data
        added = {key for key, old in changed.items() if old is MISSING}
        keys = [key for key in data if key not in added] if added else list(data)
        # Keys deleted since `offset`.
        keys.extend(key for key, old in changed.items() if old is not MISSING and key not in data)
        return keys

    def is_empty_everywhere(self) -> bool:
        """Empty now and at every uncommitted point in the past."""
        return not self._data and not self._epochs

    # History kept for the registry.

    def _before_values(self) -> dict[K, V | _Missing]:
        """The current epoch's values-before, registering the epoch on its first change."""
        registry = self._registry
        epoch = registry._epoch
        epochs = self._epochs
        if epochs:
            last_epoch, before = epochs[-1]
            if last_epoch == epoch:
                return before
        before = {}
        epochs.append((epoch, before))
        registry._changes.append((epoch, self))
        return before

    def _forget_oldest(self, epoch: int) -> None:
        forgotten, _ = self._epochs.pop(0)
        assert forgotten == epoch

    def _undo_newest(self, epoch: int) -> None:
        undone, before = self._epochs.pop()
        assert undone == epoch
        data = self._data
        for key, value in before.items():
            if value is MISSING:
                data.pop(key, None)
            else:
                data[key] = cast(V, value)
