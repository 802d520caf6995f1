"""The engine's structure, against the real fake agent: one session object per process
(restart replaces it whole), card waits that never swallow a card, turns that always end,
the status machine."""

import asyncio
import copy

import pytest
from deadlines import run, until

from escouade_nb.core import plans
from escouade_nb.core.status import CAN_SEND, ENDED, NAME_FREE, TRANSITIONS, AgentStatus, InvalidTransition
from escouade_nb.engine.agent import Agent, AgentError, state_of
from escouade_nb.manifest import discover, locate_program


def fake(tmp_path, *, questions_in_text: bool = False, program: str | None = None, **kwargs) -> Agent:
    ref = discover().find("fake")
    if questions_in_text:
        ref = copy.deepcopy(ref)
        ref.harness.acp.questions_in_text = True
    return Agent(ref, program=program or locate_program(ref.harness), cwd=tmp_path, **kwargs)


def prompts_sent(agent: Agent, into: list) -> None:
    agent.transport.observers.append(
        lambda d, m: d == "out" and m.get("method") == "session/prompt" and into.append(m["params"]["prompt"]))


def test_restart_replaces_the_session_and_next_permission_gets_the_new_processes_card(tmp_path):
    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            first_session, first_pid = agent.session, agent.pid
            turn = agent.send("edit notes.txt")
            old = await agent.next_permission(timeout=60)  # handed out: the dead process's card
            agent.send("edit other.txt")  # queued behind the first: its card is never asked by the old process
            await agent.restart()
            assert agent.session is not first_session and agent.pid != first_pid
            assert old.state == "cancelled" and old.label == "Cancelled (agent restarted)"
            with pytest.raises(AgentError, match="was restarted during the turn"):
                await turn  # the turn of the dead process ended, saying why
            card = await agent.next_permission(timeout=60)
            assert card is not old and card.state == "pending"
            assert card.agent is agent and card in agent.pending_cards
            assert "other.txt" in (card.tool_call.title or "")  # the queued turn ran on the new session
            card.choose("allow_once")
        finally:
            await agent.close()
    run(go())


def test_restart_resends_the_questions_preamble_to_the_new_session(tmp_path):
    async def go():
        agent = fake(tmp_path, questions_in_text=True)
        try:
            sent: list = []
            await agent.ready()
            prompts_sent(agent, sent)
            await agent.send("hello one")
            await agent.send("hello two")
            await agent.restart()
            prompts_sent(agent, sent)
            await agent.send("hello three")
            told = [any(b.get("text") == plans.QUESTIONS_PREAMBLE for b in prompt) for prompt in sent]
            assert told == [True, False, True]
        finally:
            await agent.close()
    run(go())


def test_restart_applies_the_escouade_mode_again(tmp_path):
    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            assert await agent.set_escouade_mode("acceptEdits")
            await agent.restart()
            await until(lambda: agent.conversation.current_mode_id == "accept-edits", what="the mode set again")
            assert agent.escouade_mode == "acceptEdits" and agent.conversation.current_mode_id == "accept-edits"
        finally:
            await agent.close()
    run(go())


def test_a_cancelled_wait_does_not_swallow_the_next_card(tmp_path):
    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            waiting = asyncio.create_task(agent.next_permission())
            await asyncio.sleep(0)  # the task runs to its wait (no clock involved)
            waiting.cancel()  # a kernel interrupt of the cell that awaited
            with pytest.raises(asyncio.CancelledError):
                await waiting
            agent.send("edit notes.txt")
            card = await agent.next_permission(timeout=60)
            assert card.state == "pending"
            card.choose("allow_once")
            with pytest.raises(TimeoutError):
                await agent.next_permission(timeout=0.3)  # nothing else came: no phantom card
        finally:
            await agent.close()
    run(go())


def test_close_ends_every_turn_and_leaves_no_task(tmp_path):
    async def go():
        agent = fake(tmp_path)
        await agent.ready()
        running = agent.send("slow")
        queued = [agent.send(f"hello {i}") for i in range(3)]
        await until(lambda: agent.status == "working", what="the slow turn running")
        await agent.close()
        for turn in (running, *queued):
            assert turn.done
            with pytest.raises(AgentError):
                await turn
        await asyncio.sleep(0)
        assert not agent.turns.tasks and agent.status == "closed" and not agent.alive
        with pytest.raises(AgentError):
            await agent.next_permission(timeout=1)  # an ended agent says so at once
    run(go())


