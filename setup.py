"""The compiled hot path: `pip install` compiles the modules listed in
coordinator_server/compiled.py with mypyc, and installs the pure-Python package when it
cannot (no C compiler, or mypyc refuses a module): the same source runs either way.

Everything else about the distribution is in pyproject.toml.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
LISTING = runpy.run_path(str(ROOT / "coordinator_server" / "compiled.py"))
# Set to 0, the install skips the build (the pure-Python package, as where none can happen).
BUILD_VARIABLE = "COORDINATOR_COMPILE"


def _warn(message: str) -> None:
    print(f"coordinator-server: {message}; installing the pure-Python modules", file=sys.stderr)


# The commands that only read the project's metadata: no need to type-check and translate
# the modules for them (pip runs two of them before the build).
METADATA_ONLY = {"egg_info", "dist_info", "sdist", "--name", "--version"}


def _compiled_extensions() -> list:
    if os.environ.get(BUILD_VARIABLE, "1") == "0":
        return []
    if set(sys.argv[1:]) & METADATA_ONLY and not {"build_ext", "bdist_wheel"} & set(sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        _warn(f"mypyc is not available ({error})")
        return []
    paths = [
        str(LISTING["source_path"](ROOT / "coordinator_server", name).relative_to(ROOT))
        for name in LISTING["COMPILED_MODULES"]
    ]
    try:
        return mypycify(paths, opt_level="3", group_name="coordinator_server")
    except (Exception, SystemExit) as error:  # mypyc reports a refused module by exiting
        _warn(f"mypyc could not compile the hot path ({error!r})")
        return []


class BuildOrFallBack(build_ext):
    """Builds the extensions, or, when any of them fails, none: compiled modules call each
    other directly, so a partial build is never left behind."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:
            _warn(f"the compiled modules could not be built ({error})")
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            self._record(None)
            return
        self._record(LISTING["source_hashes"](ROOT / "coordinator_server"))

    def _record(self, hashes: dict[str, str] | None) -> None:
        """The sources the build was made from, beside the built package (compiled.py)."""
        for package_dir in self._package_dirs():
            record = package_dir / LISTING["BUILD_RECORD"]
            if hashes is None:
                record.unlink(missing_ok=True)
                continue
            package_dir.mkdir(parents=True, exist_ok=True)
            record.write_text("".join(f"{name} {digest}\n" for name, digest in hashes.items()))

    def _package_dirs(self) -> list[Path]:
        if not self.extensions:
            return []
        if self.inplace:
            return [ROOT / "coordinator_server"]
        return [Path(self.build_lib) / "coordinator_server"]


setup(ext_modules=_compiled_extensions(), cmdclass={"build_ext": BuildOrFallBack})
