"""Fixtures of the container tests: the run's private Docker daemon and the images it builds
from the repository's own Dockerfiles (docker_daemon.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from docker_daemon import (
    COORDINATOR_IMAGE,
    KAFKA_CONTEXT,
    KAFKA_IMAGE,
    REPO_ROOT,
    DockerDaemon,
    DockerUnavailable,
    build_image,
    prefetch_base_image,
    shared_daemon,
)

_PREFETCH = pytest.StashKey[subprocess.Popen[bytes]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("container") for item in session.items):
        prefetch = prefetch_base_image()
        if prefetch is not None:
            session.config.stash[_PREFETCH] = prefetch


def pytest_sessionfinish(session: pytest.Session) -> None:
    prefetch = session.config.stash.get(_PREFETCH, None)
    if prefetch is not None:
        try:
            prefetch.wait(timeout=600)
        except subprocess.TimeoutExpired:
            prefetch.kill()
            prefetch.wait()


@pytest.fixture(scope="session")
def docker() -> Iterator[DockerDaemon]:
    try:
        with shared_daemon() as daemon:
            yield daemon
    except DockerUnavailable as reason:
        pytest.skip(f"no Docker daemon can run on this machine: {reason}")


@pytest.fixture(scope="session")
def coordinator_image(docker: DockerDaemon) -> str:
    """The project's Dockerfile, built as `docker build -t coordinator-server:0.1.0 .`."""
    build_image(docker, COORDINATOR_IMAGE, REPO_ROOT)
    return COORDINATOR_IMAGE


@pytest.fixture(scope="session")
def kafka_image(docker: DockerDaemon) -> str:
    """deploy/kafka/Dockerfile, built as the compose file's `build:` does."""
    build_image(docker, KAFKA_IMAGE, KAFKA_CONTEXT)
    return KAFKA_IMAGE
