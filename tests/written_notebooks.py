"""Saved notebooks with escouade provenance, for the tests of ``%escouade written``
(a shared helper of the suite: imported by name, see CONTRIBUTING)."""

from __future__ import annotations

from pathlib import Path

import nbformat


def by(agent: str, turn: int, **more: object) -> dict:
    return {"agent": agent, "harness": "fake", "session": f"sess-{agent}", "turn": turn,
            "at": f"2026-12-04T10:0{turn}:00Z", **more}


def saved_notebook(path: Path) -> Path:
    """A v4.5 notebook at ``path``: a cell of the user's, two kept cells of ``scribe`` (one
    it ran), one of ``critic``, one of ``critic``'s still pending review, a markdown cell."""
    nb = nbformat.v4.new_notebook()
    mine = nbformat.v4.new_code_cell("df = load()")
    one = nbformat.v4.new_code_cell("# plot revenue per region\ndf.plot()", metadata={"escouade": by("scribe", 1)})
    two = nbformat.v4.new_markdown_cell("## Findings\nRevenue grows.", metadata={"escouade": by("critic", 2)})
    three = nbformat.v4.new_code_cell("df.describe()", metadata={"escouade": by("scribe", 3, ran={"code": "df.describe()"})})
    pending = nbformat.v4.new_code_cell("x = 1", metadata={"escouade": by("critic", 3),
                                                            "escouade_pending": {"change": "edit", "original": "x = 0"}})
    forged = nbformat.v4.new_code_cell("y = 2", metadata={"escouade": {"agent": ["<b>not text</b>"]}})
    nb.cells = [mine, one, two, three, pending, forged]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    nbformat.write(nb, str(path))
    return path
