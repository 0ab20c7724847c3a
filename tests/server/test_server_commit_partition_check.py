"""`--offset-commit-check-partitions`: OffsetCommit and TxnOffsetCommit held against the data
cluster's partitions as Kafka's KafkaApis holds them against its metadata cache.

On Apache Kafka, through the real server process: a topic the cluster does not have and a
partition past a topic's count are answered UNKNOWN_TOPIC_OR_PARTITION and not committed, the
rest is (OffsetFetch shows it); with the check off every offset is taken, as by default; a
topic created, or a topic grown, after a first refusal is taken at a later commit. Then the
check itself, in front of a stand-in coordinator and catalog: the answer's shape (Kafka's
response builder), a request with nothing left, metadata that cannot be read, and which
commits wait for which."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    Message,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from coordinator_server.commit_partition_check import CommitPartitionCheck
from coordinator_server.markers.leaders import LeaderLookupError
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.replies import Handler, PendingReply

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
NONE = ErrorCode.NONE

Codes = dict[tuple[str, int], int]


# On Apache Kafka, through the server process.


def server_args(broker: ApacheKafkaBroker, log_topic: str, check: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--transactions", "on",
        "--offset-commit-check-partitions", check,
        *broker.coordinator_args,
    ]  # fmt: skip


@contextlib.contextmanager
def coordinator(broker: ApacheKafkaBroker, check: str) -> Iterator[ServerProcess]:
    log_topic = f"__check_log_{uuid.uuid4().hex[:8]}"
    with ServerProcess(server_args(broker, log_topic, check)) as server:
        yield server


@pytest.fixture
def names() -> tuple[str, str, str]:
    """A topic, a group and a transactional id of the test's own."""
    suffix = uuid.uuid4().hex[:8]
    return f"check-{suffix}", f"group-{suffix}", f"txn-{suffix}"


async def create_topic(broker: ApacheKafkaBroker, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def grow_topic(broker: ApacheKafkaBroker, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({name: NewPartitions(partitions)})
    finally:
        await admin.close()


async def topic_exists(broker: ApacheKafkaBroker, name: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        return name in await admin.list_topics()
    finally:
        await admin.close()


def answered(response: OffsetCommitResponse | TxnOffsetCommitResponse) -> Codes:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
    }


async def commit(
    client: CoordinatorClient, group: str, offsets: dict[tuple[str, int], int]
) -> Codes:
    """A simple OffsetCommit (no generation) of `offsets`."""
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    response = await client.offset_commit(
        OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitRequestTopic(name=name, partitions=partitions)
                for name, partitions in by_topic.items()
            ],
        )
    )
    return answered(response)


async def committed(client: CoordinatorClient, group: str) -> dict[tuple[str, int], int]:
    """Every offset the group has committed (OffsetFetch of all its topics, stable)."""
    response = await client.offset_fetch(
        OffsetFetchRequest(
            groups=[OffsetFetchRequestGroup(group_id=group, topics=None)], require_stable=True
        )
    )
    (answer,) = response.groups
    assert answer.error_code == NONE, answer
    return {
        (topic.name, p.partition_index): p.committed_offset
        for topic in answer.topics
        for p in topic.partitions
    }


async def txn_commit(
    client: CoordinatorClient,
    transactional_id: str,
    group: str,
    offsets: dict[tuple[str, int], int],
) -> Codes:
    """A transaction that commits only `offsets` for `group`: the TxnOffsetCommit's answer;
    the transaction is committed after it."""
    init = await client.init_producer_id(
        InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=30_000)
    )
    ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    added = await client.add_offsets_to_txn(
        AddOffsetsToTxnRequest(transactional_id=transactional_id, group_id=group, **ids)
    )
    assert added.error_code == NONE, added
    by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    response = await client.txn_offset_commit(
        TxnOffsetCommitRequest(
            transactional_id=transactional_id,
            group_id=group,
            topics=[
                TxnOffsetCommitRequestTopic(name=name, partitions=partitions)
                for name, partitions in by_topic.items()
            ],
            **ids,
        )
    )
    ended = await client.end_txn(
        EndTxnRequest(transactional_id=transactional_id, committed=True, **ids)
    )
    assert ended.error_code == NONE, ended
    return answered(response)


