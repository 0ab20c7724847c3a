"""The client library: talk to coordinator-server from asyncio.

- `CoordinatorClient`: every API of the wire contract, pipelined on one connection per
  server, with coordinator discovery, retries and typed errors (the RPC client,
  `coordinator_client.rpc`, which the tools use without the rest of the library).
- `GroupMember`: one member of a consumer group (join, sync, heartbeats, rebalances).
- `RangeAssignor`, `RoundRobinAssignor`, `StickyAssignor`: how a group leader assigns
  partitions; any object with the `Assignor` shape will do.
- `CoordinatedConsumer`: an aiokafka consumer whose group and offsets live in
  coordinator-server.
- `TransactionalProducer`: an aiokafka producer whose transactions coordinator-server
  coordinates.

It depends on `coordinator_protocol` (the wire contract), the RPC client and aiokafka, never on the
server.
"""

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
from coordinator_client.sticky import StickyAssignor
from coordinator_protocol.errors import ApiError, ErrorCode

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
