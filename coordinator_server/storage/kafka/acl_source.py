"""The data cluster's own ACLs as the coordinator's (`--authorizer kafka`): a
`StandardAuthorizerData` kept equal to what the Kafka cluster's authorizer holds, so that one
set of ACLs, written with `kafka-acls.sh` on the data cluster, governs a team's topics and its
groups on both.

Every refresh interval one broker of the data cluster is asked for every ACL (DescribeAcls
with the ANY filter); the ACLs of the resource types the coordinator checks (Topic, Group,
Cluster, TransactionalId) replace the data's, as a difference: only the ACLs added or removed
since the last answer touch the authorizer's indexes, all at once between two turns of the
event loop (a decision sees the old set or the new, never half of each), and the change
listener (the decision cache's `acls_changed`) runs only when something changed. ACLs of the
other resource types (DelegationToken, User) are not the coordinator's to check and are left
out.

Stale but never empty by accident: a refresh that fails (no broker answers, the cluster has
no authorizer and answers SECURITY_DISABLED, our principal may not describe the cluster and
gets CLUSTER_AUTHORIZATION_FAILED, an answer with more ACLs than `max_acls` or with an ACL
this coordinator cannot read) changes nothing: the ACLs of the last good answer stay in force
until a refresh succeeds, and a partial set, which could allow or deny wrongly, is never
applied. Each failure is logged with what to fix, once until the failure changes (or a
refresh succeeds, which is logged too), and retried with a doubling back-off.

DescribeAcls goes out at v1 (the versions aiokafka knows are 0 and 1; Kafka 4 answers 1 to
3; v1 carries the pattern types, and the resource types it lacks are not the coordinator's).
aiokafka's request struct is sent as it is, but its answer is kept undecoded
(`UndecodedDescribeAclsResponse`) and read here, `ACLS_PER_SLICE` ACLs at a time with the
event loop free between slices: aiokafka decodes a whole answer in one go on the event loop,
about 0.45 s for 100,000 ACLs, which would stall every request the node serves on each
refresh. The ACLs read are compared with those in force as tuples of codes and strings, and
only the new ones become `StandardAcl`s: a refresh of 20,000 unchanged ACLs costs about
35 ms of CPU, in steps of 2 ms at most. The data's ACLs are this source's alone to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any, Final

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from aiokafka.protocol.admin import DescribeAclsRequest_v1, DescribeAclsResponse_v1
from aiokafka.protocol.api import Request

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.errors import ErrorCode
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.storage.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    SECURITY_DISABLED,
)
from coordinator_server.storage.kafka.security import KafkaSecurity, KafkaSecurityError

__all__ = [
    "CHECKED_RESOURCE_TYPES",
    "DescribeAclsAnswer",
    "DescribeEveryAcl",
    "DescribedAcl",
    "KafkaAclSource",
    "KafkaAclsError",
    "UndecodedDescribeAclsResponse",
    "described_acl",
    "standard_acl",
]

log = logging.getLogger(__name__)

CHECKED_RESOURCE_TYPES: Final = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
"""The resource types whose ACLs the coordinator's checks read; the others are left out."""

ACLS_PER_SLICE: Final = 1000
"""ACLs read from an answer between two turns of the event loop (a few milliseconds)."""

DescribedAcl = tuple[int, str, int, str, str, int, int]
"""One ACL of a DescribeAcls answer, by Kafka's codes: (resource type, resource name, pattern
type, principal, host, operation, permission type)."""

_CHECKED_CODES: Final = frozenset(int(t) for t in CHECKED_RESOURCE_TYPES)
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ANY = 1


class UndecodedDescribeAclsResponse(DescribeAclsResponse_v1):  # type: ignore[misc]
    """A DescribeAcls v1 response's body, kept as bytes for `DescribeAclsAnswer` to read in
    slices (aiokafka would decode it whole as it arrives)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    @classmethod
    def decode(cls, data: BytesIO | bytes) -> UndecodedDescribeAclsResponse:
        return cls(data if isinstance(data, bytes) else data.read())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.payload)} bytes)"


class DescribeEveryAclV1(DescribeAclsRequest_v1):  # type: ignore[misc]
    """aiokafka's DescribeAcls v1 request, its answer left undecoded."""

    RESPONSE_TYPE = UndecodedDescribeAclsResponse


