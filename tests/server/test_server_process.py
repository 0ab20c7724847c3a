"""`coordinator-server serve` as a real process: durability across kill -9, graceful
shutdown on SIGTERM, and random bytes that must never stop it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from apache_kafka import ApacheKafkaBroker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_broker import KafkaBroker
from server_process import ServerProcess, sqlite_args
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, decode_response, encode_request
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.framing import FrameDecoder, encode_frame

# What a commit may get while the log's broker restarts: it is retried.
RETRIABLE_WHILE_AWAY = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.REQUEST_TIMED_OUT,
}


async def commit_many(server: ServerProcess, groups: int, rounds: int) -> dict[str, int]:
    """Commit offsets 0..rounds-1 for each group, pipelined; return what was acknowledged."""
    client = await WireClient.connect(server.host, server.port)
    acknowledged: dict[str, int] = {}
    try:
        for offset in range(rounds):
            futures = {
                f"group-{g}": client.send(
                    ApiKey.OFFSET_COMMIT, commit_body(f"group-{g}", {("orders", g % 3): offset})
                )
                for g in range(groups)
            }
            for group, future in futures.items():
                response = await asyncio.wait_for(future, 30)
                if commit_errors(response) == {("orders", int(group.split("-")[1]) % 3): 0}:
                    acknowledged[group] = offset
    finally:
        await client.close()
    return acknowledged


async def fetch_all(
    server: ServerProcess, groups: list[str]
) -> dict[str, dict[tuple[str, int], int]]:
    client = await WireClient.connect(server.host, server.port)
    try:
        result = {}
        for group in groups:
            for _ in range(100):
                response = await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, None))
                if response["groups"][0]["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                await asyncio.sleep(0.05)
            result[group] = fetched_offsets(response)
        return result
    finally:
        await client.close()


async def kill_mid_stream_and_restart(args: list[str]) -> None:
    """Commit while the server is killed with SIGKILL; every acknowledged commit survives."""
    server = ServerProcess(args).start()
    acknowledged: dict[str, int] = {}
    try:
        acknowledged = await commit_many(server, groups=20, rounds=10)
        assert len(acknowledged) == 20
        client = await WireClient.connect(server.host, server.port)
        # Commits in flight at the moment of the kill may or may not survive; the
        # acknowledged ones must.
        in_flight = [
            client.send(ApiKey.OFFSET_COMMIT, commit_body(f"group-{g}", {("orders", g % 3): 100}))
            for g in range(20)
        ]
        server.kill()
        results = await asyncio.gather(*in_flight, return_exceptions=True)
        for g, result in enumerate(results):
            if isinstance(result, dict) and commit_errors(result) == {("orders", g % 3): 0}:
                acknowledged[f"group-{g}"] = 100
        await client.close()
    finally:
        server.kill()
    with ServerProcess(args) as restarted:
        fetched = await fetch_all(restarted, sorted(acknowledged))
    for group, offset in acknowledged.items():
        g = int(group.split("-")[1])
        assert fetched[group][("orders", g % 3)] >= offset, (group, fetched[group], offset)


@pytest.mark.slow
async def test_acknowledged_commits_survive_kill_9_with_the_sqlite_log(tmp_path: Path) -> None:
    await kill_mid_stream_and_restart(sqlite_args(tmp_path))


@pytest.mark.slow
async def test_acknowledged_commits_survive_kill_9_with_the_kafka_log(
    each_broker: KafkaBroker, unique_topic: str
) -> None:
    await kill_mid_stream_and_restart(
        [
            "--port",
            "0",
            "--bootstrap-servers",
            each_broker.bootstrap,
            "--offsets-topic",
            unique_topic,
            "--offsets-topic-partitions",
            "6",
            "--offsets-topic-replication-factor",
            "1",
            *each_broker.coordinator_args,
        ]
    )


async def test_commit_while_the_broker_is_down_fails_and_leaves_no_trace(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    args = [
        "--port", "0",
        "--bootstrap-servers", fresh_kafka_broker.bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--offsets-commit-timeout-ms", "1500",
    ]  # fmt: skip
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        try:
            ok = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 1}))
            assert commit_errors(ok) == {("t", 0): 0}
            fresh_kafka_broker.stop()
            failed = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body("g", {("t", 0): 2}), timeout=30
            )
            assert commit_errors(failed) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
            fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", None))
            assert fetched_offsets(fetched) == {("t", 0): 1}
        finally:
            await client.close()


async def test_acknowledged_commits_survive_a_broker_restart(
    fresh_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    """Apache Kafka keeps its data across a restart (tansu, in memory, cannot): the server
    rides out the restart, takes commits again once the broker is back, and a server started
    afterwards loads every acknowledged commit, the latest of each group."""
    args = [
        "--port", "0",
        "--bootstrap-servers", fresh_kafka_broker.bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--offsets-commit-timeout-ms", "2000",
    ]  # fmt: skip
    groups = [f"group-{g}" for g in range(12)]
    with ServerProcess(args) as server:
        acknowledged = await commit_many(server, groups=len(groups), rounds=5)
        assert len(acknowledged) == len(groups)
        fresh_kafka_broker.restart()
        client = await WireClient.connect(server.host, server.port)
        try:
            # Commits fail (retriably) until the server has found the broker again; each
            # group's last commit below is acknowledged, none of them twice.
            pending = set(groups)
            deadline = asyncio.get_running_loop().time() + 60
            while pending:
                assert asyncio.get_running_loop().time() < deadline, (pending, server.output())
                answers = {
                    group: client.send(
                        ApiKey.OFFSET_COMMIT,
                        commit_body(group, {("orders", int(group.split("-")[1]) % 3): 50}),
                    )
                    for group in sorted(pending)
                }
                for group, answer in answers.items():
                    errors = commit_errors(await asyncio.wait_for(answer, 30))
                    if set(errors.values()) == {0}:
                        pending.discard(group)
                        acknowledged[group] = 50
                    else:
                        assert set(errors.values()) <= RETRIABLE_WHILE_AWAY, errors
                if pending:
                    await asyncio.sleep(0.2)
        finally:
            await client.close()
    assert acknowledged == dict.fromkeys(groups, 50)
    with ServerProcess(args) as restarted:
        fetched = await fetch_all(restarted, groups)
    assert {g: fetched[g][("orders", int(g.split("-")[1]) % 3)] for g in groups} == acknowledged


async def test_sigterm_answers_what_is_in_flight_and_exits_cleanly(tmp_path: Path) -> None:
    args = sqlite_args(tmp_path)
    server = ServerProcess(args).start()
    try:
        client = await WireClient.connect(server.host, server.port)
        commits = [
            client.send(ApiKey.OFFSET_COMMIT, commit_body(f"g{i}", {("t", 0): i}))
            for i in range(200)
        ]
        await asyncio.sleep(0)
        os.kill(server.pid, signal.SIGTERM)
        results = await asyncio.gather(*commits, return_exceptions=True)
        acknowledged = {
            f"g{i}": i
            for i, r in enumerate(results)
            if isinstance(r, dict) and commit_errors(r) == {("t", 0): 0}
        }
        exit_code = await asyncio.get_running_loop().run_in_executor(None, server.terminate)
        assert exit_code == 0, server.output()
        assert "stopped" in server.output()
        await client.close()
    finally:
        server.kill()
    assert acknowledged, "SIGTERM came before any commit was read; nothing was tested"
    with ServerProcess(args) as restarted:
        fetched = await fetch_all(restarted, sorted(acknowledged))
    assert {g: v[("t", 0)] for g, v in fetched.items()} == acknowledged


def test_sigterm_sent_again_and_again_still_ends_in_a_clean_exit(tmp_path: Path) -> None:
    """A supervisor that repeats SIGTERM until the process is gone: every one after the
    first finds the shutdown under way or over, never the default action (exit -15)."""
    server = ServerProcess(sqlite_args(tmp_path)).start()
    try:
        proc = server.proc
        assert proc is not None
        deadline = time.monotonic() + 30
        sent = 0
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
                sent += 1
            time.sleep(0.001)
        assert proc.wait(5) == 0, server.output()
        assert "stopped" in server.output()
        assert sent > 1
    finally:
        server.kill()


# Random and malformed frames against a real server process.


class BlockingClient:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.correlation = 0

    def call(self, api_key: int, body: Any) -> dict[str, Any]:
        self.correlation += 1
        header = RequestHeader(api_key, 0, self.correlation, "fuzz-observer")
        self.sock.sendall(encode_frame(encode_request(header, body)))
        while True:
            data = self.sock.recv(65536)
            assert data, "the server closed a well-behaved connection"
            for payload in self.decoder.feed(data):
                correlation_id, response = decode_response(payload)
                if correlation_id == self.correlation:
                    return response

    def close(self) -> None:
        self.sock.close()


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text()
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    ["group_id", "topics", "name", "partitions", "partition_index", "committed_offset",
     "groups", "keys", "key_type", "require_stable", "generation_id_or_member_epoch",
     "member_id", "committed_metadata", "partition_indexes"]
)  # fmt: skip
bodies = st.dictionaries(field_names, msgpack_values, max_size=6)
api_keys = st.sampled_from([8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 42, 47]) | st.integers(-5, 200)

cases = st.one_of(
    st.binary(max_size=64),  # raw garbage, usually a broken length
    st.binary(max_size=200).map(frame),  # a frame of garbage
    msgpack_values.map(lambda v: frame(msgpack.packb(v))),  # valid msgpack, wrong shape
    st.tuples(api_keys, st.integers(-2, 3), st.integers(-(2**31), 2**31 - 1), bodies).map(
        lambda t: frame(msgpack.packb([t[0], t[1], t[2], "fuzz", t[3]]))
    ),  # a valid header, a random body
    st.tuples(api_keys, bodies).map(
        lambda t: frame(msgpack.packb([t[0], 0, 1, None, t[1]])) * 3
    ),  # pipelined
    st.integers(8 * 1024 * 1024 + 1, 2**32 - 1).map(lambda n: struct.pack(">I", n)),  # oversized
)


@pytest.mark.slow
def test_random_and_malformed_frames_never_stop_the_server(tmp_path: Path) -> None:
    with ServerProcess(sqlite_args(tmp_path)) as server:
        observer = BlockingClient(server.host, server.port)
        sent = 0

        @settings(
            max_examples=2500,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(cases)
        def one_case(data: bytes) -> None:
            nonlocal sent
            with socket.create_connection((server.host, server.port), timeout=5) as attacker:
                attacker.sendall(data)
                attacker.shutdown(socket.SHUT_WR)
                # Read until the server closes (or answers and sees the end of the stream).
                while attacker.recv(65536):
                    pass
            sent += 1
            if sent % 25 == 0:
                response = observer.call(
                    ApiKey.OFFSET_COMMIT, commit_body("observer", {("t", 0): sent})
                )
                assert commit_errors(response) == {("t", 0): 0}

        one_case()
        assert server.proc is not None and server.proc.poll() is None, server.output()
        fetched = observer.call(ApiKey.OFFSET_FETCH, fetch_body("observer", {"t": [0]}))
        assert fetched_offsets(fetched)[("t", 0)] == sent - sent % 25
        observer.close()
