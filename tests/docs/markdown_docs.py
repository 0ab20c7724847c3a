"""The repository's Markdown documents, parsed as CommonMark (with tables) by markdown-it-py:
their code blocks, links and headings, for the tests that keep the docs true."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def documents() -> list[Path]:
    """Every Markdown document a reader follows links between."""
    return [README, *sorted(DOCS.glob("*.md")), ROOT / "deploy" / "README.md"]


@cache
def tokens(path: Path) -> list[Token]:
    parser = MarkdownIt("commonmark").enable("table")
    return parser.parse(path.read_text(encoding="utf-8"))


def code_blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of `path` whose info string is `language`, in order."""
    return [t.content for t in tokens(path) if t.type == "fence" and t.info.strip() == language]


def _inline_children(path: Path) -> Iterator[Token]:
    for token in tokens(path):
        if token.type == "inline" and token.children:
            yield from token.children


def links(path: Path) -> list[str]:
    """Every link target of `path` (hrefs of links; images included)."""
    targets = []
    for child in _inline_children(path):
        if child.type == "link_open":
            targets.append(str(child.attrs["href"]))
        elif child.type == "image":
            targets.append(str(child.attrs["src"]))
    return targets


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than '-' and '_'
    dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of `path`'s headings, with GitHub's -1, -2 ... for repeated ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    all_tokens = tokens(path)
    for index, token in enumerate(all_tokens):
        if token.type != "heading_open":
            continue
        inline = all_tokens[index + 1]
        text = "".join(child.content for child in inline.children or [] if child.content)
        slug = github_slug(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@dataclass(frozen=True)
class TableRow:
    path: Path
    header: tuple[str, ...]
    cells: tuple[str, ...]
    """Each cell's Markdown source (code spans keep their backquotes)."""


def table_rows(path: Path) -> list[TableRow]:
    """The body rows of every table of `path`, each with its table's header."""
    rows: list[TableRow] = []
    header: tuple[str, ...] = ()
    current: list[str] | None = None
    in_head = False
    for token in tokens(path):
        if token.type == "thead_open":
            in_head = True
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "tr_open":
            current = []
        elif token.type == "inline" and current is not None:
            current.append(_source(token))
        elif token.type == "tr_close" and current is not None:
            if in_head:
                header = tuple(cell.strip().lower() for cell in current)
            else:
                rows.append(TableRow(path, header, tuple(current)))
            current = None
    return rows


def _source(inline: Token) -> str:
    """An inline token's text with its code spans in backquotes, as written."""
    parts = []
    for child in inline.children or []:
        if child.type == "code_inline" and "`" in child.content:
            parts.append("<example>")  # a code span showing Markdown, not a mention
        elif child.type == "code_inline":
            parts.append(f"`{child.content}`")
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        else:
            parts.append(child.content)
    return "".join(parts)


def paragraphs(path: Path) -> list[str]:
    """The text of every paragraph, list item and table cell of `path`, code spans in
    backquotes, line breaks as spaces (so a phrase split over two lines is one phrase)."""
    return [_source(t) for t in tokens(path) if t.type == "inline"]
