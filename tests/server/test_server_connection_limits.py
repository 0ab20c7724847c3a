"""Hostile and broken clients against a real server process: answers left unread, frames
that never finish, idle sockets that fill every slot, floods of refused and broken
connections, and an answer too large to send. Each must cost the server bounded memory,
time and log lines, and leave well-behaved clients served."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess, sqlite_args
from wire_client import (
    WireClient,
    commit_body,
    commit_errors,
    fetch_body,
    fetched_offsets,
    hung_up,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.framing import encode_frame
from coordinator_server.server.connection_limits import EVICTION_MIN_IDLE_S


@contextlib.contextmanager
def server_process(tmp_path: Path, *extra: str) -> Iterator[ServerProcess]:
    with ServerProcess(sqlite_args(tmp_path, *extra)) as server:
        yield server


@contextlib.asynccontextmanager
async def wire_client(server: ServerProcess) -> AsyncIterator[WireClient]:
    client = await WireClient.connect(server.host, server.port)
    try:
        yield client
    finally:
        await client.close()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def scrape(server: ServerProcess) -> dict[str, float]:
    """Every sample of the server's /metrics as 'name{labels}' -> value."""

    def get() -> str:
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body: bytes = reply.read()
            return body.decode()

    text = await asyncio.get_running_loop().run_in_executor(None, get)
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


async def metric(server: ServerProcess, name: str, **labels: str) -> float:
    wanted = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        value
        for key, value in (await scrape(server)).items()
        if key.split("{", 1)[0] == name and all(w in key for w in wanted)
    )


async def until_metric(
    server: ServerProcess, name: str, expected: float, timeout: float = 30, **labels: str
) -> None:
    deadline = time.monotonic() + timeout
    while (value := await metric(server, name, **labels)) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} is {value}, not {expected}")
        await asyncio.sleep(0.05)


def request_frame(api_key: int, body: Any, correlation_id: int) -> bytes:
    return encode_frame(encode_request(RequestHeader(api_key, 0, correlation_id, "hostile"), body))


def idle_socket(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.setblocking(False)
    return sock


async def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """True once the server has closed `sock` (anything it sent first is read and dropped)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            while await loop.sock_recv(sock, 1 << 20):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def keep_serving(server: ServerProcess, stop: asyncio.Event) -> list[float]:
    """A well-behaved client's round trips, in seconds, until `stop`."""
    latencies: list[float] = []
    async with wire_client(server) as client:
        while not stop.is_set():
            started = time.monotonic()
            response = await client.call(ApiKey.API_VERSIONS, {}, timeout=30)
            assert response["error_code"] == 0
            latencies.append(time.monotonic() - started)
            await asyncio.sleep(0.05)
    return latencies


async def commit_offsets(server: ServerProcess, group: str, count: int) -> None:
    async with wire_client(server) as client:
        per_request = 1000
        for start in range(0, count, per_request):
            offsets = {
                (f"topic-{i // 1000}", i % 1000): i for i in range(start, start + per_request)
            }
            response = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, offsets), timeout=30
            )
            assert set(commit_errors(response).values()) == {0}


async def test_a_client_that_never_reads_its_answers_holds_bounded_memory_and_is_closed(
    tmp_path: Path,
) -> None:
    """2,000 pipelined fetch-all OffsetFetch requests of a group with 10,000 offsets (about
    a megabyte of answer each) from a client that never reads: the server stops answering
    it at --response-buffer-bytes, its memory stays flat, and the connection is closed when
    the answers stay unread for --response-write-timeout-ms. Before answers were bounded,
    the server held them all (2 GB)."""
    with server_process(tmp_path, "--response-write-timeout-ms", "2000") as server:
        await commit_offsets(server, "big", 10_000)
        async with wire_client(server) as client:
            fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("big", None), timeout=30)
            assert len(fetched_offsets(fetched)) == 10_000
        baseline = rss_bytes(server.pid)
        hog = idle_socket(server)
        requests = b"".join(
            request_frame(ApiKey.OFFSET_FETCH, fetch_body("big", None), i) for i in range(2000)
        )
        stop = asyncio.Event()
        served = asyncio.create_task(keep_serving(server, stop))
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(hog, requests)
            peak = baseline
            deadline = time.monotonic() + 60
            while not hung_up(hog):
                peak = max(peak, rss_bytes(server.pid))
                # A few answers in the socket and the server's buffer, not 2,000 of them.
                assert peak - baseline < 200 * 1024 * 1024, f"RSS grew by {peak - baseline} bytes"
                assert time.monotonic() < deadline, "the connection was never closed"
                await asyncio.sleep(0.05)
            assert (
                await metric(server, "coordinator_connections_closed_total", reason="write_timeout")
                == 1
            )
            assert await closed_by_server(hog, timeout=30)
        finally:
            stop.set()
            hog.close()
        latencies = await served
        assert latencies and max(latencies) < 5, latencies


