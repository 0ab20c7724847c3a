"""The compiled hot path (`coordinator_server/compiled.py`, `setup.py`): an install with a C
compiler runs the compiled modules, `COORDINATOR_PURE_PYTHON=1` runs their source, a build
made from other sources is never run, nor an extension module of a module no longer listed,
and a build that cannot happen installs the pure-Python modules with a warning."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coordinator_server import compiled

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "coordinator_server"

PROBE = (
    "import importlib, json\n"
    "from coordinator_server import compiled\n"
    "print(json.dumps({'build': compiled.running_build(), 'files': "
    "[importlib.import_module(n).__file__ for n in compiled.COMPILED_MODULES]}))\n"
)


def probe(**env: str) -> dict[str, Any]:
    """Which build a fresh process runs, and the files its compiled modules came from."""
    environment = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_VARIABLE}
    completed = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def test_the_build_that_runs_is_the_one_named() -> None:
    found = probe()
    extension = [f.endswith(".so") for f in found["files"]]
    if found["build"].startswith("compiled"):
        assert all(extension), found
    else:
        assert not any(extension), found
    if os.environ.get("CI"):
        # CI installs from a fresh clone on a machine with a C compiler: the build happened.
        modules = len(compiled.COMPILED_MODULES)
        assert found["build"] == f"compiled (mypyc): {modules} modules of the hot path"


def test_the_switch_runs_the_python_source() -> None:
    found = probe(**{compiled.PURE_PYTHON_VARIABLE: "1"})
    assert found["build"] == f"pure Python: {compiled.PURE_PYTHON_VARIABLE} is set"
    assert all(f.endswith(".py") for f in found["files"]), found


def test_only_the_listed_modules_are_ever_loaded_compiled(tmp_path: Path) -> None:
    """An extension module beside a module the list no longer names (an earlier build's) is
    passed over for its source; a listed one is left to the standard finder, unless the
    source is asked for."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in ("defaults", "timeline"):
        (tmp_path / f"{name}.py").write_text("")
        (tmp_path / f"{name}{suffix}").write_bytes(b"not a library")
    assert "coordinator_server.defaults" not in compiled.COMPILED_MODULES
    finder = compiled._PythonSourceFinder(everything=False)
    spec = finder.find_spec("coordinator_server.defaults", [str(tmp_path)])
    assert spec is not None and spec.origin == str(tmp_path / "defaults.py")
    assert finder.find_spec("coordinator_server.timeline", [str(tmp_path)]) is None
    # Not ours: left alone.
    assert finder.find_spec("elsewhere.metrics", [str(tmp_path)]) is None
    source = compiled._PythonSourceFinder(everything=True)
    spec = source.find_spec("coordinator_server.timeline", [str(tmp_path)])
    assert spec is not None and spec.origin == str(tmp_path / "timeline.py")


def _package_copy(tmp_path: Path) -> Path:
    package = tmp_path / "coordinator_server"
    for name in compiled.COMPILED_MODULES:
        source = compiled.source_path(PACKAGE, name)
        copy = package / source.relative_to(PACKAGE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    return package


def test_a_build_made_from_other_sources_is_not_run(tmp_path: Path) -> None:
    package = _package_copy(tmp_path)
    record = package / compiled.BUILD_RECORD
    # Nothing built: nothing stale.
    assert not compiled.build_is_stale(package)
    hashes = compiled.source_hashes(package)
    record.write_text("".join(f"{name} {digest}\n" for name, digest in hashes.items()))
    assert not compiled.build_is_stale(package)
    # One module edited since the build.
    timeline = compiled.source_path(package, "coordinator_server.timeline")
    timeline.write_text(timeline.read_text() + "\n# edited\n")
    assert compiled.build_is_stale(package)
    # A record that cannot be read is no proof of anything.
    record.write_text("garbage\n")
    assert compiled.build_is_stale(package)


@pytest.mark.slow
def test_without_a_c_compiler_the_pure_python_modules_are_installed(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", compiled.BUILD_RECORD)
    shutil.copytree(PACKAGE, tree / "coordinator_server", ignore=ignore)
    shutil.copytree(ROOT / "clients" / "python", tree / "clients" / "python", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, tree / name)
    completed = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tree,
        # The compiler setuptools calls, made to fail as a missing one would.
        env={**os.environ, "CC": "false"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "installing the pure-Python modules" in completed.stderr
    assert not list(tree.rglob("*.so"))
    assert not (tree / "coordinator_server" / compiled.BUILD_RECORD).exists()
