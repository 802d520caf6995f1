"""``execute_cell`` through the gate and the record, in a real kernel with the shipped ``fake``
agent and its real MCP calls (``call escouade execute_cell {json}``: it asks permission first,
as claude-agent does): a rule plugin sees ``mcp__escouade__execute_cell`` with the cell's whole
source (read from the page when the request is made); its denial means the page is never asked
to run and the journal says who answered; its allowance lets exactly that cell run once (one
card, no second one when the server receives the call). The page here is a stand-in channel
(the kernel is started by jupyter_client: no browser); the real page is tests/browser/
test_lab_execute_cell.py. Without any page, the call fails in one line saying nothing was run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernel_client import kernel_with_env, wait_for

pytestmark = pytest.mark.kernel

PLUGIN = textwrap.dedent('''
    import json
    from escouade_nb.plugin_sdk import allow, ask, decide, deny, run

    @decide
    def rules(req):
        if req.tool == "mcp__escouade__execute_cell":
            with open(SEEN, "a") as seen:
                seen.write(json.dumps(req.input) + "\\n")
            if "shutil" in req.input.get("source", ""):
                return deny("no shutil in this notebook")
            return allow("cells may run here")
        return ask()

    run()
''')

# a stand-in for the page (escouade_nb.widgets.notebook_pages.NotebookPages): two cells, runs counted
PAGE = textwrap.dedent('''
    import hashlib
    from escouade_nb.kernel_mcp.server import use_live_notebook
    class StandInPage:
        def __init__(self):
            self.cells = {"c-ok": "total = 6 * 7\\nprint(total)",
                          "c-rm": "import shutil\\n# a long cell: the plugin sees all of it\\n" + "x = 1\\n" * 300
                                  + "shutil.rmtree('somewhere')"}
            self.runs = []
            self.queue = None
        def running(self):  # the real channel's answer (a cell of the kernel running), once asked to
            return self.queue.running() if self.queue is not None else None
        async def live_cells(self):
            return {"path": "nb.ipynb", "cells": []}
        async def cell_to_run(self, cell_id):
            if cell_id == "c-typed":  # the user types into it between the card and the server's call
                self.cells[cell_id] = self.cells.get(cell_id, "") + "#"
            source = self.cells[cell_id]
            return {"source": source, "sha256": hashlib.sha256(source.encode()).hexdigest(),
                    "pending": cell_id == "c-ok"}
        async def run_cell(self, cell_id, base, by):
            self.runs.append((cell_id, base, by))
            return {"execution_count": 7, "outputs": [{"output_type": "stream", "name": "stdout", "text": "42\\n"}]}
''')


def _env(tmp_path: Path) -> dict[str, str]:
    return {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
            "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
            "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal")}


def test_a_rule_plugin_sees_the_whole_source_its_denial_runs_nothing_and_is_on_record(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    seen = tmp_path / "seen.jsonl"
    plugin = tmp_path / "plugins" / "exec-rules"
    plugin.mkdir(parents=True)
    (plugin / "plugin.py").write_text(PLUGIN.replace("SEEN", repr(str(seen))))
    (plugin / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.exec-rules", "name": "Exec rules", "version": "1.0.0",
        "permissions": {"decide": True}, "program": {"python": "plugin.py"}}))
    k = kernel_with_env(tmp_path / "ws", _env(tmp_path))
    try:
        k.run("%load_ext escouade_nb")
        k.run(PAGE + "from escouade_nb import magics\nmagics.loaded(get_ipython())  # the pages' channel set, then stood in for\n"
              "page = StandInPage()\nuse_live_notebook(page)")
        assert "on" in k.run(f"%escouade plugins on exec-rules --project {tmp_path / 'ws'}").text
        k.run("a = %escouade fake --as runner\nawait a.ready()")
        wait_for(k, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        perms = "[(i.answered_by, i.message, i.request.title) for i in r.items if type(i).__name__ == 'Permission']"

        # denied by the rule plugin, which saw the whole source: the page is never asked to run
        out = k.run("r = await a.send('call escouade execute_cell {\"cell_id\": \"c-rm\"}')\n"
                    f"print(r.text)\nprint({perms})\nprint(page.runs)", timeout=60).text
        assert "I did not call mcp__escouade__execute_cell: permission refused" in out, out
        assert "('Exec rules via Escouade', 'no shutil in this notebook', 'Run a cell in the notebook')" in out
        assert out.strip().endswith("[]"), "nothing ran"
        first = json.loads(seen.read_text().splitlines()[0])
        assert first["cell_id"] == "c-rm" and first["unreviewed"] is False
        assert first["source"].startswith("import shutil\n") and first["source"].endswith("shutil.rmtree('somewhere')")
        assert first["source"].count("x = 1\n") == 300, "the plugin sees the cell's whole source"

        # allowed by the rule plugin: one card (the agent's own request), the cell runs once, the result's text
        out = k.run("r = await a.send('call escouade execute_cell {\"cell_id\": \"c-ok\"}')\n"
                    f"print(r.text)\nprint({perms})\nprint(len(page.runs), page.runs[0][0], page.runs[0][2]['agent'])",
                    timeout=60).text
        lines = out.splitlines()
        assert lines[0] == "mcp__escouade__execute_cell returned: cell c-ok ran in the notebook [7]:", out
        assert lines[1] == "42"
        assert "('Exec rules via Escouade', 'cells may run here', 'Run an unreviewed cell in the notebook" in out
        assert out.count("Run an unreviewed cell") == 1, "exactly one card"
        assert lines[-1] == "1 c-ok runner"
        assert json.loads(seen.read_text().splitlines()[1])["unreviewed"] is True

        # the cell changed between the agent's request (its card) and the server's call: stale, not run
        out = k.run("r = await a.send('call escouade execute_cell {\"cell_id\": \"c-typed\"}')\n"
                    "print(r.text)\nprint(len(page.runs))", timeout=60).text
        assert out.startswith("mcp__escouade__execute_cell failed:") and "changed since the card you answered" in out
        assert out.strip().endswith("1"), "not run"
        assert json.loads(seen.read_text().splitlines()[2])["source"] == "#", "the card showed the first read"

        # a cell that awaits the turn holds the kernel's queue: the page's run would wait behind it (a
        # deadlock), so the call is refused before any card, nothing run
        out = k.run("from escouade_nb.widgets import notebook_pages\npage.queue = notebook_pages.start_in_kernel("
                    "get_ipython())\nr = await a.send('call escouade execute_cell {\"cell_id\": \"c-ok\"}')\n"
                    f"print(r.text)\nprint({perms})\nprint(len(page.runs))", timeout=60).text
        assert out.startswith("mcp__escouade__execute_cell failed:") and "a cell of this kernel is running now" in out
        assert out.strip().endswith("1"), "not run again"

        journal = [json.loads(line) for line in (tmp_path / "journal" / "kernel-tools.jsonl").read_text().splitlines()]
        runs = [(e["verdict"], e.get("by"), e.get("message")) for e in journal
                if e["tool"] == "mcp__escouade__execute_cell"]
        assert runs == [("refused", "Exec rules via Escouade", "no shutil in this notebook"),
                        ("allowed", "Exec rules via Escouade", "cells may run here"),
                        ("allowed", "Exec rules via Escouade", "cells may run here")], journal
        (path,) = (tmp_path / "transcripts").glob("runner-*.jsonl")
        events = [json.loads(line)["data"] for line in path.read_text(encoding="utf-8").splitlines()
                  if '"kernel_tool"' in line]
        results = [(e["tool"], e["status"]) for e in events if e.get("phase") == "result"]
        assert results == [("execute_cell", "ok"), ("execute_cell", "refused"), ("execute_cell", "busy")], events

        # a resume rebuilds the cards from the transcript: what each asked, the cell's whole source
        k.run("await a.close()")
        out = k.run("import json\nb = %escouade resume runner\n"
                    "print(json.dumps([[i.request.mcp, i.request.raw_input, i.answered_by] for i in b.conversation.items "
                    "if type(i).__name__ == 'Permission']))", timeout=60).text
        cards = json.loads(out.strip().splitlines()[-1])
        ok = {"source": "total = 6 * 7\nprint(total)", "cell_id": "c-ok", "unreviewed": True}
        assert [(c[0], c[1]["cell_id"], c[2]) for c in cards] == [
            (["escouade", "execute_cell"], "c-rm", "Exec rules via Escouade"),
            (["escouade", "execute_cell"], "c-ok", "Exec rules via Escouade"),
            (["escouade", "execute_cell"], "c-typed", "Exec rules via Escouade"),
            (None, "c-ok", "escouade_nb")], cards  # the third, refused by the server (a cell ran): answered at once
        assert cards[1][1] == ok and cards[0][1]["source"].count("x = 1\n") == 300
    finally:
        k.run("await a.close()\nawait b.close()", allow_error=True)
        k.shutdown()


def test_without_a_page_execute_cell_says_so_in_one_line(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    k = kernel_with_env(tmp_path / "ws", _env(tmp_path))
    try:
        k.run("%load_ext escouade_nb")
        k.run("a = %escouade fake --as runner\nawait a.ready()")
        wait_for(k, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        out = k.run("r = await a.send('call escouade execute_cell {\"cell_id\": \"c1\"}')\nprint(r.text)\n"
                    "print(a.pending_cards)", timeout=60).text
        first, second, *rest = out.splitlines()
        assert first.startswith("mcp__escouade__execute_cell failed:"), out
        assert "execute_cell needs this notebook open in JupyterLab 4 or Notebook 7" in first
        assert first.endswith("nothing was run") and second == "[]" and not rest
    finally:
        k.run("await a.close()", allow_error=True)
        k.shutdown()
