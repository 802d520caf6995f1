"""``execute_cell`` in a real JupyterLab with the shipped ``fake`` agent, its real MCP calls and
the card it gets, clicked like a person: the agent inserts a cell (pending review), asks to run
it in a turn started in the background (``a.send(...)`` not awaited: the kernel's queue is free);
exactly one card shows the cell's source and says it is unreviewed; *Run* runs it IN the
notebook (its output in that cell, its execution count set), the tool result carries that
output as text, and the cell's metadata records the code that ran (``escouade.ran``), which a
Keep then keeps beside who wrote it, and a save keeps in the file. A turn started by a ``%%escouade`` cell asks to run
another cell: *Don't run* → nothing runs (no output, no execution count) and the agent is told.
*Run* from a ``%%escouade`` turn works alike. A cell the user changed after the card showed it is refused by the page as stale, not run."""

from __future__ import annotations

import json
import threading

from test_lab_live_cells import PANEL, SETUP, Mcp, answered
from browser_waits import until


def write_with_ids(nb, cells: list[tuple[str, str]]) -> None:
    """As ``nb.write``, with each cell's id given (nbformat 4.5 keeps them)."""
    import nbformat

    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbformat.v4.new_code_cell(source, id=cell_id) for cell_id, source in cells]
    nbformat.write(book, str(nb.lab.root / nb.path))


def open_with_ids(nb, cells: list[tuple[str, str]], timeout: float = 60) -> None:
    """As ``nb.open``, with each cell's id given (nbformat 4.5 keeps them)."""
    write_with_ids(nb, cells)
    nb.page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                     nb.path)
    nb.cell(len(cells) - 1).wait_for(timeout=timeout * 1000)
    nb.wait_kernel_idle(timeout)


def cell_state(page, cell_id: str):
    """[source, execution_count, outputs' text, metadata.escouade, metadata.escouade_pending] of a cell."""
    return page.evaluate(f"""id => {{ const c = {PANEL}.content.model.sharedModel.cells.find(x => x.id === id);
        if (!c) return null;
        const text = c.getOutputs().map(o => o.text || (o.data && o.data['text/plain']) || '').join('');
        return [c.getSource(), c.execution_count ?? null, text, c.getMetadata('escouade') || null,
                c.getMetadata('escouade_pending') || null]; }}""", cell_id)


def index_of(page, cell_id: str) -> int:
    return page.evaluate(f"id => {PANEL}.content.model.sharedModel.cells.findIndex(c => c.id === id)", cell_id)


# before its first call, the agent's link to the kernel's tools is waited for, within a deadline, as the
# other browser tests do (the view's "idle" is the session's; kernel_tools_state is that link's); a call
# that failed shows what it got, in the cell's traceback
INSERT = """import asyncio, json
async with asyncio.timeout(60):
    while a.kernel_tools_state[0] != 'connected':
        await asyncio.sleep(0.05)
r = await a.send('call escouade insert_cell {"source": "print(x * 2)"}')
assert " returned: " in r.text, r.text
cid = json.loads(r.text.split(" returned: ", 1)[1].splitlines()[0])["cell_id"]
print("CID", cid)"""


# the cells both front-ends run: the agent inserts a cell, then asks, in a turn started in the
# background, to run it; the last cell awaits that turn and prints its result
RUN_IT = [
    ("load", "%load_ext escouade_nb"),
    ("start", "a = %escouade fake --cwd {work} --as runner"),
    ("x", "x = 21"),
    ("insert", INSERT),
    ("ask", """t = a.send('call escouade execute_cell {"cell_id": "%s"}' % cid)"""),
    ("result", "r = await t\nprint(r.text)"),
]


def run_cells(nb, *extra: tuple[str, str]) -> list[tuple[str, str]]:
    """``RUN_IT`` for this test's agent folder, then ``extra``: the cells to write (id, source)."""
    return [(i, src.replace("{work}", str(nb.work))) for i, src in RUN_IT] + list(extra)


def run_behind_one_card(nb) -> tuple:
    """Run ``RUN_IT`` (written, open in ``nb.page``) like a person: one card with the inserted
    cell's source, *Run* clicked; the output and execution count land in that cell, the code
    that ran in its metadata (still pending review), the tool result has the output text.
    Returns (the agent view, the cell's id, its execution count, its ``escouade.ran``)."""
    page = nb.page
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    nb.run_cell(3, timeout=90)  # the agent inserts a cell at the end: pending review
    out = nb.output(3).inner_text()
    assert "CID " in out, out  # else the kernel's traceback says why
    cid = out.split("CID ", 1)[1].strip()
    assert cell_state(page, cid)[4]["change"] == "insert"

    # the turn asks to run it, in the background: one card, the cell's source on it, unreviewed
    nb.run_cell(4)
    pin = view.locator(".esc-pins .esc-pin")
    pin.wait_for(timeout=30_000)
    assert pin.count() == 1
    assert "Run an unreviewed cell in the notebook" in pin.locator(".esc-pin-title").inner_text()
    assert "print(x * 2)" in view.inner_text()
    assert pin.locator("button[data-act]").all_inner_texts() == \
        ["Run", "Run without asking again in this session", "Don't run"]
    assert cell_state(page, cid)[1:3] == [None, ""], "nothing ran before Run"
    pin.get_by_role("button", name="Run", exact=True).click()

    # it runs in the notebook: the output in that cell, its execution count set
    state = until(lambda: (s := cell_state(page, cid)) and s[1] is not None and s[2] and s, "the cell ran", 60)
    source, count, text, meta, pending = state
    assert (source, text) == ("print(x * 2)", "42\n")
    assert isinstance(count, int) and count > 0
    prompt = nb.cell(index_of(page, cid)).locator(".jp-InputArea-prompt").inner_text()
    assert prompt.strip() == f"[{count}]:"
    assert "42" in nb.cell(index_of(page, cid)).locator(".jp-OutputArea").inner_text()
    ran = until(lambda: (cell_state(page, cid)[3] or {}).get("ran"), "the code that ran is in the cell's metadata")
    assert (ran["code"], ran["execution_count"], ran["agent"], ran["harness"]) == ("print(x * 2)", count, "runner",
                                                                                   "fake")
    assert ran["turn"] == 2 and ran["at"].endswith("Z") and ran["session"]
    assert pending["change"] == "insert", "still pending review: running is not keeping"
    nb.wait_status(view, "idle")

    # the tool result has the output text
    nb.run_cell(5)
    out = nb.output(5).inner_text()
    assert f"mcp__escouade__execute_cell returned: cell {cid} ran in the notebook [{count}]:\n42" in out, out
    assert view.locator(".esc-pins .esc-pin").count() == 0
    return view, cid, count, ran


