"""Timeline collections against a model: a base state plus the list of uncommitted changes.

The model keeps, for every change, its epoch, collection, key and new value (or a deletion),
in the order they were made. The latest state is the base with every change applied; the
state as of offset C applies the changes of epochs below 2C; `commit(C)` folds those into the
base; `revert_to(O)` drops the changes of epochs from 2O on. The collections must agree at
every step, for every offset a read may ask for, whether a key was changed one at a time
(`__setitem__`, `pop`) or in bulk (`set_all`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator_server.timeline import SnapshotRegistry, TimelineDict

COLLECTIONS = (0, 1)
KEYS = ("a", "b", "c", "d")
DELETED = None


@dataclass
class Change:
    epoch: int
    collection: int
    key: str
    value: int | None  # None: the key was deleted


def apply(state: dict[str, int], change: Change) -> None:
    if change.value is None:
        state.pop(change.key, None)
    else:
        state[change.key] = change.value


class TimelineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = SnapshotRegistry()
        self.dicts: list[TimelineDict[str, int]] = [
            TimelineDict(self.registry) for _ in COLLECTIONS
        ]
        self.base: list[dict[str, int]] = [{} for _ in COLLECTIONS]
        self.changes: list[Change] = []
        self.committed = 0

    # The model.

    @property
    def epoch(self) -> int:
        return self.registry.epoch

    @property
    def current_offset(self) -> int:
        """The offset the current epoch belongs to (a batch's base, or the log's end)."""
        return (self.epoch + 1) // 2

    def model_as_of(self, collection: int, offset: int | None) -> dict[str, int]:
        state = dict(self.base[collection])
        for change in self.changes:
            if change.collection == collection and (offset is None or change.epoch < 2 * offset):
                apply(state, change)
        return state

    def record(self, collection: int, key: str, value: int | None) -> None:
        if value is None and key not in self.model_as_of(collection, None):
            return  # popping a missing key changes nothing
        self.changes.append(Change(self.epoch, collection, key, value))

    # Epochs.

    @rule(ahead=st.integers(0, 2))
    def open_batch(self, ahead: int) -> None:
        self.registry.set_epoch(self.current_offset + ahead)

    @rule(ahead=st.integers(0, 2))
    def changes_at_the_end(self, ahead: int) -> None:
        offset = max(self.current_offset + ahead, (self.epoch + 2) // 2)
        self.registry.set_epoch_at(offset)

    # Changes.

    @rule(collection=st.sampled_from(COLLECTIONS), key=st.sampled_from(KEYS), value=st.integers())
    def set_one(self, collection: int, key: str, value: int) -> None:
        self.dicts[collection][key] = value
        self.record(collection, key, value)

    @rule(
        collection=st.sampled_from(COLLECTIONS),
        pairs=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 9)), max_size=6),
    )
    def set_all(self, collection: int, pairs: list[tuple[str, int]]) -> None:
        self.dicts[collection].set_all(pairs)
        for key, value in pairs:
            self.record(collection, key, value)

    @rule(collection=st.sampled_from(COLLECTIONS), key=st.sampled_from(KEYS))
    def pop(self, collection: int, key: str) -> None:
        expected = self.model_as_of(collection, None).get(key)
        assert self.dicts[collection].pop(key) == expected
        self.record(collection, key, DELETED)

    # Commit and revert.

    @precondition(lambda self: self.current_offset >= self.committed)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.committed, self.current_offset))
        self.registry.commit(offset)
        self.committed = offset
        kept = []
        for change in self.changes:
            if change.epoch < 2 * offset:
                apply(self.base[change.collection], change)
            else:
                kept.append(change)
        self.changes = kept

    @precondition(lambda self: self.current_offset >= self.committed)
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.committed, self.current_offset))
        self.registry.revert_to(offset)
        self.changes = [change for change in self.changes if change.epoch < 2 * offset]
        assert self.epoch == 2 * offset - 1

    # Invariants.

    @invariant()
    def latest_state_matches(self) -> None:
        for collection in COLLECTIONS:
            expected = self.model_as_of(collection, None)
            timeline = self.dicts[collection]
            assert dict(timeline.items()) == expected
            assert len(timeline) == len(expected)
            for key in KEYS:
                assert timeline.get(key) == expected.get(key)
                assert (key in timeline) == (key in expected)

    @invariant()
    def reads_as_of_every_uncommitted_offset_match(self) -> None:
        for collection in COLLECTIONS:
            timeline = self.dicts[collection]
            for offset in range(self.committed, self.current_offset + 2):
                expected = self.model_as_of(collection, offset)
                assert dict(timeline.items_at(offset)) == expected
                assert sorted(k for k, _ in timeline.items_at(offset)) == sorted(expected)
                assert sorted(timeline.keys_at(offset)) == sorted(expected)
                for key in KEYS:
                    assert timeline.get_at(key, offset) == expected.get(key)

    @invariant()
    def history_is_kept_for_uncommitted_changes_only(self) -> None:
        pairs = {(change.epoch, change.collection) for change in self.changes}
        assert self.registry.uncommitted_changes == len(pairs)
        for collection in COLLECTIONS:
            changed = any(change.collection == collection for change in self.changes)
            empty_now = not self.model_as_of(collection, None)
            assert self.dicts[collection].is_empty_everywhere() == (empty_now and not changed)


TimelineMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None
)
test_timeline_matches_the_model = TimelineMachine.TestCase


def test_without_tracking_changes_keep_no_history() -> None:
    registry = SnapshotRegistry()
    timeline: TimelineDict[str, int] = TimelineDict(registry)
    registry.set_tracking(False)
    timeline["a"] = 1
    timeline.set_all([("b", 2), ("a", 3)])
    assert timeline.pop("b") == 2
    registry.set_tracking(True)
    registry.reset(5)
    assert registry.uncommitted_changes == 0
    assert dict(timeline.items_at(5)) == {"a": 3}
    registry.revert_to(5)
    assert dict(timeline.items()) == {"a": 3}


def test_a_bulk_change_is_one_registry_entry_per_collection_and_epoch() -> None:
    registry = SnapshotRegistry()
    first: TimelineDict[str, int] = TimelineDict(registry)
    second: TimelineDict[str, int] = TimelineDict(registry)
    registry.set_epoch(0)
    first.set_all([(key, 1) for key in "abcdefgh"])
    second["x"] = 1
    first["z"] = 2
    assert registry.uncommitted_changes == 2
    registry.set_epoch(9)
    first.set_all([("a", 2), ("b", 2)])
    assert registry.uncommitted_changes == 3
    registry.commit(9)
    assert registry.uncommitted_changes == 1
    assert first.get_at("a", 9) == 1
    registry.revert_to(9)
    assert first.get("a") == 1
    assert registry.uncommitted_changes == 0


def test_the_committed_offset_never_goes_back() -> None:
    registry = SnapshotRegistry()
    registry.set_epoch(3)
    registry.commit(3)
    with pytest.raises(AssertionError):
        registry.commit(2)
    with pytest.raises(AssertionError):
        registry.revert_to(2)
