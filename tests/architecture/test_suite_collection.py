"""Every folder of tests is one the suite collects: pytest passes over folders whose names
match `norecursedirs` (by default `build`, `dist`, `venv` and a few more) without a word, so
tests in a folder named so would never run and never fail."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_no_folder_of_tests_is_one_pytest_passes_over(pytestconfig: pytest.Config) -> None:
    patterns = pytestconfig.getini("norecursedirs")
    passed_over = [
        str(folder.relative_to(ROOT))
        for root in pytestconfig.getini("testpaths")
        for folder in (ROOT / root).rglob("*")
        if folder.is_dir()
        and any(fnmatch(folder.name, pattern) for pattern in patterns)
        and any(folder.rglob("test_*.py"))
    ]
    assert passed_over == []
