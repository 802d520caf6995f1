"""Every saved card says what was answered, never "pending" once answered, and the saved HTML is
text to the page's maths typesetter — over real pipes, with the scripted agent: an agent that asks
permission for a call and, once allowed, never updates that call's status (many do not, and our own
cards — the worktree commands' — have no agent to update them)."""

from __future__ import annotations

import re

from scripted_agent import P_INIT, P_NEW, P_PROMPT, Script, run

from escouade_nb.widgets import AgentView

ASKS = "\n".join([
    P_INIT, P_NEW, P_PROMPT,
    'A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call",'
    '"toolCallId":"t1","title":"Run echo $x$ and $y$","kind":"execute","status":"pending",'
    '"rawInput":{"command":"echo $x$ and $y$"}}}}',
    'A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1",'
    '"toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},'
    '{"optionId":"no","name":"Reject","kind":"reject_once"}]}}',
    'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}',
    'A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":'
    '"agent_message_chunk","content":{"type":"text","text":"Done."}}}}',
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
])


def test_an_allowed_card_whose_call_never_moved_is_saved_as_allowed_and_its_html_is_no_maths(tmp_path):
    s = Script(tmp_path, ASKS)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            try:
                turn = agent.send("go")
                card = await agent.next_permission(timeout=60)
                card.choose("ok")
                await turn
                return view.companion_bundle(final=True)
            finally:
                view.close()

    saved = run(go())
    s.assert_ok()
    html = re.sub(r"<style>.*?</style>", "", saved["text/html"], flags=re.S)
    assert "Run echo $x$ and $y$" in html
    assert "● pending" not in html and "● allowed" in html, html  # on main: "● pending" above "✓ Allowed…"
    assert "Allowed once by you" in html
    root = re.match(r'<div class="([^"]*)"', saved["text/html"])
    assert root is not None and {"esc-root", "mathjax_ignore", "tex2jax_ignore"} <= set(root.group(1).split())
    assert "pending" not in saved["text/plain"], saved["text/plain"]