class DescribeEveryAcl(Request[DescribeEveryAclV1]):  # type: ignore[misc]
    """DescribeAcls with the ANY filter: every ACL of every resource, pattern type, principal,
    host, operation and permission."""

    API_KEY = 29

    def build(self, request_struct_class: type[DescribeEveryAclV1]) -> DescribeEveryAclV1:
        # resource type, name, pattern type, principal, host, operation, permission: ANY or
        # null, which matches anything.
        return request_struct_class(_ANY, None, _ANY, None, None, _ANY, _ANY)


class DescribeAclsAnswer:
    """A DescribeAcls v1 response body: its error code and message at once, its ACLs as
    `acls()` reads them. Raises ValueError on an answer cut short or malformed."""

    __slots__ = ("_data", "_offset", "error_code", "error_message")

    def __init__(self, payload: bytes) -> None:
        self._data = payload
        self._offset = 4  # throttle_time_ms
        try:
            self.error_code = self._int16()
            self.error_message = self._string()
        except struct.error as error:
            raise ValueError(f"a DescribeAcls answer cut short: {error}") from None

    def acls(self) -> Iterator[DescribedAcl]:
        """Every ACL of the answer, in its order, read as it is iterated. Each distinct
        name, principal and host is one string, however many ACLs repeat it."""
        # One function, its reads inlined: about 1 microsecond an ACL, where a call per
        # field took 2.5.
        data = self._data
        size = len(data)
        offset = self._offset
        unpack16 = _INT16.unpack_from
        unpack32 = _INT32.unpack_from
        strings: dict[bytes, str] = {}
        try:
            (resources,) = unpack32(data, offset)
            offset += 4
            for _ in range(resources):
                resource_type = data[offset]
                (length,) = unpack16(data, offset + 1)
                offset += 3
                end = offset + length
                if length < 0 or end > size:
                    raise ValueError("a null or cut resource name")
                raw = data[offset:end]
                resource_name = strings.get(raw)
                if resource_name is None:
                    resource_name = strings[raw] = raw.decode()
                pattern_type = data[end]
                (count,) = unpack32(data, end + 1)
                offset = end + 5
                for _ in range(count):
                    (length,) = unpack16(data, offset)
                    offset += 2
                    end = offset + length
                    if length < 0 or end > size:
                        raise ValueError("a null or cut principal")
                    raw = data[offset:end]
                    principal = strings.get(raw)
                    if principal is None:
                        principal = strings[raw] = raw.decode()
                    (length,) = unpack16(data, end)
                    offset = end + 2
                    end = offset + length
                    if length < 0 or end > size:
                        raise ValueError("a null or cut host")
                    raw = data[offset:end]
                    host = strings.get(raw)
                    if host is None:
                        host = strings[raw] = raw.decode()
                    operation = data[end]
                    permission = data[end + 1]
                    offset = end + 2
                    # Kafka's codes are INT8: read unsigned above, signed here.
                    yield (
                        resource_type - 256 if resource_type > 127 else resource_type,
                        resource_name,
                        pattern_type - 256 if pattern_type > 127 else pattern_type,
                        principal,
                        host,
                        operation - 256 if operation > 127 else operation,
                        permission - 256 if permission > 127 else permission,
                    )
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"a DescribeAcls answer cut short or malformed: {error}") from None

    def _int16(self) -> int:
        (value,) = _INT16.unpack_from(self._data, self._offset)
        self._offset += 2
        return int(value)

    def _string(self) -> str | None:
        length = self._int16()
        if length < 0:
            return None
        start = self._offset
        end = start + length
        if end > len(self._data):
            raise struct.error(f"a string of {length} bytes past the end")
        self._offset = end
        return self._data[start:end].decode()


def standard_acl(described: DescribedAcl) -> StandardAcl | None:
    """The ACL as the coordinator keeps it; None for a resource type it does not check.
    Raises ValueError for an ACL of a checked resource type whose codes it cannot read (a
    newer Kafka's): leaving it out could allow what it denies."""
    resource_type, name, pattern_type, principal, host, operation, permission = described
    if resource_type not in CHECKED_RESOURCE_TYPES:
        return None
    try:
        pattern = PatternType(pattern_type)
        acl_operation = AclOperation(operation)
        acl_permission = AclPermissionType(permission)
    except ValueError:
        pattern = PatternType.UNKNOWN
        acl_operation = AclOperation.UNKNOWN
        acl_permission = AclPermissionType.UNKNOWN
    if (
        pattern not in (PatternType.LITERAL, PatternType.PREFIXED)
        or acl_operation in (AclOperation.UNKNOWN, AclOperation.ANY)
        or acl_permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY)
    ):
        raise ValueError(
            f"an ACL this coordinator cannot read: resource type {resource_type}, name "
            f"{name!r}, pattern type {pattern_type}, principal {principal!r}, host {host!r}, "
            f"operation {operation}, permission type {permission}"
        )
    return StandardAcl(
        ResourceType(resource_type), name, pattern, principal, host, acl_operation, acl_permission
    )


