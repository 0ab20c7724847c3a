"""Wiring: the log, the runtime, the service and the listener, and their life cycle."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from coordinator_server import __version__
from coordinator_server.config import CoordinatorConfig
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.runtime.clock import SystemClock
from coordinator_server.runtime.runtime import CoordinatorRuntime, RuntimeConfig
from coordinator_server.server.listener import CoordinatorServer, ServerConfig, ServerState, bind
from coordinator_server.service import GroupCoordinatorService, NodeAddress
from coordinator_server.shard import GroupCoordinatorShard, ShardConfig
from coordinator_server.storage.api import CoordinatorLog

logger = logging.getLogger("coordinator_server")

# The epoch of every partition this process loads. A single node owns all partitions for
# the life of the process, so one epoch suffices; a new process starts over.
LOAD_EPOCH = 1


def build_log(config: CoordinatorConfig) -> CoordinatorLog:
    if config.bootstrap_servers:
        from coordinator_server.storage.kafka import KafkaLog

        return KafkaLog(
            config.bootstrap_servers,
            config.offsets_topic,
            config.offsets_topic_partitions,
            config.offsets_topic_replication_factor,
            request_timeout_ms=config.offsets_commit_timeout_ms,
            max_batch_bytes=config.max_batch_bytes,
        )
    from coordinator_server.storage.sqlite import SqliteLog

    return SqliteLog(config.data_dir / "coordinator.db", config.offsets_topic_partitions)


def describe_log(config: CoordinatorConfig) -> str:
    if config.bootstrap_servers:
        return f"kafka topic {config.offsets_topic} at {config.bootstrap_servers}"
    return f"sqlite in {config.data_dir}"


class CoordinatorApp:
    def __init__(self, config: CoordinatorConfig, log: CoordinatorLog | None = None) -> None:
        """`log` replaces the one the settings name (tests use an in-memory log)."""
        self.config = config
        self.log: CoordinatorLog | None = log
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] | None = None
        self.service: GroupCoordinatorService | None = None
        self.server: CoordinatorServer | None = None
        self.address: tuple[str, int] | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        config = self.config
        started = time.monotonic()
        self.log = log = self.log or build_log(config)
        await log.start()
        num_partitions = log.num_partitions
        shard_config = ShardConfig(
            offsets=OffsetsConfig(offset_metadata_max_bytes=config.offset_metadata_max_bytes)
        )
        self.runtime = runtime = CoordinatorRuntime[GroupCoordinatorShard](
            shard_builder=lambda context: GroupCoordinatorShard(context, shard_config),
            writer=log.writer,
            loader=log.loader,
            clock=SystemClock(),
            config=RuntimeConfig(
                write_timeout_ms=config.offsets_commit_timeout_ms,
                append_linger_ms=config.append_linger_ms,
                max_batch_bytes=config.max_batch_bytes,
                max_queued_events=config.max_queued_events,
            ),
        )
        server_config = ServerConfig(
            host=config.host,
            port=config.port,
            max_frame_bytes=config.max_frame_bytes,
            max_connections=config.max_connections,
            max_inflight_requests=config.max_inflight_requests,
        )
        sock, (host, port) = bind(config.host, config.port)
        self.address = (host, port)
        self.service = service = GroupCoordinatorService(
            runtime,
            num_partitions,
            NodeAddress(config.node_id, config.advertised, port),
            server_version=__version__,
        )
        state = ServerState(
            server_config,
            service.handlers,
            lambda code, message: service.api_versions_response(code, message).to_body(),
        )
        self.server = server = CoordinatorServer(state)
        await server.start(sock)

        # ApiVersions and FindCoordinator answer at once; group requests get
        # COORDINATOR_LOAD_IN_PROGRESS until their partition is ACTIVE.
        for partition in range(num_partitions):
            runtime.schedule_load(partition, LOAD_EPOCH)
        await asyncio.gather(*(runtime.wait_loaded(p) for p in range(num_partitions)))
        logger.info(
            "coordinator-server %s ready on %s:%d (%d partitions loaded in %.2f s, log: %s)",
            __version__,
            host,
            port,
            num_partitions,
            time.monotonic() - started,
            describe_log(config),
        )

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            await self._stop.wait()
            logger.info("shutting down")
        finally:
            await self.shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def shutdown(self) -> None:
        """Stop accepting, answer what is in flight, flush the log, close."""
        timeout_s = self.config.shutdown_timeout_ms / 1000
        if self.server is not None:
            await self.server.drain(timeout_s)
        if self.runtime is not None:
            await self.runtime.flush_and_close()
            self.runtime = None
        if self.server is not None:
            await self.server.close()
            self.server = None
        if self.log is not None:
            await self.log.close()
            self.log = None
        logger.info("stopped")
