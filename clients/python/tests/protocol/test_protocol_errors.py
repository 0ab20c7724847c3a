"""The error table: one exception class per code, and Kafka's retriable flags."""

from __future__ import annotations

import pytest

from coordinator_protocol.errors import (
    ApiError,
    ErrorCode,
    UnknownServerError,
    error_for_code,
    exception_class,
)

CODES = [code for code in ErrorCode if code is not ErrorCode.NONE]


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
def test_every_code_has_an_exception_class(code: ErrorCode) -> None:
    cls = exception_class(code)
    assert issubclass(cls, ApiError)
    assert cls.code is code


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
def test_error_for_code_round_trips(code: ErrorCode) -> None:
    error = error_for_code(int(code), "detail")
    assert type(error) is exception_class(code)
    assert error.code is code
    assert error.message == "detail"
    assert error.retriable is code.retriable
    assert str(error) == f"{code.name} ({code.value}): detail"


def test_unknown_code_is_an_unknown_server_error() -> None:
    error = error_for_code(9999)
    assert type(error) is UnknownServerError
    assert "9999" in str(error)


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        (14, True),  # COORDINATOR_LOAD_IN_PROGRESS
        (15, True),  # COORDINATOR_NOT_AVAILABLE
        (16, True),  # NOT_COORDINATOR
        (7, True),  # REQUEST_TIMED_OUT
        (22, False),  # ILLEGAL_GENERATION
        (25, False),  # UNKNOWN_MEMBER_ID
        (27, False),  # REBALANCE_IN_PROGRESS
        (42, False),  # INVALID_REQUEST
    ],
)
def test_retriable_flags(code: int, retriable: bool) -> None:
    error = error_for_code(code)
    assert error.code.value == code
    assert error.code.retriable is retriable
    assert error.retriable is retriable


def test_contract_codes_exist() -> None:
    # Every code PROTOCOL.md lists, by Kafka's number.
    listed = [0, -1, 7, 12, 14, 15, 16, 22, 23, 24, 25, 26, 27, 28, 30, 33, 34, 35, 42, 58]
    listed += [68, 69, 79, 81, 82, 86, 88]
    # And those of the consumer group protocol's APIs (KIP-848).
    listed += [110, 111, 112, 113, 128]
    assert set(listed) <= {code.value for code in ErrorCode}