async def eventually_committed(
    client: CoordinatorClient, group: str, expected: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The group's committed offsets once they are `expected` (a transaction's offsets are
    committed when its markers land, after EndTxn's answer), or the last read after 10 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        offsets = await committed(client, group)
        if offsets == expected or loop.time() > deadline:
            return offsets
        await asyncio.sleep(0.05)


async def test_offset_commit_refuses_what_the_cluster_lacks_and_commits_the_rest(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    topic, group, _ = names
    missing = f"{topic}-missing"
    await create_topic(kafka_broker, topic, partitions=2)
    with coordinator(kafka_broker, "on") as server:
        async with CoordinatorClient(f"{server.host}:{server.port}") as client:
            codes = await commit(
                client, group, {(topic, 0): 10, (topic, 2): 12, (missing, 0): 5, (topic, 1): 11}
            )
            assert codes == {
                (topic, 0): NONE,
                (topic, 1): NONE,
                (topic, 2): UNKNOWN,
                (missing, 0): UNKNOWN,
            }
            assert await committed(client, group) == {(topic, 0): 10, (topic, 1): 11}
            # A request of nothing the cluster has commits nothing.
            assert await commit(client, group, {(missing, 1): 7, (topic, 9): 7}) == {
                (missing, 1): UNKNOWN,
                (topic, 9): UNKNOWN,
            }
            assert await committed(client, group) == {(topic, 0): 10, (topic, 1): 11}
    # The check never created the topic it asked about.
    assert not await topic_exists(kafka_broker, missing)


async def test_txn_offset_commit_refuses_what_the_cluster_lacks_and_commits_the_rest(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    topic, group, transactional_id = names
    missing = f"{topic}-missing"
    await create_topic(kafka_broker, topic, partitions=2)
    with coordinator(kafka_broker, "on") as server:
        async with CoordinatorClient(f"{server.host}:{server.port}") as client:
            codes = await txn_commit(
                client,
                transactional_id,
                group,
                {(topic, 0): 20, (missing, 0): 5, (topic, 1): 21, (topic, 3): 23},
            )
            assert codes == {
                (topic, 0): NONE,
                (topic, 1): NONE,
                (topic, 3): UNKNOWN,
                (missing, 0): UNKNOWN,
            }
            expected = {(topic, 0): 20, (topic, 1): 21}
            assert await eventually_committed(client, group, expected) == expected


async def test_with_the_check_off_every_offset_is_committed_as_by_default(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    topic, group, transactional_id = names
    missing = f"{topic}-missing"
    await create_topic(kafka_broker, topic, partitions=2)
    with coordinator(kafka_broker, "off") as server:
        async with CoordinatorClient(f"{server.host}:{server.port}") as client:
            offsets = {(topic, 0): 10, (topic, 2): 12, (missing, 0): 5}
            assert await commit(client, group, offsets) == dict.fromkeys(offsets, NONE)
            assert await committed(client, group) == offsets
            txn_group = f"{group}-txn"
            assert await txn_commit(client, transactional_id, txn_group, offsets) == (
                dict.fromkeys(offsets, NONE)
            )
            assert await eventually_committed(client, txn_group, offsets) == offsets
    assert not await topic_exists(kafka_broker, missing)


async def test_a_topic_created_or_grown_after_a_refusal_is_taken_at_a_later_commit(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    """As a Kafka client refreshes its metadata after UNKNOWN_TOPIC_OR_PARTITION and sends
    the commit again: the check asks the cluster again about what it refused."""
    topic, group, _ = names
    loop = asyncio.get_running_loop()

    async def taken_soon(offsets: dict[tuple[str, int], int]) -> Codes:
        deadline = loop.time() + 10
        while True:
            codes = await commit(client, group, offsets)
            if set(codes.values()) == {NONE} or loop.time() > deadline:
                return codes
            await asyncio.sleep(0.1)

    with coordinator(kafka_broker, "on") as server:
        async with CoordinatorClient(f"{server.host}:{server.port}") as client:
            assert await commit(client, group, {(topic, 0): 1}) == {(topic, 0): UNKNOWN}
            await create_topic(kafka_broker, topic, partitions=1)
            assert await taken_soon({(topic, 0): 2}) == {(topic, 0): NONE}
            # The topic is known now, with one partition: its second is refused...
            assert await commit(client, group, {(topic, 1): 3}) == {(topic, 1): UNKNOWN}
            await grow_topic(kafka_broker, topic, partitions=2)
            # ... until the topic has it, within the metadata's age.
            assert await taken_soon({(topic, 1): 4}) == {(topic, 1): NONE}
            assert await committed(client, group) == {(topic, 0): 2, (topic, 1): 4}


# The check in front of a stand-in coordinator, against a stand-in catalog.


class Catalog:
    """The data cluster's partitions (`partitions`: each topic's count; None: its metadata
    cannot be read), of which the topics in `cached` are known without asking. `gate`, when
    set, holds every question until it opens."""

    def __init__(self, partitions: dict[str, int] | None, cached: Sequence[str] = ()) -> None:
        self.partitions = partitions
        self.cached = set(cached)
        self.asked: list[list[str]] = []
        self.gate: asyncio.Event | None = None

    def _unknown(self, topics: Sequence[tuple[str, Sequence[int]]]) -> set[tuple[str, int]]:
        counts = self.partitions or {}
        return {(t, p) for t, partitions in topics for p in partitions if p >= counts.get(t, 0)}

    def unknown_partitions_now(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]] | None:
        if any(topic not in self.cached for topic, _ in topics):
            return None
        return self._unknown(topics)

    async def unknown_partitions(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]]:
        self.asked.append([topic for topic, _ in topics])
        if self.gate is not None:
            await self.gate.wait()
        if self.partitions is None:
            raise LeaderLookupError("no broker answered")
        return self._unknown(topics)


class Coordinator:
    """A stand-in for the coordinator's handlers: NONE for every partition it is given, at
    once or (`later`) once `answer_all` is called; records what it was given."""

    def __init__(self, later: bool = False) -> None:
        self.later = later
        self.requests: list[Any] = []
        self._pending: list[tuple[asyncio.Future[Message], Message]] = []

    def handle(self, request: Any, ctx: RequestContext) -> Message | PendingReply:
        self.requests.append(request)
        response_type = (
            OffsetCommitResponse
            if isinstance(request, OffsetCommitRequest)
            else TxnOffsetCommitResponse
        )
        answer = response_type(
            topics=[
                response_topic(request, topic.name, [p.partition_index for p in topic.partitions])
                for topic in request.topics
            ]
        )
        if not self.later:
            return answer
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending.append((future, answer))
        return PendingReply(future)

    def answer_all(self) -> None:
        for future, answer in self._pending:
            future.set_result(answer)
        self._pending.clear()


def response_topic(request: Any, name: str, partitions: list[int], code: int = NONE) -> Any:
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResponseTopic(
            name=name,
            partitions=[
                OffsetCommitResponsePartition(partition_index=p, error_code=code)
                for p in partitions
            ],
        )
    return TxnOffsetCommitResponseTopic(
        name=name,
        partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p, error_code=code) for p in partitions
        ],
    )


CTX = RequestContext("test", "/127.0.0.1")


def offset_commit(group: str, *topics: tuple[str, list[int]]) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitRequestTopic(
                name=name,
                partitions=[
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=100 + p)
                    for p in partitions
                ],
            )
            for name, partitions in topics
        ],
    )


