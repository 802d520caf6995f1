"""The documentation's relative links resolve (issue 22): every ``](path)`` in README.md,
CONTRIBUTING.md and docs/*.md names a file or folder of the repository, and every
``#anchor`` names a heading of the page it points at (GitHub's anchors: the heading in
lower case, punctuation dropped, spaces as hyphens, ``-1``, ``-2``… for repeats). Links to
other sites are not followed. Fast, no kernel: it reads the committed files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The page without its fenced code blocks (a ``# comment`` there is no heading)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of the markdown page ``path``."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        count = seen.get(slug(heading), 0)
        seen[slug(heading)] = count + 1
        found.add(slug(heading) if count == 0 else f"{slug(heading)}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of ``path``'s prose (code blocks and code spans left out)."""
    return LINK.findall(CODE_SPAN.sub("", prose(path.read_text(encoding="utf-8"))))


def test_the_pages_are_there():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "docs/DESIGN.md", "docs/security.md"} <= names, names


def test_the_anchors_are_githubs():
    assert slug("The fake agent's words") == "the-fake-agents-words"
    assert slug("Through `--via ssh`") == "through---via-ssh"
    assert slug("The kernel as the agent's MCP server") == "the-kernel-as-the-agents-mcp-server"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[here](#title) [gone](missing.md) `[code](x.md)`\n```\n# not a heading\n```\n")
    assert links(page) == ["#title", "missing.md"]
    assert anchors(page) == {"title"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:… — another site
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
