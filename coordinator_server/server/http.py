"""The operator's HTTP port: /metrics, /healthz, /readyz and /status.

A deliberately small HTTP/1.1 server on asyncio (GET only, one request per connection),
so scraping and probes run on the server's own event loop and read its state directly,
with no thread and no extra dependency.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

logger = logging.getLogger(__name__)

MAX_REQUEST_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Probe:
    """The answer of a probe: whether it passes and a JSON-able detail."""

    ok: bool
    detail: object


class OperatorHttpServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], Probe],
        status: Callable[[], object],
        appendix: Callable[[], bytes] | None = None,
    ) -> None:
        """`appendix()`: families /metrics serves after the registry's, already in the
        text format (what would take long to render at each scrape)."""
        self._registry = registry
        self._appendix = appendix
        self._ready = ready
        self._status = status
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve, host, port, limit=MAX_REQUEST_HEAD_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                await self._write(writer, 400, "text/plain", b"bad request\n")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method != "GET":
                await self._write(writer, 405, "text/plain", b"method not allowed\n")
                return
            status, content_type, body = self._route(target)
            await self._write(writer, status, content_type, body)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ConnectionError:
            pass
        except Exception:
            logger.exception("operator HTTP request failed")
            await self._write(writer, 500, "text/plain", b"internal error\n")
        finally:
            writer.close()

    def _route(self, target: str) -> tuple[int, str, bytes]:
        if target == "/metrics":
            body = generate_latest(self._registry)
            if self._appendix is not None:
                body += self._appendix()
            return 200, CONTENT_TYPE_LATEST, body
        if target == "/healthz":
            return 200, "text/plain", b"ok\n"
        if target == "/readyz":
            probe = self._ready()
            return (200 if probe.ok else 503), "application/json", _json(probe.detail)
        if target == "/status":
            return 200, "application/json", _json(self._status())
        return 404, "text/plain", b"not found\n"

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  500: "Internal Server Error", 503: "Service Unavailable"}[status]  # fmt: skip
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1")
        writer.write(head + body)
        await writer.drain()


def _json(value: object) -> bytes:
    return (json.dumps(value, sort_keys=True) + "\n").encode()
