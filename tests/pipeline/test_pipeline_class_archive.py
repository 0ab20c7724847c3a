"""The driver JVM's class archive: planned per Java, PySpark and jars; kept only when the JVM
that wrote it exited cleanly (a real JVM here, not a stand-in: an archive cut short crashes
the next JVM that maps it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from coordinator_server.tools.pipeline.class_archive import keep_archive, plan_archive

# A program that reads its standard input to the end, as Spark's gateway does.
WAIT_FOR_EOF = """
class WaitForEof {
    public static void main(String[] args) throws Exception {
        while (System.in.read() != -1) {}
        System.exit(args.length == 0 ? 0 : Integer.parseInt(args[0]));
    }
}
"""


def start_jvm(tmp_path: Path, java_options: str, exit_code: int = 0) -> SimpleNamespace:
    source = tmp_path / "WaitForEof.java"
    source.write_text(WAIT_FOR_EOF)
    process = subprocess.Popen(
        ["java", *java_options.split(), str(source), str(exit_code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return SimpleNamespace(proc=process)


def test_the_first_start_writes_an_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    conf = {"spark.jars": "/a.jar"}
    first = plan_archive(conf, cache)
    assert first is not None and first.writing is not None
    assert first.java_options.startswith(f"-XX:ArchiveClassesAtExit={first.writing} ")
    assert "-Xlog:cds=off" in first.java_options

    keep_archive(first, start_jvm(tmp_path, first.java_options))
    assert first.archive.is_file() and first.archive.stat().st_size > 0
    assert not first.writing.exists()

    again = plan_archive(conf, cache)
    assert again is not None and again.writing is None
    assert again.archive == first.archive
    assert again.java_options.startswith(f"-XX:SharedArchiveFile={first.archive} ")
    # Another set of jars loads other classes: an archive of its own, kept beside it.
    other = plan_archive({"spark.jars": "/b.jar"}, cache)
    assert other is not None and other.writing is not None and other.archive != first.archive
    keep_archive(other, start_jvm(tmp_path, other.java_options))
    assert {path.name for path in cache.iterdir()} == {first.archive.name, other.archive.name}
    # A third replaces the one used longest ago: the first, unless it was used since.
    os.utime(first.archive, ns=(1, 1))
    os.utime(other.archive, ns=(2, 2))
    assert plan_archive(conf, cache) is not None
    third = plan_archive({"spark.jars": "/c.jar"}, cache)
    assert third is not None and third.writing is not None
    keep_archive(third, start_jvm(tmp_path, third.java_options))
    assert {path.name for path in cache.iterdir()} == {first.archive.name, third.archive.name}


def test_a_jvm_that_did_not_exit_cleanly_leaves_no_archive(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    plan = plan_archive({}, cache)
    assert plan is not None and plan.writing is not None
    keep_archive(plan, start_jvm(tmp_path, plan.java_options, exit_code=3))
    assert list(cache.iterdir()) == []
    again = plan_archive({}, cache)
    assert again is not None and again.writing is not None


def test_no_java_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java-here"))
    assert plan_archive({}, tmp_path / "cache") is None
