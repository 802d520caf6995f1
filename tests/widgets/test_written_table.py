"""``escouade_nb.written`` / ``%escouade written``'s reading and table (kernel_mcp/written_reads.py,
widgets/tables.py) on saved notebooks with provenance metadata: a path read with nbformat
off the loop; no path: the open notebook through the channel, else the saved file of the
kernel's session, else one line; the HTML escapes what the notebook holds."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from written_notebooks import by, saved_notebook

from escouade_nb.kernel_mcp.tools import ToolFailure
from escouade_nb.kernel_mcp.written_reads import NO_NOTEBOOK, read_written
from escouade_nb.widgets.tables import PRINTERS, written_html


class LivePage:
    def __init__(self, cells: list[dict[str, Any]] | None) -> None:
        self.cells = cells
        self.asked = 0

    async def live_cells(self) -> dict[str, Any]:
        self.asked += 1
        if self.cells is None:
            raise ToolFailure("no page answered")
        return {"path": "work/open.ipynb", "client": "c", "cells": self.cells}


def test_a_saved_path_is_read_off_the_loop_and_drawn_per_agent(tmp_path, monkeypatch):
    path = saved_notebook(tmp_path / "saved.ipynb")
    threads: list[str] = []
    import escouade_nb.kernel_mcp.written_reads as reads
    real = reads._read
    monkeypatch.setattr(reads, "_read", lambda p: (threads.append(threading.current_thread().name), real(p))[1])

    written = asyncio.run(read_written(path))
    assert threads and threads[0] != threading.main_thread().name  # nbformat read in a worker thread
    assert written.error is None and written.where == str(path)
    assert written.agents == ["scribe", "critic"]
    html = written_html(written)
    assert html.count("class='escouade-written-agent'") == 2
    assert "<td>sess-scribe</td>" not in html and "<code>sess-scribe</code>" in html
    assert "<code># plot revenue per region</code>" in html and "<code>df.describe()</code>" in html
    assert ("escouade_nb.core.written", "Written") in PRINTERS


def test_a_missing_or_broken_file_is_one_line(tmp_path):
    missing = asyncio.run(read_written(tmp_path / "nope.ipynb"))
    assert missing.error == f"{tmp_path / 'nope.ipynb'}: no such file"
    (tmp_path / "bad.ipynb").write_text("{not json")
    bad = asyncio.run(read_written(tmp_path / "bad.ipynb"))
    assert bad.error is not None and "\n" not in bad.error and "not read as a notebook" in bad.error
    assert "esc-bad" in written_html(bad)


def test_no_path_reads_the_open_page_then_the_saved_session_file_then_says_so(tmp_path):
    forged = {"agent": "<img src=x onerror=alert(1)>", "turn": 1}
    page = LivePage([{"id": "a", "cell_type": "code", "source": "x = 1"},
                     {"id": "b", "cell_type": "code", "source": "y = 2\nz", "escouade": by("scribe", 2)},
                     {"id": "c", "cell_type": "code", "source": "w", "escouade": forged},
                     {"id": "d", "cell_type": "code", "source": "p", "escouade": by("scribe", 3), "pending": "edit"}])
    live = asyncio.run(read_written(live=page))
    assert live.where == "work/open.ipynb (open in the page)"
    assert [(r["agent"], r["cell"], r["first line"]) for r in live.rows] == [
        ("scribe", "b", "y = 2"), ("<img src=x onerror=alert(1)>", "c", "w")]
    assert "<img" not in written_html(live) and "&lt;img src=x" in written_html(live)

    saved = saved_notebook(tmp_path / "mine.ipynb")
    no_page = LivePage(None)
    fallback = asyncio.run(read_written(live=no_page, ns={"__session__": str(saved)}))
    assert no_page.asked == 1 and fallback.where == f"{saved} (saved file)"
    assert [r["cell"] for r in fallback.rows] == ["cell-1", "cell-3", "cell-2"]

    nothing = asyncio.run(read_written(live=LivePage(None), ns={}))
    assert nothing.error == NO_NOTEBOOK and "\n" not in NO_NOTEBOOK


def test_a_saved_file_not_trusted_here_is_said_so_and_a_signed_one_is_not(tmp_path, monkeypatch):
    """Provenance in someone else's file is only a claim: %escouade written says the file is not
    trusted (nbformat's notary does not know its signature); the file the user saved (signed
    here, as Jupyter's server signs on save) is read without that line."""
    import nbformat
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # this Jupyter's notary: its own key and db
    theirs = saved_notebook(tmp_path / "theirs.ipynb")
    untrusted = asyncio.run(read_written(theirs))
    assert untrusted.trusted is False and untrusted.agents == ["scribe", "critic"]
    assert repr(untrusted).splitlines()[0].endswith("not a record") and "not trusted here" in repr(untrusted)
    assert "escouade-written-untrusted" in written_html(untrusted)

    mine = tmp_path / "mine.ipynb"
    nb = nbformat.read(str(theirs), as_version=4)
    NotebookNotary().sign(nb)
    nbformat.write(nb, str(mine))
    trusted = asyncio.run(read_written(mine))
    assert trusted.trusted is True and "not trusted" not in repr(trusted)
    assert "escouade-written-untrusted" not in written_html(trusted)
