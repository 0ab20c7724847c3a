"""docs/PROTOCOL.md is what a newcomer writes a client from: its tables, example bytes and
hash examples must say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest

from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, api_name
from coordinator_protocol.envelope import split_request
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import java_string_hash, partition_for
from coordinator_protocol.messages import REQUEST_TYPES, RESPONSE_TYPES

DOCUMENT = (Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md").read_text()


def _api_rows() -> dict[int, tuple[str, str, str]]:
    """api key -> (name, request cell, response cell) of the document's API table."""
    rows = {}
    for line in DOCUMENT.splitlines():
        match = re.match(r"\| (\d+) \| (\w+) \| (.*) \| (.*) \|$", line)
        if match and match[2] in {api_name(k) for k in SUPPORTED_VERSIONS}:
            rows[int(match[1])] = (match[2], match[3], match[4])
    return rows


def test_every_api_the_server_serves_is_documented_with_its_key() -> None:
    rows = _api_rows()
    assert set(rows) == {int(key) for key in SUPPORTED_VERSIONS}
    for key, (name, _, _) in rows.items():
        assert api_name(key) == name


@pytest.mark.parametrize("api_key", sorted(int(k) for k in SUPPORTED_VERSIONS))
def test_the_documented_fields_are_the_message_fields(api_key: int) -> None:
    _, request_cell, response_cell = _api_rows()[api_key]
    for cell, message in (
        (request_cell, REQUEST_TYPES[(api_key, 0)]),
        (response_cell, RESPONSE_TYPES[(api_key, 0)]),
    ):
        documented = set(re.findall(r"`(\w+)`", cell))
        # Any response may carry these; the document says so once, not in every row.
        for field in set(message.__struct_fields__) - {"error_message", "throttle_time_ms"}:
            assert field in documented, (api_key, field)


def test_the_example_frame_is_a_valid_request() -> None:
    match = re.search(
        r"is the length `([0-9a-f ]+)` followed by the \d+ bytes\n?`([0-9a-f ]+)`", DOCUMENT
    )
    assert match is not None
    length = bytes.fromhex(match[1])
    payload = bytes.fromhex(match[2])
    assert int.from_bytes(length, "big") == len(payload)
    header, body = split_request(payload)
    assert (header.api_key, header.api_version, header.correlation_id) == (10, 0, 7)
    assert header.client_id == "app"
    assert msgpack.unpackb(bytes(body)) == {"keys": ["g"]}


@pytest.mark.parametrize(
    ("group_id", "hashed", "partition"),
    [("orders", -1008770331, 17), ("my-group", -1906497762, 36)],
)
def test_the_hash_examples_are_right(group_id: str, hashed: int, partition: int) -> None:
    assert f'"{group_id}" hashes to {hashed}' in DOCUMENT.replace("\n", " ")
    assert java_string_hash(group_id) == hashed
    assert partition_for(group_id, 50) == partition


def test_every_documented_error_code_has_its_kafka_name_and_retriable_flag() -> None:
    documented = re.findall(r"\| (-?\d+) \| ([A-Z_]+)( \(retriable\))? \|", DOCUMENT)
    assert len(documented) >= 27
    for code, name, retriable in documented:
        assert ErrorCode(int(code)).name == name
        assert ErrorCode(int(code)).retriable == bool(retriable), name
