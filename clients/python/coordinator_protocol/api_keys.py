"""The APIs of the contract: Kafka's api keys, their display names and supported versions.

A new API keeps Kafka's key for it (PROTOCOL.md, "Extending the contract"); a changed body
shape gets a new version, so `SUPPORTED_VERSIONS` is the one place that says which
(api_key, api_version) pairs the server answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final

__all__ = ["SUPPORTED_VERSIONS", "ApiKey", "api_name", "is_supported", "version_range"]


class ApiKey(IntEnum):
    """Kafka's api keys for the coordinator APIs of the contract: the group coordinator's,
    the transaction coordinator's (WriteTxnMarkers among them, which only nodes send),
    DescribeCluster, which names the nodes of a coordinator cluster, the security APIs
    (the SASL exchange, ACLs and SCRAM credentials) and the consumer group protocol's
    (KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe).

    The contract defining an API does not mean a server answers it: a server lists in
    ApiVersions only the APIs it serves, and answers any other UNSUPPORTED_VERSION."""

    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


SUPPORTED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = MappingProxyType(
    {
        ApiKey.OFFSET_COMMIT: (0, 0),
        ApiKey.OFFSET_FETCH: (0, 0),
        ApiKey.FIND_COORDINATOR: (0, 0),
        ApiKey.JOIN_GROUP: (0, 0),
        ApiKey.HEARTBEAT: (0, 0),
        ApiKey.LEAVE_GROUP: (0, 0),
        ApiKey.SYNC_GROUP: (0, 0),
        ApiKey.DESCRIBE_GROUPS: (0, 0),
        ApiKey.LIST_GROUPS: (0, 0),
        ApiKey.SASL_HANDSHAKE: (0, 0),
        ApiKey.API_VERSIONS: (0, 0),
        ApiKey.INIT_PRODUCER_ID: (0, 0),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 0),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 0),
        ApiKey.END_TXN: (0, 0),
        ApiKey.WRITE_TXN_MARKERS: (0, 0),
        ApiKey.TXN_OFFSET_COMMIT: (0, 0),
        ApiKey.DESCRIBE_ACLS: (0, 0),
        ApiKey.CREATE_ACLS: (0, 0),
        ApiKey.DELETE_ACLS: (0, 0),
        ApiKey.SASL_AUTHENTICATE: (0, 0),
        ApiKey.DELETE_GROUPS: (0, 0),
        ApiKey.OFFSET_DELETE: (0, 0),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_CLUSTER: (0, 0),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 1),
        ApiKey.LIST_TRANSACTIONS: (0, 1),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 0),
        ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    }
)
"""(min_version, max_version) per api key, both inclusive."""

# The same table keyed by int: a number off the wire need not be a member of ApiKey.
_VERSIONS_BY_NUMBER: Final[Mapping[int, tuple[int, int]]] = {
    int(api_key): versions for api_key, versions in SUPPORTED_VERSIONS.items()
}

_NAMES: Final[Mapping[int, str]] = MappingProxyType(
    {
        ApiKey.OFFSET_COMMIT: "OffsetCommit",
        ApiKey.OFFSET_FETCH: "OffsetFetch",
        ApiKey.FIND_COORDINATOR: "FindCoordinator",
        ApiKey.JOIN_GROUP: "JoinGroup",
        ApiKey.HEARTBEAT: "Heartbeat",
        ApiKey.LEAVE_GROUP: "LeaveGroup",
        ApiKey.SYNC_GROUP: "SyncGroup",
        ApiKey.DESCRIBE_GROUPS: "DescribeGroups",
        ApiKey.LIST_GROUPS: "ListGroups",
        ApiKey.SASL_HANDSHAKE: "SaslHandshake",
        ApiKey.API_VERSIONS: "ApiVersions",
        ApiKey.INIT_PRODUCER_ID: "InitProducerId",
        ApiKey.ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
        ApiKey.ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
        ApiKey.END_TXN: "EndTxn",
        ApiKey.WRITE_TXN_MARKERS: "WriteTxnMarkers",
        ApiKey.TXN_OFFSET_COMMIT: "TxnOffsetCommit",
        ApiKey.DESCRIBE_ACLS: "DescribeAcls",
        ApiKey.CREATE_ACLS: "CreateAcls",
        ApiKey.DELETE_ACLS: "DeleteAcls",
        ApiKey.SASL_AUTHENTICATE: "SaslAuthenticate",
        ApiKey.DELETE_GROUPS: "DeleteGroups",
        ApiKey.OFFSET_DELETE: "OffsetDelete",
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
        ApiKey.DESCRIBE_CLUSTER: "DescribeCluster",
        ApiKey.DESCRIBE_TRANSACTIONS: "DescribeTransactions",
        ApiKey.LIST_TRANSACTIONS: "ListTransactions",
        ApiKey.CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat",
        ApiKey.CONSUMER_GROUP_DESCRIBE: "ConsumerGroupDescribe",
    }
)


def api_name(api_key: int) -> str:
    """Kafka's display name of an api key ("JoinGroup"); "Unknown(n)" for any other n."""
    return _NAMES.get(api_key) or f"Unknown({api_key})"


def version_range(api_key: int) -> tuple[int, int] | None:
    """(min_version, max_version) of `api_key`, or None for a key the contract lacks."""
    return _VERSIONS_BY_NUMBER.get(api_key)


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether the contract defines `api_version` of `api_key`."""
    versions = _VERSIONS_BY_NUMBER.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]
