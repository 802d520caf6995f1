"""The kernel's channel to the notebook page it runs in (the JupyterLab extension installed
with the package, ``labextension/``), in a real JupyterLab: the kernel's MCP tool
``notebook_cells(source="live")`` reads a cell the user typed and did not save, with its
id and the SHA-256 of its source; with the same notebook open in a second browser tab,
each read is answered by one tab only, and by the other once the first closes its
notebook; nothing the kernel did not ask for comes back. One kernel → page → kernel round
trip is measured and printed (``-s``). The same read in Notebook 7, and after a page reload
(the page that left is forgotten, the new one answers)."""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from browser_waits import until
from kernel_client import McpProcess as Mcp  # the other browser files take it from here

FIXTURES = Path(__file__).parents[1] / "fixtures"

SETUP = """%load_ext escouade_nb
import asyncio
from escouade_nb.kernel_mcp.server import KernelServer
from escouade_nb.widgets import notebook_pages
class Owner:
    name = "browser test"
    async def ask_run_code(self, code):
        return None
server = await KernelServer.shared()
grant = server.grant(Owner())
print("URL", server.url)
print("TOKEN", grant.token)"""

PING = """pages = notebook_pages.start_in_kernel(get_ipython())
pages.ping()
async with asyncio.timeout(45):
    while len(pages.pages) < 2:
        await asyncio.sleep(0.05)
print("PAGES", len(pages.pages))"""

TYPED = 'typed = "not saved yet, ça va"'

ROUND_TRIPS = """import time as _time
_rt = []
for _ in range(30):
    _t0 = _time.perf_counter()
    await pages.request("cells")
    _rt.append(_time.perf_counter() - _t0)
[round(x * 1000, 1) for x in sorted(_rt)]"""

PANEL = "window.jupyterapp.shell.currentWidget"


def answered(page) -> list[str]:
    got = page.evaluate(f"() => ({PANEL}.node.dataset.escouadeAnswered || '')")
    return got.split()


