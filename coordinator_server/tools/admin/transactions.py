"""The sub-commands of `coordinator-server transactions`, each Kafka's `kafka-transactions.sh`
command of the same name (its `TransactionsCommand`): the same options, the same columns,
the same algorithm for finding hanging transactions.

`list` and `describe` ask coordinator-server (`--bootstrap-server`); `describe-producers`
and `abort` ask the Kafka cluster (`--kafka-bootstrap-servers`); `find-hanging` asks both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final, TextIO

from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from coordinator_client import ClientError, CoordinatorClient, Node
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponseState,
    DescribeTransactionsV1Request,
    InitProducerIdRequest,
    ListTransactionsRequest,
)
from coordinator_server.storage.kafka.security import KafkaSecurityError
from coordinator_server.tools.admin.common import (
    AdminError,
    UsageError,
    configure_tool_logging,
    connection_options,
    kafka_cluster,
    open_coordinator,
)
from coordinator_server.tools.admin.describe_producers import ActiveProducer
from coordinator_server.tools.admin.kafka_partitions import KafkaToolError, KafkaTransactionsAdmin

__all__ = ["add_parser", "main"]

_PROG: Final = "coordinator-server transactions"
_CLIENT_ID: Final = "coordinator-server-transactions"
# Kafka's tool asks for the producers of at most this many partitions per request.
_MAX_BATCH_SIZE: Final = 500
_MS_PER_MINUTE: Final = 60_000


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `transactions` and its sub-commands on the `coordinator-server` parser."""
    common = connection_options()
    transactions = commands.add_parser(
        "transactions",
        help="list, describe and recover transactions (Kafka's kafka-transactions)",
        description="Analyse the transactional state of producers, and detect and recover "
        "from hanging transactions (Kafka's kafka-transactions). Exit status: 0 ok, "
        "1 error, 2 usage.",
    )
    actions = transactions.add_subparsers(
        dest="transactions_command", required=True, metavar="COMMAND"
    )

    listing = actions.add_parser(
        "list", parents=[common], help="list the transactions of every coordinator node"
    )
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        help="only transactions in this state, e.g. Ongoing (repeatable)",
    )
    listing.add_argument(
        "--producer-id",
        action="append",
        type=int,
        default=[],
        help="only transactions of this producer id (repeatable)",
    )
    listing.add_argument(
        "--duration-filter",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions running longer than this (milliseconds); below 0: all",
    )
    listing.add_argument(
        "--transactional-id-pattern",
        metavar="REGEX",
        help="only transactional ids this regular expression matches whole",
    )

    describe = actions.add_parser(
        "describe", parents=[common], help="describe the state of a transactional id"
    )
    describe.add_argument("--transactional-id", required=True)

    producers = actions.add_parser(
        "describe-producers",
        parents=[common],
        help="describe the states of active producers for a topic partition (Kafka)",
    )
    producers.add_argument(
        "--broker-id", type=int, help="ask this replica instead of the partition's leader"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)

    hanging = actions.add_parser(
        "find-hanging", parents=[common], help="find hanging transactions (Kafka)"
    )
    hanging.add_argument("--broker-id", type=int, help="search the partitions of this broker")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="the largest transaction timeout in use; older open transactions are "
        "candidates [default 15]",
    )
    hanging.add_argument("--topic", help="search this topic (required with --partition)")
    hanging.add_argument("--partition", type=int)

    abort = actions.add_parser(
        "abort",
        parents=[common],
        help="abort a hanging transaction on a partition (writes an ABORT marker to Kafka)",
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id (instead of --start-offset)")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch (with --producer-id)")
    abort.add_argument(
        "--coordinator-epoch", type=int, help="coordinator epoch (with --producer-id)"
    )

    terminate = actions.add_parser(
        "force-terminate",
        parents=[common],
        help="abort a transactional id's ongoing transaction by fencing its producer",
        description="Abort the ongoing transaction of a transactional id, as Kafka's "
        "force-terminate does: an InitProducerId for the id bumps its producer epoch, which "
        "fences the producer and aborts the transaction it has open. The producer's next "
        "request fails with PRODUCER_FENCED.",
    )
    terminate.add_argument("--transactional-id", required=True)


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed `transactions` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    configure_tool_logging(err)
    command = _COMMANDS[args.transactions_command]
    try:
        asyncio.run(command(_Tool(args, out, err)))
    except UsageError as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 2
    except (AdminError, KafkaToolError, KafkaSecurityError) as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 1
    except (ApiError, ClientError, KafkaError, OSError, TimeoutError, ValueError) as error:
        text = str(error)
        if not isinstance(error, ApiError):
            text = f"{type(error).__name__}: {text}" if text else type(error).__name__
        print(f"{_PROG}: error: {text}", file=err)
        return 1
    return 0


