"""The client library: talk to coordinator-server from asyncio.

- `CoordinatorClient`: every API of the wire contract, pipelined on one connection per
  server, with coordinator discovery, retries and typed errors (the RPC client,
  `coordinator_client.rpc`, which the tools use without the rest of the library).
- `ClientSecurity`: how the connections to the coordinator are secured (TLS, SASL), from
  Kafka's client property names (`read_properties_file` reads a Kafka tool's
  `--command-config`); every entry point below takes it as `security`.
- `GroupMember`: one member of a consumer group, by Kafka's classic protocol (join, sync,
  heartbeats, eager rebalances) or its consumer group protocol (KIP-848:
  `group_protocol="consumer"`, the coordinator assigns and members reconcile).
- `RangeAssignor`, `RoundRobinAssignor`, `StickyAssignor`: how a group leader assigns
  partitions; any object with the `Assignor` shape will do.
- `CoordinatedConsumer`: an aiokafka consumer whose group and offsets live in
  coordinator-server.
- `TransactionalProducer`: an aiokafka producer whose transactions coordinator-server
  coordinates.

It depends on `coordinator_protocol` (the wire contract), the RPC client and aiokafka, never on the
server.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator_client.assignors import (
        AbstractAssignor,
        Assignment,
        Assignor,
        RangeAssignor,
        RoundRobinAssignor,
        Subscription,
    )
    from coordinator_client.consumer import CoordinatedConsumer
    from coordinator_client.errors import CommitFailedError, GroupMemberError
    from coordinator_client.member import GroupMember, MemberState
    from coordinator_client.producer import TransactionalProducer
    from coordinator_client.rpc.backoff import ExponentialBackoff
    from coordinator_client.rpc.client import CoordinatorClient
    from coordinator_client.rpc.errors import (
        ClientClosedError,
        ClientError,
        CloseReason,
        ConnectionClosedError,
        OffsetCommitError,
        OffsetDeleteError,
        PartitionErrors,
        RequestTimeoutError,
        RequestTooLargeError,
    )
    from coordinator_client.rpc.kafka_log import KafkaLogReader
    from coordinator_client.rpc.nodes import Node, build_ssl_context, parse_bootstrap
    from coordinator_client.rpc.security import (
        ClientSecurity,
        ClientSecurityError,
        read_properties_file,
    )
    from coordinator_client.sticky import StickyAssignor
    from coordinator_protocol.errors import ApiError, ErrorCode

__all__ = [
    "AbstractAssignor",
    "ApiError",
    "Assignment",
    "Assignor",
    "ClientClosedError",
    "ClientError",
    "ClientSecurity",
    "ClientSecurityError",
    "CloseReason",
    "CommitFailedError",
    "ConnectionClosedError",
    "CoordinatedConsumer",
    "CoordinatorClient",
    "ErrorCode",
    "ExponentialBackoff",
    "GroupMember",
    "GroupMemberError",
    "KafkaLogReader",
    "MemberState",
    "Node",
    "OffsetCommitError",
    "OffsetDeleteError",
    "PartitionErrors",
    "RangeAssignor",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TransactionalProducer",
    "build_ssl_context",
    "parse_bootstrap",
    "read_properties_file",
]

# Each name loads its module when first asked for (PEP 562), so that importing one module of
# the library (the server imports `kafka_metadata_request`) does not load the rest: the
# consumer, the producer and aiokafka's parts they use.
_EXPORTS: dict[str, str] = {
    "AbstractAssignor": "coordinator_client.assignors",
    "ApiError": "coordinator_protocol.errors",
    "Assignment": "coordinator_client.assignors",
    "Assignor": "coordinator_client.assignors",
    "build_ssl_context": "coordinator_client.rpc.nodes",
    "ClientClosedError": "coordinator_client.rpc.errors",
    "ClientError": "coordinator_client.rpc.errors",
    "ClientSecurity": "coordinator_client.rpc.security",
    "ClientSecurityError": "coordinator_client.rpc.security",
    "CloseReason": "coordinator_client.rpc.errors",
    "CommitFailedError": "coordinator_client.errors",
    "ConnectionClosedError": "coordinator_client.rpc.errors",
    "CoordinatedConsumer": "coordinator_client.consumer",
    "CoordinatorClient": "coordinator_client.rpc.client",
    "ErrorCode": "coordinator_protocol.errors",
    "ExponentialBackoff": "coordinator_client.rpc.backoff",
    "GroupMember": "coordinator_client.member",
    "GroupMemberError": "coordinator_client.errors",
    "KafkaLogReader": "coordinator_client.rpc.kafka_log",
    "MemberState": "coordinator_client.member",
    "Node": "coordinator_client.rpc.nodes",
    "OffsetCommitError": "coordinator_client.rpc.errors",
    "OffsetDeleteError": "coordinator_client.rpc.errors",
    "parse_bootstrap": "coordinator_client.rpc.nodes",
    "PartitionErrors": "coordinator_client.rpc.errors",
    "RangeAssignor": "coordinator_client.assignors",
    "read_properties_file": "coordinator_client.rpc.security",
    "RequestTimeoutError": "coordinator_client.rpc.errors",
    "RequestTooLargeError": "coordinator_client.rpc.errors",
    "RoundRobinAssignor": "coordinator_client.assignors",
    "StickyAssignor": "coordinator_client.sticky",
    "Subscription": "coordinator_client.assignors",
    "TransactionalProducer": "coordinator_client.producer",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
