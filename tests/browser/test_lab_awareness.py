"""Awareness, other tabs and a reload mid-review, in a real JupyterLab (the extension
installed with the package): the user types into a cell the agent inserted in this turn and
the agent's next tool result says so, once; with the notebook open in a second browser tab
(no real-time collaboration: each tab its own copy), the tab that did not apply the agent's
change shows "Changed in another tab"; a reload keeps the pending changes that were saved
(their Keep / Reject bars back, ``pending_edits`` still holding them, Keep by click and
Reject from Python work) and drops the one that was not (out of ``pending_edits``, the
agent told once)."""

from __future__ import annotations

import json

from test_lab_cell_edits import BARS, CELLS, REVIEWED
from test_lab_live_cells import PANEL, Mcp
from browser_waits import until

# the kernel pings its pages until both tabs said hello (a tab whose kernel connection was not up yet
# missed the first ping)
RELAY = """import time as _time
pages = notebook_pages.start_in_kernel(get_ipython())
_pinged = None
async with asyncio.timeout(45):
    while len(pages.pages) < 2:
        if _pinged is None or _time.monotonic() - _pinged > 1:
            pages.ping()
            _pinged = _time.monotonic()
        await asyncio.sleep(0.05)
len(pages.pages)"""

# the notice as shown in the panel's toolbar (not in its "…" menu): its whole sentence, the tooltip
ELSEWHERE = f"() => {{ const n = {PANEL}.node.querySelector('.escouade-elsewhere'); " \
            "return n && n.style.display !== 'none' ? n.title : null; }"


def connect(nb) -> Mcp:
    nb.run_cell(0)
    lines = dict(line.split(" ", 1) for line in nb.output(0).inner_text().splitlines()
                 if line[:4] in ("URL ", "TOKE"))
    return Mcp(lines["URL"], lines["TOKEN"])


def open_second_tab(nb):
    """The same notebook in a second browser tab (a page of its own, its own kernel connection)."""
    second = nb.lab_page.second_tab(nb.path, "escouade-aware-tab")
    until(lambda: second.evaluate(f"() => !!({PANEL} && {PANEL}.node.dataset.escouadeClient)"),
          "the second tab's panel has its client id", 180)  # a second JupyterLab page: slow on a loaded machine
    return second


def test_the_agent_learns_the_user_edited_its_cell_and_the_other_tab_is_told(nb):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    mcp = connect(nb)
    second = None
    try:
        load = mcp.live()["cells"][1]
        new = json.loads(mcp.call("insert_cell", source="by = 'the agent'", after_cell_id=load["id"])["text"])
        until(lambda: page.evaluate(BARS) == [new["cell_id"]], "the new cell pending review")

        # the user types into the agent's new cell: its next tool result says so, once
        nb.cell(2).locator(".jp-InputArea-editor").click()
        page.keyboard.press("End")
        page.keyboard.type("  # mine")
        page.keyboard.press("Escape")
        until(lambda: page.evaluate(CELLS)[2][1] == "by = 'the agent'  # mine", "the typed text is in the model")
        expected = f"cell {new['cell_id']} edited by the user"
        told = until(lambda: (t := mcp.call("run_code", code="1")["text"]) and expected in t and t,
                     "the agent's next tool result says the user edited its cell", 15)
        assert "[escouade_nb notice]" in told and "rejected" not in told, told
        assert expected not in mcp.call("notebook_cells", source="live")["text"], "told once"
        # a cell the agent did not touch: the user's edit of it is not news to the agent
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("End")
        page.keyboard.type("  # also mine")
        page.keyboard.press("Escape")
        assert "[escouade_nb notice]" not in mcp.call("notebook_cells", source="live")["text"]

        # a second tab of the notebook, known to the kernel: the tab that does not apply a change says so
        second = open_second_tab(nb)
        assert "result:\n2" in mcp.call("run_code", code=RELAY)["text"]
        assert page.evaluate(ELSEWHERE) is None and second.evaluate(ELSEWHERE) is None
        more = json.loads(mcp.call("insert_cell", source="more = 2")["text"])["cell_id"]
        tabs = {"first": page, "second": second}
        holding = [name for name, tab in tabs.items()
                   if more in tab.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.id)")]
        assert len(holding) == 1, f"one tab applied the change: {holding}"
        other = tabs["second" if holding == ["first"] else "first"]
        shown = until(lambda: other.evaluate(ELSEWHERE), "the other tab says the notebook changed elsewhere")
        assert shown.startswith("Changed in another tab: a new cell by browser test."), shown
        # short in the toolbar (the whole sentence is its tooltip): it stays beside the review's item
        assert other.evaluate(f"() => {PANEL}.node.querySelector('.escouade-elsewhere span').textContent") \
            == "Changed in another tab"
        assert tabs[holding[0]].evaluate(ELSEWHERE) is None, "not in the tab that shows the change"
        assert not other.evaluate(f"() => {PANEL}.context.model.collaborative"), "no real-time collaboration here"
    finally:
        mcp.close()
        if second is not None:
            second.close()


def test_a_reload_mid_review_keeps_the_saved_pending_changes_and_drops_the_unsaved_one(nb):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    mcp = connect(nb)
    try:
        saved = [json.loads(mcp.call("insert_cell", source=f"saved_{i} = {i}")["text"])["cell_id"] for i in (1, 2)]
        page.evaluate(f"() => {PANEL}.context.save()")
        until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
        lost = json.loads(mcp.call("insert_cell", source="lost = 3")["text"])["cell_id"]
        until(lambda: page.evaluate(BARS) == [*saved, lost], "three changes pending review")

        # the page reloads without saving the third change
        page.evaluate(f"() => {{ {PANEL}.context.model.dirty = false; }}")
        nb.lab_page.load()
        page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                      nb.path)
        nb.cell(3).wait_for(timeout=60_000)

        # the saved ones: their bars back, still in the agent's pending_edits; the unsaved one dropped
        until(lambda: page.evaluate(BARS) == saved, "the saved changes' bars are back")
        pending = f"result:\n{sorted(saved)!r}"
        answers: list[str] = []  # each tool result until the kernel has it right (the notice rides on one)

        def relinked() -> bool:
            answers.append(mcp.call("run_code", code="sorted(e.cell_id for e in review.pending)")["text"])
            return answers[-1].startswith(pending)

        until(relinked, "the kernel re-linked the saved changes and dropped the lost one", 20)
        answers.append(mcp.call("notebook_cells", source="live")["text"])
        told = [a for a in answers if "dropped" in a]
        assert len(told) == 1, answers
        assert f"insert of cell {lost} (the notebook's page was reloaded without saving it" in told[0], told
        assert "dropped" not in mcp.call("notebook_cells", source="live")["text"], "told once"

        # Keep by click in the reloaded page, Reject from Python: both through the agent's review
        nb.panel.locator(f".escouade-review[data-cell='{saved[0]}']").get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [saved[1]], "the kept cell's bar is gone")
        assert "rejected" in mcp.call("run_code", code="await review.pending[0].reject()")["text"]
        until(lambda: saved[1] not in [c[0] for c in page.evaluate(CELLS)], "the rejected new cell is gone")
        cells = page.evaluate(CELLS)
        assert [c[:2] for c in cells[2:]] == [[saved[0], "saved_1 = 1"]] and cells[2][2] is None
        assert mcp.call("run_code", code="review.pending")["text"] == "result:\n[]"
    finally:
        mcp.close()
