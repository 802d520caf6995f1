"""An agent that speaks MCP-over-ACP itself, over real pipes, through a launcher prefix (``sh -c 'exec "$@"'
sh``: the relay runs beside it and, the agent declaring ``mcpCapabilities.acp``, passes it the ``acp`` entry
untouched): the scripted agent connects with the ``serverId`` it was given, asks ``run_code``, then withdraws
the request with ACP's ``$/cancel_request`` while the card waits — the card is withdrawn, the code never runs,
and the request is answered "request cancelled". Its garbage (an unknown ``connectionId``, a request with no
params) gets a one-line JSON-RPC error and its session goes on.
"""

from __future__ import annotations

import json

from deadlines import run, until

PREFIX = ["sh", "-c", 'exec "$@"', "sh"]
INIT = ('{"jsonrpc":"2.0","id":$ID,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,'
        '"mcpCapabilities":{"acp":true}},"authMethods":[]}}')


def _mcp(rid: str, method: str, params: dict | None = None) -> str:
    inner = {"connectionId": "$CID", "method": method, **({"params": params} if params is not None else {})}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "mcp/message", "params": inner})


def test_a_withdrawn_run_code_withdraws_its_card_and_garbage_gets_errors(script, tmp_path):
    go = tmp_path / "go"
    s = script([
        {"expect": {"method": "initialize"}}, {"send": INIT},
        {"expect": {"method": "session/new"}, "capture": {"SID": "params.mcpServers.0.serverId"}},
        {"send": '{"jsonrpc":"2.0","id":$ID,"result":{"sessionId":"s1"}}'},
        {"send": '{"jsonrpc":"2.0","id":"k0","method":"mcp/message","params":{"connectionId":"forged","method":"x"}}'},
        {"expect": {"id": "k0", "error": {"code": -32602}}},
        {"send": '{"jsonrpc":"2.0","id":"k00","method":"mcp/connect"}'},
        {"expect": {"id": "k00", "error": {"code": -32602, "message": "mcp/connect: params must be an object"}}},
        {"send": '{"jsonrpc":"2.0","id":"k1","method":"mcp/connect","params":{"serverId":"$SID"}}'},
        {"expect": {"id": "k1"}, "capture": {"CID": "result.connectionId"}},
        {"send": _mcp("k2", "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "scripted", "version": "1"}})},
        {"expect": {"id": "k2", "result": {"serverInfo": {"name": "escouade"}}}},
        {"send": json.dumps({"jsonrpc": "2.0", "method": "mcp/message",
                             "params": {"connectionId": "$CID", "method": "notifications/initialized"}})},
        {"send": _mcp("k3", "tools/call", {"name": "run_code", "arguments": {"code": "withdrawn = True"}})},
        {"wait_file": str(go), "timeout": 60},
        {"send": '{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"k3"}}'},
        {"expect": {"id": "k3", "error": {"code": -32800}}, "timeout": 60},
        {"send": _mcp("k4", "tools/call", {"name": "list_variables", "arguments": {}})},
        {"expect": {"id": "k4", "result": {"isError": False}}, "timeout": 60},
    ])

    async def main() -> None:
        async with s.running(via=PREFIX, kernel_tools=True) as agent:
            await agent.ready()
            await until(lambda: agent.pending_cards, timeout=60, what="the run_code card")
            (card,) = agent.pending_cards
            assert card.request.title == "Run code in the kernel" and card.request.raw_input == {
                "code": "withdrawn = True"}
            go.write_text("")  # the agent gives up on its call now
            await until(lambda: not agent.pending_cards, timeout=60, what="the card withdrawn")
            assert card.permission.state == "cancelled" and card.permission.answered_by != "you"
            await until(lambda: any(e.get("id") == "k4" for e in s.received()), timeout=60, what="the next call")
            server = agent.live.kernel._server
            assert "withdrawn" not in server._user_ns()[0]  # never run
            assert agent.kernel_tools_state[0] == "connected"
    run(main())
    s.assert_ok()