@dataclass
class _Tool:
    args: argparse.Namespace
    out: TextIO
    err: TextIO

    def coordinator(self) -> AbstractAsyncContextManager[CoordinatorClient]:
        return open_coordinator(self.args, _CLIENT_ID)

    def kafka(self) -> KafkaTransactionsAdmin:
        bootstrap, security = kafka_cluster(self.args)
        if not bootstrap:
            raise AdminError(
                "this needs the Kafka cluster: give --kafka-bootstrap-servers or set "
                "COORDINATOR_KAFKA_BOOTSTRAP_SERVERS"
            )
        return KafkaTransactionsAdmin(
            bootstrap, security, timeout_ms=self.args.timeout_ms, client_id=_CLIENT_ID
        )

    def print(
        self, headers: Sequence[str], rows: Iterable[Sequence[object]], json_rows: Any
    ) -> None:
        if self.args.json:
            json.dump(json_rows, self.out, indent=2)
            self.out.write("\n")
            return
        # Kafka's ToolsUtils.prettyPrintTable: each column padded to its widest cell, then
        # a tab.
        cells = [[str(value) for value in row] for row in rows]
        widths = [len(header) for header in headers]
        for row in cells:
            widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
        for row in [list(headers), *cells]:
            line = "".join(
                cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True)
            )
            print(line.rstrip(), file=self.out)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _optional(value: int) -> str:
    """Kafka's tool prints an absent value (below 0 on the wire) as None."""
    return "None" if value < 0 else str(value)


# list


async def _list(tool: _Tool) -> None:
    args = tool.args
    request = ListTransactionsRequest(
        state_filters=list(args.state),
        producer_id_filters=list(args.producer_id),
        duration_filter=args.duration_filter,
        transactional_id_pattern=args.transactional_id_pattern,
    )
    async with tool.coordinator() as client:
        cluster = await client.describe_cluster()
        nodes = sorted(
            {broker.broker_id: Node(broker.broker_id, broker.host, broker.port)
             for broker in cluster.brokers}.items()
        )  # fmt: skip
        answers = await asyncio.gather(
            *(client.list_transactions(request, node=node) for _, node in nodes)
        )
    rows: list[tuple[str, int, int, str]] = []
    unknown: dict[str, None] = {}
    for (node_id, node), answer in zip(nodes, answers, strict=True):
        if answer.error_code != ErrorCode.NONE:
            name = ErrorCode(answer.error_code).name
            detail = f": {answer.error_message}" if answer.error_message else ""
            raise AdminError(f"Failed to list transactions of node {node}: {name}{detail}")
        unknown.update(dict.fromkeys(answer.unknown_state_filters))
        rows.extend(
            (state.transactional_id, node_id, state.producer_id, state.transaction_state)
            for state in answer.transaction_states
        )
    rows.sort(key=lambda row: (row[1], row[0]))
    if unknown:
        print(f"{_PROG}: unknown states: {', '.join(unknown)}", file=tool.err)
    tool.print(
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        rows,
        [
            {"transactional_id": t, "coordinator": c, "producer_id": p, "state": s}
            for t, c, p, s in rows
        ],
    )


# describe


def _partition_names(state: DescribeTransactionsResponseState) -> list[str]:
    return [
        f"{topic.topic}-{partition}" for topic in state.topics for partition in topic.partitions
    ]


async def _describe(tool: _Tool) -> None:
    transactional_id = tool.args.transactional_id
    refused: list[str] = []
    state: DescribeTransactionsResponseState
    async with tool.coordinator() as client:
        try:
            described = await client.describe_transactions(
                DescribeTransactionsV1Request(transactional_ids=[transactional_id])
            )
            (described_state,) = described.transaction_states
            refused = [
                f"{marker.topic}-{marker.partition_index}:{_code_name(marker.error_code)}"
                for marker in described_state.refused_markers
            ]
            state = described_state
        except ApiError as error:
            if error.code != ErrorCode.UNSUPPORTED_VERSION:
                raise
            # A server of the contract's first version: no refused markers to tell.
            response = await client.describe_transactions(
                DescribeTransactionsRequest(transactional_ids=[transactional_id])
            )
            (state,) = response.transaction_states
        coordinator = await client.find_coordinator(transactional_id, key_type=1)
    if state.error_code != ErrorCode.NONE:
        raise AdminError(
            f"Failed to describe transaction state of transactional-id `{transactional_id}`: "
            f"{ErrorCode(state.error_code).name}"
        )
    start_ms = state.transaction_start_time_ms
    duration_ms = _now_ms() - start_ms if start_ms >= 0 else -1
    partitions = _partition_names(state)
    tool.print(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"],
        [(coordinator.node_id, transactional_id, state.producer_id, state.producer_epoch,
          state.transaction_state, state.transaction_timeout_ms, _optional(start_ms),
          _optional(duration_ms), ",".join(partitions))],
        {
            "coordinator_id": coordinator.node_id,
            "transactional_id": transactional_id,
            "producer_id": state.producer_id,
            "producer_epoch": state.producer_epoch,
            "state": state.transaction_state,
            "transaction_timeout_ms": state.transaction_timeout_ms,
            "transaction_start_time_ms": start_ms if start_ms >= 0 else None,
            "transaction_duration_ms": duration_ms if duration_ms >= 0 else None,
            "topic_partitions": partitions,
            "refused_markers": [
                {"topic_partition": name, "error": error}
                for name, _, error in (entry.rpartition(":") for entry in refused)
            ],
        },
    )  # fmt: skip
    if refused and not tool.args.json:
        # Kafka's table as it is; what this coordinator adds comes after it.
        print(
            "The brokers refused these markers of the last completed transaction for good "
            f"(it was completed without them): {','.join(refused)}",
            file=tool.out,
        )


