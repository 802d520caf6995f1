"""Line-level text diffs, the ground both the text renders (:mod:`.render_text`) and the
cell-by-cell notebook diff (:mod:`.notebook_diff`) stand on.
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["diff_lines", "is_notebook_path", "lines_of"]


def lines_of(text: str) -> list[str]:
    """The lines of a file's text as the file has them: split on ``\n`` (a ``\r`` before
    it goes with it), never on the other separators ``str.splitlines`` takes (U+2028,
    U+2029, U+0085, form feed, …), which are characters inside a line of a file."""
    if not text:
        return []
    out = text.split("\n")
    if out[-1] == "":
        out.pop()
    return [line[:-1] if line.endswith("\r") else line for line in out]


def diff_lines(old: str | None, new: str, path: str = "") -> list[tuple[str, str]]:
    """A unified diff as ``(tag, line)`` pairs, tag one of ``"+"``, ``"-"``, ``" "``,
    ``"@"`` (hunk header). ``old`` None means a new file: every line is added."""
    if old is None:
        return [("+", line) for line in lines_of(new)]
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(lines_of(old), lines_of(new), lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        out.append((line[0] if line[:1] in "+- @" and line else " ", line[1:] if line[:1] in "+- " else line))
    return out


def is_notebook_path(path: Any) -> bool:
    """Whether ``path`` names a Jupyter notebook (a str ending in ``.ipynb``, any case)."""
    return isinstance(path, str) and path.lower().endswith(".ipynb")
