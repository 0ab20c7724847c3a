"""Every relative link between the documents leads somewhere: to a file or folder of the
repository and, for a Markdown file, to one of its headings when it names an anchor."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_docs import ROOT, anchors, documents, github_slug, links


def broken_links(document: Path) -> list[str]:
    broken = []
    for href in links(document):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue  # a web address: not the repository's to keep
        target = (document.parent / unquote(parts.path)).resolve() if parts.path else document
        if not target.exists():
            broken.append(f"{href}: no {os.path.relpath(target, ROOT)}")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in anchors(target):
            broken.append(f"{href}: {target.name} has no heading #{parts.fragment}")
    return broken


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert document.exists()
    assert not broken_links(document)


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / "OTHER.md").write_text("# Other\n\n## A `code` section, with punctuation\n")
    page = tmp_path / "PAGE.md"
    page.write_text(
        "[ok](OTHER.md#a-code-section-with-punctuation) [ok](#page) [web](https://example.com)\n"
        "[gone](MISSING.md) [no anchor](OTHER.md#nowhere)\n\n# Page\n"
    )
    assert broken_links(page) == [
        "MISSING.md: no " + os.path.relpath(tmp_path / "MISSING.md", ROOT),
        "OTHER.md#nowhere: OTHER.md has no heading #nowhere",
    ]


def test_headings_get_githubs_anchors() -> None:
    assert github_slug("Kafka with SASL and TLS") == "kafka-with-sasl-and-tls"
    assert github_slug("The coordinator's own listener") == "the-coordinators-own-listener"
    assert github_slug("groups: the admin tool") == "groups-the-admin-tool"
