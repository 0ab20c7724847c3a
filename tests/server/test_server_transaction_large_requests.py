"""The transaction APIs do bounded work, in process over real sockets on the in-memory log
(no Kafka cluster: no partition is checked against a cluster's metadata).

AddPartitionsToTxn refuses what the request alone decides (more distinct partitions than a
transaction may hold, an answer larger than `max_response_bytes`) before any work on the
state, and adds a large but allowed set of partitions in slices. DescribeTransactions reads a
repeated id once and answers an id whose description does not fit MESSAGE_TOO_LARGE.
ListTransactions version 1 pages through every transactional id in one order, and version 0
says MESSAGE_TOO_LARGE (and where the pages are) when the whole list does not fit; the
`transactions list` command pages through every node. The same against the server process
on Apache Kafka, with other clients served meanwhile:
tests/transactions/test_transactions_large_requests.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from wire_client import WireClient

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol import messages
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.transactions import ListTransactionsRequest
from coordinator_server.app import CoordinatorApp
from coordinator_server.cli import main
from coordinator_server.config import CoordinatorConfig
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.records import TransactionValue, new_transaction_record
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.service import slicing
from coordinator_server.service.transaction_service import TransactionCoordinatorService
from coordinator_server.shard import LogPartitionShard
from coordinator_server.storage.memory import InMemoryLog

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 4
LOG_TOPIC = "__coordinator_offsets"
PRODUCER_IDS = 10**12


@asynccontextmanager
async def served(**settings: Any) -> AsyncIterator[CoordinatorApp]:
    """A node that coordinates transactions, wired as `app.py` wires it minus the Kafka
    cluster, with `settings`."""
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        offsets_topic_partitions=PARTITIONS,
        transaction_producer_id_start=PRODUCER_IDS,
        **settings,
    )
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS, auto_commit=True))
    await app.start()
    assert app.runtime is not None and app.service is not None
    completions = TxnMarkerChannel(app.runtime, None, coordinator_epoch=lambda _: 0)
    service = TransactionCoordinatorService(
        app.runtime,
        app.service.routing,
        limits=app.service.limits,
        sliced=app.service.sliced,
        log_topic=LOG_TOPIC,
        completions=completions,
        max_id_length=config.max_id_length,
        max_partitions_per_transaction=config.max_partitions_per_transaction,
    )
    app.dispatch.serve_transactions(service)
    completions.start()
    try:
        yield app
    finally:
        await completions.stop()
        await app.shutdown()


async def client_of(app: CoordinatorApp) -> WireClient:
    assert app.address is not None
    return await WireClient.connect(*app.address)


async def producer(client: WireClient, transactional_id: str) -> dict[str, Any]:
    answer = await client.call(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": transactional_id, "transaction_timeout_ms": 60_000},
    )
    assert answer["error_code"] == ErrorCode.NONE, answer
    return {
        "transactional_id": transactional_id,
        "producer_id": answer["producer_id"],
        "producer_epoch": answer["producer_epoch"],
    }


def topics_of(partitions: dict[str, list[int]]) -> list[dict[str, Any]]:
    return [{"name": name, "partitions": indexes} for name, indexes in partitions.items()]


def partition_codes(answer: dict[str, Any]) -> set[int]:
    return {
        partition["partition_error_code"]
        for topic in answer["results_by_topic"]
        for partition in topic["results_by_partition"]
    }


async def described(client: WireClient, transactional_id: str) -> dict[str, Any]:
    answer = await client.call(
        ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]}
    )
    (state,) = answer["transaction_states"]
    return state  # type: ignore[no-any-return]


class Slices:
    """How long each slice of the sliced answers took (every answer but those over within
    their first slice)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seconds: list[float] = []
        advance = slicing.advance

        def timed(generator: slicing.Steps) -> Any:
            started = time.perf_counter()
            try:
                return advance(generator)
            finally:
                self.seconds.append(time.perf_counter() - started)

        monkeypatch.setattr(slicing, "advance", timed)


def count_reads(monkeypatch: pytest.MonkeyPatch, app: CoordinatorApp, name: str) -> list[int]:
    """A list that grows by one for each read operation `name` on `app`'s runtime."""
    assert app.runtime is not None
    runtime = app.runtime
    reads: list[int] = []
    schedule_read = runtime.schedule_read

    def counted(read_name: str, partition: int, op: Callable[..., Any]) -> Any:
        if read_name == name:
            reads.append(partition)
        return schedule_read(read_name, partition, op)

    monkeypatch.setattr(runtime, "schedule_read", counted)
    return reads


