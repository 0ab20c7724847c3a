"""Where a running server's time goes, by layer: a py-spy profile's samples counted by the
layer of the innermost frame of ours in each stack, printed as shares and, given what an
operation costs the server (`--server-us`, the bench's `server_cpu_us`), as microseconds of
an operation.

    py-spy record -p SERVER_PID -r 250 -d 25 -f raw -o profile.txt
    python -m coordinator_server.tools.bench.profile_layers profile.txt --server-us 35.4

taken while `coordinator-server bench commits --broker kafka --inflight 64` measures (the
bench prints the server's pid when it starts it with `--verbose`; `ps` finds it otherwise).

A sample belongs to the innermost frame of this project's code in its stack: time in the
standard library or a C extension called from a layer is that layer's (a socket write is the
layer that writes). A stack with none of ours above the event loop is the event loop's
(uvloop's own work: polling, callbacks, system calls it makes itself). The shares are of the
samples py-spy takes while the server's thread is not idle: on a core shared with the
broker, a system call that wakes the broker can be preempted and sampled as running, so the
layer that makes it counts part of the broker's time; pin the broker to another core for the
server's own CPU alone.

The compiled build (`coordinator_server/compiled.py`) runs its modules as C: py-spy
sees them only with `--native`, as functions named by mypyc (`CPyDef_runtime___...`, the
module's last name first), which count for their modules' layers as their Python frames do.

    py-spy record -p SERVER_PID -r 250 -d 25 -f raw --native -o profile.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from coordinator_server import compiled
from coordinator_server.compiled import COMPILED_MODULES, source_path

LAYERS: tuple[tuple[str, str], ...] = (
    ("coordinator_protocol/", "wire decoding and encoding"),
    ("coordinator_server/server/", "connection: framing, dispatch, answers"),
    ("coordinator_server/service/", "service: checks, routing"),
    ("coordinator_server/authorizer/", "authorization"),
    ("coordinator_server/authentication/", "authorization"),
    ("coordinator_server/runtime/", "runtime: writes, batches, completions"),
    ("coordinator_server/timeline.py", "runtime: writes, batches, completions"),
    ("coordinator_server/shard/", "state machines: offsets, groups, transactions"),
    ("coordinator_server/offsets/", "state machines: offsets, groups, transactions"),
    ("coordinator_server/groups/", "state machines: offsets, groups, transactions"),
    ("coordinator_server/consumer_groups/", "state machines: offsets, groups, transactions"),
    ("coordinator_server/transactions/", "state machines: offsets, groups, transactions"),
    ("coordinator_server/records/", "records: encoding, batches"),
    ("coordinator_server/storage/", "log: produce requests to the broker"),
    ("coordinator_server/metrics.py", "metrics"),
)
"""Path prefixes, innermost first when they nest, and the layer each belongs to."""

EVENT_LOOP = "event loop (no frame of ours above it)"
OTHER = "other code of ours"

# Where the server's own code starts: frames above it (runpy, the CLI, asyncio's runner)
# are how it was started, not a layer.
_ENTRY = (
    "coordinator_server/__main__.py",
    "coordinator_server/cli.py",
    "coordinator_server/event_loop.py",
)
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^():]*)(?::(?P<line>\d+))?\)$")
# A function of the compiled build, as mypyc names it in C: its module's name (see
# `_compiled_files`), then its class and function, joined by three underscores.
_NATIVE = re.compile(r"^CPy(?:Def|Py)_(?P<name>[A-Za-z0-9_]+)$")


def _compiled_files() -> dict[str, str]:
    """The compiled modules' files, as py-spy names files, by the name mypyc gives their
    functions: the module's shortest dotted suffix that no other module of the build ends
    with, its dots written as three underscores (`timeline`, `groups___manager`)."""
    package = Path(compiled.__file__).parent
    suffixes = Counter(
        ".".join(parts[start:])
        for name in COMPILED_MODULES
        for parts in [name.split(".")]
        for start in range(len(parts))
    )
    files = {}
    for name in COMPILED_MODULES:
        parts = name.split(".")
        shortest = next(
            suffix
            for start in reversed(range(len(parts)))
            for suffix in [".".join(parts[start:])]
            if suffixes[suffix] == 1
        )
        relative = source_path(package, name).relative_to(package).as_posix()
        files[shortest.replace(".", "___")] = f"coordinator_server/{relative}"
    return files


_COMPILED_FILES = _compiled_files()
# Longest first: a module whose name begins another's never claims the other's functions.
_COMPILED_PREFIXES = sorted(
    ((f"{module}___", path) for module, path in _COMPILED_FILES.items()),
    key=lambda prefix: -len(prefix[0]),
)


def layer_of(path: str) -> str | None:
    """The layer of a frame in file `path` (as py-spy prints it), None if not ours."""
    for prefix, layer in LAYERS:
        if prefix in path:
            return layer
    if "coordinator_server/" in path or "coordinator_protocol/" in path:
        return None if any(entry in path for entry in _ENTRY) else OTHER
    return None


def frame_path(frame: str) -> str:
    """The file of a frame, a compiled function's module file for a native frame of ours."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame
    native = _NATIVE.match(match.group("function"))
    if native is not None:
        name = native.group("name")
        for prefix, path in _COMPILED_PREFIXES:
            if name.startswith(prefix):
                return path
    return match.group("path")


def count_layers(lines: Iterable[str]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Samples by layer from py-spy's raw (collapsed) lines, `frame;frame;... count`, and
    by layer the samples of each innermost frame of ours (function, file and line)."""
    counts: Counter[str] = Counter()
    frames: dict[str, Counter[str]] = {}
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        layer, innermost = EVENT_LOOP, ""
        for frame in reversed(stack.split(";")):
            found = layer_of(frame_path(frame))
            if found is not None:
                layer, innermost = found, frame.strip()
                break
        counts[layer] += int(count)
        if innermost:
            frames.setdefault(layer, Counter())[innermost] += int(count)
    return counts, frames


def table(
    counts: Counter[str],
    server_us: float | None,
    frames: dict[str, Counter[str]] | None = None,
    top_lines: int = 0,
) -> list[str]:
    """The layers, most samples first, each followed by its `top_lines` busiest lines."""
    total = sum(counts.values())
    if not total:
        return ["no samples"]
    head = f"{'layer':48} {'samples':>8} {'share':>7}"
    if server_us is not None:
        head += f" {'us/op':>7}"
    rows = [head]
    for layer, count in counts.most_common():
        share = count / total
        row = f"{layer:48} {count:8d} {share:7.1%}"
        if server_us is not None:
            row += f" {share * server_us:7.1f}"
        rows.append(row)
        if frames and top_lines:
            for frame, samples in frames.get(layer, Counter()).most_common(top_lines):
                rows.append(f"    {samples / total:6.1%}  {frame}")
    footer = f"{'total':48} {total:8d} {1:7.1%}"
    if server_us is not None:
        footer += f" {server_us:7.1f}"
    rows.append(footer)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy's raw output (-f raw)")
    parser.add_argument(
        "--server-us",
        type=float,
        default=None,
        help="the server's CPU microseconds per operation, to share out by layer",
    )
    parser.add_argument(
        "--lines", type=int, default=0, help="the busiest lines of each layer to show"
    )
    args = parser.parse_args(argv)
    with args.profile.open(encoding="utf-8") as lines:
        counts, frames = count_layers(lines)
    print("\n".join(table(counts, args.server_us, frames, args.lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
