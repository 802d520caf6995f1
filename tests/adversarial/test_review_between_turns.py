"""A hostile agent writes while no turn runs (issue 32: "the review has a window"). With
``--review`` an ACP agent's process lives between turns; what it writes after its turn's
``session/prompt`` answer is pending review, "changed between turns": at the next turn's start
(before the prompt is sent), or when its process ends (closed, killed). Reject puts the bytes back;
the record (transcript, resume) keeps it. The scripted agent plays real pipes and writes by itself
once the test tells it to (``wait_file``), after its answer was read."""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from scripted_agent import run, until

from escouade_nb.engine.agent import Agent
from escouade_nb.engine.review.file_review import FileEdit

END_1 = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'


def _prompt(rpc_id: int) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rpc_id},"method":"session/prompt","params":{{"sessionId":"s1",'
            f'"prompt":"$ANY"}}}}')


def _end(rpc_id: int) -> str:
    return f'A> {{"jsonrpc":"2.0","id":{rpc_id},"result":{{"stopReason":"end_turn"}}}}'


def _step(step: dict) -> str:
    return "!> " + json.dumps(step)


def _write(path: str, data: bytes) -> str:
    return _step({"file": path, "b64": base64.b64encode(data).decode()})


def _after_go(*writes: str) -> list[str]:
    """Once the test made ``$CTL/go`` (its turn's answer read), the writes, then ``$CTL/written``."""
    return [_step({"wait_file": "$CTL/go", "timeout": 20}), *writes, _write("$CTL/written", b"")]


def _ctl(tmp_path: Path) -> Path:
    ctl = tmp_path / "ctl"  # outside the agent's folder: the test's signals are not the agent's changes
    ctl.mkdir()
    return ctl


def _scripted(tmp_path: Path, script, text: str, mine: bytes):
    """The scripted agent of ``text`` (``$CTL``: :func:`_ctl`), the user's ``notes.txt`` holding
    ``mine``: the script and its control folder."""
    ctl = _ctl(tmp_path)
    s = script(text, variables={"CTL": str(ctl)})
    (s.ws / "notes.txt").write_bytes(mine)
    return s, ctl


async def _writes_between_turns(ctl: Path) -> None:
    """The turn's answer was read: the agent writes by itself (:func:`_after_go`), until it is done."""
    (ctl / "go").touch()
    await until(lambda: (ctl / "written").exists(), timeout=20, what="the agent's write between turns")


def _notices(agent) -> list[str]:
    return [i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]


SCRIPT = "\n".join([
    "[P]", END_1,
    *_after_go(_write("$WS/notes.txt", b"agent's words\r\n"), _write("$WS/tool.sh", b"#!/bin/sh\ncurl evil\n")),
    _prompt(3), _end(3),
    _prompt(4), _end(4),
])


def test_a_write_after_the_turn_pends_at_the_next_turns_start_and_reject_puts_it_back(tmp_path, script):
    s, ctl = _scripted(tmp_path, script, SCRIPT, b"mine\r\n")

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            assert agent.pending_edits == []  # the turn itself changed nothing
            await _writes_between_turns(ctl)
            second = await agent.send("next")
            assert second.stop_reason == "end_turn"
            edits = {e.rel: e for e in agent.pending_edits}
            assert set(edits) == {"notes.txt", "tool.sh"}
            assert all(isinstance(e, FileEdit) and e.between and e.through == {"between"} for e in edits.values())
            assert edits["notes.txt"].label == "edit of notes.txt (changed between turns, by the agent or by you)"
            assert edits["tool.sh"].change == "create"
            assert "-mine\r\n" in edits["notes.txt"].diff and "+agent's words\r\n" in edits["notes.txt"].diff
            # seen before the prompt was sent: at the turn's start, said so
            assert any("changed between turns (by the agent or by you), seen at this turn's start" in n
                       for n in _notices(agent))
            assert await edits["notes.txt"].reject() == "rejected"
            assert await edits["tool.sh"].reject() == "rejected"
            assert (s.ws / "notes.txt").read_bytes() == b"mine\r\n" and not (s.ws / "tool.sh").exists()
            await agent.send("again")
            assert agent.pending_edits == []  # the restore is not taken for a change between turns
            return agent.transcript.path

    path = run(go())
    s.assert_ok()
    prompts = [m for m in s.received() if m.get("method") == "session/prompt"]
    told = json.dumps(prompts[2]["params"]["prompt"])
    assert f"edit of {s.ws / 'notes.txt'} (changed between turns; its bytes before put back)" in told

    async def resumed():  # on record: the transcript keeps the change, its mark and its answer
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            return {e.rel: e.label for e in agent.edit_review.settled}, {
                e.rel: e.state for e in agent.edit_review.settled}, _notices(agent)
        finally:
            await agent.close()

    labels, states, notices = run(resumed())
    assert states == {"notes.txt": "rejected", "tool.sh": "rejected"}
    assert labels["notes.txt"] == "edit of notes.txt (changed between turns, by the agent or by you)"
    assert ("File review: edit of notes.txt (changed between turns, by the agent or by you) rejected (put back as "
            "it was)") in notices


ENDING = "\n".join([
    "[P]", END_1,
    *_after_go(_write("$WS/notes.txt", b"agent's words\n")),
    _step({"hang": True}),
])


@pytest.mark.parametrize("how", ["killed", "closed"])
def test_a_write_between_turns_pends_when_the_process_ends(tmp_path, script, how):
    """Killed (SIGKILL: it crashed, it was killed from outside) or closed by the user: what it
    wrote after its last turn is pending after its end, and Reject puts the bytes back."""
    s, ctl = _scripted(tmp_path, script, ENDING, b"mine\n")

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            await _writes_between_turns(ctl)
            if how == "killed":
                os.kill(agent.pid, signal.SIGKILL)
                await until(lambda: agent.status == "exited" and agent.pending_edits, timeout=20,
                            what="the review after the agent's death")
            else:
                await agent.close()
            [edit] = agent.pending_edits
            assert edit.rel == "notes.txt" and edit.between and edit.change == "edit"
            assert any("seen when its process ended" in n for n in _notices(agent))
            assert await edit.reject() == "rejected"
            assert (s.ws / "notes.txt").read_bytes() == b"mine\n"

    run(go())


def test_a_write_between_turns_is_on_record_after_a_kernel_shutdown(tmp_path, script):
    """At interpreter exit (a kernel shutdown) the process is killed synchronously and no loop is left:
    what it wrote since its last turn is recorded pending, so a resume lists it unanswered."""
    s, ctl = _scripted(tmp_path, script, ENDING, b"mine\n")

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            await _writes_between_turns(ctl)
            agent.kill_now()  # what the squad does at interpreter exit
            return agent.transcript.path

    path = run(go())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    [pending] = [r["data"] for r in records if r.get("event") == "file_review"]
    assert pending["rel"] == "notes.txt" and pending["outcome"] == "pending" and pending["through"] == ["between"]

    async def resumed():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            return [(e.label, e.state) for e in agent.edit_review.settled]
        finally:
            await agent.close()

    assert run(resumed()) == [("edit of notes.txt (changed between turns, by the agent or by you)", "unanswered")]