def test_a_start_that_fails_says_why_and_turns_end(tmp_path):
    async def go():
        agent = fake(tmp_path, program=str(tmp_path / "no-such-program"))
        turn = agent.send("hello")
        with pytest.raises(AgentError, match="could not start"):
            await agent.ready()
        with pytest.raises(AgentError):
            await turn
        assert agent.status == "failed" and "no-such-program" in agent.error
    run(go())


def test_every_status_move_is_in_the_table(tmp_path):
    assert set(TRANSITIONS) == set(AgentStatus)
    assert ENDED <= NAME_FREE and not (ENDED & CAN_SEND)
    assert all(AgentStatus.STARTING in TRANSITIONS[s] for s in ENDED)  # Restart
    assert AgentStatus.IDLE == "idle" and f"{AgentStatus.SIGN_IN}" == "sign-in" and AgentStatus.WAITING.text

    async def go():
        agent = fake(tmp_path)
        seen: list[str] = []
        # on_status also tells what the views show changed within a status (agent.activity): the moves are
        # where the status differs from the one before
        agent.on_status.subscribe(lambda a: seen.append(str(a.status)) if not seen or seen[-1] != a.status else None)
        with pytest.raises(InvalidTransition):
            state_of(agent).set_status(AgentStatus.WORKING)  # starting -> working: a bug, refused
        await agent.send("hello")
        await agent.close()
        assert seen == ["idle", "working", "idle", "closed"]
        for a, b in zip(["starting", *seen], seen, strict=False):
            assert AgentStatus(a).can_go(AgentStatus(b)), (a, b)
    run(go())


def test_session_set_model_goes_through_our_own_transport(tmp_path):
    """goose's ``session/set_model`` (not in the SDK's typed API) is sent with an id of
    our own namespace and its answer taken by the session, not by the SDK."""
    import stat
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "agents" / "goose_like_agent.py"
    program = tmp_path / "goose"
    program.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)

    async def go():
        ref = discover().find("goose")
        agent = Agent(ref, program=str(program), cwd=tmp_path, record=False)
        try:
            await agent.ready()
            sent: list = []
            agent.transport.observers.append(lambda d, m: sent.append((d, m)))
            current, choices = agent.model_choices()
            other = next(mid for mid, _ in choices if mid != current)
            assert await agent.set_model(other)
            assert agent.model_choices()[0] == other
            (out,) = [m for d, m in sent if d == "out" and m.get("method") == "session/set_model"]
            assert out["id"].startswith("escouade-") and out["params"] == {"sessionId": agent.session_id,
                                                                          "modelId": other}
            assert any(d == "in" and m.get("id") == out["id"] and "result" in m for d, m in sent)
        finally:
            await agent.close()
    run(go())


def _alive(pid) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False


def _fake_pids() -> set[int]:
    from kernel_client import processes_named

    return set(processes_named("escouade-fake-agent"))


def test_an_interrupted_restart_still_restarts(tmp_path):
    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            agent.send("slow")
            await until(lambda: agent.status == "working", what="the slow turn running")
            old = agent.live
            waiting = asyncio.create_task(agent.restart())
            while not old.ended:
                await asyncio.sleep(0)
            waiting.cancel()  # a kernel interrupt of the cell that awaited the restart
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await agent.ready()  # the restart went on
            assert agent.live is not old and agent.alive and agent.status == "idle"
            assert (await agent.send("hello")).stop_reason == "end_turn"
        finally:
            await agent.close()
    run(go())


def test_restarts_and_closes_at_once_leave_one_process_or_none(tmp_path, own_processes):
    def _fake_pids() -> set[int]:  # this test's fake agents only (conftest.py's own_processes)
        return own_processes("escouade-fake-agent")

    async def go():
        before = _fake_pids()
        agent = fake(tmp_path)
        await agent.ready()
        await asyncio.gather(agent.restart(), agent.restart())  # a double click on Restart: one restart
        mine = _fake_pids() - before
        assert len(mine) == 1 and agent.pid in mine
        fresh = fake(tmp_path)
        fresh.start()
        await fresh.restart()  # right after the start, before its process was up
        early = fake(tmp_path)
        early.start()
        t0 = asyncio.get_running_loop().time()
        await early.close()  # right after the start
        assert asyncio.get_running_loop().time() - t0 < 2 and early.status == "closed"
        results = await asyncio.gather(agent.close(), agent.restart(), return_exceptions=True)
        assert not [r for r in results if isinstance(r, BaseException)]
        assert agent.status == "idle" and agent.alive  # the restart came last: it runs
        for a in (agent, fresh):
            await a.close()
        await until(lambda: not [p for p in _fake_pids() - before if _alive(p)], what="no process left behind")
    run(go(), timeout=60)
