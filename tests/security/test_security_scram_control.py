"""AlterUserScramCredentials and DescribeUserScramCredentials on the security partition's
shard, with Kafka's ScramControlManager's and ScramImage's rules (the facts of Kafka's
ScramControlManagerTest and ScramImageTest), its limits, and a failed append that leaves
no trace."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from shard_context import ShardTestContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestDeletion,
    AlterUserScramCredentialsRequestUpsertion,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUser,
)
from coordinator_server.records import ScramCredentialKey, ScramCredentialValue
from coordinator_server.security.scram_control import ScramCredentialsConfig
from coordinator_server.shard import ShardConfig
from coordinator_server.storage.api import AppendError

SHA_256, SHA_512 = 1, 2
SALT = b"NaCl-0123456789"


def salted(password: str, mechanism: int = SHA_256, iterations: int = 4096) -> bytes:
    name = "sha256" if mechanism == SHA_256 else "sha512"
    return hashlib.pbkdf2_hmac(name, password.encode(), SALT, iterations)


def upsert(
    name: str, mechanism: int = SHA_256, iterations: int = 4096, password: str = "secret"
) -> AlterUserScramCredentialsRequestUpsertion:
    return AlterUserScramCredentialsRequestUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=SALT,
        salted_password=salted(password, mechanism if mechanism in (1, 2) else 1, 4096),
    )


def delete(name: str, mechanism: int = SHA_256) -> AlterUserScramCredentialsRequestDeletion:
    return AlterUserScramCredentialsRequestDeletion(name=name, mechanism=mechanism)


def alter(
    ctx: ShardTestContext,
    upsertions: list[AlterUserScramCredentialsRequestUpsertion] = (),  # type: ignore[assignment]
    deletions: list[AlterUserScramCredentialsRequestDeletion] = (),  # type: ignore[assignment]
) -> list[tuple[str, int]]:
    answer = ctx.write(
        lambda shard: shard.alter_scram_credentials(
            AlterUserScramCredentialsRequest(upsertions=list(upsertions), deletions=list(deletions))
        )
    )
    return [(result.user, result.error_code) for result in answer.results]


def describe(ctx: ShardTestContext, *users: str) -> dict[str, object]:
    request = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequestUser(name=user) for user in users] or None
    )
    answer = ctx.shard.describe_scram_credentials(request, ctx.registry.committed_offset)
    assert answer.error_code == 0
    return {
        result.user: result.error_code
        or [(info.mechanism, info.iterations) for info in result.credential_infos]
        for result in answer.results
    }


@pytest.fixture
def ctx() -> ShardTestContext:
    return ShardTestContext()


def test_an_upserted_credential_keeps_rfc_5802_keys_and_never_the_salted_password(
    ctx: ShardTestContext,
) -> None:
    assert alter(ctx, [upsert("alice", iterations=8192)]) == [("alice", 0)]
    (record,) = ctx.records_written()
    assert record.key == ScramCredentialKey("alice", SHA_256)
    value = record.value
    assert isinstance(value, ScramCredentialValue)
    salted_password = salted("secret")
    client_key = hmac.new(salted_password, b"Client Key", "sha256").digest()
    assert value.salt == SALT
    assert value.stored_key == hashlib.sha256(client_key).digest()
    assert value.server_key == hmac.new(salted_password, b"Server Key", "sha256").digest()
    assert value.iterations == 8192
    assert salted_password not in ctx.log[0][1]  # type: ignore[operator]


def test_described_once_committed_with_mechanisms_and_iterations_only(
    ctx: ShardTestContext,
) -> None:
    alter(ctx, [upsert("alice"), upsert("bob", SHA_512, 10_000)])
    assert describe(ctx) == {}
    ctx.commit()
    alter(ctx, [upsert("alice", SHA_512, 5000)])
    ctx.commit()
    assert describe(ctx) == {
        "alice": [(SHA_256, 4096), (SHA_512, 5000)],
        "bob": [(SHA_512, 10_000)],
    }
    assert describe(ctx, "bob", "carol", "bob", "alice") == {
        "bob": ErrorCode.DUPLICATE_RESOURCE,
        "carol": ErrorCode.RESOURCE_NOT_FOUND,
        "alice": [(SHA_256, 4096), (SHA_512, 5000)],
    }
    # An empty list is every user, as Kafka's image reads it.
    empty = DescribeUserScramCredentialsRequest(users=[])
    answer = ctx.shard.describe_scram_credentials(empty, ctx.end_offset)
    assert [result.user for result in answer.results] == ["alice", "bob"]


def test_the_answer_words_are_kafkas(ctx: ShardTestContext) -> None:
    request = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequestUser(name=name) for name in ("x", "y", "y")]
    )
    results = ctx.shard.describe_scram_credentials(request, 0).results
    assert results[0].error_message == (
        "Attempt to describe a user credential that does not exist: x"
    )
    assert results[1].error_message == (
        "Cannot describe SCRAM credentials for the same user twice in a single request: y"
    )


@pytest.mark.parametrize(
    ("upsertion", "code", "message"),
    [
        (upsert("", SHA_256), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        (upsert("u", 3), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        (upsert("u", 0), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        (upsert("u", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        (upsert("u", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        (
            AlterUserScramCredentialsRequestUpsertion(
                name="u", mechanism=1, iterations=4096, salt=b"", salted_password=b"x"
            ),
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "must be given",
        ),
        (upsert("u" * 1025), ErrorCode.UNACCEPTABLE_CREDENTIAL, "longer than 1024"),
    ],
)
def test_an_upsertion_kafka_refuses_is_refused_alone(
    ctx: ShardTestContext,
    upsertion: AlterUserScramCredentialsRequestUpsertion,
    code: ErrorCode,
    message: str,
) -> None:
    answer = ctx.write(
        lambda shard: shard.alter_scram_credentials(
            AlterUserScramCredentialsRequest(upsertions=[upsert("ok", iterations=16384), upsertion])
        )
    )
    assert [(r.user, r.error_code) for r in answer.results] == [
        ("ok", 0),
        (upsertion.name, code),
    ]
    assert message in (answer.results[1].error_message or "")
    assert len(ctx.records_written()) == 1


def test_a_user_altered_twice_in_one_request_is_a_duplicate_and_left_alone(
    ctx: ShardTestContext,
) -> None:
    alter(ctx, [upsert("alice"), upsert("bob"), upsert("carol")])
    ctx.commit()
    written = ctx.end_offset
    results = alter(
        ctx,
        # alice: two upsertions of different mechanisms; bob: deleted and upserted; carol:
        # deleted twice; dave: once, alone.
        [upsert("alice"), upsert("alice", SHA_512), upsert("bob"), upsert("dave")],
        [delete("bob"), delete("carol"), delete("carol")],
    )
    # The deletions done, the upsertions done, then the refusals.
    assert results == [
        ("dave", 0),
        ("carol", ErrorCode.DUPLICATE_RESOURCE),
        ("alice", ErrorCode.DUPLICATE_RESOURCE),
        ("bob", ErrorCode.DUPLICATE_RESOURCE),
    ]
    assert [record.key for record in ctx.records_written(written)] == [
        ScramCredentialKey("dave", SHA_256)
    ]


def test_deleting_a_missing_credential_is_resource_not_found(ctx: ShardTestContext) -> None:
    alter(ctx, [upsert("alice")])
    assert alter(ctx, deletions=[delete("alice", SHA_512), delete("nobody"), delete("", 1)]) == [
        ("alice", ErrorCode.RESOURCE_NOT_FOUND),
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND),
        ("", ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ]
    assert alter(ctx, deletions=[delete("alice", 9)]) == [
        ("alice", ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    ]
    assert alter(ctx, deletions=[delete("alice")]) == [("alice", 0)]
    ctx.commit()
    assert describe(ctx, "alice") == {"alice": ErrorCode.RESOURCE_NOT_FOUND}
    assert ctx.shard.managers.scram_credentials.num_users() == 0


def test_new_users_past_max_scram_users_are_a_policy_violation() -> None:
    ctx = ShardTestContext(ShardConfig(scram_credentials=ScramCredentialsConfig(max_scram_users=2)))
    assert alter(ctx, [upsert("a"), upsert("b"), upsert("c")]) == [
        ("a", 0),
        ("b", 0),
        ("c", ErrorCode.POLICY_VIOLATION),
    ]
    # A user that has a credential may have another: it is no new user.
    assert alter(ctx, [upsert("a", SHA_512), upsert("d")]) == [
        ("a", 0),
        ("d", ErrorCode.POLICY_VIOLATION),
    ]


def test_a_failed_append_leaves_no_credential(ctx: ShardTestContext) -> None:
    alter(ctx, [upsert("kept")])
    ctx.commit()
    ctx.fail_append(
        lambda shard: shard.alter_scram_credentials(
            AlterUserScramCredentialsRequest(
                upsertions=[upsert("lost"), upsert("kept", SHA_512)], deletions=[]
            )
        ),
        AppendError(19, "not enough replicas"),
    )
    assert describe(ctx) == {"kept": [(SHA_256, 4096)]}
    # The latest state too: deleting the credential that was never written is refused.
    assert alter(ctx, deletions=[delete("kept", SHA_512)]) == [
        ("kept", ErrorCode.RESOURCE_NOT_FOUND)
    ]
    assert ctx.shard.managers.scram_credentials.num_users() == 1


def test_credentials_are_loaded_back_from_the_log(ctx: ShardTestContext) -> None:
    alter(ctx, [upsert("a"), upsert("b", SHA_512)])
    alter(ctx, [upsert("a", SHA_512, 9000)], [delete("b", SHA_512)])
    ctx.reload()
    assert describe(ctx) == {"a": [(SHA_256, 4096), (SHA_512, 9000)]}
