"""The shard is the services' one door, as Kafka's GroupCoordinatorShard is its
GroupCoordinatorService's: a method per API, reads included. Each service is typed by its
door (`GroupShard`, `TransactionShard`), which the shard implements method for method, and
nothing above the shard reaches into its managers."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from shard_context import ShardTestContext

import coordinator_server
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from coordinator_server.shard import GroupShard, LogPartitionShard, TransactionShard

DOORS = (GroupShard, TransactionShard)
PACKAGE = Path(coordinator_server.__file__).parent
ABOVE_THE_SHARD = [
    *sorted(
        str(path.relative_to(PACKAGE))
        for folder in ("service", "markers")
        for path in (PACKAGE / folder).glob("*.py")
    ),
    "app.py",
]
# The services and what they call the shard through: never the shard's own class.
TYPED_BY_A_DOOR = {
    "service/group_service.py": "GroupShard",
    "service/bulk_requests.py": "GroupShard",
    "service/offset_fetch.py": "GroupShard",
    "service/transaction_service.py": "TransactionShard",
    "service/add_partitions_to_txn.py": "TransactionShard",
    "service/transaction_views.py": "TransactionShard",
    "service/transaction_ends.py": "TransactionShard",
    "markers/channel.py": "TransactionShard",
}


def door_methods(door: type) -> list[str]:
    return sorted(
        name
        for name, member in vars(door).items()
        if inspect.isfunction(member) and not name.startswith("_")
    )


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_the_shard_implements_each_door_method_for_method(door: type) -> None:
    assert door_methods(door)
    for name in door_methods(door):
        expected = inspect.signature(getattr(door, name))
        actual = inspect.signature(getattr(LogPartitionShard, name))
        assert list(actual.parameters.values()) == list(expected.parameters.values()), name
        assert actual.return_annotation == expected.return_annotation, name


def test_a_door_method_is_the_managers_answer() -> None:
    """Through the door, a commit is the offset manager's commit: the same records and
    the same answer, replayed into the same state."""
    ctx = ShardTestContext()
    partition = OffsetCommitRequestPartition(
        partition_index=0, committed_offset=7, committed_leader_epoch=-1, committed_metadata=""
    )
    request = OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitRequestTopic(name="t", partitions=[partition])]
    )
    response = ctx.write(lambda shard: shard.commit_offset(request))
    assert [p.error_code for t in response.topics for p in t.partitions] == [0]
    committed = ctx.shard.managers.offsets.committed_offset("g", "t", 0)
    assert committed is not None
    assert committed.offset == 7


@pytest.mark.parametrize("module", ABOVE_THE_SHARD)
def test_nothing_above_the_shard_reaches_into_its_managers(module: str) -> None:
    path = PACKAGE / module
    reaching = [
        f"{module}:{node.lineno}: .{node.attr}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and node.attr in ("managers", "_groups", "_offsets", "_transactions")
        and isinstance(node.value, ast.Name)
        and node.value.id == "shard"
    ]
    assert reaching == []


@pytest.mark.parametrize("module", sorted(TYPED_BY_A_DOOR))
def test_each_service_is_typed_by_its_door(module: str) -> None:
    source = (PACKAGE / module).read_text()
    assert f"CoordinatorRuntime[{TYPED_BY_A_DOOR[module]}]" in source
    assert "LogPartitionShard" not in source
