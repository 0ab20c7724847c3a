"""SecurityImage: what this node knows of the committed ACLs and SCRAM credentials (Kafka's
AclsImage and ScramImage, as a broker's authorizer and SCRAM mechanisms read them).

Every node keeps one, the owner of the security partition too, fed only by records the log
has committed (`image_loader` reads them): its authorizer decides over `acls`, and its SCRAM
mechanisms find a user's credential through `scram_credential` (the `ScramCredentials` they
are given). A node's image may be behind the log by a round of its reader, never ahead of
what the log holds.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator_protocol.security import SCRAM_MECHANISMS
from coordinator_server.authentication.sasl_server import ScramCredential
from coordinator_server.authorizer.acls import StandardAcl
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.records import (
    AclKey,
    CoordinatorRecord,
    ScramCredentialKey,
    ScramCredentialValue,
)
from coordinator_server.security.acl_control import acl_of_key

__all__ = ["SecurityImage", "SecurityImageBuilder"]

_MECHANISM_NUMBERS = {name: number for number, name in SCRAM_MECHANISMS.items()}


def _credential(value: ScramCredentialValue) -> ScramCredential:
    return ScramCredential(
        salt=value.salt,
        stored_key=value.stored_key,
        server_key=value.server_key,
        iterations=value.iterations,
    )


class SecurityImageBuilder:
    """ACLs and credentials gathered from the security partition's records, in log order:
    a whole image built apart (from the partition's start), then put in place at once."""

    __slots__ = ("acls", "credentials")

    def __init__(self) -> None:
        self.acls: set[StandardAcl] = set()
        self.credentials: dict[tuple[str, int], ScramCredential] = {}

    def apply(self, record: CoordinatorRecord) -> bool:
        """Take one record; False for one of no security record type, or whose ACL no ACL
        can be (codes out of range: no server writes one)."""
        key = record.key
        if type(key) is AclKey:
            acl = acl_of_key(key)
            if acl is None:
                return False
            if record.value is None:
                self.acls.discard(acl)
            else:
                self.acls.add(acl)
            return True
        if type(key) is ScramCredentialKey:
            value = record.value
            if value is None:
                self.credentials.pop((key.user, key.mechanism), None)
            else:
                assert type(value) is ScramCredentialValue
                self.credentials[(key.user, key.mechanism)] = _credential(value)
            return True
        return False


class SecurityImage:
    """The node's committed ACLs (in the StandardAuthorizerData its authorizer decides over)
    and SCRAM credentials (a `ScramCredentials`)."""

    def __init__(self, acls: StandardAuthorizerData | None = None) -> None:
        """`acls`: where the ACLs go, built with the node's super users and its rule for a
        resource without ACLs (None: a plain one). It is changed in place, never replaced,
        so an authorizer holding it sees every change."""
        self.acls = acls if acls is not None else StandardAuthorizerData()
        self._credentials: dict[tuple[str, int], ScramCredential] = {}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of `user` for `mechanism` ("SCRAM-SHA-256"), None without one."""
        number = _MECHANISM_NUMBERS.get(mechanism)
        if number is None:
            return None
        return self._credentials.get((user, number))

    def scram_users(self) -> dict[str, list[str]]:
        """Each user with a credential and its mechanisms' names, for operators and tests
        (never a salt or a key)."""
        users: dict[str, list[str]] = {}
        for user, number in sorted(self._credentials):
            users.setdefault(user, []).append(SCRAM_MECHANISMS[number])
        return users

    def apply(self, records: Iterable[CoordinatorRecord]) -> bool:
        """Take committed records in log order; whether the image changed."""
        changed = False
        credentials = self._credentials
        for record in records:
            key = record.key
            if type(key) is AclKey:
                acl = acl_of_key(key)
                if acl is not None:
                    if record.value is None:
                        changed = self.acls.remove(acl) or changed
                    else:
                        changed = self.acls.add(acl) or changed
            elif type(key) is ScramCredentialKey:
                value = record.value
                if value is None:
                    changed = (
                        credentials.pop((key.user, key.mechanism), None) is not None or changed
                    )
                else:
                    assert type(value) is ScramCredentialValue
                    credential = _credential(value)
                    if credentials.get((key.user, key.mechanism)) != credential:
                        credentials[(key.user, key.mechanism)] = credential
                        changed = True
        return changed

    def replace(self, built: SecurityImageBuilder) -> bool:
        """Become what `built` gathered, changing only what differs; whether anything did."""
        current = set(self.acls)
        changed = False
        for acl in current - built.acls:
            changed = self.acls.remove(acl) or changed
        for acl in built.acls - current:
            changed = self.acls.add(acl) or changed
        if self._credentials != built.credentials:
            self._credentials = dict(built.credentials)
            changed = True
        return changed
