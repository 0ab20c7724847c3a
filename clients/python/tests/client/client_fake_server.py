"""A scripted coordinator on 127.0.0.1 for client tests.

It speaks the contract's framing and envelopes and hands each request to a handler the
test writes; each request is handled in its own task, so a handler that waits makes its
answer come out of order. A handler returns the response body, or None for no answer.
FindCoordinator is answered with `coordinator_address` (this server by default) unless the
handler answers it.

With `sasl` (a `FakeSasl`) the server authenticates as a Kafka listener does: SaslHandshake
and SaslAuthenticate are answered by it, in order, and any other request (but ApiVersions)
on a connection not authenticated, or in the middle of a re-authentication, is recorded in
`sasl.violations` and closes the connection. With `ssl` (a server TLS context) it serves TLS;
`peer_certificates` holds each connection's client certificate (None without one).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import decode_request, encode_response
from coordinator_protocol.framing import FrameDecoder, encode_frame


@dataclass
class Received:
    api_key: int
    correlation_id: int
    body: dict[str, Any]
    connection: int
    at: float = field(default_factory=time.monotonic)


Handler = Callable[["Received"], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]


@dataclass
class SaslSession:
    """One connection's authentication, as the fake listener keeps it."""

    mechanism: str | None = None
    exchanging: bool = False
    authenticated: bool = False
    authentications: int = 0
    step: int = 0
    principal: str | None = None
    scram: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)


class FakeSasl:
    """The listener's side of Kafka's SASL exchange, scripted: PLAIN and SCRAM against
    `users` (name: password), OAUTHBEARER against `tokens` (an accepted token's subject is
    the principal). `session_lifetime_ms` is granted to each completed exchange; `delay_s`
    holds each SaslAuthenticate answer back (a slow exchange); `forge_server_signature`
    makes SCRAM's server-final wrong (a server that does not hold the credential)."""

    def __init__(
        self,
        *,
        users: dict[str, str] | None = None,
        tokens: dict[str, str] | None = None,
        mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        session_lifetime_ms: int = 0,
        iterations: int = 4096,
    ) -> None:
        self.users = dict(users or {})
        self.tokens = dict(tokens or {})
        self.mechanisms = mechanisms
        self.session_lifetime_ms = session_lifetime_ms
        self.iterations = iterations
        self.delay_s = 0.0
        self.forge_server_signature = False
        self.sessions: dict[int, SaslSession] = {}
        self.violations: list[Received] = []
        self.failures: list[str] = []

    def session(self, connection: int) -> SaslSession:
        return self.sessions.setdefault(connection, SaslSession())

    def ready(self, connection: int) -> bool:
        session = self.session(connection)
        return session.authenticated and not session.exchanging

    def handshake(self, received: Received) -> dict[str, Any]:
        session = self.session(received.connection)
        mechanism = received.body["mechanism"]
        if mechanism not in self.mechanisms:
            return {"error_code": 33, "mechanisms": list(self.mechanisms)}
        session.mechanism = mechanism
        session.exchanging = True
        session.step = 0
        session.scram = {}
        return {"error_code": 0, "mechanisms": list(self.mechanisms)}

    def authenticate(self, received: Received) -> tuple[dict[str, Any], bool]:
        """The answer, and whether the connection must close after it (a refusal)."""
        session = self.session(received.connection)
        if not session.exchanging:
            return self._failed(34, "SaslAuthenticate without a SaslHandshake")
        token: bytes = received.body["auth_bytes"]
        if session.mechanism == "PLAIN":
            _, user, password = token.decode().split("\0")
            if self.users.get(user) != password:
                return self._failed(58, "Authentication failed: Invalid username or password")
            return self._complete(session, f"User:{user}")
        if session.mechanism == "OAUTHBEARER":
            return self._oauthbearer(session, token)
        return self._scram(session, token)

    def _oauthbearer(self, session: SaslSession, token: bytes) -> tuple[dict[str, Any], bool]:
        if session.step == 1:
            # The client's %x01 after our error challenge.
            return self._failed(58, "Authentication failed: invalid_token")
        text = token.decode()
        assert text.startswith("n,,\x01auth=Bearer ") and text.endswith("\x01\x01"), text
        bearer = text[len("n,,\x01auth=Bearer ") : -2]
        session.tokens.append(bearer)
        subject = self.tokens.get(bearer)
        if subject is None:
            session.step = 1
            challenge = json.dumps({"status": "invalid_token"}).encode()
            return {"error_code": 0, "auth_bytes": challenge, "session_lifetime_ms": 0}, False
        return self._complete(session, f"User:{subject}")

    def _scram(self, session: SaslSession, token: bytes) -> tuple[dict[str, Any], bool]:
        digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[session.mechanism or ""]
        state = session.scram
        if session.step == 0:
            header, _, bare = token.decode().partition(",,")
            assert header == "n", header
            fields = dict(part.split("=", 1) for part in bare.split(","))
            user = fields["n"].replace("=2C", ",").replace("=3D", "=")
            nonce = fields["r"] + secrets.token_urlsafe(16)
            salt = secrets.token_bytes(16)
            server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={self.iterations}"
            state.update(user=user, nonce=nonce, salt=salt, bare=bare, server_first=server_first)
            session.step = 1
            return {"error_code": 0, "auth_bytes": server_first.encode()}, False
        final = token.decode()
        without_proof, _, proof = final.rpartition(",p=")
        password = self.users.get(state["user"])
        if password is None or f"r={state['nonce']}" not in without_proof:
            return self._failed(
                58,
                "Authentication failed during authentication due to "
                f"invalid credentials with SASL mechanism {session.mechanism}",
            )
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), state["salt"], self.iterations)
        auth_message = f"{state['bare']},{state['server_first']},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = hashlib.new(digest, client_key).digest()
        signature = hmac.new(stored_key, auth_message, digest).digest()
        expected = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        if not hmac.compare_digest(base64.b64decode(proof), expected):
            return self._failed(
                58,
                "Authentication failed during authentication due to "
                f"invalid credentials with SASL mechanism {session.mechanism}",
            )
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        if self.forge_server_signature:
            server_key = bytes(len(server_key))
        verifier = hmac.new(server_key, auth_message, digest).digest()
        final_message = f"v={base64.b64encode(verifier).decode()}".encode()
        return self._complete(session, f"User:{state['user']}", final_message)

    def _complete(
        self, session: SaslSession, principal: str, final: bytes = b""
    ) -> tuple[dict[str, Any], bool]:
        session.exchanging = False
        session.authenticated = True
        session.authentications += 1
        session.principal = principal
        answer = {
            "error_code": 0,
            "error_message": None,
            "auth_bytes": final,
            "session_lifetime_ms": self.session_lifetime_ms,
        }
        return answer, False

    def _failed(self, code: int, message: str) -> tuple[dict[str, Any], bool]:
        self.failures.append(message)
        return {"error_code": code, "error_message": message, "auth_bytes": b""}, True