def described_acl(acl: StandardAcl) -> DescribedAcl:
    """The ACL as a DescribeAcls answer lists it (the inverse of `standard_acl`)."""
    return (
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


class KafkaAclsError(Exception):
    """The data cluster's ACLs could not be read now, and what to fix. `kind` names the
    failure (one log line per kind until it changes); `level` is its log level."""

    def __init__(self, kind: str, message: str, *, level: int = logging.ERROR) -> None:
        super().__init__(message)
        self.kind = kind
        self.level = level


class KafkaAclSource:
    """Keeps `data`'s ACLs equal to the data cluster's (at `bootstrap_servers`, reached as
    `security` says) for the resource types the coordinator checks, read every
    `refresh_interval_ms`; calls `on_change` after each refresh that changed them.

    `start()` reads at once and then on its task; `ready()` returns once a read succeeded
    (the node must not serve before: wrap it in a timeout, and say `failure` when it runs
    out); `stop()` at the end. A failed refresh is tried again after `retry_backoff_ms`,
    doubling up to `retry_backoff_max_ms`, and leaves the ACLs of the last good answer in
    force (see the module). At most `max_acls` ACLs are kept: an answer with more is refused
    whole, with an ERROR, and the previous set stays.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        data: StandardAuthorizerData,
        *,
        refresh_interval_ms: int,
        max_acls: int,
        security: KafkaSecurity | None = None,
        on_change: Callable[[], None] | None = None,
        request_timeout_ms: int = 5000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        client_id: str = "coordinator-server-acls",
    ) -> None:
        if refresh_interval_ms < 1:
            raise ValueError(f"refresh_interval_ms must be at least 1, got {refresh_interval_ms}")
        if max_acls < 1:
            raise ValueError(f"max_acls must be at least 1, got {max_acls}")
        if request_timeout_ms < 1:
            raise ValueError(f"request_timeout_ms must be at least 1, got {request_timeout_ms}")
        if not 1 <= retry_backoff_ms <= retry_backoff_max_ms:
            raise ValueError("retry_backoff_ms must be at least 1 and at most retry_backoff_max_ms")
        self.bootstrap_servers = bootstrap_servers
        self.data = data
        self.max_acls = max_acls
        self._security = security or KafkaSecurity()
        self._on_change = on_change
        self._interval_s = refresh_interval_ms / 1000
        self._timeout_s = request_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = retry_backoff_max_ms / 1000
        self._client_id = client_id
        # The data's ACLs by their codes, as the answers list them: the data's ACLs are this
        # source's alone to change.
        self._current: dict[DescribedAcl, StandardAcl] = {described_acl(a): a for a in data}
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()
        self._refreshing = asyncio.Lock()
        self._stopped = False
        self.failure: str | None = None
        """Why the last refresh failed; None once one succeeds."""
        self._failure_kind: str | None = None
        self._failures = 0
        self._first_failure_at = 0.0
        self.loaded_at: float | None = None
        """When (time.monotonic) the ACLs in force were last read; None before the first."""
        self.refreshes = 0
        self.refresh_failures = 0

    @property
    def loaded(self) -> bool:
        """Whether a read succeeded: the ACLs in force are the data cluster's."""
        return self.loaded_at is not None

    def start(self) -> None:
        """Read now, then every refresh interval, on a task of its own."""
        if self._task is not None or self._stopped:
            raise RuntimeError("a KafkaAclSource starts once")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kafka-acls")

    async def ready(self) -> None:
        """Returns once the data cluster's ACLs were read; raises KafkaAclsError when the
        source is stopped first. Waits as long as reads fail: the caller bounds the wait."""
        if not self._loaded.is_set():
            await self._loaded.wait()
        if self.loaded_at is None:
            raise KafkaAclsError("stopped", "the ACL source stopped before it read the ACLs")

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Wakes a `ready()` still waiting: it then raises.
        self._loaded.set()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._timeout_s)

    async def _run(self) -> None:
        backoff = self._backoff_s
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except KafkaAclsError:
                delay = backoff
                backoff = min(backoff * 2, self._backoff_max_s)
            except Exception:
                # A bug must not end the refreshes for good: the ACLs in force stay, and the
                # next refresh tries again.
                log.exception("the data cluster's ACLs: the refresh failed")
                delay = backoff
                backoff = min(backoff * 2, self._backoff_max_s)
            else:
                delay = self._interval_s
                backoff = self._backoff_s
            await asyncio.sleep(delay)

    async def refresh(self) -> bool:
        """One read of the data cluster's ACLs, applied to the data; whether they changed.
        Raises KafkaAclsError (logged once per kind of failure) when it fails, the ACLs in
        force left as they were."""
        # One at a time: a refresh asked for while the task's runs would otherwise open a
        # second client, and apply an answer older than the other's after it.
        async with self._refreshing:
            self.refreshes += 1
            try:
                payload = await self._describe()
                changed = await self.apply_answer(payload)
            except KafkaAclsError as error:
                self._failed(error)
                raise
            self._succeeded()
            return changed

    async def apply_answer(self, payload: bytes) -> bool:
        """Make the data's ACLs those of a DescribeAcls v1 answer's body (`payload`); whether
        they changed (then `on_change` ran). Raises KafkaAclsError, changing nothing, when the
        answer is an error, holds more than `max_acls` ACLs of the checked resource types,
        or one this coordinator cannot read."""
        try:
            answer = DescribeAclsAnswer(payload)
        except ValueError as error:
            raise self._unreadable(error) from None
        if answer.error_code:
            raise self._refused(answer.error_code, answer.error_message)
        # The answer's ACLs are compared as read (tuples of codes and strings, hashed in C):
        # only the new ones become StandardAcls, and only the new and the gone touch the
        # data.
        kept: set[DescribedAcl] = set()
        checked = _CHECKED_CODES
        max_acls = self.max_acls
        try:
            for read, described in enumerate(answer.acls(), 1):
                if described[0] in checked:
                    kept.add(described)
                    if len(kept) > max_acls:
                        raise self._too_many()
                if read % ACLS_PER_SLICE == 0:
                    await asyncio.sleep(0)
            if kept == self._current.keys():
                return False
            new: list[tuple[DescribedAcl, StandardAcl]] = []
            for made, described in enumerate(kept - self._current.keys(), 1):
                acl = standard_acl(described)
                assert acl is not None
                new.append((described, acl))
                if made % ACLS_PER_SLICE == 0:
                    await asyncio.sleep(0)
        except ValueError as error:
            raise self._unreadable(error) from None
        # From here to the end without a turn of the event loop: a decision sees the old ACLs
        # or the new, never a mix.
        current = self._current
        data = self.data
        changed = False
        for described in current.keys() - kept:
            data.remove(current.pop(described))
            changed = True
        for described, acl in new:
            if described not in current:
                current[described] = acl
                data.add(acl)
                changed = True
        if changed and self._on_change is not None:
            self._on_change()
        return changed

    def _too_many(self) -> KafkaAclsError:
        return KafkaAclsError(
            "too many",
            f"the data cluster at {self.bootstrap_servers} holds more than {self.max_acls} "
            "ACLs on topics, groups, transactional ids and the cluster, the most this "
            "coordinator keeps: its ACLs are not applied (a part of them could allow or deny "
            "wrongly) and the previous ones stay in force. Raise --max-acls or use fewer "
            "ACLs (PREFIXED ones cover many names)",
        )

    async def _describe(self) -> bytes:
        client = await self._connected()
        node_id = client.get_random_node()
        if node_id is None:
            raise KafkaAclsError(
                "no broker",
                f"the data cluster at {self.bootstrap_servers} names no broker to ask for its "
                "ACLs; the ACLs read before stay in force",
                level=logging.WARNING,
            )
        try:
            response = await asyncio.wait_for(
                client.send(node_id, DescribeEveryAcl()), self._timeout_s
            )
        except TimeoutError:
            raise KafkaAclsError(
                "timeout",
                f"broker {node_id} of the data cluster at {self.bootstrap_servers} did not "
                f"answer DescribeAcls within {self._timeout_s:g} s; the ACLs read before stay "
                "in force",
                level=logging.WARNING,
            ) from None
        except (NotImplementedError, IncompatibleBrokerVersion) as error:
            raise KafkaAclsError(
                "version",
                f"broker {node_id} of the data cluster at {self.bootstrap_servers} does not "
                f"answer DescribeAcls v1 ({error}): --authorizer kafka needs a Kafka broker "
                "that does (Apache Kafka 2.0 and later)",
            ) from None
        except (KafkaError, OSError) as error:
            raise KafkaAclsError(
                "unreachable",
                f"no DescribeAcls answer from broker {node_id} of the data cluster at "
                f"{self.bootstrap_servers} ({error!r}); the ACLs read before stay in force",
                level=logging.WARNING,
            ) from None
        payload: Any = getattr(response, "payload", None)
        if not isinstance(payload, bytes):
            raise KafkaAclsError("unreadable", f"an unexpected DescribeAcls answer: {response!r}")
        return payload

    async def _connected(self) -> AIOKafkaClient:
        if self._client is not None:
            return self._client
        try:
            options = self._security.aiokafka_options()
        except KafkaSecurityError as error:
            raise KafkaAclsError("security", str(error)) from None
        client = forbid_auto_topic_creation(
            AIOKafkaClient(
                bootstrap_servers=self.bootstrap_servers,
                client_id=self._client_id,
                # Each request has a timeout of its own; aiokafka's, which closes the
                # connection, is only a backstop.
                request_timeout_ms=int(self._timeout_s * 2000),
                **options,
            )
        )
        try:
            await asyncio.wait_for(client.bootstrap(), self._timeout_s)
        except (KafkaError, OSError, TimeoutError) as error:
            with contextlib.suppress(Exception):
                await client.close()
            raise KafkaAclsError(
                "unreachable",
                f"no connection to the data cluster at {self.bootstrap_servers} "
                f"({self._security.describe()}): {error!r}; the ACLs read before stay in force",
                level=logging.WARNING,
            ) from None
        self._client = client
        return client

    def _refused(self, error_code: int, error_message: str | None) -> KafkaAclsError:
        cluster = self.bootstrap_servers
        said = f": {error_message}" if error_message else ""
        if error_code == SECURITY_DISABLED:
            return KafkaAclsError(
                "security disabled",
                f"the data cluster at {cluster} has no authorizer (DescribeAcls answered "
                f"SECURITY_DISABLED{said}), so it has no ACLs to give --authorizer kafka: set "
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer "
                "on its brokers and controllers, or run the coordinator with --authorizer "
                "acls; the ACLs read before stay in force",
            )
        if error_code == CLUSTER_AUTHORIZATION_FAILED:
            principal = self._principal()
            return KafkaAclsError(
                "cluster authorization failed",
                f"the data cluster at {cluster} does not let {principal} describe its ACLs "
                f"(DescribeAcls answered CLUSTER_AUTHORIZATION_FAILED{said}): allow it "
                f"DESCRIBE on the cluster, e.g. kafka-acls.sh --bootstrap-server {cluster} "
                f"--add --allow-principal {principal} --operation Describe --cluster; the "
                "ACLs read before stay in force",
            )
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"error {error_code}"
        return KafkaAclsError(
            f"error {error_code}",
            f"the data cluster at {cluster} answered DescribeAcls with {name}{said}; the ACLs "
            "read before stay in force",
        )

    def _unreadable(self, error: ValueError) -> KafkaAclsError:
        return KafkaAclsError(
            "unreadable",
            f"the data cluster at {self.bootstrap_servers} answered DescribeAcls with what "
            f"this coordinator cannot apply ({error}); its ACLs are not applied (a part of "
            "them could allow or deny wrongly) and the previous ones stay in force",
        )

    def _principal(self) -> str:
        """Who the data cluster sees us as, for the ACL that lets us describe its ACLs."""
        security = self._security
        if security.uses_sasl:
            return f"User:{security.sasl_username}"
        if security.ssl_certificate_location is not None:
            return (
                f"the principal of the certificate {security.ssl_certificate_location} "
                "(User:<its subject, mapped by ssl.principal.mapping.rules>)"
            )
        return "User:ANONYMOUS"

    def _failed(self, error: KafkaAclsError) -> None:
        now = time.monotonic()
        self.refresh_failures += 1
        self._failures += 1
        if self._failures == 1:
            self._first_failure_at = now
        self.failure = str(error)
        if error.kind != self._failure_kind:
            self._failure_kind = error.kind
            if self.loaded_at is None:
                state = "no ACLs read yet"
            else:
                state = f"the ACLs in force were read {now - self.loaded_at:.0f} s ago"
            log.log(
                error.level,
                "the data cluster's ACLs (--authorizer kafka): %s (%s; retrying, said once "
                "until the failure changes)",
                error,
                state,
            )

    def _succeeded(self) -> None:
        now = time.monotonic()
        if self._failures:
            log.info(
                "the data cluster's ACLs (--authorizer kafka) read again from %s after %d "
                "failed attempts in %.1f s",
                self.bootstrap_servers,
                self._failures,
                now - self._first_failure_at,
            )
        self._failures = 0
        self._failure_kind = None
        self.failure = None
        self.loaded_at = now
        self._loaded.set()
