"""The views let go and redraw little: closed views are collected and their subscriptions
end; one long reply costs a few redraws per view; the update command runs bounded and
leaves no process behind. Against the real fake agent and real shell commands."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import ipywidgets as w
import pytest
from acp_clients import fake_agent as shipped_fake_agent

from scripted_agent import until
from deadlines import run
from escouade_nb.core.conversation import Conversation
from escouade_nb.core.status import AgentStatus
from escouade_nb.engine.agent import Agent
from escouade_nb.engine.launch.harness_update import UpdateJob, run_update, running_groups
from escouade_nb.manifest import discover
from escouade_nb.widgets import AgentView, TurnView, views_of
from escouade_nb.widgets import agent_view, views
from escouade_nb.widgets.journal_view import JournalView
from escouade_nb.widgets.squad_view import SquadView
from escouade_nb.widgets.update_view import UpdateView
from escouade_nb.widgets import front
from escouade_nb.widgets.feed import Feed


def fake_agent(tmp_path, **kwargs) -> Agent:
    """The shipped fake agent, not recorded (a view's test needs no transcript)."""
    return shipped_fake_agent(tmp_path, record=False, **kwargs)


class Agents:
    """What a SquadView reads of a squad: its agents by name."""

    def __init__(self, *agents: Agent) -> None:
        self.agents = {a.name: a for a in agents}


def tree(widget: w.Widget) -> list[w.Widget]:
    """``widget`` and every widget below it (children, layout, style)."""
    out = [widget]
    for part in ("layout", "style"):
        value = getattr(widget, part, None)
        if isinstance(value, w.Widget):
            out.append(value)
    for child in getattr(widget, "children", None) or ():
        out.extend(tree(child))
    return out


def nothing_pending(view) -> bool:
    """No batch of ops waits to be sent (and none is scheduled)."""
    return not view.outbox.ops and view.outbox._handle is None


# -- views let go ---------------------------------------------------------------------------------
def test_closed_views_are_collected_and_release_their_subscriptions(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        turn = agent.send("edit notes.txt")  # a turn with a tool call and a card
        card = await agent.next_permission(timeout=60)
        card.choose("allow_once")
        await turn
        await agent.send("plan")
        subs, status_subs = len(agent.conversation.subscribers), len(agent.on_status)
        refs: list[weakref.ref] = []
        for _ in range(10):
            shown = [AgentView(agent), TurnView(turn), SquadView(Agents(agent))]
            await asyncio.sleep(0.12)
            for view in shown:
                assert isinstance(view, SquadView) or view.state()["items"]  # every item drawn
            assert len(agent.conversation.subscribers) > subs and len(agent.on_status) > status_subs
            for view in shown:
                parts = tree(view)
                assert parts == [view, front.shared_layout()]  # one model per view; the Layout all views share
                refs.append(weakref.ref(view))
                view.close()
                assert view.closed and nothing_pending(view)
                assert view.comm is None and front.shared_layout().comm is not None  # closed; the shared one kept
            del shown, view, parts
        assert views_of(agent) == []
        gc.collect()
        alive = [r() for r in refs if r() is not None]
        assert not alive, f"{len(alive)} of {len(refs)} widgets still alive, e.g. {alive[:3]}"
        assert len(agent.conversation.subscribers) == subs
        assert len(agent.on_status) == status_subs
        await agent.close()
    run(go())


def test_a_view_closed_with_a_redraw_pending_never_redraws(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        view = AgentView(agent)
        sent = []
        view.send = lambda content, buffers=None: sent.append(content)
        seen = []

        def close_on_first_item(changes) -> None:  # subscribed after the view: its batch is pending
            if not seen and any(c.kind == "added" for c in changes):
                seen.append(nothing_pending(view))
                view.close()
                seen.append(nothing_pending(view))
                seen.append(len(sent))
        watch = agent.conversation.subscribe(close_on_first_item)
        await agent.send("chunks 50")
        watch.close()
        assert seen[:2] == [False, True]  # its pending batch dropped
        await asyncio.sleep(0.5)  # past FLUSH_WAIT
        assert len(sent) == seen[2]  # nothing sent after the close
        await agent.close()
    run(go())


def test_squad_view_opens_one_agent_view_and_closes_it_with_itself(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        subs = len(agent.conversation.subscribers)
        squad = SquadView(Agents(agent))
        rows = squad.table()["rows"]
        assert [r["name"] for r in rows] == [agent.name]
        squad.act({"k": "act", "act": "open", "name": agent.name})
        first = squad.opened_view
        assert first is not None and squad.opened is first
        squad.act({"k": "act", "act": "open", "name": agent.name})  # the same agent again: the same view
        assert squad.opened_view is first and not first.closed
        other = fake_agent(tmp_path, name="other")
        squad.squad.agents["other"] = other
        squad.act({"k": "act", "act": "open", "name": "other"})  # another Open replaces the first view, which lets go
        assert first.closed and not squad.opened_view.closed
        assert views_of(agent) == [] and views_of(other) == [squad.opened_view]
        squad.act({"k": "act", "act": "open", "name": agent.name})
        assert views_of(agent) == [squad.opened_view]
        squad.close()
        assert views_of(agent) == [] and views_of(other) == []
        assert len(agent.conversation.subscribers) == subs
        await agent.close()
        await other.close()
    run(go())


def test_squad_view_shows_the_oldest_card_and_answers_it_in_place(tmp_path):
    from view_helpers import buttons_of

    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        squad = SquadView(Agents(agent))
        assert squad.table()["pending"] is None
        turn = agent.send("edit notes.txt")
        card = await agent.next_permission(timeout=60)
        table = squad.table()
        pending = table["pending"]
        assert pending["agent"] == agent.name and pending["count"] == 1
        assert table["rows"][0]["cards"] == 1 and table["rows"][0]["can"]["cancel"]
        buttons = {b["label"]: b for b in buttons_of(pending["html"])}
        assert list(buttons) == ["Allow once", "Always allow", "Reject"]
        press = buttons["Allow once"]
        squad.act({"k": "act", "act": press["act"], "key": press["key"], "value": press["value"],
                   "name": agent.name})  # answered from the squad's table
        assert card.state == "selected" and card.label == "Allowed once by you"
        await turn
        assert squad.table()["pending"] is None and squad.table()["rows"][0]["cards"] == 0
        squad.close()
        await agent.close()
    run(go())


def test_squad_view_lets_go_of_an_agent_that_left_the_squad(tmp_path):
    async def go():
        one, two = fake_agent(tmp_path / "a"), fake_agent(tmp_path / "b", name="two")
        squad = Agents(one, two)
        view = SquadView(squad)
        assert len(two.on_status) == 1
        del squad.agents["two"]
        assert [r["name"] for r in view.table()["rows"]] == [one.name]
        assert len(two.on_status) == 0 and len(one.on_status) == 1
        assert "two" not in repr(view)
        view.close()
        assert len(one.on_status) == 0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run(go())


def test_a_rerun_cell_closes_its_old_turn_view(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        subs = len(agent.conversation.subscribers)
        first = TurnView(agent.send("hello"), cell="cell-1")
        per_view = len(agent.conversation.subscribers) - subs
        other = TurnView(agent.send("hello"), cell="cell-2")
        second = TurnView(agent.send("hello again"), cell="cell-1")  # cell-1 was run again
        assert first.closed and not second.closed and not other.closed
        assert len(agent.conversation.subscribers) == subs + 2 * per_view  # the closed one let go
        await second.turn
        second.close()
        other.close()
        assert len(agent.conversation.subscribers) == subs
        ref = weakref.ref(first)
        del first
        gc.collect()
        assert ref() is None
        await agent.close()
    run(go())


def test_every_view_a_rerun_cell_showed_lets_go(tmp_path):
    """The magics register each view they display with its cell's run: a cell that runs
    again closes every view of its earlier run (a squad view, a journal, agent views…),
    and only those."""
    from escouade_nb.permissions.journal import Journal
    from escouade_nb.widgets.views import shown_in_cell

    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        subs, status = len(agent.conversation.subscribers), len(agent.on_status)
        squad = type("Squad", (), {"agents": {agent.name: agent}})()
        first_a, first_b = AgentView(agent), SquadView(squad)
        shown_in_cell(first_a, "cell-9", "run-1")
        shown_in_cell(first_b, "cell-9", "run-1")  # one run showing two views: both stay
        journal_view = JournalView(Journal(tmp_path / "journal"))
        shown_in_cell(journal_view, "cell-10", "run-1")
        assert not first_a.closed and not first_b.closed
        again = SquadView(squad)
        shown_in_cell(again, "cell-9", "run-2")  # the cell ran again
        assert first_a.closed and first_b.closed and not again.closed and not journal_view.closed
        again.close()
        journal_view.close()
        assert len(agent.conversation.subscribers) == subs and len(agent.on_status) == status
        await agent.close()
    run(go())


def test_journal_view_close_stops_listening(tmp_path):
    from escouade_nb.permissions.journal import Journal

    journal = Journal(tmp_path / "journal")
    view = JournalView(journal)
    assert tree(view) == [view, front.shared_layout()]  # one model
    ref = weakref.ref(view)
    assert "Journal of all plugins" in repr(view) and len(journal._observers) == 1
    view.close()
    assert len(journal._observers) == 0
    del view
    gc.collect()
    assert ref() is None


def count_sends(view) -> list:
    """The messages ``view`` sends to its front-end, recorded (anywidget's ``send`` wrapped)."""
    sent: list = []
    original = view.send

    def send(content, buffers=None):
        sent.append((content, buffers))
        return original(content, buffers)
    view.send = send
    return sent


def test_a_2000_chunk_reply_costs_a_few_messages_per_view(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        view, squad = AgentView(agent), SquadView(Agents(agent))
        await asyncio.sleep(0.5)
        sent, squad_sent = count_sends(view), count_sends(squad)
        bytes_before = view.sent_bytes
        start = time.monotonic()
        reply = await agent.send("chunks 2000")
        await asyncio.sleep(0.5)
        elapsed = time.monotonic() - start
        assert len(reply.text) == 2000 * 40
        assert repr(view).endswith(reply.text[-40:])
        assert sent and squad_sent
        print(f"agent view: {len(sent)} messages, {view.sent_bytes - bytes_before} bytes; squad: {len(squad_sent)}; {elapsed:.2f} s")
        # batched: by time (FLUSH_WAIT) and by size (FLUSH_BYTES), never one per chunk
        bound = elapsed / front.FLUSH_WAIT + len(reply.text) / front.FLUSH_BYTES + 10
        assert len(sent) <= bound and len(sent) < 200, (len(sent), elapsed)
        assert len(squad_sent) <= elapsed / front.FLUSH_WAIT + 10, (len(squad_sent), elapsed)
        # the reply costs about its own size, not its size times its chunks
        assert view.sent_bytes - bytes_before < 2 * len(reply.text), view.sent_bytes - bytes_before
        view.close()
        squad.close()
        await agent.close()
    run(go())


class ConvView(front.FrontView):
    """The smallest view of a conversation: its :class:`~escouade_nb.widgets.feed.Feed`
    behind the views' batching (what AgentView and TurnView do, without an agent)."""

    def __init__(self, conv: Conversation) -> None:
        super().__init__(kind="turn")
        self.feed = Feed(conv)
        self.feed.on_ops = self.push
        self.hold(self.feed.close)

    def collect(self):
        ops, _size, more = self.feed.ops()
        return ops, more

    def state(self):
        return {"head": {}, "items": self.feed.snapshot_items()}


def test_a_paced_stream_is_sent_in_few_batches():
    async def go():
        conv = Conversation()
        view = ConvView(conv)
        sent = count_sends(view)
        start = time.monotonic()
        for i in range(2000):
            conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"w{i} "}})
            if i % 20 == 0:
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)
        elapsed = time.monotonic() - start
        text = conv.items[-1].text
        bound = elapsed / front.FLUSH_WAIT + len(text) / front.FLUSH_BYTES + 3
        assert 2 <= len(sent) <= bound, (len(sent), elapsed)
        assert view.sent_messages == len(sent)
        assert "w1998 w1999" in json.dumps(view.state())
        view.close()
        assert len(conv.subscribers) == 0
    run(go())


# -- status groups drive the header ---------------------------------------------------------------
def test_header_buttons_follow_the_status_groups(tmp_path):
    async def go():
        agent = fake_agent(tmp_path)
        view = AgentView(agent)
        assert agent.status == AgentStatus.STARTING
        head = view.head()
        assert not head["can"]["restart"] and not head["can"]["stop"]
        assert head["can"]["send"]  # a prompt sent while it starts is queued
        assert head["status_text"] == "starting…"
        await agent.ready()
        await until(lambda: view.head()["can"]["restart"], what="the view told the agent is ready")
        head = view.head()
        assert head["can"]["send"] and head["can"]["restart"]
        await agent.close()
        await until(lambda: not view.state()["head"]["can"]["send"], what="the view told the agent closed")
        head = view.state()["head"]
        assert not head["can"]["send"] and not head["can"]["stop"] and head["can"]["restart"]
        assert head["status_text"] == "closed"
        assert agent_view.STATUS_TEXT["harness missing"] == AgentStatus.HARNESS_MISSING.text
        view.close()
    run(go())


# -- the update command: bounded, killed, off the loop -----------------------------------------------
def updatable(tmp_path: Path, line: str):
    folder = tmp_path / "plugins" / "updatable"
    folder.mkdir(parents=True)
    (folder / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.updatable", "name": "Updatable",
        "contributes": {"harnesses": [{
            "id": "updatable", "name": "Updatable", "locate": {"names": ["escouade-fake-agent"]},
            "updateCommand": line, "acp": {"args": []}}]}}))
    return discover([tmp_path / "plugins"]).find("updatable")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # a zombie leader not reaped yet still answers killpg: look for a live member
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


