"""Conversations exported as notebooks (engine/export, ``Agent.to_notebook``,
``%escouade export``): valid nbformat, readable markdown, cards with who answered, and
the code run through the kernel's ``run_code`` as code cells that run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from deadlines import run

from escouade_nb.core.conversation import Conversation
from escouade_nb.engine.agent import Agent, AgentError
from escouade_nb.engine.export import fenced, no_raw_html, notebook_cells, to_notebook
from escouade_nb.manifest import discover, locate_program


def read(path: Path):
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    return nb


def sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def test_export_of_a_real_conversation(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": 1, "id": "load", "metadata": {}, "outputs": [],
                   "source": "df = 1"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    out = tmp_path / "out" / "talk.ipynb"
    out.parent.mkdir()

    async def go():
        ref = discover().find("fake")
        agent = Agent(ref, program=locate_program(ref.harness), cwd=tmp_path, record=False)
        try:
            await agent.ready()
            await agent.send("hello <script>alert(1)</script>")
            await agent.send("think")
            turn = agent.send("edit notes.txt")
            (await agent.next_permission(timeout=60)).choose("allow_once")
            await turn
            turn = agent.send("write notebook nb.ipynb")
            (await agent.next_permission(timeout=60)).choose("allow_once")
            await turn
            turn = agent.send("run rm -rf build")
            (await agent.next_permission(timeout=60)).choose("reject_once")
            await turn
            with pytest.raises(AgentError):
                await agent.send("crash")  # a notice with the agent's stderr as its detail
            written = await agent.to_notebook(out, title="Sales review")
            assert written == out
            with pytest.raises(FileExistsError, match="exists already; export with force=True"):
                await agent.to_notebook(out)
            with pytest.raises(ValueError, match="does not end in .ipynb"):
                await agent.to_notebook(tmp_path / "talk.md")
            with pytest.raises(FileNotFoundError, match="does not exist"):
                await agent.to_notebook(tmp_path / "nowhere" / "x.ipynb")
            return len(agent.conversation.items)
        finally:
            await agent.close()
    items = run(go())
    nb = read(out)
    cells = sources(nb)
    assert nb.nbformat == 4 and nb.nbformat_minor == 5
    assert nb.metadata["escouade"]["name"] == "fake" and nb.metadata["escouade"]["harness"].endswith(":fake")
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert len({c.id for c in nb.cells}) == len(nb.cells) == items + 1  # a title, then one cell an item
    kind, title = cells[0]
    assert title.startswith("# Sales review\n\nagent `fake` · Fake 0.1.0 · folder ")
    assert cells[1] == ("markdown", "**you:**\n\n> hello &lt;script>alert(1)&lt;/script>")
    reply = cells[2][1]
    assert reply.startswith("Hello! I am the **fake** agent.\n\nYou said: hello &lt;script>") and "<script" not in reply
    assert ("markdown", "<details><summary>Fake thinks…</summary>\n\nLet me think about this step by step.\n\n"
                        "</details>") in cells
    text = "\n\n".join(src for _k, src in cells)
    assert (f"**tool** · Edit notes.txt · *edit, completed*\n\n**new file** `{tmp_path / 'notes.txt'}`\n\n"
            "```diff\n+Edited by the fake agent.\n```") in text
    assert "**Fake asks permission** · Edit notes.txt — **Allowed once by you**" in text
    assert f"**notebook** `{tmp_path / 'nb.ipynb'}`: 1 cell changed, 1 added" in text
    assert "*cell 1 (code, id load) changed* — execution count 1 → none\n\n```diff\n@@ -1 +1,2 @@\n df = 1\n" \
           "+# edited by the fake agent\n```" in text
    assert "**Fake asks permission** · Run rm -rf build — **Rejected by you**" in text
    assert "> **error:** Agent exited with code 3" in text and "simulated crash (exit code 3)" in text
    assert all(k == "markdown" for k, _ in cells)  # nothing here ran in the kernel
    # replaced with force; nbconvert renders it
    run(to_notebook(Conversation(), out, force=True))
    assert len(read(out).cells) == 1 and not [p for p in out.parent.iterdir() if p.name != "talk.ipynb"]


def run_code_conversation() -> Conversation:
    """The wire of an agent calling the kernel's run_code (the fake's ``run code`` shape:
    its own permission request titled ``mcp__escouade__run_code``, then the result as text
    content), once allowed, once denied."""
    conv = Conversation()
    conv.add_user_message([{"type": "text", "text": "Which regions lost revenue?"}])
    options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
               {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
    for n, (code, answer, result) in enumerate((
            ("total = 6 * 7\nprint(total)", "allow", "42"),
            ("import shutil; shutil.rmtree('/')", "no", None)), start=1):
        raw = {"code": code}
        conv.apply({"sessionUpdate": "tool_call", "toolCallId": f"rc{n}", "title": "mcp__escouade__run_code",
                    "kind": "other", "status": "pending", "rawInput": raw})
        perm = conv.add_permission({"toolCallId": f"rc{n}", "title": "mcp__escouade__run_code", "rawInput": raw},
                                   options)
        conv.resolve_permission(perm, "selected", answer, answered_by="you")
        if result is not None:
            conv.apply({"sessionUpdate": "tool_call_update", "toolCallId": f"rc{n}", "status": "completed",
                        "content": [{"type": "content", "content": {"type": "text", "text": result}}]})
        else:
            conv.apply({"sessionUpdate": "tool_call_update", "toolCallId": f"rc{n}", "status": "failed"})
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "The total is 42."}})
    return conv


@pytest.mark.kernel
def test_run_code_becomes_a_code_cell_that_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "rc.ipynb"
    run(to_notebook(run_code_conversation(), out, agent={"name": "claude", "display_name": "Claude"}))
    nb = read(out)
    cells = sources(nb)
    assert [k for k, _ in cells] == ["markdown", "markdown", "markdown", "code", "markdown", "markdown",
                                     "markdown", "markdown"]
    assert cells[2][1] == "**Claude asks permission** · mcp__escouade__run_code — **Allowed once by you**  \n" \
                          "*offered: Allow, Reject*"
    code = nb.cells[3]
    assert code.source == "total = 6 * 7\nprint(total)" and code.outputs == [] and code.execution_count is None
    assert code.metadata["escouade"] == {"run_code": True, "toolCallId": "rc1", "agent": "claude"}
    assert cells[4][1] == "**output** of the code above, when the agent ran it (*completed*):\n\n```\n42\n```"
    assert cells[5][1].startswith("**Claude asks permission** · mcp__escouade__run_code — **Rejected by you**")
    assert cells[6][1] == ("**run_code** · *Rejected by you, not run* — the code the agent asked to run:\n\n"
                           "```python\nimport shutil; shutil.rmtree('/')\n```")
    assert cells[7][1] == "The total is 42."
    # the notebook runs again: the code cell's output is the agent's
    import nbclient

    ran = nbclient.NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": tmp_path}})
    ran.execute()
    assert nb.cells[3].outputs[0]["text"] == "42\n"


def test_nbconvert_renders_the_export(tmp_path: Path) -> None:
    out = tmp_path / "rc.ipynb"
    conv = run_code_conversation()
    conv.apply({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": " <script>alert(1)</script>"}})
    run(to_notebook(conv, out))
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-nbconvert"), "--to", "html", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "rc.html").read_text()
    assert "Allowed once by you" in html and "The total is 42." in html
    assert html.count('class="jp-Cell jp-CodeCell') == 1 and "shutil" in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html  # the agent's HTML is text


def test_markdown_helpers() -> None:
    assert fenced("a ``` b") == "````\na ``` b\n````"
    assert fenced("x\n", "diff") == "```diff\nx\n```"
    text = "a <b> `<kept>` and\n```html\n<div>kept</div>\n```\n<i>"
    assert no_raw_html(text) == "a &lt;b> `<kept>` and\n```html\n<div>kept</div>\n```\n&lt;i>"
    conv = Conversation()
    conv.add_notice("plain", level="info")
    assert notebook_cells(conv.items) == [{"cell_type": "markdown", "id": "notice-1", "metadata": {},
                                           "source": "> **info:** plain"}]


def test_the_export_says_rewound_wherever_the_view_does() -> None:
    """A turn a rewind undid: the view marks its prompt (a badge) and every item of it (a dashed
    rule), the text form its prompt "you (rewound)"; the export said nothing of it (on main it
    marked steered turns only): its prompt reads ``**you (rewound):**``, every other cell of it
    begins ``*(rewound)*``, the turn before it is unmarked."""
    from escouade_nb.core.render_text import render_items

    conv = Conversation()
    conv.add_user_message([{"type": "text", "text": "first"}])
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Kept."}})
    conv.close_messages()
    conv.add_user_message([{"type": "text", "text": "second"}], steered=True)
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Undone."}})
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Write a.py", "kind": "edit",
                "status": "completed"})
    assert conv.mark_rewound(2) == 1
    sources = [c["source"] for c in notebook_cells(conv.items)]
    assert sources[0].startswith("**you:**") and sources[1] == "Kept."
    assert sources[2].startswith("**you (steered, rewound):**")
    assert sources[3] == "*(rewound)*\n\nUndone."
    assert sources[4].startswith("*(rewound)*\n\n") and "Write a.py" in sources[4]
    assert "you (steered) (rewound)" in render_items(conv.items)  # the text form marks it too


# -- %escouade export in a real kernel --------------------------------------------------------------

@pytest.mark.kernel
def test_export_magic_in_a_kernel(tmp_path: Path) -> None:
    from kernel_client import Kernel, wait_for

    k = Kernel(tmp_path)
    try:
        k.run("%load_ext escouade_nb")
        k.run("a = %escouade fake --as scribe\nawait a.ready()\nawait a.send('hello from the kernel')\n"
              "turn = a.send('run code\\nprint(6 * 7)')\ncard = await a.next_permission(timeout=60)\n"
              "card.choose('allow_once')\nawait turn")
        shown = k.run("%escouade export scribe talk.ipynb").text
        assert shown.strip() == "exporting scribe's conversation to talk.ipynb…"
        wait_for(k, "__import__('os').path.exists('talk.ipynb')")
        nb = read(tmp_path / "talk.ipynb")
        assert nb.cells[1].source == "**you:**\n\n> hello from the kernel"
        # the kernel's run_code, through its MCP server and its card: a code cell, then its output
        codes = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        assert len(codes) == 1 and nb.cells[codes[0]].source == "print(6 * 7)"
        assert nb.cells[codes[0] - 1].source.startswith("**Fake asks permission** · Run code in the kernel — "
                                                        "**Allowed by you: Run**")
        assert "42" in nb.cells[codes[0] + 1].source
        refused = {
            "%escouade export scribe talk.ipynb": "escouade: talk.ipynb exists already: add --force to replace it",
            "%escouade export nobody x.ipynb": "escouade: no agent named 'nobody'",
            "%escouade export scribe talk.md": "escouade: export writes a Jupyter notebook: talk.md does not end "
                                               "in .ipynb",
            "%escouade export scribe": "escouade: export takes one agent name and one PATH.ipynb",
        }
        for line, said in refused.items():
            res = k.run(line)
            assert res.error is None and said in res.text, (line, res.text)
        before = (tmp_path / "talk.ipynb").stat().st_mtime_ns
        k.run("await a.send('second')\n%escouade export scribe talk.ipynb --force")
        wait_for(k, f"__import__('os').stat('talk.ipynb').st_mtime_ns != {before}")
        assert "> second" in "".join(c.source for c in read(tmp_path / "talk.ipynb").cells)
        k.run("await a.close()")
    finally:
        k.shutdown()
    assert sorted(os.listdir(tmp_path)) == ["talk.ipynb"]
