"""The public failure cases of ACP clients (F01–F15) about prompt turns: a permission pending when Stop is
pressed (F01), one cancel (F06), a second prompt queued not sent (F13), prompt content gated on the agent's
prompt capabilities (F14); each played by the scripted agent (``tests/scripted_agent.py``, its notation there)
over real pipes against the real :class:`~escouade_nb.engine.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from scripted_agent import responses_to, run, until
from view_helpers import buttons_of

from escouade_nb.core.conversation import Notice
from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import AgentError


# -- F01 ----------------------------------------------------------------------------------------
F01 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write notes.txt","kind":"edit","status":"pending"}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
-- the test presses Stop
C*> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}
C*> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"cancelled"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}
"""

F01_WITHDRAWN = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write notes.txt","kind":"edit","status":"pending"}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
!> {"sleep": 0.3}
A> {"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":100}}
C> {"jsonrpc":"2.0","id":100}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F01_pending_permission_is_answered_cancelled_on_stop(script):
    from escouade_nb.widgets import AgentView

    s = script(F01)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            await until(lambda: view.feed.find(view.feed.key(card.permission)) is not None, what="the card's view")
            assert [b["label"] for b in buttons_of(view.card_html(card))] == ["Allow once", "Reject"]
            assert view.head()["can"]["stop"]
            stopped = time.time()
            view.act({"k": "act", "act": "stop"})  # the user presses Stop
            await until(lambda: responses_to(s.received(), 100), 1.0, "the answer to 100 within 1 s")
            answered_at = next(e["t"] for e in s.entries() if json.loads(e["line"]).get("id") == 100)
            assert answered_at - stopped < 1.0
            result = await turn
            assert result.stop_reason == "cancelled" and result.cancelled_by_user
            await until(lambda: card.state == "cancelled", what="the card cancelled")
            # the card is inert: no buttons, labelled cancelled; a click (a stale page) sends nothing
            assert card.state == "cancelled" and card.label.startswith("Cancelled")
            html = view.card_html(card)
            assert buttons_of(html) == [] and "esc-ans-cancelled" in html and "Cancelled" in html
            view.press(card, "choose", "ok")
            assert card.choose("ok") is False
            await until(lambda: agent.conversation.tool_calls["t1"].shown_status == "failed", what="t1's update")
            # the update after the cancel still applies: t1 failed
            assert agent.conversation.tool_calls["t1"].shown_status == "failed"
            assert not agent.pending_cards and not agent.turns.tasks - {asyncio.current_task()}
            assert agent.status == "idle"
        sent = s.received()
        answers = responses_to(sent, 100)
        assert answers == [{"jsonrpc": "2.0", "id": 100, "result": {"outcome": {"outcome": "cancelled"}}}]
        assert [m["method"] for m in sent if "method" in m].count("session/cancel") == 1
        assert not any(m.get("result", {}).get("outcome", {}).get("outcome") == "selected" for m in sent)

    run(go())
    s.assert_ok()


def test_F01_agent_withdraws_its_request(script):
    """``$/cancel_request`` from the agent: the client answers 100 (cancelled or
    -32800) and the card closes."""
    s = script(F01_WITHDRAWN)

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            result = await turn
            assert result.stop_reason == "end_turn"
            assert card.state == "cancelled" and "withdrew" in card.label
            assert not agent.pending_cards and agent.status == "idle"
        answers = responses_to(s.received(), 100)
        assert len(answers) == 1
        answer = answers[0]
        assert (answer.get("result") == {"outcome": {"outcome": "cancelled"}}
                or answer.get("error", {}).get("code") == -32800), answer

    run(go())
    s.assert_ok()


# -- F06 ----------------------------------------------------------------------------------------
F06 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"b1","title":"sleep 60","kind":"execute","status":"in_progress"}}}
-- the test presses Stop twice in quick succession
C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"},"id":"$ABSENT"}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"stopping"}}}}
!> {"sleep": 0.4}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
!> {"quiet": 0.3}
"""


def test_F06_one_session_cancel_and_the_turn_is_cancelled(script):
    from escouade_nb.widgets import AgentView

    s = script(F06)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            turn = agent.send("go")
            await until(lambda: "b1" in agent.conversation.tool_calls, 60, "b1")
            stopped = time.time()
            view.act({"k": "act", "act": "stop"})
            agent.cancel()  # a double click on Stop
            # at once, b1 is shown cancelled by the client
            assert agent.conversation.tool_calls["b1"].shown_status == "cancelled"
            await until(lambda: any(m.get("method") == "session/cancel" for m in s.received()), 1.0,
                        "session/cancel within 1 s")
            cancel_at = next(e["t"] for e in s.entries() if "session/cancel" in e["line"])
            assert cancel_at - stopped < 1.0
            await until(lambda: "stopping" in turn.text, 60, "the text after the cancel")
            assert not turn.done and agent.status == "working"  # not before the prompt's answer
            result = await turn
            assert result.cancelled_by_user and result.stop_reason == "end_turn"
            assert result.text == "stopping"
            assert agent.status == "idle"
            await asyncio.sleep(0.4)
        cancels = [m for m in s.received() if m.get("method") == "session/cancel"]
        assert cancels == [{"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}]

    run(go())
    s.assert_ok()


# -- F13 ----------------------------------------------------------------------------------------
F13 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"working"}}}}
-- the test submits "second" while id 2 is open; a session/prompt now fails the run (the forbid rule)
!> {"sleep": 1.0}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"second"}]}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}
"""
NO_OVERLAP = [{"method": "session/prompt", "while_open": "session/prompt"}]


