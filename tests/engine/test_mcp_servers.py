"""Your own MCP servers (``mcp.json``) reach the agent on session/new and session/load,
their secrets never reach a transcript; every agent's own naming of an MCP tool is
recognised as ``mcp__<server>__<tool>`` for rule plugins."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from scripted_agent import INIT_RESULT, run

from escouade_nb.manifest.mcp_servers import read_mcp_config, secrets_of, to_acp
from escouade_nb.manifest.models import ManifestError
from escouade_nb.permissions.request import mcp_tool_of, normalise

CONFIG = {"mcpServers": {
    "files": {"command": "npx", "args": ["-y", "server-files", "."], "env": {"FILES_TOKEN": "tok-files-123456"}},
    "search": {"type": "http", "url": "https://search.example/mcp",
               "headers": {"Authorization": "Bearer search-secret-987"}},
    "legacy": {"url": "http://127.0.0.1:9/sse", "type": "sse"},
}}


def test_mcp_json_in_the_common_form_becomes_acp_entries(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(CONFIG))
    servers = read_mcp_config(path)
    assert list(servers) == ["files", "search", "legacy"]
    assert to_acp("files", servers["files"]) == {
        "name": "files", "command": "npx", "args": ["-y", "server-files", "."],
        "env": [{"name": "FILES_TOKEN", "value": "tok-files-123456"}]}
    assert to_acp("search", servers["search"]) == {
        "type": "http", "name": "search", "url": "https://search.example/mcp",
        "headers": [{"name": "Authorization", "value": "Bearer search-secret-987"}]}
    assert to_acp("legacy", servers["legacy"])["type"] == "sse"
    assert secrets_of(to_acp("files", servers["files"])) == ["tok-files-123456"]
    assert read_mcp_config(tmp_path / "absent.json") == {}


@pytest.mark.parametrize("text, field, words", [
    ('{"mcpServers": {"a": {"args": []}}}', "mcpServers.a", "command"),
    ('{"mcpServers": {"a": {"type": "http", "url": "ftp://x"}}}', "mcpServers.a.url", "pattern"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"K": 3}}}}', "mcpServers.a.env.K", "string"),
    ('{"mcpServers": {"a": {"command": "x", "cwd": "/"}}}', "mcpServers.a.cwd", "xtra"),
    ('{"mcpServers": [', None, "invalid JSON at line 1"),
    ('[]', None, "JSON object"),
])
def test_a_bad_mcp_json_names_the_file_and_the_field(tmp_path, text, field, words):
    path = tmp_path / "mcp.json"
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        read_mcp_config(path)
    assert info.value.path == path
    if field:
        assert info.value.field and info.value.field.startswith(field), info.value
    assert words in str(info.value), str(info.value)


def _new(servers: list) -> str:
    return ('C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":%s}}\n'
            'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}' % json.dumps(servers))


INIT_HTTP = INIT_RESULT.replace('"loadSession":false,', '"loadSession":false,"mcpCapabilities":{"http":true},')
INIT_C = 'C> {"jsonrpc":"2.0","id":0,"method":"initialize"}'


def test_your_mcp_servers_reach_session_new_and_their_secrets_no_transcript(tmp_path, script, monkeypatch):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(CONFIG))
    monkeypatch.setenv("ESCOUADE_NB_MCP_CONFIG", str(config))
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    expected = [to_acp(n, s) for n, s in read_mcp_config(config).items() if n != "legacy"]
    s = script("\n".join([INIT_C, INIT_HTTP, _new(expected)]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            texts = [getattr(i, "text", "") for i in agent.conversation.items]
            assert any("'legacy' (sse) was not given" in t for t in texts), texts  # said once, not sent
            return agent.transcript.path

    path = run(go())
    s.assert_ok()
    (new,) = [m for m in s.received() if m.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == expected  # the secrets went to the agent, as they must
    written = path.read_text()
    assert "session/new" in written
    for secret in ("tok-files-123456", "search-secret-987"):
        assert secret not in written
    assert "«redacted»" in written


def test_mcp_none_gives_none_of_your_servers(tmp_path, script, monkeypatch):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(CONFIG))
    monkeypatch.setenv("ESCOUADE_NB_MCP_CONFIG", str(config))
    s = script("\n".join([INIT_C, INIT_HTTP, _new([])]))

    async def go():
        async with s.running(mcp=[]) as agent:
            await agent.ready()

    run(go())
    s.assert_ok()


def _call(title=None, raw=None, meta=None, text=None, kind="other"):
    content = [{"type": "content", "content": {"type": "text", "text": text}}] if text else []
    return SimpleNamespace(title=title, kind=kind, raw_input=raw, meta=meta, content=content, locations=[], extra={},
                           mcp=None)


SERVERS = {"kernel": ("list_variables", "inspect_variable", "notebook_cells", "run_code"), "files": ()}


@pytest.mark.parametrize("agent, call", [  # as each released agent asked (reference: mcp-in-the-kernel §4)
    ("claude-agent", _call("mcp__kernel__inspect_variable", {"name": "df"},
                           meta={"claudeCode": {"toolName": "mcp__kernel__inspect_variable"}})),
    ("codex", _call("Approve MCP tool call", {"server_name": "kernel", "request": {
        "mode": "form", "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_params": {"name": "df"}}}},
        text='Allow the kernel MCP server to run tool "inspect_variable"? It reads a variable.')),
    ("codex tool call", _call("Tool: kernel/inspect_variable",
                              {"server": "kernel", "tool": "inspect_variable", "arguments": {"name": "df"}})),
    ("gemini", _call("inspect_variable (kernel MCP Server)", text='{"name":"df"}')),
    ("opencode", _call("kernel_inspect_variable", {"name": "df"})),
    ("fast-agent", _call("kernel/inspect_variable", {"name": "df"})),
    ("fast-agent model", _call("kernel__inspect_variable", {"name": "df"})),
    ("kimi", _call('inspect_variable: {"name": "df"}', text="Call MCP tool `inspect_variable`.")),
])
def test_every_agents_name_of_an_mcp_tool_is_recognised(agent, call):
    assert mcp_tool_of(call, SERVERS) == ("kernel", "inspect_variable"), agent
    call.mcp = mcp_tool_of(call, SERVERS)
    norm = normalise(call, {})
    assert (norm.tool, norm.kind) == ("mcp__kernel__inspect_variable", "mcp")
    if agent in ("claude-agent", "codex", "codex tool call", "opencode", "fast-agent"):
        assert norm.input == {"name": "df"}, agent


def test_tools_of_other_servers_and_plain_tools_are_not_taken_for_the_kernels():
    assert mcp_tool_of(_call("mcp__files__read", {}), SERVERS) == ("files", "read")
    assert mcp_tool_of(_call("Read notes.txt", {"path": "notes.txt"}, kind="read"), SERVERS) is None
    assert mcp_tool_of(_call("Bash", {"command": "ls"}, kind="execute"), SERVERS) is None
    assert mcp_tool_of(_call("read", {}), SERVERS) is None  # a bare name of a server whose tools are unknown
    assert mcp_tool_of(_call("mcp__other__run_code", {}), SERVERS) is None


def test_a_server_of_your_mcp_json_reaches_the_agent_which_calls_it(tmp_path, monkeypatch):
    """The shipped fake agent, given a stdio server of mcp.json (a real MCP server built
    with the SDK), starts it with the entry's env and calls its tool; its permission
    request is a card of yours, named mcp__files__echo for rule plugins."""
    import asyncio
    import sys
    from pathlib import Path

    from escouade_nb.engine.agent import Agent
    from escouade_nb.manifest import discover, locate_program

    server = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_echo_server.py"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {
        "command": sys.executable, "args": [str(server)], "env": {"ECHO_TOKEN": "tok-echo-4242"}}}}))
    monkeypatch.setenv("ESCOUADE_NB_MCP_CONFIG", str(config))

    async def go():
        ref = discover().find("fake")
        agent = Agent(ref, program=locate_program(ref.harness), cwd=tmp_path)
        try:
            await agent.ready()
            turn = agent.send('call files echo {"text": "hi"}')
            card = await agent.next_permission(timeout=60)
            assert card.tool_call.mcp == ("files", "echo")
            from escouade_nb.permissions.request import normalise
            assert normalise(card.tool_call, {}).tool == "mcp__files__echo"
            card.choose("allow_once")
            return (await asyncio.wait_for(turn, 30)).text
        finally:
            await agent.close()

    text = run(go(), timeout=60)
    assert "echo: hi (TOKEN=tok-echo-4242)" in text
