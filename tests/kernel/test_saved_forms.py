"""Saved forms: a notebook run in a real kernel, saved, converted by nbconvert — what it
holds once its kernel is gone (issue 26, items 2 and 3; every view has a saved form)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from escouade_nb.tools.finished_forms import FinishedForms

TRANSIENT = ("turn queued", "starting…", "working…", "reading…", " ago", "thinks…")


def _cell(source: str):
    return nbformat.v4.new_code_cell(source)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[nbformat.NotebookNode, str, Path]:
    """The notebook run once (an agent view, a 400-chunk %%escouade turn, the squad, the
    journal), saved without widget state as JupyterLab saves it, and its nbconvert HTML."""
    folder = tmp_path_factory.mktemp("saved")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("%load_ext escouade_nb\nimport asyncio\na = %escouade fake\nawait a.ready()"),
        _cell("%%escouade fake\nchunks 400"),
        _cell("%escouade squad"),
        _cell("%escouade journal"),
        # the turn ends, its view closes, the companions' debounced redraws go (a person saving later)
        _cell("import time\nend = time.monotonic() + 60\n"
              "while not (a.status == 'idle' and a.turns.current is None) and time.monotonic() < end:\n"
              "    await asyncio.sleep(0.05)\nawait asyncio.sleep(3)"),
    ]
    FinishedForms(nb, timeout=120, kernel_name="python3", store_widget_state=False,
                  resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / "saved.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-nbconvert"), "--to", "html", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=folder)
    assert done.returncode == 0, done.stderr
    return nb, (folder / "saved.html").read_text(encoding="utf-8"), folder


def _outputs(cell) -> list[dict]:
    return [o for o in cell.outputs if o.get("output_type") in ("display_data", "execute_result")]


def test_saved_turn_holds_its_reply_to_the_last_chunk(saved) -> None:
    nb, html, _ = saved
    companion = _outputs(nb.cells[1])[0]["data"]
    chunks = [int(n) for n in re.findall(r"\b(\d{5}) x", companion["text/html"])]
    assert chunks[-1] == 399 and len(set(chunks)) == 400, chunks[-3:]  # main: stopped at chunk 152
    assert "00399 x" in companion["text/plain"]
    assert "00399 x" in html and "● done" in companion["text/html"]


def test_saved_outputs_say_nothing_stale(saved) -> None:
    nb, html, folder = saved
    texts = [o["data"].get("text/plain", "") for c in nb.cells for o in _outputs(c)]
    for word in TRANSIENT:
        assert not any(word in t for t in texts), (word, texts)  # main: "fake: turn queued", "… starting…"
        assert word not in re.sub(r"<style>.*?</style>|<script.*?</script>", "", html, flags=re.S), word
    htmls = [o["data"].get("text/html", "") for c in nb.cells for o in _outputs(c)]
    assert not any(str(folder) in t for t in texts + htmls)  # no path of the machine that ran it
    # the widget outputs carry no text of their own: the companion before each says it all
    widgets = [o for c in nb.cells for o in _outputs(c) if "application/vnd.jupyter.widget-view+json" in o["data"]]
    assert len(widgets) == 4 and all(o["data"]["text/plain"] == "" for o in widgets)


def test_every_view_has_a_saved_form(saved) -> None:
    nb, html, _ = saved
    agent, squad, journal = (_outputs(nb.cells[i])[0]["data"] for i in (0, 2, 3))
    # the agent view: what it was, how to bring it back, what was said
    assert "%escouade resume fake" in agent["text/html"] and "00399 x" in agent["text/html"]
    assert agent["text/plain"].startswith("fake · Fake\n") and "00399 x" in agent["text/plain"]
    assert "chunks 400" in agent["text/plain"]
    # the squad: its table, the agent's row, no live-only column
    assert "<table" in squad["text/html"] and ">fake<" in squad["text/html"] and "last activity" not in squad["text/html"]
    assert squad["text/plain"].startswith("Squad:\n  fake")
    # the journal: what it showed
    assert "Journal" in journal["text/html"] and journal["text/plain"].startswith("Journal of all plugins")
    # nbconvert (a viewer without a kernel) shows each of them
    for words in ("<code>%escouade resume fake</code> brings it back", "The squad as last drawn",
                  "<b>Journal</b> of all plugins", "● done"):
        assert words in html, words
