"""The public failure cases of ACP clients (F01–F15) about what is shown: unknown update kinds kept (F03), a new
file's diff (F04), agent text never live HTML (F15); each played by the scripted agent
(``tests/scripted_agent.py``, its notation there) over real pipes against the real
:class:`~escouade_nb.engine.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import html.parser
import json
import re
import time

from scripted_agent import run, until
from view_helpers import html_shown, record

from escouade_nb.core.conversation import Unknown
from escouade_nb.core.render_text import render_item, render_items


# -- F03 ----------------------------------------------------------------------------------------
F03 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"usage_update","used":0,"size":200000,"cost":{"amount":0,"currency":"USD"}}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"usage_update","used":null,"size":1000000}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"hologram_update","frames":7}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"still here"},"futureField":{"x":1}},"_meta":{"example.org/trace":"abc"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"hologram","data":"AAAA"}}}}
A> {"jsonrpc":"2.0","method":"_example.org/ping","params":{}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn","_meta":{"x":1}}}
!> {"quiet": 0.3}
"""


def test_F03_unknown_update_kinds_and_fields_are_kept(script, caplog):
    import logging

    from escouade_nb.widgets import AgentView

    caplog.set_level(logging.DEBUG)
    s = script(F03)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            assert "still here" in result.text
            conv = agent.conversation
            assert conv.usage == {"used": 0, "size": 200000, "cost": {"amount": 0, "currency": "USD"}}
            unknown = [i for i in conv.items if isinstance(i, Unknown)]
            kinds = [u.raw.get("sessionUpdate") for u in unknown]
            assert kinds == ["usage_update", "hologram_update", "agent_message_chunk"]
            # the unknown content type is a placeholder that names it
            hologram = render_item(unknown[2])
            assert hologram.startswith("[unknown update agent_message_chunk]") and "hologram" in hologram
            assert "futureField" not in render_items(conv.items)
            await until(lambda: "still here" in repr(view), what="the view drawn")
            assert agent.status == "idle" and agent.alive
            assert agent.client.extension_calls == [("example.org/ping", {})]
            await asyncio.sleep(0.4)  # the agent's quiet step

    run(go())
    s.assert_ok()
    # nothing in reply to any notification: the client wrote the prelude only
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new", "session/prompt"]
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG and r.name.startswith(("escouade_nb", "acp"))]
    assert not loud, [r.getMessage() for r in loud]
    for word in ("hologram", "example.org/ping"):
        assert sum(word in r.getMessage() for r in caplog.records) <= 1


# -- F04 ----------------------------------------------------------------------------------------
def _w3() -> str:
    old = "".join(f"old {n}\n" for n in range(20000))
    new = "".join(f"new {n}\n" for n in range(20000))
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {
        "sessionUpdate": "tool_call", "toolCallId": "w3", "title": "Rewrite big.txt", "kind": "edit",
        "status": "completed", "content": [{"type": "diff", "path": "$WS/big.txt", "oldText": old, "newText": new}]}}},
        separators=(",", ":"))


