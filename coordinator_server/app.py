"""Wiring: the log, the runtime, the service and the listener, and their life cycle."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector

from coordinator_protocol.errors import NotCoordinatorError
from coordinator_server import __version__, defaults
from coordinator_server.cluster.assignor import NO_GENERATION
from coordinator_server.cluster.node import ClusterNode, ClusterSettings
from coordinator_server.cluster.ownership import PartitionOwnership
from coordinator_server.commit_partition_check import CommitPartitionCheck, DataPartitionCatalog
from coordinator_server.config import CoordinatorConfig
from coordinator_server.consumer_lag import CommittedOffset, ConsumerLag
from coordinator_server.event_loop import stopping_on_signals
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.loop_lag import EventLoopLag
from coordinator_server.metrics import (
    ClusterMetrics,
    ConsumerLagMetrics,
    GroupMetrics,
    RuntimeMetrics,
    ServerMetrics,
    TransactionMetrics,
)
from coordinator_server.node_address import NodeAddress
from coordinator_server.node_client import NodeClient, NodeConnector
from coordinator_server.node_consumer_groups import NodeConsumerGroups, consumer_group_config
from coordinator_server.node_security import NodeSecurity
from coordinator_server.node_transactions import NodeTransactions, coordinator_epoch
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.prometheus import CoordinatorCollector, Snapshot, lag_exposition
from coordinator_server.runtime.batch import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES
from coordinator_server.runtime.clock import RuntimeClock, SystemClock
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.security.acl_control import AclsConfig
from coordinator_server.security.scram_control import ScramCredentialsConfig
from coordinator_server.server.http import OperatorHttpServer, Probe
from coordinator_server.server.listener import CoordinatorServer, bind
from coordinator_server.server.state import ServerConfig, ServerState
from coordinator_server.service.dispatch import RequestDispatch
from coordinator_server.service.group_service import GroupCoordinatorService
from coordinator_server.service.limits import RequestLimits
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.starting import (
    START_RETRY_BACKOFF_MAX_S,
    START_RETRY_BACKOFF_S,
    StartAbandoned,
    StartError,
    start_with_retries,
)
from coordinator_server.storage.api import CoordinatorLog
from coordinator_server.storage.kafka.idempotence import ProducerIdError
from coordinator_server.storage.kafka.log import KafkaLog
from coordinator_server.storage.kafka.metadata import TopicMetadataError
from coordinator_server.storage.kafka.topic import KafkaLogError
from coordinator_server.storage.sqlite import SqliteLogError
from coordinator_server.transactions.results import TransactionsConfig

logger = logging.getLogger("coordinator_server")
# The ready line's, which configure_logging keeps at INFO.
READY_LOGGER = "coordinator_server.ready"
ready_logger = logging.getLogger(READY_LOGGER)

# After a produce response, the Kafka log's next request waits this many turns of the event
# loop: the turns in which the response's appends complete, the writes they commit answer
# their callers, and those answers are written to the callers' sockets. A request sent
# sooner wakes the broker, which on a shared core then runs before the answers leave; the
# callers' next commits arrive just after the request left and wait a whole round for the
# one after it. Sent after the answers, it takes them: 8 commits a request instead of about
# 6 with 16 in flight, 32 instead of about 18 with 64, and fewer requests cost the broker
# and the server less. The turns cost microseconds when nothing else runs. They count the
# way from the log through the runtime and the service to the connections, which only the
# wiring sees whole; tests/server/test_server_produce_order.py checks the count.
ANSWER_TURNS = 3


def build_log(config: CoordinatorConfig) -> CoordinatorLog:
    if config.bootstrap_servers:
        return KafkaLog(
            config.bootstrap_servers,
            config.offsets_topic,
            config.offsets_topic_partitions,
            config.offsets_topic_replication_factor,
            request_timeout_ms=config.offsets_commit_timeout_ms,
            max_batch_bytes=config.max_batch_bytes,
            max_inflight_produce_requests=config.max_inflight_produce_requests,
            metadata_max_age_ms=config.metadata_max_age_ms,
            security=config.kafka_security,
            answer_turns=ANSWER_TURNS,
            ownership_transactional_id_prefix=(
                f"{config.cluster_name}/" if config.clustered else None
            ),
        )
    from coordinator_server.storage.sqlite import SqliteLog

    return SqliteLog(config.data_dir / "coordinator.db", config.offsets_topic_partitions)


def describe_log(config: CoordinatorConfig) -> str:
    if config.bootstrap_servers:
        return (
            f"kafka topic {config.offsets_topic} at {config.bootstrap_servers} "
            f"({config.kafka_security.describe()})"
        )
    return f"sqlite in {config.data_dir}"


async def _nothing_to_acquire(partition: int) -> None:
    """A node alone is the only writer of its log (the embedded log is its own)."""


def _nothing_to_release(partition: int) -> None:
    pass


class _FencedKafkaLog:
    """The Kafka log as a takeover uses it (`cluster.takeover.FencedLog`)."""

    def __init__(self, log: KafkaLog) -> None:
        self._log = log

    async def check(self) -> None:
        await self._log.check_fencing()

    async def acquire(self, partition: int) -> tuple[int, int]:
        epoch = await self._log.acquire(partition)
        producer = self._log.producer_of(partition)
        return (-1, epoch) if producer is None else producer

    def release(self, partition: int) -> None:
        self._log.release(partition)

    def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> asyncio.Future[int]:
        return self._log.writer.append(partition, records)


class CoordinatorApp:
    def __init__(
        self,
        config: CoordinatorConfig,
        log: CoordinatorLog | None = None,
        clock: RuntimeClock | None = None,
        node_connector: NodeConnector | None = None,
    ) -> None:
        """`log` replaces the one the settings name and `clock` the system clock (tests use
        an in-memory log and a manual clock); `node_connector`: how this node connects to
        the other nodes of its cluster (default: TCP, or TLS when the nodes serve it)."""
        self.config = config
        self.clock = clock or SystemClock()
        self.log: CoordinatorLog | None = log
        self.runtime: CoordinatorRuntime[LogPartitionShard] | None = None
        self.service: GroupCoordinatorService | None = None
        self.dispatch: RequestDispatch | None = None
        self.server: CoordinatorServer | None = None
        self.address: tuple[str, int] | None = None
        self.metrics_port: int | None = None
        self.server_metrics = ServerMetrics()
        self.runtime_metrics = RuntimeMetrics()
        self.group_metrics = GroupMetrics()
        self.cluster_metrics = ClusterMetrics()
        self.transaction_metrics = TransactionMetrics()
        # None while consumer lag is off (no data cluster, or --lag-refresh-interval-ms 0).
        self.lag_metrics = ConsumerLagMetrics() if config.lag_cluster else None
        self.consumer_lag: ConsumerLag | None = None
        self.loop_lag: EventLoopLag | None = None
        self.http: OperatorHttpServer | None = None
        self.started_monotonic = time.monotonic()
        self._stop = asyncio.Event()
        # The transaction coordinator's parts, when the log's Kafka cluster takes markers.
        self.transactions = NodeTransactions(config, self._stop, self.transaction_metrics)
        # Keeps the partitions this node owns loaded (alone: all of them).
        self.ownership: PartitionOwnership | None = None
        # This node's place in its cluster (None: alone).
        self.cluster: ClusterNode | None = None
        # OffsetCommit's and TxnOffsetCommit's check of the data cluster's partitions (None:
        # --offset-commit-check-partitions off).
        self.partition_catalog: DataPartitionCatalog | None = None
        self.commit_check: CommitPartitionCheck | None = None
        # This node's requests to the others of its cluster (None: alone).
        self.node_client: NodeClient | None = None
        # Who may connect and what they may do: the listener's authentication, the
        # authorizer, and the image of the log's ACLs and SCRAM credentials.
        self.security = NodeSecurity(config, self.server_metrics)
        # The consumer group protocol (KIP-848): the data cluster's topics, and its APIs.
        self.consumer_groups = NodeConsumerGroups(config)
        self.node_connector = node_connector or self.security.node_connector()

    async def start(self) -> None:
        config = self.config
        started = time.monotonic()
        self.loop_lag = EventLoopLag(self.server_metrics.event_loop_lag)
        self.loop_lag.start()
        self.log = log = self.log or build_log(config)
        log.register_failure_listener(self._on_log_failure)
        await self._start_log(log)
        num_partitions = log.num_partitions
        producer_id_range = config.transaction_producer_id_range or (
            defaults.TRANSACTION_PRODUCER_ID_START,
            defaults.TRANSACTION_PRODUCER_ID_END,
        )
        shard_config = ShardConfig(
            offsets=OffsetsConfig(
                offset_metadata_max_bytes=config.offset_metadata_max_bytes,
                max_committed_offsets_per_group=config.max_committed_offsets_per_group,
                max_id_length=config.max_id_length,
                max_pending_transactional_offsets=config.max_pending_transactional_offsets,
                max_records_bytes=config.max_batch_bytes - BATCH_OVERHEAD_BYTES,
                record_overhead_bytes=RECORD_OVERHEAD_BYTES,
            ),
            groups=GroupsConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                max_size=config.group_max_size,
                offsets_retention_ms=config.offsets_retention_minutes * 60 * 1000,
                offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
                max_groups=config.max_groups,
                max_response_bytes=config.max_response_bytes,
            ),
            transactions=TransactionsConfig(
                max_timeout_ms=config.transaction_max_timeout_ms,
                transactional_id_expiration_ms=config.transactional_id_expiration_ms,
                abort_timed_out_interval_ms=(
                    config.transaction_abort_timed_out_transaction_cleanup_interval_ms
                ),
                remove_expired_interval_ms=(
                    config.transaction_remove_expired_transaction_cleanup_interval_ms
                ),
                producer_id_start=producer_id_range[0],
                producer_id_end=producer_id_range[1],
                # Without a Kafka cluster (no transactions served, or a test's in-memory log),
                # a range is all there is.
                producer_ids_from_cluster=config.transaction_producer_id_range is None
                and config.transactions_wanted,
                num_partitions=num_partitions,
                max_transactional_ids=config.max_transactional_ids,
                max_partitions_per_transaction=config.max_partitions_per_transaction,
            ),
            acls=AclsConfig(max_acls=config.max_acls, max_id_length=config.max_id_length),
            scram_credentials=ScramCredentialsConfig(
                max_scram_users=config.max_scram_users, max_id_length=config.max_id_length
            ),
            consumer_groups=consumer_group_config(config),
        )
        self.runtime = runtime = CoordinatorRuntime[LogPartitionShard](
            shard_builder=lambda context: LogPartitionShard(
                context,
                shard_config,
                self.group_metrics,
                self.groups_on_node,
                self.transactional_ids_on_node,
                self.consumer_groups.topics,
            ),
            writer=log.writer,
            loader=log.loader,
            follower=log.follower,
            clock=self.clock,
            config=RuntimeConfig(
                write_timeout_ms=config.offsets_commit_timeout_ms,
                append_linger_ms=config.append_linger_ms,
                max_batch_bytes=config.max_batch_bytes,
                max_queued_events=config.max_queued_events,
                append_failure_timeout_ms=config.append_failure_timeout_ms,
                standby_fetch_max_wait_ms=config.standby_fetch_max_wait_ms,
                standby_fetch_max_bytes=config.standby_fetch_max_bytes,
                standby_fetch_min_bytes=config.standby_fetch_min_bytes,
                standby_max_pending_records=config.standby_max_pending_records,
            ),
            observer=self.runtime_metrics,
            may_serve=self._may_serve if config.clustered else None,
        )
        server_config = ServerConfig(
            host=config.host,
            port=config.port,
            max_frame_bytes=config.max_frame_bytes,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            max_inflight_requests=config.max_inflight_requests,
            max_inflight_request_bytes=config.max_inflight_request_bytes,
            max_response_bytes=config.max_response_bytes,
            response_buffer_bytes=config.response_buffer_bytes,
            response_buffer_max_bytes=config.response_buffer_max_bytes,
            response_buffer_total_bytes=config.response_buffer_total_bytes,
            connections_max_idle_ms=config.connections_max_idle_ms,
            frame_read_timeout_ms=config.frame_read_timeout_ms,
            response_write_timeout_ms=config.response_write_timeout_ms,
        )
        try:
            sock, (host, port) = bind(config.host, config.port)
        except OSError as error:
            held = error.errno == errno.EADDRINUSE
            raise StartError(
                f"cannot listen on {config.host}:{config.port}: {error.strerror}: "
                + (
                    "another process holds the port; stop it or choose another --port"
                    if held
                    else "check --host and --port"
                )
            ) from None
        self.address = (host, port)
        node = NodeAddress(config.node_id, config.advertised, port)
        if config.clustered:
            self.cluster = self._cluster_node(node, runtime, log)
            self.ownership = self.cluster.ownership
        else:
            self.ownership = PartitionOwnership(
                runtime, _nothing_to_acquire, _nothing_to_release, stopped=self._log_failure
            )
        ownership = self.ownership
        limits = RequestLimits(
            max_id_length=config.max_id_length,
            max_member_metadata_bytes=config.max_member_metadata_bytes,
            max_response_bytes=config.max_response_bytes,
            max_frame_bytes=config.max_frame_bytes,
            max_subscribed_topics=config.max_subscribed_topics,
        )
        self.service = service = GroupCoordinatorService(
            runtime,
            num_partitions,
            node,
            placement=None if self.cluster is None else self.cluster.placement,
            cluster_id=config.cluster_name,
            cluster_nodes=None if self.cluster is None else self.cluster.nodes,
            limits=limits,
            authorizer=self.security.authorizer,
        )
        self.dispatch = dispatch = RequestDispatch(service, server_version=__version__)
        self._start_security(dispatch, runtime, log)
        try:
            await self._start_transactions(service, dispatch, runtime, node)
            await self._start_commit_check(dispatch, limits)
            await self.consumer_groups.start(self._stop)
            self.consumer_groups.serve(
                dispatch, runtime, service.routing, limits, self.security.authorizer
            )
        except StartAbandoned as abandoned:
            logger.info("%s", abandoned)
            return
        state = ServerState(
            server_config,
            dispatch.handlers,
            lambda code, message: dispatch.api_versions_response(code, message).to_body(),
            self.server_metrics,
            security=self.security.listener,
        )
        self.server = server = CoordinatorServer(state)
        exposure = self.security.exposure
        if exposure is not None:
            logger.warning("%s", exposure)
        if self.cluster is None:
            # Alone, the node owns every partition from the start: until each has loaded,
            # its requests get COORDINATOR_LOAD_IN_PROGRESS, never NOT_COORDINATOR (a
            # listing would otherwise skip partitions it has not begun to load).
            for partition in range(num_partitions):
                runtime.announce_load(partition)
        await server.start(sock, config.ssl_context())
        if config.metrics_port >= 0:
            self.http = self._operator_http()
            self.metrics_port = await self.http.start(config.host, config.metrics_port)

        # ApiVersions and FindCoordinator answer at once; group requests get
        # COORDINATOR_LOAD_IN_PROGRESS until their partition is ACTIVE.
        # Loading builds an object per committed offset and per group, all of them kept: the
        # cyclic garbage collector would traverse the growing heap again and again for
        # nothing (a third of the time of a load of a million offsets). It stays off until
        # the load is done; then what was loaded moves out of its sight for good (freeze), so
        # that collections during serving do not walk the loaded state either.
        collecting = gc.isenabled()
        gc.disable()
        loading = time.monotonic()
        try:
            if self.cluster is None:
                ownership.own(range(num_partitions))
            loaded: asyncio.Future[Any] = asyncio.ensure_future(self._first_loads(ownership))
            # Loads wait out a slow or absent broker for as long as it takes: a SIGTERM
            # meanwhile ends the start.
            stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
            try:
                await asyncio.wait({loaded, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not loaded.done():
                loaded.cancel()
                logger.info("asked to stop before every partition was loaded")
                return
            failure = loaded.exception()
            if failure is not None:
                # The cluster would not have this node (a refused setting, a missing topic):
                # waiting does not mend it.
                raise failure
        finally:
            if collecting:
                gc.freeze()
                gc.enable()
        load_s = time.monotonic() - loading
        runtime.first_loads_done()
        self._start_consumer_lag()
        records = self.runtime_metrics.records_loaded
        active = sum(s is CoordinatorState.ACTIVE for s in runtime.partitions().values())
        slowest = ", ".join(
            f"{partition} in {seconds:.2f} s"
            for seconds, partition in sorted(self.runtime_metrics.slowest_loads, reverse=True)
        )
        # Its own logger, shown whatever --log-level: the line an operator and a script wait
        # for (see cli.configure_logging).
        ready_logger.info(
            "coordinator-server %s ready on %s:%d (%d partitions loaded in %.2f s: %d records "
            "in %.2f s, %.0f records/s; slowest loads: partition %s; log: %s, metrics: %s)",
            __version__,
            host,
            port,
            active,
            time.monotonic() - started,
            records,
            load_s,
            records / load_s if load_s > 0 else 0.0,
            slowest or "none",
            describe_log(config),
            "off" if self.metrics_port is None else f"http://{host}:{self.metrics_port}/metrics",
        )

    async def _start_log(self, log: CoordinatorLog) -> None:
        """The log's start, whose failures that waiting cannot mend (its own retries gave
        up) are told as what to fix."""
        config = self.config
        try:
            await log.start()
        except SqliteLogError as error:
            raise StartError(
                f"{error}: stop the other server, or give this one another --data-dir"
                if "in use" in str(error)
                else str(error)
            ) from None
        except KafkaLogError as error:
            raise StartError(str(error)) from None
        except (KafkaError, OSError, TimeoutError, TopicMetadataError, ProducerIdError) as error:
            if not config.bootstrap_servers:
                raise StartError(f"cannot open the log in {config.data_dir}: {error}") from None
            raise StartError(
                f"cannot reach the Kafka cluster at {config.bootstrap_servers}: "
                f"{error or type(error).__name__}; check --bootstrap-servers, the brokers' "
                "listeners and the security settings"
            ) from None

    async def _start_transactions(
        self,
        service: GroupCoordinatorService,
        dispatch: RequestDispatch,
        runtime: CoordinatorRuntime[LogPartitionShard],
        node: NodeAddress,
    ) -> None:
        """The transaction coordinator, when the log is Kafka's and its brokers take markers
        from outside (`--transactions`)."""
        await self.transactions.start(
            service,
            dispatch,
            runtime,
            node,
            placement=None if self.cluster is None else self.cluster.placement,
            node_client=self.node_client,
            authorizer=self.security.authorizer,
        )

    async def _start_commit_check(self, dispatch: RequestDispatch, limits: RequestLimits) -> None:
        """OffsetCommit and TxnOffsetCommit checked against the data cluster's partitions
        (`--offset-commit-check-partitions`), from the first request the server takes."""
        config = self.config
        if not config.offset_commit_check_partitions:
            return
        # The settings refuse the check without a data cluster.
        assert config.data_cluster is not None
        self.partition_catalog = catalog = DataPartitionCatalog(
            config.data_cluster,
            security=config.kafka_security,
            request_timeout_ms=config.offsets_commit_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
        )
        await start_with_retries(
            f"the check of committed partitions against {config.data_cluster}",
            catalog.start,
            retriable=(TimeoutError, KafkaError, OSError),
            stop=self._stop,
            logger=logger,
            backoff_s=START_RETRY_BACKOFF_S,
            backoff_max_s=START_RETRY_BACKOFF_MAX_S,
        )
        self.commit_check = check = CommitPartitionCheck(catalog, limits)
        check.guard(dispatch)

    def _start_consumer_lag(self) -> None:
        config = self.config
        bootstrap_servers = config.lag_cluster
        if bootstrap_servers is None or self.lag_metrics is None:
            return
        self.consumer_lag = ConsumerLag(
            bootstrap_servers,
            security=config.kafka_security,
            committed=self._committed_offsets,
            total_offsets=self._total_offsets,
            metrics=self.lag_metrics,
            interval_ms=config.lag_refresh_interval_ms,
            max_series=config.lag_max_series,
            request_timeout_ms=config.offsets_commit_timeout_ms,
        )
        self.consumer_lag.start()

    def _start_security(
        self,
        dispatch: RequestDispatch,
        runtime: CoordinatorRuntime[LogPartitionShard],
        log: CoordinatorLog,
    ) -> None:
        """The ACL and SCRAM credential APIs (on the security partition, or sent on to the
        node that owns it), and the reading of the ACLs and credentials in force."""
        config = self.config
        if self.cluster is not None:
            self.node_client = NodeClient(
                config.node_id,
                self.node_connector,
                timeout_s=config.offsets_commit_timeout_ms / 1000,
                max_answer_bytes=config.max_response_bytes,
            )
        self.security.start(
            dispatch,
            runtime,
            log,
            placement=None if self.cluster is None else self.cluster.placement,
            peers=self.node_client,
        )

    def _active_shards(self) -> Iterator[tuple[int, LogPartitionShard]]:
        runtime = self.runtime
        if runtime is None:
            return
        for partition in sorted(runtime.partitions()):
            shard = runtime.shard(partition)
            if shard is not None:
                yield partition, shard

    def _committed_offsets(self) -> Iterator[CommittedOffset]:
        """Every committed offset of the ACTIVE partitions, for the consumer lag (which
        reads it in slices, the event loop running in between)."""
        for _, shard in self._active_shards():
            yield from shard.committed_offsets()

    def _total_offsets(self) -> int:
        return sum(shard.num_offsets() for _, shard in self._active_shards())

    def _may_serve(self) -> bool:
        cluster = self.cluster
        return cluster is not None and cluster.may_serve()

    async def _first_loads(self, ownership: PartitionOwnership) -> None:
        """Until the partitions this node owns were loaded once: alone, every partition; in
        a cluster, those of its first assignment."""
        if self.cluster is not None:
            await self.cluster.start()
        await ownership.wait_first_loads()
        # Requests are authorized against the ACLs in force: ready once they are read.
        await self.security.wait_ready()

    def _cluster_node(
        self,
        node: NodeAddress,
        runtime: CoordinatorRuntime[LogPartitionShard],
        log: CoordinatorLog,
    ) -> ClusterNode:
        config = self.config
        assert config.bootstrap_servers is not None
        assert isinstance(log, KafkaLog), "a cluster shares a Kafka log"
        return ClusterNode(
            ClusterSettings(
                bootstrap_servers=config.bootstrap_servers,
                topic=config.offsets_topic,
                cluster_id=config.cluster_name,
                session_timeout_ms=config.cluster_session_timeout_ms,
                heartbeat_interval_ms=config.cluster_heartbeat_interval_ms,
                security=config.kafka_security,
                standby=config.cluster_standby == "on",
            ),
            node,
            runtime,
            _FencedKafkaLog(log),
            now_ms=self.clock.now_ms,
            stopped=self._log_failure,
            metrics=self.cluster_metrics,
        )

    def _log_failure(self) -> str | None:
        return None if self.log is None else self.log.failure

    def _on_log_failure(self, reason: str) -> None:
        """The log stopped for good: every partition stops (its placement of groups can no
        longer be trusted), and none is loaded again until a restart."""
        runtime = self.runtime
        if runtime is None:
            return
        error = NotCoordinatorError(f"the log stopped: {reason}")
        for partition in sorted(runtime.partitions()):
            runtime.fail_partition(partition, error)

    def _operator_http(self) -> OperatorHttpServer:
        registry = CollectorRegistry(auto_describe=False)
        # CPU, memory and file descriptors (Linux's /proc), and the garbage collector.
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        registry.register(
            CoordinatorCollector(
                self.server_metrics,
                self.runtime_metrics,
                self.group_metrics,
                self.snapshot,
                __version__,
                self.cluster_metrics,
                self.transaction_metrics,
                self.lag_metrics,
            )
        )
        lag = self.lag_metrics
        return OperatorHttpServer(
            registry,
            self.readiness,
            self.status,
            appendix=None if lag is None else lambda: lag_exposition(lag),
        )

    def _partition_states(self) -> dict[int, str]:
        runtime = self.runtime
        if runtime is None:
            return {}
        return {p: state.name for p, state in sorted(runtime.partitions().items())}

    def _sum_over_active(self, count: Callable[[LogPartitionShard], int]) -> int:
        runtime = self.runtime
        if runtime is None:
            return 0
        total = 0
        for partition in runtime.partitions():
            shard = runtime.shard(partition)
            if shard is not None:
                total += count(shard)
        return total

    def groups_on_node(self) -> int:
        """Groups of every ACTIVE partition, for `max_groups`: asked only when a request
        would create a group."""
        return self._sum_over_active(lambda shard: shard.num_groups())

    def transactional_ids_on_node(self) -> int:
        """Transactional ids of every ACTIVE partition, for `max_transactional_ids`: asked
        only when InitProducerId would create one."""
        return self._sum_over_active(lambda shard: shard.num_transactional_ids())

    def _group_counts(self) -> tuple[dict[str, int], int, dict[str, int], int]:
        """Classic groups by state and their members, then consumer groups by state and
        their members, over every ACTIVE partition."""
        runtime = self.runtime
        by_state: dict[str, int] = {}
        consumer_by_state: dict[str, int] = {}
        members = consumer_members = 0
        if runtime is None:
            return by_state, members, consumer_by_state, consumer_members
        for partition, state in runtime.partitions().items():
            if state is not CoordinatorState.ACTIVE:
                continue
            shard = runtime.shard(partition)
            if shard is None:
                continue
            for name, count in shard.count_groups_by_state().items():
                by_state[name] = by_state.get(name, 0) + count
            members += shard.num_members()
            for name, count in shard.count_consumer_groups_by_state().items():
                consumer_by_state[name] = consumer_by_state.get(name, 0) + count
            consumer_members += shard.num_consumer_group_members()
        return by_state, members, consumer_by_state, consumer_members

    def _transaction_counts(self) -> tuple[dict[str, int], int, int]:
        """Transactional ids by state, transactional ids and pending transactional offsets,
        over every ACTIVE partition."""
        runtime = self.runtime
        by_state: dict[str, int] = {}
        ids = pending = 0
        if runtime is None:
            return by_state, ids, pending
        for partition, state in runtime.partitions().items():
            shard = runtime.shard(partition) if state is CoordinatorState.ACTIVE else None
            if shard is None:
                continue
            for name, count in shard.count_transactions_by_state().items():
                by_state[name] = by_state.get(name, 0) + count
            ids += shard.num_transactional_ids()
            pending += shard.num_pending_transactional_offsets()
        return by_state, ids, pending

    def snapshot(self) -> Snapshot:
        runtime = self.runtime
        server = self.server
        partitions: dict[str, int] = {}
        queue_depth = 0
        uncommitted: dict[int, int] = {}
        committed_offsets = {
            partition: shard.num_offsets() for partition, shard in self._active_shards()
        }
        if runtime is not None:
            for partition, state in runtime.partitions().items():
                partitions[state.name] = partitions.get(state.name, 0) + 1
                stats = runtime.partition_stats(partition)
                if stats is not None:
                    queue_depth += stats.queued_events
                    uncommitted[partition] = stats.last_written_offset - stats.last_committed_offset
        groups, members, consumer_groups, consumer_members = self._group_counts()
        transactions, transactional_ids, pending_offsets = self._transaction_counts()
        return Snapshot(
            requests_in_flight=0 if server is None else server.state.requests_in_flight(),
            connections_open=0 if server is None else len(server.state.connections),
            partitions_by_state=partitions,
            queue_depth=queue_depth,
            uncommitted_offsets=uncommitted,
            committed_offsets=committed_offsets,
            groups_by_state=groups,
            members=members,
            consumer_groups_by_state=consumer_groups,
            consumer_group_members=consumer_members,
            log_failed=self._log_failure() is not None,
            cluster=None if self.cluster is None else self.cluster.gauges(),
            transactions_by_state=transactions,
            transactional_ids=transactional_ids,
            pending_transactional_offsets=pending_offsets,
            transactions=self.transactions.figures(),
        )

    def readiness(self) -> Probe:
        """Ready when every partition this node owns is ACTIVE and the log has not stopped
        (alone, it owns every partition; in a cluster, what its assignment gives it);
        otherwise `reason` says why not."""
        states = self._partition_states()
        cluster = self.cluster
        if cluster is None:
            owned: frozenset[int] = frozenset(
                range(self.log.num_partitions if self.log is not None else 0)
            )
        else:
            owned = cluster.membership.view.mine_owned
        not_active = {
            p: states.get(p, "NOT_LOADED") for p in sorted(owned) if states.get(p) != "ACTIVE"
        }
        failure = self._log_failure()
        reason: str | None = None
        if failure is not None:
            reason = f"the log stopped: {failure}"
        elif self._stop.is_set():
            reason = "shutting down"
        elif cluster is not None and cluster.membership.view.error is not None:
            reason = f"no partition given: {cluster.membership.view.error}"
        elif cluster is not None and cluster.membership.view.generation == NO_GENERATION:
            reason = "joining the cluster: no partition assignment yet"
        elif cluster is not None and not cluster.may_serve():
            reason = "no lease in the cluster: Kafka has not confirmed this node a member lately"
        elif not_active:
            reason = f"{len(not_active)} partitions not ACTIVE"
        elif not owned and cluster is None:
            reason = "0 partitions not ACTIVE"
        ok = reason is None
        detail: dict[str, object] = {
            "ready": ok,
            "partitions": len(states),
            "not_active": not_active,
        }
        if reason is not None:
            detail["reason"] = reason
        return Probe(ok, detail)

    def status(self) -> dict[str, object]:
        groups, members, consumer_groups, consumer_members = self._group_counts()
        states = self._partition_states()
        return {
            "version": __version__,
            "uptime_s": round(time.monotonic() - self.started_monotonic, 3),
            "address": None if self.address is None else f"{self.address[0]}:{self.address[1]}",
            "log": describe_log(self.config),
            "log_failure": self._log_failure(),
            "partitions": {str(p): s for p, s in states.items()},
            "partitions_by_state": {
                s: list(states.values()).count(s) for s in set(states.values())
            },
            "groups_by_state": groups,
            "members": members,
            "consumer_groups_by_state": consumer_groups,
            "consumer_group_members": consumer_members,
            "connections": 0 if self.server is None else len(self.server.state.connections),
            "cluster": None if self.cluster is None else self.cluster.status(),
            "transactions": self._transactions_status(),
            "security": self.security.status(),
        }

    def _transactions_status(self) -> dict[str, object]:
        by_state, transactional_ids, pending_offsets = self._transaction_counts()
        return {
            **self.transactions.status(),
            "transactional_ids": transactional_ids,
            "by_state": by_state,
            "pending_transactional_offsets": pending_offsets,
            "coordinator_epochs": self._coordinator_epochs(),
        }

    def _coordinator_epochs(self) -> dict[str, int]:
        """Each active partition's coordinator epoch (what its markers carry)."""
        runtime = self.runtime
        if runtime is None:
            return {}
        return {
            str(partition): coordinator_epoch(runtime, partition)
            for partition, state in sorted(runtime.partitions().items())
            if state is CoordinatorState.ACTIVE
        }

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully."""
        with stopping_on_signals(self.request_stop):
            try:
                await self.start()
                await self._stop.wait()
                logger.info("shutting down")
            finally:
                await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, answer what is in flight, flush the log, close."""
        timeout_s = self.config.shutdown_timeout_ms / 1000
        if self.consumer_lag is not None:
            await self.consumer_lag.stop()
            self.consumer_lag = None
        if self.ownership is not None:
            await self.ownership.close()
            self.ownership = None
        if self.service is not None:
            # A large request answered in slices would hold the drain up for its seconds.
            self.service.close()
        self.security.close()
        if self.server is not None:
            await self.server.drain(timeout_s)
        await self.transactions.stop()
        await self.consumer_groups.stop()
        if self.commit_check is not None:
            await self.commit_check.stop()
            self.commit_check = None
        if self.partition_catalog is not None:
            await self.partition_catalog.stop()
            self.partition_catalog = None
        await self.security.stop()
        if self.runtime is not None:
            await self.runtime.flush_and_close()
            self.runtime = None
        if self.server is not None:
            await self.server.close()
            self.server = None
        if self.http is not None:
            await self.http.close()
            self.http = None
        if self.cluster is not None:
            # Everything is written: the others may take the partitions over at once.
            await self.cluster.leave()
            self.cluster = None
        if self.log is not None:
            await self.log.close()
            self.log = None
        if self.loop_lag is not None:
            await self.loop_lag.stop()
            self.loop_lag = None
        logger.info("stopped")
