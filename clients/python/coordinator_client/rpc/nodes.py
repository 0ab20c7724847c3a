"""Where the RPC client connects: the bootstrap servers it is given, the coordinators
FindCoordinator names, and the TLS it speaks to them."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Node", "build_ssl_context", "parse_bootstrap"]


@dataclass(frozen=True, slots=True)
class Node:
    """A coordinator server as FindCoordinator names it (bootstrap servers have id -1)."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.node_id})"


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """ "host:port[,host:port...]" (or a list of "host:port") as (host, port) pairs.

    IPv6 hosts go in brackets: "[::1]:9094".

    Raises:
        ValueError: empty, or an entry without a valid port.
    """
    entries = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        host, sep, port_text = entry.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        addresses.append((host, int(port_text)))
    if not addresses:
        raise ValueError("no bootstrap server given")
    return addresses


def build_ssl_context(
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: verifies the server against `cafile` (or the system's CAs) and
    presents `certfile`/`keyfile` when given (mutual TLS)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    return context