def pgid_of(output: str) -> int:
    return int(output.split("pgid ", 1)[1].split()[0])


def test_update_that_runs_too_long_is_timed_out_and_its_group_killed(tmp_path):
    ref = updatable(tmp_path, 'echo "pgid $$"; echo updated; sleep 30; echo never')

    async def go():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        tick = asyncio.get_running_loop().create_task(ticker())
        started = time.monotonic()
        result = await run_update(ref, timeout=0.5, cwd=tmp_path)
        took = time.monotonic() - started
        tick.cancel()
        assert result.timed_out == 0.5 and result.code is None and not result.ok
        assert result.verdict == "timed out after 0.5 s"
        assert "updated" in result.output and "never" not in result.output
        assert result.version == "0.1.0"  # read after, in a thread
        assert took < 10 and ticks > 10  # the loop kept turning
        assert not group_alive(pgid_of(result.output))
        assert running_groups() == frozenset()
    run(go())


def test_update_leaves_no_background_child_behind(tmp_path):
    ref = updatable(tmp_path, 'echo "pgid $$"; sleep 30 & echo started')

    async def go():
        result = await run_update(ref, timeout=20, cwd=tmp_path)
        assert result.code == 0 and result.verdict == "updated" and "started" in result.output
        assert not group_alive(pgid_of(result.output))
    run(go())


