"""ScramControlManager: the SCRAM credentials of the security partition, as Kafka's
controller keeps them.

AlterUserScramCredentials is a write operation; DescribeUserScramCredentials reads the
credentials as of the committed offset and tells a user's mechanisms and iteration counts,
never a salt or a key. The credentials live in a timeline map, so a write whose append fails
leaves no trace. The rules are Kafka's `ScramControlManager` and `ScramImage.describe`:

- a user named twice in one AlterUserScramCredentials (two deletions, two upsertions, or one
  of each, whatever the mechanisms) is refused with DUPLICATE_RESOURCE, and nothing of that
  user changes; an empty user name is UNACCEPTABLE_CREDENTIAL, a mechanism other than
  SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM, iterations outside
  [4096, 16384] UNACCEPTABLE_CREDENTIAL, the deletion of a credential that does not exist
  RESOURCE_NOT_FOUND;
- an upsertion carries the salted password (the client derived it, the password never
  travels); the record keeps what RFC 5802 derives from it, the stored key and the server
  key, never the salted password;
- the answer lists the deletions done, then the upsertions done, then the users refused;
- DescribeUserScramCredentials of no users (or an empty list) describes every user; a user
  asked twice is DUPLICATE_RESOURCE, one without a credential RESOURCE_NOT_FOUND.

Beyond Kafka: an empty salt or salted password, or one over `MAX_SECRET_BYTES`, and a user
name longer than `max_id_length` characters are UNACCEPTABLE_CREDENTIAL, and at most
`max_scram_users` users hold credentials (a new user past it is refused with
POLICY_VIOLATION).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import (
    SCRAM_MECHANISMS,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestDeletion,
    AlterUserScramCredentialsRequestUpsertion,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseResult,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseCredentialInfo,
    DescribeUserScramCredentialsResponseResult,
)
from coordinator_server import defaults
from coordinator_server.authentication.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    credential_from_salted_password,
)
from coordinator_server.records import (
    CoordinatorRecord,
    ScramCredentialValue,
    new_scram_credential_record,
    new_scram_credential_tombstone_record,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

__all__ = ["MAX_SECRET_BYTES", "ScramControlManager", "ScramCredentialsConfig"]

MAX_SECRET_BYTES: Final = 1024
"""The longest salt and salted password taken (a SHA-512 digest is 64 bytes)."""

# Kafka's words, which its clients show.
_DUPLICATE = "A user credential cannot be altered twice in the same request"
_DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "
_DESCRIBE_DUPLICATE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)

UserCredentials = Mapping[int, ScramCredentialValue]
"""A user's credentials by Kafka's mechanism number."""


@dataclass(frozen=True, slots=True)
class ScramCredentialsConfig:
    max_scram_users: int = defaults.MAX_SCRAM_USERS
    max_id_length: int = defaults.MAX_ID_LENGTH


def _refusal(name: str, mechanism: int, max_id_length: int) -> tuple[ErrorCode, str] | None:
    """Kafka's `validateScramUsernameAndMechanism`, and the name's length."""
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if len(name) > max_id_length:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"the user name is longer than {max_id_length} characters",
        )
    if mechanism not in SCRAM_MECHANISMS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _upsertion_refusal(
    upsertion: AlterUserScramCredentialsRequestUpsertion, max_id_length: int
) -> tuple[ErrorCode, str] | None:
    refusal = _refusal(upsertion.name, upsertion.mechanism, max_id_length)
    if refusal is not None:
        return refusal
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt and the salted password must be given"
    if max(len(upsertion.salt), len(upsertion.salted_password)) > MAX_SECRET_BYTES:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"The salt and the salted password are at most {MAX_SECRET_BYTES} bytes",
        )
    return None


class ScramControlManager:
    """The security partition's SCRAM credentials."""

    def __init__(
        self, registry: SnapshotRegistry, config: ScramCredentialsConfig | None = None
    ) -> None:
        self._config = config or ScramCredentialsConfig()
        # Each user's credentials; a value is replaced whole, never changed in place, so
        # that the timeline's history of it stays what it was.
        self._users: TimelineDict[str, UserCredentials] = TimelineDict(registry)

    def num_users(self) -> int:
        return len(self._users)

    def alter_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> CoordinatorResult[AlterUserScramCredentialsResponse]:
        users = self._users
        deletions: dict[str, AlterUserScramCredentialsRequestDeletion] = {}
        upsertions: dict[str, AlterUserScramCredentialsRequestUpsertion] = {}
        refused: dict[str, tuple[ErrorCode, str]] = {}
        for deletion in request.deletions:
            name = deletion.name
            if name in refused:
                continue
            if deletions.pop(name, None) is not None:
                refused[name] = ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE
                continue
            refusal = _refusal(name, deletion.mechanism, self._config.max_id_length)
            held = users.get(name)
            if refusal is None and (held is None or deletion.mechanism not in held):
                refusal = (
                    ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
            if refusal is not None:
                refused[name] = refusal
            else:
                deletions[name] = deletion
        for upsertion in request.upsertions:
            name = upsertion.name
            if name in refused:
                continue
            if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
                refused[name] = ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE
                continue
            refusal = _upsertion_refusal(upsertion, self._config.max_id_length)
            if refusal is not None:
                refused[name] = refusal
            else:
                upsertions[name] = upsertion

        records: list[CoordinatorRecord] = []
        results: list[AlterUserScramCredentialsResponseResult] = []
        for name, deletion in deletions.items():
            records.append(new_scram_credential_tombstone_record(name, deletion.mechanism))
            results.append(AlterUserScramCredentialsResponseResult(user=name))
        room = self._config.max_scram_users - len(users)
        for name, upsertion in upsertions.items():
            if name not in users:
                if room <= 0:
                    refused[name] = (
                        ErrorCode.POLICY_VIOLATION,
                        f"the coordinator holds the credentials of {self._config.max_scram_users} "
                        "users, its most (max-scram-users)",
                    )
                    continue
                room -= 1
            credential = credential_from_salted_password(
                SCRAM_MECHANISMS[upsertion.mechanism],
                upsertion.salt,
                upsertion.salted_password,
                upsertion.iterations,
            )
            records.append(
                new_scram_credential_record(
                    name,
                    upsertion.mechanism,
                    ScramCredentialValue(
                        credential.salt,
                        credential.stored_key,
                        credential.server_key,
                        credential.iterations,
                    ),
                )
            )
            results.append(AlterUserScramCredentialsResponseResult(user=name))
        results.extend(
            AlterUserScramCredentialsResponseResult(user=name, error_code=code, error_message=why)
            for name, (code, why) in refused.items()
        )
        return CoordinatorResult(
            records, AlterUserScramCredentialsResponse(results=results), atomic=True
        )

    def describe_credentials(
        self, request: DescribeUserScramCredentialsRequest, committed_offset: int
    ) -> DescribeUserScramCredentialsResponse:
        """The users' mechanisms and iteration counts as of `committed_offset`."""
        users = self._users
        asked: dict[str, bool] = {}
        if not request.users:
            asked = dict.fromkeys(sorted(users.keys_at(committed_offset)), False)
        else:
            for user in request.users:
                asked[user.name] = user.name in asked
        results: list[DescribeUserScramCredentialsResponseResult] = []
        for name, twice in asked.items():
            if twice:
                results.append(
                    DescribeUserScramCredentialsResponseResult(
                        user=name,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=_DESCRIBE_DUPLICATE + name,
                    )
                )
                continue
            held = users.get_at(name, committed_offset)
            if not held:
                results.append(
                    DescribeUserScramCredentialsResponseResult(
                        user=name,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=_DESCRIBE_MISSING + name,
                    )
                )
                continue
            results.append(
                DescribeUserScramCredentialsResponseResult(
                    user=name,
                    credential_infos=[
                        DescribeUserScramCredentialsResponseCredentialInfo(
                            mechanism=mechanism, iterations=held[mechanism].iterations
                        )
                        for mechanism in sorted(held)
                    ],
                )
            )
        return DescribeUserScramCredentialsResponse(results=results)

    def replay(self, user: str, mechanism: int, value: ScramCredentialValue | None) -> None:
        """A credential record, or its tombstone."""
        users = self._users
        held = users.get(user)
        credentials = dict(held) if held is not None else {}
        if value is None:
            if mechanism not in credentials:
                return
            del credentials[mechanism]
        else:
            credentials[mechanism] = value
        if credentials:
            users[user] = credentials
        else:
            users.pop(user)
