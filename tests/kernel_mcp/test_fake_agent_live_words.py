"""The fake agent's words for the live-notebook tools (escouade_nb/tools/fake_live.py), the agent
a real process over pipes, the kernel's MCP server real: with a page of our own standing for the
notebook's (tests/kernel_mcp/test_live_cell_edits.py's, which checks the hash as the real page does)
each word makes its MCP call with the arguments documented in docs/fake-agent.md (an edit or a
delete names the hash it read); without a page each tool answers its one-line error."""

from __future__ import annotations

import json
from typing import Any

from acp import text_block
from acp_clients import RecordingClient
from deadlines import run
from test_kernel_server import fake_agent, http_entry
from test_live_cell_edits import Owner2, Page, sha

from escouade_nb.kernel_mcp.server import KernelServer


def asked(client: RecordingClient) -> list[tuple[str, Any]]:
    return [(call.title, call.raw_input) for call, _options in client.permissions]


async def say(conn: Any, sid: str, client: RecordingClient, words: str) -> str:
    client.updates.clear()
    client.permissions.clear()
    reply = await conn.prompt(session_id=sid, prompt=[text_block(words)])
    assert reply.stop_reason == "end_turn"
    return client.text()


def test_the_fake_agents_words_read_insert_edit_delete_and_execute_cells_of_the_open_notebook(tmp_path):
    async def main() -> None:
        page = Page()
        server = await KernelServer(namespace={"__session__": str(tmp_path / "nb.ipynb")}, live=page).start()
        owner = Owner2()
        client = RecordingClient("allow-once")
        try:
            async with fake_agent(client, tmp_path, [http_entry(server, server.grant(owner))]) as (conn, sid, _):
                text = await say(conn, sid, client, "live cells")
                assert asked(client) == [("mcp__escouade__notebook_cells", {"source": "live"})]
                assert text.startswith("mcp__escouade__notebook_cells returned: ")
                read = json.loads(text.split(": ", 1)[1])
                assert [(c["id"], c["sha256"]) for c in read["cells"]] == [("a1", sha("df = load()"))]

                text = await say(conn, sid, client, "insert cell after a1\n```python\ndf.plot()\n```")
                assert asked(client) == [("mcp__escouade__insert_cell",
                                          {"source": "df.plot()", "cell_type": "code", "after_cell_id": "a1"})]
                assert json.loads(text.split(": ", 1)[1])["status"] == "pending review"
                assert page.cells[1]["source"] == "df.plot()" and page.cells[1]["pending"] == "insert"

                await say(conn, sid, client, "insert markdown cell # Revenue")
                assert page.cells[-1]["cell_type"] == "markdown" and page.cells[-1]["source"] == "# Revenue"

                page.before = "df = load()"
                text = await say(conn, sid, client, "edit cell a1\ndf = load('2024')")
                assert asked(client) == [
                    ("mcp__escouade__notebook_cells", {"source": "live"}),
                    ("mcp__escouade__edit_cell", {"cell_id": "a1", "source": "df = load('2024')",
                                                  "base_sha256": sha("df = load()")})]
                assert page.cells[0]["source"] == "df = load('2024')" and page.cells[0]["pending"] == "edit"
                assert "pending review" in text

                text = await say(conn, sid, client, "delete cell n1")
                assert asked(client)[-1] == ("mcp__escouade__delete_cell",
                                             {"cell_id": "n1", "base_sha256": sha("df.plot()")})
                assert json.loads(text.split(": ", 1)[1])["status"] == "removed"  # its own pending cell

                text = await say(conn, sid, client, "edit cell zz\nx = 1")
                assert text == "The open notebook has no cell 'zz'; I changed nothing."

                await say(conn, sid, client, "execute cell a1")
                assert asked(client) == [("mcp__escouade__execute_cell", {"cell_id": "a1"})]
                assert [(e.cell_id, e.change) for e in owner.review.pending] == [("n2", "insert"), ("a1", "edit")]
        finally:
            await server.aclose()

    run(main(), timeout=90)


def test_without_a_page_the_fake_agents_live_words_get_the_one_line_errors(tmp_path):
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        client = RecordingClient("allow-once")
        try:
            async with fake_agent(client, tmp_path, [http_entry(server, server.grant(Owner2()))]) as (conn, sid, _):
                for words, tool in [("live cells", "notebook_cells"), ("insert cell print(1)", "insert_cell"),
                                    ("edit cell a1 x = 2", "notebook_cells")]:
                    text = await say(conn, sid, client, words)
                    assert text.startswith(f"mcp__escouade__{tool} failed: "), text
                    assert "open in JupyterLab 4" in text and "\n" not in text, text
        finally:
            await server.aclose()

    run(main(), timeout=90)
