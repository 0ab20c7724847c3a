"""WriteTxnMarkers (api key 27) requests and responses as aiokafka structs, so
that aiokafka's client negotiates, frames and answers them like its own requests.

Kafka 4 serves versions 1 and 2, both flexible (compact strings and arrays, tagged fields).
Version 2 (KIP-1228) only adds each marker's TransactionVersion; we send version 1, whose
markers the broker takes as transaction version 0/1 markers: the kind a producer that
speaks Produce v11 or older writes records for (see `coordinator_server.markers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from coordinator_protocol.api_keys import ApiKey

__all__ = [
    "WRITE_TXN_MARKERS_API_KEY",
    "WRITE_TXN_MARKERS_VERSION",
    "KafkaWriteTxnMarkersRequest",
    "MarkerEntry",
    "read_marker_results",
]

WRITE_TXN_MARKERS_API_KEY: Final = int(ApiKey.WRITE_TXN_MARKERS)
# The version we send (see above for why not 2).
WRITE_TXN_MARKERS_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class MarkerEntry:
    """One transaction's marker for some partitions of one broker (Kafka's `TxnMarkerEntry`)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: dict[str, list[int]]


class WriteTxnMarkersResponse_v1(Response):  # type: ignore[misc]
    API_KEY = WRITE_TXN_MARKERS_API_KEY
    API_VERSION = WRITE_TXN_MARKERS_VERSION
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        (
                            "partitions",
                            CompactArray(
                                ("partition_index", Int32),
                                ("error_code", Int16),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class WriteTxnMarkersRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = WRITE_TXN_MARKERS_API_KEY
    API_VERSION = WRITE_TXN_MARKERS_VERSION
    RESPONSE_TYPE = WriteTxnMarkersResponse_v1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                ("transaction_result", Boolean),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("partition_indexes", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("coordinator_epoch", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


WriteTxnMarkersRequestStruct: TypeAlias = WriteTxnMarkersRequest_v1


class KafkaWriteTxnMarkersRequest(Request[WriteTxnMarkersRequestStruct]):  # type: ignore[misc]
    """The markers of one request: several transactions' markers to one broker."""

    API_KEY = WRITE_TXN_MARKERS_API_KEY

    def __init__(self, markers: list[MarkerEntry]) -> None:
        self.markers = markers

    def build(
        self, request_struct_class: type[WriteTxnMarkersRequestStruct]
    ) -> WriteTxnMarkersRequestStruct:
        return request_struct_class(
            [
                (
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.committed,
                    [
                        (topic, list(partitions), {})
                        for topic, partitions in marker.partitions.items()
                    ],
                    marker.coordinator_epoch,
                    {},
                )
                for marker in self.markers
            ],
            {},
        )


def read_marker_results(response: Any) -> dict[int, dict[tuple[str, int], int]]:
    """The error code of every partition a WriteTxnMarkersResponse answers, per producer id.

    Raises ValueError on an answer that is not one (so that the caller retries it whole)."""
    results: dict[int, dict[tuple[str, int], int]] = {}
    try:
        for producer_id, topics, _tags in response.markers:
            errors = results.setdefault(int(producer_id), {})
            for name, partitions, _topic_tags in topics:
                for partition, error_code, _partition_tags in partitions:
                    errors[(str(name), int(partition))] = int(error_code)
    except (AttributeError, TypeError, ValueError) as error:
        raise ValueError(f"not a WriteTxnMarkersResponse: {error!r}") from error
    return results