async def test_a_frame_sent_a_byte_a_second_is_closed_after_the_frame_timeout(
    tmp_path: Path,
) -> None:
    with server_process(tmp_path, "--frame-read-timeout-ms", "2000") as server:
        loris = [idle_socket(server) for _ in range(5)]
        frame = request_frame(ApiKey.API_VERSIONS, {}, 1)
        stop = asyncio.Event()
        served = asyncio.create_task(keep_serving(server, stop))
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            for sent in range(len(frame) - 1):
                # Each socket makes progress every second; its frame never completes.
                for sock in loris:
                    with contextlib.suppress(ConnectionError):
                        await loop.sock_sendall(sock, frame[sent : sent + 1])
                if await metric(server, "coordinator_connections_closed_total") == len(loris):
                    break
                if time.monotonic() - started > 30:
                    break
                await asyncio.sleep(1)
            closed_after = time.monotonic() - started
            assert await metric(
                server, "coordinator_connections_closed_total", reason="frame_timeout"
            ) == len(loris)
            for sock in loris:
                assert await closed_by_server(sock, timeout=10)
            # 2 s, and up to a sweep interval (a quarter of it) and a byte's second late.
            assert 1.5 < closed_after < 10, closed_after
        finally:
            stop.set()
            for sock in loris:
                sock.close()
        latencies = await served
        assert latencies and max(latencies) < 5, latencies


