"""The admin tool: Kafka's `kafka-consumer-groups`, `kafka-transactions`, `kafka-acls` and
the users of `kafka-configs` for coordinator-server, one tool with four commands on the same
connection options.

- `coordinator-server groups` (`groups`): `list`, `describe`, `offsets`, `delete` (each of
  groups named as GROUP or `--group GROUP`, several at once, or `--all-groups`),
  `delete-offsets GROUP --topic T`, and `reset-offsets` (`reset_offsets`).
- `coordinator-server transactions` (`transactions`): `list` (every transaction of every node
  of the cluster), `describe --transactional-id ID`, `describe-producers --topic T
  --partition P`, `find-hanging (--topic T [--partition P] | --broker-id B)`, `abort --topic T
  --partition P (--start-offset N | --producer-id ... --producer-epoch ...
  --coordinator-epoch ...)` and `force-terminate --transactional-id ID`.
- `coordinator-server acls` (`acls`): kafka-acls.sh's `--add`, `--remove` and `--list` of ACLs,
  with its options and its output.
- `coordinator-server users` (`users`): `add NAME --mechanism M [--password-file F]`,
  `delete NAME --mechanism M` and `list [NAME...]` of SCRAM credentials; the password from a
  file or the terminal, the credential derived here (it never goes on the wire).

Each prints a table for people, or JSON with `--json` for scripts, and exits 0 on success, 1
on an error (one line on stderr), 2 on a usage error.

Every command connects to coordinator-server secured as `--command-config FILE` says (Kafka
tools' option: a .properties file of Kafka's client security settings, `security.protocol`,
`sasl.mechanism`, `sasl.jaas.config`, `ssl.*`; `common.command_config`).

Both talk to coordinator-server (`--bootstrap-server`, any node of a cluster; `common`) for
groups, committed offsets and transactions: what spans the cluster asks every node
(DescribeCluster names them), a group's or a transactional id's commands go to its
coordinator (FindCoordinator, looked up again on NOT_COORDINATOR). They talk to Kafka
(`--kafka-bootstrap-servers`, with the Kafka security options) for what only the data cluster
knows: the log-end offset of each partition (the high watermark a Fetch reports, see
`coordinator_client.rpc.kafka_log`), the log start, offsets by time, the producers a
partition's log keeps (DescribeProducers, `describe_producers`) and the ABORT marker of a
hanging transaction, written straight to the partition's leader (`kafka_partitions`). Both
addresses are also read from the environment, `COORDINATOR_BOOTSTRAP_SERVER` and
`COORDINATOR_KAFKA_BOOTSTRAP_SERVERS`. A bootstrap server that refuses the connection ends
the command at once, naming the address (`common.check_reachable`), and a topic the Kafka
cluster does not have is reported, never created.

A hanging transaction is one a partition of the Kafka cluster keeps open (its records hold
back the last stable offset, so read_committed consumers stop before them) while no
coordinator will ever end it: its producer is unknown to the coordinator, or the
coordinator's transaction no longer includes the partition.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from coordinator_server.tools.admin import acls, groups, transactions, users

COMMANDS = ("groups", "transactions", "acls", "users")


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The tool's commands: `groups`, `transactions`, `acls` and `users`."""
    groups.add_parser(commands)
    transactions.add_parser(commands)
    acls.add_parser(commands)
    users.add_parser(commands)


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Runs the command `args` names (one of COMMANDS); its exit status."""
    if args.command == "transactions":
        return transactions.main(args, out, err)
    if args.command == "acls":
        return acls.main(args, out, err)
    if args.command == "users":
        return users.main(args, out, err)
    return groups.main(args, out, err)


__all__ = ["COMMANDS", "add_parsers", "main"]
