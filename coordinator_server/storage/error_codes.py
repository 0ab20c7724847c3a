"""Kafka's error codes as the logs meet them: in the brokers' answers (Produce, Fetch,
ListOffsets, Metadata, CreateTopics, FindCoordinator, InitProducerId, SASL), and in
`AppendError`, which carries one to the service to be mapped to what a client gets.

The one place the storage layer takes its error numbers from. Those the wire contract knows
come from its table (`coordinator_protocol.errors.ErrorCode`), as plain ints: a broker's
answer is read as an int and compared with them on every produce response, and an
`AppendError` carries an int. The few that only a broker answers are declared here, outside
that table on purpose: the service passes a code its table knows on to the client (as
Kafka's `Errors.forException` does), so a broker-only code reaching it must stay unknown
there and go on reaching clients as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from typing import Final

from coordinator_protocol.errors import ErrorCode

# Codes of the wire contract's table.
UNKNOWN_SERVER_ERROR: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)
UNKNOWN_TOPIC_OR_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
LEADER_NOT_AVAILABLE: Final = int(ErrorCode.LEADER_NOT_AVAILABLE)
NOT_LEADER_OR_FOLLOWER: Final = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
REQUEST_TIMED_OUT: Final = int(ErrorCode.REQUEST_TIMED_OUT)
REPLICA_NOT_AVAILABLE: Final = int(ErrorCode.REPLICA_NOT_AVAILABLE)
MESSAGE_TOO_LARGE: Final = int(ErrorCode.MESSAGE_TOO_LARGE)
NETWORK_EXCEPTION: Final = int(ErrorCode.NETWORK_EXCEPTION)
COORDINATOR_LOAD_IN_PROGRESS: Final = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
COORDINATOR_NOT_AVAILABLE: Final = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
NOT_COORDINATOR: Final = int(ErrorCode.NOT_COORDINATOR)
NOT_ENOUGH_REPLICAS: Final = int(ErrorCode.NOT_ENOUGH_REPLICAS)
NOT_ENOUGH_REPLICAS_AFTER_APPEND: Final = int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
UNSUPPORTED_SASL_MECHANISM: Final = int(ErrorCode.UNSUPPORTED_SASL_MECHANISM)
ILLEGAL_SASL_STATE: Final = int(ErrorCode.ILLEGAL_SASL_STATE)
TOPIC_ALREADY_EXISTS: Final = int(ErrorCode.TOPIC_ALREADY_EXISTS)
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
DUPLICATE_SEQUENCE_NUMBER: Final = int(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
INVALID_PRODUCER_EPOCH: Final = int(ErrorCode.INVALID_PRODUCER_EPOCH)
INVALID_PRODUCER_ID_MAPPING: Final = int(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
CONCURRENT_TRANSACTIONS: Final = int(ErrorCode.CONCURRENT_TRANSACTIONS)
INVALID_TRANSACTION_TIMEOUT: Final = int(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
CLUSTER_AUTHORIZATION_FAILED: Final = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
SECURITY_DISABLED: Final = int(ErrorCode.SECURITY_DISABLED)
KAFKA_STORAGE_ERROR: Final = int(ErrorCode.KAFKA_STORAGE_ERROR)
SASL_AUTHENTICATION_FAILED: Final = int(ErrorCode.SASL_AUTHENTICATION_FAILED)
# In the table for the transaction APIs; an append that fails with one still answers a group's
# client UNKNOWN_SERVER_ERROR (service/errors.py maps them).
UNKNOWN_PRODUCER_ID: Final = int(ErrorCode.UNKNOWN_PRODUCER_ID)
PRODUCER_FENCED: Final = int(ErrorCode.PRODUCER_FENCED)

# Codes only a broker answers (Kafka's numbers, `org.apache.kafka.common.protocol.Errors`).
FENCED_LEADER_EPOCH: Final = 74
UNKNOWN_LEADER_EPOCH: Final = 75
OFFSET_NOT_AVAILABLE: Final = 78
