"""The storage layer takes Kafka's error numbers from one module, and the codes only a broker
answers stay unknown to the service (clients keep getting UNKNOWN_SERVER_ERROR for them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coordinator_protocol.errors import ErrorCode
from coordinator_server.service.errors import map_operation_error
from coordinator_server.storage import error_codes
from coordinator_server.storage.api import AppendError

STORAGE = Path(error_codes.__file__).parent
DECLARED = {name: value for name, value in vars(error_codes).items() if name.isupper()}
BROKER_ONLY = {name: value for name, value in DECLARED.items() if name not in ErrorCode.__members__}


def test_the_codes_of_the_wire_table_keep_its_numbers_and_the_others_stay_outside_it() -> None:
    for name, value in DECLARED.items():
        assert type(value) is int, name
        if name in ErrorCode.__members__:
            assert value == ErrorCode[name].value, name
        else:
            assert value not in {code.value for code in ErrorCode}, name
    assert set(BROKER_ONLY) == {
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
    }


# The log's producer's codes, in the table for the transaction APIs: a group's client still
# gets UNKNOWN_SERVER_ERROR for them.
@pytest.mark.parametrize("name", [*sorted(BROKER_ONLY), "PRODUCER_FENCED", "UNKNOWN_PRODUCER_ID"])
def test_an_append_failing_with_a_broker_only_code_answers_unknown_server_error(
    name: str,
) -> None:
    code, _ = map_operation_error("OffsetCommit", AppendError(DECLARED[name], "refused"))
    assert code is ErrorCode.UNKNOWN_SERVER_ERROR


def test_no_other_storage_module_declares_an_error_number() -> None:
    names = set(DECLARED) | set(ErrorCode.__members__)
    declared_elsewhere = []
    for path in sorted(STORAGE.glob("*.py")):
        if path.name == "error_codes.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            declared_elsewhere += [
                f"{path.name}: {target.id}"
                for target in targets
                if isinstance(target, ast.Name) and target.id.lstrip("_") in names
            ]
    assert not declared_elsewhere
