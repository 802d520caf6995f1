"""The public failure cases of ACP clients (F01–F15) about modes and sign-in: a mode switch reflected (F10), auth
required leads to authenticate and one retry, no sign-in loop, a terminal sign-in's login command (F11); each
played by the scripted agent (``tests/scripted_agent.py``, its notation there) over real pipes against the
real :class:`~escouade_nb.engine.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from scripted_agent import SCRIPT_AGENT, run, until

from escouade_nb.core.conversation import Notice
from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import AgentError, AuthRequired


# -- F10 ----------------------------------------------------------------------------------------
F10 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1","modes":{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},{"id":"code","name":"Code"},{"id":"plan","name":"Plan"}]}}}
-- the user picks "Code" in the mode dropdown
C> {"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"code"}}
!> {"sleep": 0.2}
A> {"jsonrpc":"2.0","id":2,"result":{}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"current_mode_update","currentModeId":"plan"}}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}
-- the user picks "Ask"; this agent refuses
C> {"jsonrpc":"2.0","id":4,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"ask"}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Invalid mode"}}
!> {"quiet": 0.3}
"""


def test_F10_mode_switch_is_reflected(script):
    from escouade_nb.widgets import AgentView

    s = script(F10)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            await agent.ready()
            conv = agent.conversation
            def dropdown() -> dict | None:  # the menu the view's head shows
                return next((c for c in view.head()["controls"] if c["key"] == "agent_mode"), None)
            await until(lambda: dropdown() is not None, 60, "the mode dropdown")
            # exactly the modes the agent advertised, no invented "default"
            assert [value for _, value in dropdown()["options"]] == ["ask", "code", "plan"]
            assert [label for label, _ in dropdown()["options"]] == ["Ask", "Code", "Plan"]
            assert dropdown()["value"] == "ask" and not dropdown()["disabled"]
            view.act({"k": "act", "act": "set", "key": "agent_mode", "value": "code"})  # the user picks Code
            await until(lambda: any(m.get("method") == "session/set_mode" for m in s.received()), 60, "set_mode")
            assert conv.current_mode_id == "code"  # shown at once
            await until(lambda: len(s.entries("out")) >= 3, 60, "the set_mode answer")  # init, new, set_mode
            await asyncio.sleep(0.1)
            assert conv.current_mode_id == "code" and dropdown()["value"] == "code"
            assert not [i for i in conv.items if isinstance(i, Notice)]  # no timeout, no error
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            await until(lambda: dropdown()["value"] == "plan", what="the agent's switch shown")
            assert conv.current_mode_id == "plan" and dropdown()["value"] == "plan"  # the agent's own switch
            view.act({"k": "act", "act": "set", "key": "agent_mode", "value": "ask"})  # refused by this agent
            await until(lambda: any(isinstance(i, Notice) for i in conv.items), 60, "the refusal")
            await asyncio.sleep(0.1)
            assert conv.current_mode_id == "plan" and dropdown()["value"] == "plan"
            (notice,) = [i for i in conv.items if isinstance(i, Notice)]
            assert "ask" in notice.text and "Invalid mode" in notice.text
            await asyncio.sleep(0.3)
        set_modes = [m for m in s.received() if m.get("method") == "session/set_mode"]
        assert [m["params"]["modeId"] for m in set_modes] == ["code", "ask"]  # no echo of the agent's switch

    run(go())
    s.assert_ok()


