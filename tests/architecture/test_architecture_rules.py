"""The architecture is checked, not only written down: the import contracts hold, catch an
import that breaks them, every part of the package is in docs/ARCHITECTURE.md, and no two
classes share a name."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each package checked, by where its source is: the server's, and the two of the client
# library's distribution.
PACKAGES = {
    "coordinator_server": ROOT / "coordinator_server",
    "coordinator_client": ROOT / "clients" / "python" / "coordinator_client",
    "coordinator_protocol": ROOT / "clients" / "python" / "coordinator_protocol",
}


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the packages under `tree`, with the project's contracts."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
         " sys.exit(lint_imports_command())", "--no-cache"],
        cwd=tree,
        # The copy first, so that it is what gets linted; wide lines, so that no contract's
        # name wraps.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
            "COLUMNS": "500",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and of the contracts, to break on purpose."""
    for package, source in PACKAGES.items():
        shutil.copytree(source, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(path: Path, statement: str) -> None:
    path.write_text(path.read_text() + f"\n{statement}  # noqa\n")


def test_the_import_contracts_hold(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        # An arrow back up: the log reaching into the service.
        ("coordinator_server/storage/api.py", "import coordinator_server.service", "layer"),
        # A pure layer touching the wall clock.
        ("coordinator_server/records/__init__.py", "import time", "are pure"),
        # The wire contract importing I/O.
        ("coordinator_protocol/hashing.py", "import asyncio", "wire contract is pure"),
        # The client library reaching into the server.
        ("coordinator_client/rpc/nodes.py", "import coordinator_server.storage", "client library"),
        # The server reaching into the client library beyond its Kafka metadata requests.
        ("coordinator_server/storage/api.py", "import coordinator_client.member", "none of its"),
        # A tool going round the wire.
        (
            "coordinator_server/tools/pipeline/state.py",
            "import coordinator_server.runtime",
            "tools",
        ),
    ],
)
def test_an_import_that_breaks_a_rule_fails_the_check(
    tree: Path, module: str, statement: str, contract: str
) -> None:
    add_import(tree / module, statement)
    result = lint_imports(tree)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), result.stdout


def test_a_new_module_without_a_layer_fails_the_check(tree: Path) -> None:
    (tree / "coordinator_server" / "newcomer.py").write_text('"""Placed nowhere."""\n')
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "newcomer" in result.stdout + result.stderr


def test_every_part_of_the_package_is_in_the_architecture_document() -> None:
    document = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    parts = [
        f"`{path.name}/`" if path.is_dir() else f"`{path.name}`"
        for path in sorted((ROOT / "coordinator_server").iterdir())
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name not in {"__init__.py", "__main__.py"})
    ]
    missing = [part for part in parts if part not in document]
    assert not missing


def test_no_two_classes_share_a_name() -> None:
    defined: defaultdict[str, list[str]] = defaultdict(list)
    for source in PACKAGES.values():
        for path in sorted(source.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    defined[node.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert not shared