def test_one_card_then_run_puts_the_output_in_the_cell_and_dont_run_runs_nothing(nb):
    page = nb.page
    open_with_ids(nb, run_cells(
        nb,
        ("guard", "print('not before Run')"),
        ("magic", '%%escouade runner\ncall escouade execute_cell {"cell_id": "guard"}'),
        ("magic-again", '%%escouade runner\ncall escouade execute_cell {"cell_id": "guard"}'),
    ))
    view, cid, count, ran = run_behind_one_card(nb)
    pin = view.locator(".esc-pins .esc-pin")

    # Keep: who wrote it beside the code that ran
    nb.cell(index_of(page, cid)).locator(".escouade-review button", has_text="Keep").click()
    meta = until(lambda: (s := cell_state(page, cid)) and s[4] is None and s[3], "kept")
    assert meta["agent"] == "runner" and meta["turn"] == 1 and meta["ran"] == ran

    # a %%escouade turn asks to run another cell: Don't run → nothing runs, the agent is told
    nb.run_cell(7)
    pin.wait_for(timeout=30_000)
    assert "Run a cell in the notebook" in pin.locator(".esc-pin-title").inner_text()
    assert "not before Run" in view.inner_text()
    pin.get_by_role("button", name="Don't run", exact=True).click()
    until(lambda: "I did not call mcp__escouade__execute_cell: permission refused" in view.inner_text(),
          "the agent is told")
    nb.wait_status(view, "idle")
    assert cell_state(page, "guard")[1:4] == [None, "", None], "nothing ran"

    # the same from a %%escouade turn, Run: the kernel's queue is free (the magic's cell returned at once)
    nb.run_cell(8)
    pin.wait_for(timeout=30_000)
    pin.get_by_role("button", name="Run", exact=True).click()
    until(lambda: "execute_cell returned: cell guard ran in the notebook" in view.inner_text(), "the agent has it")
    nb.wait_status(view, "idle")
    guard = cell_state(page, "guard")
    assert guard[2] == "not before Run\n" and guard[1] > count and guard[3]["ran"]["code"] == "print('not before Run')"

    # a save keeps the code that ran, in the file
    page.evaluate(f"() => {PANEL}.context.save()")
    until(lambda: not page.evaluate(f"() => {PANEL}.context.model.dirty"), "the notebook is saved")
    saved = {c["id"]: c for c in json.loads((nb.lab.root / nb.path).read_text())["cells"]}
    assert saved[cid]["metadata"]["escouade"]["ran"] == ran and saved[cid]["execution_count"] == count
    assert saved["guard"]["metadata"]["escouade"] == {"ran": guard[3]["ran"]}, "run, never written by an agent"


# an owner that allows the run once the user has changed the cell after it was read (the card's source):
# the page must refuse it as stale, whatever the kernel allowed
STALE = SETUP.replace("""    async def ask_run_code(self, code):
        return None""", """    async def ask_run_code(self, code):
        return None
    async def ask_execute_cell(self, cell_id, source, unreviewed):
        shown.append(source)
        pages = notebook_pages.start_in_kernel(get_ipython())
        while (await pages.cell_to_run(cell_id))["source"] == source:
            await asyncio.sleep(0.1)
shown = []""")


def test_a_cell_changed_after_its_card_is_refused_as_stale_and_not_run(nb):
    page = nb.page
    open_with_ids(nb, [("setup", STALE), ("target", "print('as the card showed it')")])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        got: dict = {}
        caller = threading.Thread(target=lambda: got.update(mcp.call("execute_cell", cell_id="target")))
        caller.start()
        until(lambda: answered(page), "the page gave the cell's source for the card")
        # the user types into the cell while the card waits
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type("print('typed after the card')")
        page.keyboard.press("Escape")
        caller.join(60)
        assert got["is_error"] and "changed since the card showed it" in got["text"], got
        assert "nothing was run" in got["text"]
        assert cell_state(page, "target")[:4] == ["print('typed after the card')", None, "", None], "not run"
        assert mcp.call("run_code", code="shown")["text"] == "result:\n[\"print('as the card showed it')\"]"
    finally:
        mcp.close()
