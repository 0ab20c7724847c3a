"""Spark packages resolved once, not at every start.

A session started with `spark.jars.packages` (Spark's Kafka source) has Spark resolve the
packages through Ivy before the driver starts, on every start: even with every jar in Ivy's
cache that costs a JVM several CPU seconds of Ivy settings, resolution and retrieval, as
much as the rest of a local session's start. So the jars a resolution gave are remembered
(`remember_resolved_jars`, in the user's cache directory, keyed by every setting that
decides the resolution), and the next start with the same settings names those jars in
`spark.jars` instead (`with_resolved_jars`), as long as each of them is still there. A jar
gone (Ivy's cache emptied) or another setting means one resolution again.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

__all__ = [
    "RESOLVED_JARS_FILE",
    "remember_resolved_jars",
    "resolved_jars_file",
    "user_cache_dir",
    "with_resolved_jars",
]

PACKAGES: Final = "spark.jars.packages"
JARS: Final = "spark.jars"
# Everything that decides which jars a resolution gives.
RESOLUTION_SETTINGS: Final = (
    PACKAGES,
    "spark.jars.excludes",
    "spark.jars.repositories",
    "spark.jars.ivy",
    "spark.jars.ivySettings",
)
RESOLVED_JARS_FILE: Final = "spark-resolved-jars.json"
# Resolutions remembered (the oldest is forgotten first): one per set of settings in use.
MAX_REMEMBERED: Final = 16


def resolved_jars_file(conf: Mapping[str, str]) -> Path:
    """Where the resolutions of a session with settings `conf` are remembered: beside
    Ivy's own cache when `spark.jars.ivy` names it, else in the coordinator-server
    directory of the user's cache directory (`$XDG_CACHE_HOME`, by default ~/.cache)."""
    ivy = conf.get("spark.jars.ivy")
    if ivy:
        return Path(ivy) / RESOLVED_JARS_FILE
    return user_cache_dir() / RESOLVED_JARS_FILE


def user_cache_dir() -> Path:
    """The coordinator-server directory of the user's cache directory (`$XDG_CACHE_HOME`,
    by default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coordinator-server"


def _key(conf: Mapping[str, str]) -> str:
    return json.dumps({name: conf.get(name) for name in RESOLUTION_SETTINGS}, sort_keys=True)


def _jar_path(jar: str) -> Path | None:
    parsed = urlparse(jar)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path))
    return None


def _split(listed: str | None) -> list[str]:
    return [item.strip() for item in (listed or "").split(",") if item.strip()]


def _read(file: Path) -> dict[str, list[str]]:
    try:
        remembered = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return remembered if isinstance(remembered, dict) else {}


def with_resolved_jars(conf: Mapping[str, str], file: Path | None = None) -> dict[str, str]:
    """`conf` with its `spark.jars.packages` replaced by the jars an earlier start resolved
    them to, when one did with the same settings and each jar is still there; else `conf`
    as it is (Spark resolves the packages)."""
    merged = dict(conf)
    if not conf.get(PACKAGES):
        return merged
    jars = _read(file or resolved_jars_file(conf)).get(_key(conf))
    if not isinstance(jars, list) or not jars:
        return merged
    paths = [_jar_path(jar) for jar in jars]
    if not all(path is not None and path.is_file() for path in paths):
        return merged
    del merged[PACKAGES]
    merged[JARS] = ",".join(_split(conf.get(JARS)) + [jar for jar in jars if isinstance(jar, str)])
    return merged


def remember_resolved_jars(
    spark: SparkSession, conf: Mapping[str, str], file: Path | None = None
) -> None:
    """Remember the jars Spark resolved `conf`'s packages to for this session (when it
    resolved them: a session started with `spark.jars.packages` in `conf`). A cache that
    cannot be written is no error: the next start resolves again."""
    if not conf.get(PACKAGES):
        return
    own = set(_split(conf.get(JARS)))
    jars = [jar for jar in _split(spark.sparkContext.getConf().get(JARS)) if jar not in own]
    if not jars:
        return
    file = file or resolved_jars_file(conf)
    remembered = _read(file)
    remembered.pop(_key(conf), None)
    remembered[_key(conf)] = jars
    while len(remembered) > MAX_REMEMBERED:
        remembered.pop(next(iter(remembered)))
    with contextlib.suppress(OSError):
        file.parent.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: two starts at once never read half a file.
        with tempfile.NamedTemporaryFile(
            "w", dir=file.parent, prefix=file.name, suffix=".tmp", delete=False, encoding="utf-8"
        ) as out:
            json.dump(remembered, out, indent=1)
        os.replace(out.name, file)
