"""Kafka's error codes, from one table, and an exception class per code.

`ErrorCode` is the table: each member carries Kafka's number, whether Kafka marks the error
retriable (its exception extends RetriableException) and a short description. Every code has
one `ApiError` subclass; `error_for_code` builds the right one from a number.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    """Kafka's error codes used by the group and transaction coordinators: (code, retriable,
    description)."""

    retriable: bool
    description: str

    def __new__(cls, code: int, retriable: bool = False, description: str = "") -> ErrorCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member.retriable = retriable
        member.description = description
        return member

    UNKNOWN_SERVER_ERROR = (-1, False, "The server experienced an unexpected error.")
    NONE = (0, False, "")
    OFFSET_OUT_OF_RANGE = (1, False, "The requested offset is out of range.")
    CORRUPT_MESSAGE = (2, True, "The message failed its CRC check or is otherwise corrupt.")
    UNKNOWN_TOPIC_OR_PARTITION = (3, True, "This server does not host this topic-partition.")
    INVALID_FETCH_SIZE = (4, False, "The requested fetch size is invalid.")
    LEADER_NOT_AVAILABLE = (5, True, "There is no leader for this topic-partition.")
    NOT_LEADER_OR_FOLLOWER = (6, True, "This server is not the leader or a follower.")
    REQUEST_TIMED_OUT = (7, True, "The request timed out.")
    BROKER_NOT_AVAILABLE = (8, False, "The broker is not available.")
    REPLICA_NOT_AVAILABLE = (9, True, "The replica is not available.")
    MESSAGE_TOO_LARGE = (10, False, "The request included a message larger than the maximum.")
    STALE_CONTROLLER_EPOCH = (11, False, "The controller moved to another broker.")
    OFFSET_METADATA_TOO_LARGE = (12, False, "The metadata field of the offset is too large.")
    NETWORK_EXCEPTION = (13, True, "The server disconnected before a response was received.")
    COORDINATOR_LOAD_IN_PROGRESS = (14, True, "The coordinator is loading.")
    COORDINATOR_NOT_AVAILABLE = (15, True, "The coordinator is not available.")
    NOT_COORDINATOR = (16, True, "This is not the correct coordinator.")
    INVALID_TOPIC_EXCEPTION = (17, False, "The request attempted an invalid topic.")
    RECORD_LIST_TOO_LARGE = (18, False, "The batch is larger than the maximum segment size.")
    NOT_ENOUGH_REPLICAS = (19, True, "Fewer in-sync replicas than required.")
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (
        20,
        True,
        "Written to fewer in-sync replicas than required.",
    )
    INVALID_REQUIRED_ACKS = (21, False, "The request specified an invalid required acks.")
    ILLEGAL_GENERATION = (22, False, "The generation id is not the current generation.")
    INCONSISTENT_GROUP_PROTOCOL = (23, False, "The group member's protocol is not compatible.")
    INVALID_GROUP_ID = (24, False, "The group id is invalid.")
    UNKNOWN_MEMBER_ID = (25, False, "The member id is not in the current generation.")
    INVALID_SESSION_TIMEOUT = (26, False, "The session timeout is not within the allowed range.")
    REBALANCE_IN_PROGRESS = (27, False, "The group is rebalancing, so a rejoin is needed.")
    INVALID_COMMIT_OFFSET_SIZE = (28, False, "The committing offset data size is not valid.")
    TOPIC_AUTHORIZATION_FAILED = (29, False, "Topic authorization failed.")
    GROUP_AUTHORIZATION_FAILED = (30, False, "Group authorization failed.")
    CLUSTER_AUTHORIZATION_FAILED = (31, False, "Cluster authorization failed.")
    INVALID_TIMESTAMP = (32, False, "The timestamp of the message is out of acceptable range.")
    UNSUPPORTED_SASL_MECHANISM = (33, False, "The broker does not support the SASL mechanism.")
    ILLEGAL_SASL_STATE = (34, False, "Request is not valid given the current SASL state.")
    UNSUPPORTED_VERSION = (35, False, "The version of API is not supported.")
    TOPIC_ALREADY_EXISTS = (36, False, "Topic with this name already exists.")
    INVALID_PARTITIONS = (37, False, "Number of partitions is below 1.")
    INVALID_REPLICATION_FACTOR = (38, False, "Replication factor is below 1 or too large.")
    INVALID_REPLICA_ASSIGNMENT = (39, False, "Replica assignment is invalid.")
    INVALID_CONFIG = (40, False, "Configuration is invalid.")
    NOT_CONTROLLER = (41, True, "This is not the correct controller for this cluster.")
    INVALID_REQUEST = (42, False, "The request is malformed or out of range.")
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, False, "The message format does not support this.")
    POLICY_VIOLATION = (44, False, "Request parameters do not satisfy the configured policy.")
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False, "The broker received an out of order sequence.")
    DUPLICATE_SEQUENCE_NUMBER = (46, False, "The broker received a duplicate sequence number.")
    INVALID_PRODUCER_EPOCH = (47, False, "Producer attempted to produce with an old epoch.")
    INVALID_TXN_STATE = (48, False, "The producer attempted a transactional operation badly.")
    INVALID_PRODUCER_ID_MAPPING = (49, False, "The producer id mapping is invalid.")
    INVALID_TRANSACTION_TIMEOUT = (50, False, "The transaction timeout is invalid.")
    CONCURRENT_TRANSACTIONS = (51, True, "Another transaction update is in progress.")
    TRANSACTION_COORDINATOR_FENCED = (52, False, "The transaction coordinator was fenced.")
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, False, "Transactional id authorization failed.")
    SECURITY_DISABLED = (54, False, "Security features are disabled.")
    OPERATION_NOT_ATTEMPTED = (55, False, "The broker did not attempt to execute this operation.")
    KAFKA_STORAGE_ERROR = (56, True, "Disk error when trying to access log file on the disk.")
    SASL_AUTHENTICATION_FAILED = (58, False, "SASL authentication failed.")
    UNKNOWN_PRODUCER_ID = (59, False, "The broker could not locate the producer metadata.")
    NON_EMPTY_GROUP = (68, False, "The group is not empty.")
    GROUP_ID_NOT_FOUND = (69, False, "The group id does not exist.")
    MEMBER_ID_REQUIRED = (79, False, "A valid member id is required to join the group.")
    GROUP_MAX_SIZE_REACHED = (81, False, "The group has reached its maximum size.")
    FENCED_INSTANCE_ID = (82, False, "The group instance id was fenced by a newer instance.")
    GROUP_SUBSCRIBED_TO_TOPIC = (86, False, "The group is subscribed to the topic.")
    UNSTABLE_OFFSET_COMMIT = (88, True, "There are unstable offsets awaiting resolution.")
    PRODUCER_FENCED = (90, False, "A newer producer with the same transactional id fenced it.")
    TRANSACTIONAL_ID_NOT_FOUND = (105, False, "The transactional id could not be found.")
    RESOURCE_NOT_FOUND = (91, False, "A request referred to a resource that does not exist.")
    DUPLICATE_RESOURCE = (92, False, "A request referred to the same resource twice.")
    UNACCEPTABLE_CREDENTIAL = (93, False, "The credential does not meet the criteria.")
    FENCED_MEMBER_EPOCH = (110, False, "The member epoch is fenced by the group coordinator.")
    UNRELEASED_INSTANCE_ID = (111, False, "The instance id is still used by another member.")
    UNSUPPORTED_ASSIGNOR = (112, False, "The assignor or its version range is not supported.")
    STALE_MEMBER_EPOCH = (113, False, "The member epoch is stale.")
    MISMATCHED_ENDPOINT_TYPE = (114, False, "The request went to an endpoint of the wrong type.")
    UNSUPPORTED_ENDPOINT_TYPE = (115, False, "This endpoint type is not supported yet.")
    TRANSACTION_ABORTABLE = (120, False, "The server encountered an abortable error.")
    INVALID_REGULAR_EXPRESSION = (128, False, "The regular expression is not valid.")


_BY_CODE: dict[int, type[ApiError]] = {}


class ProtocolError(Exception):
    """Bytes that break the wire contract below the message level (framing, envelope)."""


class ApiError(Exception):
    """A Kafka error answered to a client; one subclass per code."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code in _BY_CODE:
            raise TypeError(f"two exception classes for {cls.code.name}")
        _BY_CODE[cls.code] = cls

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.code.description)
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    def __str__(self) -> str:
        text = self.message or self.code.description
        return f"{self.code.name} ({self.code.value}): {text}"


