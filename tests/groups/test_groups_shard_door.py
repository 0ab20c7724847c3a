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
from coordinator_server.shard import GroupShard, TransactionShard

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
    # Read from the source: a compiled method keeps no annotations at run time.
    expected = method_signatures(PACKAGE / "shard" / "doors.py", door.__name__)
    actual = method_signatures(PACKAGE / "shard" / "log_partition.py", "LogPartitionShard")
    assert sorted(expected) == door_methods(door)
    for name, signature in expected.items():
        assert actual.get(name) == signature, name


def method_signatures(path: Path, class_name: str) -> dict[str, str]:
    """The public methods of a class as written: parameters, annotations, defaults and the
    return annotation."""
    tree = ast.parse(path.read_text(), str(path))
    (cls,) = (
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
    )
    return {
        node.name: f"({ast.unparse(node.args)}) -> {ast.unparse(returns)}"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
        for returns in [node.returns or ast.Constant(None)]
    }


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
