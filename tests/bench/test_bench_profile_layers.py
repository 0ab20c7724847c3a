"""The per-layer profile (`python -m coordinator_server.tools.bench.profile_layers`): a stack's
samples go to the layer of its innermost frame of ours, a stack with none of ours above the
event loop to the event loop; and on a real server, profiled by py-spy while it answers
commits, the layers a commit crosses all show up."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors

from coordinator_protocol.api_keys import ApiKey
from coordinator_server.tools.bench.profile_layers import (
    EVENT_LOOP,
    OTHER,
    count_layers,
    main,
    table,
)

ENTRY = (
    "_run_module_as_main (<frozen runpy>:198);<module> (coordinator_server/__main__.py:5);"
    "main (coordinator_server/cli.py:213);serve (coordinator_server/cli.py:195);"
    "run_async (coordinator_server/event_loop.py:20);Runner.run (asyncio/runners.py:118)"
)


def test_a_stack_counts_for_the_layer_of_its_innermost_frame_of_ours() -> None:
    lines = [
        # A socket write from the produce path: the log's, though the last frame is the
        # standard library's.
        f"{ENTRY};ProduceSender._flush (coordinator_server/storage/kafka/produce.py:677);"
        "send (socket.py:12) 30\n",
        # The service calls the runtime: the runtime's.
        f"{ENTRY};GroupCoordinatorService.offset_commit "
        "(coordinator_server/service/group_service.py:356);"
        "CoordinatorRuntime.write (coordinator_server/runtime/runtime.py:426) 20\n",
        f"{ENTRY};parse_request (coordinator_protocol/messages.py:679) 10\n",
        # Nothing of ours above the loop: the event loop's (the entry frames do not count).
        f"{ENTRY} 40\n",
        "\n",
    ]
    counts, frames = count_layers(lines)
    assert counts == {
        "log: produce requests to the broker": 30,
        "runtime: writes, batches, completions": 20,
        "wire decoding and encoding": 10,
        EVENT_LOOP: 40,
    }
    assert frames["log: produce requests to the broker"] == {
        "ProduceSender._flush (coordinator_server/storage/kafka/produce.py:677)": 30
    }
    rows = table(counts, 50.0, frames, top_lines=1)
    assert rows[1].split()[-1] == "20.0"  # the event loop: 40 % of 50 us
    assert rows[-1].split()[1:] == ["100", "100.0%", "50.0"]


def test_a_compiled_function_counts_for_its_modules_layer() -> None:
    """py-spy --native names the compiled build's functions as mypyc does in C."""
    shared = "coordinator_server__mypyc.cpython-311-x86_64-linux-gnu.so"
    lines = [
        f"{ENTRY};CPyPy_connection___Connection___read_frames ({shared});"
        f"CPyDef_runtime___CoordinatorRuntime___write ({shared});"
        "PyDict_SetItem (libpython3.11.so.1.0) 7\n",
        f"{ENTRY};CPyDef_timeline___SnapshotRegistry___commit ({shared}) 3\n",
        f"{ENTRY};CPyDef_event_processor___EventProcessor___run ({shared}) 2\n",
        f"{ENTRY};CPyDef_pending___PendingTransactionalOffsets___of_group ({shared}) 1\n",
        # Modules of one last name are named by as much of their path as tells them apart.
        f"{ENTRY};CPyDef_groups___manager___GroupMetadataManager___group ({shared}) 4\n",
        f"{ENTRY};CPyDef_cluster___membership___ClusterMembership___holds_lease ({shared}) 6\n",
        # A function of another native library is not ours.
        f"{ENTRY};CPyDef_elsewhere___f (other.so) 5\n",
    ]
    counts, _ = count_layers(lines)
    assert counts == {
        "runtime: writes, batches, completions": 12,
        "state machines: offsets, groups, transactions": 5,
        OTHER: 6,
        EVENT_LOOP: 5,
    }


def test_no_samples_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "profile.txt"
    empty.write_text("")
    assert main([str(empty)]) == 0
    assert capsys.readouterr().out.strip() == "no samples"


@pytest.mark.slow
def test_a_real_servers_commits_profiled_by_py_spy(tmp_path: Path) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    profile = tmp_path / "profile.txt"
    with ServerProcess(["--port", "0"]) as server:

        async def commit_for(seconds: float) -> int:
            client = await WireClient.connect(server.host, server.port)
            done = 0
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            try:
                while loop.time() < deadline:
                    body = commit_body("profiled", {("orders", p): done for p in range(10)})
                    answers = await asyncio.gather(
                        *(client.call(ApiKey.OFFSET_COMMIT, body) for _ in range(16))
                    )
                    assert all(set(commit_errors(a).values()) == {0} for a in answers)
                    done += len(answers)
            finally:
                await client.close()
            return done

        record = ["record", "-p", str(server.pid), "-r", "200", "-d", "3", "--native"]
        recorder = subprocess.Popen(
            [py_spy, *record, "-f", "raw", "-o", str(profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            committed = asyncio.run(commit_for(4.0))
            _, errors = recorder.communicate(timeout=30)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.wait()
        assert recorder.returncode == 0, errors
    assert committed > 0
    with profile.open(encoding="utf-8") as lines:
        counts, _ = count_layers(lines)
    assert sum(counts.values()) > 50
    for layer in (
        "connection: framing, dispatch, answers",
        "service: checks, routing",
        "runtime: writes, batches, completions",
    ):
        assert counts[layer] > 0, counts
