"""The bench's group scenarios against a coordinator that is still loading: they retry as
clients do, instead of ending the run."""

from __future__ import annotations

from typing import Any, cast

from coordinator_server.tools.bench.scenarios import Member, Timeouts, form_group
from coordinator_server.tools.bench.targets import (
    COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR,
    JoinAnswer,
    Target,
)


class LoadingCoordinator:
    """One member's group whose coordinator answers `loading` JoinGroups and SyncGroups with
    a not-ready error before it serves them."""

    def __init__(self, join_refusals: int, sync_refusals: int) -> None:
        self.join_refusals = join_refusals
        self.sync_refusals = sync_refusals
        self.name = "loading"
        self.joins = 0
        self.syncs = 0

    async def join(self, index: int, group: str, member_id: str, *_: Any) -> JoinAnswer:
        self.joins += 1
        if self.join_refusals:
            self.join_refusals -= 1
            return JoinAnswer(COORDINATOR_LOAD_IN_PROGRESS)
        return JoinAnswer(0, 1, "m-1", "m-1", ["m-1"])

    async def sync(self, *_: Any) -> tuple[int, bytes]:
        self.syncs += 1
        if self.sync_refusals:
            self.sync_refusals -= 1
            return NOT_COORDINATOR, b""
        return 0, b"p0"

    async def heartbeat(self, *_: Any) -> int:
        return 0


async def test_a_coordinator_still_loading_is_retried_until_the_group_forms() -> None:
    target = LoadingCoordinator(join_refusals=2, sync_refusals=1)
    member = Member(0)
    seconds = await form_group(cast(Target, target), "g", [member], Timeouts())
    assert seconds >= 0
    assert (target.joins, target.syncs) == (4, 2)
    assert (member.member_id, member.generation_id, member.assignment) == ("m-1", 1, b"p0")
