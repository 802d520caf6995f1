"""What each agent wrote, from a saved notebook's cells (core/written.py, pure): the kept
cells with their provenance, grouped by agent; a cell pending review, one with no
provenance or a forged one is not listed; the text table names each agent and cell."""

from __future__ import annotations

import nbformat
from written_notebooks import saved_notebook

from escouade_nb.core.written import UNTRUSTED, Written, provenance_of, written_rows


def test_rows_of_a_saved_notebook_group_the_kept_cells_by_agent(tmp_path):
    nb = nbformat.read(str(saved_notebook(tmp_path / "saved.ipynb")), as_version=4)
    rows = written_rows(nb.cells)
    assert [(r["agent"], r["index"], r["cell"]) for r in rows] == [
        ("scribe", 2, "cell-1"), ("scribe", 4, "cell-3"), ("critic", 3, "cell-2")]
    first = rows[0]
    assert first == {"agent": "scribe", "harness": "fake", "session": "sess-scribe", "turn": 1,
                     "at": "2026-12-04T10:01:00Z", "cell": "cell-1", "index": 2,
                     "first line": "# plot revenue per region", "ran": None, "changed_by_user": False}
    assert rows[1]["ran"] == "df.describe()"
    assert rows[2]["first line"] == "## Findings"


def test_untrusted_provenance_is_kept_to_known_fields_of_known_types():
    assert provenance_of({"metadata": {"escouade": {"agent": "a", "turn": True, "session": 3, "extra": "x"}}}) == {
        "agent": "a", "harness": None, "session": None, "turn": None, "at": None, "ran": None,
        "changed_by_user": False}
    # only a real true says the user changed the cell after the agent
    assert provenance_of({"escouade": {"agent": "a", "changed_by_user": "yes"}})["changed_by_user"] is False
    assert provenance_of({"escouade": {"agent": "a", "changed_by_user": True}})["changed_by_user"] is True
    assert provenance_of({"metadata": {"escouade": {"agent": ""}}}) is None
    assert provenance_of({"escouade": {"agent": "from the page", "turn": 2}})["agent"] == "from the page"
    assert written_rows(["not a cell", None, {"source": "x"}]) == []


def test_the_text_table_names_each_agent_and_says_when_nothing_or_an_error(tmp_path):
    nb = nbformat.read(str(saved_notebook(tmp_path / "saved.ipynb")), as_version=4)
    text = repr(Written("saved.ipynb", written_rows(nb.cells)))
    assert text.splitlines()[0] == "saved.ipynb: 3 cell(s) kept from 2 agent(s)"
    assert "scribe:\n  cell 2 (cell-1) · fake · session sess-scribe · turn 1 · 2026-12-04T10:01:00Z: " \
           "# plot revenue per region" in text
    assert "df.describe() · ran code" in text
    assert "no cell kept from an agent" in repr(Written("empty.ipynb"))
    assert repr(Written("", error="x.ipynb: no such file")) == "escouade written: x.ipynb: no such file"


def test_a_cell_the_user_changed_after_the_agent_and_a_file_not_trusted_here_are_said():
    cells = [{"id": "k", "source": "x = 1  # mine", "metadata": {"escouade": {"agent": "scribe", "changed_by_user": True}}}]
    text = repr(Written("theirs.ipynb", written_rows(cells), trusted=False))
    first, rest = text.split("\n", 1)
    assert first == UNTRUSTED.format(where="theirs.ipynb") and "not trusted here" in first
    assert "x = 1  # mine · then changed by the user" in rest
    assert "not trusted" not in repr(Written("mine.ipynb", written_rows(cells), trusted=True))
