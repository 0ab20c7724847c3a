"""One Spark session for the whole run: starting the JVM costs seconds, a query on the small
logs of these tests well under one."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator

import pytest

# Without the pipeline extra there is nothing here to run (the README's test command
# installs it).
if importlib.util.find_spec("pyspark") is None:
    collect_ignore_glob = ["test_pipeline_*.py"]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # Executors are Python processes of this interpreter (it has the project installed), and
    # Spark binds to the loopback address only.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from coordinator_server.pipeline.session import SparkSettings, build_session

    session = build_session(
        SparkSettings(
            master="local[2]",
            app_name="coordinator-server pipeline tests",
            shuffle_partitions=4,
            conf={
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.adaptive.enabled": "true",
                "spark.default.parallelism": "4",
            },
        )
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
