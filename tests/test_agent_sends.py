"""What an agent sends that the client must keep readable (issue 14, "What the agent
sends"): a stop reason outside ACP's v1 list, empty chunks, line separators inside a line."""

from __future__ import annotations

from escouade_nb.core.conversation import Conversation, Message
from escouade_nb.core.render_text import diff_lines, lines_of, render_items
from test_failure_cases import P_INIT, P_NEW, P_PROMPT, Script, _chunk, run


def test_a_stop_reason_outside_the_v1_list_keeps_the_turn(tmp_path):
    s = Script(tmp_path, f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
A> {_chunk("half an answer")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"error"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
""")

    async def go():
        agent = s.agent()
        try:
            turn = await agent.send("go")  # not an error: the turn keeps its text and its stop reason as given
            assert turn.stop_reason == "error" and turn.text == "half an answer" and turn.status == "error"
            shown = render_items(agent.conversation.items)
            assert "stop reason outside ACP's list: 'error'" in shown and "validation error" not in shown.lower()
            assert (await agent.send("again")).stop_reason == "end_turn"  # the agent goes on
        finally:
            await agent.close()
    run(go())


def test_empty_chunks_make_no_items():
    conv = Conversation()
    for role in ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk"):
        assert conv.apply({"sessionUpdate": role, "content": {"type": "text", "text": ""}}) == []
    assert conv.items == []
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}})
    (msg,) = conv.items
    assert isinstance(msg, Message) and msg.text == "hi" and msg.parts == ["hi"]


def test_line_separators_inside_a_line_do_not_split_it():
    text = "a\u2028b\u2029c\x85d\x0ce\n second\r\n"
    assert lines_of(text) == ["a\u2028b\u2029c\x85d\x0ce", " second"]
    assert diff_lines(None, text) == [("+", "a\u2028b\u2029c\x85d\x0ce"), ("+", " second")]
    changed = diff_lines("x\u2028y\n", "x\u2028z\n")
    assert [tag for tag, _ in changed] == ["@", "-", "+"] and changed[1][1] == "x\u2028y"
    assert lines_of("") == [] and lines_of("no newline") == ["no newline"] and lines_of("\n\n") == ["", ""]
