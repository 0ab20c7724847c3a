"""The client library: talk to coordinator-server from asyncio.

- `CoordinatorClient`: every API of the wire contract, pipelined on one connection per
  server, with coordinator discovery, retries and typed errors (the RPC client,
  `coordinator_server.rpc`, which the tools use without the rest of the library).
- `GroupMember`: one member of a consumer group (join, sync, heartbeats, rebalances).
- `RangeAssignor`, `RoundRobinAssignor`, `StickyAssignor`: how a group leader assigns
  partitions; any object with the `Assignor` shape will do.
- `CoordinatedConsumer`: an aiokafka consumer whose group and offsets live in
  coordinator-server.
- `TransactionalProducer`: an aiokafka producer whose transactions coordinator-server
  coordinates.

It depends on `protocol` (the wire contract), the RPC client and aiokafka, never on the
server.
"""

from coordinator_server.client.assignors import (
    AbstractAssignor,
    Assignment,
    Assignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
)
from coordinator_server.client.consumer import CoordinatedConsumer
from coordinator_server.client.errors import CommitFailedError, GroupMemberError
from coordinator_server.client.member import GroupMember, MemberState
from coordinator_server.client.producer import TransactionalProducer
from coordinator_server.client.sticky import StickyAssignor
from coordinator_server.rpc.backoff import ExponentialBackoff
from coordinator_server.rpc.client import CoordinatorClient
from coordinator_server.rpc.errors import (
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
from coordinator_server.rpc.kafka_log import KafkaLogReader
from coordinator_server.rpc.nodes import Node, build_ssl_context, parse_bootstrap
from protocol.errors import ApiError, ErrorCode

__all__ = [
    "AbstractAssignor",
    "ApiError",
    "Assignment",
    "Assignor",
    "ClientClosedError",
    "ClientError",
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
]
