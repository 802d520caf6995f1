"""The views' module once per page: in a real JupyterLab with escouade_nb's extension, a view
built after the page's hello carries the light module (``front.light_module``) and renders with
the page's copy of ``escouade.js``: a prompt streams, a permission card is answered by a click.
A page whose copy is missing (or another version) gets the whole module from its kernel."""

from __future__ import annotations

import json

from browser_waits import until

from escouade_nb.widgets.front import front_end
from test_lab import pins, replies

WAIT_HELLO = """from escouade_nb.widgets import front
import asyncio
async with asyncio.timeout(30):
    while not front.extension_present():
        await asyncio.sleep(0.05)
print("extension:", front.extension_present())"""

MODULES = """from ipywidgets.widgets.widget import _instances
views = [w for w in list(_instances.values()) if isinstance(w, front.FrontView) and not w.closed]
print("modules:", sorted({len(w._esm) for w in views}), "css:", sorted({len(w._css) for w in views}))"""


def modules(nb, cell: int) -> str:
    nb.run_cell(cell)
    return nb.output(cell).inner_text()


def test_light_module_renders_streams_and_answers_a_card(nb):
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    # the first view of the kernel is built before any page said hello (its build pings the pages): it
    # carries the whole module; the views built after the hello carry the light one
    nb.open([f"%load_ext escouade_nb\nfirst = %escouade fake --as first --cwd {nb.work}", WAIT_HELLO,
             f"demo = %escouade fake --cwd {nb.work}", MODULES, "%%escouade fake\nslow", MODULES,
             f"front.use_extension_pages(None)\npacked = %escouade fake --as packed --cwd {nb.work}", MODULES])
    nb.run_cell(0)
    nb.run_cell(1)
    assert "extension: True" in nb.output(1).inner_text()
    nb.run_cell(2)
    view = nb.agent_view(2)
    nb.wait_status(view, "idle")
    shown = modules(nb, 3)
    assert nb.page.evaluate("() => !!globalThis[Symbol.for('escouade_nb.views')]")
    assert "modules: [" in shown, shown
    sizes = [int(x) for x in shown.split("modules: [", 1)[1].split("]", 1)[0].split(",")]
    assert len(sizes) == 2 and min(sizes) < 4000 < max(sizes), shown  # the first view's whole, then light
    assert "css: [0]" in shown, shown  # the light module has none; the packed one carries it inside
    assert nb.agent_view(0).locator(".esc-head-row").is_visible()  # the whole module's view renders too
    # styled by the extension's stylesheet: the head is laid out as a flex row
    assert view.locator(".esc-head-row").evaluate("e => getComputedStyle(e).display") == "flex"
    # a prompt streams
    nb.send(view, "Hello from the light view", key="Enter")
    replies(view).last.get_by_text("You said: Hello from the light view", exact=False).wait_for()
    nb.wait_status(view, "idle")
    # a permission card, answered by a click
    nb.send(view, "Please edit notes.txt", key="Enter")
    pin = pins(view).locator(".esc-pin")
    pin.wait_for()
    pin.locator("button[data-act]", has_text="Allow once").click()
    view.locator(".esc-transcript .esc-answer", has_text="Allowed once by you").wait_for()
    replies(view).get_by_text("Edited notes.txt.").wait_for()
    until(lambda: "Edited by the fake agent." in (nb.work / "notes.txt").read_text(), "the edit made")
    nb.wait_status(view, "idle")
    # a page without the extension's copy (here: removed): the light view asks its kernel for the module
    nb.page.evaluate("() => { delete globalThis[Symbol.for('escouade_nb.views')]; }")
    nb.run_cell(4)
    live = nb.output(4).locator(".esc-view.esc-turn")
    live.get_by_text("tick 3", exact=False).wait_for(timeout=30_000)  # drawn live, by the kernel's module
    shown = modules(nb, 5)
    sizes = [int(x) for x in shown.split("modules: [", 1)[1].split("]", 1)[0].split(",")]
    assert min(sizes) < 4000, shown  # still the light module: the kernel sent the whole one on demand
    # a view built where no page said hello (VS Code, Colab): the packed module, unpacked in the page by
    # itself (neither the extension's copy nor the one the kernel sent is there to use)
    sheet = json.dumps(front_end()[1][:60])  # the views' stylesheet as a style element of its own (not a saved form's)
    styles = f"() => [...document.querySelectorAll('style')].filter(s => s.textContent.startsWith({sheet})).length"
    before = nb.page.evaluate(styles)
    nb.page.evaluate("() => { delete globalThis[Symbol.for('escouade_nb.views.kernel')]; }")
    nb.run_cell(6)
    packed = nb.agent_view(6)
    nb.wait_status(packed, "idle")
    assert packed.locator(".esc-head-row").evaluate("e => getComputedStyle(e).display") == "flex"
    assert nb.page.evaluate(styles) == before + 1  # its stylesheet, added once with the module
    shown = modules(nb, 7)
    sizes = [int(x) for x in shown.split("modules: [", 1)[1].split("]", 1)[0].split(",")]
    assert [s for s in sizes if 4000 < s < 64_000], shown  # the packed module (the files as they are: ~99 KB)
    assert not [e for e in nb.errors if "escouade" in e.lower()], nb.errors


def test_in_notebook_7_a_light_view_streams(nb):
    """Notebook 7 with the extension: the agent view carries the light module and a prompt streams."""
    import copy

    import nbformat

    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbformat.v4.new_code_cell(src) for src in
                  (f"%load_ext escouade_nb\nfirst = %escouade fake --as first --cwd {nb.work}", WAIT_HELLO,
                   f"demo = %escouade fake --cwd {nb.work}", MODULES)]
    nbformat.write(book, str(nb.lab.root / nb.path))
    page = nb.lab_page.context.new_page()  # the Lab page's login cookie: no token in the address
    try:
        response = page.goto(f"{nb.lab.url}/notebooks/{nb.path}")
        assert response is not None and response.status != 404, "no Notebook 7 here (pip install notebook)"
        seven = copy.copy(nb)
        seven.page = page
        seven.cell(3).wait_for(timeout=60_000)
        until(lambda: (s := nb.lab.sessions_for(nb.path)) and s[0]["kernel"]["execution_state"] == "idle",
                   "the kernel idle", 60)
        seven.run_cell(0)
        seven.run_cell(1)
        assert "extension: True" in seven.output(1).inner_text()
        seven.run_cell(2)
        view = seven.agent_view(2)
        seven.wait_status(view, "idle")
        shown = modules(seven, 3)
        sizes = [int(x) for x in shown.split("modules: [", 1)[1].split("]", 1)[0].split(",")]
        assert min(sizes) < 4000 < max(sizes), shown
        seven.send(view, "Hello from Notebook 7", key="Enter")
        replies(view).last.get_by_text("You said: Hello from Notebook 7", exact=False).wait_for()
    finally:
        page.close()
