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
    it ran), one of ``critic``, one of ``critic``'s still pending review, one with a forged provenance, one an agent only
    ran (``escouade.ran`` alone: not written by it)."""
    nb = nbformat.v4.new_notebook()
    mine = nbformat.v4.new_code_cell("df = load()")
    one = nbformat.v4.new_code_cell("# plot revenue per region\ndf.plot()", metadata={"escouade": by("scribe", 1)})
    two = nbformat.v4.new_markdown_cell("## Findings\nRevenue grows.", metadata={"escouade": by("critic", 2)})
    ran = {**by("scribe", 3), "code": "df.describe()", "execution_count": 4}  # escouade.ran, as execute_cell writes it
    three = nbformat.v4.new_code_cell("df.describe()", metadata={"escouade": by("scribe", 3, ran=ran)})
    only_run = nbformat.v4.new_code_cell("df.head()", metadata={"escouade": {"ran": {**ran, "code": "df.head()"}}})
    pending = nbformat.v4.new_code_cell("x = 1", metadata={"escouade": by("critic", 3),
                                                            "escouade_pending": {"change": "edit", "original": "x = 0"}})
    forged = nbformat.v4.new_code_cell("y = 2", metadata={"escouade": {"agent": ["<b>not text</b>"]}})
    nb.cells = [mine, one, two, three, pending, forged, only_run]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    nbformat.write(nb, str(path))
    return path
