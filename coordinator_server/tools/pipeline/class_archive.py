"""The driver JVM's class archive: JDK class data sharing for a session the command starts.

A local Spark session's JVM loads and verifies the same tens of thousands of classes at every
start. A class archive holds them ready to map: on 2 cores, a session took 8.6 to 10 s to
start and its first job 2.7 to 3.4 s without one, 5.5 to 6.1 s and 1.4 to 1.6 s with one.

The first start (for a given Java, PySpark and set of jars) asks the JVM to write the archive
of what it loaded when it exits (`-XX:ArchiveClassesAtExit`), to a file of its own; once the
command has stopped its session, `keep_archive` ends the JVM, waits for it and keeps the file
only when the JVM exited cleanly: an archive cut short (a JVM killed while writing it) makes
the next JVM that maps it crash, so only a whole one is ever given a name later starts use.
Later starts map it (`-XX:SharedArchiveFile`). Java prints nothing about the archive
(`-Xlog:cds=off`): one that does not fit (a Java updated in place) is ignored by the JVM.

The archive (about 180 MB) lives in the user's cache directory (`packages.user_cache_dir`);
the two used last are kept: a log in SQLite and a log in Kafka start with other jars, so
each has its own, and writing one as the JVM exits took 15 s on 2 cores (a history's first
run on a machine: 43 s, where later runs take 12 s). A
`--conf spark.driver.extraJavaOptions=...` of the caller's own replaces this as it replaces
the other local defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pyspark
from pyspark import SparkContext

__all__ = ["ArchivePlan", "keep_archive", "plan_archive"]

log = logging.getLogger(__name__)

PREFIX: Final = "spark-classes-"
SUFFIX: Final = ".jsa"
# What decides which classes the driver loads from where: the jars and class path it starts
# with.
CLASS_PATH_SETTINGS: Final = (
    "spark.jars",
    "spark.jars.packages",
    "spark.driver.extraClassPath",
)
QUIET: Final = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# How long the JVM may take to write the archive as it exits (15 s on 2 cores).
EXIT_TIMEOUT_S: Final = 120.0
# Archives kept, the ones used last.
KEPT_ARCHIVES: Final = 2


class ArchivePlan:
    """The JVM options of a start, and the file it writes its archive to (None: it maps one
    already there)."""

    def __init__(self, java_options: str, writing: Path | None, archive: Path) -> None:
        self.java_options = java_options
        self.writing = writing
        self.archive = archive


def _java() -> Path | None:
    # As Spark's launcher finds it: JAVA_HOME's, else the one on PATH.
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found:
        return None
    path = Path(found).resolve()
    return path if path.is_file() else None


def _key(java: Path, conf: Mapping[str, str]) -> str:
    stat = java.stat()
    identity = {
        "java": [str(java), stat.st_size, stat.st_mtime_ns],
        "pyspark": pyspark.__version__,
        "conf": {name: conf.get(name) for name in CLASS_PATH_SETTINGS},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def plan_archive(conf: Mapping[str, str], cache_dir: Path) -> ArchivePlan | None:
    """The archive options for a JVM started with `conf` (None: no Java found to key it by,
    or no cache directory to write to)."""
    java = _java()
    if java is None:
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    archive = cache_dir / f"{PREFIX}{_key(java, conf)}{SUFFIX}"
    if archive.is_file():
        with contextlib.suppress(OSError):
            # Marked as used: the archives used last are the ones kept.
            os.utime(archive)
        return ArchivePlan(f"-XX:SharedArchiveFile={archive} {QUIET}", None, archive)
    writing = cache_dir / f".{archive.name}.{os.getpid()}.partial"
    return ArchivePlan(f"-XX:ArchiveClassesAtExit={writing} {QUIET}", writing, archive)


def keep_archive(plan: ArchivePlan | None, gateway: Any) -> None:
    """After the session is stopped: end its JVM (Spark's gateway exits when its standard
    input closes) and, if the JVM was writing an archive and exited cleanly, keep it."""
    if plan is None or plan.writing is None or gateway is None:
        return
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    try:
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()
        if SparkContext._gateway is gateway:
            # A new session in this process starts a JVM of its own.
            SparkContext._gateway = None
            SparkContext._jvm = None
        try:
            code = process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            return
        if code == 0 and plan.writing.is_file() and plan.writing.stat().st_size > 0:
            os.replace(plan.writing, plan.archive)
            log.info("kept the driver JVM's class archive in %s", plan.archive)
            _drop_unused(plan.archive.parent)
    except OSError as error:
        log.debug("no class archive kept: %s", error)
    finally:
        with contextlib.suppress(OSError):
            plan.writing.unlink()


def _drop_unused(cache_dir: Path) -> None:
    """Remove the archives beyond the `KEPT_ARCHIVES` used last."""
    archives = []
    for archive in cache_dir.glob(f"{PREFIX}*{SUFFIX}"):
        with contextlib.suppress(OSError):
            archives.append((archive.stat().st_mtime_ns, archive))
    for _, unused in sorted(archives, reverse=True)[KEPT_ARCHIVES:]:
        with contextlib.suppress(OSError):
            unused.unlink()
