"""Cell-by-cell diffs of Jupyter notebooks (``.ipynb`` JSON): pure, synchronous.

``notebook_diff(old_text, new_text, path)`` compares two notebook texts and returns a
:class:`NotebookDiff`: which cells were added, removed, moved or changed (their source as a
unified diff, their outputs cleared or changed, their type, execution count, metadata and
attachments), and what changed in the notebook's own metadata. ``NotebookDiff.text()`` is
its deterministic plain-text render (tool and permission cards show it for a diff whose
path ends in ``.ipynb``, instead of a diff of the JSON text).

Matching cells
    A cell of the old notebook and one of the new are the same cell when both have an
    ``id`` and the ids are equal. Cells without an id (nbformat < 4.5, or cells an agent
    wrote without one) are matched by their source: an identical source first, then the
    most similar one (``difflib.SequenceMatcher`` ratio ≥ 0.5 over the first 4000
    characters; a change of cell type costs 0.1), one old cell for one new cell. When
    both notebooks have ids but share none (every id regenerated), ids are ignored and
    all cells are matched by source; the diff says so. Past 4000 candidate pairs left
    after the exact matches, only exact matches are made (the rest show as removed and
    added). A matched cell is *moved* when it is not among the cells that kept their
    relative order (the matching blocks of ``difflib.SequenceMatcher`` over the two
    orders).

Not a notebook
    When either text is not JSON, or not a JSON object with a ``cells`` list, the diff
    has ``error`` set (a sentence saying which side and why) and no cells: callers fall
    back to the text diff and show that sentence.

Results are memoised on ``(old_text, new_text, path)`` (the last 16, whose texts the memo
keeps alive): a card redrawn many times parses its notebooks once.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from .text_diff import diff_lines, is_notebook_path

__all__ = ["CellChange", "NotebookDiff", "is_notebook_path", "notebook_diff", "cell_source"]

SIMILAR = 0.5
"""The least ``SequenceMatcher`` ratio for two cells without common ids to be the same cell."""
MAX_FUZZY_PAIRS = 4000
"""Past this many (old, new) candidate pairs, cells are matched by identical source only."""
_COMPARED_CHARS = 4000

CellKind = Literal["added", "removed", "changed", "unchanged"]


def cell_source(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat allows a string or a list of lines)."""
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


@dataclass(frozen=True)
class CellChange:
    """One cell of the diff. ``kind``: ``added``, ``removed``, ``changed`` or
    ``unchanged``; ``moved``: a matched cell whose place among the others changed.
    ``old_index`` / ``new_index`` are 0-based (None on the side the cell is not on).
    ``source`` holds ``(tag, line)`` pairs as :func:`~.text_diff.diff_lines` gives them:
    the whole source with ``+`` (added) or ``-`` (removed), a unified diff for a changed
    source, empty when the source is the same. ``details`` are short phrases: outputs
    cleared/added/changed, the cell type, the execution count, metadata keys, attachments."""

    kind: CellKind
    cell_type: str
    cell_id: str | None
    old_index: int | None
    new_index: int | None
    source: tuple[tuple[str, str], ...] = ()
    details: tuple[str, ...] = ()
    moved: bool = False

    @property
    def touched(self) -> bool:
        """Anything to show: not an unchanged cell left in its place."""
        return self.kind != "unchanged" or self.moved

    def heading(self) -> str:
        """``cell 3 (code, id a1b2) changed, moved from 1``, ``old cell 2 (markdown) removed``
        (1-based numbers)."""
        ident = f", id {self.cell_id}" if self.cell_id else ""
        if self.new_index is None:  # removed
            return f"old cell {(self.old_index or 0) + 1} ({self.cell_type}{ident}) removed"
        where = f"cell {self.new_index + 1}"
        words: list[str] = [] if self.kind == "unchanged" else [self.kind]
        if self.moved and self.old_index is not None:  # a moved cell has both indexes
            words.append(f"moved from {self.old_index + 1}")
        return f"{where} ({self.cell_type}{ident}) {', '.join(words)}"


