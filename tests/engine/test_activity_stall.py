"""agent.activity and its stall timer over real pipes, with scripted agents that go silent by
construction (the script waits for the client's next line): stalled appears after
``stall_after`` with Stop at hand, Stop clears it and the record says how long it was quiet;
a card waiting for the user is never stalled (no timer runs); an agent's ACP v2
``state_update`` saying idle mid-turn ends no turn and hides no card."""

from __future__ import annotations

from datetime import UTC, datetime

from scripted_agent import INIT_ANY, P_NEW, P_PROMPT, chunk_line, init_result, run, until, update_line

from escouade_nb.core.conversation import Conversation, Notice
from escouade_nb.core.status import BUSY
from escouade_nb.wire import transcript

CANCEL = 'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}'
END_CANCELLED = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}'
END = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
ASK = ('A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1",'
       '"toolCall":{"toolCallId":"t1","title":"Run ls","kind":"execute","rawInput":{"command":"ls"}},'
       '"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},'
       '{"optionId":"no","name":"Reject","kind":"reject_once"}]}}')
ANSWER = 'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}'


def _stall_notices(conv: Conversation) -> list[str]:
    return [i.text for i in conv.items if isinstance(i, Notice) and i.text.startswith("No update from the agent")]


def test_a_silent_agent_is_stalled_with_stop_at_hand_and_the_record_says_how_long(script, tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    s = script("\n".join([INIT_ANY, init_result(), P_NEW, P_PROMPT, chunk_line("Looking into it"),
                          CANCEL, END_CANCELLED]))  # silent until the client's Stop

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.activity.state == "idle" and agent.stall_after == 60
            agent.stall_after = 0.3
            seen: list[str] = []
            agent.on_status.subscribe(lambda a: seen.append(a.activity.state))
            turn = agent.send("go")
            await until(lambda: agent.activity.state == "stalled", timeout=60, what="stalled")
            act = agent.activity
            assert act.text.startswith("stalled for ") and act.detail.startswith("no update for ")
            assert act.since.tzinfo is UTC and act.since <= datetime.now(UTC)
            assert agent.status in BUSY and not turn.done  # Stop has something to stop
            assert seen[seen.index("stalled") - 1] == "writing"  # what it did before it went quiet
            agent.cancel()
            await turn
            assert turn.stop_reason == "cancelled" and agent.activity.state == "idle"
            said = _stall_notices(agent.conversation)
            assert len(said) == 1 and said[0].endswith("(stalled), when the turn ended"), said
            replayed = Conversation()  # the record: the transcript says it too
            transcript.replay(transcript.read(agent.transcript.path), replayed)
            assert _stall_notices(replayed) == said
    run(go())
    s.assert_ok()


def test_a_card_is_never_stalled_and_a_v2_idle_ends_no_turn(script):
    s = script("\n".join([INIT_ANY, init_result(), P_NEW, P_PROMPT, chunk_line("Let me look."),
                          update_line('{"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}'),
                          ASK, ANSWER, chunk_line("Done."), END]))

    async def go():
        async with s.running() as agent:
            await agent.ready()
            agent.stall_after = 0.2
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            await until(lambda: agent.conversation.agent_state == "idle", timeout=30, what="the state_update")
            assert not turn.done and agent.status == "waiting"  # the agent's "idle" ended nothing of ours
            assert agent.activity.state == "waiting" and agent.activity.text == "waiting for you: the agent says idle"
            assert agent.activity_watch.tracker.due_in() is None  # no deadline while it waits for us
            assert agent.activity_watch._timer is None or agent.activity_watch._timer.done()
            card.choose("allow_once")
            await turn
            assert turn.stop_reason == "end_turn" and turn.text == "Let me look.Done."
            assert _stall_notices(agent.conversation) == [] and agent.activity.state == "idle"
    run(go())
    s.assert_ok()
