"""The hot path's compiled build: which modules `pip install` compiles ahead of time with mypyc
(`setup.py` reads `COMPILED_MODULES` from this file, which therefore imports only the
standard library), which build a process runs, and the switch that runs the Python source
instead.

The modules stay Python: the same files are what runs where no build could happen (no C
compiler: the install falls back to them), under `COORDINATOR_PURE_PYTHON=1`, and what the
type checker and the tests read. Why mypyc and why these modules: docs/PERFORMANCE.md,
"A compiled hot path".
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

COMPILED_MODULES: tuple[str, ...] = (
    # The commit path: the timeline, the runtime's write path, the offsets, the connection.
    "coordinator_server.timeline",
    "coordinator_server.runtime.batch",
    "coordinator_server.runtime.deferred",
    "coordinator_server.runtime.events",
    "coordinator_server.runtime.event_processor",
    "coordinator_server.runtime.appender",
    "coordinator_server.runtime.runtime",
    "coordinator_server.offsets.manager",
    "coordinator_server.offsets.pending",
    "coordinator_server.offsets.commit_answers",
    "coordinator_server.server.connection",
    # What every group request also goes through (a heartbeat is little else): the timers,
    # the metrics, the classic and consumer groups, the shard, the group service and its
    # routing, and the cluster lease checked before a partition answers.
    "coordinator_server.runtime.timer",
    "coordinator_server.runtime.clock",
    "coordinator_server.metrics",
    "coordinator_server.groups.membership",
    "coordinator_server.groups.rebalance",
    "coordinator_server.groups.classic",
    "coordinator_server.groups.manager",
    "coordinator_server.consumer_groups.manager",
    "coordinator_server.shard.log_partition",
    "coordinator_server.shard.group_migration",
    "coordinator_server.service.group_service",
    "coordinator_server.service.replies",
    "coordinator_server.service.routing",
    "coordinator_server.cluster.lease",
    "coordinator_server.cluster.membership",
    "coordinator_server.cluster.node",
)
"""Compiled together (one mypyc group, so that their calls to each other are native). The
records are not among them: compiled, their decoders made a load slower and larger
(docs/PERFORMANCE.md, "A compiled hot path")."""

BUILD_RECORD = "compiled_build.txt"
"""Written by the build beside the package's modules, a line per compiled module (its name and
its source's SHA-256), so that a build made from other sources (an editable install edited
since) is never run."""

PURE_PYTHON_VARIABLE = "COORDINATOR_PURE_PYTHON"
"""Set to 1, the process imports the Python source of every compiled module: the suite runs
the in-process tests both ways, and an operator can rule the build out."""


class _PythonSourceFinder:
    """Finds the package's modules' source files, ahead of the extension modules that the
    standard path finder prefers when both sit in one directory: every module's when
    `everything`, otherwise those of the modules not in `COMPILED_MODULES` (an extension
    module left in the package by an earlier build whose list was longer is never loaded)."""

    def __init__(self, everything: bool) -> None:
        self.everything = everything
        self._finders: dict[str, importlib.machinery.FileFinder] = {}

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not path or not name.startswith("coordinator_server."):
            return None
        if not self.everything and name in COMPILED_MODULES:
            return None
        for directory in path:
            finder = self._finders.get(directory)
            if finder is None:
                finder = self._finders[directory] = importlib.machinery.FileFinder(
                    directory,
                    (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
                )
            spec = finder.find_spec(name)
            if spec is not None:
                return spec
        return None


def python_source_requested() -> bool:
    return os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")


def source_path(package_dir: Path, name: str) -> Path:
    """The source file of a compiled module, from the directory of the top package."""
    parts = name.split(".")[1:]
    module = package_dir.joinpath(*parts)
    return module / "__init__.py" if module.is_dir() else module.with_suffix(".py")


def source_hashes(package_dir: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256(source_path(package_dir, name).read_bytes()).hexdigest()
        for name in COMPILED_MODULES
    }


def build_is_stale(package_dir: Path) -> bool:
    """True when a compiled build is there but was made from other sources than these."""
    record = package_dir / BUILD_RECORD
    try:
        built = dict(line.split() for line in record.read_text().splitlines() if line)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    try:
        current = source_hashes(package_dir)
    except OSError:
        return True
    return any(built.get(name) != digest for name, digest in current.items())


def choose_build(package_dir: Path) -> None:
    """Which build the process imports from now on (the package's `__init__` calls it,
    before any module of the hot path is imported): the compiled modules, unless the source
    is asked for or the build was made from other sources; the source of every other
    module, whatever extension modules sit beside it."""
    everything = python_source_requested() or build_is_stale(package_dir)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PythonSourceFinder)]
    sys.meta_path.insert(0, _PythonSourceFinder(everything))


def is_compiled(module: ModuleType) -> bool:
    return (module.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def running_build() -> str:
    """Which build runs, in one line: the compiled modules or their Python source, and why
    the source when it is."""
    modules = [importlib.import_module(name) for name in COMPILED_MODULES]
    compiled = sum(is_compiled(module) for module in modules)
    if compiled == len(modules):
        return f"compiled (mypyc): {compiled} modules of the hot path"
    if python_source_requested():
        return f"pure Python: {PURE_PYTHON_VARIABLE} is set"
    if build_is_stale(Path(__file__).parent):
        return "pure Python: the compiled build is older than the source (reinstall to rebuild)"
    if compiled:
        return (
            f"partly compiled: {compiled} of {len(modules)} modules of the hot path "
            "(a build made before the list changed: reinstall to rebuild)"
        )
    return (
        "pure Python: the compiled modules are not built "
        "(no C compiler at install, or COORDINATOR_COMPILE=0)"
    )