# AddPartitionsToTxn.


async def test_more_partitions_than_a_transaction_holds_are_refused_before_any_work() -> None:
    # Before: the request reached the shard, which answered POLICY_VIOLATION for each
    # partition only after joining every partition to the transaction's; now the request's
    # distinct partitions are counted first (repeats once), and the error is at the top too.
    async with served(max_partitions_per_transaction=1000) as app:
        client = await client_of(app)
        try:
            body = await producer(client, "txn-policy")
            over = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {**body, "topics": topics_of({"t": list(range(1001)), "u": [0, 0]})},
            )
            assert over["error_code"] == ErrorCode.POLICY_VIOLATION
            assert "max_partitions_per_transaction" in over["error_message"]
            assert partition_codes(over) == {ErrorCode.POLICY_VIOLATION}
            assert sum(len(t["results_by_partition"]) for t in over["results_by_topic"]) == 1003
            assert (await described(client, "txn-policy"))["transaction_state"] == "Empty"
            # A thousand distinct partitions, each named three times, are allowed.
            allowed = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {**body, "topics": topics_of({"t": list(range(1000)) * 3})},
            )
            assert (allowed["error_code"], partition_codes(allowed)) == (0, {ErrorCode.NONE})
            state = await described(client, "txn-policy")
            assert state["transaction_state"] == "Ongoing"
            assert state["topics"] == [{"topic": "t", "partitions": list(range(1000))}]
        finally:
            await client.close()


async def test_an_answer_too_large_is_refused_and_nothing_is_added() -> None:
    # Before: the partitions were added to the transaction, then the answer (larger than
    # max_response_bytes) was replaced by MESSAGE_TOO_LARGE: the producer was told its
    # request failed while the transaction held them.
    async with served(max_response_bytes=64 * 1024) as app:
        client = await client_of(app)
        try:
            body = await producer(client, "txn-large")
            refused = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {**body, "topics": topics_of({"t": list(range(2000))})},
            )
            assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
            assert refused["results_by_topic"] == []
            state = await described(client, "txn-large")
            assert (state["transaction_state"], state["topics"]) == ("Empty", [])
            # Over the limit and too large to answer each partition: the error at the top.
            many = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {**body, "topics": topics_of({"t": list(range(200_000))})},
            )
            assert (many["error_code"], many["results_by_topic"]) == (
                ErrorCode.POLICY_VIOLATION,
                [],
            )
        finally:
            await client.close()


async def test_a_hundred_thousand_partitions_are_added_in_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the request ran in one go (the partitions joined one by one as Python tuples,
    # the answer built at once), 0.15 to 0.35 s during which nobody else was served; now it
    # runs in slices, the write joining sets made beforehand.
    slices = Slices(monkeypatch)
    async with served(max_response_bytes=16 * 1024 * 1024) as app:
        client = await client_of(app)
        try:
            body = await producer(client, "txn-wide")
            partitions = {f"topic-{t}": list(range(100)) for t in range(1000)}
            added = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN, {**body, "topics": topics_of(partitions)}, timeout=60
            )
            assert (added["error_code"], partition_codes(added)) == (0, {ErrorCode.NONE})
            assert [t["name"] for t in added["results_by_topic"]] == list(partitions)
            # Split up (how many slices depends on the machine's speed), none of them long.
            assert len(slices.seconds) > 1, slices.seconds
            # The slices are short, the write among them (a loaded machine gets room).
            assert max(slices.seconds) < 0.2, sorted(slices.seconds)[-5:]
            state = await described(client, "txn-wide")
            assert sum(len(t["partitions"]) for t in state["topics"]) == 100_000
            again = await client.call(
                ApiKey.ADD_PARTITIONS_TO_TXN, {**body, "topics": topics_of(partitions)}, timeout=60
            )
            assert partition_codes(again) == {ErrorCode.NONE}
            ended = await client.call(ApiKey.END_TXN, {**body, "committed": False}, timeout=30)
            assert ended["error_code"] == ErrorCode.NONE
        finally:
            await client.close()


# DescribeTransactions.


