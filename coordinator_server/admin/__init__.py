"""`coordinator-server groups`: Kafka's `kafka-consumer-groups` for coordinator-server.

Sub-commands: `list`, `describe`, `offsets`, `delete` (each of groups named as GROUP or
`--group GROUP`, several at once, or `--all-groups`), `delete-offsets GROUP --topic T`, and
`reset-offsets` (`reset_offsets`). Each prints a table for people, or JSON with `--json` for
scripts (an object for one group, a list for several or `--all-groups`), and exits 0 on
success, 1 on an error (with a one-line message on stderr), 2 on a usage error.

The tool talks to coordinator-server (`--bootstrap-server`, any node of a cluster) for
groups and committed offsets: `list` asks every node of the cluster (DescribeCluster names
them), a group's commands go to its coordinator (FindCoordinator, looked up again on
NOT_COORDINATOR); and to Kafka (`--kafka-bootstrap-servers`) for what only the log knows: the
log-end offset of each partition (the high watermark a Fetch reports, see
`rpc.kafka_log`), the log start, and offsets by time. Both are also read from the
environment, `COORDINATOR_BOOTSTRAP_SERVER` and `COORDINATOR_KAFKA_BOOTSTRAP_SERVERS`. A
bootstrap server that refuses the connection ends the command at once, naming the address
(`common.check_reachable`), and a topic the Kafka cluster does not have is reported, never
created.
"""

from coordinator_server.admin.command import add_parser, main
from coordinator_server.admin.common import (
    AdminError,
    configure_tool_logging,
    connection_options,
    coordinator_client,
    kafka_cluster,
    open_coordinator,
)

__all__ = [
    "AdminError",
    "add_parser",
    "configure_tool_logging",
    "connection_options",
    "coordinator_client",
    "kafka_cluster",
    "main",
    "open_coordinator",
]
