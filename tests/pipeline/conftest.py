"""One Spark session for the whole run: starting the JVM costs seconds, a query on the small
logs of these tests well under one.

The session loads Spark's Kafka source, which Spark resolves from Maven Central into
`.cache/ivy` at the repository root (ignored by git) on a machine's first run, and from
there on every later one. That first download must not count against a test's timeout, so
the session starts once the tests are collected, before any of them runs. The test
processes (pytest-xdist's workers) start theirs one at a time: Ivy's cache is not safe for
two resolutions at once, and a start after the first one finds its jars remembered and
skips Ivy.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Without the pipeline extra there is nothing here to run (the README's test command
# installs it).
if importlib.util.find_spec("pyspark") is None:
    collect_ignore_glob = ["test_pipeline_*.py"]

IVY_DIR = Path(__file__).resolve().parents[2] / ".cache" / "ivy"

_session: Any = None


def _start_session() -> Any:
    global _session
    if _session is not None:
        return _session
    # Executors are Python processes of this interpreter (it has the project installed), and
    # Spark binds to the loopback address only.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from coordinator_server.tools.pipeline.session import SparkSettings, build_session

    IVY_DIR.mkdir(parents=True, exist_ok=True)
    with (IVY_DIR.parent / "ivy.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _session = build_session(
            SparkSettings(
                master="local[2]",
                app_name="coordinator-server pipeline tests",
                shuffle_partitions=4,
                conf={
                    "spark.ui.enabled": "false",
                    "spark.ui.showConsoleProgress": "false",
                    "spark.sql.adaptive.enabled": "true",
                    "spark.default.parallelism": "4",
                    "spark.jars.ivy": str(IVY_DIR),
                },
                kafka_source=True,
            )
        )
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any("spark" in getattr(item, "fixturenames", ()) for item in session.items):
        # A failure (no Java, Maven Central out of reach) is left for the fixture to report.
        with contextlib.suppress(Exception):
            _start_session()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = _start_session()
    yield session
    session.stop()