def _code_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


# describe-producers


def _producer_json(producer: ActiveProducer) -> dict[str, object]:
    return {
        "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch,
        "coordinator_epoch": producer.coordinator_epoch,
        "last_sequence": producer.last_sequence,
        "last_timestamp": producer.last_timestamp,
        "current_transaction_start_offset": (
            producer.current_txn_start_offset if producer.in_transaction else None
        ),
    }


async def _describe_producers(tool: _Tool) -> None:
    args = tool.args
    tp = TopicPartition(args.topic, args.partition)
    async with tool.kafka() as kafka:
        states = await kafka.describe_producers([tp], broker_id=args.broker_id)
    producers = states[tp].producers
    tool.print(
        ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
         "LastTimestamp", "CurrentTransactionStartOffset"],
        [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
          p.last_timestamp, _optional(p.current_txn_start_offset)) for p in producers],
        [_producer_json(p) for p in producers],
    )  # fmt: skip


# find-hanging


@dataclass(frozen=True, slots=True)
class _OpenTransaction:
    partition: TopicPartition
    producer: ActiveProducer


async def _find_hanging(tool: _Tool) -> None:
    args = tool.args
    if args.topic is None and args.broker_id is None:
        raise AdminError(
            "The `find-hanging` command requires either --topic or --broker-id to limit the "
            "scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise AdminError("The --partition argument requires --topic to be provided")
    max_timeout_ms = args.max_transaction_timeout * _MS_PER_MINUTE
    async with tool.kafka() as kafka:
        partitions = await _partitions_to_search(kafka, args)
        candidates: list[_OpenTransaction] = []
        for start in range(0, len(partitions), _MAX_BATCH_SIZE):
            batch = partitions[start : start + _MAX_BATCH_SIZE]
            states = await kafka.describe_producers(batch, broker_id=args.broker_id)
            now_ms = _now_ms()
            candidates.extend(
                _OpenTransaction(tp, producer)
                for tp in batch
                for producer in states[tp].producers
                if producer.in_transaction and now_ms - producer.last_timestamp > max_timeout_ms
            )
    hanging: list[_OpenTransaction] = []
    if candidates:
        async with tool.coordinator() as client:
            hanging = await _hanging(client, candidates)
    now_ms = _now_ms()
    tool.print(
        ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
         "LastTimestamp", "Duration(min)"],
        [(t.partition.topic, t.partition.partition, t.producer.producer_id,
          t.producer.producer_epoch, t.producer.coordinator_epoch,
          t.producer.current_txn_start_offset, t.producer.last_timestamp,
          (now_ms - t.producer.last_timestamp) // _MS_PER_MINUTE) for t in hanging],
        [
            {"topic": t.partition.topic, "partition": t.partition.partition,
             **_producer_json(t.producer),
             "duration_ms": now_ms - t.producer.last_timestamp}
            for t in hanging
        ],
    )  # fmt: skip


async def _partitions_to_search(
    kafka: KafkaTransactionsAdmin, args: argparse.Namespace
) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    placements = await kafka.partitions(None if args.topic is None else [args.topic])
    return sorted(
        tp
        for tp, placement in placements.items()
        if args.broker_id is None or args.broker_id in placement.replicas
    )


async def _hanging(
    client: CoordinatorClient, candidates: list[_OpenTransaction]
) -> list[_OpenTransaction]:
    """Kafka's filterHangingTransactions: an open transaction is hanging unless its producer
    id belongs to a transactional id whose transaction, as its coordinator describes it,
    still includes the partition (Ongoing, or being completed with the partition's marker
    not yet written): then the coordinator will write the marker."""
    producer_ids = sorted({c.producer.producer_id for c in candidates})
    listed = await client.list_transactions(
        ListTransactionsRequest(producer_id_filters=producer_ids)
    )
    if listed.error_code != ErrorCode.NONE:
        raise AdminError(
            f"Failed to list transactions for {len(producer_ids)} producers: "
            f"{ErrorCode(listed.error_code).name}"
        )
    transactional_ids = {
        state.producer_id: state.transactional_id
        for state in listed.transaction_states
        if state.producer_id in producer_ids
    }
    partitions_of: dict[str, set[str]] = {}
    if transactional_ids:
        described = await client.describe_transactions(
            DescribeTransactionsRequest(transactional_ids=sorted(set(transactional_ids.values())))
        )
        for state in described.transaction_states:
            if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                continue
            if state.error_code != ErrorCode.NONE:
                raise AdminError(
                    f"Failed to describe transactional-id `{state.transactional_id}`: "
                    f"{ErrorCode(state.error_code).name}"
                )
            partitions_of[state.transactional_id] = set(_partition_names(state))
    hanging = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        included = partitions_of.get(transactional_id, set()) if transactional_id else set()
        if f"{candidate.partition.topic}-{candidate.partition.partition}" not in included:
            hanging.append(candidate)
    return hanging


# abort


async def _abort(tool: _Tool) -> None:
    args = tool.args
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise AdminError(
            "The transaction to abort must be identified either with --start-offset or with "
            "--producer-id, --producer-epoch, and --coordinator-epoch"
        )
    async with tool.kafka() as kafka:
        if args.start_offset is None:
            if args.producer_epoch is None:
                raise AdminError("Missing required argument --producer-epoch")
            if args.coordinator_epoch is None:
                raise AdminError("Missing required argument --coordinator-epoch")
            producer_id, producer_epoch = args.producer_id, args.producer_epoch
            coordinator_epoch = args.coordinator_epoch
        else:
            producer = await _open_at(kafka, tp, args.start_offset)
            producer_id, producer_epoch = producer.producer_id, producer.producer_epoch
            coordinator_epoch = producer.coordinator_epoch
        # A producer that never got a marker on the partition shows coordinator epoch -1;
        # Kafka's tool then sends 0, which no coordinator epoch is below.
        coordinator_epoch = max(coordinator_epoch, 0)
        await kafka.abort(tp, producer_id, producer_epoch, coordinator_epoch)
    done = {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "coordinator_epoch": coordinator_epoch,
    }
    if args.json:
        tool.print([], [], done)
    else:
        print(
            f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
            f"{tp.topic}-{tp.partition}.",
            file=tool.out,
        )


async def _open_at(
    kafka: KafkaTransactionsAdmin, tp: TopicPartition, start_offset: int
) -> ActiveProducer:
    states = await kafka.describe_producers([tp])
    for producer in states[tp].producers:
        if producer.current_txn_start_offset == start_offset:
            return producer
    raise AdminError(
        f"Could not find any open transactions starting at offset {start_offset} on "
        f"partition {tp.topic}-{tp.partition}"
    )


# force-terminate


async def _force_terminate(tool: _Tool) -> None:
    transactional_id = tool.args.transactional_id
    async with tool.coordinator() as client:
        described = await client.describe_transactions(
            DescribeTransactionsRequest(transactional_ids=[transactional_id])
        )
        (state,) = described.transaction_states
        if state.error_code != ErrorCode.NONE:
            # Checked first: an InitProducerId for an id nobody uses would create it.
            raise AdminError(
                f"Failed to force-terminate transactional-id `{transactional_id}`: "
                f"{ErrorCode(state.error_code).name}"
            )
        # A producer starting anew (no producer id or epoch of its own): the coordinator
        # aborts what the id has open and answers with the next epoch, which fences the old
        # producer (CONCURRENT_TRANSACTIONS while the abort completes is retried).
        fenced = await client.init_producer_id(
            InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=state.transaction_timeout_ms,
            )
        )
    done = {
        "transactional_id": transactional_id,
        "previous_state": state.transaction_state,
        "producer_id": fenced.producer_id,
        "producer_epoch": fenced.producer_epoch,
    }
    if tool.args.json:
        tool.print([], [], done)
        return
    print(
        f"Terminated the transaction of transactional-id `{transactional_id}` (it was "
        f"{state.transaction_state}): producer {fenced.producer_id} is now at epoch "
        f"{fenced.producer_epoch}, and the previous one is fenced.",
        file=tool.out,
    )


_COMMANDS: Final[dict[str, Callable[[_Tool], Coroutine[Any, Any, None]]]] = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "find-hanging": _find_hanging,
    "abort": _abort,
    "force-terminate": _force_terminate,
}
