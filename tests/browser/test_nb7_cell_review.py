"""The agent's changes to the open notebook in Notebook 7 (``/notebooks/PATH``, the
``notebook`` package; the same extension, installed with escouade_nb): insert → Keep by
click → saved with its provenance; insert → Reject by click → gone, and the agent told; an
edit naming the hash the agent read is refused as stale after the user typed into the cell;
a second Notebook 7 tab of the notebook is told of the change the other applied; execute_cell
behind one card, its output in the cell. The same flows in JupyterLab 4: test_lab_cell_edits.py,
test_lab_awareness.py, test_lab_execute_cell.py."""

from __future__ import annotations

import json

from test_lab_awareness import ELSEWHERE, RELAY
from test_lab_cell_edits import BARS, CELLS, REVIEWED, sha
from test_lab_execute_cell import run_behind_one_card, run_cells, write_with_ids
from test_lab_live_cells import PANEL, Mcp
from browser_waits import until


def connect(seven) -> Mcp:
    seven.run_cell(0)
    lines = dict(line.split(" ", 1) for line in seven.output(0).inner_text().splitlines()
                 if line[:4] in ("URL ", "TOKE"))
    return Mcp(lines["URL"], lines["TOKEN"])


def test_in_notebook_7_insert_keep_is_saved_with_provenance_and_insert_reject_is_gone(nb):
    nb.write([REVIEWED, "df = 1"])
    seven = nb.in_notebook_7()
    page = seven.page
    mcp = None
    try:
        assert "/notebooks/" in page.url
        mcp = connect(seven)
        load = mcp.live()["cells"][1]

        # insert → Keep by click: the bar goes, the cell says who wrote it, and a save keeps that
        new = json.loads(mcp.call("insert_cell", source="by = 'the agent'", after_cell_id=load["id"])["text"])
        assert new["status"] == "pending review"
        until(lambda: page.evaluate(BARS) == [new["cell_id"]], "the review bar is inside the new cell")
        bar = seven.cell(2).locator(".escouade-review")
        assert "New cell by browser test" in bar.inner_text()
        bar.get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [], "the bar is gone after the Keep")
        until(lambda: mcp.call("run_code", code="review.pending")["text"] == "result:\n[]",
              "the kernel has the Keep (agent.pending_edits)")
        page.evaluate(f"() => {PANEL}.context.save()")
        until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
        saved = json.loads((nb.lab.root / nb.path).read_text())
        assert "".join(saved["cells"][2]["source"]) == "by = 'the agent'"
        by = saved["cells"][2]["metadata"]["escouade"]
        assert {k: by[k] for k in ("agent", "harness", "session", "turn")} == {
            "agent": "browser test", "harness": "fake-agent", "session": "s-1", "turn": 2}
        assert by["at"].endswith("Z") and "escouade_pending" not in saved["cells"][2]["metadata"]

        # insert → Reject by click: gone, and the agent learns it in its next tool result
        gone = json.loads(mcp.call("insert_cell", source="gone = True")["text"])["cell_id"]
        until(lambda: page.evaluate(BARS) == [gone], "the second insert's bar")
        seven.panel.locator(f".escouade-review[data-cell='{gone}']").get_by_role("button", name="Reject").click()
        until(lambda: gone not in [c[0] for c in page.evaluate(CELLS)], "the rejected cell is gone")
        told = mcp.call("notebook_cells", source="live")["text"]
        assert f"insert of cell {gone}" in told and "rejected" in told, told
    finally:
        if mcp is not None:
            mcp.close()
        page.close()


def test_in_notebook_7_a_stale_edit_is_refused_after_the_user_typed(nb):
    nb.write([REVIEWED, "df = 1"])
    seven = nb.in_notebook_7()
    page = seven.page
    mcp = None
    try:
        mcp = connect(seven)
        load = mcp.live()["cells"][1]
        assert load["sha256"] == sha("df = 1")
        seven.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type("df = 2")
        page.keyboard.press("Escape")
        until(lambda: page.evaluate(CELLS)[1][1] == "df = 2", "the typed text is in the model")
        stale = mcp.call("edit_cell", cell_id=load["id"], source="df = 3", base_sha256=load["sha256"])
        assert stale["is_error"] and "changed since" in stale["text"], stale
        assert page.evaluate(CELLS)[1][1:] == ["df = 2", None], "the user's text stays, nothing pending"
        fresh = mcp.call("edit_cell", cell_id=load["id"], source="df = 3", base_sha256=sha("df = 2"))
        assert json.loads(fresh["text"])["status"] == "pending review"
        until(lambda: page.evaluate(BARS) == [load["id"]], "the edit pending review in its cell")
    finally:
        if mcp is not None:
            mcp.close()
        page.close()


def test_in_notebook_7_a_second_tab_is_told_of_the_change(nb):
    nb.write([REVIEWED, "df = 1"])
    first = nb.in_notebook_7()
    second = None
    mcp = None
    try:
        mcp = connect(first)
        second = nb.in_notebook_7()
        relayed = mcp.call("run_code", code=RELAY)["text"]
        assert "result:\n2" in relayed, relayed
        new = json.loads(mcp.call("insert_cell", source="more = 2")["text"])["cell_id"]
        tabs = {"first": first.page, "second": second.page}
        holding = [name for name, tab in tabs.items()
                   if new in tab.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.id)")]
        assert len(holding) == 1, f"one tab applied the change: {holding}"
        other = tabs["second" if holding == ["first"] else "first"]
        shown = until(lambda: other.evaluate(ELSEWHERE), "the other tab says the notebook changed elsewhere")
        assert shown.startswith("Changed in another tab: a new cell by browser test."), shown
        assert tabs[holding[0]].evaluate(ELSEWHERE) is None
        assert other.locator(".escouade-elsewhere").is_visible()
    finally:
        if mcp is not None:
            mcp.close()
        first.page.close()
        if second is not None:
            second.page.close()


def test_in_notebook_7_execute_cell_runs_behind_one_card(nb):
    """As in JupyterLab (test_lab_execute_cell.py, the same cells and checks): the agent inserts
    a cell and asks to run it; exactly one card shows the cell's source, *Run* runs it in the
    notebook (the output and execution count in that cell), the tool result has the output."""
    write_with_ids(nb, run_cells(nb))
    seven = nb.in_notebook_7()
    try:
        assert "/notebooks/" in seven.page.url
        run_behind_one_card(seven)
    finally:
        seven.page.close()