# -- F11 ----------------------------------------------------------------------------------------
F11_INIT = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[{"id":"api-key","name":"Use API key","description":"Reads a key from the environment"},{"id":"browser","name":"Log in with browser","description":null}]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}
-- the UI shows both methods; the test picks "api-key"
C> {"jsonrpc":"2.0","id":2,"method":"authenticate","params":{"methodId":"api-key"}}
A> {"jsonrpc":"2.0","id":2,"result":{}}
C> {"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
"""
F11 = F11_INIT + """
A> {"jsonrpc":"2.0","id":3,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"Authentication required"}}
-- the chooser is shown again; the user signs in with the browser, then sends the kept prompt again
C> {"jsonrpc":"2.0","id":5,"method":"authenticate","params":{"methodId":"browser"}}
A> {"jsonrpc":"2.0","id":5,"result":{}}
C> {"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"Internal error","data":{"reason":"usage limit reached"}}}
!> {"quiet": 0.3}
"""
F11_REFUSED = F11_INIT + """
A> {"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Authentication required"}}
-- no automatic retry: the user tries the other method, which fails
C> {"jsonrpc":"2.0","id":4,"method":"authenticate","params":{"methodId":"browser"}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"Browser login failed"}}
!> {"quiet": 0.5}
"""


def test_F11_auth_required_leads_to_authenticate_and_one_retry(script):
    from escouade_nb.widgets import AgentView

    s = script(F11)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            with pytest.raises(AuthRequired) as err:
                await agent.ready()
            assert [m["id"] for m in err.value.methods] == ["api-key", "browser"]
            assert [m["id"] for m in agent.auth_methods] == ["api-key", "browser"]
            assert agent.status == "sign-in"
            await until(lambda: view.head()["sign_in"], what="the chooser shown")
            assert [m["label"] for m in view.head()["sign_in"]["methods"]] == ["Sign in: Use API key",
                                                                                "Sign in: Log in with browser"]
            await agent.authenticate("api-key")  # session/new is retried once
            assert agent.session_id == "s1" and agent.status == "idle"
            await until(lambda: view.head()["sign_in"] is None, what="the chooser gone")
            assert view.head()["sign_in"] is None
            # -32000 for a prompt: the text stays in the input, the chooser is shown
            view.act({"k": "act", "act": "send", "text": "go"})
            assert view.prompt_value == ""  # sent: the box empties
            await until(lambda: agent.status == "sign-in", 60, "the sign-in state")
            await until(lambda: view.prompt_value == "go", what="the text back in the input")
            assert view.prompt_value == "go" and view.state()["prompt"] == "go"
            assert len(view.head()["sign_in"]["methods"]) == 2
            await agent.authenticate("browser")  # the session goes on: no new one
            assert agent.session_id == "s1" and agent.status == "idle"
            view.act({"k": "act", "act": "send", "text": view.prompt_value})
            await until(lambda: any(isinstance(i, Notice) and i.level == "error" for i in agent.conversation.items),
                        60, "the usage-limit error")
            await asyncio.sleep(0.1)
            # -32603 with data is an error, not a sign-in prompt
            assert agent.status == "idle" and view.head()["sign_in"] is None
            (error,) = [i for i in agent.conversation.items if isinstance(i, Notice) and i.level == "error"]
            assert "usage limit reached" in error.detail
            await asyncio.sleep(0.3)

    run(go())
    s.assert_ok()
    methods = [m.get("method") for m in s.received()]
    assert methods == ["initialize", "session/new", "authenticate", "session/new", "session/prompt",
                       "authenticate", "session/prompt"]


def test_F11_no_sign_in_loop(script):
    s = script(F11_REFUSED)

    async def go():
        async with s.running() as agent:
            with pytest.raises(AuthRequired):
                await agent.ready()
            with pytest.raises(AuthRequired) as again:  # -32000 again: stop, naming the methods
                await agent.authenticate("api-key")
            assert "api-key" in str(again.value) and "browser" in str(again.value)
            with pytest.raises(AgentError) as failed:  # authenticate itself fails
                await agent.authenticate("browser")
            assert "Browser login failed" in str(failed.value)
            assert "api-key" in str(failed.value) and "browser" in str(failed.value)
            assert agent.session_id is None
            await asyncio.sleep(0.6)

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()].count("session/new") == 2


F11_TERMINAL = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[{"id":"login","name":"Log in from a terminal","type":"terminal","args":["login"],"env":{"AGENT_LOGIN":"1"}}]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}
-- a terminal-type method is not called: the client runs the login command itself; nothing is sent
!> {"quiet": 0.5}
"""


def test_F11_terminal_sign_in_shows_the_login_command(script):
    """The login command runs in a client terminal (shown); an empty answer makes it
    fail (exit 3): said, and no restart (the whole success path: test_acp_v1_25.py)."""
    s = script(F11_TERMINAL)

    async def go():
        async with s.running() as agent:
            with pytest.raises(AuthRequired):
                await agent.ready()
            signing = asyncio.ensure_future(agent.authenticate("login"))
            await until(lambda: agent.sign_in_job is not None and agent.sign_in_job.running, 60, "the sign-in")
            await agent.sign_in_input("")
            with pytest.raises(AgentError, match="exited with code 3"):
                await signing
            text = render_items(agent.conversation.items)
            assert f"AGENT_LOGIN=1 {sys.executable} {SCRIPT_AGENT} {s.scenario} login" in text
            assert "[error] Sign-in 'Log in from a terminal' failed (exit code 3)" in text
            await asyncio.sleep(0.6)

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new"]
