"""The edit tools (``insert_cell``, ``edit_cell``, ``delete_cell``) go through the gate and
the record like any call, in a real kernel with the shipped ``fake`` agent and its real MCP
calls (``call escouade TOOL {json}``: it asks permission first, as claude-agent does): a
rule plugin's denial wins (the agent is told, the server never called); an allowed edit is
not asked of the user (escouade_nb allows it after the rule plugins: it is reviewed after),
and with no notebook page (a kernel started by jupyter_client) it fails in one line saying
nothing was changed; the journal and the transcript have each call."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernel_client import kernel_with_env, wait_for

pytestmark = pytest.mark.kernel

PLUGIN = textwrap.dedent('''
    from escouade_nb.plugin_sdk import ask, decide, deny, run

    @decide
    def rules(req):
        if req.tool == "mcp__escouade__delete_cell":
            return deny("agents do not delete cells in this notebook")
        return ask()

    run()
''')


def test_edits_pass_the_rule_plugins_are_not_asked_and_are_on_record(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    plugin = tmp_path / "plugins" / "edit-rules"
    plugin.mkdir(parents=True)
    (plugin / "plugin.py").write_text(PLUGIN)
    (plugin / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.edit-rules", "name": "Edit rules", "version": "1.0.0",
        "permissions": {"decide": True}, "program": {"python": "plugin.py"}}))
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
           "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal")}
    k = kernel_with_env(tmp_path / "ws", env)
    try:
        k.run("%load_ext escouade_nb")
        assert "on" in k.run(f"%escouade plugins on edit-rules --project {tmp_path / 'ws'}").text
        k.run("a = %escouade fake --as ed\nawait a.ready()")
        wait_for(k, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        perms = "[(i.answered_by, i.message) for i in r.items if type(i).__name__ == 'Permission']"
        out = k.run("r = await a.send('call escouade insert_cell {\"source\": \"df.plot()\"}')\n"
                    f"print(r.text)\nprint({perms})\nprint(a.pending_cards)", timeout=60).text
        first, *_ = out.splitlines()
        assert first.startswith("mcp__escouade__insert_cell failed:") and "changing a cell needs this notebook open" in first, out
        assert "nothing was changed" in first
        assert "escouade_nb (an edit of the open notebook, reviewed after)" in out  # not asked of the user
        assert out.strip().endswith("[]")
        out = k.run("r = await a.send('call escouade delete_cell {\"cell_id\": \"c1\", \"base_sha256\": \"00\"}')\n"
                    f"print(r.text)\nprint({perms})", timeout=60).text
        assert "I did not call mcp__escouade__delete_cell: permission refused" in out
        assert "('Edit rules via Escouade', 'agents do not delete cells in this notebook')" in out

        journal = [json.loads(line) for line in (tmp_path / "journal" / "kernel-tools.jsonl").read_text().splitlines()]
        insert = [e for e in journal if e["tool"] == "mcp__escouade__insert_cell"]
        assert [(e["verdict"], e.get("by")) for e in insert] == [("allowed", "escouade_nb")], journal
        (path,) = (tmp_path / "transcripts").glob("ed-*.jsonl")
        events = [json.loads(line)["data"] for line in path.read_text(encoding="utf-8").splitlines()
                  if '"kernel_tool"' in line]
        edits = [e for e in events if e.get("phase") == "edit"]
        assert [(e["tool"], e["status"], e["arguments"]["source"]) for e in edits] == \
            [("insert_cell", "error", "df.plot()")], events
        assert "nothing was changed" in edits[0]["detail"]
    finally:
        k.run("await a.close()", allow_error=True)
        k.shutdown()
