"""One source of defaults: the runtime's settings default to what the server runs with, and
the server's settings behind them take their defaults from the runtime."""

from __future__ import annotations

import pytest

from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.runtime.config import RUNTIME_DEFAULTS, RuntimeConfig
from coordinator_server.storage.memory import InMemoryLog

# The server's setting behind each field of RuntimeConfig (None: not a server setting).
SETTINGS = {
    "write_timeout_ms": "offsets_commit_timeout_ms",
    "append_linger_ms": "append_linger_ms",
    "max_batch_bytes": "max_batch_bytes",
    "max_queued_events": "max_queued_events",
    "append_failure_timeout_ms": "append_failure_timeout_ms",
    "standby_fetch_max_wait_ms": "standby_fetch_max_wait_ms",
    "standby_fetch_max_bytes": "standby_fetch_max_bytes",
    "standby_fetch_min_bytes": "standby_fetch_min_bytes",
    "standby_max_pending_records": "standby_max_pending_records",
    "timer_retry_backoff_ms": None,
    "run_when_idle": None,
}


def test_every_runtime_field_is_accounted_for() -> None:
    assert set(SETTINGS) == set(RuntimeConfig.__dataclass_fields__)


@pytest.mark.parametrize(("field", "setting"), [(f, s) for f, s in SETTINGS.items() if s])
def test_a_server_setting_defaults_to_the_runtime_default(field: str, setting: str) -> None:
    assert CoordinatorConfig.model_fields[setting].default == getattr(RUNTIME_DEFAULTS, field)


async def test_the_server_runs_the_runtime_as_it_is_by_default() -> None:
    config = CoordinatorConfig(port=0, metrics_port=-1, offsets_topic_partitions=2)
    app = CoordinatorApp(config, log=InMemoryLog(2))
    await app.start()
    try:
        assert app.runtime is not None
        assert app.runtime.config == RuntimeConfig()
        assert app.runtime.config.run_when_idle
    finally:
        await app.shutdown()