def test_F13_second_prompt_is_queued_not_sent(script):
    from escouade_nb.widgets.agent_view import TurnView

    s = script(F13, forbid=NO_OVERLAP)

    async def go():
        async with s.running() as agent:
            first = agent.send("go")
            await until(lambda: "working" in first.text, 60, "the first turn")
            second = agent.send("second")  # submitted while id 2 is open
            await asyncio.sleep(0.3)
            assert second.status == "queued" and repr(TurnView(second)).endswith("turn queued")
            assert [m.get("method") for m in s.received()].count("session/prompt") == 1
            assert (await first).stop_reason == "end_turn"
            assert (await second).stop_reason == "end_turn"

    run(go())
    s.assert_ok()
    answered = next(e["t"] for e in s.entries("out") if '"stopReason":"end_turn"' in e["line"])
    sent_second = next(e["t"] for e in s.entries() if '"second"' in e["line"])
    assert sent_second >= answered


F13_REFUSED = """
[P]
A> {"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"Prompt already in progress"}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"third"}]}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"refusal"}}
!> {"quiet": 0.3}
"""


def test_F13_a_refused_prompt_keeps_the_text_and_says_why(script):
    s = script(F13_REFUSED, forbid=NO_OVERLAP)

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            with pytest.raises(AgentError) as err:
                await turn
            assert "Prompt already in progress" in str(err.value)
            assert turn.prompt == [{"type": "text", "text": "go"}]
            refused = await agent.send("third")
            assert refused.stop_reason == "refusal"
            text = render_items(agent.conversation.items)
            lines = text.splitlines()
            assert lines[0] == "you: go" and "Prompt already in progress" in lines[1]
            third = lines.index("you: third")
            assert "refus" in " ".join(lines[third + 1:]).lower()
            await asyncio.sleep(0.3)

    run(go())
    s.assert_ok()


# -- F14 ----------------------------------------------------------------------------------------
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
F14_NO = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":%s,"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"describe"},{"type":"resource_link","uri":"$URI","name":"$NAME","mimeType":"text/csv"}]}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""
F14_YES = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"promptCapabilities":{"image":true,"embeddedContext":true}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"describe"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="},{"type":"resource","resource":{"uri":"$URI","mimeType":"text/csv","text":"a,b\\n1,2\\n"}}]}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


@pytest.mark.parametrize("caps, csv", [
    ('{"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}}', "data.csv"),
    ("{}", "my data.csv"),  # no promptCapabilities at all: the same as all false
])
def test_F14_prompt_content_is_gated_on_prompt_capabilities(tmp_path, script, caps, csv):
    from escouade_nb.widgets import AgentView

    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    (ws / "plot.png").write_bytes(PNG)
    (ws / csv).write_text("a,b\n1,2\n")
    uri = (ws / csv).as_uri()
    assert ("%20" in uri) == (" " in csv)
    s = script(F14_NO % caps, variables={"URI": uri, "NAME": csv})

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("describe", attach=[ws / "plot.png", csv])
            assert result.stop_reason == "end_turn"
            await until(lambda: any(isinstance(i, Notice) for i in agent.conversation.items), what="the notice")
            notices = [i for i in agent.conversation.items if isinstance(i, Notice)]
            assert len(notices) == 1 and "image" in notices[0].text and "not sent" in notices[0].text
            assert "image was not sent" in repr(view)

    run(go())
    s.assert_ok()
    (prompt,) = [m for m in s.received() if m.get("method") == "session/prompt"]
    blocks = prompt["params"]["prompt"]
    assert [b["type"] for b in blocks] == ["text", "resource_link"]
    assert blocks[1]["uri"].startswith("file:///")


def test_F14_images_and_embedded_files_when_the_agent_takes_them(tmp_path, script):
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    (ws / "plot.png").write_bytes(PNG)
    (ws / "data.csv").write_text("a,b\n1,2\n")
    s = script(F14_YES, variables={"URI": (ws / "data.csv").as_uri()})

    async def go():
        async with s.running() as agent:
            result = await agent.send("describe", attach=["plot.png", ws / "data.csv"])
            assert result.stop_reason == "end_turn"
            assert not [i for i in agent.conversation.items if isinstance(i, Notice)]

    run(go())
    s.assert_ok()
    (prompt,) = [m for m in s.received() if m.get("method") == "session/prompt"]
    image, resource = prompt["params"]["prompt"][1:]
    assert base64.b64decode(image["data"]) == PNG and image["mimeType"] == "image/png"
    assert resource["resource"]["text"] == (ws / "data.csv").read_text()
