"""Saved HTML is text to the page's maths typesetter (issue 34, finding 4), in a real JupyterLab 4.

JupyterLab typesets every rendered ``text/html`` output with MathJax 3 (``@jupyterlab/mathjax-extension``,
its ``FindTeX`` skipping ``code``/``pre`` and any element inside one of class ``mathjax_ignore``): a prompt
"price $x$ and $y$" in a finished ``%%escouade`` turn's static copy (the saved form a colleague, nbconvert
and GitHub see) was typeset as maths. The static copy's root now carries ``mathjax_ignore`` (and MathJax 2's
``tex2jax_ignore``, nbconvert's): the words stay as typed. A control output in the same notebook is
typeset, so the page's MathJax did run over the outputs. The notebook saved, then opened in Notebook 7:
the same there.
"""

from __future__ import annotations

import json

import pytest
from browser_waits import until

pytestmark = pytest.mark.browser

CONTROL = "from IPython.display import HTML\nHTML('<span class=\"maths-control\">$z^2$</span>')"


def _typed_not_typeset(nb) -> None:
    """In ``nb``'s page: the control typeset, the static turn of cell 2 as typed, no maths in it."""
    out = nb.output(2)
    control = nb.output(3).locator(".maths-control")
    until(lambda: control.locator("mjx-container").count() > 0, "the control output typeset by the page's MathJax", 60)
    static = out.locator(".esc-saved.esc-turn")
    until(lambda: "price $x$ and $y$" in static.inner_text(), "the prompt shown as typed", 30)
    assert out.locator("mjx-container").count() == 0, static.inner_html()[:2000]


def _saved_with_outputs(nb) -> bool:
    cells = json.loads((nb.lab.root / nb.path).read_text())["cells"]
    return any("price $x$ and $y$" in json.dumps(o) for o in cells[2].get("outputs", []))


def test_a_saved_turn_with_dollars_is_shown_as_typed_not_typeset(nb):
    nb.open(["%load_ext escouade_nb", f"demo = %escouade fake --cwd {nb.work}",
             "%%escouade fake\nprice $x$ and $y$", CONTROL])
    for i in range(4):
        nb.run_cell(i)
    out = nb.output(2)
    until(lambda: out.locator(".esc-saved.esc-turn").count() == 1
          and out.locator(".esc-root:not(.esc-static)").count() == 0, "the turn's output made static", 60)
    _typed_not_typeset(nb)
    assert not nb.errors, nb.errors  # (Notebook 7's page logs 403s of its own: not checked there)
    nb.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    until(lambda: _saved_with_outputs(nb), "the notebook saved with the turn's output", 60)
    seven = nb.in_notebook_7()
    try:
        _typed_not_typeset(seven)
    finally:
        seven.page.close()