def test_cancelled_update_kills_its_group(tmp_path):
    ref = updatable(tmp_path, 'echo "pgid $$"; sleep 30')

    async def go():
        job = UpdateJob(ref, timeout=60, cwd=tmp_path)
        await until(lambda: "pgid" in job.output, timeout=10, what="the update's first line")
        pgid = pgid_of(job.output)
        assert group_alive(pgid) and pgid in running_groups()
        job.cancel()
        result = await job
        assert result.cancelled and result.verdict == "cancelled" and "pgid" in result.output
        assert not group_alive(pgid) and running_groups() == frozenset()
    run(go())


def test_update_view_shows_the_result_and_closing_it_cancels_the_run(tmp_path):
    done = updatable(tmp_path / "a", "echo updating && echo done")
    slow = updatable(tmp_path / "b", 'echo "pgid $$"; sleep 30')

    async def go():
        view = UpdateView(done, "0.1.0")
        assert repr(view) == "Updatable 0.1.0: update with `echo updating && echo done`"
        await view.start()
        assert view.start() is view.job.task  # once
        assert repr(view).endswith("exit code 0; version now 0.1.0")
        state = view.state()["result"]
        assert state["verdict"] == "updated" and state["version"] == "0.1.0" and "done" in state["output"]
        saved = view.companion_bundle(final=True)  # the outcome saved as text (no kernel needed)
        assert "updated; version now: <b>0.1.0</b>" in saved["text/html"] and "done" in saved["text/html"]
        assert saved["text/plain"] == repr(view) and "running" not in saved["text/html"]
        view.close()

        view = UpdateView(slow, None, timeout=60)
        task = view.start()
        await until(lambda: "pgid" in view.job.output, timeout=10, what="the update's first line")
        pgid = pgid_of(view.job.output)
        view.close()
        await task
        assert view.job.result.cancelled
        # killed with its group: a killed process takes a moment to leave the table on a loaded machine
        await until(lambda: not group_alive(pgid), timeout=10, what=f"the update's process group {pgid} gone")
    run(go())


