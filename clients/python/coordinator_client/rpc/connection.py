"""One connection to one server: many requests in flight, matched by correlation id.

Requests are written as soon as they are sent; responses are matched to their callers by
correlation id, in whatever order the server sends them (the contract lets a parked
JoinGroup be answered after a later Heartbeat). One reader task per connection feeds the
socket's bytes to `coordinator_protocol.FrameDecoder` and resolves the waiting futures.

Bounds: at most `max_in_flight_requests` requests wait for an answer (further senders wait
for a slot, within their timeout), and no frame larger than `max_frame_bytes` is sent or
accepted.

Authentication (SASL_PLAINTEXT, SASL_SSL): `open` runs the SASL exchange (`rpc.sasl`) right
after connecting, before the connection is handed out, so no request goes out before it. A
refused exchange raises the Kafka error of its code (SASL_AUTHENTICATION_FAILED,
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE), which no retry mends. When the server grants
the session a lifetime (KIP-368), the connection authenticates again on its own, as Kafka's
client does, at a random point between 85 % and 95 % of it: meanwhile new requests are held
(not written) and the requests already in flight keep their answers, which may arrive
during the exchange. A failed re-authentication closes the connection.

A request that times out is forgotten, but its correlation id is remembered so its late
answer is dropped quietly; an answer to an id this connection never sent means the stream
can no longer be trusted, and the connection closes (aiokafka's OUT_OF_SYNC). When the
connection closes for any reason, every request still waiting fails at once with the
reason, its `__cause__` the error that closed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections import deque
from collections.abc import Callable
from typing import Final, NamedTuple, TypeVar

from coordinator_client.rpc.connection_problems import (
    ConnectionProblems,
    connect_cause,
    not_a_coordinator,
)
from coordinator_client.rpc.errors import (
    ClientClosedError,
    ClientError,
    CloseReason,
    ConnectionClosedError,
    RequestTimeoutError,
    RequestTooLargeError,
)
from coordinator_client.rpc.sasl import SaslClient, authenticate
from coordinator_protocol.api_keys import api_name
from coordinator_protocol.envelope import RequestHeader, encode_request, split_response
from coordinator_protocol.errors import ApiError, ProtocolError
from coordinator_protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode_frame
from coordinator_protocol.messages import InvalidResponseError, Message, parse_response

__all__ = ["Connection"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)

_READ_BYTES: Final = 256 * 1024
_CORRELATION_ID_LIMIT: Final = 2**31
# Answers of timed-out requests still expected; beyond this many the oldest are forgotten
# (a late answer to one of those then closes the connection as out of sync).
_ABANDONED_PER_SLOT: Final = 4
_CLOSE_TIMEOUT_S: Final = 1.0
# Kafka's SaslClientAuthenticator: re-authenticate at 85 % of the session's lifetime, plus up
# to 10 % of jitter so that many connections do not re-authenticate at once.
_REAUTHENTICATE_AT: Final = 0.85
_REAUTHENTICATE_JITTER: Final = 0.10


class _Pending(NamedTuple):
    api_key: int
    api_version: int
    future: asyncio.Future[Message]


class Connection:
    """A TCP (or TLS) connection to one coordinator server. Open it with `Connection.open`."""

    def __init__(
        self,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        client_id: str | None,
        max_in_flight_requests: int,
        max_frame_bytes: int,
        problems: ConnectionProblems | None = None,
        sasl: Callable[[], SaslClient] | None = None,
        authentication_timeout_s: float = 10.0,
    ) -> None:
        if max_in_flight_requests < 1:
            raise ValueError("max_in_flight_requests must be at least 1")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_in_flight_requests = max_in_flight_requests
        self.max_frame_bytes = max_frame_bytes
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame_bytes)
        self._next_correlation_id = 0
        self._pending: dict[int, _Pending] = {}
        # An insertion-ordered set: ids of timed-out requests whose answers may still come.
        self._abandoned: dict[int, None] = {}
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._close_reason: CloseReason | None = None
        self._close_message = ""
        self._close_cause: BaseException | None = None
        self._client_closed = False
        self._problems = problems
        # Whether the peer has answered one request in the coordinator protocol: until it
        # has, a peer that closes or sends what does not decode is not a coordinator.
        self._answered = False
        self._sasl = sasl
        self._authentication_timeout_s = authentication_timeout_s
        # Set while requests may be written: cleared during a SASL exchange, when the
        # requests sent meanwhile wait.
        self._accepting = asyncio.Event()
        self._accepting.set()
        self._reauthentication: asyncio.TimerHandle | None = None
        self._reauthenticating: asyncio.Task[None] | None = None
        self.authentications = 0
        """SASL exchanges completed on this connection (re-authentications included)."""
        self.session_lifetime_ms = 0
        """The lifetime the server granted the last exchange's session (0: none)."""
        self._reader_task = asyncio.create_task(
            self._read_loop(), name=f"coordinator-client-reader {host}:{port}"
        )

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout_s: float = 10.0,
        max_in_flight_requests: int = 256,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        problems: ConnectionProblems | None = None,
        sasl: Callable[[], SaslClient] | None = None,
    ) -> Connection:
        """Connect to `host:port`, and with `sasl` (a new mechanism client for each exchange)
        authenticate before returning. Each failure, and later the connection's loss and its
        first answer, are reported to `problems`.

        Raises:
            ConnectionClosedError: the connection could not be opened (refused, unreachable,
                or not within `connect_timeout_s`), or closed during the SASL exchange, or the
                exchange was not answered within `connect_timeout_s`; retriable.
            ssl.SSLError: the TLS handshake failed (for example the certificate did not
                verify); not retriable.
            SaslAuthenticationFailedError, UnsupportedSaslMechanismError,
            IllegalSaslStateError: the server refused the authentication (the error names
                why); not retriable.
        """
        address = (host, port)
        try:
            async with asyncio.timeout(connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=ssl_context,
                    server_hostname=(server_hostname or host) if ssl_context else None,
                )
        except TimeoutError as e:
            cause = f"no connection within {connect_timeout_s:.3f} s"
            _report(problems, address, cause)
            raise ConnectionClosedError(
                f"cannot connect to {host}:{port}: {cause}", CloseReason.CONNECTION_TIMEOUT
            ) from e
        except ssl.SSLError as e:
            _report(problems, address, connect_cause(e))
            raise
        except OSError as e:
            _report(problems, address, connect_cause(e))
            raise ConnectionClosedError(
                f"cannot connect to {host}:{port}: {connect_cause(e)}"
            ) from e
        connection = cls(
            host,
            port,
            reader,
            writer,
            client_id=client_id,
            max_in_flight_requests=max_in_flight_requests,
            max_frame_bytes=max_frame_bytes,
            problems=problems,
            sasl=sasl,
            authentication_timeout_s=connect_timeout_s,
        )
        if sasl is not None:
            try:
                await connection._authenticate()
            except asyncio.CancelledError:
                connection.close()
                await connection.wait_closed()
                raise
            except Exception as e:
                cause = f"authentication failed: {e}"
                if connection.closed:
                    # The server closed the connection after its answer, as Kafka's does
                    # after a refusal: the answer is the cause to report, not the closing.
                    _report(problems, address, cause)
                else:
                    connection.close(CloseReason.CONNECTION_BROKEN, e, message=cause)
                await connection.wait_closed()
                raise
        return connection

    @property
    def closed(self) -> bool:
        return self._close_reason is not None

    @property
    def close_reason(self) -> CloseReason | None:
        return self._close_reason

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def send(
        self,
        request: Message,
        response_type: type[R],
        *,
        timeout_s: float,
        api_version: int | None = None,
    ) -> R:
        """Send `request` and wait for its response.

        Args:
            request: a request model (its class names its API key and version).
            response_type: the response model expected; the body is validated into it.
            timeout_s: how long to wait for a free slot and for the response.
            api_version: the header's, when not the request class's own.

        Raises:
            ApiError: a top-level error the response schema has no place for
                (INVALID_REQUEST, UNSUPPORTED_VERSION).
            InvalidResponseError: the response does not match its schema.
            RequestTimeoutError: no response within `timeout_s`.
            RequestTooLargeError: the request does not fit a frame.
            ConnectionClosedError: the connection closed first.
            ClientClosedError: the client closed it.
        """
        self._raise_if_closed()
        api_key = int(request.API_KEY)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._request(request, api_version, held=True)
        except TimeoutError:
            message = f"no response to {api_name(api_key)} within {timeout_s:.3f} s"
            if self._problems is not None:
                self._problems.failed((self.host, self.port), message)
            raise RequestTimeoutError(f"{self.host}:{self.port}: {message}") from None
        if not isinstance(response, response_type):
            raise InvalidResponseError(
                f"expected {response_type.__name__}, got {type(response).__name__}"
            )
        return response

    async def _request(self, request: Message, api_version: int | None, *, held: bool) -> Message:
        """Write `request` and wait for its answer. With `held`, first wait until requests
        may be written (no SASL exchange running) and a slot is free; the exchange's own
        messages are not held."""
        loop = asyncio.get_running_loop()
        api_key = int(request.API_KEY)
        if api_version is None:
            api_version = request.API_VERSION
        while held:
            if not self._accepting.is_set():
                await self._accepting.wait()
                self._raise_if_closed()
            elif len(self._pending) >= self.max_in_flight_requests:
                await self._wait_for_slot(loop)
            else:
                break
        # Nothing awaits from the checks above to the write: no exchange can start between.
        self._raise_if_closed()
        correlation_id = self._take_correlation_id()
        try:
            header = RequestHeader(api_key, api_version, correlation_id, self.client_id)
            payload = encode_request(header, request)
            if len(payload) > self.max_frame_bytes:
                raise RequestTooLargeError(
                    f"{api_name(api_key)} request of {len(payload)} bytes exceeds the "
                    f"maximum frame of {self.max_frame_bytes} bytes"
                )
            future: asyncio.Future[Message] = loop.create_future()
            self._pending[correlation_id] = _Pending(api_key, api_version, future)
            self._writer.write(encode_frame(payload))
            try:
                await self._writer.drain()
            except (OSError, RuntimeError) as e:
                # The reader sees the same failure; whoever is first closes.
                self.close(CloseReason.CONNECTION_BROKEN, e)
            return await future
        finally:
            if correlation_id in self._pending:
                # Timed out or cancelled: its late answer, if any, is dropped quietly.
                del self._pending[correlation_id]
                self._abandon(correlation_id)
                self._wake_slot_waiter()

    # Authentication

    async def _exchange(self, request: Message, response_type: type[Message]) -> Message:
        response = await self._request(request, None, held=False)
        if not isinstance(response, response_type):
            raise InvalidResponseError(
                f"expected {response_type.__name__}, got {type(response).__name__}"
            )
        return response

    async def _authenticate(self) -> None:
        """One SASL exchange, new requests held meanwhile; then the next one scheduled if
        the server set the session a lifetime."""
        assert self._sasl is not None
        where = f"{self.host}:{self.port}"
        timeout_s = self._authentication_timeout_s
        self._accepting.clear()
        try:
            async with asyncio.timeout(timeout_s):
                lifetime_ms = await authenticate(self._exchange, self._sasl(), where=where)
        except TimeoutError:
            raise ConnectionClosedError(
                f"{where}: no answer to the SASL exchange within {timeout_s:.3f} s",
                CloseReason.CONNECTION_TIMEOUT,
            ) from None
        finally:
            if not self.closed:
                self._accepting.set()
        self.authentications += 1
        self.session_lifetime_ms = lifetime_ms
        if lifetime_ms > 0 and not self.closed:
            share = _REAUTHENTICATE_AT + random.random() * _REAUTHENTICATE_JITTER
            self._reauthentication = asyncio.get_running_loop().call_later(
                lifetime_ms * share / 1000, self._begin_reauthentication
            )

    def _begin_reauthentication(self) -> None:
        self._reauthentication = None
        if self.closed or self._reauthenticating is not None:
            return
        self._reauthenticating = asyncio.create_task(
            self._reauthenticate(),
            name=f"coordinator-client reauthenticate {self.host}:{self.port}",
        )

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.close(CloseReason.CONNECTION_BROKEN, e, message=f"re-authentication failed: {e}")
        finally:
            self._reauthenticating = None

    def close(
        self,
        reason: CloseReason = CloseReason.SHUTDOWN,
        cause: BaseException | None = None,
        *,
        message: str | None = None,
        client_closed: bool = False,
    ) -> None:
        """Close the connection; every request still waiting fails at once.

        Args:
            reason: why (recorded in the errors raised to waiting callers).
            cause: the error that made the connection unusable, set as `__cause__`.
            message: what to tell the callers; by default derived from `reason`/`cause`.
            client_closed: the client itself is closing: waiting callers get
                `ClientClosedError` rather than the retriable `ConnectionClosedError`.
        """
        if self._close_reason is not None:
            return
        self._close_reason = reason
        self._close_cause = cause
        self._client_closed = client_closed
        self._close_message = message = message or self._describe_close(reason, cause)
        log.debug("closing connection to %s:%s: %s", self.host, self.port, self._close_message)
        if self._problems is not None and reason is not CloseReason.SHUTDOWN:
            self._problems.failed((self.host, self.port), self._close_message)
        elif reason is CloseReason.OUT_OF_SYNC:
            log.warning(
                "closing connection to %s:%s: %s", self.host, self.port, self._close_message
            )
        pending = list(self._pending.values())
        self._pending.clear()
        self._abandoned.clear()
        for entry in pending:
            if not entry.future.done():
                entry.future.set_exception(self._closed_error())
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._closed_error())
        # Requests held for an exchange wake and find the connection closed.
        self._accepting.set()
        if self._reauthentication is not None:
            self._reauthentication.cancel()
            self._reauthentication = None
        reauthenticating = self._reauthenticating
        if reauthenticating is not None and asyncio.current_task() is not reauthenticating:
            reauthenticating.cancel()
        with contextlib.suppress(Exception):
            self._writer.close()
        if asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the reader task and the socket are done (after `close`)."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await self._writer.wait_closed()
        except TimeoutError:
            # A peer that stopped reading never lets the buffered bytes drain.
            self._writer.transport.abort()
        except Exception:
            pass

    # Internals

    def _describe_close(self, reason: CloseReason, cause: BaseException | None) -> str:
        where = f"{self.host}:{self.port}"
        if reason is CloseReason.SHUTDOWN:
            return f"connection to {where} closed by the client"
        if cause is not None:
            return f"connection to {where} lost: {cause!r}"
        return f"connection to {where} lost"

    def _closed_error(self) -> ClientError:
        assert self._close_reason is not None
        error: ClientError
        if self._client_closed:
            error = ClientClosedError(self._close_message)
        else:
            error = ConnectionClosedError(self._close_message, self._close_reason)
        error.__cause__ = self._close_cause
        return error

    def _raise_if_closed(self) -> None:
        if self._close_reason is not None:
            raise self._closed_error()

    def _take_correlation_id(self) -> int:
        # Wraps at 2**31 (an int32 on the wire); skips an id still waiting, which only a
        # connection with two billion requests in flight could hit.
        while True:
            correlation_id = self._next_correlation_id
            self._next_correlation_id = (correlation_id + 1) % _CORRELATION_ID_LIMIT
            if correlation_id not in self._pending and correlation_id not in self._abandoned:
                return correlation_id

    async def _wait_for_slot(self, loop: asyncio.AbstractEventLoop) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        self._slot_waiters.append(waiter)
        try:
            await waiter
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._slot_waiters.remove(waiter)
        self._raise_if_closed()

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _abandon(self, correlation_id: int) -> None:
        self._abandoned[correlation_id] = None
        if len(self._abandoned) > _ABANDONED_PER_SLOT * self.max_in_flight_requests:
            del self._abandoned[next(iter(self._abandoned))]

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(_READ_BYTES)
                if not data:
                    message = f"the server {self.host}:{self.port} closed the connection"
                    if not self._answered and self._next_correlation_id > 0:
                        message = not_a_coordinator(
                            self.host, self.port, "it closed the connection without answering"
                        )
                    self.close(CloseReason.CONNECTION_BROKEN, message=message)
                    return
                for payload in self._decoder.feed(data):
                    self._handle_response(payload)
                    if self.closed:
                        return
        except asyncio.CancelledError:
            raise
        except ProtocolError as e:
            message = None
            if not self._answered:
                message = not_a_coordinator(self.host, self.port, f"it answered {e}")
            self.close(CloseReason.OUT_OF_SYNC, e, message=message)
        except (OSError, RuntimeError) as e:
            message = None
            if not self._answered and self._next_correlation_id > 0 and self._sasl is None:
                # What a listener that requires SASL does to a client that sends a request
                # without authenticating first.
                message = (
                    f"connection to {self.host}:{self.port} lost before any answer ({e!r}): "
                    "does its listener require authentication (the client's security "
                    "settings, a tool's --command-config)?"
                )
            self.close(CloseReason.CONNECTION_BROKEN, e, message=message)

    def _handle_response(self, payload: bytes) -> None:
        correlation_id, body = split_response(payload)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            if correlation_id in self._abandoned:
                del self._abandoned[correlation_id]
                return
            message = (
                f"response with unknown correlation id {correlation_id} from "
                f"{self.host}:{self.port}"
            )
            if not self._answered:
                message = not_a_coordinator(self.host, self.port, message)
            self.close(CloseReason.OUT_OF_SYNC, message=message)
            return
        self._wake_slot_waiter()
        if entry.future.done():
            return
        try:
            response = parse_response(entry.api_key, entry.api_version, body)
        except ProtocolError as e:
            entry.future.set_exception(e)
            return
        except ApiError as e:
            # An error code is an answer in the coordinator protocol all the same.
            entry.future.set_exception(e)
        else:
            entry.future.set_result(response)
        if not self._answered:
            self._answered = True
            if self._problems is not None:
                self._problems.succeeded((self.host, self.port))


def _report(problems: ConnectionProblems | None, address: tuple[str, int], cause: str) -> None:
    if problems is not None:
        problems.failed(address, cause)