class FakeCoordinator:
    def __init__(
        self,
        handler: Handler | None = None,
        *,
        node_id: int = 0,
        sasl: FakeSasl | None = None,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.node_id = node_id
        self.sasl = sasl
        self.ssl = ssl
        self.peer_certificates: list[dict[str, Any] | None] = []
        self.received: list[Received] = []
        self.host = "127.0.0.1"
        self.port = 0
        self.coordinator_address: tuple[str, int] | None = None
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # The server's side of each connection, in the order they came.
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        self._arrived = asyncio.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> FakeCoordinator:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.close_all_connections()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # The connection handlers end by themselves once their sockets are closed (asyncio
        # reports a cancelled handler as an error).
        await asyncio.wait(self._serving, timeout=5) if self._serving else None
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeCoordinator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def close_all_connections(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    def requests(self, api_key: int) -> list[Received]:
        return [r for r in self.received if r.api_key == api_key]

    async def wait_for_requests(self, api_key: int, count: int = 1, timeout: float = 5) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests(api_key)) < count:
                await self._arrived.wait()
                self._arrived.clear()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        self.writers.append(writer)
        if self.ssl is not None:
            self.peer_certificates.append(writer.get_extra_info("peercert"))
        decoder = FrameDecoder()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError, ssl_module.SSLError):
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    header, body = decode_request(payload)
                    assert isinstance(body, dict)
                    received = Received(header.api_key, header.correlation_id, body, connection)
                    self.received.append(received)
                    self._arrived.set()
                    if self.sasl is not None and not await self._authenticating(received, writer):
                        writer.close()
                        return
                    if self.sasl is None or received.api_key not in _SASL_APIS:
                        self._spawn(self._answer(received, writer))
        writer.close()

    async def _authenticating(self, received: Received, writer: asyncio.StreamWriter) -> bool:
        """Answer the SASL exchange in order, and refuse what comes before it ends; False:
        the connection closes."""
        sasl = self.sasl
        assert sasl is not None
        if received.api_key == ApiKey.SASL_HANDSHAKE:
            self.send(writer, received.correlation_id, sasl.handshake(received))
            return True
        if received.api_key == ApiKey.SASL_AUTHENTICATE:
            if sasl.delay_s:
                await asyncio.sleep(sasl.delay_s)
            answer, refused = sasl.authenticate(received)
            self.send(writer, received.correlation_id, answer)
            if refused:
                await writer.drain()
            return not refused
        if received.api_key != ApiKey.API_VERSIONS and not sasl.ready(received.connection):
            sasl.violations.append(received)
            return False
        return True

    async def _answer(self, received: Received, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = self.handler(received) if self.handler is not None else None
            if asyncio.iscoroutine(body) or isinstance(body, asyncio.Future):
                body = await body
            if body is None and received.api_key == ApiKey.FIND_COORDINATOR:
                body = self.find_coordinator_body(received)
        finally:
            self.in_flight -= 1
        if body is not None and not writer.is_closing():
            self.send(writer, received.correlation_id, body)

    @staticmethod
    def send(writer: asyncio.StreamWriter, correlation_id: int, body: Any) -> None:
        writer.write(encode_frame(encode_response(correlation_id, body)))

    def find_coordinator_body(self, received: Received) -> dict[str, Any]:
        host, port = self.coordinator_address or (self.host, self.port)
        return {
            "coordinators": [
                {
                    "key": key,
                    "node_id": self.node_id,
                    "host": host,
                    "port": port,
                    "error_code": 0,
                    "error_message": None,
                }
                for key in received.body["keys"]
            ]
        }


_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def commit_answer(received: Received, code: int) -> dict[str, Any]:
    """An OffsetCommit answer giving every partition of the request `code`."""
    return {
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code}
                    for p in topic["partitions"]
                ],
            }
            for topic in received.body["topics"]
        ]
    }