async def test_describe_reads_a_repeated_id_once_and_sizes_each_description(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: one read per id named, and an answer larger than max_response_bytes replaced
    # as a whole by MESSAGE_TOO_LARGE; now one read per part of a partition's ids, and only
    # the description that does not fit is answered MESSAGE_TOO_LARGE.
    async with served(max_response_bytes=4096) as app:
        client = await client_of(app)
        try:
            wide = await producer(client, "txn-wide")
            # A thousand partitions, fifty a request: each answer fits.
            for start in range(0, 1000, 50):
                added = await client.call(
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    {**wide, "topics": topics_of({"t": list(range(start, start + 50))})},
                )
                assert partition_codes(added) == {ErrorCode.NONE}
            await producer(client, "txn-small")
            reads = count_reads(monkeypatch, app, "describe-transactions")
            answer = await client.call(
                ApiKey.DESCRIBE_TRANSACTIONS,
                {"transactional_ids": ["txn-wide", "txn-small", "txn-none", ""]},
            )
            wide_state, small, unknown, empty = answer["transaction_states"]
            assert (wide_state["transactional_id"], wide_state["error_code"]) == (
                "txn-wide",
                ErrorCode.MESSAGE_TOO_LARGE,
            )
            assert (small["error_code"], small["transaction_state"]) == (0, "Empty")
            assert unknown["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            assert empty["error_code"] == ErrorCode.INVALID_REQUEST
            reads.clear()
            repeated = await client.call(
                ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["txn-small"] * 20}
            )
            assert [s["error_code"] for s in repeated["transaction_states"]] == [0] * 20
            assert len(reads) == 1
            # What the ids cost at least does not fit: the contract's error body, at once.
            refused = await client.call(
                ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["txn-small"] * 100}
            )
            assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
            assert "transaction_states" not in refused
        finally:
            await client.close()


# ListTransactions.


async def seed_transactional_ids(
    app: CoordinatorApp, count: int, prefix: str = "tid-"
) -> list[str]:
    """`count` transactional ids (Empty), written to the log as InitProducerId writes them,
    thousands a write."""
    assert app.runtime is not None
    runtime = app.runtime
    by_partition: dict[int, list[tuple[int, str]]] = {}
    ids = [f"{prefix}{index}" for index in range(count)]
    for index, transactional_id in enumerate(ids):
        by_partition.setdefault(partition_for(transactional_id, PARTITIONS), []).append(
            (PRODUCER_IDS + index, transactional_id)
        )
    for partition, partition_ids in by_partition.items():
        for start in range(0, len(partition_ids), 5000):
            chunk = partition_ids[start : start + 5000]

            def write(
                shard: LogPartitionShard, chunk: list[tuple[int, str]] = chunk
            ) -> CoordinatorResult[None]:
                return CoordinatorResult(
                    [
                        new_transaction_record(
                            tid,
                            TransactionValue(producer_id, -1, -1, 0, -1, 60_000, 0, (), (), -1, 0),
                        )
                        for producer_id, tid in chunk
                    ]
                )

            outcome = runtime.write("seed", partition, write)
            assert outcome.error is None
            if outcome.future is not None:
                await outcome.future
    return ids