@pytest.mark.slow
@pytest.mark.parametrize(
    ("limits", "fill", "refused_reason"),
    [
        (
            ["--max-connections", "200", "--max-connections-per-ip", "100"],
            150,
            "max_connections_per_ip",
        ),
        (["--max-connections", "100", "--max-connections-per-ip", "2000"], 150, "max_connections"),
    ],
    ids=["per-ip", "all"],
)
async def test_idle_sockets_cannot_lock_out_a_new_client(
    tmp_path: Path, limits: list[str], fill: int, refused_reason: str
) -> None:
    """Idle sockets fill the limit (all from 127.0.0.1, so the per-address limit of the
    first case is the one reached); those beyond are refused at once; a well-behaved client
    that comes a second later closes the one idle longest and is served; the idle ones are
    closed after --connections-max-idle-ms."""
    with server_process(tmp_path, *limits, "--connections-max-idle-ms", "6000") as server:
        admitted = 100
        idle = [idle_socket(server) for _ in range(fill)]
        try:
            await until_metric(server, "coordinator_connections_open", admitted)
            refused = await metric(
                server, "coordinator_connections_refused_total", reason=refused_reason
            )
            # On a machine slow enough to take a second over the burst, a late socket
            # closes an early one instead of being refused.
            evicted = await metric(server, "coordinator_connections_closed_total", reason="evicted")
            assert refused > 0 and refused + evicted == fill - admitted
            # Wait until the admitted ones have been idle long enough to make room.
            await asyncio.sleep(EVICTION_MIN_IDLE_S + 0.5)
            async with wire_client(server) as newcomer:
                assert (await newcomer.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
                assert (
                    await metric(server, "coordinator_connections_closed_total", reason="evicted")
                    == evicted + 1
                )
                # The idle ones go after 6 s; the newcomer, which keeps talking, stays.
                deadline = time.monotonic() + 30
                while await metric(server, "coordinator_connections_open") > 1:
                    assert time.monotonic() < deadline, "idle connections stayed open"
                    assert (await newcomer.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
                    await asyncio.sleep(0.2)
                assert (await newcomer.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
                idle_closed = await metric(
                    server, "coordinator_connections_closed_total", reason="idle"
                )
                assert idle_closed == admitted - 1
            for sock in idle:
                assert await closed_by_server(sock, timeout=10)
        finally:
            for sock in idle:
                sock.close()


async def test_refused_and_broken_connections_leave_a_short_log(tmp_path: Path) -> None:
    """400 refused, evicted and malformed connections: a line for the first, and lines of
    counts per interval, not a WARNING line each."""
    with server_process(tmp_path, "--max-connections", "10") as server:
        loop = asyncio.get_running_loop()
        for _ in range(100):
            broken = idle_socket(server)
            await loop.sock_sendall(broken, b"\x00\x00\x00\x02\xc1\xc1")
            assert await closed_by_server(broken, timeout=10)
            broken.close()
        held = [idle_socket(server) for _ in range(10)]
        await until_metric(server, "coordinator_connections_open", 10)
        for _ in range(300):
            # Refused, or admitted in place of an idle one (which is closed instead).
            sock = idle_socket(server)
            held.append(sock)
        deadline = time.monotonic() + 30
        while (
            events := await metric(server, "coordinator_connections_refused_total")
            + await metric(server, "coordinator_connections_closed_total")
        ) < 400:
            assert time.monotonic() < deadline, f"{events} connection events, not 400"
            await asyncio.sleep(0.05)
        assert events == 400
        assert await metric(server, "coordinator_connections_open") == 10
        code = await loop.run_in_executor(None, server.terminate)
        for sock in held:
            sock.close()
    assert code == 0
    output = server.output()
    warnings = [line for line in output.splitlines() if " WARNING " in line]
    assert 1 <= len(warnings) <= 5, warnings
    # Every event is in the log: alone (the first) or counted in a summary line.
    alone = len(re.findall(r"connection from \S+ (?:refused|closed) \(", output))
    counted = sum(int(n) for n in re.findall(r"(?:: |, )(\d+) (?:refused|closed) \(", output))
    assert alone + counted == 400, output


async def test_an_answer_over_max_response_bytes_is_message_too_large_and_the_connection_stays(
    tmp_path: Path,
) -> None:
    with server_process(tmp_path, "--max-response-bytes", "65536") as server:
        await commit_offsets(server, "big", 2000)
        async with wire_client(server) as client:
            # About 80 bytes an offset: 160 KB, answered MESSAGE_TOO_LARGE for the group.
            too_large = await client.call(ApiKey.OFFSET_FETCH, fetch_body("big", None))
            ((group,),) = [too_large["groups"]]
            assert group["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, str(too_large)[:200]
            assert group["topics"] == []
            assert (await client.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
            some = await client.call(ApiKey.OFFSET_FETCH, fetch_body("big", {"topic-0": [0, 1, 2]}))
            assert fetched_offsets(some) == {
                ("topic-0", 0): 0,
                ("topic-0", 1): 1,
                ("topic-0", 2): 2,
            }
            # A commit whose answer could not fit is refused before it is written (a commit
            # the log took is never answered as failed): the contract's error body.
            many = {("wide", i): 7 for i in range(4000)}
            refused = await client.call(ApiKey.OFFSET_COMMIT, commit_body("big", many))
            assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, str(refused)[:200]
            assert "max_response_bytes" in refused["error_message"]
            unwritten = await client.call(ApiKey.OFFSET_FETCH, fetch_body("big", {"wide": [0]}))
            assert fetched_offsets(unwritten) == {("wide", 0): -1}
        # An error of the whole answer is counted as the request's (one of a group is not).
        requests = await metric(
            server, "coordinator_requests_total", api="OffsetCommit", error="MESSAGE_TOO_LARGE"
        )
        assert requests == 1
