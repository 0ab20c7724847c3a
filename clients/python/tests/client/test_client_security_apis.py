"""CoordinatorClient's security APIs against a scripted server: ACLs and SCRAM credentials
sent to any node, their retries and errors, and the SCRAM credential derived by the client
(Hi() of RFC 5802) so that the password never goes on the wire."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from client_fake_server import FakeCoordinator, Received

from coordinator_client import CoordinatorClient
from coordinator_client.rpc.sasl import (
    ScramSaslClient,
    new_scram_salt,
    salted_password,
    scram_mechanism_number,
    scram_upsertion,
)
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request
from coordinator_protocol.errors import (
    ResourceNotFoundError,
    SecurityDisabledError,
    UnacceptableCredentialError,
)
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestDeletion,
    CreateAclsRequest,
    CreateAclsRequestCreation,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUser,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def server() -> AsyncIterator[FakeCoordinator]:
    async with FakeCoordinator() as fake:
        yield fake


def client_for(server: FakeCoordinator) -> CoordinatorClient:
    return CoordinatorClient(server.bootstrap, retry_backoff_ms=10, request_timeout_ms=5000)


ACL = {
    "principal": "User:alice",
    "host": "*",
    "operation": 3,
    "permission_type": 3,
}


async def test_acls_are_created_described_and_deleted_at_a_bootstrap_server(
    server: FakeCoordinator,
) -> None:
    loading = [True]

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.CREATE_ACLS:
            if loading[0]:
                loading[0] = False
                return {"results": [{"error_code": 14, "error_message": None}]}
            return {"results": [{"error_code": 0} for _ in received.body["creations"]]}
        if received.api_key == ApiKey.DESCRIBE_ACLS:
            return {
                "error_code": 0,
                "resources": [
                    {
                        "resource_type": 3,
                        "resource_name": "orders",
                        "pattern_type": 3,
                        "acls": [ACL],
                    }
                ],
            }
        if received.api_key == ApiKey.DELETE_ACLS:
            return {
                "filter_results": [
                    {
                        "error_code": 0,
                        "matching_acls": [{"resource_type": 3, "resource_name": "orders", **ACL}],
                    }
                ]
            }
        return None

    server.handler = handle
    creation = CreateAclsRequestCreation(
        resource_type=3, resource_name="orders", principal="User:alice", host="*",
        operation=3, permission_type=3,
    )  # fmt: skip
    async with client_for(server) as client:
        created = await client.create_acls(CreateAclsRequest(creations=[creation]))
        described = await client.describe_acls(
            DescribeAclsRequest(resource_type_filter=3, operation=1, permission_type=1)
        )
        deleted = await client.delete_acls(
            DeleteAclsRequest(
                filters=[
                    DeleteAclsRequestFilter(
                        resource_type_filter=3,
                        resource_name_filter="orders",
                        operation=1,
                        permission_type=1,
                    )
                ]
            )
        )
    assert [r.error_code for r in created.results] == [0]
    # COORDINATOR_LOAD_IN_PROGRESS was retried.
    assert len(server.requests(ApiKey.CREATE_ACLS)) == 2
    (resource,) = described.resources
    assert (resource.resource_name, resource.acls[0].principal) == ("orders", "User:alice")
    assert deleted.filter_results[0].matching_acls[0].resource_name == "orders"
    (describe,) = server.requests(ApiKey.DESCRIBE_ACLS)
    assert describe.body["resource_name_filter"] is None


async def test_a_server_without_an_authorizer_is_raised_for_describe(
    server: FakeCoordinator,
) -> None:
    server.handler = lambda received: {
        "error_code": 54,
        "error_message": "No Authorizer is configured.",
    }
    async with client_for(server) as client:
        with pytest.raises(SecurityDisabledError, match="No Authorizer"):
            await client.describe_acls(
                DescribeAclsRequest(resource_type_filter=1, operation=1, permission_type=1)
            )
        answer = await client.describe_acls(
            DescribeAclsRequest(resource_type_filter=1, operation=1, permission_type=1),
            raise_on_error=False,
        )
    assert answer.error_code == 54


async def test_credentials_are_described_and_altered_with_errors_per_user(
    server: FakeCoordinator,
) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            return {
                "error_code": 0,
                "results": [
                    {
                        "user": "alice",
                        "error_code": 0,
                        "credential_infos": [{"mechanism": 1, "iterations": 8192}],
                    },
                    {"user": "nobody", "error_code": 91, "error_message": "no credential"},
                ],
            }
        if received.api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            return {
                "results": [
                    {"user": "alice", "error_code": 0},
                    {"user": "bob", "error_code": 93, "error_message": "too few iterations"},
                ]
            }
        return None

    server.handler = handle
    async with client_for(server) as client:
        every = await client.describe_user_scram_credentials()
        with pytest.raises(ResourceNotFoundError, match="no credential"):
            await client.describe_user_scram_credentials(
                DescribeUserScramCredentialsRequest(
                    users=[DescribeUserScramCredentialsRequestUser(name="nobody")]
                ),
                raise_on_error=True,
            )
        request = AlterUserScramCredentialsRequest(
            deletions=[AlterUserScramCredentialsRequestDeletion(name="alice", mechanism=2)],
            upsertions=[scram_upsertion("bob", "SCRAM-SHA-256", "pw", iterations=1024)],
        )
        altered = await client.alter_user_scram_credentials(request)
        with pytest.raises(UnacceptableCredentialError, match="too few iterations"):
            await client.alter_user_scram_credentials(request, raise_on_error=True)
    assert every.results[0].credential_infos[0].iterations == 8192
    assert server.requests(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)[0].body["users"] is None
    assert [r.error_code for r in altered.results] == [0, 93]


def test_the_upsertion_carries_hi_of_the_password_never_the_password() -> None:
    password = "correct horse battery staple"
    upsertion = scram_upsertion("alice", "scram-sha-512", password, iterations=4096)
    assert upsertion.mechanism == scram_mechanism_number("SCRAM-SHA-512") == 2
    assert upsertion.iterations == 4096
    assert upsertion.salted_password == hashlib.pbkdf2_hmac(
        "sha512", password.encode(), upsertion.salt, 4096
    )
    request = AlterUserScramCredentialsRequest(upsertions=[upsertion])
    wire = encode_request(RequestHeader(51, 0, 1, "test"), request)
    assert password.encode() not in wire


def test_a_new_salt_is_kafkas_base36_digits_of_130_random_bits() -> None:
    salts = {new_scram_salt() for _ in range(50)}
    assert len(salts) == 50
    for salt in salts:
        assert re.fullmatch(rb"[0-9a-z]{1,26}", salt)
    assert max(len(salt) for salt in salts) >= 24


def test_the_scram_client_follows_rfc_7677s_example() -> None:
    """RFC 7677, section 3: user "user", password "pencil"."""
    client = ScramSaslClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    final = client.evaluate_challenge(f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode())
    assert final == (f"c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    assert not client.complete
    assert client.evaluate_challenge(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.complete
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        salted_password("SCRAM-SHA-1", "pencil", b"salt", 4096)


async def test_not_controller_and_request_timed_out_are_asked_again(
    server: FakeCoordinator,
) -> None:
    """While the node holding the ACLs and credentials loads or moves (NOT_CONTROLLER), or
    none answers for it (REQUEST_TIMED_OUT), any node answers so: the call asks again."""
    answers = iter([41, 7, 0])

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            return {"results": [{"user": "alice", "error_code": next(answers)}]}
        return None

    server.handler = handle
    request = AlterUserScramCredentialsRequest(
        upsertions=[scram_upsertion("alice", "SCRAM-SHA-256", "pw")]
    )
    async with client_for(server) as client:
        altered = await client.alter_user_scram_credentials(request, raise_on_error=True)
    assert altered.results[0].error_code == 0
    sent = server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    assert len(sent) == 3
    # The same credential each time: one salt, one salted password.
    assert len({bytes(r.body["upsertions"][0]["salt"]) for r in sent}) == 1
