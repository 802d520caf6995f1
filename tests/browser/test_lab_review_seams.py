"""Keep and Reject always act or say why, and no keystroke brings back an agent's rejected text
without its mark (issue 34, findings 2 and 3), in a real JupyterLab and in Notebook 7:

- the agent's review closed (what ``await agent.close()`` does to it): a click of Keep or Reject
  in the cell, or Keep all in the toolbar, still settles the change through it;
- Reject (and Reject all) of a cell the user also typed into asks first ("Reject anyway" / "Cancel"); a Reject is
  outside the undo history and cuts the cell's, so Ctrl+Z after it brings no agent text back;
- the kernel restarted, escouade_nb not loaded yet: the click says at once, in the cell, what to
  run; after ``%load_ext escouade_nb`` the same click settles the mark (the page made it, the
  saved notebook is trusted here)."""

from __future__ import annotations

from test_lab_cell_edits import BARS, CELLS, REVIEWED, sha
from test_lab_live_cells import PANEL, Mcp
from test_lab_review_safety import SOURCES, answer, type_at_end
from browser_waits import until

NOT_LOADED = "escouade_nb is not loaded in this kernel: run %load_ext escouade_nb, then click again, to settle this change"


def connect(view) -> Mcp:
    view.run_cell(0)
    lines = dict(line.split(" ", 1) for line in view.output(0).inner_text().splitlines()
                 if line[:4] in ("URL ", "TOKE"))
    return Mcp(lines["URL"], lines["TOKEN"])


def settled(mcp: Mcp) -> str:
    return mcp.call("run_code", code="[(e.cell_id, e.state) for e in review.settled]")["text"]


def bar_of(view, cell_id: str):
    return view.panel.locator(f".escouade-review[data-cell='{cell_id}']")


def walk(view, mcp: Mcp) -> None:
    """The steps, the same in JupyterLab and Notebook 7 (``view``: the fixture's notebook page);
    ``mcp`` is closed on the way (the kernel restarts)."""
    page = view.page
    load = mcp.live()["cells"][1]
    new = answer(mcp.call("insert_cell", source="x = 1", after_cell_id=load["id"]))["cell_id"]
    mcp.call("edit_cell", cell_id=load["id"], source="df = 9", base_sha256=sha("df = 1"))
    until(lambda: sorted(page.evaluate(BARS)) == sorted([load["id"], new]), "both bars")

    # the agent's review closed (await agent.close() closes it): Keep in the cell still settles the change
    mcp.call("run_code", code="review.close()")
    bar_of(view, new).get_by_role("button", name="Keep").click()
    until(lambda: page.evaluate(BARS) == [load["id"]], "the Keep settled after the review closed", timeout=60)
    until(lambda: f"('{new}', 'kept')" in settled(mcp), "the closed review has the Keep")

    # the user types into the agent's edit: Reject all (and Reject) asks first, Cancel leaves everything as it is
    type_at_end(view, 1, "\n# mine")
    page.keyboard.press("Escape")
    until(lambda: page.evaluate(SOURCES)[1] == "df = 9\n# mine", "the typed text is in the model")
    bar = bar_of(view, load["id"])
    until(lambda: "then by you" in bar.locator("span").first.inner_text(), "the bar says the user changed it")
    view.panel.locator(".escouade-review-all").get_by_role("button", name="Reject all").click()
    until(lambda: bar.locator(".escouade-review-confirm").count() == 1, "Reject all asks first, in the bar")
    assert "You edited this cell too: Reject drops your edits as well." in bar.inner_text()
    bar.get_by_role("button", name="Cancel").click()
    until(lambda: bar.locator(".escouade-review-confirm").count() == 0, "Cancel closes the question")
    assert page.evaluate(CELLS)[1][1] == "df = 9\n# mine" and page.evaluate(CELLS)[1][2] is not None
    # Reject anyway: the source before the agent, settled by the closed review; Ctrl+Z brings nothing back
    bar.get_by_role("button", name="Reject").click()
    bar.get_by_role("button", name="Reject anyway").click()
    until(lambda: page.evaluate(CELLS)[1][1:] == ["df = 1", None], "the source before the agent", timeout=60)
    until(lambda: f"('{load['id']}', 'rejected')" in settled(mcp), "the closed review has the Reject")
    view.cell(1).locator(".jp-InputArea-editor").click()
    for _ in range(3):
        page.keyboard.press("Control+z")
    page.keyboard.press("Escape")
    # an undo is synchronous in the page: the model reads as it is after the three presses
    assert page.evaluate(SOURCES)[1] == "df = 1", "Ctrl+Z brings no rejected text back"
    assert page.evaluate(BARS) == []

    # a change left pending, the notebook saved, the kernel restarted: escouade_nb not loaded there
    late = answer(mcp.call("insert_cell", source="late = 1"))["cell_id"]
    until(lambda: page.evaluate(BARS) == [late], "the late insert's bar")
    page.evaluate(f"() => {PANEL}.context.save()")
    until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "saved")
    mcp.close()
    page.evaluate(f"() => {PANEL}.sessionContext.restartKernel()")
    view.wait_kernel_idle()
    # Keep all's click says, in the cell, what to run (not the note of a kernel that did not answer in 10 s)
    bar = bar_of(view, late)
    view.panel.locator(".escouade-review-all").get_by_role("button", name="Keep all").click()
    until(lambda: bar.locator(".escouade-review-note").count() == 1, "the click says why", timeout=30)
    assert bar.locator(".escouade-review-note").inner_text() == NOT_LOADED
    # %load_ext escouade_nb (the first cell): the same click settles it (the page made it, the file is trusted)
    mcp = connect(view)
    try:
        bar.get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [], "kept after %load_ext", timeout=60)
        assert page.evaluate(CELLS)[-1][1:] == ["late = 1", None]
    finally:
        mcp.close()


def test_keep_and_reject_act_or_say_why_and_undo_brings_no_rejected_text_back(nb):
    nb.open([REVIEWED, "df = 1"])
    walk(nb, connect(nb))


def test_in_notebook_7_keep_and_reject_act_or_say_why_and_undo_brings_no_rejected_text_back(nb):
    nb.write([REVIEWED, "df = 1"])
    seven = nb.in_notebook_7()
    assert "/notebooks/" in seven.page.url
    walk(seven, connect(seven))
