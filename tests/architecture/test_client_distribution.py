"""The client library stands alone: its own distribution (clients/python) that needs only
what a client needs, whose modules never load the server's, whose tests pass without the
server, on which the server depends (not the other way round); and its former name keeps
working for a release, with a warning."""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"


def project(folder: Path) -> dict[str, Any]:
    text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    project: dict[str, Any] = tomllib.loads(text)["project"]
    return project


def test_the_client_requires_only_what_a_client_needs() -> None:
    requires = [Requirement(line) for line in project(CLIENT)["dependencies"]]
    assert {canonicalize_name(r.name) for r in requires} == {"msgpack", "msgspec", "aiokafka"}


def test_the_server_depends_on_the_client_at_its_version() -> None:
    client = project(CLIENT)
    requires = [Requirement(line) for line in project(ROOT)["dependencies"]]
    (pin,) = [r for r in requires if canonicalize_name(r.name) == client["name"]]
    assert str(pin.specifier) == f"=={client['version']}"


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import sys, coordinator_client, coordinator_client.consumer, "
         "coordinator_client.producer, coordinator_protocol.messages; "
         "print(*sorted(sys.modules), sep='\\n')"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    server_side = [
        name
        for name in loaded
        if name.split(".")[0] in {"coordinator_server", "pydantic", "prometheus_client", "uvloop"}
    ]
    assert not server_side
    assert "coordinator_client.member" in loaded


def test_the_clients_own_tests_import_nothing_of_the_server() -> None:
    """The client's tests (run with the rest of the suite, and on their own from
    clients/python) need neither the server nor this repository's other test helpers."""
    server_helpers = {path.stem for path in (ROOT / "tests").glob("*.py")}
    offending = []
    for path in sorted((CLIENT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            top = {name.split(".")[0] for name in names}
            if top & ({"coordinator_server"} | server_helpers):
                offending.append(f"{path.relative_to(ROOT)}: {', '.join(sorted(names))}")
    assert not offending
    assert len(list((CLIENT / "tests").rglob("test_*.py"))) >= 15


def test_the_former_name_warns_and_hands_out_the_same_objects() -> None:
    import coordinator_client
    import coordinator_client.member

    sys.modules.pop("coordinator_server.client", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from coordinator_server.client.member import GroupMember

        import coordinator_server.client as former
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "coordinator_client" in str(caught[0].message)
    assert former.GroupMember is coordinator_client.GroupMember is GroupMember
    assert former.member is coordinator_client.member
    assert set(former.__all__) == set(coordinator_client.__all__)


def test_the_server_loads_only_the_client_librarys_kafka_metadata_requests_and_security() -> None:
    """The library's names load their modules when first asked for: the server, which
    imports its Kafka metadata requests and its security settings and SASL exchanges (a node
    authenticates to another as any client does), carries none of the consumer, producer or
    RPC client."""
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import sys, coordinator_server.app; "
         "print(*sorted(m for m in sys.modules if m.startswith('coordinator_client')))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    assert loaded == [
        "coordinator_client",
        "coordinator_client.kafka_metadata_request",
        "coordinator_client.rpc",
        "coordinator_client.rpc.sasl",
        "coordinator_client.rpc.security",
    ]


def test_the_client_distribution_ships_the_library_and_the_contract_only() -> None:
    """What setuptools packs from clients/python (its package list, as pyproject says it):
    the two packages, typed; no server, no tests."""
    text = (CLIENT / "pyproject.toml").read_text(encoding="utf-8")
    setuptools_config = tomllib.loads(text)["tool"]["setuptools"]
    include = setuptools_config["packages"]["find"]["include"]
    packages = [
        ".".join(folder.relative_to(CLIENT).parts)
        for folder in (init.parent for init in CLIENT.rglob("__init__.py"))
        if any(
            fnmatch.fnmatchcase(".".join(folder.relative_to(CLIENT).parts), pattern)
            for pattern in include
        )
    ]
    assert {name.split(".")[0] for name in packages} == {
        "coordinator_client",
        "coordinator_protocol",
    }
    assert "coordinator_client.rpc" in packages
    for package, data in setuptools_config["package-data"].items():
        assert data == ["py.typed"]
        assert (CLIENT / package / "py.typed").is_file()


def test_every_name_the_library_exports_resolves() -> None:
    """The package's names load their modules lazily, from a list kept by hand: each name of
    `__all__` resolves to the object of the module that defines it."""
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import coordinator_client as c; "
         "print(*(f'{n}={getattr(c, n).__module__}' for n in c.__all__ "
         "if hasattr(getattr(c, n), '__module__')))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    modules = dict(item.split("=") for item in loaded)
    assert modules["GroupMember"] == "coordinator_client.member"
    assert modules["CoordinatorClient"] == "coordinator_client.rpc.client"
    assert len(modules) == 33
