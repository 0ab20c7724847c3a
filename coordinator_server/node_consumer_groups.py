"""A node's consumer group protocol (KIP-848): where it reads the data cluster's topics
from, and the service of ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The topics come from the consumers' Kafka cluster (`--lag-bootstrap-servers`, else the log's
`--bootstrap-servers`), read with their topic ids every `--metadata-max-age-ms`, or from
`--group-consumer-topics-file` for a node without one. A node with neither does not serve
the protocol: its ApiVersions leaves both APIs out, as a Kafka broker whose coordinator
does not enable it, and the start says how to enable it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka.errors import KafkaError

from coordinator_server.cluster_topics_file import StaticClusterTopics
from coordinator_server.config import CoordinatorConfig
from coordinator_server.consumer_groups.assignors import ASSIGNORS
from coordinator_server.consumer_groups.heartbeat import (
    NO_CLUSTER_TOPICS,
    ClusterTopics,
    ClusterTopicsSnapshot,
    ClusterTopicsSource,
    ConsumerGroupConfig,
)
from coordinator_server.consumer_groups.migration_policy import ConsumerGroupMigrationPolicy
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.consumer_group_service import ConsumerGroupService
from coordinator_server.service.dispatch import RequestDispatch
from coordinator_server.service.limits import RequestLimits
from coordinator_server.service.routing import Routing
from coordinator_server.shard import GroupShard
from coordinator_server.starting import (
    START_RETRY_BACKOFF_MAX_S,
    START_RETRY_BACKOFF_S,
    StartError,
    start_with_retries,
)
from coordinator_server.storage.kafka.cluster_topics import KafkaClusterTopics

logger = logging.getLogger(__name__)


# How long the start waits for the first read of the data cluster's topics; after it, the
# node serves with none and takes them when a read succeeds (the groups react then).
FIRST_READ_TIMEOUT_S = 10.0


class NodeConsumerGroups:
    def __init__(self, config: CoordinatorConfig) -> None:
        self._config = config
        self.source: ClusterTopicsSource | None = _topics_source(config)
        self.service: ConsumerGroupService | None = None

    def topics(self) -> ClusterTopics:
        """The data cluster's topics as last read (none before the first read)."""
        source = self.source
        return NO_CLUSTER_TOPICS if source is None else source.snapshot()

    async def start(self, stop: asyncio.Event) -> None:
        """Start reading the topics, retrying a data cluster that does not answer yet until
        `stop` is set (StartAbandoned then)."""
        source = self.source
        if source is None:
            logger.info(
                "the consumer group protocol (ConsumerGroupHeartbeat) is not served: the "
                "node knows no data cluster to assign partitions from (set "
                "--lag-bootstrap-servers, the log's --bootstrap-servers, or "
                "--group-consumer-topics-file)"
            )
            return
        try:
            await start_with_retries(
                "the read of the data cluster's topics",
                source.start,
                retriable=(TimeoutError, KafkaError, OSError),
                stop=stop,
                logger=logger,
                backoff_s=START_RETRY_BACKOFF_S,
                backoff_max_s=START_RETRY_BACKOFF_MAX_S,
            )
        except ValueError as error:
            # A topics file that cannot be read as one: waiting does not mend it.
            raise StartError(str(error)) from None
        try:
            await source.wait_ready(FIRST_READ_TIMEOUT_S)
        except TimeoutError:
            logger.warning(
                "the data cluster's topics could not be read in %.0f s: consumer groups are "
                "assigned nothing until they are",
                FIRST_READ_TIMEOUT_S,
            )

    def serve(
        self,
        dispatch: RequestDispatch,
        runtime: CoordinatorRuntime[GroupShard],
        routing: Routing,
        limits: RequestLimits,
        authorizer: RequestAuthorizer | None,
    ) -> None:
        """Answer ConsumerGroupHeartbeat and ConsumerGroupDescribe, when the node knows the
        data cluster's topics."""
        if self.source is None:
            return
        self.service = service = ConsumerGroupService(
            runtime,
            routing,
            limits,
            authorizer,
            topics=self.topics,
            refresh_topics=self.source.refresh_now,
        )
        dispatch.serve_consumer_groups(service.handlers)

    async def stop(self) -> None:
        source = self.source
        if source is not None:
            with contextlib.suppress(Exception):
                await source.stop()


def consumer_group_config(config: CoordinatorConfig) -> ConsumerGroupConfig:
    """The `group.consumer.*` settings as the shards' consumer groups read them."""
    return ConsumerGroupConfig(
        session_timeout_ms=config.group_consumer_session_timeout_ms,
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        assignors={name: ASSIGNORS[name] for name in config.consumer_group_assignors()},
        max_size=config.group_consumer_max_size,
        assignment_interval_ms=config.group_consumer_assignment_interval_ms,
        regex_refresh_interval_ms=config.group_consumer_regex_refresh_interval_ms,
        migration_policy=ConsumerGroupMigrationPolicy.parse(config.group_consumer_migration_policy),
    )


def _topics_source(config: CoordinatorConfig) -> ClusterTopicsSource | None:
    refresh_ms = config.metadata_max_age_ms
    if config.group_consumer_topics_file is not None:
        return StaticClusterTopics(
            config.group_consumer_topics_file,
            refresh_interval_ms=refresh_ms,
            max_topics=config.max_cluster_topics,
        )
    data_cluster = config.data_cluster
    if data_cluster is None:
        return None
    return KafkaClusterTopics(
        data_cluster,
        ClusterTopicsSnapshot.of,
        security=config.kafka_security,
        request_timeout_ms=config.offsets_commit_timeout_ms,
        refresh_interval_ms=refresh_ms,
        max_topics=config.max_cluster_topics,
        internal_topics=(config.offsets_topic,),
    )


__all__ = ["NodeConsumerGroups", "consumer_group_config"]
