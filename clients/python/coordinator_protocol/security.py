"""The bodies of the security APIs of the contract, as msgspec Structs.

Kafka's SASL exchange (SaslHandshake 17, SaslAuthenticate 36), its ACL APIs (DescribeAcls
29, CreateAcls 30, DeleteAcls 31) and its SCRAM credential APIs
(DescribeUserScramCredentials 50, AlterUserScramCredentials 51). The same rules as
`messages` (which registers them with every other API): the fields of Kafka 4.4's newest
version of each schema, in snake_case; requests require what they cannot do without;
responses default every field as Kafka's schema does.

The enums these APIs carry are Kafka's numbers: resource types (2 Topic, 3 Group, 4 Cluster,
5 TransactionalId; 1 ANY in a filter), pattern types (3 LITERAL, 4 PREFIXED; 1 ANY and 2
MATCH in a filter), operations (2 ALL, 3 READ, 4 WRITE, 5 CREATE, 6 DELETE, 7 ALTER,
8 DESCRIBE, 9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS, 11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE;
1 ANY in a filter), permissions (2 DENY, 3 ALLOW; 1 ANY in a filter) and SCRAM mechanisms
(1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
"""

from __future__ import annotations

from typing import ClassVar, Final

import msgspec

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.message_base import Int8, Int16, Int32, Int64, Message

__all__ = [
    "SCRAM_MECHANISMS",
    "SECURITY_MESSAGE_PAIRS",
    "AlterUserScramCredentialsRequest",
    "AlterUserScramCredentialsRequestDeletion",
    "AlterUserScramCredentialsRequestUpsertion",
    "AlterUserScramCredentialsResponse",
    "AlterUserScramCredentialsResponseResult",
    "CreateAclsRequest",
    "CreateAclsRequestCreation",
    "CreateAclsResponse",
    "CreateAclsResponseResult",
    "DeleteAclsRequest",
    "DeleteAclsRequestFilter",
    "DeleteAclsResponse",
    "DeleteAclsResponseFilterResult",
    "DeleteAclsResponseMatchingAcl",
    "DescribeAclsRequest",
    "DescribeAclsResponse",
    "DescribeAclsResponseAcl",
    "DescribeAclsResponseResource",
    "DescribeUserScramCredentialsRequest",
    "DescribeUserScramCredentialsRequestUser",
    "DescribeUserScramCredentialsResponse",
    "DescribeUserScramCredentialsResponseCredentialInfo",
    "DescribeUserScramCredentialsResponseResult",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
]

SCRAM_MECHANISMS: Final = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""Kafka's ScramMechanism numbers and the SASL mechanism each names."""


# SaslHandshake (17)


class SaslHandshakeRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE

    mechanism: str


class SaslHandshakeResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE

    error_code: Int16 = 0
    # The mechanisms the listener enables.
    mechanisms: list[str] = msgspec.field(default_factory=list)


# SaslAuthenticate (36)


class SaslAuthenticateRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE

    auth_bytes: bytes


class SaslAuthenticateResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE

    error_code: Int16 = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    # How long the session may last before the client must authenticate again (KIP-368);
    # 0 when it need not.
    session_lifetime_ms: Int64 = 0


# DescribeAcls (29)


class DescribeAclsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_ACLS

    resource_type_filter: Int8
    resource_name_filter: str | None = None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8
    permission_type: Int8


class DescribeAclsResponseAcl(Message, kw_only=True):
    principal: str = ""
    host: str = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DescribeAclsResponseResource(Message, kw_only=True):
    resource_type: Int8 = 0
    resource_name: str = ""
    pattern_type: Int8 = 3
    acls: list[DescribeAclsResponseAcl] = msgspec.field(default_factory=list)


class DescribeAclsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_ACLS

    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    resources: list[DescribeAclsResponseResource] = msgspec.field(default_factory=list)


# CreateAcls (30)


class CreateAclsRequestCreation(Message, kw_only=True):
    resource_type: Int8
    resource_name: str
    resource_pattern_type: Int8 = 3
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


class CreateAclsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_ACLS

    creations: list[CreateAclsRequestCreation]


class CreateAclsResponseResult(Message, kw_only=True):
    error_code: Int16 = 0
    error_message: str | None = None


class CreateAclsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_ACLS

    throttle_time_ms: Int32 = 0
    results: list[CreateAclsResponseResult] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first creation's error: CreateAcls has no top-level error code."""
        for result in self.results:
            return int(result.error_code)
        return 0


# DeleteAcls (31)


class DeleteAclsRequestFilter(Message, kw_only=True):
    resource_type_filter: Int8
    resource_name_filter: str | None = None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8
    permission_type: Int8


class DeleteAclsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_ACLS

    filters: list[DeleteAclsRequestFilter]


class DeleteAclsResponseMatchingAcl(Message, kw_only=True):
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8 = 0
    resource_name: str = ""
    pattern_type: Int8 = 3
    principal: str = ""
    host: str = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DeleteAclsResponseFilterResult(Message, kw_only=True):
    error_code: Int16 = 0
    error_message: str | None = None
    matching_acls: list[DeleteAclsResponseMatchingAcl] = msgspec.field(default_factory=list)


class DeleteAclsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_ACLS

    throttle_time_ms: Int32 = 0
    filter_results: list[DeleteAclsResponseFilterResult] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first filter's error: DeleteAcls has no top-level error code."""
        for result in self.filter_results:
            return int(result.error_code)
        return 0


# DescribeUserScramCredentials (50)


class DescribeUserScramCredentialsRequestUser(Message, kw_only=True):
    name: str


class DescribeUserScramCredentialsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS

    # None: every user with a credential.
    users: list[DescribeUserScramCredentialsRequestUser] | None = None


class DescribeUserScramCredentialsResponseCredentialInfo(Message, kw_only=True):
    mechanism: Int8 = 0
    iterations: Int32 = 0


class DescribeUserScramCredentialsResponseResult(Message, kw_only=True):
    user: str = ""
    error_code: Int16 = 0
    error_message: str | None = None
    credential_infos: list[DescribeUserScramCredentialsResponseCredentialInfo] = msgspec.field(
        default_factory=list
    )


class DescribeUserScramCredentialsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS

    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    results: list[DescribeUserScramCredentialsResponseResult] = msgspec.field(default_factory=list)


# AlterUserScramCredentials (51)


class AlterUserScramCredentialsRequestDeletion(Message, kw_only=True):
    name: str
    mechanism: Int8


class AlterUserScramCredentialsRequestUpsertion(Message, kw_only=True):
    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    # Hi(password, salt, iterations) of RFC 5802: the client derives it, so the password
    # never travels and is never stored.
    salted_password: bytes


class AlterUserScramCredentialsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ALTER_USER_SCRAM_CREDENTIALS

    deletions: list[AlterUserScramCredentialsRequestDeletion] = msgspec.field(default_factory=list)
    upsertions: list[AlterUserScramCredentialsRequestUpsertion] = msgspec.field(
        default_factory=list
    )


class AlterUserScramCredentialsResponseResult(Message, kw_only=True):
    user: str = ""
    error_code: Int16 = 0
    error_message: str | None = None


class AlterUserScramCredentialsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ALTER_USER_SCRAM_CREDENTIALS

    throttle_time_ms: Int32 = 0
    results: list[AlterUserScramCredentialsResponseResult] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first user's error: AlterUserScramCredentials has no top-level error code."""
        for result in self.results:
            return int(result.error_code)
        return 0


SECURITY_MESSAGE_PAIRS: Final = (
    (SaslHandshakeRequest, SaslHandshakeResponse),
    (SaslAuthenticateRequest, SaslAuthenticateResponse),
    (DescribeAclsRequest, DescribeAclsResponse),
    (CreateAclsRequest, CreateAclsResponse),
    (DeleteAclsRequest, DeleteAclsResponse),
    (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
)
"""(request, response) of each security API, which `messages` registers."""
