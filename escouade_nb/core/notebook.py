"""Which notebook this kernel runs, and a read notebook's cells as text. Pure: the only
I/O is :meth:`pathlib.Path.exists` (a stat); reading the file is the caller's (in a thread).

A kernel learns its notebook from jupyter_server: ``JPY_SESSION_NAME`` in its
environment, copied by ipykernel (≥ 6.22) into ``user_ns["__session__"]``. Measured
(jupyter_server 2.21, ipykernel 7.4): absolute (``<root>/sub/nb.ipynb``) when the session
was created with a name, as JupyterLab does; the API path relative to the *server root*
(``sub/nb.ipynb``, while the kernel's cwd is ``<root>/sub``) when created by path only;
the old path after a rename until the kernel restarts; absent under nbclient, nbval,
``jupyter console`` and plain kernels. So a path is a guess to be checked: say which one
was read, and work without one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

from .output_images import IMAGE_MIMES, Images
from .variables import cell_bound, cut

__all__ = ["NotebookRef", "kernel_notebook", "file_cells", "live_cells", "output_text", "outputs_text", "MAX_OUTPUT"]

PAGES_TARGET = "escouade_nb.notebook"
"""The Jupyter comm target of the kernel's channel to its notebook's pages (``labextension/src/index.js``)."""


_pages_coming: Callable[[], None] | None = None


def pages_coming(wait: Callable[[], None] | None) -> None:
    """``%load_ext escouade_nb`` says the channel to the notebook's pages is on its way (its thread loads it,
    ~2 s): ``wait()`` blocks until that thread is done (call it in a worker thread; the channel is then started
    on the loop, before anything queued after the thread's end). ``None``: nothing on its way (the channel is
    there, or never comes)."""
    global _pages_coming
    _pages_coming = wait


def pages_coming_wait() -> Callable[[], None] | None:
    """What :func:`pages_coming` was last given."""
    return _pages_coming


MAX_OUTPUT = 2000
"""Characters of one cell's outputs (as text) kept by :func:`file_cells`."""


@dataclass(frozen=True)
class NotebookRef:
    """The notebook a kernel runs: ``path`` (absolute when it could be resolved),
    ``source`` (where it was learnt: ``"__session__"`` or ``"JPY_SESSION_NAME"``),
    ``exists`` (whether the file was there when asked; a rename since the kernel
    started leaves a stale path)."""

    path: Path
    source: Literal["__session__", "JPY_SESSION_NAME"]
    exists: bool

    def describe(self) -> str:
        """One line for a tool result: ``/x/nb.ipynb (from __session__)``, with
        ``, not found: renamed or moved since the kernel started?`` when missing."""
        note = "" if self.exists else ", not found: renamed or moved since the kernel started?"
        return f"{self.path} (from {self.source}{note})"


def _candidates(given: str, cwd: Path) -> list[Path]:
    """Where a session name may point: as is when absolute; when relative, the API path
    is relative to the server root and the kernel runs in the notebook's folder, so
    ``cwd / name`` (the cwd ends with the path's folder), then ``cwd / path`` (a kernel
    started at the root)."""
    p = PurePath(given)
    if p.is_absolute():
        return [Path(p)]
    folder = p.parent.parts
    near = cwd / p.name
    if folder and tuple(cwd.parts[-len(folder):]) == folder:
        return [near, cwd / p]
    return [cwd / p, near] if folder else [near]


def kernel_notebook(ns: Mapping[str, Any], env: Mapping[str, str], cwd: Path) -> NotebookRef | None:
    """The notebook this kernel runs, from ``ns["__session__"]`` (first) or
    ``env["JPY_SESSION_NAME"]``; ``None`` when neither names an ``.ipynb`` file (a
    console's session, nbclient, nbval, a plain kernel). A relative name is resolved
    against ``cwd`` (see :func:`_candidates`); the first candidate that exists wins, else
    the most likely one is returned with ``exists=False``."""
    named: tuple[tuple[Literal["__session__", "JPY_SESSION_NAME"], Any], ...] = (
        ("__session__", ns.get("__session__")), ("JPY_SESSION_NAME", env.get("JPY_SESSION_NAME")))
    for source, value in named:
        if not isinstance(value, str) or not value.strip() or not value.strip().lower().endswith(".ipynb"):
            continue
        candidates = _candidates(value.strip(), Path(cwd))
        for path in candidates:
            if path.exists():
                return NotebookRef(path=path, source=source, exists=True)
        return NotebookRef(path=candidates[0], source=source, exists=False)
    return None


