"""What the transactions tool asks of the Kafka cluster itself, as Kafka's admin client does
for `kafka-transactions.sh`: the partitions of topics and where their replicas are
(Metadata), the producers a partition's log keeps state for (DescribeProducers, to the leader
or a named broker), and an ABORT marker written straight to a partition's leader
(WriteTxnMarkers, Kafka's `Admin.abortTransaction`).

Each call retries what Kafka's admin handlers retry (a leader that moved, a broker not
reachable yet) within the one deadline the tool was given, and raises `KafkaToolError`
with a sentence for anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from coordinator_client.kafka_metadata_request import (
    MetadataRequestWithoutAutoCreation,
    forbid_auto_topic_creation,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.request import (
    KafkaWriteTxnMarkersRequest,
    MarkerEntry,
    read_marker_results,
)
from coordinator_server.storage.kafka.security import KafkaSecurity
from coordinator_server.tools.admin.common import CONNECT_CHECK_S, check_kafka
from coordinator_server.tools.admin.describe_producers import (
    KafkaDescribeProducersRequest,
    PartitionProducerStates,
    read_producer_states,
)

__all__ = ["KafkaToolError", "KafkaTransactionsAdmin", "PartitionPlacement"]

NO_LEADER: Final = -1
_BACKOFF_S: Final = 0.1
_BACKOFF_MAX_S: Final = 1.0
# The answers after which Kafka's admin client finds the leader again and retries.
_DESCRIBE_RETRY: Final = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})
_ABORT_RETRY: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)
# A broker that cannot be reached now, or did not answer in time: asked again.
_UNREACHABLE: Final = (KafkaError, OSError, TimeoutError)


class KafkaToolError(Exception):
    """What the Kafka cluster refused or could not answer, in one sentence."""


@dataclass(frozen=True, slots=True)
class PartitionPlacement:
    leader: int
    """The leader's broker id, NO_LEADER while there is none."""
    replicas: tuple[int, ...]


