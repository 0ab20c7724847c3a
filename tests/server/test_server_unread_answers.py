"""Answers that slow readers leave unread are bounded for the whole server, not only per
connection: many connections that each stay under `--response-buffer-max-bytes` cannot
together make the server hold more than `--response-buffer-total-bytes`."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from server_process import ServerProcess, sqlite_args
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request
from coordinator_protocol.framing import encode_frame

pytestmark = [pytest.mark.slow]

# A group whose OffsetFetch answer is about 1.6 MB.
OFFSETS = 20_000
HOGS = 30
TOTAL_BYTES = 8 * 1024 * 1024


async def test_slow_readers_together_are_bounded_server_wide(tmp_path: Path) -> None:
    args = sqlite_args(
        tmp_path,
        "--max-response-bytes", str(4 * 1024 * 1024),
        "--response-buffer-bytes", "262144",
        "--response-buffer-max-bytes", str(6 * 1024 * 1024),
        "--response-buffer-total-bytes", str(TOTAL_BYTES),
    )  # fmt: skip
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        offsets = {("t", p): p for p in range(OFFSETS)}
        for start in range(0, OFFSETS, 2000):
            part = {key: offsets[key] for key in list(offsets)[start : start + 2000]}
            committed = await client.call(ApiKey.OFFSET_COMMIT, commit_body("big", part))
            assert set(commit_errors(committed).values()) == {0}
        request = encode_frame(
            encode_request(RequestHeader(ApiKey.OFFSET_FETCH, 0, 1, "hog"), fetch_body("big", None))
        )
        loop = asyncio.get_running_loop()
        hogs: list[socket.socket] = []
        try:
            # Each asks for the big answer three times and reads nothing: about 5 MB each,
            # under the connection's own bound, 140 MB together.
            for _ in range(HOGS):
                hog = socket.socket()
                hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                hog.setblocking(False)
                await loop.sock_connect(hog, (server.host, server.port))
                await loop.sock_sendall(hog, request * 3)
                hogs.append(hog)
            # Every slow reader over the bound is closed: what the server holds for them
            # together stays within it (the kernel's socket buffers take the rest).
            deadline = time.monotonic() + 30
            while not any("response_buffer_total_bytes" in line for line in server.lines):
                assert time.monotonic() < deadline, server.output()
                await asyncio.sleep(0.1)
            (line,) = [line for line in server.lines if "response_buffer_total_bytes" in line]
            together = int(line.split(" by every slow reader")[0].rsplit(" ", 1)[1])
            assert TOTAL_BYTES < together <= TOTAL_BYTES + 4 * 1024 * 1024, line
            # Others are served at once meanwhile.
            started = time.monotonic()
            fetched = await asyncio.wait_for(
                client.call(ApiKey.OFFSET_FETCH, fetch_body("big", None)), 10
            )
            assert fetched_offsets(fetched) == offsets
            assert time.monotonic() - started < 2
        finally:
            for hog in hogs:
                hog.close()
            await client.close()