def txn_offset_commit(group: str, *topics: tuple[str, list[int]]) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        transactional_id="txn",
        group_id=group,
        producer_id=1,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic(
                name=name,
                partitions=[
                    TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=100 + p)
                    for p in partitions
                ],
            )
            for name, partitions in topics
        ],
    )


class Table(dict[int, Handler]):
    """A dispatch table of its own (the server's is `RequestDispatch`)."""

    def guard(self, api_key: ApiKey, wrap: Callable[[Handler], Handler]) -> bool:
        if api_key not in self:
            return False
        self[api_key] = wrap(self[api_key])
        return True


def guarded(catalog: Catalog, coordinator: Coordinator) -> Table:
    handlers = Table(
        {ApiKey.OFFSET_COMMIT: coordinator.handle, ApiKey.TXN_OFFSET_COMMIT: coordinator.handle}
    )
    CommitPartitionCheck(catalog).guard(handlers)
    return handlers


async def reply_of(reply: Message | PendingReply) -> Message:
    return reply if isinstance(reply, Message) else await reply.future


def rows(response: Any) -> list[tuple[str, list[tuple[int, int]]]]:
    return [
        (topic.name, [(p.partition_index, p.error_code) for p in topic.partitions])
        for topic in response.topics
    ]


def sent(request: Any) -> list[tuple[str, list[int]]]:
    return [(topic.name, [p.partition_index for p in topic.partitions]) for topic in request.topics]


@pytest.mark.parametrize(
    ("api", "make"),
    [(ApiKey.OFFSET_COMMIT, offset_commit), (ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit)],
)
async def test_a_cached_check_answers_at_once_in_the_shape_of_kafkas_response(
    api: ApiKey, make: Any
) -> None:
    """Kafka's response builder: the refused partitions first, by topic; the coordinator's
    answers appended to the refused topic of the same name, or after them."""
    catalog = Catalog({"a": 2, "b": 1}, cached=["a", "b", "gone"])
    coordinator = Coordinator()
    handlers = guarded(catalog, coordinator)
    reply = handlers[api](make("g", ("b", [0]), ("a", [0, 5, 1]), ("gone", [0, 1])), CTX)
    assert isinstance(reply, Message), "a check the cache answers does not wait"
    assert catalog.asked == []
    (request,) = coordinator.requests
    assert sent(request) == [("b", [0]), ("a", [0, 1])]
    assert [p.committed_offset for p in request.topics[1].partitions] == [100, 101]
    assert rows(reply) == [
        ("a", [(5, UNKNOWN), (0, NONE), (1, NONE)]),
        ("gone", [(0, UNKNOWN), (1, UNKNOWN)]),
        ("b", [(0, NONE)]),
    ]
    # Nothing refused: the request goes on as it came, and its answer as the coordinator's.
    whole = make("g", ("a", [1]))
    assert rows(handlers[api](whole, CTX)) == [("a", [(1, NONE)])]
    assert coordinator.requests[-1] is whole


