"""The shard is the service's one door, as Kafka's GroupCoordinatorShard is its
GroupCoordinatorService's: an operation per API, reads included, and nothing above the
shard reaches into its managers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from shard_context import ShardTestContext

import coordinator_server
from coordinator_server.groups.admin_views import ClassicGroupAdmin
from coordinator_server.groups.join import ClassicGroupJoin
from coordinator_server.groups.membership import ClassicGroupMembership
from coordinator_server.offsets.manager import OffsetMetadataManager

GROUP_OPERATIONS = {
    "join_group": ClassicGroupJoin,
    "sync_group": ClassicGroupMembership,
    "heartbeat": ClassicGroupMembership,
    "leave_group": ClassicGroupMembership,
    "describe_groups": ClassicGroupAdmin,
    "list_groups": ClassicGroupAdmin,
}
OFFSET_OPERATIONS = (
    "commit_offset",
    "delete_offsets",
    "fetch_offsets",
    "fetch_partition_offsets",
    "fetch_all_offsets",
)
# The modules above the shard: the service, its bulk requests and the wiring.
ABOVE_THE_SHARD = ("service/group_service.py", "service/bulk_requests.py", "app.py")


@pytest.mark.parametrize("name", sorted(GROUP_OPERATIONS))
def test_a_group_operation_is_its_phases_handler_bound_once(name: str) -> None:
    # Bound once, a call through the shard is the one call to the handler: a heartbeat
    # costs what it did when the service called the manager itself.
    operation = getattr(ShardTestContext().shard, name)
    assert operation.__func__ is getattr(GROUP_OPERATIONS[name], name)


@pytest.mark.parametrize("name", OFFSET_OPERATIONS)
def test_an_offset_operation_is_the_offset_managers_handler_bound_once(name: str) -> None:
    shard = ShardTestContext().shard
    operation = getattr(shard, name)
    assert operation.__func__ is getattr(OffsetMetadataManager, name)
    assert operation.__self__ is shard.offsets


@pytest.mark.parametrize("module", ABOVE_THE_SHARD)
def test_nothing_above_the_shard_reaches_into_its_managers(module: str) -> None:
    path = Path(coordinator_server.__file__).parent / module
    reaching = [
        f"{module}:{node.lineno}: shard.{node.attr}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and node.attr in ("groups", "offsets")
        and isinstance(node.value, ast.Name)
        and node.value.id == "shard"
    ]
    assert reaching == []
