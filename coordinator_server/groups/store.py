"""The classic groups of one partition, and what every phase of the classic protocol shares.

The phases (`join`, `rebalance`, `membership`, `admin_views`) read and change the groups
through one GroupStore: the groups in a TimelineDict, the clock, the timer, the config and
the metrics. A handler never changes a group in place: it builds the group's next immutable
snapshot, collects what else it produces in an `Effects`, and `group_result` makes the
CoordinatorResult of both. Records and updates change the store only through `replay` and
`apply`, which the shard calls (records through its one replay dispatch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import JoinGroupResponse, SyncGroupResponse
from coordinator_server import defaults
from coordinator_server.groups.classic import ClassicGroup
from coordinator_server.groups.limits import new_group_refusal
from coordinator_server.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
)
from coordinator_server.runtime.api import (
    Clock,
    CoordinatorResult,
    CoordinatorTimer,
    ResponseHandle,
)
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

T = TypeVar("T")


class GroupCoordinatorMetricsShard(Protocol):
    """What the state machines report (Kafka's class of the same name): counters bumped
    in place, nothing else."""

    offset_commits: int
    offsets_expired: int

    def rebalance_completed(self, duration_ms: int) -> None: ...


class NoopGroupCoordinatorMetrics:
    """Metrics nobody reads (tests, tools)."""

    __slots__ = ("offset_commits", "offsets_expired")

    def __init__(self) -> None:
        self.offset_commits = 0
        self.offsets_expired = 0

    def rebalance_completed(self, duration_ms: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    """The classic groups' settings, with the server's defaults (`defaults.py`)."""

    initial_rebalance_delay_ms: int = defaults.GROUP_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = defaults.GROUP_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = defaults.GROUP_MAX_SESSION_TIMEOUT_MS
    max_size: int = defaults.GROUP_MAX_SIZE
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = defaults.OFFSETS_RETENTION_MINUTES * 60_000
    offsets_retention_check_interval_ms: int = defaults.OFFSETS_RETENTION_CHECK_INTERVAL_MS
    # Groups this node may hold, over all its partitions (see GroupCount).
    max_groups: int = defaults.MAX_GROUPS
    # The largest answer: a group whose leader's JoinGroup answer would exceed it cannot form.
    max_response_bytes: int = defaults.MAX_RESPONSE_BYTES


GroupCount = Callable[[], int]
"""How many groups the node holds over all its partitions, for `max_groups`: injected, since
a manager sees only its own partition's groups."""


@dataclass(frozen=True, slots=True)
class ClassicGroupUpdate:
    """The next snapshot of a group (None: the group is gone); an in-memory update."""

    group_id: str
    group: ClassicGroup | None


@dataclass(slots=True)
class Effects:
    """What an operation has produced besides the group's next snapshot."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    completions: list[tuple[ResponseHandle, object]] = field(default_factory=list)
    on_append_failure: Callable[[], CoordinatorResult[Any]] | None = None

    def complete(self, handle: ResponseHandle, response: object) -> None:
        self.completions.append((handle, response))


def join_error(code: ErrorCode, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, member_id=member_id)


def sync_error(code: ErrorCode) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code)


def group_result(
    group_id: str,
    original: ClassicGroup | None,
    group: ClassicGroup | None,
    fx: Effects,
    response: T | None,
    *,
    park: bool,
) -> CoordinatorResult[T]:
    """The result of an operation on one group: its records, the group's next snapshot as an
    update, and its effects.

    The runtime replays the records (GroupMetadata records of this group) and then applies
    the update, so the snapshot, with what the log does not hold (members between two
    records, their parked requests), is the group's state whatever the records rebuilt. The
    update is left out only when neither the group nor the log changes."""
    updates: tuple[ClassicGroupUpdate, ...] = (
        () if group is original and not fx.records else (ClassicGroupUpdate(group_id, group),)
    )
    return CoordinatorResult(
        records=fx.records,
        response=response,
        updates=updates,
        park=park,
        completions=fx.completions,
        on_append_failure=fx.on_append_failure,
    )


class GroupStore:
    """The partition's classic groups (`by_id`, a TimelineDict of immutable snapshots) and
    what the handlers that read and change them are given: the clock, the timer, the config
    and the metrics."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        clock: Clock,
        timer: CoordinatorTimer,
        config: GroupsConfig,
        metrics: GroupCoordinatorMetricsShard | None = None,
        group_count: GroupCount | None = None,
    ) -> None:
        self.clock = clock
        self.timer = timer
        self.config = config
        self.metrics: GroupCoordinatorMetricsShard = metrics or NoopGroupCoordinatorMetrics()
        self.by_id: TimelineDict[str, ClassicGroup] = TimelineDict(registry)
        self._group_count: GroupCount = group_count or self.num_groups

    # Lookups.

    def group(self, group_id: str, committed_offset: int | None = None) -> ClassicGroup | None:
        """The group now, or as of `committed_offset`."""
        if committed_offset is None:
            return self.by_id.get(group_id)
        return self.by_id.get_at(group_id, committed_offset)

    def group_ids(self) -> list[str]:
        return list(self.by_id.keys())

    def num_groups(self) -> int:
        """Groups of this partition, committed or not."""
        return len(self.by_id)

    def new_group_refusal(self) -> str | None:
        """Why a request may not create a group now (`max_groups`), or None."""
        return new_group_refusal(self._group_count(), self.config.max_groups)

    def groups(self) -> list[ClassicGroup]:
        return list(self.by_id.values())

    def count_by_state(self) -> dict[str, int]:
        """Groups per state (display names), for the metrics."""
        counts: dict[str, int] = {}
        for group in self.by_id.values():
            name = group.state.value
            counts[name] = counts.get(name, 0) + 1
        return counts

    def num_members(self) -> int:
        return sum(len(group.members) for group in self.by_id.values())

    # The only ways records and updates change the groups.

    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            self.by_id.pop(key.group)
        else:
            self.by_id[key.group] = ClassicGroup.from_record(key.group, value)

    def apply(self, update: ClassicGroupUpdate) -> None:
        if update.group is None:
            self.by_id.pop(update.group_id)
        else:
            assert update.group.group_id == update.group_id
            self.by_id[update.group_id] = update.group

    def ensure_simple_group(self, group_id: str) -> None:
        """Replay of a commit to a group that does not exist: Kafka's "simple" group, Empty
        and without protocol type, for a consumer that only stores offsets."""
        if group_id not in self.by_id:
            self.by_id[group_id] = ClassicGroup.create(group_id, self.clock.now_ms())
