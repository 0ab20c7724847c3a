"""The start-up check of a Kafka cluster for transactions coordinated outside it: every
broker must have `transaction.partition.verification.enable=false` and serve
WriteTxnMarkers v1 (see `coordinator_server.markers` for why).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import ApiVersionRequest

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.request import (
    WRITE_TXN_MARKERS_API_KEY,
    WRITE_TXN_MARKERS_VERSION,
)
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = [
    "VERIFICATION_SETTING",
    "KafkaTransactionsCheckError",
    "KafkaTransactionsCheckUnanswered",
    "check_kafka_for_transactions",
]

VERIFICATION_SETTING = "transaction.partition.verification.enable"

_HOW_TO_SET = (
    f"set {VERIFICATION_SETTING}=false on every broker: for the whole cluster at once with "
    f"`kafka-configs --bootstrap-server <broker> --alter --entity-type brokers "
    f"--entity-default --add-config {VERIFICATION_SETTING}=false` (dynamic, no restart), or "
    "in each broker's server.properties. With it on, the brokers ask their own transaction "
    "coordinator about our transactions, which it does not know, and refuse their records"
)


class KafkaTransactionsCheckError(Exception):
    """The cluster cannot take transactions coordinated outside it, and why (with how to
    change it), or it could not be asked."""


class KafkaTransactionsCheckUnanswered(KafkaTransactionsCheckError):
    """The cluster could not be asked (unreachable, slow): asking again may answer."""


async def check_kafka_for_transactions(
    bootstrap_servers: str,
    *,
    security: KafkaSecurity | None = None,
    client_id: str = "coordinator-server-check",
    timeout_s: float = 30.0,
) -> None:
    """Ask every broker of the cluster (DescribeConfigs, ApiVersions) whether it can take
    our transactions. Raises KafkaTransactionsCheckError saying which broker cannot and
    how to change it, or that the cluster could not be asked within `timeout_s`."""
    options = (security or KafkaSecurity()).aiokafka_options()
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, client_id=client_id, **options)
    forbid_auto_topic_creation(client)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        request_timeout_ms=int(timeout_s * 1000),
        **options,
    )
    forbid_auto_topic_creation(admin._client)
    try:
        await asyncio.wait_for(_check(client, admin), timeout_s)
    except (KafkaError, OSError, TimeoutError) as error:
        raise KafkaTransactionsCheckUnanswered(
            f"cannot check the Kafka cluster at {bootstrap_servers} for transactions: {error!r}"
        ) from error
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
        with contextlib.suppress(Exception):
            await client.close()


async def _check(client: AIOKafkaClient, admin: AIOKafkaAdminClient) -> None:
    await client.bootstrap()
    await admin.start()
    brokers = sorted(node.nodeId for node in client.cluster.brokers())
    if not brokers:
        raise KafkaTransactionsCheckError("the Kafka cluster lists no brokers")
    problems: list[str] = []
    for node_id in brokers:
        response = await client.send(node_id, ApiVersionRequest())
        versions = {int(key): (int(low), int(high)) for key, low, high, *_ in response.api_versions}
        low, high = versions.get(WRITE_TXN_MARKERS_API_KEY, (0, -1))
        if not low <= WRITE_TXN_MARKERS_VERSION <= high:
            served = f"v{low} to v{high}" if high >= 0 else "none"
            problems.append(
                f"broker {node_id} does not serve WriteTxnMarkers v{WRITE_TXN_MARKERS_VERSION} "
                f"(it serves {served}; Apache Kafka 2.8 to 4.x do)"
            )
    responses = await admin.describe_configs(
        [
            ConfigResource(ConfigResourceType.BROKER, str(node_id), {VERIFICATION_SETTING: None})
            for node_id in brokers
        ]
    )
    values = _setting_values(responses)
    for node_id in brokers:
        value = values.get(str(node_id))
        if value is None:
            problems.append(f"broker {node_id} did not say what {VERIFICATION_SETTING} is")
        elif value.strip().lower() != "false":
            problems.append(f"broker {node_id} has {VERIFICATION_SETTING}={value}")
    if any(VERIFICATION_SETTING in problem for problem in problems):
        problems.append(_HOW_TO_SET)
    if problems:
        raise KafkaTransactionsCheckError(
            "the Kafka cluster cannot take transactions coordinated outside it: "
            + "; ".join(problems)
        )


def _setting_values(responses: list[Any]) -> dict[str, str | None]:
    """The setting's value per broker id (a string), from DescribeConfigs responses; a
    resource answered with an error is left out."""
    values: dict[str, str | None] = {}
    for response in responses:
        for error_code, error_message, _type, name, entries in response.resources:
            if error_code != ErrorCode.NONE:
                raise KafkaTransactionsCheckError(
                    f"DescribeConfigs of broker {name} answered error {error_code}: {error_message}"
                )
            for entry in entries:
                if entry[0] == VERIFICATION_SETTING:
                    values[str(name)] = None if entry[1] is None else str(entry[1])
    return values
