"""A private Docker daemon for the container tests, and the images they run.

The daemon (Debian's docker.io) runs only for the test run: its own socket, data and exec
directories under the temporary directory, no bridge of its own and no iptables rules, so
nothing of the machine's own Docker (if any) or firewall is touched. The test processes of
one run (pytest-xdist workers) share it: the first to need it starts it, each one counts
itself in, and the last to finish stops it. Each image is built once a run, under a lock of
its own, so that two processes build two images side by side.

Where the machine cannot run a Docker daemon at all (no dockerd, or one that cannot start),
the tests that need it skip with one line saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE_SCRIPT = REPO_ROOT / "deploy" / "images" / "debian-base.sh"
# The name the project's Dockerfile gives its image, and the base both stages start FROM.
COORDINATOR_IMAGE = "coordinator-server:0.1.0"
BASE_IMAGE = "debian:bookworm-slim"
# The Kafka image deploy/docker-compose.yml builds, from its folder.
KAFKA_IMAGE = "coordinator-server-kafka:4.4.0"
KAFKA_CONTEXT = REPO_ROOT / "deploy" / "kafka"

DAEMON_START_TIMEOUT_S = 60
DAEMON_STOP_TIMEOUT_S = 30
BUILD_TIMEOUT_S = 900


class DockerUnavailable(Exception):
    """The machine cannot run a Docker daemon: the one line a skipping test says."""


def run_id() -> str:
    """The same for every process of one test run (xdist's run id), another for the next."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", f"solo{os.getpid()}")[:12]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class DockerDaemon:
    """A running private daemon and a `docker` client bound to it."""

    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a `docker` command for this daemon: the classic builder, which
        both the daemon's own client and newer ones have (BuildKit needs a plugin)."""
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "0"}

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [docker_client(), *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
        return result

    def inspect(self, name: str) -> dict[str, Any]:
        (found,) = json.loads(self.run("inspect", name).stdout)
        return dict(found)

    def has_image(self, name: str) -> bool:
        return self.run("image", "inspect", name, check=False).returncode == 0

    def remove_containers(self, *names: str) -> None:
        """Containers a test started, killed and removed with their anonymous volumes."""
        if names:
            self.run("rm", "--force", "--volumes", *names, check=False)


def docker_client() -> str:
    found = shutil.which("docker")
    if found is None:
        raise DockerUnavailable("no Docker client on PATH (Debian's docker.io has one)")
    return found


def _dockerd() -> str:
    found = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/sbin")
    if found is None:
        raise DockerUnavailable("dockerd is not installed (Debian's docker.io)")
    if os.geteuid() != 0:
        raise DockerUnavailable("a Docker daemon needs root, and the tests do not run as root")
    return found


# The daemons this process started, kept so that they are reaped here (a Popen dropped while
# its child runs is a ResourceWarning).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _start(daemon: DockerDaemon) -> None:
    directory = daemon.directory
    with (directory / "dockerd.log").open("ab") as log:
        process = subprocess.Popen(
            [
                _dockerd(),
                "--host", daemon.host,
                "--data-root", str(directory / "data"),
                "--exec-root", str(directory / "exec"),
                "--pidfile", str(directory / "docker.pid"),
                # Containers use the host's network or networks of their own (compose); the
                # machine's firewall and bridges stay as they are.
                "--bridge", "none",
                "--iptables=false",
                "--ip6tables=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )  # fmt: skip
    _STARTED[process.pid] = process
    (directory / "dockerd.pid").write_text(str(process.pid))
    deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if daemon.socket.exists() and daemon.run("version", check=False).returncode == 0:
            return
        time.sleep(0.2)
    _stop(directory)
    lines = (directory / "dockerd.log").read_text(errors="replace").strip().splitlines()
    reason = lines[-1] if lines else "no output"
    raise DockerUnavailable(f"dockerd did not start on this machine: {reason}")


def _stop(directory: Path) -> None:
    pid_file = directory / "dockerd.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DAEMON_STOP_TIMEOUT_S
    started = _STARTED.get(pid)
    while time.monotonic() < deadline:
        # A daemon another test process started is not this one's child: it is gone when
        # signal 0 finds nothing; one of this process's is gone once reaped.
        if (started.poll() is not None) if started is not None else not process_alive(pid):
            break
        time.sleep(0.1)
    if process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    started = _STARTED.pop(pid, None)
    if started is not None:
        started.wait()
    pid_file.unlink()


def _unmount_under(directory: Path) -> None:
    """What the daemon leaves mounted under its directories once stopped (its network
    namespace handle, layers of a daemon that was killed), deepest first."""
    prefix = f"{directory}/"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


@contextlib.contextmanager
def shared_daemon() -> Iterator[DockerDaemon]:
    """The run's daemon, started by the first process that asks and stopped by the last."""
    # Short: a unix socket's path is limited to 108 bytes.
    directory = Path(tempfile.gettempdir()) / f"coordinator-docker-{run_id()}"
    directory.mkdir(exist_ok=True)
    lock = directory / "lock"
    users = directory / "users"
    daemon = DockerDaemon(directory)
    with locked(lock):
        count = int(users.read_text()) if users.exists() else 0
        pid_file = directory / "dockerd.pid"
        if count == 0 or not pid_file.exists() or not process_alive(int(pid_file.read_text())):
            _start(daemon)
        users.write_text(str(count + 1))
    try:
        yield daemon
    finally:
        with locked(lock):
            count = int(users.read_text()) - 1
            users.write_text(str(count))
            if count == 0:
                leftovers = daemon.run("ps", "--all", "--quiet", check=False).stdout.split()
                daemon.remove_containers(*leftovers)
                _stop(directory)
                _unmount_under(directory)
                shutil.rmtree(directory / "data", ignore_errors=True)
                shutil.rmtree(directory / "exec", ignore_errors=True)
        if count == 0:
            shutil.rmtree(directory, ignore_errors=True)


def ensure_base_image(daemon: DockerDaemon) -> None:
    """debian:bookworm-slim in the daemon, built from Debian's archive (cached on the machine
    between runs by the script). The machine's own CA certificates go in, so that builds
    reach PyPI and Maven Central as the machine does."""
    with locked(daemon.directory / "base.lock"):
        if daemon.has_image(BASE_IMAGE):
            return
        result = subprocess.run(
            ["bash", str(BASE_IMAGE_SCRIPT), "--trust-local-certificates"],
            env={**daemon.env, "DOCKER": docker_client()},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"debian-base.sh failed:\n{result.stdout}{result.stderr[-4000:]}")


def build_image(
    daemon: DockerDaemon,
    tag: str,
    context: Path,
    dockerfile: Path | None = None,
    build_args: Sequence[str] = (),
) -> float:
    """`docker build` of a Dockerfile of the repository as a user runs it, once a run (later
    callers find the image); the seconds the build took, 0 when it was there already. Builds
    use the host's network: the daemon has no bridge to give them one."""
    ensure_base_image(daemon)
    # A lock for each image: two test processes build two images side by side.
    with locked(daemon.directory / f"build-{tag.replace(':', '-').replace('/', '-')}.lock"):
        if daemon.has_image(tag):
            return 0.0
        started = time.monotonic()
        args = ["build", "--network", "host", "--tag", tag]
        if dockerfile is not None:
            args += ["--file", str(dockerfile)]
        for build_arg in build_args:
            args += ["--build-arg", build_arg]
        daemon.run(*args, str(context), timeout=BUILD_TIMEOUT_S)
        return time.monotonic() - started


class ImagesInBackground:
    """From collection on, a thread of the test process starts (joins) the run's daemon and
    builds the images, so that a machine's first base (debootstrap) and the builds overlap
    other tests instead of holding up the first container test. The fixtures build each
    image as before: they find it built, or wait on its lock for the build under way, or
    build it themselves where the thread failed (and then say why)."""

    def __init__(self, images: Sequence[tuple[str, Path]]) -> None:
        self._images = list(images)
        self._daemon: contextlib.AbstractContextManager[DockerDaemon] | None = None
        self._thread = threading.Thread(target=self._prepare, name="docker-images", daemon=True)

    def start(self) -> ImagesInBackground:
        self._thread.start()
        return self

    def _prepare(self) -> None:
        try:
            _dockerd()
            daemon_context = shared_daemon()
            daemon = daemon_context.__enter__()
        except DockerUnavailable:
            return
        self._daemon = daemon_context
        for tag, context in self._images:
            with contextlib.suppress(Exception):
                build_image(daemon, tag, context)

    def finish(self, timeout_s: float = BUILD_TIMEOUT_S) -> None:
        """Wait for the builds, then count this thread out of the daemon's users."""
        self._thread.join(timeout_s)
        daemon_context, self._daemon = self._daemon, None
        if daemon_context is not None:
            daemon_context.__exit__(None, None, None)