def test_the_kernel_reads_an_unsaved_cell_and_one_tab_answers(nb, lab_page):
    page = nb.page
    nb.open([SETUP, "x = 1", PING])
    assert page.evaluate("() => window.jupyterapp.isPluginActivated('escouade-nb:channel')"), \
        "the extension installed with the package is active"
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    mcp = Mcp.from_output(out)
    second = None
    try:
        # the user types into cell 2 and does not save
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type(TYPED)
        page.keyboard.press("Escape")
        ids = page.evaluate(f"() => {PANEL}.content.model.sharedModel.cells.map(c => c.id)")

        sent = time.time()
        got = mcp.live()
        took = time.time() - sent
        assert page.evaluate(f"() => {PANEL}.context.model.dirty"), "the typed cell was not saved"
        assert got["notebook"] == nb.path and got["cells_in_notebook"] == 3
        cells = got["cells"]
        assert [c["id"] for c in cells] == ids
        assert cells[1]["source"] == TYPED
        assert cells[1]["sha256"] == hashlib.sha256(TYPED.encode("utf-8")).hexdigest()
        assert cells[0]["execution_count"] == 1 and "URL http://127.0.0.1:" in cells[0]["outputs"]
        assert cells[1]["execution_count"] is None and cells[1]["outputs"] is None
        saved = mcp.call("notebook_cells", source="file")["text"]
        assert "x = 1" in saved and TYPED not in saved  # the file on disk is the saved version
        assert answered(page) == ["r1"]

        # the same notebook in a second browser tab (its own connection to the kernel)
        second = lab_page.second_tab(nb.path, "escouade-second-tab")
        second.locator(".jp-NotebookPanel:not(.lm-mod-hidden) [data-status='idle']").wait_for(timeout=60_000)
        until(lambda: second.evaluate(f"() => !!({PANEL} && {PANEL}.node.dataset.escouadeClient)"),
              "the second tab's panel has its client id")
        nb.run_cell(2)  # the kernel pings its pages: both tabs say hello
        assert "PAGES 2" in nb.output(2).inner_text()

        tabs = {"first": page, "second": second}
        before = {name: answered(tab) for name, tab in tabs.items()}
        got = mcp.live()
        after = {name: answered(tab) for name, tab in tabs.items()}
        new = {name: after[name][len(before[name]):] for name in tabs}
        answering = [name for name in tabs if new[name]]
        assert len(answering) == 1 and len(new[answering[0]]) == 1, f"one tab answers one read: {new}"
        # the answer is the answering tab's own copy (without collaboration the tabs' copies differ)
        expected = TYPED if answering[0] == "first" else "x = 1"
        assert got["cells"][1]["source"] == expected, (answering, got["cells"][1])

        # the answering tab closes the notebook: the next read goes to the other tab (the kernel forgot the closed
        # page at its bye, said as its session goes; or, when jupyter_server dropped that bye — it closes a tab's
        # channels at once when another tab stays connected — at this read, left unanswered by the closed page)
        closing = tabs[answering[0]]
        closing.evaluate(f"() => {{ const w = {PANEL}; w.context.model.dirty = false; w.dispose(); }}")
        other = "second" if answering[0] == "first" else "first"
        before_other = answered(tabs[other])
        got = mcp.live()
        assert len(answered(tabs[other])) == len(before_other) + 1
        assert got["cells"][1]["source"] == (TYPED if other == "first" else "x = 1")

        # nothing came back that the kernel did not ask for; one round trip, measured in the kernel
        client = tabs[other].evaluate(f"() => {PANEL}.node.dataset.escouadeClient")
        state = mcp.call("run_code", code="(pages.strays, pages.choose().client)")
        assert state["text"] == f"result:\n(0, {client!r})", state
        rt = mcp.call("run_code", code=ROUND_TRIPS)
        ms = json.loads(rt["text"].split("\n", 1)[1])
        print(f"\ntwo tabs: the {answering[0]} answered, then the {other} once the {answering[0]} closed its notebook",
              file=sys.stderr)
        print(f"kernel → page → kernel, 30 reads of a 3-cell notebook: median {statistics.median(ms)} ms, "
              f"min {ms[0]} ms, max {ms[-1]} ms; one notebook_cells(live) through MCP: {took * 1000:.0f} ms",
              file=sys.stderr)
    finally:
        mcp.close()
        if second is not None:
            second.close()


def test_in_notebook_7_the_kernel_reads_an_unsaved_cell(nb):
    """The same extension in Notebook 7 (/notebooks/…, installed with ``notebook``): the
    kernel reads the cell the user typed and did not save."""
    import copy

    import nbformat

    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbformat.v4.new_code_cell(src) for src in (SETUP, "x = 1")]
    nbformat.write(book, str(nb.lab.root / nb.path))
    page = nb.lab_page.context.new_page()  # the Lab page's login cookie: no token in the address
    mcp = None
    try:
        response = page.goto(f"{nb.lab.url}/notebooks/{nb.path}")
        assert response is not None and response.status != 404, "no Notebook 7 here (pip install notebook)"
        seven = copy.copy(nb)
        seven.page = page
        seven.cell(1).wait_for(timeout=60_000)
        page.locator(".jp-NotebookPanel[data-escouade-client]").wait_for(timeout=30_000)
        until(lambda: (s := nb.lab.sessions_for(nb.path)) and s[0]["kernel"]["execution_state"] == "idle",
              "the kernel idle", 60)
        seven.run_cell(0)
        mcp = Mcp.from_output(seven.output(0).inner_text())
        seven.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type(TYPED)
        page.keyboard.press("Escape")
        got = mcp.live()
        assert got["notebook"] == nb.path and [c["source"] for c in got["cells"]] == [SETUP, TYPED]
        assert got["cells"][1]["sha256"] == hashlib.sha256(TYPED.encode("utf-8")).hexdigest()
        assert TYPED not in mcp.call("notebook_cells", source="file")["text"]
    finally:
        if mcp is not None:
            mcp.close()
        page.close()


