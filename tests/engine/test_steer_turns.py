"""agent.steer over real pipes with scripted agents: the native extension (its exact wire),
goose's run-id form, the fallback (session/cancel, then a prompt marked steered, before the
queued ones), a native answer saying the turn had ended, and the queue edited and dropped.
Each script streams its reply and waits for the client's next line: the steer arrives in
the middle of a running turn by construction, not by timing."""

import json

import pytest
from git_repos import use_git_env
from scripted_agent import INIT_ANY, P_NEW, chunk_line, init_result, run, until, update_line

from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import AgentError
from escouade_nb.wire import transcript

STEERING_INIT = ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},'
                 '"authMethods":[],"_meta":{"steering":{"supported":true}}}}')
PLAIN_INIT = ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},'
              '"authMethods":[]}}')
PROMPT_GO = ('C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
             '"prompt":[{"type":"text","text":"go"}]}}')


def _text(agent) -> str:
    return render_items(agent.conversation.items)


def _replayed(agent) -> str:
    """The conversation rebuilt from the agent's transcript, as text."""
    from escouade_nb.core.conversation import Conversation

    conv = Conversation()
    transcript.replay(transcript.read(agent.transcript.path), conv)
    return render_items(conv.items)


def test_native_steering_goes_into_the_running_turn(script, tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    s = script("\n".join([
        INIT_ANY, STEERING_INIT, P_NEW, PROMPT_GO,
        chunk_line("working on it. "),
        'C> {"jsonrpc":"2.0","id":3,"method":"_session/steering","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"turn left"}],"_meta":{"steering":{"idleBehavior":"promptRequired"}}}}',
        'A> {"jsonrpc":"2.0","id":3,"result":{"outcome":"injected"}}',
        chunk_line("turning left."),
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
    ]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.steering == "_session/steering"
            turn = agent.send("go")
            await until(lambda: "working" in turn.text, what="the first chunk")
            steered = agent.steer("turn left")
            assert steered is turn  # the running turn carries it
            await turn
            assert turn.stop_reason == "end_turn" and turn.text == "working on it. turning left."
            lines = _text(agent).splitlines()
            assert lines == ["you: go", "agent: working on it. ", "you (steered): turn left", "agent: turning left."]
            assert not any(m.get("method") == "session/cancel" for m in s.received())
            assert _replayed(agent).splitlines() == lines  # the transcript says it too
    run(go())
    s.assert_ok()
    sent = [m for m in s.received() if m.get("method") == "_session/steering"]
    assert len(sent) == 1 and sent[0]["params"] == {
        "sessionId": "s1", "prompt": [{"type": "text", "text": "turn left"}],
        "_meta": {"steering": {"idleBehavior": "promptRequired"}}}


def test_native_steering_after_the_turn_ended_becomes_a_prompt(script):
    s = script("\n".join([
        INIT_ANY, STEERING_INIT, P_NEW, PROMPT_GO,
        chunk_line("almost done."),
        'C> {"jsonrpc":"2.0","id":3,"method":"_session/steering","params":{"sessionId":"s1"}}',
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',  # the turn ended first
        'A> {"jsonrpc":"2.0","id":3,"result":{"outcome":"promptRequired","reason":"noRunningTurn"}}',
        'C> {"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"and a test"}],"_meta":{"escouade":{"steered":true}}}}',
        chunk_line("test added."),
        'A> {"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}',
        'C> {"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"later"}]}}',
        chunk_line("later."),
        'A> {"jsonrpc":"2.0","id":5,"result":{"stopReason":"end_turn"}}',
    ]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            turn = agent.send("go")
            queued = agent.send("later")  # queued: the steered prompt goes before it
            await until(lambda: "almost" in turn.text, what="the first chunk")
            assert agent.steer("and a test") is turn
            await turn
            assert turn.stop_reason == "end_turn"
            await queued  # the steered prompt ran before it (the script's order)
            assert _text(agent).splitlines() == ["you: go", "agent: almost done.", "you (steered): and a test",
                                                 "agent: test added.", "you: later", "agent: later."]
    run(go())
    s.assert_ok()


def test_without_native_steering_the_turn_is_stopped_and_a_steered_prompt_runs_first(script, tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    s = script("\n".join([
        INIT_ANY, PLAIN_INIT, P_NEW, PROMPT_GO,
        chunk_line("reading the files"),
        'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
        chunk_line(" (stopping)"),
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}',
        'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"only src/"}],"_meta":{"escouade":{"steered":true}}}}',
        chunk_line("src only."),
        'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}',
        'C> {"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"then the docs"}]}}',
        chunk_line("docs."),
        'A> {"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}',
    ]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.steering is None
            turn = agent.send("go")
            later = agent.send("then the docs")
            await until(lambda: "reading" in turn.text, what="the first chunk")
            steered = agent.steer("only src/")
            assert steered is not turn and steered.steered
            assert agent.queued == [steered, later]  # the steered prompt runs first
            await turn
            assert turn.stop_reason == "cancelled" and turn.text == "reading the files (stopping)"  # nothing lost
            await steered
            assert steered.stop_reason == "end_turn" and steered.text == "src only."
            assert repr(steered) == "<Turn script steered, end_turn: 9 chars, 0 tool calls>"
            await later
            lines = _text(agent).splitlines()
            assert lines == ["you: go", "agent: reading the files (stopping)", "[info] Stopped by you",
                             "you (steered): only src/", "agent: src only.", "you: then the docs", "agent: docs."]
            assert _replayed(agent).splitlines() == lines  # survives the transcript (resume)
            exported = (await agent.to_notebook(tmp_path / "steered.ipynb")).read_text()
            assert "**you (steered):**" in exported and exported.count("**you:**") == 2
    run(go())
    s.assert_ok()


def _held_at_its_checkpoint(script, tmp_path, monkeypatch, *after: str):
    """A scripted agent offering session/fork, which holds its answer to the first turn's
    checkpoint fork until the test writes the returned file (the turn shown, its prompt not
    sent yet: by construction, not by timing), then plays ``after``; session/cancel forbidden."""
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "checkpoints"))
    use_git_env(monkeypatch)
    go_on = tmp_path / "go-on"
    s = script("\n".join([
        INIT_ANY, init_result('{"fork":{}}'), P_NEW,
        'C> {"jsonrpc":"2.0","id":2,"method":"session/fork","params":{"sessionId":"s1"}}',
        '!> {"wait_file": "$GO_ON", "timeout": 120}',
        'A> {"jsonrpc":"2.0","id":2,"result":{"sessionId":"f1"}}', *after,
    ]), variables={"GO_ON": str(go_on)}, forbid=[{"method": "session/cancel"}])
    return s, go_on


async def _at_its_checkpoint(s, agent, text: str):
    """``agent.send(text)``, once its checkpoint's session/fork reached the script."""
    await agent.ready()
    turn = agent.send(text)
    await until(lambda: any(m.get("method") == "session/fork" for m in s.received()),
                what="the checkpoint's session/fork")
    assert turn.status == "running" and agent.turns.current is turn
    return turn


def test_a_steer_before_the_prompt_went_joins_it_and_nothing_is_cancelled(script, tmp_path, monkeypatch):
    """Steered while the turn takes its checkpoint: no session/cancel, one session/prompt
    carrying the prompt then the steered text (marked), and the transcript rebuilds the
    conversation the view shows."""
    s, go_on = _held_at_its_checkpoint(
        script, tmp_path, monkeypatch,
        'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":['
        '{"type":"text","text":"go"},{"type":"text","text":"only src/","_meta":{"escouade":{"steered":1}}}]}}',
        chunk_line("src only."),
        'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}')

    async def go():
        async with s.running() as agent:
            turn = await _at_its_checkpoint(s, agent, "go")
            steered = agent.steer("only src/")
            assert steered is turn and agent.queued == []  # the prompt not sent carries it: nothing stopped
            lines = ["you: go", "you (steered): only src/"]
            assert _text(agent).splitlines() == lines  # shown at once
            go_on.write_text("")
            await turn
            assert turn.stop_reason == "end_turn" and turn.text == "src only." and not turn.cancelled_by_user
            lines.append("agent: src only.")
            assert _text(agent).splitlines() == lines
            assert _replayed(agent).splitlines() == lines  # the record says what the view shows
            assert [cp.turn for cp in agent.checkpoints] == [1]
    run(go())
    s.assert_ok()
    methods = [m.get("method") for m in s.received() if "method" in m]
    assert "session/cancel" not in methods and methods.count("session/prompt") == 1


def test_a_stop_before_the_prompt_went_sends_no_cancel_and_the_record_keeps_the_prompt(script, tmp_path,
                                                                                     monkeypatch):
    """Stopped while the turn takes its checkpoint: nothing was sent, so no session/cancel and
    no session/prompt; the prompt the view showed is in the transcript's replay too."""
    s, go_on = _held_at_its_checkpoint(script, tmp_path, monkeypatch)

    async def go():
        async with s.running() as agent:
            turn = await _at_its_checkpoint(s, agent, "go")
            agent.cancel()
            go_on.write_text("")
            await turn
            assert turn.stop_reason == "cancelled" and turn.cancelled_by_user
            lines = ["you: go", "[info] Stopped by you"]
            assert _text(agent).splitlines() == lines
            assert _replayed(agent).splitlines() == lines
    run(go())
    s.assert_ok()
    methods = [m.get("method") for m in s.received() if "method" in m]
    assert "session/cancel" not in methods and "session/prompt" not in methods


def test_goose_steer_uses_the_run_id_it_announced(script):
    run_id = update_line('{"sessionUpdate":"session_info_update","_meta":{"goose":{"activeRunId":"run_7f"}}}')
    run_end = update_line('{"sessionUpdate":"session_info_update","_meta":{"goose":{"activeRunId":null}}}')
    s = script("\n".join([
        INIT_ANY, PLAIN_INIT, P_NEW, PROMPT_GO, run_id,
        chunk_line("step one."),
        'C> {"jsonrpc":"2.0","id":3,"method":"_goose/unstable/session/steer","params":{"sessionId":"s1",'
        '"expectedRunId":"run_7f","prompt":[{"type":"text","text":"say PINEAPPLE"}]}}',
        update_line('{"sessionUpdate":"session_info_update","_meta":{"goose":{"queuedSteer":'
                    '{"messageId":"m9","runId":"run_7f"}}}}'),
        'A> {"jsonrpc":"2.0","id":3,"result":{"runId":"run_7f","messageId":"m9"}}',
        update_line('{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"say PINEAPPLE"},'
                    '"_meta":{"goose":{"steer":true,"messageId":"m9"}}}'),  # goose's echo of the steer
        chunk_line("PINEAPPLE."),
        run_end,
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
    ]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.steering is None  # no run yet
            turn = agent.send("go")
            await until(lambda: "step one" in turn.text, what="the first chunk")
            assert agent.steering == "_goose/unstable/session/steer"
            assert agent.steer("say PINEAPPLE") is turn
            await turn
            assert agent.steering is None  # goose said the run ended
            assert _text(agent).splitlines() == ["you: go", "agent: step one.", "you (steered): say PINEAPPLE",
                                                 "agent: PINEAPPLE."]
    run(go())
    s.assert_ok()


PERMISSION = ('A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1",'
              '"toolCall":{"toolCallId":"t1","title":"Run make"},"options":[{"optionId":"ok","name":"Allow once",'
              '"kind":"allow_once"}]}}')
ALLOWED = 'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}'


def test_queued_prompts_are_listed_edited_and_dropped(script):
    s = script("\n".join([  # the first turn waits on a card while the queue is changed
        INIT_ANY, PLAIN_INIT, P_NEW, PROMPT_GO, PERMISSION, ALLOWED,
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
        'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"second, edited"}]}}',
        chunk_line("two"), 'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}']))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            first = agent.send("go")
            card = await agent.next_permission(timeout=60)
            second, third = agent.send("second"), agent.send("third")
            assert agent.queued == [second, third] and second.id != third.id
            assert second.edit("second, edited") is second
            third.drop()
            assert agent.queued == [second] and third.status == "dropped"
            assert (await third) is third and third.stop_reason is None
            with pytest.raises(ValueError):
                second.edit("  ")
            card.choose("ok")
            await first
            await second
            with pytest.raises(AgentError, match="only a queued prompt"):
                second.drop()
            assert "third" not in _text(agent)
    run(go())
    s.assert_ok()
    prompts = [m["params"]["prompt"][0]["text"] for m in s.received() if m.get("method") == "session/prompt"]
    assert prompts == ["go", "second, edited"]
    assert "third" not in json.dumps(s.received())


def test_a_steered_prompt_waiting_for_the_stopped_turn_ends_when_the_agent_is_closed(script):
    s = script("\n".join([
        INIT_ANY, PLAIN_INIT, P_NEW, PROMPT_GO, chunk_line("busy"),
        'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
        '!> {"hang": true}',  # it never ends the turn
    ]))

    async def go():
        agent = s.agent()
        try:
            await agent.ready()
            turn = agent.send("go")
            await until(lambda: "busy" in turn.text, what="the first chunk")
            steered = agent.steer("stop that")
            await until(lambda: any(m.get("method") == "session/cancel" for m in s.received()), what="the cancel")
        finally:
            await agent.close()
        with pytest.raises(AgentError, match="closed"):
            await steered
        assert turn.done and agent.queued == []
    run(go())


def test_a_refused_native_steer_stops_the_turn_and_prompts_saying_why(script):
    s = script("\n".join([
        INIT_ANY, STEERING_INIT, P_NEW, PROMPT_GO, chunk_line("working"),
        'C> {"jsonrpc":"2.0","id":3,"method":"_session/steering","params":{"sessionId":"s1"}}',
        'A> {"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error: steer queue full"}}',
        'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}',
        'C> {"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"go left"}],"_meta":{"escouade":{"steered":true}}}}',
        chunk_line("left."),
        'A> {"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}',
    ]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            turn = agent.send("go")
            await until(lambda: "working" in turn.text, what="the first chunk")
            assert agent.steer("go left") is turn
            await turn
            assert turn.stop_reason == "cancelled"
            await until(lambda: "left." in _text(agent), what="the steered prompt's answer")
            text = _text(agent)
            assert "did not take the text into its running turn (it answered _session/steering with an error" in text
            assert text.index("[info] Stopped by you") < text.index("you (steered): go left") < text.index("left.")
    run(go())
    s.assert_ok()
