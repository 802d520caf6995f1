"""``%escouade written [PATH]`` and ``await escouade_nb.written(PATH)`` in a real kernel, on a
saved notebook with provenance metadata: the table per agent (text and HTML) arrives in the
cell's output once read; with no path and no page (a kernel started by jupyter_client, as
nbclient's), one line; a usage error is one line and the usage; the help names it."""

from __future__ import annotations

import pytest

from kernel_client import Kernel
from written_notebooks import saved_notebook

pytestmark = pytest.mark.kernel


def updates(k: Kernel) -> list[dict]:
    """The data of the next display update (the table, replacing "reading…")."""
    got = k.drain_iopub(30, until=lambda m: m["msg_type"] == "update_display_data")
    return [m["content"]["data"] for m in got.messages if m["msg_type"] == "update_display_data"]


def test_written_lists_what_each_agent_wrote_in_a_saved_notebook(tmp_path):
    saved_notebook(tmp_path / "saved.ipynb")
    k = Kernel(tmp_path)
    try:
        k.run("%load_ext escouade_nb", timeout=120)
        out = k.run("%escouade written saved.ipynb")
        assert "reading saved.ipynb…" in out.text
        (data,) = updates(k)
        text = data["text/plain"]
        # a file the test wrote, not signed by this Jupyter: said first, so the provenance is not taken as fact
        untrusted, text = text.split("\n", 1)
        assert untrusted.startswith(f"{tmp_path / 'saved.ipynb'}: this notebook is not trusted here"), untrusted
        assert text.startswith(f"{tmp_path / 'saved.ipynb'}: 3 cell(s) kept from 2 agent(s)"), text
        assert "scribe:\n  cell 2 (cell-1) · fake · session sess-scribe · turn 1" in text
        assert "critic:\n  cell 3 (cell-2)" in text
        assert "<div class='escouade-written-agent' data-agent='scribe'>" in data["text/html"]

        out = k.run("import escouade_nb\nw = await escouade_nb.written('saved.ipynb')\nw")
        assert "3 cell(s) kept from 2 agent(s)" in out.text
        html = [m["content"]["data"].get("text/html", "") for m in out.messages if m["msg_type"] == "execute_result"]
        assert html and "escouade-written" in html[0]

        out = k.run("%escouade written")  # no path: no page answers, the kernel knows no file
        (data,) = updates(k)
        assert data["text/plain"].startswith("escouade written: no notebook to read"), data
        assert "\n" not in data["text/plain"]

        out = k.run("%escouade written a.ipynb b.ipynb")
        assert "written takes one notebook path, or none" in out.text
        assert "%escouade written [PATH.ipynb]" in k.run("%escouade help written").text
        assert "%escouade written [PATH.ipynb]" in k.run("%escouade --help").text
    finally:
        k.shutdown()
