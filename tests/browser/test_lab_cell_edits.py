"""The agent's changes to the notebook open in JupyterLab (the kernel's MCP tools
``insert_cell`` / ``edit_cell``, through the extension installed with the package), and their
Keep / Reject from Python (``agent.pending_edits``: a Reject restores the user's text exactly
and removes a new cell, awaited or not; a Keep leaves the cell, unmarked): an
inserted cell appears under the one named, pending review in its own metadata (not in the
user's undo history), and the live read shows it with ``pending: true``; after the user
typed into a cell, an edit naming the hash the agent read before is refused by the page
("changed since") and the user's text stays; an edit naming the hash of what is there now
is made, pending, and a save keeps it pending in the file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from test_lab_live_cells import PANEL, SETUP, Mcp
from browser_waits import until

# the grant's owner keeps the agent's pending edits, as an agent's session does (agent.pending_edits)
REVIEW = SETUP.replace("""    async def ask_run_code(self, code):
        return None""", """    async def ask_run_code(self, code):
        return None
    def edited(self, cell_id, change, live):
        review.add(cell_id, change, live)""").replace("import asyncio", "import asyncio\n"
                                                     "from escouade_nb.engine.review.cell_review import EditReview\n"
                                                     "review = EditReview()")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


CELLS = f"() => {PANEL}.content.model.sharedModel.cells.map(c => [c.id, c.getSource(), c.getMetadata('escouade_pending') || null])"
UNDO = f"() => {PANEL}.content.model.sharedModel.undoManager.undoStack.length"


def test_an_insert_is_pending_and_a_stale_edit_is_refused_after_the_user_typed(nb):
    page = nb.page
    nb.open([REVIEW, "df = 1"])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        cells = mcp.live()["cells"]
        load = cells[1]
        assert load["source"] == "df = 1" and load["pending"] is False

        # insert under the second cell: at once, pending review, not in the user's undo history
        undo_before = page.evaluate(UNDO)
        got = mcp.call("insert_cell", source="print('by the agent')", after_cell_id=load["id"])
        assert not got["is_error"], got["text"]
        answer = json.loads(got["text"])
        assert answer["status"] == "pending review" and answer["change"] == "insert"
        shown = page.evaluate(CELLS)
        assert [c[0] for c in shown][:2] == [cells[0]["id"], load["id"]] and shown[2][0] == answer["cell_id"]
        assert shown[2][1] == "print('by the agent')" and shown[2][2]["change"] == "insert"
        assert shown[2][2]["agent"] == "browser test"
        assert page.evaluate(UNDO) == undo_before, "the agent's insert is not an undo step of the user's"
        live = mcp.live()["cells"]
        assert (live[2]["id"], live[2]["pending"], live[2]["pending_change"]) == (answer["cell_id"], True, "insert")

        # the user types into the load cell after the agent read it
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type("df = 2")
        page.keyboard.press("Escape")
        until(lambda: page.evaluate(CELLS)[1][1] == "df = 2", "the typed text is in the model")
        stale = mcp.call("edit_cell", cell_id=load["id"], source="df = 3", base_sha256=load["sha256"])
        assert stale["is_error"] and "changed since" in stale["text"], stale
        assert page.evaluate(CELLS)[1][1:] == ["df = 2", None], "the user's text stays, nothing pending"

        # the edit naming what is there now is made, pending, the user's text kept for Reject
        fresh = mcp.call("edit_cell", cell_id=load["id"], source="df = 3", base_sha256=sha("df = 2"))
        assert not fresh["is_error"], fresh["text"]
        assert json.loads(fresh["text"])["status"] == "pending review"
        source, pending = page.evaluate(CELLS)[1][1:]
        assert source == "df = 3" and pending["change"] == "edit" and pending["original"] == "df = 2"
        live = mcp.live()["cells"][1]
        assert (live["source"], live["sha256"], live["pending"]) == ("df = 3", sha("df = 3"), True)

        # a save keeps both changes pending, in the cells' metadata
        page.evaluate(f"() => {PANEL}.context.save()")
        until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
        saved = json.loads((nb.lab.root / nb.path).read_text())
        marks = [c["metadata"].get("escouade_pending", {}).get("change") for c in saved["cells"]]
        assert marks == [None, "edit", "insert"], marks

        # Reject both from Python (review.pending: agent.pending_edits), one awaited, one not: the user's
        # text is back exactly, the new cell gone, nothing pending; none of it in the user's undo history
        undo_before = page.evaluate(UNDO)
        got = mcp.call("run_code", code="edits = review.pending\n"
                                        "print([(e.cell_id, e.change) for e in edits])\n"
                                        "print(await edits[1].reject())\n"
                                        "edits[0].reject()")
        assert f"[('{answer['cell_id']}', 'insert'), ('{load['id']}', 'edit')]\nrejected" in got["text"], got
        until(lambda: len(page.evaluate(CELLS)) == 2, "the rejected new cell is gone")
        assert [c[1:] for c in page.evaluate(CELLS)] == [[shown[0][1], None], ["df = 2", None]]
        assert page.evaluate(UNDO) == undo_before
        assert mcp.call("run_code", code="review.pending")["text"] == "result:\n[]"

        # Keep: an inserted cell stays, its mark gone
        kept = json.loads(mcp.call("insert_cell", source="kept = True")["text"])["cell_id"]
        assert "kept" in mcp.call("run_code", code="await review.pending[0].keep()")["text"]
        assert page.evaluate(CELLS)[-1] == [kept, "kept = True", None]

        # the undo measure means something: the user's own insert is an undo step
        steps = page.evaluate(UNDO)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:insert-cell-below')")
        until(lambda: page.evaluate(UNDO) > steps, "the user's insert is on the undo stack")
    finally:
        mcp.close()


# the owner as an agent's session is: its pending edits, its provenance, the notice of a Reject
REVIEWED = REVIEW.replace("""    def edited(self, cell_id, change, live):
        review.add(cell_id, change, live)""", """    def edited(self, cell_id, change, live):
        review.add(cell_id, change, live)
    def provenance(self):
        return {"agent": "browser test", "harness": "fake-agent", "session": "s-1", "turn": 2}
    def notice(self):
        return review.take_notice()""")
BARS = f"() => Array.from({PANEL}.node.querySelectorAll('.jp-Cell .escouade-review'), b => b.dataset.cell)"
TOOLBAR = f"() => {PANEL}.node.querySelector('.escouade-review-all')"


def test_keep_and_reject_are_clicked_inside_the_cell_and_a_kept_cell_says_who_wrote_it(nb, tmp_path):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        load = mcp.live()["cells"][1]

        # insert → its review inside the new cell ("new cell by NAME", Keep, Reject), and in the toolbar
        new = json.loads(mcp.call("insert_cell", source="by = 'the agent'", after_cell_id=load["id"])["text"])
        until(lambda: page.evaluate(BARS) == [new["cell_id"]], "the review bar is inside the new cell")
        bar = nb.cell(2).locator(".escouade-review")
        assert "New cell by browser test" in bar.inner_text()
        until(lambda: page.evaluate(f"() => {PANEL}.node.querySelectorAll('.jp-Cell')[2].lastElementChild"
                                    ".classList.contains('escouade-review')"), "the bar is at the cell's end")
        until(lambda: "1 change pending review" in nb.panel.locator(".escouade-review-all").inner_text(),
              "the toolbar counts it")

        # Keep by click: the kernel settles it (review.pending: agent.pending_edits stays true), the bar goes,
        # the cell says who wrote it
        bar.get_by_role("button", name="Keep").click()
        until(lambda: page.evaluate(BARS) == [], "the bar is gone after the Keep")
        cells = page.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => [c.id, c.getSource(), "
                              "c.getMetadata('escouade_pending') || null, c.getMetadata('escouade') || null])")
        kept_id, source, pending, provenance = cells[2]
        assert (kept_id, source, pending) == (new["cell_id"], "by = 'the agent'", None)
        assert {k: provenance[k] for k in ("agent", "harness", "session", "turn")} == {
            "agent": "browser test", "harness": "fake-agent", "session": "s-1", "turn": 2}
        assert provenance["at"].endswith("Z") and provenance["at"][:2] == "20", provenance
        assert mcp.call("run_code", code="review.pending")["text"] == "result:\n[]"
        assert not page.locator(".escouade-review-all").first.is_visible()

        # an edit shows the new source against the old inside the cell
        mcp.call("edit_cell", cell_id=load["id"], source="df = 9", base_sha256=sha("df = 1"))
        until(lambda: page.evaluate(BARS) == [load["id"]], "the edit's review bar is in the load cell")
        diff = nb.cell(1).locator(".escouade-review-diff").inner_text()
        assert diff.splitlines() == ["- df = 1", "+ df = 9"], diff

        # insert → Reject by click → gone, and the edit rejected too by Reject all: the user's text back
        gone = json.loads(mcp.call("insert_cell", source="gone = True")["text"])["cell_id"]
        until(lambda: gone in page.evaluate(BARS), "the second insert's bar")
        nb.panel.locator(f".escouade-review[data-cell='{gone}']").get_by_role("button", name="Reject").click()
        until(lambda: gone not in [c[0] for c in page.evaluate(CELLS)], "the rejected cell is gone")
        nb.panel.locator(".escouade-review-all").get_by_role("button", name="Reject all").click()
        until(lambda: page.evaluate(BARS) == [], "nothing pending after Reject all")
        assert page.evaluate(CELLS)[1][1:] == ["df = 1", None]

        # the agent learns the Rejects in its next tool result, the cells named, once
        told = mcp.call("notebook_cells", source="live")
        assert not told["is_error"]
        assert "rejected" in told["text"] and gone in told["text"] and load["id"] in told["text"], told["text"]
        assert "rejected" not in mcp.call("notebook_cells", source="live")["text"]

        # the provenance survives a save and nbconvert
        page.evaluate(f"() => {PANEL}.context.save()")
        until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
        saved = nb.lab.root / nb.path
        converted = tmp_path / "converted.ipynb"
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--output",
                        str(converted), str(saved)], check=True, capture_output=True, cwd=tmp_path)
        for path in (saved, converted):
            written = json.loads(path.read_text())
            by = [c["metadata"].get("escouade") for c in written["cells"]]
            assert by[0] is None and by[1] is None and by[2]["session"] == "s-1", (path, by)
            assert [c["id"] for c in written["cells"]] == [c[0] for c in cells[:2]] + [new["cell_id"]]
    finally:
        mcp.close()
