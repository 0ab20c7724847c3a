"""A standalone group coordinator for Apache Kafka."""

from pathlib import Path

from coordinator_server import compiled as _compiled

__version__ = "0.1.0"

# Before any module of the hot path is imported: its Python source rather than a compiled
# build when asked to, or when the build was made from other sources (compiled.py).
if _compiled.python_source_requested() or _compiled.build_is_stale(Path(__file__).parent):
    _compiled.use_python_source()
