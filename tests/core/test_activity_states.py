"""The activity machine (core/activity.py) fed by a real Conversation's fold: what each ACP v1
update says the agent does, stalled only while a turn runs and no card waits, the quiet
spell a stall ended in, and ACP v2's state_update kept as the agent's word, never ours.
The clock is the machine's own parameter: the test moves it, nothing sleeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from escouade_nb.core.activity import STATES, ActivityTracker, check_stall_after, seconds_text
from escouade_nb.core.conversation import Conversation


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _machine(stall_after: float | None = 60.0) -> tuple[ActivityTracker, Conversation, Clock]:
    clock = Clock()
    tracker = ActivityTracker(stall_after, clock=clock,
                              wall=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=clock.now))
    conv = Conversation()
    tracker.read_agent_state = lambda: conv.agent_state
    conv.subscribe(tracker.saw)
    return tracker, conv, clock


def _chunk(kind: str, text: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def test_each_v1_update_says_what_the_agent_does():
    tracker, conv, clock = _machine()
    assert tracker.activity().state == "idle"
    tracker.turn_started()
    assert tracker.activity().state == "thinking"  # the prompt is out: nothing else said yet
    conv.apply(_chunk("agent_thought_chunk", "hmm"))
    assert tracker.activity().state == "thinking"
    conv.apply(_chunk("agent_message_chunk", "Hello"))
    act = tracker.activity()
    assert (act.state, act.detail, act.text) == ("writing", "", "writing")
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read notes.txt", "kind": "read",
                "status": "in_progress"})
    act = tracker.activity()
    assert (act.state, act.detail, act.text) == ("tool", "Read notes.txt", "running a tool: Read notes.txt")
    clock.now += 5
    conv.apply({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"})
    assert tracker.activity().state == "thinking"  # it has the tool's result
    assert tracker.activity().since == datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=105)
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "", "kind": "execute"})  # no title: its kind
    assert (tracker.activity().state, tracker.activity().detail) == ("tool", "execute")
    tracker.turn_ended()
    assert tracker.activity().state == "idle" and tracker.activity().quiet is None
    assert {"idle", "thinking", "writing", "tool"} <= set(STATES)


def test_stalled_after_the_quiet_spell_and_cleared_by_the_next_update():
    tracker, conv, clock = _machine(stall_after=60)
    tracker.turn_started()
    conv.apply(_chunk("agent_message_chunk", "Looking"))
    clock.now += 59.5
    assert tracker.due_in() == pytest.approx(0.5)
    assert not tracker.check() and tracker.activity().state == "writing"
    clock.now += 14.5
    assert tracker.due_in() == 0 and tracker.check()  # it moved into stalled
    act = tracker.activity()
    assert (act.state, act.text, act.detail) == ("stalled", "stalled for 1 min 14 s", "no update for 1 min 14 s")
    assert act.since == datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=174)
    assert not tracker.check()  # still stalled: no change
    conv.apply(_chunk("agent_message_chunk", " into it"))
    assert tracker.activity().state == "writing" and tracker.due_in() == pytest.approx(60)
    tracker3, _conv3, clock3 = _machine(stall_after=10)
    tracker3.turn_started()
    clock3.now += 74
    tracker3.check()
    assert tracker3.turn_ended() == pytest.approx(74)  # Stop while stalled: the spell is said too


def test_saw_returns_the_spell_a_stall_ended_in():
    clock = Clock()
    tracker = ActivityTracker(10, clock=clock)
    conv = Conversation()
    tracker.turn_started()
    clock.now += 74
    assert tracker.check() and tracker.activity().state == "stalled"
    assert tracker.saw(conv.apply(_chunk("agent_message_chunk", "back"))) == pytest.approx(74)
    assert tracker.activity().state == "writing"
    assert tracker.saw(conv.apply(_chunk("agent_message_chunk", "more"))) is None  # no stall to end


def test_a_card_waiting_for_the_user_is_never_stalled():
    tracker, conv, clock = _machine(stall_after=10)
    tracker.turn_started()
    tracker.cards(True)
    clock.now += 3600
    assert tracker.due_in() is None and not tracker.check()
    assert tracker.activity().state == "waiting"
    tracker.cards(False)  # answered: the quiet spell counts from the answer
    assert tracker.activity().state == "thinking" and tracker.due_in() == pytest.approx(10)
    clock.now += 10
    assert tracker.check() and tracker.activity().state == "stalled"
    tracker.cards(True)  # a card while stalled: waiting for you, not stalled
    assert tracker.activity().state == "waiting"


def test_our_own_notices_are_no_sign_of_life_but_the_agents_are():
    tracker, conv, clock = _machine(stall_after=10)
    tracker.turn_started()
    clock.now += 9
    conv.add_notice("Notebook review: cell kept")  # the client's words
    assert tracker.due_in() == pytest.approx(1)
    conv.apply({"sessionUpdate": "notice", "severity": "info", "title": "compacting"})  # the agent's
    assert tracker.due_in() == pytest.approx(10)
    conv.apply({"sessionUpdate": "usage_update", "used": 1, "size": 2})  # any update of the agent
    conv.apply({"sessionUpdate": "plan", "entries": []})
    assert tracker.activity().state == "thinking"  # …moves nothing it does


def test_v2_state_update_is_the_agents_word_not_ours():
    tracker, conv, clock = _machine(stall_after=10)
    tracker.turn_started()
    tracker.cards(True)
    clock.now += 8
    conv.apply({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})
    assert conv.agent_state == "idle" and not any(type(i).__name__ == "Unknown" for i in conv.items)
    act = tracker.activity()
    assert act.state == "waiting"  # an agent saying idle hides no card, ends no turn
    tracker.cards(False)
    act = tracker.activity()
    assert (act.state, act.detail) == ("thinking", "the agent says idle")
    conv.apply({"sessionUpdate": "state_update", "state": "running"})
    assert tracker.activity().detail == "the agent says running" and tracker.due_in() == pytest.approx(10)
    bad = conv.apply({"sessionUpdate": "state_update"})  # no state: shown as an update it cannot read
    assert type(bad[0].item).__name__ == "Unknown"
    tracker.turn_ended()
    assert tracker.activity().detail == ""


def test_stall_after_is_checked_and_none_never_stalls():
    assert check_stall_after(2) == 2.0 and check_stall_after(None) is None
    for bad in (0, -1, "60", True, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="stall_after"):
            check_stall_after(bad)
    tracker, _conv, clock = _machine(stall_after=None)
    tracker.turn_started()
    clock.now += 10_000
    assert tracker.due_in() is None and not tracker.check()
    tracker.set_stall_after(5)
    assert tracker.check() and tracker.activity().state == "stalled"
    tracker.set_stall_after(1_000_000)
    assert tracker.check() and tracker.activity().state == "thinking"  # a longer limit clears it
    assert [seconds_text(s) for s in (0, 59.9, 74, 3599, 3720)] == ["0 s", "59 s", "1 min 14 s", "59 min 59 s",
                                                                    "1 h 02 min"]