class UnknownServerError(ApiError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(ApiError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(ApiError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(ApiError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidFetchSizeError(ApiError):
    code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(ApiError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(ApiError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(ApiError):
    code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(ApiError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(ApiError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE


class MessageTooLargeError(ApiError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(ApiError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(ApiError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkException(ApiError):
    code = ErrorCode.NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(ApiError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(ApiError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(ApiError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicException(ApiError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(ApiError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(ApiError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(ApiError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(ApiError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(ApiError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(ApiError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(ApiError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(ApiError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(ApiError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(ApiError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(ApiError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(ApiError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(ApiError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(ApiError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(ApiError):
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedSaslMechanismError(ApiError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(ApiError):
    code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(ApiError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(ApiError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(ApiError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(ApiError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(ApiError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(ApiError):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(ApiError):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(ApiError):
    code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(ApiError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(ApiError):
    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(ApiError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(ApiError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(ApiError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(ApiError):
    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(ApiError):
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(ApiError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(ApiError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(ApiError):
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(ApiError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(ApiError):
    code = ErrorCode.SECURITY_DISABLED


class OperationNotAttemptedError(ApiError):
    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class KafkaStorageError(ApiError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class SaslAuthenticationFailedError(ApiError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(ApiError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class NonEmptyGroupError(ApiError):
    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(ApiError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class MemberIdRequiredError(ApiError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class GroupMaxSizeReachedError(ApiError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(ApiError):
    code = ErrorCode.FENCED_INSTANCE_ID


class GroupSubscribedToTopicError(ApiError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class UnstableOffsetCommitError(ApiError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT


class ProducerFencedError(ApiError):
    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdNotFoundError(ApiError):
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class ResourceNotFoundError(ApiError):
    code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(ApiError):
    code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(ApiError):
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class FencedMemberEpochError(ApiError):
    code = ErrorCode.FENCED_MEMBER_EPOCH


class UnreleasedInstanceIdError(ApiError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignorError(ApiError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR


class StaleMemberEpochError(ApiError):
    code = ErrorCode.STALE_MEMBER_EPOCH


class MismatchedEndpointTypeError(ApiError):
    code = ErrorCode.MISMATCHED_ENDPOINT_TYPE


class UnsupportedEndpointTypeError(ApiError):
    code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


class TransactionAbortableError(ApiError):
    code = ErrorCode.TRANSACTION_ABORTABLE


class InvalidRegularExpressionError(ApiError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION


def error_for_code(code: int, message: str | None = None) -> ApiError:
    """The exception for a Kafka error code; an unknown code gives UnknownServerError."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownServerError(message or f"unknown error code {code}")
    return cls(message)


def exception_class(code: ErrorCode) -> type[ApiError]:
    return _BY_CODE[code]