class KafkaTransactionsAdmin:
    """The tool's connection to the Kafka cluster (an aiokafka client)."""

    def __init__(
        self,
        bootstrap_servers: str,
        security: KafkaSecurity,
        *,
        timeout_ms: int,
        client_id: str = "coordinator-server-transactions",
    ) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._security = security
        self._timeout_s = timeout_ms / 1000
        self._client_id = client_id
        self._client: AIOKafkaClient | None = None

    async def __aenter__(self) -> KafkaTransactionsAdmin:
        # A refusal said plainly, at once (aiokafka's would only say it could not bootstrap).
        connector = await check_kafka(
            self._bootstrap_servers,
            self._security,
            min(CONNECT_CHECK_S, self._timeout_s),
            self._client_id,
        )
        ssl_context = None if self._security.is_plaintext else connector.ssl_context
        client = AIOKafkaClient(
            bootstrap_servers=self._bootstrap_servers,
            client_id=self._client_id,
            request_timeout_ms=int(self._timeout_s * 1000),
            **self._security.aiokafka_options(ssl_context),
        )
        forbid_auto_topic_creation(client)
        try:
            await asyncio.wait_for(client.bootstrap(), self._timeout_s)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        self._client = client
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @property
    def client(self) -> AIOKafkaClient:
        if self._client is None:
            raise RuntimeError("use KafkaTransactionsAdmin in `async with`")
        return self._client

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self._timeout_s

    async def _pause(self, attempt: int, deadline: float, failure: str) -> None:
        """Back off before the next attempt, or raise `failure` when the deadline is near."""
        backoff_s = min(_BACKOFF_MAX_S, _BACKOFF_S * 2**attempt)
        if asyncio.get_running_loop().time() + backoff_s >= deadline:
            raise KafkaToolError(failure)
        await asyncio.sleep(backoff_s)

    # Metadata

    async def partitions(
        self, topics: Iterable[str] | None
    ) -> dict[TopicPartition, PartitionPlacement]:
        """The partitions of `topics` (None: of every topic, internal ones too, as Kafka's
        tool lists them) with their leader and replicas. Raises KafkaToolError for a topic
        that does not exist or cannot be described."""
        names = None if topics is None else sorted(set(topics))
        deadline = self._deadline()
        attempt = 0
        while True:
            client = self.client
            node_id = client.get_random_node()
            try:
                if node_id is None:
                    raise KafkaError("no broker is known")
                response = await asyncio.wait_for(
                    client.send(node_id, MetadataRequestWithoutAutoCreation(names)), self._timeout_s
                )
                break
            except _UNREACHABLE as error:
                await self._pause(
                    attempt, deadline, f"no metadata from the Kafka cluster: {error!r}"
                )
                attempt += 1
        known = {node.nodeId for node in self.client.cluster.brokers()}
        if not {int(broker[0]) for broker in response.brokers} <= known:
            # A broker the client has not met yet: its own metadata must name it first.
            await self.client.force_metadata_update()
        placements: dict[TopicPartition, PartitionPlacement] = {}
        for error_code, name, _internal, partitions in response.topics:
            if error_code != ErrorCode.NONE:
                if names is None:
                    continue
                reason = (
                    "does not exist"
                    if error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else f"cannot be described: {ErrorCode(error_code).name}"
                )
                raise KafkaToolError(f"topic {name!r} {reason}")
            for partition in partitions:
                placements[TopicPartition(str(name), int(partition[1]))] = PartitionPlacement(
                    int(partition[2]), tuple(int(replica) for replica in partition[3])
                )
        return placements

    async def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = set(partitions)
        placements = await self.partitions({tp.topic for tp in wanted})
        missing = sorted(wanted - placements.keys())
        if missing:
            raise KafkaToolError(
                "no such partition: " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            )
        return {tp: placements[tp].leader for tp in wanted}

    # DescribeProducers

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, PartitionProducerStates]:
        """The active producers of each partition, as its leader (or `broker_id`, a replica)
        keeps them. A partition whose leader moved is asked again of the new one (not with
        `broker_id`: Kafka's tool then fails, as here)."""
        pending = set(partitions)
        answered: dict[TopicPartition, PartitionProducerStates] = {}
        deadline = self._deadline()
        attempt = 0
        last_failure = "no answer"
        while pending:
            if broker_id is None:
                leaders = await self._leaders(pending)
            else:
                leaders = dict.fromkeys(pending, broker_id)
            by_broker: defaultdict[int, list[TopicPartition]] = defaultdict(list)
            for tp, leader in leaders.items():
                if leader == NO_LEADER:
                    last_failure = f"{tp.topic}-{tp.partition} has no leader"
                else:
                    by_broker[leader].append(tp)
            answers = await asyncio.gather(
                *(self._describe_on(node, sorted(tps)) for node, tps in by_broker.items())
            )
            for (node, _), answer in zip(by_broker.items(), answers, strict=True):
                if isinstance(answer, str):
                    last_failure = answer
                    continue
                for tp, state in answer.items():
                    if tp not in pending:
                        continue
                    if state.error_code == ErrorCode.NONE:
                        answered[tp] = state
                        pending.discard(tp)
                    elif state.error_code in _DESCRIBE_RETRY and broker_id is None:
                        last_failure = f"{tp.topic}-{tp.partition}: the leader moved"
                    else:
                        name = _error_name(state.error_code)
                        where = f"broker {node}" if broker_id is not None else "its leader"
                        detail = f" ({state.error_message})" if state.error_message else ""
                        raise KafkaToolError(
                            f"Failed to describe producers for partition "
                            f"{tp.topic}-{tp.partition} on {where}: {name}{detail}"
                        )
            if pending:
                await self._pause(
                    attempt, deadline, f"Failed to describe producers: {last_failure}"
                )
                attempt += 1
        return answered

    async def _describe_on(
        self, node: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, PartitionProducerStates] | str:
        """One broker's answer, or why it gave none (to try again)."""
        try:
            response = await asyncio.wait_for(
                self.client.send(node, KafkaDescribeProducersRequest(partitions)),
                self._timeout_s,
            )
        except NotImplementedError as error:
            raise KafkaToolError(
                f"broker {node} does not serve DescribeProducers: {error}"
            ) from None
        except _UNREACHABLE as error:
            return f"broker {node}: {error!r}"
        try:
            return read_producer_states(response)
        except ValueError as error:
            return f"broker {node}: {error}"

    # WriteTxnMarkers

    async def abort(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write an ABORT marker for `producer_id`'s open transaction on `tp` to its leader
        (Kafka's `Admin.abortTransaction`): the partition's last stable offset can then pass
        the transaction's records."""
        marker = MarkerEntry(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            committed=False,
            partitions={tp.topic: [tp.partition]},
        )
        what = (
            f"abort of producer {producer_id} (epoch {producer_epoch}, coordinator epoch "
            f"{coordinator_epoch}) on {tp.topic}-{tp.partition}"
        )
        deadline = self._deadline()
        attempt = 0
        while True:
            leader = (await self._leaders([tp]))[tp]
            failure = f"{tp.topic}-{tp.partition} has no leader"
            if leader != NO_LEADER:
                try:
                    response = await asyncio.wait_for(
                        self.client.send(leader, KafkaWriteTxnMarkersRequest([marker])),
                        self._timeout_s,
                    )
                except NotImplementedError as error:
                    raise KafkaToolError(
                        f"broker {leader} does not serve WriteTxnMarkers v1: {error}"
                    ) from None
                except _UNREACHABLE as error:
                    failure = f"broker {leader}: {error!r}"
                else:
                    code = self._marker_error(response, producer_id, tp, what)
                    if code == ErrorCode.NONE:
                        return
                    if code not in _ABORT_RETRY:
                        raise KafkaToolError(f"{what} failed: {_error_name(code)}")
                    failure = f"{what} failed: {_error_name(code)}"
            await self._pause(attempt, deadline, failure)
            attempt += 1

    @staticmethod
    def _marker_error(response: object, producer_id: int, tp: TopicPartition, what: str) -> int:
        try:
            results = read_marker_results(response)
        except ValueError as error:
            raise KafkaToolError(f"{what}: {error}") from None
        code = results.get(producer_id, {}).get((tp.topic, tp.partition))
        if code is None:
            # Kafka's AbortTransactionHandler: an answer about other markers is a failure.
            raise KafkaToolError(f"{what}: the answer names other markers: {results}")
        return code


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
