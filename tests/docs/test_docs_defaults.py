"""Every default the documents name for a `serve` option is the one `coordinator-server serve
--help` prints, and every option they name exists.

The documents' convention (docs/CONTRIBUTING.md, "Documented defaults"):
- a table whose header has a `default` column and whose first column names options in
  backquotes: the default cell starts with the value in backquotes, as `--help` prints it, or
  with `none` for an option unset by default;
- in prose, an option followed by `(default `VALUE`)`.
An option followed closely by the word "default" in any other form is refused, so that no
default escapes the check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from markdown_docs import DOCS, ROOT, TableRow, documents, paragraphs, table_rows

OPTION = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
CODE_OPTION = re.compile(r"`(--[a-z0-9][a-z0-9-]*)`")
PROSE_DEFAULT = re.compile(r"`(--[a-z0-9][a-z0-9-]*)` \(default `([^`]*)`")
# An option, then "default" within a few words and no other code span: a default named in a
# form the check would not read.
LOOSE_DEFAULT = re.compile(
    r"`(--[a-z0-9][a-z0-9-]*)`[^`]{0,40}?\b(?:by default|defaults? to|default:?\s+[^\s)])"
)
# The last "default X" or "default: X" of an option's help, up to its closing bracket or a
# semicolon.
HELP_DEFAULT = re.compile(r"\bdefault:?\s+([^\]\);]*?)\s*[\]\);]")


def parse_help(text: str) -> dict[str, str | None]:
    """Each option of an argparse help text and the default its help names (None when it
    names none, or names None). Entries start at lines indented by at most 4 spaces with a
    dash; the options are the head of that line, before the help's column or a wide gap, so
    that neither the grouping of options nor their metavars matter."""
    options: dict[str, str | None] = {}
    entries: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped.startswith("-") and len(line) - len(stripped) <= 4:
            entries.append([stripped])
        elif entries and line.startswith(" " * 5):
            entries[-1].append(stripped)
        elif entries and not line.strip():
            continue
        elif entries:
            entries.append([])  # a group's title or text: ends the entry
    for entry in entries:
        if not entry:
            continue
        head = re.split(r"\s{2,}", entry[0], maxsplit=1)[0]
        names = OPTION.findall(head)
        defaults = HELP_DEFAULT.findall(" ".join(entry))
        default = defaults[-1] if defaults else None
        for name in names:
            options[name] = None if default in (None, "None") else default
    return options


@cache
def serve_help() -> dict[str, str | None]:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
    )
    return parse_help(result.stdout)


def documented_default(cell: str) -> str | None:
    """A default cell's value: the leading code span's text, or None for `none`."""
    cell = cell.strip()
    if cell.lower().startswith("none"):
        return None
    match = re.match(r"`([^`]*)`", cell)
    if match is None:
        raise ValueError(f"a default cell starts with `value` or none: {cell!r}")
    return match[1]


def default_tables(path: Path) -> list[TableRow]:
    return [
        row
        for row in table_rows(path)
        if "default" in row.header and CODE_OPTION.search(row.cells[0])
    ]


def mismatches(path: Path, options: dict[str, str | None], root: Path = ROOT) -> list[str]:
    """What `path` says of the options' defaults that `--help` contradicts."""
    wrong = []
    where = path.relative_to(root)
    for row in default_tables(path):
        try:
            documented = documented_default(row.cells[row.header.index("default")])
        except ValueError as e:
            wrong.append(f"{where}: {e}")
            continue
        for name in CODE_OPTION.findall(row.cells[0]):
            if name not in options:
                wrong.append(f"{where}: {name} is no option of serve")
            elif options[name] != documented:
                wrong.append(f"{where}: {name} defaults to {options[name]}, not {documented}")
    for text in paragraphs(path):
        checked = {m.start() for m in PROSE_DEFAULT.finditer(text)}
        for match in PROSE_DEFAULT.finditer(text):
            name, documented = match[1], match[2]
            if name not in options:
                wrong.append(f"{where}: {name} is no option of serve")
            elif options[name] != documented:
                wrong.append(f"{where}: {name} defaults to {options[name]}, not {documented}")
        wrong.extend(
            f"{where}: write {match[1]}'s default as `{match[1]}` (default `VALUE`): {match[0]!r}"
            for match in LOOSE_DEFAULT.finditer(text)
            if match[1] in options and match.start() not in checked
        )
    return wrong


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_documented_default_is_the_one_serve_help_prints(document: Path) -> None:
    assert mismatches(document, serve_help()) == []


def test_every_serve_option_has_its_row_in_the_configuration() -> None:
    listed = {
        name
        for row in default_tables(DOCS / "CONFIGURATION.md")
        for name in CODE_OPTION.findall(row.cells[0])
    }
    missing = sorted(set(serve_help()) - {"--help"} - listed)
    assert missing == [], f"docs/CONFIGURATION.md has no row for {missing}"


def test_serve_help_is_read_whatever_its_grouping_and_metavars() -> None:
    grouped = """usage: coordinator-server serve [-h] [--host HOST]

options:
  -h, --help            show this help message and exit

listener:
  --host HOST           Address to listen on. [env COORDINATOR_HOST; default 127.0.0.1]
  --advertised-host HOST
                        Host FindCoordinator answers with (default: --host, or
                        127.0.0.1). [env COORDINATOR_ADVERTISED_HOST; default None]
  --max-connections-per-ip N  Connections from one address (default: 2000)
  --max-frame-bytes BYTES
                        Largest frame. [default: 8388608; env COORDINATOR_MAX_FRAME_BYTES]

cluster:
  --cluster {on,off}    Share the log. (default: on)
  --append-linger-ms MS
                        Linger; -1: adaptive
                        (default: -1)
"""
    assert parse_help(grouped) == {
        "--help": None,
        "--host": "127.0.0.1",
        "--advertised-host": None,
        "--max-connections-per-ip": "2000",
        "--max-frame-bytes": "8388608",
        "--cluster": "on",
        "--append-linger-ms": "-1",
    }


def test_a_wrong_default_a_loose_one_and_an_unknown_option_are_found(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "PAGE.md"
    page.parent.mkdir()
    page.write_text(
        "| option | default | meaning |\n|---|---|---|\n"
        "| `--cluster` | `off` | share |\n| `--port` | `9094` | port |\n"
        "| `--advertised-host` | none: `--host` | host |\n| `--no-such` | `1` | gone |\n\n"
        "Listens on `--port` (default `9094`), or `--host` (default `0.0.0.0`);\n"
        "`--metrics-port`, 9095 by default.\n"
    )
    options = {
        "--cluster": "on",
        "--port": "9094",
        "--advertised-host": None,
        "--host": "127.0.0.1",
        "--metrics-port": "9095",
    }
    wrong = [line.split(": ", 1)[1] for line in mismatches(page, options, tmp_path)]
    assert wrong == [
        "--cluster defaults to on, not off",
        "--no-such is no option of serve",
        "--host defaults to 127.0.0.1, not 0.0.0.0",
        "write --metrics-port's default as `--metrics-port` (default `VALUE`): "
        "'`--metrics-port`, 9095 by default'",
    ]