@pytest.mark.parametrize(
    ("api", "make"),
    [(ApiKey.OFFSET_COMMIT, offset_commit), (ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit)],
)
async def test_a_request_with_nothing_left_never_reaches_the_coordinator(
    api: ApiKey, make: Any
) -> None:
    catalog = Catalog({"a": 1})
    coordinator = Coordinator()
    handlers = guarded(catalog, coordinator)
    reply = await reply_of(handlers[api](make("g", ("a", [3]), ("gone", [0])), CTX))
    assert rows(reply) == [("a", [(3, UNKNOWN)]), ("gone", [(0, UNKNOWN)])]
    assert catalog.asked == [["a", "gone"]]
    assert coordinator.requests == []


@pytest.mark.parametrize(
    ("api", "make"),
    [(ApiKey.OFFSET_COMMIT, offset_commit), (ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit)],
)
async def test_metadata_that_cannot_be_read_commits_nothing_and_is_retriable(
    api: ApiKey, make: Any
) -> None:
    coordinator = Coordinator()
    handlers = guarded(Catalog(None), coordinator)
    reply = await reply_of(handlers[api](make("g", ("a", [0, 1]), ("b", [0])), CTX))
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert rows(reply) == [("a", [(0, unavailable), (1, unavailable)]), ("b", [(0, unavailable)])]
    assert coordinator.requests == []


async def test_a_commit_waits_only_for_the_earlier_commits_of_its_group() -> None:
    """A group's commits reach its coordinator in the order they came, one that must ask the
    cluster holding back the group's later ones (the last commit wins); another group's
    commit, which the cache answers, does not wait."""
    catalog = Catalog({"a": 2, "new": 1}, cached=["a"])
    catalog.gate = asyncio.Event()
    coordinator = Coordinator(later=True)
    handlers = guarded(catalog, coordinator)
    commit = handlers[ApiKey.OFFSET_COMMIT]
    first = commit(offset_commit("g", ("new", [0])), CTX)
    second = commit(offset_commit("g", ("a", [0])), CTX)
    assert isinstance(first, PendingReply) and isinstance(second, PendingReply)
    other = commit(offset_commit("h", ("a", [1])), CTX)
    # Another group's, and the other API's of the same group, go on at once.
    txn = handlers[ApiKey.TXN_OFFSET_COMMIT](txn_offset_commit("g", ("a", [1])), CTX)
    assert [sent(r) for r in coordinator.requests] == [[("a", [1])], [("a", [1])]]
    assert isinstance(other, PendingReply) and isinstance(txn, PendingReply)
    await asyncio.sleep(0.01)
    assert len(coordinator.requests) == 2, "the group's second commit overtook its first"
    catalog.gate.set()
    await asyncio.sleep(0.01)
    assert [(r.group_id, sent(r)) for r in coordinator.requests[2:]] == [
        ("g", [("new", [0])]),
        ("g", [("a", [0])]),
    ]
    coordinator.answer_all()
    assert rows(await first.future) == [("new", [(0, NONE)])]
    assert rows(await second.future) == [("a", [(0, NONE)])]
    assert rows(await other.future) == [("a", [(1, NONE)])]
    assert rows(await txn.future) == [("a", [(1, NONE)])]


async def test_the_coordinators_later_answer_is_merged_and_its_failure_mapped() -> None:
    catalog = Catalog({"a": 1}, cached=["a"])
    coordinator = Coordinator(later=True)
    handlers = guarded(catalog, coordinator)
    reply = handlers[ApiKey.OFFSET_COMMIT](offset_commit("g", ("a", [0, 1])), CTX)
    assert isinstance(reply, PendingReply)
    coordinator.answer_all()
    assert rows(await reply.future) == [("a", [(1, UNKNOWN), (0, NONE)])]

    def failing(request: Any, ctx: RequestContext) -> PendingReply:
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        future.set_exception(TimeoutError())
        return PendingReply(
            future,
            # The coordinator's own map of its failure, for the partitions it was given.
            lambda _: OffsetCommitResponse(
                topics=[
                    response_topic(
                        request,
                        t.name,
                        [p.partition_index for p in t.partitions],
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    )
                    for t in request.topics
                ]
            ),
        )

    handlers = Table({ApiKey.OFFSET_COMMIT: failing})
    CommitPartitionCheck(catalog).guard(handlers)
    reply = handlers[ApiKey.OFFSET_COMMIT](offset_commit("g", ("a", [0, 1])), CTX)
    assert isinstance(reply, PendingReply)
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert rows(await reply.future) == [("a", [(1, UNKNOWN), (0, unavailable)])]
