"""The limits on what clients may make the group manager hold: groups per node (`max_groups`,
through the injected count), members per group (`group.max.size`), the size of the leader's
JoinGroup answer (`max_response_bytes`), and LeaveGroup and ListGroups in linear time."""

from __future__ import annotations

import time

import pytest
from groups_harness import (
    GROUP,
    GroupsContext,
    join_request,
    join_response,
    shard_config,
    subscription,
)
from shard_context import Parked

from coordinator_protocol.envelope import encode_body
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import ListGroupsResponseGroup
from coordinator_server.groups.admin_views import list_filter
from coordinator_server.groups.answer_sizes import ENVELOPE_BYTES, listed_group_bytes
from coordinator_server.groups.classic import ClassicGroupState as S
from coordinator_server.runtime.api import ShardContext
from coordinator_server.shard import LogPartitionShard, ShardConfig


class CountedGroupsContext(GroupsContext):
    """A context whose shard is told the node holds `others` groups on other partitions."""

    def __init__(self, others: int, config: ShardConfig) -> None:
        self.others = others
        super().__init__(config)

    def build(self) -> None:
        super().build()
        self.shard = LogPartitionShard(
            ShardContext(0, self.clock, self.timer, self.registry),
            self.config,
            group_count=lambda: self.others + self.shard.managers.groups.num_groups(),
        )


def test_a_join_that_would_create_a_group_beyond_max_groups_is_a_policy_violation() -> None:
    ctx = CountedGroupsContext(others=2, config=shard_config(max_groups=3))
    ctx.stable_group(1, group="mine")
    refused = join_response(ctx.join(join_request(group="new")))
    assert refused.error_code == ErrorCode.POLICY_VIOLATION
    assert refused.error_message is not None and "max_groups 3" in refused.error_message
    assert ctx.shard.managers.groups.group("new") is None
    assert not [g for g, _ in ctx.group_records() if g == "new"]
    # The groups that exist go on: a new member joins the existing group.
    _, parked = ctx.join_new(group="mine")
    assert not parked.done or join_response(parked).error_code == ErrorCode.NONE
    # Room again (another node's group went away): the group is created.
    ctx.others = 1
    first = join_response(ctx.join(join_request(group="new")))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_a_commit_that_would_create_a_group_beyond_max_groups_is_refused_per_partition() -> None:
    ctx = CountedGroupsContext(others=1, config=shard_config(max_groups=2))
    assert ctx.commit_offsets({("t", 0): 1}, group="first").topics[0].partitions[0].error_code == 0
    response = ctx.commit_offsets({("t", 0): 1, ("t", 1): 2}, group="second")
    assert {p.error_code for p in response.topics[0].partitions} == {ErrorCode.POLICY_VIOLATION}
    assert ctx.shard.managers.groups.group("second") is None
    # A group that exists takes commits whatever the count.
    again = ctx.commit_offsets({("t", 1): 5}, group="first")
    assert again.topics[0].partitions[0].error_code == ErrorCode.NONE


def test_a_log_written_under_a_higher_max_groups_loads_whole() -> None:
    ctx = GroupsContext(max_groups=10)
    for n in range(5):
        ctx.commit_offsets({("t", 0): n}, group=f"g{n}")
    ctx.stable_group(2, group="members")
    ctx.config = shard_config(max_groups=2)
    ctx.reload()
    assert ctx.shard.managers.groups.num_groups() == 6
    assert ctx.fetch({"t": [0]}, group="g4") == {("t", 0): 4}
    # Beyond the limit now: no new group, the loaded ones served.
    assert join_response(ctx.join(join_request(group="new"))).error_code == (
        ErrorCode.POLICY_VIOLATION
    )
    assert ctx.commit_offsets({("t", 0): 9}, group="g0").topics[0].partitions[0].error_code == 0


def test_group_max_size_is_answered_with_a_message() -> None:
    ctx = GroupsContext(max_size=1)
    ctx.stable_group(1)
    refused = join_response(ctx.join(join_request()))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert refused.error_message is not None and "group.max.size 1" in refused.error_message


def static_join(ctx: GroupsContext, instance: str, metadata: bytes) -> Parked:
    return ctx.join(join_request(instance=instance, protos=[("range", metadata)]))


