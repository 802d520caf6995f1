"""The views' module once per page: in a real JupyterLab with escouade_nb's extension, a view
built after the page's hello carries the light module (``front.light_module``) and renders with
the page's copy of ``escouade.js``: a prompt streams, a permission card is answered by a click.
A page whose copy is missing (or another version) gets the whole module from its kernel."""

from __future__ import annotations

from test_lab import eventually, pins, replies

WAIT_HELLO = """from escouade_nb.widgets import front
import asyncio
for _ in range(200):
    if front.extension_present():
        break
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
    nb.open(["%load_ext escouade_nb", WAIT_HELLO, f"demo = %escouade fake --cwd {nb.work}", MODULES,
             "%%escouade fake\nslow", MODULES])
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
    assert max(sizes) < 4000, shown  # the light module, not escouade.js (~40 KB)
    assert "css: [0]" in shown, shown
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
    eventually(lambda: "Edited by the fake agent." in (nb.work / "notes.txt").read_text(), "the edit made")
    nb.wait_status(view, "idle")
    # a page without the extension's copy (here: removed): the light view asks its kernel for the module
    nb.page.evaluate("() => { delete globalThis[Symbol.for('escouade_nb.views')]; }")
    nb.run_cell(4)
    live = nb.output(4).locator(".esc-view.esc-turn")
    live.get_by_text("tick 3", exact=False).wait_for(timeout=30_000)  # drawn live, by the kernel's module
    shown = modules(nb, 5)
    sizes = [int(x) for x in shown.split("modules: [", 1)[1].split("]", 1)[0].split(",")]
    assert max(sizes) < 4000, shown  # still the light module: the kernel sent the whole one on demand
    assert not [e for e in nb.errors if "escouade" in e.lower()], nb.errors
