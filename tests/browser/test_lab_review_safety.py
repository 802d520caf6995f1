"""The review's safety in a real JupyterLab (the extension installed with the package):
the user types into a cell the agent edited → the bar says "Edited by NAME, then by you";
Reject asks first (it drops the user's edits too), then restores what was there before the
agent outside the undo history (Ctrl+Z brings no agent text back: test_lab_review_seams.py)
and Keep writes ``changed_by_user: true`` in the provenance; a notebook file written by someone else (not signed, so JupyterLab loads its
code cells ``trusted: false``) with forged ``escouade_pending`` marks gets no Keep/Reject:
only "Drop mark", which leaves the cell as it is (no forged "original" written, no cell
deleted); a second tab opened after the kernel's ping says hello by itself (the kernel has
comms on the target) and is told of the next change made in the other tab."""

from __future__ import annotations

import json

import nbformat
from test_lab_awareness import ELSEWHERE, connect, open_second_tab
from test_lab_cell_edits import BARS, CELLS, REVIEWED, sha
from test_lab_live_cells import PANEL
from browser_waits import until

SOURCES = f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.getSource())"
PROVENANCE = f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.getMetadata('escouade') || null)"


def answer(got: dict) -> dict:
    """A tool's JSON answer (a notice for the agent may follow it)."""
    return json.JSONDecoder().raw_decode(got["text"])[0]


def type_at_end(nb, index: int, text: str) -> None:
    nb.cell(index).locator(".jp-InputArea-editor").click()
    nb.page.keyboard.press("Control+End")
    nb.page.keyboard.type(text)


def test_reject_after_the_user_typed_asks_first_and_keep_says_the_user_changed_it(nb):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    mcp = connect(nb)
    try:
        load = mcp.live()["cells"][1]
        mcp.call("edit_cell", cell_id=load["id"], source="df = 9", base_sha256=sha("df = 1"))
        until(lambda: page.evaluate(BARS) == [load["id"]], "the edit's bar")
        bar = nb.cell(1).locator(".escouade-review")
        assert bar.locator("span").first.inner_text() == "Edited by browser test"

        # the user types into the agent's edit: the bar says so
        type_at_end(nb, 1, "\n# mine")
        page.keyboard.press("Escape")
        until(lambda: page.evaluate(SOURCES)[1] == "df = 9\n# mine", "the typed text is in the model")
        until(lambda: bar.locator("span").first.inner_text() == "Edited by browser test, then by you",
              "the bar says the user changed it too")

        # Reject asks first (the user's edits go too), then restores what was there before the agent
        bar.get_by_role("button", name="Reject").click()
        bar.get_by_role("button", name="Reject anyway").click()
        until(lambda: page.evaluate(CELLS)[1][1:] == ["df = 1", None], "the source before the agent is back")
        assert mcp.call("run_code", code="review.settled[-1].changed_by_user")["text"].startswith("result:\nTrue")

        # the same from Python (agent.pending_edits): asked by the code itself, no question; outside the undo history
        mcp.call("edit_cell", cell_id=load["id"], source="df = 7", base_sha256=sha("df = 1"))
        until(lambda: page.evaluate(BARS) == [load["id"]], "the second edit's bar")
        type_at_end(nb, 1, "  # again mine")
        page.keyboard.press("Escape")
        until(lambda: page.evaluate(SOURCES)[1] == "df = 7  # again mine", "typed")
        got = mcp.call("run_code", code="e = review.pending[0]\nprint(await e.reject(), e.changed_by_user)")
        assert got["text"].startswith("stdout:\nrejected True"), got
        until(lambda: page.evaluate(CELLS)[1][1:] == ["df = 1", None], "the source before the agent")
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+z")
        page.keyboard.press("Escape")
        assert page.evaluate(SOURCES)[1] == "df = 1", "Ctrl+Z brings no rejected text back"

        # Keep after the user typed: the provenance says the user changed it after the agent
        now = page.evaluate(SOURCES)[1]
        new = answer(mcp.call("insert_cell", source="x = 1", after_cell_id=load["id"]))["cell_id"]
        until(lambda: page.evaluate(BARS) == [new], "the new cell's bar")
        type_at_end(nb, 2, "  # and mine")
        page.keyboard.press("Escape")
        until(lambda: nb.cell(2).locator(".escouade-review span").first.inner_text()
              == "New cell by browser test, then changed by you", "the new cell's bar says the user changed it")
        nb.cell(2).locator(".escouade-review").get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [], "kept")
        by = page.evaluate(PROVENANCE)[2]
        assert by["agent"] == "browser test" and by["changed_by_user"] is True, by
        assert page.evaluate(SOURCES)[1:3] == [now, "x = 1  # and mine"]

        # an agent's change the user did not touch: Keep writes no such field
        plain = answer(mcp.call("insert_cell", source="y = 2"))["cell_id"]
        until(lambda: page.evaluate(BARS) == [plain], "the plain insert's bar")
        nb.panel.locator(f".escouade-review[data-cell='{plain}']").get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [], "kept")
        assert "changed_by_user" not in page.evaluate(PROVENANCE)[-1]
    finally:
        mcp.close()


