"""The public failure cases of ACP clients (F01–F15) about the wire and the process: long lines and split UTF-8
(F02), updates before the session/new answer (F05), an agent dying mid-turn after flooding stderr (F07), the
protocol version (F12); each played by the scripted agent (``tests/scripted_agent.py``, its notation there)
over real pipes against the real :class:`~escouade_nb.engine.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest
from scripted_agent import P_INIT, P_NEW, _chunk, alive, run, until

from escouade_nb.core.conversation import Notice
from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import Agent, AgentError, AgentExited


# -- F02 ----------------------------------------------------------------------------------------
F02 = f"""
[P]
A> {_chunk("x" * 200000)}
-- the next line goes one byte per write, so é, 世, 界 and 🚀 are split across reads
A~> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"héllo 世界 🚀"}}}}}}}}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {_chunk("fine")}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F02_long_line_and_split_utf8(script):
    s = script(F02)

    async def go():
        async with s.running() as agent:
            first = await agent.send("go")
            assert first.stop_reason == "end_turn"
            assert first.text == "x" * 200000 + "héllo 世界 🚀"
            assert "\ufffd" not in first.text
            second = await agent.send("again")  # the connection is still usable
            assert second.stop_reason == "end_turn" and second.text == "fine"
            assert agent.transport.skipped_count == 0
            assert agent.status == "idle" and agent.alive
            assert not [i for i in agent.conversation.items if isinstance(i, Notice)]

    run(go())
    s.assert_ok()


F02_OVER_CAP = f"""
[P]
A> {_chunk("a little")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn","_meta":{{"pad":"{"y" * (3 << 20)}"}}}}}}
!> {{"hang": true}}
"""


def test_F02_line_over_the_cap_is_a_clear_transport_error(script, monkeypatch):
    """Above the transport's cap (lowered here to 1 MiB) an answer cannot be taken (a request
    or a notification is refused and the agent goes on: tests/adversarial/test_payloads_wire.py):
    the UI says so, the agent is torn down, and the turn fails instead of hanging."""
    from escouade_nb.wire.transport import LineTransport

    monkeypatch.setitem(LineTransport.__init__.__kwdefaults__, "max_line_bytes", 1 << 20)
    s = script(F02_OVER_CAP)

    async def go():
        async with s.running() as agent:
            await agent.ready()
            pid = agent.pid
            turn = agent.send("go")
            with pytest.raises(AgentError) as err:
                await asyncio.wait_for(turn.wait(), 60)
            assert "too long" in str(err.value) or "longer than" in str(err.value)
            assert turn.text == "a little"
            notices = [i for i in agent.conversation.items if isinstance(i, Notice) and i.level == "error"]
            assert any("longer than 1048576 bytes" in n.text for n in notices), notices
            await until(lambda: not alive(pid), 60, "the agent's end")
            assert agent.status in ("exited", "failed")

    run(go())


# -- F05 ----------------------------------------------------------------------------------------
F05 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
-- the next three lines are written with a single os.write()
A+> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"Review the current diff","input":null},{"name":"web","description":"Search the web","input":{"hint":"query"}}]}}}
A+> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s9","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"stray"}}}}
A+> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
!> {"quiet": 0.3}
"""


def test_F05_updates_before_the_session_new_answer_are_buffered(script):
    s = script(F05)

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.session_id == "s1"
            conv = agent.conversation
            assert [c["name"] for c in conv.commands] == ["review", "web"]
            assert "stray" not in render_items(conv.items)
            assert not conv.items  # no user-visible error either
            await asyncio.sleep(0.4)
        # the transcript has the wire traffic; its replay keeps s9's update out too
        again = Agent.resume(agent.transcript.path, s.ref, program=sys.executable)
        assert [c["name"] for c in again.conversation.commands] == ["review", "web"]
        assert "stray" not in render_items(again.conversation.items)

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new"]


# -- F07 ----------------------------------------------------------------------------------------
F07 = """
[P]
!> {"stderr_fill": 1048576}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"partial"}}}}
E> fatal: out of cheese
!> {"exit": 3}
"""
F07_AGAIN = f"""
{P_INIT}
{P_NEW}
C> {{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {_chunk("back")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F07_agent_dies_mid_turn_after_flooding_stderr(script):
    from escouade_nb.widgets import AgentView

    s = script(F07, F07_AGAIN)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            await agent.ready()
            first_pid = agent.pid
            turn = agent.send("go")
            with pytest.raises(AgentExited) as err:
                await asyncio.wait_for(turn.wait(), 20)
            failed_at = time.time()
            exited_at = s.entries("out")[-1]["t"]  # "partial", written just before the exit
            assert failed_at - exited_at < 2.0
            assert err.value.code == 3
            tail = err.value.stderr_tail
            assert tail.endswith("fatal: out of cheese") and len(tail.encode()) <= 64 * 1024
            assert agent.stderr.total > 1 << 20
            assert turn.text == "partial" and turn.status == "failed"
            await until(lambda: "Agent exited with code 3" in repr(view), what="the exit in the view")
            shown = repr(view)
            assert "exited" in shown and "partial" in shown and "Agent exited with code 3" in shown
            assert "fatal: out of cheese" in shown
            assert agent.status == "exited" and not alive(first_pid)
            # a new process, a new session: no dead connection reused
            await agent.restart()
            assert agent.pid != first_pid and agent.session_id == "s1"
            again = await agent.send("again")
            assert again.stop_reason == "end_turn" and again.text == "back"

    run(go())
    statuses = s.statuses()
    assert [(x["run"], x["status"]) for x in statuses] == [(0, "ok"), (1, "ok")]


# -- F12 ----------------------------------------------------------------------------------------
F12 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":%s,"agentCapabilities":{},"authMethods":[]}}
-- the agent waits; any further line fails; it expects stdin's end or its end
!> {"wait_eof": 5}
"""


@pytest.mark.parametrize("version", ["2", '"1.0.0"'])
def test_F12_protocol_version_is_checked(script, version):
    from escouade_nb.widgets import AgentView

    s = script(F12 % version)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            with pytest.raises(AgentError) as err:
                await agent.ready()
            message = str(err.value)
            assert json.loads(version) in (2, "1.0.0")
            assert f"version {json.loads(version)!r}" in message or f"version {json.loads(version)}" in message
            assert "[1]" in message
            pid = agent.pid
            await until(lambda: not alive(pid), 60, "the agent's end")
            assert agent.status == "failed"
            await until(lambda: "[1]" in repr(view), what="the failure in the view")  # the notebook shows it

    run(go())
    assert not [x for x in s.statuses() if x["status"] != "ok"]
    sent = s.received()
    assert [m.get("method") for m in sent] == ["initialize"]  # nothing else, no session/new
    assert sent[0]["params"]["protocolVersion"] == 1