@dataclass(frozen=True)
class NotebookDiff:
    """The cell-by-cell diff of two notebook texts. ``cells`` lists every touched cell
    (:attr:`CellChange.touched`) in the new notebook's order, a removed cell after the
    cell that preceded it in the old notebook; ``unchanged`` counts the others.
    ``metadata`` are phrases about the notebook itself (format version, metadata keys,
    ids ignored). ``new_file``: there was no old text. ``error``: why the texts could not
    be compared cell by cell (then ``cells`` is empty)."""

    path: str
    cells: tuple[CellChange, ...] = ()
    unchanged: int = 0
    metadata: tuple[str, ...] = ()
    new_file: bool = False
    error: str | None = None

    @property
    def changed_cell_ids(self) -> tuple[str, ...]:
        """The ids of the cells added, removed, moved or changed, in :attr:`cells` order
        (a removed cell by its old id; cells without an id are left out)."""
        return tuple(c.cell_id for c in self.cells if c.cell_id)

    def count(self, kind: str) -> int:
        """How many cells are ``added``/``removed``/``changed``/``moved``."""
        if kind == "moved":
            return sum(c.moved for c in self.cells)
        return sum(c.kind == kind for c in self.cells)

    def summary(self) -> str:
        """``2 cells changed, 1 added, 1 moved, 4 unchanged`` (or ``no cell changed``)."""
        if self.new_file:
            return _plural(self.count("added"), "cell")
        parts = [f"{n} {kind}" for kind in ("changed", "added", "removed", "moved") if (n := self.count(kind))]
        if not parts:
            parts = ["no cell changed"]
        else:
            first, _, kind = parts[0].partition(" ")
            parts[0] = f"{first} {'cell' if first == '1' else 'cells'} {kind}"
        if self.unchanged and not self.new_file:
            parts.append(f"{self.unchanged} unchanged")
        return ", ".join(parts)

    def lines(self, *, kernel_notebook: bool = False) -> list[str]:
        """The text render as lines (see :meth:`text`)."""
        head = "new notebook" if self.new_file else "notebook"
        out = [f"{head} {self.path}: {self.summary()}"]
        if kernel_notebook:
            out.append("  (this is the notebook you are in)")
        for cell in self.cells:
            out.append("  " + cell.heading())
            for tag, line in cell.source:
                out.append("    " + (line if tag == "@" else tag + line))
            if cell.kind in ("added", "removed") and not cell.source:
                out.append("    (empty)")
            if cell.details:
                out.append("    " + "; ".join(cell.details))
        for phrase in self.metadata:
            out.append(f"  {phrase}")
        return out

    def text(self, *, kernel_notebook: bool = False) -> str:
        """Deterministic plain text: a head line ``notebook PATH: summary``, then each
        touched cell (its heading, its source diff, its details), then the notebook's own
        changes. ``kernel_notebook``: say this is the notebook the kernel runs."""
        return "\n".join(self.lines(kernel_notebook=kernel_notebook))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _parse(text: str, side: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"the {side} text is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, f"the {side} text is nested too deeply to read"
    if not isinstance(value, dict):
        return None, f"the {side} text is JSON but not a notebook (a {type(value).__name__}, not an object)"
    if not isinstance(value.get("cells"), list):
        return None, f"the {side} text is JSON but not a notebook (no \"cells\" list)"
    return value, None


@lru_cache(maxsize=16)
def notebook_diff(old: str | None, new: str, path: str = "") -> NotebookDiff:
    """The cell-by-cell diff of notebook texts ``old`` (None: a new file) and ``new``;
    ``path`` is only shown. Never raises on bad input: see :attr:`NotebookDiff.error`."""
    new_nb, error = _parse(new, "new")
    old_nb: dict[str, Any] | None = None
    if error is None and old is not None:
        old_nb, error = _parse(old, "old")
    if error is not None:
        return NotebookDiff(path, error=error, new_file=old is None)
    assert new_nb is not None
    new_cells = [c if isinstance(c, dict) else {} for c in new_nb["cells"]]
    if old_nb is None:
        cells = tuple(_whole(c, "added", None, j) for j, c in enumerate(new_cells))
        return NotebookDiff(path, cells=cells, new_file=True)
    old_cells = [c if isinstance(c, dict) else {} for c in old_nb["cells"]]
    pairs, ids_ignored = _match(old_cells, new_cells)
    in_place = _in_place(pairs)
    by_new = {j: i for i, j in pairs.items()}
    entries: dict[int, CellChange] = {}
    unchanged = 0
    for j, cell in enumerate(new_cells):
        i = by_new.get(j)
        if i is None:
            entries[j] = _whole(cell, "added", None, j)
            continue
        change = _compare(old_cells[i], cell, i, j, moved=i not in in_place)
        if change.touched:
            entries[j] = change
        else:
            unchanged += 1
    removed_after: dict[int, list[CellChange]] = {}  # new index of the anchor (-1: the top) -> removed cells
    anchor = -1
    for i, cell in enumerate(old_cells):
        if i in pairs:
            anchor = pairs[i]
        else:
            removed_after.setdefault(anchor, []).append(_whole(cell, "removed", i, None))
    ordered: list[CellChange] = list(removed_after.get(-1, []))
    for j in range(len(new_cells)):
        if j in entries:
            ordered.append(entries[j])
        ordered.extend(removed_after.get(j, []))
    meta = _notebook_changes(old_nb, new_nb)
    if ids_ignored:
        meta.insert(0, "cell ids: none in common (all regenerated?), cells matched by their source")
    return NotebookDiff(path, cells=tuple(ordered), unchanged=unchanged, metadata=tuple(meta))


def _id(cell: dict[str, Any]) -> str | None:
    cid = cell.get("id")
    return cid if isinstance(cid, str) and cid else None


def _type(cell: dict[str, Any]) -> str:
    kind = cell.get("cell_type")
    return kind if isinstance(kind, str) else "cell"


def _match(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[dict[int, int], bool]:
    """Old index -> new index of the cells that are the same cell; and whether ids were
    ignored (both sides have ids, none in common)."""
    pairs: dict[int, int] = {}
    old_by_id: dict[str, int] = {}
    for i, cell in enumerate(old):
        cid = _id(cell)
        if cid is not None:
            old_by_id.setdefault(cid, i)
    matched_new: set[int] = set()
    for j, cell in enumerate(new):
        cid = _id(cell)
        paired = old_by_id.get(cid) if cid is not None else None
        if paired is not None and paired not in pairs:
            pairs[paired] = j
            matched_new.add(j)
    ids_ignored = not pairs and bool(old_by_id) and any(_id(c) for c in new)

    def may_pair(i: int, j: int) -> bool:  # two cells that both have ids are told apart by them
        return ids_ignored or _id(old[i]) is None or _id(new[j]) is None

    free_old = [i for i in range(len(old)) if i not in pairs]
    free_new = [j for j in range(len(new)) if j not in matched_new]
    sources_old = {i: cell_source(old[i]) for i in free_old}
    sources_new = {j: cell_source(new[j]) for j in free_new}
    # identical source (and type), in order
    waiting: dict[tuple[str, str], list[int]] = {}
    for i in free_old:
        waiting.setdefault((_type(old[i]), sources_old[i]), []).append(i)
    for j in free_new:
        queue = waiting.get((_type(new[j]), sources_new[j]), [])
        same = next((i for i in queue if may_pair(i, j)), None)
        if same is not None:
            queue.remove(same)
            pairs[same] = j
            matched_new.add(j)
    free_old = [i for i in free_old if i not in pairs]
    free_new = [j for j in free_new if j not in matched_new]
    if not free_old or not free_new or len(free_old) * len(free_new) > MAX_FUZZY_PAIRS:
        return pairs, ids_ignored
    scored: list[tuple[float, int, int, int]] = []
    for i in free_old:
        a = sources_old[i][:_COMPARED_CHARS]
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(a)  # seq2 is the one SequenceMatcher indexes: index the old source once
        for j in free_new:
            if not may_pair(i, j):
                continue
            matcher.set_seq1(sources_new[j][:_COMPARED_CHARS])
            if matcher.real_quick_ratio() < SIMILAR or matcher.quick_ratio() < SIMILAR:
                continue
            score = matcher.ratio() - (0.1 if _type(old[i]) != _type(new[j]) else 0.0)
            if score >= SIMILAR:
                scored.append((-score, abs(i - j), i, j))
    for _neg, _dist, i, j in sorted(scored):
        if i not in pairs and j not in matched_new:
            pairs[i] = j
            matched_new.add(j)
    return pairs, ids_ignored


def _in_place(pairs: dict[int, int]) -> set[int]:
    """The old indices of matched cells that kept their relative order."""
    old_order = sorted(pairs)
    new_order = sorted(pairs, key=pairs.__getitem__)
    matcher = difflib.SequenceMatcher(None, old_order, new_order, autojunk=False)
    kept: set[int] = set()
    for block in matcher.get_matching_blocks():
        kept.update(old_order[block.a:block.a + block.size])
    return kept


def _whole(cell: dict[str, Any], kind: CellKind, old_index: int | None, new_index: int | None) -> CellChange:
    tag = "+" if kind == "added" else "-"
    source = tuple((tag, line) for _t, line in diff_lines(None, cell_source(cell)))
    details: list[str] = []
    outputs = cell.get("outputs")
    if isinstance(outputs, list) and outputs:
        details.append(f"with {_plural(len(outputs), 'output')}")
    return CellChange(kind, _type(cell), _id(cell), old_index, new_index, source, tuple(details))


def _compare(old: dict[str, Any], new: dict[str, Any], i: int, j: int, *, moved: bool) -> CellChange:
    details: list[str] = []
    if _type(old) != _type(new):
        details.append(f"type {_type(old)} → {_type(new)}")
    old_src, new_src = cell_source(old), cell_source(new)
    source = tuple(diff_lines(old_src, new_src)) if old_src != new_src else ()
    old_out: list[Any] = old["outputs"] if isinstance(old.get("outputs"), list) else []
    new_out: list[Any] = new["outputs"] if isinstance(new.get("outputs"), list) else []
    if old_out != new_out:
        if not new_out:
            details.append(f"outputs cleared ({_plural(len(old_out), 'output')} before)")
        elif not old_out:
            details.append(f"{_plural(len(new_out), 'output')} added")
        else:
            details.append(f"outputs changed ({len(old_out)} → {len(new_out)})")
    if old.get("execution_count") != new.get("execution_count"):
        details.append(f"execution count {_count(old.get('execution_count'))} → "
                       f"{_count(new.get('execution_count'))}")
    meta = _keys_changed(old.get("metadata"), new.get("metadata"))
    if meta:
        details.append("metadata: " + meta)
    if old.get("attachments") != new.get("attachments"):
        details.append("attachments changed")
    kind: CellKind = "changed" if source or details else "unchanged"
    return CellChange(kind, _type(new), _id(new) or _id(old), i, j, source, tuple(details), moved)


def _count(value: Any) -> str:
    return "none" if value is None else str(value)


def _keys_changed(old: Any, new: Any) -> str:
    """``tags added, collapsed removed, scrolled changed`` for two metadata dicts."""
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    words = []
    for key in sorted(set(old) | set(new), key=str):
        if key not in old:
            words.append(f"{key} added")
        elif key not in new:
            words.append(f"{key} removed")
        elif old[key] != new[key]:
            words.append(f"{key} changed")
    return ", ".join(words)


def _notebook_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    before = f"{old.get('nbformat')}.{old.get('nbformat_minor')}"
    after = f"{new.get('nbformat')}.{new.get('nbformat_minor')}"
    if before != after:
        out.append(f"nbformat {before} → {after}")
    meta = _keys_changed(old.get("metadata"), new.get("metadata"))
    if meta:
        out.append("notebook metadata: " + meta)
    return out
