"""Running `coordinator-server bench` as a process, briefly, and reading its --json."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Short enough for a test, long enough for every number to be non-zero.
BRIEF = ["--duration", "0.5", "--warmup", "0.2", "--jit-warmup", "0.2", "--json"]


def run_bench(*args: str, timeout: float = 240, pin: bool = False) -> dict[str, Any]:
    """The bench's JSON document; pinned to CPUs only when the test asks (`pin`)."""
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "bench", *args, *BRIEF,
            *([] if pin else ["--no-pin"]),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    document: dict[str, Any] = json.loads(completed.stdout)
    return document


def rows_of(document: dict[str, Any], scenario: str, target: str) -> list[dict[str, Any]]:
    return [row for row in document["results"][scenario] if row["target"] == target]


def assert_common_shape(document: dict[str, Any]) -> None:
    assert document["machine"]["cpus"] >= 1
    assert document["machine"]["date"]
    assert document["command"].startswith("coordinator-server bench ")
    assert isinstance(document["targets"], list)
