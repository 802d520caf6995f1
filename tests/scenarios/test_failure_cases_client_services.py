"""The public failure cases of ACP clients (F01–F15) about the client's services to the agent: fs writes fenced
to the private project (F08), terminal output truncation and exit status (F09); each played by the scripted
agent (``tests/scripted_agent.py``, its notation there) over real pipes against the real
:class:`~escouade_nb.engine.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import re
import sys

from scripted_agent import alive, responses_to, run

# -- F08 ----------------------------------------------------------------------------------------
F08 = """
[P]
A> {"jsonrpc":"2.0","id":110,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS/../escape.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":110,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":111,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS-evil/pwn.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":111,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":112,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS/link/pwn.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":112,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":113,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"sub/ok.txt","content":"fine\\n"}}
C> {"jsonrpc":"2.0","id":113,"result":"$ANY","error":"$ABSENT"}
A> {"jsonrpc":"2.0","id":114,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"$OUT/secret.txt"}}
C> {"jsonrpc":"2.0","id":114,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":115,"method":"fs/write_text_file","params":{"sessionId":"nope","path":"$WS/a.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":115,"error":"$ANY","result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":116,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"../ws-evil/rel.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":116,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F08_fs_writes_are_fenced_to_the_private_project(tmp_path, script):
    """A private project's folder is a fence: ``..``, a sibling prefix, a symlink out,
    a read outside, another session — refused with an error and no side effect; a
    relative path inside is resolved against the session folder and written."""
    from escouade_nb.manifest.project import Project

    ws = tmp_path / "ws"
    out = tmp_path / "out"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    ws.mkdir()
    (ws / "link").symlink_to(out)
    (tmp_path / "ws-evil").mkdir()
    s = script(F08, variables={"OUT": str(out)})

    async def go():
        agent = s.agent(project=Project.for_folder(ws, private=True))  # as Squad.start(..., private=True) does
        try:
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "ws-evil" / "pwn.txt").exists() and not (tmp_path / "ws-evil" / "rel.txt").exists()
    assert not (out / "pwn.txt").exists()
    assert not (ws / "a.txt").exists()
    assert (ws / "sub" / "ok.txt").read_bytes() == b"fine\n"
    for rpc_id in range(110, 117):  # exactly one answer each
        assert len(responses_to(s.received(), rpc_id)) == 1, rpc_id


# -- F09 ----------------------------------------------------------------------------------------
F09 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":130,"method":"terminal/create","params":{"sessionId":"s1","command":"$PYTHON","args":["-c","import sys; sys.stdout.buffer.write(('é'*3000+'END').encode()); sys.exit(7)"],"env":[],"cwd":"$WS","outputByteLimit":1000}}
!> {"expect": {"jsonrpc":"2.0","id":130,"result":{"terminalId":"$ANY"}}, "capture": {"T1": "result.terminalId"}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"r1","title":"Run the script","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"$T1"}]}}}
A> {"jsonrpc":"2.0","id":131,"method":"terminal/wait_for_exit","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":131,"result":{"exitCode":7}}
A> {"jsonrpc":"2.0","id":132,"method":"terminal/output","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":132,"result":{"truncated":true,"exitStatus":{"exitCode":7}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"r1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":133,"method":"terminal/create","params":{"sessionId":"s1","command":"sleep","args":["30"],"cwd":"$WS"}}
!> {"expect": {"jsonrpc":"2.0","id":133,"result":{"terminalId":"$ANY"}}, "capture": {"T2": "result.terminalId"}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"r2","title":"sleep 30","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"$T2"}]}}}
A> {"jsonrpc":"2.0","id":134,"method":"terminal/kill","params":{"sessionId":"s1","terminalId":"$T2"}}
C> {"jsonrpc":"2.0","id":134,"result":"$ANY"}
A> {"jsonrpc":"2.0","id":135,"method":"terminal/wait_for_exit","params":{"sessionId":"s1","terminalId":"$T2"}}
C> {"jsonrpc":"2.0","id":135,"result":"$ANY"}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"r2","status":"failed"}}}
A> {"jsonrpc":"2.0","id":136,"method":"terminal/release","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":136,"result":"$ANY"}
A> {"jsonrpc":"2.0","id":137,"method":"terminal/output","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":137,"error":"$ANY","result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F09_terminal_output_truncation_and_exit_status(script):
    from escouade_nb.widgets import AgentView

    s = script(F09, variables={"PYTHON": sys.executable})

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            terminals = agent.client.terminals
            sleeper = next(t for t in terminals.terminals if t.command == "sleep")
            assert not alive(sleeper.pid)
            assert sleeper.output_byte_limit <= 1 << 20  # the client's own ceiling when none is asked
            # the tool cards that embed the terminals show how they ended
            calls = agent.conversation.tool_calls
            await asyncio.sleep(0.1)
            drawn = {key: html for key, html, _meta in view.state()["items"]}
            first = drawn[view.feed.key(calls["r1"])]
            assert "END" in first and re.search(r"exit(ed)?( with)?( code)?:? 7\b", first, re.I), first
            second = drawn[view.feed.key(calls["r2"])]
            assert re.search(r"killed by SIG(TERM|KILL)", second), second
        assert not alive(sleeper.pid)

    run(go())
    s.assert_ok()
    sent = s.received()
    (waited,) = responses_to(sent, 131)
    assert waited["result"].get("exitCode") == 7 and waited["result"].get("signal") is None
    (output,) = responses_to(sent, 132)
    text = output["result"]["output"]
    assert text == "é" * 498 + "END" and len(text.encode()) == 999
    assert output["result"]["truncated"] is True
    assert output["result"]["exitStatus"].get("exitCode") == 7
    (killed,) = responses_to(sent, 135)
    assert killed["result"].get("exitCode") is None and killed["result"].get("signal") in ("SIGKILL", "SIGTERM")
    (gone,) = responses_to(sent, 137)
    assert "error" in gone
