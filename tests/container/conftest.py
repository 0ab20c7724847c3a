"""Fixtures of the container tests: the run's private Docker daemon and the images it builds
from the repository's own Dockerfiles (docker_daemon.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from docker_daemon import (
    COORDINATOR_IMAGE,
    KAFKA_CONTEXT,
    KAFKA_IMAGE,
    REPO_ROOT,
    DockerDaemon,
    DockerUnavailable,
    ImagesInBackground,
    build_image,
    shared_daemon,
)

_IMAGES = pytest.StashKey[ImagesInBackground]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("container") for item in session.items):
        images = [(COORDINATOR_IMAGE, REPO_ROOT), (KAFKA_IMAGE, KAFKA_CONTEXT)]
        # Two test processes build the two images side by side, one each first.
        if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
            images.reverse()
        session.config.stash[_IMAGES] = ImagesInBackground(images).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    images = session.config.stash.get(_IMAGES, None)
    if images is not None:
        images.finish()


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