def test_update_still_running_at_exit_is_killed(tmp_path):
    ref_dir = tmp_path / "plugins"
    updatable(tmp_path, 'echo "pgid $$"; sleep 30')
    script = tmp_path / "exit_while_updating.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio
        from escouade_nb.engine.launch.harness_update import UpdateJob
        from escouade_nb.manifest import discover

        async def main():
            job = UpdateJob(discover([{str(ref_dir)!r}]).find("updatable"), timeout=60)
            while "pgid" not in job.output:
                await asyncio.sleep(0.02)
            print(job.output.split()[1], flush=True)
            return job

        loop = asyncio.new_event_loop()
        job = loop.run_until_complete(main())
        # the interpreter exits with the job still running and the loop never closed,
        # as a kernel does at shutdown: only the exit hook can end the group
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    pgid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        pytest.fail("the update's process group outlived the interpreter")


def test_widgets_start_tasks_through_an_owner():
    async def go():
        owner = views.Tasks("test")
        gate = asyncio.Event()
        task = owner.start(gate.wait())
        assert len(owner) == 1
        owner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(owner) == 0
    run(go())


def test_the_agent_views_saved_form_renders_again_only_what_changed(tmp_path, monkeypatch):
    """The agent view's companion is redrawn at each status change with the conversation so
    far: a long conversation must not be rendered whole every time on the kernel's loop."""
    from escouade_nb.widgets import feed as feed_module

    rendered: list[int] = []  # what the saved form rendered (not the live feed's batches)
    drawing = [False]
    real_markdown, real_body = feed_module.markdown, AgentView.static_body

    def body(view):
        drawing[0] = True
        try:
            return real_body(view)
        finally:
            drawing[0] = False
    monkeypatch.setattr(feed_module, "markdown", lambda text: (drawing[0] and rendered.append(len(text)))
                        or real_markdown(text))
    monkeypatch.setattr(AgentView, "static_body", body)

    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        view = AgentView(agent)
        try:
            first = await agent.send("chunks 300")
            view.static_body()
            rendered.clear()
            second = await agent.send("chunks 3")
            body = view.static_body()
            again = view.static_body()
            redrawn = list(rendered)
            fresh = AgentView(agent)  # nothing kept: every message rendered
            try:
                whole = fresh.static_body()
            finally:
                fresh.close()
        finally:
            view.close()
            await agent.close()
        assert body == again == whole
        assert first.text.split()[-2] in body and second.text.split()[-2] in body
        # the new reply only (the greeting and the 12,000-character first reply are kept)
        assert redrawn == [len(second.text)], redrawn
    run(go())


