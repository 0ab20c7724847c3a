"""Metadata requests that never create a topic, for every aiokafka client the project makes.

A broker that allows it (`auto.create.topics.enable`, true by Kafka's default) creates any
topic a MetadataRequest names unless the request forbids it: aiokafka's MetadataRequest
allows it from v4 on, and versions before 4 cannot forbid it at all. A tool that only reads
(the offsets of a group, a reset's plan, the history's lag) would then turn a mistyped topic
name into a real, empty topic, and a reader of the log would serve an empty log as if it were
the real one.

So the project sends `MetadataRequestWithoutAutoCreation` (v4 or later, the flag false; a
broker too old for v4 fails the request instead of creating a topic), and every aiokafka
client it makes, its consumers' and producers' too, goes through
`forbid_auto_topic_creation`: the client's background refresh (`_metadata_update`, which
aiokafka runs for the topics a consumer is assigned or a producer sends to) then asks with
that request. A topic that does not exist is then reported as missing by whoever asked.

aiokafka has no option for this (its consumer's `allow.auto.create.topics` is Java's only), so
the refresh is aiokafka 0.14's own, with the one request changed; the dependency is bounded to
the version it was taken from.
"""

from __future__ import annotations

import logging
import random
import types
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaError
from aiokafka.protocol.api import Request
from aiokafka.protocol.metadata import MetadataRequest_v4, MetadataRequest_v5

__all__ = ["MetadataRequestWithoutAutoCreation", "forbid_auto_topic_creation"]

log = logging.getLogger(__name__)


class MetadataRequestWithoutAutoCreation(
    Request[MetadataRequest_v4 | MetadataRequest_v5]  # type: ignore[misc]
):
    """A MetadataRequest that never creates the topics it names (None: every topic): only the
    versions that can say so, so that a broker too old for them fails the request instead of
    creating one."""

    API_KEY = 3

    def __init__(self, topics: list[str] | None) -> None:
        self._topics = topics

    def build(
        self, request_struct_class: type[MetadataRequest_v4 | MetadataRequest_v5]
    ) -> MetadataRequest_v4 | MetadataRequest_v5:
        return request_struct_class(self._topics, False)


def forbid_auto_topic_creation(client: AIOKafkaClient) -> AIOKafkaClient:
    """Make `client`'s metadata refreshes forbid topic creation (before it starts); returns
    it. For a consumer or an admin client pass its `_client`, for a producer its `client`."""
    client._metadata_update = types.MethodType(_metadata_update, client)
    return client


async def _metadata_update(
    self: AIOKafkaClient, cluster_metadata: ClusterMetadata, topics: Any
) -> bool:
    # aiokafka 0.14's AIOKafkaClient._metadata_update, asking without auto-creation.
    request = MetadataRequestWithoutAutoCreation(list(topics) if topics else None)
    node_ids: list[Any] = [broker.nodeId for broker in self.cluster.brokers()]
    bootstrap_id = ("bootstrap", ConnectionGroup.DEFAULT)
    if bootstrap_id in self._conns:
        node_ids.append("bootstrap")
    random.shuffle(node_ids)
    for node_id in node_ids:
        conn = await self._get_conn(node_id)
        if conn is None:
            continue
        try:
            metadata = await conn.send(request)
        except (TimeoutError, KafkaError) as error:
            # DEBUG, as the failure below: the client asks again by itself every
            # retry_backoff_ms (aiokafka said so at WARNING and ERROR, ten lines a second
            # while a broker is away), and whoever waits for the metadata reports it once.
            log.debug("Unable to request metadata from node with id %s: %r", node_id, error)
            continue
        # No brokers in the answer: the cluster is not ready; keep what is known.
        if not metadata.brokers:
            return False
        cluster_metadata.update_metadata(metadata)
        if bootstrap_id in self._conns and len(self.cluster.brokers()):
            self._conns.pop(bootstrap_id).close()
        break
    else:
        log.debug("Unable to update metadata from %s", node_ids)
        cluster_metadata.failed_update(None)
        return False
    return True
