"""A standalone group coordinator for Apache Kafka."""

from pathlib import Path

from coordinator_server import compiled as _compiled

__version__ = "0.1.0"

_compiled.choose_build(Path(__file__).parent)