def test_after_a_page_reload_the_new_page_answers(nb):
    """A reload of the page (the notebook reopened on the same kernel): the kernel forgets the
    page that left and reads through the new one — what the user typed after the reload."""
    page = nb.page
    nb.open([SETUP, "x = 1"])
    nb.run_cell(0)
    mcp = Mcp.from_output(nb.output(0).inner_text())
    try:
        before = page.evaluate(f"() => {PANEL}.node.dataset.escouadeClient")
        assert [c["source"] for c in mcp.live()["cells"]] == [SETUP, "x = 1"]
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        nb.lab_page.load()
        page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                      nb.path)
        nb.cell(1).wait_for(timeout=60_000)
        after = until(lambda: page.evaluate(f"() => {PANEL} && {PANEL}.node.dataset.escouadeClient"),
                      "the reopened panel has its client id")
        assert after != before
        nb.cell(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type(TYPED)
        page.keyboard.press("Escape")
        sent = time.time()
        got = mcp.live()
        took = time.time() - sent
        assert got["cells"][1]["source"] == TYPED
        assert answered(page), "the new page answered"
        clients = mcp.call("run_code", code="[p.client for p in notebook_pages._pages.pages.values()]")
        assert clients["text"] == f"result:\n[{after!r}]", clients
        print(f"\nthe first live read after a reload: {took * 1000:.0f} ms", file=sys.stderr)
    finally:
        mcp.close()


def test_a_closed_notebook_tab_says_bye_and_the_kernel_forgets_its_page_without_a_read(nb):
    """The user closes the notebook's tab (its kernel goes on): the page says bye while its kernel connection
    still carries it — JupyterLab drops that connection, and the page's comm with it, before the panel's own
    ``disposed`` — so the kernel forgets the page at once, not at the first read it leaves unanswered."""
    nb.open([SETUP, "x = 1"])
    nb.run_cell(0)
    closing_the_tab_the_kernel_forgets_its_page(nb, "the kernel forgot the closed tab's page at its bye, with no read")


def test_a_tab_closed_after_a_kernel_restart_says_bye_to_the_new_kernel(nb):
    """The kernel restarted (its comm to the page gone with the old process), escouade_nb loaded again and the
    page linked again by a read: closing the tab then says bye to the new kernel, which forgets the page
    without a read — the bye rides the comm of the kernel that is there, not one of the kernel before."""
    nb.open([SETUP, "x = 1"])
    nb.run_cell(0)
    before = nb.output(0).inner_text()
    nb.page.evaluate(f"() => {PANEL}.sessionContext.restartKernel()")
    nb.wait_kernel_idle()
    nb.run_cell(0)
    until(lambda: "TOKEN" in nb.output(0).inner_text() and nb.output(0).inner_text() != before,
          "the setup ran again in the new kernel")
    closing_the_tab_the_kernel_forgets_its_page(nb, "the new kernel forgot the closed tab's page at its bye, "
                                                    "with no read")


def closing_the_tab_the_kernel_forgets_its_page(nb: Any, what: str) -> None:
    """With SETUP run in cell 0: one live read links the page, then the tab is closed as the user closes it
    and the kernel must forget the page with no read (``what`` names that wait)."""
    page = nb.page
    mcp = Mcp.from_output(nb.output(0).inner_text())
    pages = "[p.client for p in notebook_pages._pages.pages.values()]"
    try:
        client = page.evaluate(f"() => {PANEL}.node.dataset.escouadeClient")
        assert [c["source"] for c in mcp.live()["cells"]] == [SETUP, "x = 1"]
        assert mcp.call("run_code", code=pages)["text"] == f"result:\n[{client!r}]"
        page.evaluate(f"() => {{ const w = {PANEL}; w.context.model.dirty = false; w.close(); }}")
        until(lambda: page.evaluate(f"() => !{PANEL} || !{PANEL}.node.dataset.escouadeClient"), "the tab closed")
        until(lambda: mcp.call("run_code", code=pages)["text"] == "result:\n[]", what)
    finally:
        mcp.close()