F04 = f"""
[P]
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call","toolCallId":"w1","title":"Write hello.py","kind":"edit","status":"pending","locations":[{{"path":"$WS/hello.py"}}],"content":[{{"type":"diff","path":"$WS/hello.py","oldText":null,"newText":"print('hi')\\nprint('bye')\\n"}}]}}}}}}
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call_update","toolCallId":"w1","status":"completed"}}}}}}
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call","toolCallId":"w2","title":"Write notes.md","kind":"edit","status":"completed","content":[{{"type":"diff","path":"$WS/notes.md","newText":"a\\n"}}]}}}}}}
A> {_w3()}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F04_new_file_diff_renders(script):
    from escouade_nb.widgets import AgentView

    s = script(F04)
    ws = s.ws

    async def go():
        async with s.running() as agent:
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            calls = agent.conversation.tool_calls
            w1, w2, w3 = calls["w1"], calls["w2"], calls["w3"]
            # the status-only update kept w1's diff
            assert w1.status == "completed" and len(w1.diffs) == 1
            assert render_item(w1).splitlines()[1:] == [
                f"  new file {ws}/hello.py", "  +print('hi')", "  +print('bye')"]
            assert render_item(w2).splitlines()[1:] == [f"  new file {ws}/notes.md", "  +a"]
            view = AgentView(agent)
            for call, added in ((w1, 2), (w2, 1)):
                html = view.card_html(call)
                assert html.count('class="esc-diff-add"') == added
                assert 'class="esc-diff-del"' not in html and "new file" in html
            # a huge diff renders fast and is capped
            started = time.perf_counter()
            big = view.card_html(w3)
            text = render_item(w3)
            assert time.perf_counter() - started < 2.0
            rows = len(re.findall(r'class="esc-diff-(?:add|del|hunk|ctx)"', big))
            assert 0 < rows <= 401
            assert re.search(r"… \d+ more lines", big), big[-300:]
            assert len(text) < 5000

    run(go())
    s.assert_ok()


# -- F15 ----------------------------------------------------------------------------------------
F15 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done <img src=x onerror=\\"alert(1)\\"> see [docs](javascript:alert(2)) and [ok](https://example.org)\\n\\n```html\\n<script>alert(3)</script>\\n```\\n\\n**bold** item"}}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"h1","title":"<b onmouseover=alert(4)>Read</b> a.py","kind":"read","status":"completed"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"plan","entries":[{"content":"<iframe src=//example.invalid></iframe>step one","priority":"high","status":"pending"}]}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"plan","entries":[{"content":"step two <svg onload=alert(5)>","priority":"low","status":"in_progress"}]}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"h2","title":"Edit <x.py>","kind":"edit","status":"completed","rawInput":{"path":"<img src=y onerror=alert(6)>"},"content":[{"type":"diff","path":"$WS/<script>.py","oldText":null,"newText":"<script>alert(7)</script>\\n"},{"type":"content","content":{"type":"text","text":"<iframe srcdoc=x></iframe>"}}]}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


class _Markup(html.parser.HTMLParser):
    """The live markup of an HTML string: its tags and their attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def test_F15_agent_text_is_never_live_html(script):
    from escouade_nb.widgets import AgentView
    from escouade_nb.widgets.agent_view import TurnView

    s = script(F15)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            sent = record(view)
            turn = agent.send("go")
            turn_view = TurnView(turn)
            turn_sent = record(turn_view)
            await turn
            await asyncio.sleep(0.5)  # the batches went (FLUSH_WAIT)
            assert sent and turn_sent
            # what the browser puts in the page: the items' HTML (snapshot and ops), the saved forms
            values = (html_shown(view, sent) + html_shown(turn_view, turn_sent)
                      + [view.static_body(), turn_view.static_body()])
        whole = "\n".join(values)
        for value in values:
            markup = _Markup()
            markup.feed(value)
            for tag, attrs in markup.tags:
                assert tag not in ("img", "script", "iframe", "svg", "object", "embed", "style"), value
                for name, val in attrs:
                    assert not name.startswith("on"), value
                    if name in ("href", "src"):
                        assert not (val or "").strip().lower().startswith(("javascript:", "data:")), value
            for raw in ("<img", "<script", "<iframe", "<svg"):
                assert raw not in value.lower()
        # the good parts still render: a link, bold, the fenced block as escaped code
        assert re.search(r'<a href="https://example\.org"( [a-z]+="[^"]*")*>ok</a>', whole)
        assert "<strong>bold</strong>" in whole
        highlighted = re.sub(r"</?span[^>]*>", "", whole)  # the code block is highlighted: spans around tokens
        assert "&lt;script&gt;alert(3)&lt;/script&gt;" in highlighted and "language-html" in whole
        assert "javascript:" not in re.sub(r"\[docs\]\(javascript:alert\(2\)\)", "", whole)
        # the tool title as plain text
        assert "&lt;b onmouseover=alert(4)&gt;Read&lt;/b&gt; a.py" in whole
        # the plan replaced by the second update, escaped
        assert "step two &lt;svg onload=alert(5)&gt;" in whole and "step one" not in whole
        assert "&lt;script&gt;alert(7)&lt;/script&gt;" in whole

    run(go())
    s.assert_ok()
