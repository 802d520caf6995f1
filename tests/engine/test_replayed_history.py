"""The record holds the whole conversation by itself: what an agent replays on ``session/load``
(a session of its own list opened here, a history the transcript lacks) is kept in escouade_nb's
record as it was shown, once, so a resume of a resume needs nothing from the agent — over real
pipes, with the scripted agent of ``fixtures/script_agent.py``."""

from __future__ import annotations

import json
import sys

from escouade_nb.core.conversation import Notice
from escouade_nb.engine.agent import Agent
from scripted_agent import INIT, Script, _chunk, conversation_text, init_result, resume_and_send, run

LOAD = 'C> {"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"$WS","mcpServers":"$ANY"}}'
LOADED = 'A> {"jsonrpc":"2.0","id":1,"result":{}}'


def _user(text: str, session: str = "s1") -> str:
    return "A> " + json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
        "sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}}})


def _turn(prompt: str, reply: str, session: str = "s1") -> str:
    """The client's prompt (id 2) and the agent's reply to it."""
    return "\n".join([
        'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"%s","prompt":'
        '[{"type":"text","text":%s}]}}' % (session, json.dumps(prompt)),
        f"A> {_chunk(reply, session)}", 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'])


TOOL = ('A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call",'
        '"toolCallId":"t1","title":"Read a.py","kind":"read","status":"completed"}}}')
HISTORY = [_user("old question"), f"A> {_chunk('Old ')}", f"A> {_chunk('answer.')}", TOOL]
"""What the agent said in session s1 before escouade_nb ever saw it (another client's)."""
LOAD_INIT = INIT + "\n" + init_result(load=True)

OPENED = "\n".join([LOAD_INIT, LOAD, *HISTORY, LOADED, _turn("more", "More.")])
"""Run 1: ``%escouade sessions`` opens s1: the agent replays its history, then a turn."""
REPLAYS_ALL = "\n".join([LOAD_INIT, LOAD, *HISTORY, _user("more"), f"A> {_chunk('More.')}", LOADED,
                         _turn("again", "Again.")])
"""A resume: the agent replays the whole session again (rechunked: ``Old answer.`` at once is fine too)."""
REPLAYS_ALL_AGAIN = "\n".join([LOAD_INIT, LOAD, *HISTORY, _user("more"), f"A> {_chunk('More.')}", _user("again"),
                               f"A> {_chunk('Again.')}", LOADED, _turn("third", "Third.")])
NO_REPLAY = "\n".join([LOAD_INIT.replace('"sessionCapabilities":{}', '"sessionCapabilities":{"resume":{}}'),
                       LOAD.replace("session/load", "session/resume"), LOADED, _turn("fourth", "Fourth.")])
"""A resume with an agent that offers ``session/resume``: it replays nothing."""

OLD = "you: old question\nagent: Old answer.\n[tool] Read a.py (read, completed)"





def _from_record(path) -> str:
    """The conversation as the transcript alone rebuilds it (a new kernel, no agent)."""
    return conversation_text(Agent.resume(path, None, program=None).conversation)


def test_a_replayed_history_is_kept_by_the_record_once_through_resumes(tmp_path):
    """Open an agent's own session (it replays what was said before), then resume, resume,
    resume (a new kernel each time): with an agent that replays it all again each time, and
    then with one that replays nothing — the conversation is the same, live and from the
    transcript alone, and each message is in it once."""
    s = Script(tmp_path, OPENED, REPLAYS_ALL, REPLAYS_ALL_AGAIN, NO_REPLAY)

    async def first():
        async with s.running(session_id="s1") as agent:
            await agent.ready()
            assert (await agent.send("more")).text == "More."
            return agent.transcript.path, conversation_text(agent.conversation)

    path, live = run(first())
    once = OLD + "\nyou: more\nagent: More."
    assert live == once
    assert _from_record(path) == once  # on main: the replayed history was lost from the record
    twice = once + "\nyou: again\nagent: Again."
    assert resume_and_send(s, path, "again", "Again.") == twice  # the replay again: shown once
    assert _from_record(path) == twice
    thrice = twice + "\nyou: third\nagent: Third."
    assert resume_and_send(s, path, "third", "Third.") == thrice
    assert _from_record(path) == thrice
    fourth = thrice + "\nyou: fourth\nagent: Fourth."
    assert resume_and_send(s, path, "fourth", "Fourth.") == fourth  # nothing from the agent: the record has it
    assert _from_record(path) == fourth
    s.assert_ok(runs=4)


DIFFERS = "\n".join([LOAD_INIT, LOAD, _user("old question"), f"A> {_chunk('A different answer.')}", TOOL,
                     _user("more"), f"A> {_chunk('More.')}", LOADED, _turn("again", "Again.")])
"""A resume where the agent (untrusted) replays something else than what it said."""


def test_a_replay_that_differs_from_the_record_is_shown_after_it_and_said_so(tmp_path):
    """What the record holds stays; what the agent replays that the record lacks is shown (it is
    what the agent now holds as its context), once, with a notice saying the replay differs, and
    the record keeps both as they were shown."""
    s = Script(tmp_path, OPENED, DIFFERS)

    async def first():
        async with s.running(session_id="s1") as agent:
            await agent.ready()
            assert (await agent.send("more")).text == "More."
            return agent.transcript.path

    path = run(first())

    async def go():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            agent.start()
            await agent.ready()
            notices = [i.text for i in agent.conversation.items if isinstance(i, Notice)]
            assert any("replay" in n and "differs" in n for n in notices), notices
            assert (await agent.send("again")).text == "Again."
            return conversation_text(agent.conversation)
        finally:
            await agent.close()

    live = run(go())
    assert live == OLD + "\nyou: more\nagent: More.\nagent: A different answer.\nyou: again\nagent: Again."
    assert _from_record(path) == live
    s.assert_ok(runs=2)