async def pages(client: WireClient, **body: Any) -> list[list[str]]:
    """The transactional ids of every page of ListTransactions version 1 from `cursor`."""
    listed: list[list[str]] = []
    cursor = body.pop("cursor", None)
    while True:
        page = await client.call(
            ApiKey.LIST_TRANSACTIONS, {**body, "cursor": cursor}, api_version=1, timeout=60
        )
        assert page["error_code"] == ErrorCode.NONE, page
        listed.append([state["transactional_id"] for state in page["transaction_states"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return listed
        assert listed[-1], "a page lists at least one transaction"


def in_order(ids: list[str]) -> list[str]:
    return sorted(ids, key=lambda tid: (partition_for(tid, PARTITIONS), tid))


async def test_list_transactions_in_pages_every_id_once_in_order() -> None:
    # Before: version 1 was UNSUPPORTED_VERSION and version 0 failed as a whole past
    # max_response_bytes (the connection's MESSAGE_TOO_LARGE, which said nothing of pages).
    async with served(max_response_bytes=4096) as app:
        ids = await seed_transactional_ids(app, 1000)
        client = await client_of(app)
        try:
            whole = await client.call(ApiKey.LIST_TRANSACTIONS, {})
            assert whole["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
            assert "version 1" in whole["error_message"]
            assert whole["transaction_states"] == []

            listed = await pages(client)
            assert len(listed) > 10
            flat = [tid for page in listed for tid in page]
            assert flat == in_order(ids)
            # From a cursor: the rest, an id no longer held or never held included.
            middle = flat[len(flat) // 2]
            assert [tid for page in await pages(client, cursor=middle) for tid in page] == (
                flat[len(flat) // 2 :]
            )
            missing = middle + "-gone"
            rest = [tid for page in await pages(client, cursor=missing) for tid in page]
            assert rest == flat[len(flat) // 2 + 1 :]
            # The filters apply across the pages; an unknown state is named back.
            filtered = await pages(
                client, transactional_id_pattern="tid-1.*", state_filters=["Empty", "Nope"]
            )
            assert [tid for page in filtered for tid in page] == [
                tid for tid in flat if tid.startswith("tid-1")
            ]
            odd = await client.call(
                ApiKey.LIST_TRANSACTIONS, {"state_filters": ["Nope"]}, api_version=1
            )
            assert (odd["unknown_state_filters"], odd["transaction_states"]) == (["Nope"], [])
            assert odd["next_cursor"] is None
            # A list that fits is whole in version 0 as in version 1.
            few = await client.call(
                ApiKey.LIST_TRANSACTIONS, {"transactional_id_pattern": "tid-7."}
            )
            assert sorted(s["transactional_id"] for s in few["transaction_states"]) == sorted(
                tid for tid in ids if len(tid) == 6 and tid.startswith("tid-7")
            )
        finally:
            await client.close()


async def test_the_client_reads_every_page_and_asks_a_server_without_pages_version_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with served(max_response_bytes=4096) as app:
        ids = await seed_transactional_ids(app, 300)
        assert app.address is not None
        client = CoordinatorClient("{}:{}".format(*app.address))
        try:
            listed = await client.list_transactions()
            assert listed.error_code == ErrorCode.NONE
            assert sorted(s.transactional_id for s in listed.transaction_states) == sorted(ids)
            # A server of the contract's first version answers version 1
            # UNSUPPORTED_VERSION: asked version 0, it answers a list that fits.
            decoders = dict(messages._REQUEST_DECODERS)
            del decoders[(ApiKey.LIST_TRANSACTIONS, 1)]
            monkeypatch.setattr(messages, "_REQUEST_DECODERS", decoders)
            wire = await client_of(app)
            unsupported = await wire.call(ApiKey.LIST_TRANSACTIONS, {}, api_version=1)
            await wire.close()
            assert unsupported["error_code"] == ErrorCode.UNSUPPORTED_VERSION
            few = await client.list_transactions(
                ListTransactionsRequest(transactional_id_pattern="tid-1.")
            )
            assert sorted(s.transactional_id for s in few.transaction_states) == [
                f"tid-1{digit}" for digit in range(10)
            ]
            too_many = await client.list_transactions()
            assert too_many.error_code == ErrorCode.MESSAGE_TOO_LARGE
        finally:
            await client.close()


async def run_list_command(app: CoordinatorApp, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`coordinator-server transactions list` (in a thread: it runs its own event loop):
    its rows."""
    assert app.address is not None
    host, port = app.address
    capsys.readouterr()
    code = await asyncio.to_thread(
        main, ["transactions", "list", "--bootstrap-server", f"{host}:{port}"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    return rows


async def test_the_list_command_pages_through_more_ids_than_an_answer_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with served(max_response_bytes=4096) as app:
        ids = await seed_transactional_ids(app, 1000)
        rows = await run_list_command(app, capsys)
    assert sorted(row.split()[0] for row in rows) == sorted(ids)
    assert {row.split()[3] for row in rows} == {"Empty"}


@pytest.mark.slow
async def test_the_list_command_lists_more_ids_than_the_default_answer_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Past about 110,000 transactional ids the whole list no longer fits the default
    # max_response_bytes (8 MiB): the command failed.
    async with served() as app:
        ids = await seed_transactional_ids(app, 150_000)
        rows = await run_list_command(app, capsys)
    listed = [row.split()[0] for row in rows]
    assert len(listed) == len(set(listed)) == len(ids)
    assert set(listed) == set(ids)
