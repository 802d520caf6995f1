"""What an agent sends that the client must keep readable (issue 14, "What the agent
sends"): a stop reason outside ACP's v1 list, empty chunks, line separators inside a line."""

from __future__ import annotations

import json

from escouade_nb.core.conversation import Conversation, Message
from escouade_nb.core.render_text import diff_lines, lines_of, render_items
from scripted_agent import P_INIT, P_NEW, P_PROMPT, _chunk, run


def test_a_stop_reason_outside_the_v1_list_keeps_the_turn(script):
    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
A> {_chunk("half an answer")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"error"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
""")

    async def go():
        async with s.running() as agent:
            turn = await agent.send("go")  # not an error: the turn keeps its text and its stop reason as given
            assert turn.stop_reason == "error" and turn.text == "half an answer" and turn.status == "error"
            shown = render_items(agent.conversation.items)
            assert "stop reason outside ACP's list: 'error'" in shown and "validation error" not in shown.lower()
            assert (await agent.send("again")).stop_reason == "end_turn"  # the agent goes on
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


def _user_chunk(text: str) -> str:
    return ('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
            '{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":%s}}}}' % json.dumps(text))


def test_an_agent_echoing_the_prompt_shows_it_once(script):
    """mistral-vibe sends the user's prompt back as ``user_message_chunk`` during the live
    turn: it is folded into the prompt already shown (however it is chunked), live and in
    the view rebuilt from the transcript; a user message that is not the echo is shown."""
    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
A> {_user_chunk("go")}
A> {_chunk("Going.")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"two words"}}]}}}}
A> {_user_chunk("two ")}
A> {_user_chunk("words")}
A> {_chunk("Done.")}
A> {_user_chunk("from another client")}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
""")
    expected = "you: go\nagent: Going.\nyou: two words\nagent: Done.\nyou: from another client"

    async def go():
        async with s.running() as agent:
            assert (await agent.send("go")).text == "Going."
            assert (await agent.send("two words")).text == "Done."
            assert render_items(agent.conversation.items) == expected
        return agent.transcript.path

    path = run(go())
    from escouade_nb.engine.agent import Agent
    rebuilt = Agent.resume(path, None, program=None).conversation
    assert render_items([i for i in rebuilt.items if isinstance(i, Message)]) == expected
    s.assert_ok()


def test_gemini_mode_update_text_is_a_notice_not_a_reply(script):
    """Gemini CLI says a change of its approval mode as a reply chunk, ``[MODE_UPDATE]
    autoEdit``: its named adapter makes it a notice and the mode change it means (the
    menus move); the reply around it is kept — live and rebuilt from the transcript."""
    from escouade_nb.core.conversation import Notice
    from escouade_nb.engine.agent import Agent

    modes = {"currentModeId": "default", "availableModes": [{"id": i, "name": i} for i in ("default", "autoEdit")]}
    s = script(f"""
{P_INIT}
C> {{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"$WS","mcpServers":[]}}}}
A> {{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"s1","modes":{json.dumps(modes, separators=(",", ":"))}}}}}
{P_PROMPT}
A> {_chunk("Switching. ")}
A> {_chunk("[MODE_UPDATE] autoEdit")}
A> {_chunk("Done.")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
""", name="gemini", acp={"modes": {"default": "default", "acceptEdits": "autoEdit"}})

    def check(conversation) -> None:
        shown = render_items(conversation.items)
        assert "[MODE_UPDATE]" not in "".join(i.text for i in conversation.items if isinstance(i, Message)), shown
        assert "Switching. " in shown and "Done." in shown
        (notice,) = [i for i in conversation.items if isinstance(i, Notice) and "MODE_UPDATE" in i.text]
        assert "switched to its mode 'autoEdit'" in notice.text
        assert conversation.current_mode_id == "autoEdit"

    async def go():
        async with s.running() as agent:
            assert (await agent.send("go")).text == "Switching. Done."
            check(agent.conversation)
            assert agent.escouade_mode == "acceptEdits"
        return agent.transcript.path

    path = run(go())
    check(Agent.resume(path, s.ref, program=None).conversation)
    s.assert_ok()


def test_an_empty_instant_turn_after_a_stop_is_said_and_points_at_restart(script):
    """claude-agent-acp 0.23.1: after a Stop, its next turn ends in ~5 ms with nothing (and
    its replies then come one turn late). The conversation says so and points at Restart;
    an empty turn that does not follow a Stop is not flagged."""
    from escouade_nb.core.conversation import Notice

    prompt = ('C> {{"jsonrpc":"2.0","id":{id},"method":"session/prompt","params":{{"sessionId":"s1",'
              '"prompt":[{{"type":"text","text":"{text}"}}]}}}}')
    ends = 'A> {{"jsonrpc":"2.0","id":{id},"result":{{"stopReason":"{why}"}}}}'
    s = script("\n".join([
        P_INIT, P_NEW, P_PROMPT, f"A> {_chunk('Working')}",
        'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
        ends.format(id=2, why="cancelled"),
        prompt.format(id=3, text="next"), ends.format(id=3, why="end_turn"),  # at once, with nothing
        prompt.format(id=4, text="third"), ends.format(id=4, why="end_turn")]))

    def flagged(agent) -> list[str]:
        return [i.text for i in agent.conversation.items if isinstance(i, Notice) and "right after a Stop" in i.text]

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            from scripted_agent import until
            await until(lambda: "Working" in turn.text, 60, "the first reply")
            agent.cancel()
            assert (await turn).stop_reason == "cancelled"
            assert not flagged(agent)
            second = await agent.send("next")
            assert second.stop_reason == "end_turn" and second.text == ""
            (notice,) = flagged(agent)
            assert "did not answer this prompt" in notice and "Restart" in notice
            assert (await agent.send("third")).text == ""  # empty, but not after a Stop: not flagged again
            assert len(flagged(agent)) == 1

    run(go())
    s.assert_ok()


PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def _content(block: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {
        "sessionUpdate": "agent_message_chunk", "content": block}}}, separators=(",", ":"))


def test_non_text_content_is_shown_for_what_it_is(script):
    """Images, audio, resource links and embedded resources in a reply and a tool call:
    an image inline (size-capped), an http link as a link, an embedded text as a collapsed
    block, and the text repr says what each is — never the bare word ``image``."""
    from escouade_nb.widgets import AgentView
    from view_helpers import html_shown

    blocks = [
        {"type": "text", "text": "Here is the plot:"},
        {"type": "image", "mimeType": "image/png", "data": PNG_1PX},
        {"type": "audio", "mimeType": "audio/wav", "data": "UklGRiQAAABXQVZF"},
        {"type": "resource_link", "uri": "https://example.org/report", "name": "report"},
        {"type": "resource_link", "uri": "javascript:alert(1)", "name": "<b>evil</b>"},
        {"type": "resource", "resource": {"uri": "file:///w/notes.md", "mimeType": "text/markdown",
                                          "text": "# Notes\nline 2\n<script>x</script>"}},
        {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz48L3N2Zz4="},
    ]
    tool = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {
        "sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Screenshot", "kind": "other",
        "status": "completed", "content": [{"type": "content", "content": blocks[1]}]}}}, separators=(",", ":"))
    transcript = "\n".join([P_INIT, P_NEW, P_PROMPT, *[f"A> {_content(b)}" for b in blocks], f"A> {tool}",
                            'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'])
    s = script(transcript)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("go")
            import asyncio
            await asyncio.sleep(0.3)
            html = "".join(html_shown(view))
            return render_items(result.items), html

    text, html = run(go())
    s.assert_ok()
    assert "[image image/png, 70 B]" in text and "[audio audio/wav, 12 B]" in text
    assert "[link report <https://example.org/report>]" in text
    assert "[embedded text file:///w/notes.md (text/markdown, 3 lines)]\n# Notes" in text
    assert " image " not in text.replace("[image", "")  # never the bare word
    assert html.count(f'<img class="esc-img" src="data:image/png;base64,{PNG_1PX}"') == 2  # in the reply and the tool card
    assert html.count("<img ") == 2
    assert '<audio controls src="data:audio/wav;base64,' in html
    assert '<a href="https://example.org/report" target="_blank" rel="noopener noreferrer">report</a>' in html
    assert "javascript:" not in html.replace("[link &lt;b&gt;evil&lt;/b&gt; &lt;javascript:alert(1)&gt;]", "")
    assert "<b>evil</b>" not in html and "<script>x</script>" not in html  # text, never markup
    assert "<details class=\"esc-block\"><summary>[embedded text file:///w/notes.md" in html
    assert "data:image/svg+xml" not in html  # an SVG can script: named, not shown


def test_a_turn_the_user_stopped_ends_on_a_marker_live_and_after_a_resume(tmp_path, monkeypatch):
    """Issue 16: a turn ended ``cancelled`` by the user's Stop gets the notice "Stopped by
    you" (info) as its last item; a turn that ends by itself does not; a resume rebuilds it."""
    from escouade_nb.core.conversation import STOPPED_BY_YOU, Notice
    from escouade_nb.engine.agent import Agent
    from escouade_nb.engine.squad import Squad
    from scripted_agent import until

    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()

    async def go():
        squad = Squad()
        agent = squad.start("fake", cwd=work, name="stopped")
        try:
            turn = agent.send("slow")
            await until(lambda: "tick" in turn.text, 60, "the first tick")
            agent.cancel()
            stopped = await turn
            after = await agent.send("hello")
            return agent, stopped, after, render_items(agent.conversation.items)
        finally:
            await agent.close()
            await squad.rules.aclose()

    agent, stopped, after, shown = run(go())
    assert stopped.stop_reason == "cancelled" and stopped.cancelled_by_user
    last = stopped.items[-1]
    assert isinstance(last, Notice) and (last.text, last.level) == (STOPPED_BY_YOU, "info")
    assert not any(isinstance(i, Notice) and i.text == STOPPED_BY_YOU for i in after.items)
    assert shown.count("[info] Stopped by you") == 1
    assert shown.index("[info] Stopped by you") < shown.index("you: hello")  # at the end of the stopped turn
    again = Agent.resume(agent.transcript.path, None, program=None)  # a new kernel: from the transcript
    assert render_items(again.conversation.items).count("[info] Stopped by you") == 1
    assert render_items(again.conversation.items).splitlines()[:3] == shown.splitlines()[:3]
