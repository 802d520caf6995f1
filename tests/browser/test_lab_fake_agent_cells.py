"""The shipped fake agent changes the notebook open in a real JupyterLab: its prompt, typed in
its view and sent, makes it call ``insert_cell`` of the kernel's MCP server (its words,
docs/fake-agent.md); the new cell lands under the others pending review — its
``escouade_pending`` metadata naming the agent, the review bar "New cell by NAME" with Keep and
Reject inside it — and the agent holds it (``agent.pending_edits``); Keep from the bar leaves
the cell with its provenance. The picture of the pending cell is the README's
(``reviewed-cell``; ``bash scripts/docs-pictures.sh`` copies it to docs/)."""

from __future__ import annotations

from test_lab_live_cells import PANEL
from browser_waits import until

CELLS = f"() => {PANEL}.content.model.sharedModel.cells.map(c => [c.id, c.getSource(), " \
        "c.getMetadata('escouade_pending') || null, c.getMetadata('escouade') || null])"
PLOT = "by_region = sales.groupby('region').revenue.sum()\nby_region.plot.bar(title='Revenue per region')"


def test_the_fake_agents_insert_lands_pending_in_the_open_notebook_and_keep_records_it(nb):
    page = nb.page
    nb.open([f"%load_ext escouade_nb\nimport asyncio\nanalyst = %escouade fake --cwd {nb.work} --as analyst\n"
             "await analyst.ready()\nwhile analyst.kernel_tools_state[0] != 'connected':\n    await asyncio.sleep(0.05)",
             "import pandas as pd\n"
             "sales = pd.DataFrame({'region': ['north', 'south', 'east'], 'revenue': [120.5, 95.0, 44.0]})",
             "analyst.pending_edits"])
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(0)
    load_id = page.evaluate(CELLS)[1][0]

    # typed in the agent's view and sent, as a person does: the fake's words for insert_cell
    nb.send(view, f"insert cell after {load_id}\n```python\n{PLOT}\n```", typed=False)
    until(lambda: len(page.evaluate(CELLS)) == 4, "the agent's new cell is in the notebook")
    new_id, source, pending, by = page.evaluate(CELLS)[2]
    assert source == PLOT and by is None
    assert pending["change"] == "insert" and pending["agent"] == "analyst"
    assert pending["by"]["harness"] == "fake" and pending["by"]["turn"] == 1
    until(lambda: f'"cell_id": "{new_id}"' in view.inner_text() and "pending review" in view.inner_text(),
          "the agent's reply names the new cell, pending review")

    # the review inside the new cell: "New cell by analyst", Keep, Reject (the README's picture)
    cell = nb.cell(2)
    bar = cell.locator(".escouade-review")
    bar.wait_for(timeout=30_000)
    assert "New cell by analyst" in bar.inner_text()
    assert bar.get_by_role("button", name="Keep").count() == 1
    assert bar.get_by_role("button", name="Reject").count() == 1
    nb.shot(cell, "reviewed-cell")

    # the agent holds it: agent.pending_edits
    nb.run_cell(3)
    until(lambda: f"<PendingEdit insert of cell {new_id} (pending)>" in nb.output(3).inner_text(),
          "agent.pending_edits names the new cell")

    # Keep from the bar: the cell stays, the mark goes, its metadata says who wrote it
    bar.get_by_role("button", name="Keep").click()
    until(lambda: page.evaluate(CELLS)[2][2] is None, "the Keep settled the cell")
    kept = page.evaluate(CELLS)[2]
    assert kept[1] == PLOT and set(kept[3]) == {"agent", "harness", "session", "turn", "at"}
    assert (kept[3]["agent"], kept[3]["harness"], kept[3]["turn"]) == ("analyst", "fake", 1)


    def nothing_pending() -> bool:  # asked again until the kernel has had the page's answer
        nb.run_cell(3)
        return nb.output(3).locator(".jp-OutputArea-output").inner_text().strip() == "[]"
    until(nothing_pending, "nothing pending once kept")
