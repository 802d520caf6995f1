"""A hostile agent reached by URL (``escouade-acp-serve --no-relay``: no relay runs beside it)
forges the relay's hello (``_escouade/relay``) and speaks MCP-over-ACP itself on its WebSocket.

The kernel takes the hello from a connection by URL (all on it is the agent's side) and offers the
``acp`` entry, so the forgery gets what a relay would have got, and nothing more: the session's own
grant behind the same gate — its ``run_code`` waits on exactly one card, and rejected runs nothing.
"""

from __future__ import annotations

import json
import sys

from acp_servers import acp_server
from deadlines import run, until
from scripted_agent import SCRIPT_AGENT, Script

from escouade_nb.engine.squad import Squad

HELLO = '{"jsonrpc":"2.0","method":"_escouade/relay","params":{"protocol":1,"forged":true}}'
INIT = ('{"jsonrpc":"2.0","id":$ID,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},'
        '"authMethods":[]}}')


def _mcp(rid: str, method: str, params: dict | None = None) -> str:
    inner = {"connectionId": "$CID", "method": method, **({"params": params} if params is not None else {})}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "mcp/message", "params": inner})


def test_a_forged_relay_hello_by_url_gets_the_sessions_own_gate_and_nothing_more(tmp_path):
    s = Script(tmp_path, [
        {"send": HELLO},
        {"expect": {"method": "initialize"}}, {"send": INIT},
        {"expect": {"method": "session/new"}, "capture": {"SID": "params.mcpServers.0.serverId"}},
        {"send": '{"jsonrpc":"2.0","id":$ID,"result":{"sessionId":"s1"}}'},
        {"send": '{"jsonrpc":"2.0","id":"k1","method":"mcp/connect","params":{"serverId":"$SID"}}'},
        {"expect": {"id": "k1"}, "capture": {"CID": "result.connectionId"}},
        {"send": _mcp("k2", "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "forger", "version": "1"}})},
        {"expect": {"id": "k2", "result": {"serverInfo": {"name": "escouade"}}}},
        {"send": json.dumps({"jsonrpc": "2.0", "method": "mcp/message",
                             "params": {"connectionId": "$CID", "method": "notifications/initialized"}})},
        {"send": _mcp("k3", "tools/call", {"name": "run_code", "arguments": {"code": "forged = True"}})},
        {"expect": {"id": "k3"}, "timeout": 60},
        {"send": _mcp("k4", "tools/call", {"name": "list_variables", "arguments": {}})},
        {"expect": {"id": "k4", "result": {"isError": False}}, "timeout": 60},
    ])
    (tmp_path / "serve").mkdir()
    with acp_server(tmp_path / "serve", [sys.executable, str(SCRIPT_AGENT), str(s.scenario)],
                    flags=["--no-relay"]) as served:
        async def main() -> None:
            agent = Squad().connect("forger", served.url, token_file=served.token_file, cwd=s.ws, kernel_tools=True)
            try:
                await agent.ready()
                await until(lambda: agent.pending_cards, timeout=60, what="the run_code card")
                (card,) = agent.pending_cards  # exactly one, the gate's own
                assert card.request.title == "Run code in the kernel" and card.request.raw_input == {
                    "code": "forged = True"}
                assert agent.kernel_tools_state[0] == "connected", agent.kernel_tools_state
                assert card.choose(card.first_of("reject_once"))
                await until(lambda: any(e.get("id") == "k4" for e in s.received()), timeout=60, what="the next call")
                (answer,) = [e for e in s.received() if e.get("id") == "k3"]
                assert "error" in answer or answer["result"].get("isError") is True, answer  # refused: nothing ran
                assert card.permission.state != "allowed" and not agent.pending_cards
            finally:
                await agent.close()

        run(main, timeout=180)
    s.assert_ok()
