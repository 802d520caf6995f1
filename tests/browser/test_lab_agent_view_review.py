"""Keep all in the agent's view, in JupyterLab: the shipped fake agent's session changes the
open notebook through the kernel's MCP server (insert_cell and edit_cell called with its own
grant, as the agent would), its view lists both changes pending review with Keep all /
Reject all; a click on Keep all settles them through ``agent.pending_edits``: the cells'
review bars go, each kept cell's metadata says who wrote it, the view draws no review any
more and its conversation says what was kept; ``%escouade written`` then lists both cells,
read live from the page."""

from __future__ import annotations

import json

from test_lab_live_cells import PANEL, Mcp
from browser_waits import until

GRANT = """from escouade_nb.engine.agent import state_of
from escouade_nb.kernel_mcp.server import KernelServer
await scribe.ready()
_access = state_of(scribe).live.kernel
async with asyncio.timeout(30):
    while _access.grant is None:
        await asyncio.sleep(0.05)
print("URL", (await KernelServer.shared()).url)
print("TOKEN", _access.grant.token)"""

BARS = f"() => Array.from({PANEL}.node.querySelectorAll('.jp-Cell .escouade-review'), b => b.dataset.cell)"
META = (f"() => {PANEL}.content.model.sharedModel.cells.map(c => [c.id, c.getSource(), "
        "c.getMetadata('escouade_pending') || null, c.getMetadata('escouade') || null])")


def test_keep_all_in_the_agents_view_keeps_its_changes_in_the_cells(nb):
    page = nb.page
    nb.open(["%load_ext escouade_nb\nimport asyncio", f"scribe = %escouade fake --cwd {nb.work} --as scribe",
             GRANT, "df = 1", "%escouade written"])
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.run_cell(2)
    out = nb.output(2).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        load = mcp.live()["cells"][3]
        assert load["source"] == "df = 1"
        new = json.loads(mcp.call("insert_cell", source="plot = 'by scribe'", after_cell_id=load["id"])["text"])
        edit = mcp.call("edit_cell", cell_id=load["id"], source="df = 2", base_sha256=load["sha256"])
        assert not edit["is_error"], edit["text"]
        until(lambda: sorted(page.evaluate(BARS)) == sorted([new["cell_id"], load["id"]]), "both bars in the cells")

        review = view.locator(".esc-review")
        until(lambda: "2 changes to the notebook pending review" in review.inner_text(), "the view lists them")
        assert f"new cell {new['cell_id']}" in review.inner_text()
        assert f"edit of cell {load['id']}" in review.inner_text()

        review.get_by_role("button", name="Keep all").click()
        until(lambda: page.evaluate(BARS) == [], "the cells' bars are gone after Keep all in the view")
        cells = {c[0]: c[1:] for c in page.evaluate(META)}
        for cell_id, source in ((new["cell_id"], "plot = 'by scribe'"), (load["id"], "df = 2")):
            got_source, pending, provenance = cells[cell_id]
            assert (got_source, pending) == (source, None)
            assert provenance["agent"] == "scribe" and provenance["harness"] == "fake", provenance
            assert provenance["at"].endswith("Z")
        until(lambda: review.inner_text().strip() == "", "nothing stays drawn in the view after the answer")
        until(lambda: view.get_by_text(f"Notebook review: new cell {new['cell_id']} kept").count() == 1,
              "the conversation says what was kept")

        # what each agent wrote, read live from the page (the kept cells' provenance, not saved yet)
        nb.run_cell(5)
        until(lambda: "What each agent wrote" in nb.output(5).inner_text(), "the table of what each agent wrote")
        assert nb.output(5).locator(".escouade-written-agent[data-agent='scribe'] tr[data-cell]").count() == 2
        table = nb.output(5).inner_text()
        assert "(open in the page)" in table and new["cell_id"] in table and load["id"] in table, table
        assert "plot = 'by scribe'" in table
        assert not nb.errors, nb.errors
    finally:
        mcp.close()
