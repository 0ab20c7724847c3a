"""`coordinator-server transactions`: Kafka's `kafka-transactions` for coordinator-server.

Sub-commands, as Kafka's tool names them: `list` (every transaction of every node of the
cluster), `describe --transactional-id ID`, `describe-producers --topic T --partition P`,
`find-hanging (--topic T [--partition P] | --broker-id B)` and `abort --topic T --partition P
(--start-offset N | --producer-id ... --producer-epoch ... --coordinator-epoch ...)` and
`force-terminate --transactional-id ID` (the id's producer fenced, its transaction aborted). Each
prints Kafka's table (or JSON with `--json`) and exits 0 on success, 1 on an error (one line
on stderr), 2 on a usage error.

A hanging transaction is one a partition of the Kafka cluster keeps open (its records hold
back the last stable offset, so read_committed consumers stop before them) while no
coordinator will ever end it: its producer is unknown to the coordinator, or the
coordinator's transaction no longer includes the partition. `abort` writes the ABORT marker
the coordinator never wrote, straight to the partition's leader.

The connection options are `groups`': `--bootstrap-server` for coordinator-server and
`--kafka-bootstrap-servers` (with the Kafka security options) for the Kafka cluster.
"""

from coordinator_server.admin_transactions.command import add_parser, main

__all__ = ["add_parser", "main"]