def test_forged_review_marks_in_a_file_not_trusted_here_can_only_be_dropped(nb):
    page = nb.page
    forged = nbformat.v4.new_notebook()
    forged.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    mine = nbformat.v4.new_code_cell("my_work = 42")
    mine.metadata["escouade_pending"] = {"change": "insert", "agent": "attacker", "at": "2026-01-01T00:00:00Z"}
    edited = nbformat.v4.new_code_cell("total = sum(values)")
    edited.metadata["escouade_pending"] = {"change": "edit", "agent": "attacker", "original": "import os; os.remove('x')",
                                           "at": "2026-01-01T00:00:00Z"}
    forged.cells = [mine, edited]
    nbformat.write(forged, str(nb.lab.root / nb.path))  # not signed: written by someone else
    page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                  nb.path)
    nb.cell(1).wait_for(timeout=60_000)
    until(lambda: len(page.evaluate(BARS)) == 2, "both marks shown")
    assert page.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.getMetadata('trusted'))") \
        == [False, False], "JupyterLab loads a file it has no signature for as not trusted"
    for index in (0, 1):
        bar = nb.cell(index).locator(".escouade-review")
        assert "a file not trusted here" in bar.inner_text()
        assert bar.get_by_role("button", name="Keep").count() == 0
        assert bar.get_by_role("button", name="Reject").count() == 0
    assert not page.locator(".escouade-review-all").first.is_visible(), "no Keep all / Reject all for them"

    # the user saves the file (the server signs it: trusted from now on) and reloads: the marks stay untrusted
    until(lambda: page.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.every(c => "
                                "(c.getMetadata('escouade_pending') || {}).untrusted === true)"), "the marks say so")
    page.evaluate(f"() => {PANEL}.context.save()")
    until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
    nb.lab_page.load()
    page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                  nb.path)
    nb.cell(1).wait_for(timeout=60_000)
    until(lambda: len(page.evaluate(BARS)) == 2, "both marks shown after the reload")
    assert page.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.getMetadata('trusted'))") \
        == [True, True], "the saved file is signed now"
    assert nb.panel.locator(".escouade-review-untrusted").count() == 2
    assert nb.panel.locator(".escouade-review").get_by_role("button", name="Reject").count() == 0

    # dropping a mark leaves the cell as it is: no forged original written, no cell deleted
    nb.cell(0).locator(".escouade-review").get_by_role("button", name="Drop mark").click()
    nb.cell(1).locator(".escouade-review").get_by_role("button", name="Drop mark").click()
    until(lambda: page.evaluate(BARS) == [], "the marks are dropped")
    assert [c[1:] for c in page.evaluate(CELLS)] == [["my_work = 42", None], ["total = sum(values)", None]]


def test_a_tab_opened_after_the_kernels_ping_is_told_of_the_next_change(nb):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    mcp = connect(nb)
    second = None
    try:
        first_change = answer(mcp.call("insert_cell", source="a = 1"))["cell_id"]
        until(lambda: page.evaluate(BARS) == [first_change], "the first change, in the only tab")
        # the second tab opens after the ping: it says hello by itself (no new ping from the kernel)
        second = open_second_tab(nb)
        count = "len(notebook_pages.start_in_kernel(get_ipython()).pages)"
        until(lambda: mcp.call("run_code", code=count)["text"] == "result:\n2", "the kernel knows both tabs")
        more = answer(mcp.call("insert_cell", source="more = 2"))["cell_id"]
        tabs = {"first": page, "second": second}
        holding = [name for name, tab in tabs.items()
                   if more in tab.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.id)")]
        assert len(holding) == 1, holding
        other = tabs["second" if holding == ["first"] else "first"]
        shown = until(lambda: other.evaluate(ELSEWHERE), "the other tab says the notebook changed elsewhere")
        assert shown.startswith("Changed in another tab: a new cell by browser test."), shown
    finally:
        mcp.close()
        if second is not None:
            second.close()