def _text(value: Any) -> str:
    """nbformat's multiline strings: a str, or a list of str to join."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return ""


def output_text(output: Mapping[str, Any], images: Images | None = None, cell_id: str | None = None,
                index: int | None = None) -> str:
    """One nbformat v4 output as text: a stream's text, the ``text/plain`` of a result or
    a display (``[MIME]`` when it has no text form: an image…), an error's
    ``ename: evalue`` and its traceback (terminal colours removed). With ``images``, a
    PNG or JPEG of a result or a display is checked and kept there (cell ``cell_id`` at
    position ``index``), and named in a line after its text (:meth:`Images.take`)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _text(output.get("text"))
    if kind in ("execute_result", "display_data"):
        data = output.get("data") or {}
        named = [images.take(m, data[m], cell_id, index) for m in IMAGE_MIMES if m in data] \
            if images is not None and isinstance(data, Mapping) else []
        if any(named):
            plain = _text(data.get("text/plain"))
            return (plain.rstrip("\n") + "\n" if plain else "") + "\n".join(n for n in named if n) + "\n"
        if "text/plain" in data:
            return _text(data["text/plain"])
        return " ".join(f"[{mime}]" for mime in data) or ""
    if kind == "error":
        tb = "\n".join(_text(line) for line in output.get("traceback") or [])
        tb = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", tb)
        head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
        return f"{head}\n{tb}" if tb else head
    return ""


def file_cells(nb: Mapping[str, Any], *, start: int | None = None, end: int | None = None,
               max_output: int = MAX_OUTPUT) -> list[dict[str, Any]]:
    """The cells of a read notebook (a v4 dict, as ``nbformat.read`` gives) numbered from
    1 in file order: ``[{"index", "cell_type", "id", "execution_count", "source",
    "outputs" (text, cut to ``max_output``, or None)}]`` for positions ``start`` to
    ``end`` inclusive (negative: from the last cell, -1 is the last). ``ValueError`` for
    bounds that are not integers."""
    cells = nb.get("cells") or []
    n = len(cells)

    what = "positions in the notebook (integers from 1)"
    lo, hi = max(1, cell_bound(start, 1, n, what)), min(n, cell_bound(end, n, n, what))
    out = []
    for index in range(lo, hi + 1):
        cell = cells[index - 1]
        outputs = None
        if cell.get("cell_type") == "code":
            outputs = outputs_text(cell.get("outputs") or [], max_output)
        out.append({"index": index, "cell_type": cell.get("cell_type", "?"), "id": cell.get("id"),
                    "execution_count": cell.get("execution_count"), "source": _text(cell.get("source")),
                    "outputs": outputs})
    return out


def outputs_text(outputs: list, max_output: int = MAX_OUTPUT, images: Images | None = None,
                 cell_id: str | None = None, index: int | None = None) -> str | None:
    """A code cell's outputs (nbformat-like dicts; anything else skipped) as one text, cut to
    ``max_output`` characters (saying how many there were), or None when there is none;
    ``images``, ``cell_id``, ``index``: as :func:`output_text`."""
    return cut("".join(output_text(o, images, cell_id, index) for o in outputs if isinstance(o, Mapping)),
               max_output) or None


MAX_LIVE_CELLS = 10_000
"""Cells of a live notebook read beyond which the page's answer is refused as malformed."""


def _page_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"the page sent a {what} that is not text")
    return value


def live_cells(cells: Any, *, start: int | None = None, end: int | None = None,
               max_output: int = MAX_OUTPUT, images: Images | None = None) -> tuple[int, list[dict[str, Any]]]:
    """The cells a notebook page sent (the kernel's channel: ``[{"id", "cell_type",
    "source", "execution_count", "outputs": [nbformat-like outputs]}]``, untrusted),
    numbered from 1, positions ``start`` to ``end`` inclusive (negative: from the last):
    ``(total, [{"index", "id", "cell_type", "source", "sha256" (hex SHA-256 of the
    source's UTF-8), "execution_count", "outputs" (text cut to ``max_output``, or None),
    "pending" (an agent's change under review: the source is the pending one), and then
    "pending_change" (``insert``, ``edit`` or ``delete``)}])``. With ``images``, the PNG and
    JPEG outputs are checked and kept there, and named in the outputs' text (:class:`Images`).
    ``ValueError`` for a malformed answer or bounds that are not integers."""
    import hashlib

    if not isinstance(cells, list) or len(cells) > MAX_LIVE_CELLS:
        raise ValueError("the page sent no list of cells")
    n = len(cells)
    what = "positions in the notebook (integers from 1)"
    lo, hi = max(1, cell_bound(start, 1, n, what)), min(n, cell_bound(end, n, n, what))
    out = []
    for index in range(lo, hi + 1):
        cell = cells[index - 1]
        if not isinstance(cell, Mapping):
            raise ValueError(f"the page sent cell {index} as no object")
        source = _page_str(cell.get("source"), "cell source")
        cell_id = cell.get("id")
        cell_id = cell_id[:200] if isinstance(cell_id, str) else None
        count = cell.get("execution_count")
        outputs = None
        kind = _page_str(cell.get("cell_type"), "cell type")[:20]
        if kind == "code":
            raw = cell.get("outputs") or []
            if not isinstance(raw, list):
                raise ValueError(f"the page sent the outputs of cell {index} as no list")
            outputs = outputs_text(raw, max_output, images, cell_id, index)
        pending = cell.get("pending")
        item = {"index": index, "id": cell_id, "cell_type": kind,
                "source": source, "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
                "execution_count": count if isinstance(count, int) and not isinstance(count, bool) else None,
                "outputs": outputs, "pending": isinstance(pending, str)}
        if isinstance(pending, str):  # an agent's change under review: the source is the pending one
            item["pending_change"] = pending[:20]
        out.append(item)
    return n, out