def test_a_saved_form_says_a_waiting_card_was_unanswered(tmp_path):
    """Saved while a card waits, the agent view's saved form must not say "waiting for you"
    or offer options: once the kernel is gone, nobody is asked any more."""
    unanswered = "unanswered when this was saved"  # feed.UNANSWERED

    async def go():
        agent = fake_agent(tmp_path)
        await agent.ready()
        view = AgentView(agent)
        try:
            turn = agent.send("edit notes.txt")
            card = await agent.next_permission(timeout=60)
            permission = view.companion_bundle()
            card.choose(card.options[-1]["optionId"])  # Reject: the turn goes on, then asks a form
            await turn
            turn = agent.send("ask me")
            await until(lambda: agent.pending_questions, timeout=10, what="the form")
            question = view.companion_bundle()
            agent.pending_questions[0].cancel()
            await turn
        finally:
            view.close()
            await agent.close()
        for bundle in (permission, question):
            html, plain = re.sub(r"<style>.*?</style>", "", bundle["text/html"], flags=re.S), bundle["text/plain"]
            for stale in ("waiting for you", "Waiting for you", "deciding…", "esc-pending", "<button", "<input",
                          "[Allow once]"):
                assert stale not in html and stale not in plain, (stale, plain)
            assert unanswered in html and unanswered in plain, plain
        assert "[permission] Edit notes.txt: " + unanswered in permission["text/plain"], permission["text/plain"]
    run(go())


def test_the_squad_row_says_where_an_agent_runs_in_the_launchers_words(tmp_path):
    """A launcher's agent: its folder cell names the launcher as typed (``via podman exec -i box``), not a list."""
    from escouade_nb.widgets.squad_view import agent_row

    agent = fake_agent(tmp_path, via=["podman", "exec", "-i", "my box"])
    assert agent_row(agent)["folder"] == f"{agent.cwd} via podman exec -i 'my box'"
