"""`RequestPath`: the one request path of `CoordinatorClient`, the asyncio client of the wire
contract (its typed API methods are in `client`).

Theory of operation. A call names a group (most APIs), a transactional id (the transaction
APIs but TxnOffsetCommit, which goes to its group's coordinator, as in Kafka) or neither
(ApiVersions, ListGroups, ListTransactions, FindCoordinator, DescribeCluster). A group's
coordinator is found with FindCoordinator key_type 0, a transactional id's with key_type 1,
sent to a bootstrap server, and cached per (key_type, key); every request for that key goes
to the cached node over one pipelined `Connection` per server address, opened on first use
and opened again after it is lost. ListGroups and ListTransactions go to every node
DescribeCluster names.

Each call has one deadline (`timeout_ms`, by default the client's `request_timeout_ms`)
covering discovery, connecting, retries and the wait for the answer. Within it the client
retries, after an exponential back-off with jitter, on:

- COORDINATOR_LOAD_IN_PROGRESS (14) and REQUEST_TIMED_OUT (7): same coordinator; for the
  transaction APIs CONCURRENT_TRANSACTIONS (51) too (the transaction is still being
  completed: Kafka's producer backs off and sends again);
- COORDINATOR_NOT_AVAILABLE (15) and NOT_COORDINATOR (16): the cached coordinator is
  dropped and looked up again (Kafka's `markCoordinatorUnknown`);
- a lost connection: the request is sent again on a new one.

A request to a coordinator that is not answered in time forgets the coordinator, and one to a
bootstrap server moves the next one up, so that the next call does not wait on a node that
is paused or cut off while its groups have moved elsewhere.

With `security` (a `ClientSecurity`: Kafka's client settings) every connection is TLS and
authenticated as it says, before any request goes out on it; an authentication the server
refuses is raised at once (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
ILLEGAL_SASL_STATE), never retried, and a TLS failure too (`ssl.SSLError`).

The deadline passing while a request is out raises `RequestTimeoutError`; passing during a
back-off, or while a request sent again after one is out, raises the last error seen. Every
other error code comes back in the response (the typed methods) or is raised as its
`coordinator_protocol.errors` class (`raise_on_error`, and the helpers). Closing the client
fails every call still running with `ClientClosedError`.

Every API takes the same path (`_call`): what differs between them (where a request goes,
which answers are retried, what is raised, how a request naming several groups is split)
is its `ApiHandler` in `apis`. `CoordinatorClient` (in `client`) adds one typed method per
API and the helpers in Kafka's terms on top of this path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, TypeAlias, TypeVar

from coordinator_client.rpc import apis
from coordinator_client.rpc.apis import RETRY_CODES, RETRY_REDISCOVER, ApiHandler, Lookup
from coordinator_client.rpc.backoff import ExponentialBackoff
from coordinator_client.rpc.connection import Connection
from coordinator_client.rpc.connection_problems import ConnectionProblems
from coordinator_client.rpc.errors import (
    ClientClosedError,
    ConnectionClosedError,
    RequestTimeoutError,
)
from coordinator_client.rpc.nodes import Node, build_ssl_context, parse_bootstrap
from coordinator_client.rpc.requests import raise_for_code
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode, error_for_code
from coordinator_protocol.framing import DEFAULT_MAX_FRAME_BYTES
from coordinator_protocol.messages import (
    ApiVersionsRequest,
    DescribeClusterRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Message,
)

__all__ = ["KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "CoordinatorKey", "RequestPath"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)
Req = TypeVar("Req", bound=Message)
T = TypeVar("T")

# FindCoordinator's key types (Kafka's CoordinatorType): a group id, a transactional id.
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
# The first back-off after CONCURRENT_TRANSACTIONS (it doubles from there).
CONCURRENT_TRANSACTIONS_BACKOFF_MS: Final = 10

CoordinatorKey: TypeAlias = tuple[int, str]
"""(key_type, key): what a coordinator is found and cached by."""


def _describe(coordinator_key: CoordinatorKey) -> str:
    key_type, key = coordinator_key
    kind = "transactional id" if key_type == KEY_TYPE_TRANSACTION else "group"
    return f"{kind} {key!r}"


class RequestPath:
    """Connections, coordinator discovery, retries and deadlines: what every call of
    `CoordinatorClient` shares. Its constructor's arguments are `CoordinatorClient`'s."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str | None = "coordinator-client",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        connect_timeout_ms: int = 10_000,
        max_in_flight_requests: int = 256,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_server_hostname: str | None = None,
        coordinator_cache_size: int = 10_000,
        security: ClientSecurity | None = None,
    ) -> None:
        if request_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        if coordinator_cache_size < 1:
            raise ValueError("coordinator_cache_size must be at least 1")
        tls_given = [
            name
            for name, value in (
                ("ssl_context", ssl_context),
                ("ssl_cafile", ssl_cafile),
                ("ssl_certfile", ssl_certfile),
                ("ssl_keyfile", ssl_keyfile),
            )
            if value is not None
        ]
        if security is not None and tls_given:
            raise ValueError(
                f"give TLS through security or through {', '.join(tls_given)}, not both"
            )
        self.bootstrap_servers = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_in_flight_requests = max_in_flight_requests
        self.max_frame_bytes = max_frame_bytes
        if ssl_context is None and (ssl_cafile is not None or ssl_certfile is not None):
            ssl_context = build_ssl_context(ssl_cafile, ssl_certfile, ssl_keyfile)
        if security is not None:
            ssl_context = security.ssl_context()
        self.ssl_context = ssl_context
        self.security = security
        """The security settings every connection follows (None: as the ssl_* arguments
        say, without SASL)."""
        self.ssl_server_hostname = ssl_server_hostname
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        # CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written, which
        # takes milliseconds; Kafka's producer retries its first AddPartitionsToTxn after 20 ms
        # rather than its retry back-off for the same reason (KAFKA-5477).
        self._concurrent_backoff = ExponentialBackoff(
            min(CONCURRENT_TRANSACTIONS_BACKOFF_MS, retry_backoff_ms), retry_backoff_max_ms
        )
        self._coordinators: OrderedDict[CoordinatorKey, Node] = OrderedDict()
        self._coordinator_cache_size = coordinator_cache_size
        self._lookups: dict[CoordinatorKey, asyncio.Task[Node]] = {}
        self._connections: dict[tuple[str, int], Connection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Task[Connection]] = {}
        self._bootstrap_index = 0
        # Bounded by the addresses a client can know: its bootstrap servers and the
        # coordinators it caches.
        self.problems = ConnectionProblems(
            max_addresses=len(self.bootstrap_servers) + coordinator_cache_size
        )
        """The connection problems met, logged at WARNING as they happen."""
        self._closed = False
        self._closed_event = asyncio.Event()
        self._sasl = security.sasl_client if security is not None and security.uses_sasl else None

    @property
    def open_connections(self) -> int:
        """How many servers this client holds a connection to (one connection a server)."""
        return len(self._connections)

    # Life cycle

    async def close(self) -> None:
        """Close every connection; every call still running fails with `ClientClosedError`.

        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        for task in [*self._lookups.values(), *self._connecting.values()]:
            task.cancel()
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close(client_closed=True)
        for connection in connections:
            await connection.wait_closed()

    @property
    def closed(self) -> bool:
        return self._closed

    # What went wrong, for the errors callers see

    def describe_bootstrap(self) -> str:
        """The bootstrap servers as "host:port[,host:port]"."""
        return ",".join(f"{host}:{port}" for host, port in self.bootstrap_servers)

    def last_error(self, addresses: Iterable[tuple[str, int]] | None = None) -> str:
        """ ": last error: <cause>" for the latest problem at one of `addresses` (at any
        address when None or when those had none), or "" when there was none."""
        for address in addresses or ():
            cause = self.problems.cause(address)
            if cause is not None:
                return f": last error: {cause}"
        cause = self.problems.last_cause
        return f": last error: {cause}" if cause else ""

    # Discovery

    def cached_coordinator(self, key: str, key_type: int = KEY_TYPE_GROUP) -> Node | None:
        """The coordinator remembered for `key` (a group id, or with `key_type` 1 a
        transactional id), if any."""
        return self._coordinators.get((key_type, key))

    def forget_coordinator(self, key: str, key_type: int = KEY_TYPE_GROUP) -> None:
        """Drop the cached coordinator of `key`; the next call looks it up again."""
        self._coordinators.pop((key_type, key), None)

    async def find_coordinator(
        self, key: str, *, key_type: int = KEY_TYPE_GROUP, timeout_ms: int | None = None
    ) -> Node:
        """The coordinator of `key`: from the cache, or looked up with FindCoordinator.

        `key` is a group id (`key_type` 0, the default) or a transactional id (`key_type`
        1: the transaction coordinator). The two are cached apart, as Kafka's client keeps
        them: a group and a transactional id of the same name may live on different nodes.
        Concurrent lookups of one key share one request.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s(timeout_ms)
        return await self._coordinator_for((key_type, key), deadline)

    async def _coordinator_for(self, coordinator_key: CoordinatorKey, deadline: float) -> Node:
        self._check_open()
        node = self._coordinators.get(coordinator_key)
        if node is not None:
            self._coordinators.move_to_end(coordinator_key)
            return node
        task = self._lookups.get(coordinator_key)
        if task is None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(
                self._lookup(coordinator_key, loop.time() + self.request_timeout_ms / 1000),
                name=f"coordinator lookup {_describe(coordinator_key)}",
            )
            self._lookups[coordinator_key] = task
            task.add_done_callback(lambda done: self._lookup_done(coordinator_key, done))
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(remaining, 0)):
                return await asyncio.shield(task)
        except TimeoutError:
            raise RequestTimeoutError(
                f"no coordinator found for {_describe(coordinator_key)} through "
                f"{self.describe_bootstrap()} in time{self.last_error(self.bootstrap_servers)}"
            ) from None
        except asyncio.CancelledError:
            if self._closed:
                raise ClientClosedError("the client was closed") from None
            raise

    async def _lookup(self, coordinator_key: CoordinatorKey, deadline: float) -> Node:
        def retry_code(response: FindCoordinatorResponse) -> int | None:
            for coordinator in response.coordinators:
                if coordinator.error_code in RETRY_CODES:
                    return coordinator.error_code
            return None

        key_type, key = coordinator_key
        response = await self._call_with_retries(
            lambda remaining: self._send_to_bootstrap(
                FindCoordinatorRequest(key_type=key_type, keys=[key]),
                FindCoordinatorResponse,
                remaining,
            ),
            retry_code,
            deadline,
            what=f"FindCoordinator({key!r}, key_type {key_type})",
        )
        for coordinator in response.coordinators:
            if coordinator.key != key:
                continue
            if coordinator.error_code != ErrorCode.NONE:
                raise error_for_code(coordinator.error_code, coordinator.error_message)
            node = Node(coordinator.node_id, coordinator.host, coordinator.port)
            self._remember_coordinator(coordinator_key, node)
            return node
        raise error_for_code(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"FindCoordinator did not answer {key!r}"
        )

    def _lookup_done(self, coordinator_key: CoordinatorKey, task: asyncio.Task[Node]) -> None:
        if self._lookups.get(coordinator_key) is task:
            del self._lookups[coordinator_key]
        # Retrieved here so a lookup whose callers all gave up is not reported as an
        # exception nobody saw; the callers that still wait get it from the task.
        if not task.cancelled():
            task.exception()

    def _remember_coordinator(self, coordinator_key: CoordinatorKey, node: Node) -> None:
        self._coordinators[coordinator_key] = node
        self._coordinators.move_to_end(coordinator_key)
        while len(self._coordinators) > self._coordinator_cache_size:
            self._coordinators.popitem(last=False)

    # Sending

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client was closed")

    def _timeout_s(self, timeout_ms: int | None) -> float:
        return (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000

    async def _connection(self, address: tuple[str, int], deadline: float) -> Connection:
        self._check_open()
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        task = self._connecting.get(address)
        if task is None:
            host, port = address
            task = asyncio.create_task(
                Connection.open(
                    host,
                    port,
                    client_id=self.client_id,
                    ssl_context=self.ssl_context,
                    server_hostname=self.ssl_server_hostname,
                    connect_timeout_s=self.connect_timeout_ms / 1000,
                    max_in_flight_requests=self.max_in_flight_requests,
                    max_frame_bytes=self.max_frame_bytes,
                    problems=self.problems,
                    sasl=self._sasl,
                ),
                name=f"coordinator-client connect {host}:{port}",
            )
            self._connecting[address] = task
            task.add_done_callback(lambda done: self._connected(address, done))
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(remaining, 0)):
                return await asyncio.shield(task)
        except TimeoutError:
            raise RequestTimeoutError(
                f"cannot connect to {address[0]}:{address[1]} in time{self.last_error([address])}"
            ) from None
        except asyncio.CancelledError:
            if self._closed:
                raise ClientClosedError("the client was closed") from None
            raise

    def _connected(self, address: tuple[str, int], task: asyncio.Task[Connection]) -> None:
        self._connecting.pop(address, None)
        if task.cancelled() or task.exception() is not None:
            return
        connection = task.result()
        if self._closed:
            connection.close(client_closed=True)
            return
        self._connections[address] = connection

    async def _send(
        self, address: tuple[str, int], request: Message, response_type: type[R], deadline: float
    ) -> R:
        connection = await self._connection(address, deadline)
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise RequestTimeoutError(
                f"no time left to send to {address[0]}:{address[1]}{self.last_error([address])}"
            )
        return await connection.send(request, response_type, timeout_s=remaining)

    async def _send_to_bootstrap(
        self, request: Message, response_type: type[R], deadline: float
    ) -> R:
        # Servers are tried in turn: one that cannot be reached moves the next one up.
        # One that does not answer in time (paused, cut off) too: as Kafka's client, which
        # disconnects from a node after a request timeout and asks another one next.
        address = self.bootstrap_servers[self._bootstrap_index % len(self.bootstrap_servers)]
        try:
            return await self._send(address, request, response_type, deadline)
        except (ConnectionClosedError, RequestTimeoutError):
            self._bootstrap_index += 1
            raise

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake (with `ClientClosedError`) as soon as the client closes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closed_event.wait()
        self._check_open()

    async def _call_with_retries(
        self,
        attempt: Callable[[float], Awaitable[R]],
        retry_code: Callable[[R], int | None],
        deadline: float,
        *,
        what: str,
        on_retry: Callable[[int | None], None] | None = None,
    ) -> R:
        """Run `attempt(deadline)` until it answers without a retriable code.

        `on_retry(code)` runs before each back-off, with the code or None for a lost
        connection (so a group call can forget its coordinator).
        """
        loop = asyncio.get_running_loop()
        attempts = 0
        previous: BaseException | None = None
        while True:
            self._check_open()
            error: BaseException
            try:
                response = await attempt(deadline)
            except ConnectionClosedError as e:
                code: int | None = None
                error = e
            except RequestTimeoutError as timed_out:
                if previous is not None and loop.time() >= deadline:
                    # The deadline passed during a retry (a back-off that ended at its edge
                    # leaves a request moments to be answered): the call failed for what
                    # its attempts kept answering, not for that last moment.
                    raise previous from timed_out
                raise
            else:
                code = retry_code(response)
                if code is None:
                    return response
                error = error_for_code(code, f"{what}: {ErrorCode(code).name}")
            if on_retry is not None:
                on_retry(code)
            backoff = (
                self._concurrent_backoff
                if code == ErrorCode.CONCURRENT_TRANSACTIONS
                else self._backoff
            )
            backoff_s = backoff.backoff_ms(attempts) / 1000
            attempts += 1
            if loop.time() + backoff_s >= deadline:
                raise error
            previous = error
            log.debug("%s failed (%r); retry %d in %.3f s", what, error, attempts, backoff_s)
            await self._sleep(backoff_s)

    async def _call_coordinator(
        self, api: ApiHandler[Req, R], key: str, request: Req, deadline: float
    ) -> R:
        """Send a request to the coordinator of `key` (of `api.key_type`: a group or a
        transactional id), re-discovering and retrying as the module docstring says."""
        coordinator_key = (api.key_type, key)
        node_used: list[Node] = []

        def forget_used() -> None:
            # Forget only the node this attempt used: a concurrent call may already have
            # found the new one.
            if node_used and self._coordinators.get(coordinator_key) == node_used[0]:
                self._coordinators.pop(coordinator_key, None)

        async def attempt(deadline: float) -> R:
            node = await self._coordinator_for(coordinator_key, deadline)
            node_used[:] = [node]
            try:
                return await self._send(node.address, request, api.response_type, deadline)
            except RequestTimeoutError:
                # A coordinator that does not answer in time may be paused or cut off while
                # the group moved to another node: the next call looks it up again (Kafka's
                # client marks the coordinator unknown after a request timeout).
                forget_used()
                raise

        def on_retry(code: int | None) -> None:
            if code is None or code in RETRY_REDISCOVER:
                forget_used()

        return await self._call_with_retries(
            attempt,
            api.retry_code,
            deadline,
            what=f"{type(request).__name__}({key!r})",
            on_retry=on_retry,
        )

    async def _call(
        self,
        api: ApiHandler[Req, R],
        request: Req,
        timeout_ms: int | None,
        *,
        raise_on_error: bool = False,
    ) -> R:
        """The one path of every API: send `request` where `api` says, retry within one
        deadline, and with `raise_on_error` raise the first error `api` finds in the
        answer."""
        deadline = asyncio.get_running_loop().time() + self._timeout_s(timeout_ms)
        response: R
        if api.lookup is Lookup.COORDINATOR:
            if api.split is None:
                response = await self._call_coordinator(api, api.key(request), request, deadline)
            else:
                # Each group (or transactional id) is asked of its own coordinator, in
                # parallel.
                items = await _gather_all(
                    self._call_group(api, key, part, deadline) for key, part in api.split(request)
                )
                assert api.join is not None
                response = api.join(request, items)
        elif api.lookup is Lookup.BOOTSTRAP:
            response = await self._call_with_retries(
                lambda d: self._send_to_bootstrap(request, api.response_type, d),
                api.retry_code,
                deadline,
                what=api.name,
            )
        else:
            answers = await _gather_all(
                self._call_with_retries(
                    functools.partial(self._send, address, request, api.response_type),
                    api.retry_code,
                    deadline,
                    what=f"{api.name}({address[0]}:{address[1]})",
                )
                for address in await self._every_node(deadline)
            )
            assert api.join is not None
            response = api.join(request, answers)
        if raise_on_error:
            for code, message in api.errors(response):
                raise_for_code(code, message)
        return response

    async def _every_node(self, deadline: float) -> list[tuple[str, int]]:
        """Where every node of the cluster listens, as DescribeCluster at a bootstrap server
        names them; the bootstrap servers when the server does not answer DescribeCluster
        (it does not list it in ApiVersions)."""
        loop = asyncio.get_running_loop()
        versions = await self._call(
            apis.API_VERSIONS,
            ApiVersionsRequest(),
            _ms_until(deadline, loop),
            raise_on_error=True,
        )
        if ApiKey.DESCRIBE_CLUSTER not in {key.api_key for key in versions.api_keys}:
            return list(self.bootstrap_servers)
        cluster = await self._call(
            apis.DESCRIBE_CLUSTER,
            DescribeClusterRequest(),
            _ms_until(deadline, loop),
            raise_on_error=True,
        )
        return list(dict.fromkeys((broker.host, broker.port) for broker in cluster.brokers))

    async def _call_group(
        self, api: ApiHandler[Req, R], key: str, request: Req, deadline: float
    ) -> object:
        return api.item(await self._call_coordinator(api, key, request, deadline))


def _ms_until(deadline: float, loop: asyncio.AbstractEventLoop) -> int:
    return max(1, int((deadline - loop.time()) * 1000))


async def _gather_all(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Await all; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
