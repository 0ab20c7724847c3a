"""Api keys, display names and the version table."""

from __future__ import annotations

import pytest

from coordinator_protocol.api_keys import (
    SUPPORTED_VERSIONS,
    ApiKey,
    api_name,
    is_supported,
    version_range,
)


def test_kafka_numbers() -> None:
    assert {key.name: key.value for key in ApiKey} == {
        "OFFSET_COMMIT": 8,
        "OFFSET_FETCH": 9,
        "FIND_COORDINATOR": 10,
        "JOIN_GROUP": 11,
        "HEARTBEAT": 12,
        "LEAVE_GROUP": 13,
        "SYNC_GROUP": 14,
        "DESCRIBE_GROUPS": 15,
        "LIST_GROUPS": 16,
        "SASL_HANDSHAKE": 17,
        "API_VERSIONS": 18,
        "INIT_PRODUCER_ID": 22,
        "ADD_PARTITIONS_TO_TXN": 24,
        "ADD_OFFSETS_TO_TXN": 25,
        "END_TXN": 26,
        "WRITE_TXN_MARKERS": 27,
        "TXN_OFFSET_COMMIT": 28,
        "DESCRIBE_ACLS": 29,
        "CREATE_ACLS": 30,
        "DELETE_ACLS": 31,
        "SASL_AUTHENTICATE": 36,
        "DELETE_GROUPS": 42,
        "OFFSET_DELETE": 47,
        "DESCRIBE_USER_SCRAM_CREDENTIALS": 50,
        "ALTER_USER_SCRAM_CREDENTIALS": 51,
        "DESCRIBE_CLUSTER": 60,
        "DESCRIBE_TRANSACTIONS": 65,
        "LIST_TRANSACTIONS": 66,
        "CONSUMER_GROUP_HEARTBEAT": 68,
        "CONSUMER_GROUP_DESCRIBE": 69,
    }


@pytest.mark.parametrize(
    ("api_key", "name"),
    [
        (ApiKey.OFFSET_COMMIT, "OffsetCommit"),
        (ApiKey.OFFSET_FETCH, "OffsetFetch"),
        (ApiKey.FIND_COORDINATOR, "FindCoordinator"),
        (ApiKey.JOIN_GROUP, "JoinGroup"),
        (ApiKey.HEARTBEAT, "Heartbeat"),
        (ApiKey.LEAVE_GROUP, "LeaveGroup"),
        (ApiKey.SYNC_GROUP, "SyncGroup"),
        (ApiKey.DESCRIBE_GROUPS, "DescribeGroups"),
        (ApiKey.LIST_GROUPS, "ListGroups"),
        (ApiKey.API_VERSIONS, "ApiVersions"),
        (ApiKey.DELETE_GROUPS, "DeleteGroups"),
        (ApiKey.OFFSET_DELETE, "OffsetDelete"),
        (ApiKey.DESCRIBE_CLUSTER, "DescribeCluster"),
        (11, "JoinGroup"),
        (ApiKey.INIT_PRODUCER_ID, "InitProducerId"),
        (ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit"),
        (66, "ListTransactions"),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat"),
        (69, "ConsumerGroupDescribe"),
        (67, "Unknown(67)"),
        (23, "Unknown(23)"),
        (-1, "Unknown(-1)"),
    ],
)
def test_api_name(api_key: int, name: str) -> None:
    assert api_name(api_key) == name


def test_every_api_is_at_version_0_but_those_with_a_newer_body() -> None:
    assert set(SUPPORTED_VERSIONS) == set(ApiKey)
    newer = {ApiKey.DESCRIBE_TRANSACTIONS: 1, ApiKey.LIST_TRANSACTIONS: 1}
    assert {key: high for key, (_, high) in SUPPORTED_VERSIONS.items() if high} == newer
    assert all(low == 0 for low, _ in SUPPORTED_VERSIONS.values())


def test_version_lookups() -> None:
    assert version_range(11) == (0, 0)
    assert version_range(99) is None
    assert is_supported(ApiKey.JOIN_GROUP, 0)
    assert is_supported(11, 0)
    assert not is_supported(11, 1)
    assert not is_supported(11, -1)
    assert not is_supported(99, 0)


def test_version_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        SUPPORTED_VERSIONS[ApiKey.JOIN_GROUP] = (0, 1)  # type: ignore[index]
