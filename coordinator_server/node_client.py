"""One request from this node to another node of its cluster, over a connection of its own
(Kafka's inter-broker channel, in a few lines: what the markers' peers and the security
APIs' forwarding to the security partition's owner send).

How the connection is made is the `NodeConnector`'s (Kafka's ChannelBuilder for the
inter-broker listener): TCP, TLS where the nodes serve it, and whatever a node does to
authenticate itself before its first request (a SASL exchange) once the nodes ask for it.
The request goes out under this node's client id, `node_client_id`, by which a node tells a
request another node sent on.

Not the client library's RPC client: the server imports none of its clients, only its
security settings and SASL exchanges (`coordinator_client.rpc.security`, `.sasl`), so that a
node authenticates to another exactly as any client of ours does (`SecureNodeConnector`,
from `--inter-node-command-config`). A connection per request: these requests are rare (a
transaction's end on another node's partition, an ACL change), and a node that just took a
partition over is reached as soon as the placement names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import struct
from typing import Final, Protocol

from coordinator_client.rpc.sasl import authenticate
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.envelope import RequestHeader, encode_request, split_response
from coordinator_protocol.errors import ProtocolError
from coordinator_protocol.framing import encode_frame
from coordinator_protocol.messages import Message, parse_response
from coordinator_server.node_address import NodeAddress

__all__ = [
    "NODE_CLIENT_ID_PREFIX",
    "UNREACHABLE",
    "NodeClient",
    "NodeConnector",
    "SecureNodeConnector",
    "TcpNodeConnector",
    "node_client_id",
]

NODE_CLIENT_ID_PREFIX: Final = "coordinator-node-"

UNREACHABLE: Final = (
    OSError,
    TimeoutError,
    asyncio.IncompleteReadError,
    ValueError,
    ProtocolError,
)
"""What `NodeClient.send` raises when the node did not answer (refused, closed, timed out,
or answered something that is no answer to the request)."""

_LENGTH = struct.Struct(">I")


def node_client_id(node_id: int) -> str:
    """The client id of the requests node `node_id` sends to the others."""
    return f"{NODE_CLIENT_ID_PREFIX}{node_id}"


class NodeConnector(Protocol):
    """How this node opens a connection to another node, ready for its first request."""

    async def connect(self, node: NodeAddress) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `node`; raises OSError (or TimeoutError) when there is none."""
        ...


class TcpNodeConnector:
    """Plain TCP, or TLS with `ssl_context` (the nodes of one cluster serve alike)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context

    async def connect(self, node: NodeAddress) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(node.host, node.port, ssl=self._ssl)


class SecureNodeConnector:
    """TLS and SASL as `security` says (Kafka's client settings): the connection is
    authenticated before it is handed over, as this node's principal (which needs
    CLUSTER_ACTION, and ALTER and DESCRIBE on the cluster for the security APIs it sends on:
    a super user, typically)."""

    def __init__(self, security: ClientSecurity, *, max_answer_bytes: int = 1024 * 1024) -> None:
        self._security = security
        self._ssl = security.ssl_context()
        self._max_answer_bytes = max_answer_bytes
        self._correlation = itertools.count(1)

    async def connect(self, node: NodeAddress) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(node.host, node.port, ssl=self._ssl)
        if not self._security.uses_sasl:
            return reader, writer
        try:

            async def exchange(request: Message, _answer: type[Message]) -> Message:
                return await _round_trip(
                    reader,
                    writer,
                    request,
                    next(self._correlation) & 0x7FFFFFFF,
                    "coordinator-node",
                    self._max_answer_bytes,
                )

            await authenticate(
                exchange, self._security.sasl_client(), where=f"{node.host}:{node.port}"
            )
        except BaseException:
            writer.close()
            raise
        return reader, writer


async def _round_trip(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: Message,
    correlation_id: int,
    client_id: str,
    max_answer_bytes: int,
) -> Message:
    api_key, api_version = request.API_KEY, request.API_VERSION
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    writer.write(encode_frame(encode_request(header, request.to_body())))
    await writer.drain()
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > max_answer_bytes:
        raise ValueError(f"an answer of {length} bytes")
    answered_id, body = split_response(await reader.readexactly(length))
    if answered_id != correlation_id:
        raise ValueError("the answer is for another request")
    return parse_response(api_key, api_version, body)


class NodeClient:
    """Sends this node's requests to the other nodes, one connection each."""

    def __init__(
        self,
        this_node: int,
        connector: NodeConnector,
        *,
        timeout_s: float = 10.0,
        max_answer_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        """`timeout_s`: the longest a request takes, connection included;
        `max_answer_bytes`: a longer answer is refused unread."""
        self._connector = connector
        self._client_id = node_client_id(this_node)
        self._timeout_s = timeout_s
        self._max_answer_bytes = max_answer_bytes
        self._correlation = itertools.count(1)
        self.requests = 0

    async def send(self, node: NodeAddress, request: Message) -> Message:
        """`request`'s answer from `node`.

        Raises:
            ApiError: the node answered an error the response has no place for (a request
                it could not read, of a version it does not serve).
            One of UNREACHABLE: no answer.
        """
        self.requests += 1
        return await asyncio.wait_for(self._send(node, request), self._timeout_s)

    async def _send(self, node: NodeAddress, request: Message) -> Message:
        reader, writer = await self._connector.connect(node)
        try:
            return await _round_trip(
                reader,
                writer,
                request,
                next(self._correlation) & 0x7FFFFFFF,
                self._client_id,
                self._max_answer_bytes,
            )
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