def test_a_join_that_would_make_the_leaders_answer_too_large_is_refused() -> None:
    # Ten members of 64 KiB metadata fit an answer of 700,000 bytes; the eleventh does not.
    metadata = subscription("t") + b"x" * 65536
    ctx = GroupsContext(max_response_bytes=700_000)
    joins = [static_join(ctx, f"i{n}", metadata) for n in range(10)]
    refused = join_response(static_join(ctx, "i10", metadata))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert refused.error_message is not None
    assert "max_response_bytes 700000" in refused.error_message
    assert not ctx.group().has_static_member("i10")
    # The others form the group, and the leader's answer is within the limit.
    ctx.sleep_until_done(joins)
    answers = [join_response(parked) for parked in joins]
    assert {a.error_code for a in answers} == {ErrorCode.NONE}
    (leader,) = [a for a in answers if a.members]
    assert len(leader.members) == 10
    assert len(encode_body(leader)) + ENVELOPE_BYTES <= 700_000


def test_a_member_rejoining_with_metadata_too_large_keeps_what_it_had() -> None:
    small = subscription("t")
    ctx = GroupsContext(max_response_bytes=100_000)
    members, generation = ctx.stable_group(2)
    refused = join_response(
        ctx.join(join_request(members[1], protos=[("range", small + b"x" * 200_000)]))
    )
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert ctx.state() is S.STABLE
    assert ctx.group().member(members[1]).protocols == (("range", small),)
    assert ctx.heartbeat(members[1], generation) == ErrorCode.NONE


def test_a_new_group_refused_for_its_answer_size_is_not_created() -> None:
    ctx = GroupsContext(max_response_bytes=10_000)
    refused = join_response(static_join(ctx, "i", b"x" * 20_000))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert ctx.log == []


def test_a_leave_naming_a_member_twice_answers_the_second_unknown() -> None:
    ctx = GroupsContext()
    members, _ = ctx.stable_group(3)
    response = ctx.leave((members[0], None), (members[0], None), (members[1], None))
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
    ]
    assert list(ctx.group().members) == [members[2]]
    assert ctx.state() is S.PREPARING_REBALANCE


def test_a_static_member_removed_by_instance_then_named_again_is_unknown() -> None:
    ctx = GroupsContext()
    join = static_join(ctx, "i", subscription("t"))
    ctx.sleep_until_done([join])
    member_id = join_response(join).member_id
    response = ctx.leave(("", "i"), (member_id, "i"), ("", "i"))
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert ctx.group().num_members() == 0
    assert ctx.state() is S.EMPTY


def test_every_member_of_a_large_group_leaves_in_one_request_in_linear_time() -> None:
    ctx = GroupsContext()
    members, _ = ctx.stable_group(6000)
    started = time.perf_counter()
    response = ctx.leave(*[(m, None) for m in members])
    elapsed = time.perf_counter() - started
    assert {m.error_code for m in response.members} == {ErrorCode.NONE}
    assert ctx.group().num_members() == 0
    # One at a time, each leave copied the group: 6,000 members took over a second and a
    # half; together, a few milliseconds.
    assert elapsed < 0.5, elapsed


def test_list_groups_stops_at_its_byte_limit() -> None:
    ctx = GroupsContext()
    for n in range(50):
        ctx.commit_offsets({("t", 0): 1}, group=f"group-{n:03}")
    ctx.commit()
    committed = ctx.registry.committed_offset
    listed = ctx.shard.list_groups(frozenset(), frozenset(), committed, 100_000)
    assert listed is not None
    groups, size = listed
    assert len(groups) == 50
    assert size >= sum(len(encode_body(g)) for g in groups)
    assert ctx.shard.list_groups(frozenset(), frozenset(), committed, size - 1) is None
    assert ctx.shard.list_groups(list_filter(["Dead"]), frozenset(), committed, 0) == (
        [],
        0,
    )


@pytest.mark.parametrize(
    ("protocol_type", "state", "group_type"),
    [
        ("consumer", "Stable", "classic"),
        ("", "Empty", "classic"),
        ("consumer", "Reconciling", "consumer"),
    ],
)
def test_a_listed_group_is_sized_as_it_encodes_whatever_its_type(
    protocol_type: str, state: str, group_type: str
) -> None:
    listed = ListGroupsResponseGroup(
        group_id="orders-readers",
        protocol_type=protocol_type,
        group_state=state,
        group_type=group_type,
    )
    size = listed_group_bytes("orders-readers", protocol_type, state, group_type)
    assert size == len(encode_body(listed))
