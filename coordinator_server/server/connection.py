"""One client connection: bytes in, frames, requests dispatched, responses out.

Each complete frame is dispatched at once; a response is written when it is ready, so
responses may leave in a different order than their requests (a parked request never holds
up the ones behind it). Responses that become ready together go out in one write, and a plain
callback on the response's future replaces a task per request.

What one connection may hold is bounded. Frames wait, and the socket is not read, while
`max_inflight_requests` requests or `max_inflight_request_bytes` of them are in flight, and
while the answers the client has not taken yet (those ready to be written and the
transport's buffer) exceed `response_buffer_bytes`: a client that pipelines requests and
never reads its answers stops being served, instead of making the server hold every answer.
They also wait while a bulk request's answer is being built a slice at a time (as Kafka
answers a connection's requests one at a time): such an answer can be megabytes, is counted
only once it is ready, and the frames of one read would otherwise start hundreds of them.
Only the building holds them up: an answer that waits for a write the broker has not
acknowledged yet (a DeleteGroups, an OffsetFetch with require_stable) leaves its
connection's BuildSlot meanwhile, and its requests go on being served; what it has built
already counts with the answers the client has not taken.
Beyond `response_buffer_max_bytes` of answers, or when they stay unread for
`response_write_timeout_ms` (see ConnectionSweeper), the connection is closed. So is a slow
reader (one stopped at `response_buffer_bytes`) whose answers take what every slow reader
holds together past `response_buffer_total_bytes`: many connections, each under its own
bound, cannot together make the server hold more than that. An answer
larger than `max_response_bytes` is replaced by MESSAGE_TOO_LARGE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable
from functools import partial
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Final, cast

import msgspec

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import (
    EnvelopeError,
    RequestHeader,
    encode_body,
    encode_response,
    response_frame_of,
    split_request,
)
from coordinator_protocol.errors import ApiError, ErrorCode, UnsupportedVersionError
from coordinator_protocol.framing import FrameDecoder, FrameError, encode_frame
from coordinator_protocol.messages import Message, error_body, parse_request
from coordinator_protocol.security import SaslAuthenticateRequest, SaslHandshakeRequest
from coordinator_server.authentication.sasl_server import ANONYMOUS
from coordinator_server.authentication.ssl_principal_mapper import NoMatchingRuleError
from coordinator_server.runtime.api import RequestContext
from coordinator_server.server.authentication import (
    SASL_API_KEYS,
    SaslExchange,
    SaslStep,
    SaslStepKind,
    certificate_principal,
    illegal_sasl_state,
)
from coordinator_server.server.connection_events import RefusalReason, ServerCloseReason
from coordinator_server.service.slicing import BuildSlot

if TYPE_CHECKING:
    from coordinator_server.server.state import ServerState

logger = logging.getLogger(__name__)

# SO_LINGER on, with a timeout of 0: close() resets the connection.
_RESET_ON_CLOSE: Final = struct.pack("ii", 1, 0)


def response_error_code(body: dict[str, object]) -> int:
    """The error a response body reports, for metrics: its top-level error code, or for
    OffsetCommit (which has none) the first partition's. A response message answers the
    same with `Message.reported_error_code`, without a map being built."""
    code = body.get("error_code")
    if isinstance(code, int):
        return code
    topics = body.get("topics")
    if isinstance(topics, list) and topics:
        partitions = topics[0].get("partitions") if isinstance(topics[0], dict) else None
        if isinstance(partitions, list) and partitions and isinstance(partitions[0], dict):
            first = partitions[0].get("error_code")
            if isinstance(first, int):
                return first
    return 0


class CoordinatorConnection(asyncio.Protocol):
    def __init__(self, state: ServerState) -> None:
        self._state = state
        config = state.config
        self._decoder = FrameDecoder(config.max_frame_bytes)
        self._max_inflight = config.max_inflight_requests
        self._max_request_bytes = config.max_inflight_request_bytes
        self._max_response_bytes = config.max_response_bytes
        self._response_buffer_bytes = config.response_buffer_bytes
        self._response_buffer_max_bytes = config.response_buffer_max_bytes
        self._response_buffer_total_bytes = config.response_buffer_total_bytes
        self._transport: asyncio.Transport | None = None
        # Kept because asyncio.get_running_loop() costs a getpid() system call each time.
        # The listener makes connections on its loop.
        self._loop = asyncio.get_running_loop()
        self._peer = "?"
        self.host = ""
        self._client_host = "/"
        # Who the client is: Kafka's anonymous principal until a TLS client certificate or
        # the SASL exchange says otherwise.
        self.principal = ANONYMOUS
        self._context = RequestContext("", "/", ANONYMOUS)
        security = state.security
        self._sasl = SaslExchange(security) if security.protocol.uses_sasl else None
        # Requests pass the exchange's check while the client is not authenticated yet, or
        # its session can expire; afterwards a request costs this one test.
        self._guarded = self._sasl is not None
        if self._sasl is not None:
            self._decoder.max_frame_bytes = min(
                self._decoder.max_frame_bytes, security.max_receive_bytes
            )
        # Requests dispatched and not yet answered, their bytes, and frames waiting for room.
        self._inflight = 0
        # Where the answers of bulk requests are built in slices, one at a time.
        self._build_slot = BuildSlot(self._build_slot_freed)
        self._request_bytes = 0
        self._waiting: deque[bytes] = deque()
        self.reading_paused = False
        self._writing_paused = False
        # Responses ready to go out in the next write, and their bytes.
        self._outgoing: list[bytes] = []
        self._outgoing_bytes = 0
        # Monotonic seconds, read by ConnectionSweeper and ConnectionQuotas: the last read
        # that completed a request (or the opening), the first byte of a frame still
        # incomplete (0: none), and since when the client leaves its answers unread (0: it
        # reads them).
        self.last_request_at = monotonic()
        self.frame_started_at = 0.0
        self.write_blocked_since = 0.0
        # The last response model answered with, and its (error code, encoded body).
        self._last_message: Message | None = None
        self._last_encoding: tuple[int, bytes] = (0, b"")
        self._flush_scheduled = False
        self._closed = False
        # A refused authentication waits out its delay: nothing more is read meanwhile.
        self._refusing = False

    @property
    def inflight(self) -> int:
        return self._inflight + len(self._waiting)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        # Kafka's form of a member's client host.
        self._client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/"
        state = self._state
        if state.draining:
            refusal: RefusalReason | None = RefusalReason.SHUTTING_DOWN
        else:
            refusal = state.quotas.admit(self, self.last_request_at)
        if refusal is not None:
            if refusal is RefusalReason.MAX_CONNECTIONS_PER_IP:
                detail = f"{state.quotas.connections_from(self.host)} open from {self.host}"
            else:
                detail = f"{len(state.connections)} open"
            state.events.refused(refusal, self._peer, detail)
            self._closed = True
            self._transport.abort()
            return
        mapper = state.security.ssl_principal
        if mapper is not None:
            # The handshake is over when the connection is made: the certificate, if the
            # client showed one, is known.
            try:
                self.principal = certificate_principal(transport, mapper) or ANONYMOUS
            except NoMatchingRuleError as unmapped:
                state.metrics.authentications["SSL", "failure"] += 1
                self.expire(ServerCloseReason.AUTHENTICATION_FAILED, str(unmapped))
                return
            if self.principal != ANONYMOUS and self._sasl is None:
                state.metrics.authentications["SSL", "success"] += 1
        self._context = RequestContext("", self._client_host, self.principal)
        # The transport pauses us (pause_writing) once its buffer holds more than this:
        # the answers the client has not taken count against response_buffer_bytes.
        self._transport.set_write_buffer_limits(high=self._response_buffer_bytes)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self._closed:
            self._state.events.closed(ServerCloseReason.CONNECTION_ERROR, self._peer, str(exc))
        self._closed = True
        self._waiting.clear()
        self._outgoing.clear()
        self._state.slow_readers.discard(self)
        self._state.quotas.release(self)
        self._state.connection_closed(self)

    def pause_writing(self) -> None:
        # The client does not read its responses: stop reading its requests until it does.
        self._writing_paused = True
        self.write_blocked_since = monotonic()
        self._state.slow_readers.add(self)
        self._update_reading()

    def unread_bytes(self) -> int:
        transport = self._transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def resume_writing(self) -> None:
        self._state.slow_readers.discard(self)
        self._writing_paused = False
        self.write_blocked_since = 0.0
        self._admit_waiting()
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        # The one clock read of a read, however many frames it holds.
        now = monotonic()
        decoder = self._decoder
        try:
            frames = decoder.feed(data)
        except FrameError as exc:
            self._protocol_violation(str(exc))
            return
        if frames:
            self.last_request_at = now
            self._state.quotas.touch(self)
            if self._waiting:
                self._waiting.extend(frames)
                self._admit_waiting()
            else:
                self._dispatch_frames(frames)
            if self._closed:
                return
        if decoder.buffered_bytes:
            # A frame has started: in this read if it completed others, else at its first byte.
            if frames or not self.frame_started_at:
                self.frame_started_at = now
        else:
            self.frame_started_at = 0.0
        self._update_reading()

    # Requests.

    def _dispatch_frames(self, frames: list[bytes]) -> None:
        """Dispatch the frames of a read while there is room (see `_admit_waiting`); the
        rest wait."""
        max_inflight = self._max_inflight
        max_request_bytes = self._max_request_bytes
        assert self._transport is not None
        room = self._response_buffer_bytes - self._transport.get_write_buffer_size()
        slot = self._build_slot
        for index, payload in enumerate(frames):
            if (
                self._inflight >= max_inflight
                or slot.building is not None
                or self._outgoing_bytes + slot.parked_bytes > room
                or (self._request_bytes and self._request_bytes + len(payload) > max_request_bytes)
            ):
                self._waiting.extend(frames[index:])
                return
            self._dispatch(payload)
            if self._closed:
                return

    def _admit_waiting(self) -> None:
        """Dispatch waiting frames while fewer than `max_inflight_requests` are in flight,
        their bytes stay within `max_inflight_request_bytes` (a frame alone is always taken,
        so a large valid request still works), and the answers the client has not taken
        (ready ones, the transport's buffer, and what parked answers have built already) stay
        within `response_buffer_bytes`, and no answer is being built in slices (one that is
        parked does not count). The answers of one read are produced in this loop, before
        any is written: the check must be here, not only in pause_writing."""
        waiting = self._waiting
        if not waiting or self._closed or self._transport is None:
            return
        max_inflight = self._max_inflight
        max_request_bytes = self._max_request_bytes
        room = self._response_buffer_bytes - self._transport.get_write_buffer_size()
        slot = self._build_slot
        while waiting and not self._closed:
            payload = waiting[0]
            if (
                self._inflight >= max_inflight
                or slot.building is not None
                or self._outgoing_bytes + slot.parked_bytes > room
                or (self._request_bytes and self._request_bytes + len(payload) > max_request_bytes)
            ):
                return
            waiting.popleft()
            self._dispatch(payload)

    def _dispatch(self, payload: bytes) -> None:
        try:
            header, body = split_request(payload)
        except EnvelopeError as exc:
            self._protocol_violation(str(exc))
            return
        started = perf_counter()
        state = self._state
        if self._guarded and self._guard(header, body, started):
            return
        handler = state.handlers.get(header.api_key)
        try:
            request = parse_request(header, body)
        except UnsupportedVersionError as exc:
            self._respond(header, self._unsupported(header, exc), started)
            return
        except ApiError as exc:
            self._respond(header, error_body(exc.code, exc.message), started)
            return
        except EnvelopeError as exc:
            # A str in the body that is not UTF-8: not msgpack, so the connection ends.
            self._protocol_violation(str(exc))
            return
        if handler is None:
            if header.api_key in SASL_API_KEYS:
                if self._sasl is not None:
                    # After the exchange: a re-authentication (KIP-368), or a refusal.
                    self._sasl_step(header, request, started)
                else:
                    # A listener without SASL answers the exchange as Kafka's KafkaApis does.
                    self._respond_with(header, illegal_sasl_state(request), started)
                return
            self._respond(
                header,
                error_body(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"api_key {header.api_key} is not served by this coordinator",
                ),
                started,
            )
            return
        context = self._context
        if context.client_id != (header.client_id or ""):
            context = self._context = RequestContext(
                header.client_id or "", self._client_host, self.principal
            )
        try:
            reply = handler(request, context)
        except Exception:
            logger.exception("handler for api_key %d failed", header.api_key)
            self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
            return
        if isinstance(reply, Message):
            self._respond_with(header, reply, started)
            return
        future = reply.future
        if future.done():
            self._reply_done(header, reply.on_error, started, 0, future, counted=False)
            return
        size = len(payload)
        self._inflight += 1
        self._request_bytes += size
        if reply.sliced is not None:
            reply.sliced.build_in(self._build_slot)
        future.add_done_callback(partial(self._reply_done, header, reply.on_error, started, size))

    # Authentication.

    def _guard(self, header: RequestHeader, body: msgspec.Raw, started: float) -> bool:
        """The SASL exchange's turn at a request; True when it took the request (answered
        it, or closed the connection for it)."""
        sasl = self._sasl
        assert sasl is not None
        api_key = header.api_key
        if sasl.failed:
            # Refused already: the answer goes out after the delay, then the connection ends.
            return True
        if api_key in SASL_API_KEYS:
            try:
                request = parse_request(header, body)
            except (ApiError, EnvelopeError) as exc:
                self._not_authenticated(f"malformed {header.api_key} during SASL: {exc}")
                return True
            self._sasl_step(header, request, started)
            return True
        if not sasl.admits(api_key):
            self._not_authenticated(
                f"api_key {api_key} before the client authenticated "
                f"(SASL, {sasl.mechanism or 'no handshake'})"
            )
            return True
        if sasl.expired(self.last_request_at):
            self._not_authenticated(
                f"api_key {api_key} after the session of {sasl.principal} expired"
            )
            return True
        return False

    def _sasl_step(self, header: RequestHeader, request: Message, started: float) -> None:
        sasl = self._sasl
        assert sasl is not None
        if isinstance(request, SaslHandshakeRequest):
            step = sasl.handshake(request)
        elif isinstance(request, SaslAuthenticateRequest):
            step = sasl.authenticate(request, self.last_request_at)
        else:  # pragma: no cover - SASL_API_KEYS holds only these two
            raise AssertionError(type(request))
        if step.kind is SaslStepKind.CLOSE:
            self._not_authenticated(step.reason)
            return
        if step.kind is SaslStepKind.REFUSE:
            self._refuse_authentication(header, step, started)
            return
        assert step.response is not None
        if step.authenticated:
            self._authenticated(sasl)
        self._respond_with(header, step.response, started)

    def _authenticated(self, sasl: SaslExchange) -> None:
        metrics = self._state.metrics
        outcome = "reauthentication" if sasl.reauthentications else "success"
        metrics.authentications[sasl.mechanism, outcome] += 1
        # The SASL principal wins over a certificate's (Kafka's rule on SASL_SSL); a
        # re-authentication keeps it (the exchange refuses another one).
        self.principal = sasl.principal
        self._context = RequestContext(self._context.client_id, self._client_host, self.principal)
        self._guarded = bool(sasl.expires_at)
        self._decoder.max_frame_bytes = self._state.config.max_frame_bytes

    def _refuse_authentication(self, header: RequestHeader, step: SaslStep, started: float) -> None:
        """Answer a refused exchange after Kafka's failed-authentication delay, then close:
        meanwhile the connection reads nothing."""
        sasl = self._sasl
        assert sasl is not None and step.response is not None
        state = self._state
        state.metrics.authentications[sasl.mechanism or "-", "failure"] += 1
        state.events.closed(ServerCloseReason.AUTHENTICATION_FAILED, self._peer, step.reason)
        self._waiting.clear()
        self._refusing = True
        self._update_reading()
        response = step.response
        delay_s = state.security.failed_authentication_delay_ms / 1000

        def answer_and_close() -> None:
            if self._closed:
                return
            self._respond_with(header, response, started)
            self.close()

        if delay_s > 0:
            self._loop.call_later(delay_s, answer_and_close)
        else:
            answer_and_close()

    def _not_authenticated(self, reason: str) -> None:
        self._state.metrics.authentications[
            (self._sasl.mechanism if self._sasl is not None else "") or "-", "failure"
        ] += 1
        self.expire(ServerCloseReason.NOT_AUTHENTICATED, reason)

    def _unsupported(self, header: RequestHeader, exc: ApiError) -> dict[str, object]:
        if header.api_key == ApiKey.API_VERSIONS:
            # The contract: ApiVersions at an unsupported version still lists the api keys,
            # so a client can pick a version it shares with the server.
            return self._state.api_versions_body(ErrorCode.UNSUPPORTED_VERSION, exc.message)
        return error_body(ErrorCode.UNSUPPORTED_VERSION, exc.message)

    def _reply_done(
        self,
        header: RequestHeader,
        on_error: Callable[[BaseException], Message] | None,
        started: float,
        size: int,
        done: asyncio.Future[Message],
        *,
        counted: bool = True,
    ) -> None:
        if done.cancelled():
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = done.exception()
        if error is None:
            self._respond_with(header, done.result(), started)
        elif on_error is not None:
            try:
                answer = on_error(error)
            except Exception:
                logger.exception("mapping the error of api_key %d failed", header.api_key)
                self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
            else:
                self._respond_with(header, answer, started)
        elif isinstance(error, asyncio.CancelledError):
            self._respond(
                header,
                error_body(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the request was cancelled"),
                started,
            )
        else:
            logger.error("request api_key %d failed", header.api_key, exc_info=error)
            self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
        if not counted:
            return
        self._inflight -= 1
        self._request_bytes -= size
        if self._waiting:
            self._admit_waiting()
        self._update_reading()
        if self._inflight == 0:
            self._state.connection_idle(self)

    def _build_slot_freed(self) -> None:
        """The answer being built parked (it waits for a write): take the requests that
        wait for the slot."""
        if self._waiting:
            self._admit_waiting()
            self._update_reading()

    # Responses.

    def _respond_with(self, header: RequestHeader, message: Message, started: float) -> None:
        """Answer with a response model. The last one's encoding is kept: responses that are
        shared values (a heartbeat's answer is one of a few) are encoded once, not once per
        request."""
        if message is self._last_message:
            code, encoded = self._last_encoding
        else:
            code = message.reported_error_code()
            encoded = encode_body(message)
            if len(encoded) > self._max_response_bytes:
                code = ErrorCode.MESSAGE_TOO_LARGE
                encoded = encode_body(self._too_large(header, len(encoded)))
            # Holding the message keeps its identity from being reused by another object.
            self._last_message = message
            self._last_encoding = (code, encoded)
        self._state.metrics.request_done(header.api_key, code, perf_counter() - started)
        if self._closed:
            return
        frame = response_frame_of(header.correlation_id, encoded)
        self._outgoing.append(frame)
        self._outgoing_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def _respond(self, header: RequestHeader, body: dict[str, object], started: float) -> None:
        payload = encode_response(header.correlation_id, body)
        if len(payload) > self._max_response_bytes:
            body = self._too_large(header, len(payload))
            payload = encode_response(header.correlation_id, body)
        self._state.metrics.request_done(
            header.api_key, response_error_code(body), perf_counter() - started
        )
        if self._closed:
            return
        frame = encode_frame(payload)
        self._outgoing.append(frame)
        self._outgoing_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def _too_large(self, header: RequestHeader, size: int) -> dict[str, object]:
        """Kafka's answer to a message over a size limit, in the contract's generic error
        body (as for INVALID_REQUEST): the client learns why instead of losing the
        connection, and the server never holds an answer larger than the limit."""
        return error_body(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"the response to api_key {header.api_key} would be {size} bytes, over the "
            f"server's max_response_bytes of {self._max_response_bytes}",
        )

    @property
    def answers_ready(self) -> int:
        """How many answers wait for the next write (`flush`)."""
        return len(self._outgoing)

    def flush(self) -> None:
        """Write every answer that is ready, in one write (scheduled once per turn of the
        event loop in which answers became ready)."""
        self._flush_scheduled = False
        transport = self._transport
        if self._closed or transport is None or not self._outgoing:
            self._outgoing.clear()
            self._outgoing_bytes = 0
            return
        data = b"".join(self._outgoing) if len(self._outgoing) > 1 else self._outgoing[0]
        self._outgoing.clear()
        self._outgoing_bytes = 0
        transport.write(data)
        if self._writing_paused:
            # Past response_buffer_bytes (write() paused us): answers that complete while
            # the client does not read still arrive, up to the hard limit.
            buffered = transport.get_write_buffer_size()
            if buffered > self._response_buffer_max_bytes:
                self.expire(
                    ServerCloseReason.RESPONSE_BUFFER_FULL,
                    f"{buffered} bytes of answers unread, over response_buffer_max_bytes",
                )
                return
            # Counted only here, when a slow reader's answers grow: the sum runs over the
            # slow readers alone, and a server without any never computes it.
            total = self._state.unread_bytes()
            if total > self._response_buffer_total_bytes:
                self.expire(
                    ServerCloseReason.RESPONSE_BUFFER_FULL,
                    f"{buffered} bytes of answers unread here, {total} by every slow reader "
                    "together, over response_buffer_total_bytes",
                )
        elif self._waiting:
            # Frames held back for the answers of their read can go now.
            self._admit_waiting()
            self._update_reading()

    # Flow control and closing.

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        should_pause = (
            self._writing_paused
            or self._state.draining
            or self._inflight >= self._max_inflight
            or bool(self._waiting)
            or self._request_bytes >= self._max_request_bytes
            or self._refusing
        )
        if should_pause and not self.reading_paused:
            self.reading_paused = True
            transport.pause_reading()
        elif not should_pause and self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    def _protocol_violation(self, reason: str) -> None:
        self._state.metrics.malformed_frames += 1
        self.expire(ServerCloseReason.MALFORMED_FRAME, reason)

    def expire(self, reason: ServerCloseReason, detail: str) -> None:
        """Close for `reason`, counted and logged with back-off. The connection leaves the
        quotas at once (its place is free for the next one); it ends gracefully only if it
        is idle and owes the client nothing."""
        if self._closed:
            return
        self._state.events.closed(reason, self._peer, detail)
        self._state.quotas.release(self)
        self._state.slow_readers.discard(self)
        transport = self._transport
        if (
            reason is ServerCloseReason.IDLE
            and transport is not None
            and not self._outgoing
            and not transport.get_write_buffer_size()
        ):
            self._closed = True
            transport.close()
        else:
            # A broken stream ends as it always has; a client closed for what it holds or
            # does not read is reset (see abort).
            self.abort(reset=reason is not ServerCloseReason.MALFORMED_FRAME)

    def stop_reading(self) -> None:
        """Graceful shutdown: take no new requests, keep answering the ones in flight."""
        self._update_reading()

    def close(self) -> None:
        """Close after the responses already produced are written."""
        if self._closed:
            return
        self._closed = True
        self._waiting.clear()
        if self._transport is not None:
            if self._outgoing:
                self._transport.write(b"".join(self._outgoing))
            self._transport.close()
        self._outgoing.clear()

    def abort(self, *, reset: bool = False) -> None:
        """Close at once, dropping the answers not written yet. With `reset`, the kernel's
        unsent bytes too: the connection is reset rather than ended by a FIN queued behind
        answers the client may never read, so the socket and its buffers are freed at once
        instead of after minutes of probing a closed window."""
        self._closed = True
        self._outgoing.clear()
        transport = self._transport
        if transport is None:
            return
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
        transport.abort()
