"""A Hypothesis state machine of clients driving classic groups: two-step joins, static
joins, syncs (the leader assigns), heartbeats, leaves, commits, time passing, and crashes
with a reload from the log.

It runs the way production serves the requests (`ServiceGroupsContext`: the server's own
wiring, the service's handlers, the runtime as the server configures it, an append and its
commit before each answer) and the other way the pure layers are tested (`GroupsContext`:
a handler called on the shard and its records replayed at once), for as long as that one
exists.

Invariants: a group's generation only grows while the shard lives; in Stable every member
holds the assignment its leader gave it for the current generation, and every SyncGroup
answered NONE carries the assignment of the generation it asked for; no parked caller is
answered twice; a reload rebuilds exactly what was persisted (the live view of Stable and
Empty groups, the last record of the others); committed offsets equal a dict model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from groups_harness import GroupsContext, shard_config, subscription
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from service_context import ServiceGroupsContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupState
from coordinator_server.records import GroupMetadataKey, GroupMetadataValue

GROUPS = ("g1", "g2")
SLOTS = ("d1", "d2", "d3", "s1")  # "s*" are static members (their instance id is the slot)
SESSION_MS = 30_000
REBALANCE_MS = 20_000
TOPIC_SETS = (("t",), ("t", "u"))


class Answered(Protocol):
    """A caller's answer as a context gives it (a Parked handle, or the service's answer)."""

    @property
    def done(self) -> bool: ...

    @property
    def response(self) -> Any: ...

    @property
    def completions(self) -> int: ...


def assignment_for(generation: int, slot: str) -> bytes:
    return f"{generation}:{slot}".encode()


@dataclass
class Client:
    group: str
    slot: str
    topics: tuple[str, ...] = ("t",)
    member_id: str = ""
    generation: int = -1
    leader_members: list[tuple[str, str | None]] | None = None  # as the leader: who to assign
    join: Answered | None = None
    sync: Answered | None = None
    synced_generation: int = -1

    @property
    def instance(self) -> str | None:
        return self.slot if self.slot.startswith("s") else None

    def forget_membership(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.leader_members = None


@dataclass
class Model:
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)


class ClassicGroupsMachine(RuleBasedStateMachine):
    """The rules and invariants; a subclass says which context serves the requests."""

    def make_context(self) -> Any:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.ctx = self.make_context()
        self.clients = {(g, s): Client(g, s) for g in GROUPS for s in SLOTS}
        self.model = Model()
        self.member_slots: dict[str, str] = {}
        self.generations: dict[str, int] = {}
        self.parked: list[Answered] = []

    def teardown(self) -> None:
        self.ctx.close()

    # Helpers.

    def park(self, parked: Answered) -> Answered:
        self.parked.append(parked)
        return parked

    def join_request(self, client: Client, member_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=client.group,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            member_id=member_id,
            group_instance_id=client.instance,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequestProtocol(name="range", metadata=subscription(*client.topics))
            ],
        )

    def send_join(self, client: Client, member_id: str) -> Answered:
        return self.park(self.ctx.join(self.join_request(client, member_id)))

    def settle(self) -> None:
        """Clients read the answers that arrived."""
        for client in self.clients.values():
            if client.join is not None and client.join.done:
                response = client.join.response
                client.join = None
                if isinstance(response, JoinGroupResponse):
                    self.on_join_response(client, response)
            if client.sync is not None and client.sync.done:
                response = client.sync.response
                client.sync = None
                if isinstance(response, SyncGroupResponse):
                    self.on_sync_response(client, response)

    def on_join_response(self, client: Client, response: JoinGroupResponse) -> None:
        code = response.error_code
        if code == ErrorCode.NONE:
            client.member_id = response.member_id
            client.generation = response.generation_id
            self.member_slots[response.member_id] = client.slot
            if response.leader == response.member_id:
                client.leader_members = [
                    (m.member_id, m.group_instance_id) for m in response.members
                ]
            else:
                client.leader_members = None
        elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            client.forget_membership()

    def on_sync_response(self, client: Client, response: SyncGroupResponse) -> None:
        if response.error_code == ErrorCode.NONE:
            assert response.assignment == assignment_for(client.generation, client.slot), (
                "a SyncGroup answered NONE carries its own assignment of its generation"
            )
            client.synced_generation = client.generation
        elif response.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            client.forget_membership()

    def client(self, group: str, slot: str) -> Client:
        return self.clients[(group, slot)]

    # Rules.

    @rule(
        group=st.sampled_from(GROUPS),
        slot=st.sampled_from(SLOTS),
        topics=st.sampled_from(TOPIC_SETS),
        second_step=st.booleans(),
        # Mostly a member that knows its id; sometimes a restarted client.
        fresh=st.sampled_from((False, False, False, True)),
    )
    def join(
        self, group: str, slot: str, topics: tuple[str, ...], second_step: bool, fresh: bool
    ) -> None:
        client = self.client(group, slot)
        client.topics = topics
        if client.instance is not None:
            # A static member joins in one step; a restarted instance joins without its id.
            client.join = self.send_join(client, "" if fresh else client.member_id)
        elif client.member_id == "" or fresh:
            first = self.send_join(client, "")
            assert first.done
            response = first.response
            assert isinstance(response, JoinGroupResponse)
            if response.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                return
            client.forget_membership()
            client.member_id = response.member_id
            self.member_slots[response.member_id] = slot
            if second_step:
                second = client.join = self.send_join(client, client.member_id)
                # KIP-394: the group takes back the member id it has just given.
                assert not (
                    second.done
                    and isinstance(second.response, JoinGroupResponse)
                    and second.response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
                ), "the second step of a join does not know the id the first gave"
        else:
            client.join = self.send_join(client, client.member_id)
        self.settle()

    @rule(group=st.sampled_from(GROUPS), slot=st.sampled_from(SLOTS))
    def sync(self, group: str, slot: str) -> None:
        client = self.client(group, slot)
        if client.member_id == "" or client.generation < 0:
            return
        assignments: list[SyncGroupRequestAssignment] = []
        if client.leader_members is not None:
            for member_id, instance in client.leader_members:
                member_slot = instance if instance is not None else self.member_slots[member_id]
                assignments.append(
                    SyncGroupRequestAssignment(
                        member_id=member_id,
                        assignment=assignment_for(client.generation, member_slot),
                    )
                )
        request = SyncGroupRequest(
            group_id=group,
            generation_id=client.generation,
            member_id=client.member_id,
            group_instance_id=client.instance,
            assignments=assignments,
        )
        client.sync = self.park(self.ctx.sync_group(request))
        self.settle()

    @rule(group=st.sampled_from(GROUPS), slot=st.sampled_from(SLOTS))
    def heartbeat(self, group: str, slot: str) -> None:
        client = self.client(group, slot)
        if client.member_id == "":
            return
        code = self.ctx.heartbeat(
            client.member_id, client.generation, group=group, instance=client.instance
        )
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            client.forget_membership()
        self.settle()

    @rule(group=st.sampled_from(GROUPS), slot=st.sampled_from(SLOTS))
    def leave(self, group: str, slot: str) -> None:
        client = self.client(group, slot)
        if client.member_id == "":
            return
        member_id = client.member_id
        response = self.ctx.leave((member_id, client.instance), group=group)
        client.forget_membership()
        if response.error_code == ErrorCode.NONE and (
            response.members[0].error_code == ErrorCode.NONE
        ):
            current = self.ctx.find_group(group)
            assert current is None or not (
                current.has_member(member_id) or current.is_pending_member(member_id)
            ), "a member whose leave was answered NONE is gone"
        self.settle()

    @rule(
        group=st.sampled_from(GROUPS),
        slot=st.sampled_from((*SLOTS, None)),
        topic=st.sampled_from(("t", "u")),
        partition=st.integers(0, 1),
        offset=st.integers(0, 1000),
    )
    def commit(self, group: str, slot: str | None, topic: str, partition: int, offset: int) -> None:
        if slot is None:
            response = self.ctx.commit_offsets({(topic, partition): offset}, group=group)
        else:
            client = self.client(group, slot)
            response = self.ctx.commit_offsets(
                {(topic, partition): offset},
                group=group,
                generation=client.generation,
                member_id=client.member_id,
                instance=client.instance if client.member_id else None,
            )
        if response.topics[0].partitions[0].error_code == ErrorCode.NONE:
            self.model.offsets[(group, topic, partition)] = offset
        self.settle()

    @rule(group=st.sampled_from(GROUPS))
    def everyone_cooperates(self, group: str) -> None:
        """The group's clients behave: those the group still knows rejoin while it
        rebalances, time passes until the join phase ends, then everyone syncs (the leader
        last). Drives groups to Stable."""
        clients = [c for c in self.clients.values() if c.group == group]
        for client in clients:
            if client.join is None and client.member_id == "":
                self.join(group, client.slot, client.topics, second_step=True, fresh=False)
        for _ in range(REBALANCE_MS // 3000 + 2):
            current = self.ctx.find_group(group)
            if current is None or current.state is not ClassicGroupState.PREPARING_REBALANCE:
                break
            for client in clients:
                known = current.has_member(client.member_id) or current.is_pending_member(
                    client.member_id
                )
                if client.member_id and client.join is None and known:
                    client.join = self.send_join(client, client.member_id)
            self.settle()
            self.ctx.sleep(3000)
            self.settle()
        current = self.ctx.find_group(group)
        if current is None or current.state is not ClassicGroupState.COMPLETING_REBALANCE:
            return
        members = [c for c in clients if c.member_id and c.generation == current.generation_id]
        for client in sorted(members, key=lambda c: c.leader_members is not None):
            self.sync(group, client.slot)

    @rule(ms=st.sampled_from((100, 1000, 1000, 3000, 3000, 10_000, 30_000)))
    def time_passes(self, ms: int) -> None:
        self.ctx.sleep(ms)
        self.settle()

    @rule()
    def crash_and_reload(self) -> None:
        expected = self.expected_after_reload()
        self.ctx.commit()
        self.ctx.reload()
        # The parked callers went with the old shard (the runtime fails them).
        for client in self.clients.values():
            client.join = None
            client.sync = None
        actual = {group.group_id: group.persisted_view() for group in self.ctx.all_groups()}
        assert actual == expected
        self.generations = {g.group_id: g.generation_id for g in self.ctx.all_groups()}

    def expected_after_reload(self) -> dict[str, tuple[object, ...]]:
        """Stable and Empty groups are persisted as they are; the others come back as their
        last GroupMetadata record says (or as a simple group if only offsets remain)."""
        last_records: dict[str, GroupMetadataValue | None] = {}
        for record in self.ctx.records_written():
            if type(record.key) is GroupMetadataKey:
                value = record.value
                assert value is None or isinstance(value, GroupMetadataValue)
                last_records[record.key.group] = value
        expected: dict[str, tuple[object, ...]] = {}
        for group in self.ctx.all_groups():
            if group.state in (ClassicGroupState.STABLE, ClassicGroupState.EMPTY):
                expected[group.group_id] = group.persisted_view()
                continue
            value = last_records.get(group.group_id)
            if value is not None:
                expected[group.group_id] = ClassicGroup.from_record(
                    group.group_id, value
                ).persisted_view()
            elif any(g == group.group_id for g, _, _ in self.model.offsets):
                expected[group.group_id] = ClassicGroup.create(group.group_id, 0).persisted_view()
        return expected

    # Invariants.

    @invariant()
    def generations_only_grow(self) -> None:
        for group_id in GROUPS:
            group = self.ctx.find_group(group_id)
            if group is None:
                self.generations.pop(group_id, None)
                continue
            assert group.generation_id >= self.generations.get(group_id, 0)
            self.generations[group_id] = group.generation_id

    @invariant()
    def stable_members_hold_their_assignment_of_the_current_generation(self) -> None:
        for group in self.ctx.all_groups():
            if group.state is not ClassicGroupState.STABLE:
                continue
            for member in group.members.values():
                slot = member.group_instance_id or self.member_slots[member.member_id]
                assert member.assignment == assignment_for(group.generation_id, slot)

    @invariant()
    def no_caller_is_answered_twice(self) -> None:
        assert all(parked.completions <= 1 for parked in self.parked)

    @invariant()
    def committed_offsets_equal_the_model(self) -> None:
        for group_id in GROUPS:
            expected = {(t, p): o for (g, t, p), o in self.model.offsets.items() if g == group_id}
            assert self.ctx.fetch(group=group_id, latest=True) == expected
        self.ctx.commit()
        for group_id in GROUPS:
            expected = {(t, p): o for (g, t, p), o in self.model.offsets.items() if g == group_id}
            assert self.ctx.fetch(group=group_id) == expected


class ThroughTheService(ClassicGroupsMachine):
    """Production's route."""

    def make_context(self) -> ServiceGroupsContext:
        # Two log partitions, one for each group (g1 and g2 hash apart): a load of Kafka's
        # fifty at every restart would only cost time.
        return ServiceGroupsContext(
            offsets_topic_partitions=2,
            offsets_retention_minutes=10**12 // 60_000,
            group_initial_rebalance_delay_ms=3000,
        )


class ThroughTheShardContext(ClassicGroupsMachine):
    """The pure layers' route."""

    def make_context(self) -> GroupsContext:
        ctx = GroupsContext(
            shard_config(offsets_retention_ms=10**12, initial_rebalance_delay_ms=3000)
        )
        ctx.reload()  # an empty load: arms the periodic expiration job as a load does
        return ctx


ThroughTheService.TestCase.settings = settings(
    max_examples=75, stateful_step_count=40, deadline=None
)
test_classic_groups_through_the_service = ThroughTheService.TestCase

ThroughTheShardContext.TestCase.settings = settings(
    max_examples=75, stateful_step_count=40, deadline=None
)
test_classic_groups_through_the_shard_context = ThroughTheShardContext.TestCase
