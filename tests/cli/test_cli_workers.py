"""`serve --workers N`'s settings: each worker's command line (its node id, listener port and
metrics port counted up from the parent's), the metrics ports placed after the listeners'
when not given, and the settings that cannot work refused before anything starts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from coordinator_server.config import CoordinatorConfig
from coordinator_server.workers import worker_arguments

KAFKA = {"bootstrap_servers": "127.0.0.1:9092"}


def own_options(arguments: list[str]) -> dict[str, str]:
    tail = arguments[-8:]
    return dict(zip(tail[::2], tail[1::2], strict=True))


def test_each_worker_counts_up_from_the_parents_settings() -> None:
    config = CoordinatorConfig(workers=3, node_id=10, port=7000, metrics_port=8000, **KAFKA)
    given = ["--bootstrap-servers", "127.0.0.1:9092", "--workers", "3"]
    for index in range(3):
        arguments = worker_arguments(config, given, index)
        assert arguments[: len(given)] == given
        assert own_options(arguments) == {
            "--workers": "1",
            "--node-id": str(10 + index),
            "--port": str(7000 + index),
            "--metrics-port": str(8000 + index),
        }


def test_metrics_ports_follow_the_listeners_unless_given() -> None:
    defaults = CoordinatorConfig(workers=4, **KAFKA)
    assert (defaults.port, defaults.workers_metrics_port()) == (9094, 9098)
    assert own_options(worker_arguments(defaults, [], 3))["--metrics-port"] == "9101"
    free = CoordinatorConfig(workers=2, port=0, metrics_port=0, **KAFKA)
    assert own_options(worker_arguments(free, [], 1))["--port"] == "0"
    assert own_options(worker_arguments(free, [], 1))["--metrics-port"] == "0"
    off = CoordinatorConfig(workers=2, metrics_port=-1, **KAFKA)
    assert own_options(worker_arguments(off, [], 1))["--metrics-port"] == "-1"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"workers": 2}, "need the Kafka log"),
        ({"workers": 2, "cluster": "off", **KAFKA}, "need the Kafka log"),
        ({"workers": 2, "port": 9094, "metrics_port": 9095, **KAFKA}, "overlap"),
        ({"workers": 3, "port": 65534, "metrics_port": 9000, **KAFKA}, r"port \+ workers - 1"),
        ({"workers": 0, **KAFKA}, "greater than or equal to 1"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CoordinatorConfig(**settings)
