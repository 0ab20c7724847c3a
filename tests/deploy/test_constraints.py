"""Reproducible installs: constraints.txt pins one tested version of every distribution the
package and its extras install, inside pyproject.toml's ranges, and every install the
repository describes (CI, the container image) goes through it."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# The repository's own distributions: the server's and the client library's, installed from
# the clone, never from an index.
PROJECTS = {"coordinator-server": ROOT, "coordinator-client": ROOT / "clients" / "python"}


def pins() -> dict[str, str]:
    pinned: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
        pinned[canonicalize_name(name)] = version
    return pinned


def declared() -> list[Requirement]:
    """What the repository's distributions require of others (each other excepted)."""
    requirements = []
    for folder in PROJECTS.values():
        text = (folder / "pyproject.toml").read_text(encoding="utf-8")
        project = tomllib.loads(text)["project"]
        requirements.extend(Requirement(line) for line in project["dependencies"])
        for extra in project["optional-dependencies"].values():
            requirements.extend(Requirement(line) for line in extra)
    return [r for r in requirements if canonicalize_name(r.name) not in PROJECTS]


def test_every_declared_dependency_is_pinned_inside_its_range() -> None:
    pinned = pins()
    for requirement in declared():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject's {requirement}"
        )


def test_aiokafka_is_bounded_above() -> None:
    """Its internals are used (the log's own sender): a new minor release is untested."""
    bounds = [r for r in declared() if canonicalize_name(r.name) == "aiokafka"]
    assert len(bounds) == 2  # the server's log and the client's producer
    for aiokafka in bounds:
        assert any(spec.operator in ("<", "<=", "==", "~=") for spec in aiokafka.specifier)


def test_this_environment_was_installed_with_the_constraints() -> None:
    """What the suite runs on is what constraints.txt says (CI installs with it)."""
    pinned = pins()
    differ = {}
    for distribution in importlib.metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        if name in pinned and distribution.version != pinned[name]:
            differ[name] = (distribution.version, pinned[name])
    assert not differ, f"installed (version, pinned) differ from constraints.txt: {differ}"
    installed = {canonicalize_name(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    unpinned = installed - set(pinned) - set(PROJECTS) - {"pip", "setuptools"}
    assert not unpinned, f"installed but not pinned in constraints.txt: {sorted(unpinned)}"


def test_ci_and_the_image_install_with_the_constraints() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"pip install [^&]*-c constraints\.txt", ci)
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"pip install [^&]*-c constraints\.txt", dockerfile)
    assert "constraints.txt" in dockerfile.split("RUN /opt/venv/bin/pip install")[0]
    assert "!constraints.txt" in (ROOT / ".dockerignore").read_text(encoding="utf-8")
