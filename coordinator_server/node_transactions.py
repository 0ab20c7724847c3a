"""A node's transaction coordinator, wired: when the log is Kafka's and its brokers take
markers from outside (`--transactions`), the marker writer, where new producer ids come from,
the completions of transactions (on this node's log partitions, or through the node that owns
another's), and the transaction service in the dispatch table; otherwise why not.

Apart from `app` because it is one concern with a start that waits for the Kafka cluster
and a stop of its own (the completions first, then the producer ids, then the writer).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.errors import KafkaError

from coordinator_server import defaults
from coordinator_server.config import CoordinatorConfig
from coordinator_server.markers import (
    KafkaTransactionsCheckError,
    KafkaTransactionsCheckUnanswered,
    KafkaTxnMarkerWriter,
    ProducerIdRefused,
    check_kafka_for_transactions,
)
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.markers.peers import NodePeers
from coordinator_server.markers.producer_ids import ClusterProducerIds
from coordinator_server.metrics import TransactionFigures, TransactionMetrics
from coordinator_server.node_address import NodeAddress, Placement
from coordinator_server.node_client import NodeClient
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.dispatch import RequestDispatch
from coordinator_server.service.group_service import GroupCoordinatorService
from coordinator_server.service.transaction_service import TransactionCoordinatorService
from coordinator_server.shard import LogPartitionShard
from coordinator_server.starting import (
    START_RETRY_BACKOFF_MAX_S,
    START_RETRY_BACKOFF_S,
    StartError,
    start_with_retries,
)

__all__ = ["NodeTransactions", "coordinator_epoch"]

logger = logging.getLogger("coordinator_server")


def coordinator_epoch(runtime: CoordinatorRuntime[LogPartitionShard], partition: int) -> int:
    """The epoch WriteTxnMarkers fences older coordinators of the partition with: counted on
    at every takeover in the log (`shard.takeover_coordinator_epoch`), 0 for a log no cluster
    ever took over."""
    shard = runtime.shard(partition)
    return 0 if shard is None else shard.coordinator_epoch


class NodeTransactions:
    """The transaction coordinator's parts on this node, and why it serves none when so."""

    def __init__(
        self, config: CoordinatorConfig, stop: asyncio.Event, metrics: TransactionMetrics
    ) -> None:
        """`stop`: set when the node is asked to stop (a start waiting for the Kafka
        cluster gives up)."""
        self._config = config
        self._stop = stop
        self._metrics = metrics
        # The markers and completions (None: no transactions).
        self.marker_writer: KafkaTxnMarkerWriter | None = None
        self.completions: TxnMarkerChannel | None = None
        # New producer ids, from the Kafka cluster (None: from a range, or no transactions).
        self.producer_ids: ClusterProducerIds | None = None
        # Why this node serves no transactions (None: it does, or has not started).
        self.refusal: str | None = None

    async def start(
        self,
        service: GroupCoordinatorService,
        dispatch: RequestDispatch,
        runtime: CoordinatorRuntime[LogPartitionShard],
        node: NodeAddress,
        *,
        placement: Placement | None,
        node_client: NodeClient | None,
        authorizer: RequestAuthorizer | None,
    ) -> None:
        """Serve the transaction APIs, once the Kafka cluster was checked to take markers
        from outside; or say why not (`refusal`)."""
        config = self._config
        if not config.transactions_wanted:
            self.refusal = (
                "--transactions off"
                if config.bootstrap_servers
                else "the embedded log has no Kafka cluster"
            )
            return
        assert config.bootstrap_servers is not None
        bootstrap_servers = config.bootstrap_servers
        try:
            # With `on`, a cluster that does not answer yet is asked again, as the load waits
            # for it: a slow broker must not end the server. With `auto`, one that does not
            # answer serves no transactions, as before: a broker that closes the connection on
            # the check's request (tansu) would otherwise hold the start for good.
            await start_with_retries(
                "the check of the Kafka cluster for transactions",
                lambda: check_kafka_for_transactions(
                    bootstrap_servers,
                    security=config.kafka_security,
                    timeout_s=config.offsets_commit_timeout_ms / 1000,
                ),
                retriable=(KafkaTransactionsCheckUnanswered,)
                if config.transactions == "on"
                else (),
                stop=self._stop,
                logger=logger,
                backoff_s=START_RETRY_BACKOFF_S,
                backoff_max_s=START_RETRY_BACKOFF_MAX_S,
            )
        except KafkaTransactionsCheckError as refused:
            if config.transactions == "on":
                raise
            logger.warning("serving no transactions (--transactions auto): %s", refused)
            self.refusal = str(refused)
            service.refuse_transactions(str(refused))
            return
        self.marker_writer = writer = KafkaTxnMarkerWriter(
            config.bootstrap_servers,
            security=config.kafka_security,
            request_timeout_ms=config.offsets_commit_timeout_ms,
            max_queued_markers=config.transaction_max_queued_markers,
            metadata_max_age_ms=config.metadata_max_age_ms,
        )
        await start_with_retries(
            "the transaction marker writer",
            writer.start,
            retriable=(TimeoutError, KafkaError, OSError),
            stop=self._stop,
            logger=logger,
            backoff_s=START_RETRY_BACKOFF_S,
            backoff_max_s=START_RETRY_BACKOFF_MAX_S,
        )
        producer_id_range = config.transaction_producer_id_range
        if producer_id_range is None:
            self.producer_ids = ClusterProducerIds(
                writer.new_producer_id,
                ready=defaults.TRANSACTION_PRODUCER_IDS_READY,
                timeout_s=config.offsets_commit_timeout_ms / 1000,
            )
            self.producer_ids.start()
        else:
            await self._check_producer_id_range(writer, *producer_id_range)
        peers = None
        if placement is not None and node_client is not None:
            peers = NodePeers(placement, node.node_id, config.offsets_topic, node_client)
        self.completions = completions = TxnMarkerChannel(
            runtime,
            writer,
            coordinator_epoch=lambda partition: coordinator_epoch(runtime, partition),
            peers=peers,
            metrics=self._metrics,
        )
        transactions = TransactionCoordinatorService(
            runtime,
            service.routing,
            limits=service.limits,
            sliced=service.sliced,
            log_topic=config.offsets_topic,
            completions=completions,
            max_id_length=config.max_id_length,
            transaction_lookup=None if peers is None else peers.describe_transaction,
            concurrent_wait_ms=config.transaction_concurrent_wait_ms,
            partitions=writer,
            producer_ids=self.producer_ids,
            max_partitions_per_transaction=config.max_partitions_per_transaction,
            authorizer=authorizer,
        )
        dispatch.serve_transactions(transactions)
        completions.start()

    async def _check_producer_id_range(
        self, writer: KafkaTxnMarkerWriter, start: int, end: int
    ) -> None:
        """A range set by hand must lie above every id the Kafka cluster handed out: ask it
        for one (it counts up from 0), and refuse to start on a range that does not. Another
        deployment's overlapping range cannot be seen from here: its markers are refused,
        which `TxnMarkerChannel` reports."""
        handed_out = await start_with_retries(
            "the check of the producer id range",
            writer.new_producer_id,
            retriable=(TimeoutError, KafkaError, OSError, ProducerIdRefused),
            stop=self._stop,
            logger=logger,
            backoff_s=START_RETRY_BACKOFF_S,
            backoff_max_s=START_RETRY_BACKOFF_MAX_S,
        )
        if handed_out >= start:
            raise StartError(
                f"the producer id range [{start}, {end}) overlaps the ids the Kafka cluster "
                f"hands out itself (it has reached {handed_out}): set "
                "--transaction-producer-id-start above them, or leave the range unset to take "
                "every producer id from the cluster"
            )

    def figures(self) -> TransactionFigures | None:
        """The markers' and completions' figures for the metrics (None: no transactions)."""
        completions, writer = self.completions, self.marker_writer
        if completions is None or writer is None:
            return None
        return TransactionFigures(
            completions_in_flight=completions.in_flight,
            markers_queued=writer.queued_markers,
            marker_requests=writer.requests_sent,
            marker_retries=writer.retries,
        )

    def status(self) -> dict[str, object]:
        """This node's part of `/status`'s transactions (the partitions' counts are the
        caller's)."""
        figures = self.figures()
        metrics = self._metrics
        return {
            "served": figures is not None,
            "reason": self.refusal,
            "in_flight": None if figures is None else figures.completions_in_flight,
            "markers_queued": None if figures is None else figures.markers_queued,
            "completed": {"commit": metrics.completed_commits, "abort": metrics.completed_aborts},
            "timed_out": metrics.timed_out,
            "markers_refused": {
                "total": metrics.markers_refused,
                "latest": [] if self.completions is None else list(self.completions.refusals),
            },
            "producer_ids": self._producer_ids_status(),
        }

    def _producer_ids_status(self) -> dict[str, object]:
        """Where new producer ids come from, and the cluster's pool when they come from it."""
        pool = self.producer_ids
        if pool is None:
            return {"source": "range", "range": self._config.transaction_producer_id_range}
        return {
            "source": "kafka",
            "in_hand": pool.in_hand,
            "asked": pool.asked,
            "failures": pool.failures,
            "last_error": pool.last_error,
        }

    async def stop(self) -> None:
        if self.completions is not None:
            # A transaction left prepared is ended by whoever loads its partition next.
            await self.completions.stop()
            self.completions = None
        if self.producer_ids is not None:
            await self.producer_ids.stop()
            self.producer_ids = None
        if self.marker_writer is not None:
            await self.marker_writer.stop()
            self.marker_writer = None
