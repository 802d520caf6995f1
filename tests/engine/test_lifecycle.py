"""The agent's lifecycle, nothing lost across a restart, and injected faults — on real
processes and pipes, with the scripted agent of ``fixtures/script_agent.py``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from escouade_nb.engine.agent import Agent, AgentError, AgentExited
from escouade_nb.core.conversation import Notice
from escouade_nb.core.render_text import render_items
from scripted_agent import P_INIT, P_NEW, P_PROMPT, Script, _chunk, alive, conversation_text, resume_and_send, run, steps_of, until
from view_helpers import buttons_of, html_shown

END = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
LOAD_INIT = P_INIT.replace('"loadSession":false', '"loadSession":true')
P_NEW_K = P_NEW.replace('"mcpServers":[]', '"mcpServers":"$ANY"')
"""session/new in a kernel: the kernel's MCP server is given too (checked where it matters)."""


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group (not zombies)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out



# -- an agent that exits: shown, cards and tool calls closed, restart ---------------------------
EXITS = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write notes.txt","kind":"edit","status":"pending"}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
!> {"sleep": 0.3}
E> boom: the model went away
!> {"exit": 5}
"""
BACK = f"""
{P_INIT}
{P_NEW}
C> {{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"hello"}}]}}}}
A> {_chunk("hello again")}
{END}
"""


def test_exit_is_shown_cards_and_tool_calls_closed_and_restart_works(script):
    from escouade_nb.widgets import AgentView

    s = script(EXITS, BACK)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            await until(lambda: view.feed.find(view.feed.key(card.permission)) is not None, 60, "the card's view")
            assert buttons_of(view.card_html(card))
            first_pid = agent.pid
            with pytest.raises(AgentExited) as err:
                await turn
            assert err.value.code == 5 and err.value.stderr_tail.endswith("boom: the model went away")
            await until(lambda: agent.status == "exited" and not alive(first_pid), what="the agent's exit seen")
            assert agent.status == "exited" and agent.exit.code == 5 and not alive(first_pid)
            assert card.state == "cancelled" and card.label == "Cancelled (agent exited)"
            assert buttons_of(view.card_html(card)) == []  # inert: its answer, no button
            assert agent.conversation.tool_calls["t1"].shown_status == "cancelled"
            assert not agent.pending_cards
            shown = repr(view)
            assert shown.splitlines()[0].endswith("exited (code 5)")
            html = "\n".join(html_shown(view))
            assert "Agent exited with code 5" in html and "boom: the model went away" in html
            assert view.head()["can"]["restart"] and not view.head()["can"]["stop"]
            view.act({"k": "act", "act": "restart"})  # a fresh process and session
            await until(lambda: agent.status == "idle", 60, "the restarted agent")
            assert agent.pid != first_pid and alive(agent.pid)
            result = await agent.send("hello")
            assert result.text == "hello again"
            assert "Restarted" in render_items(agent.conversation.items)

    run(go())
    s.assert_ok(runs=2)


# -- kill -9 mid-stream -----------------------------------------------------------------------------
def _stream(n: int, gap: float) -> str:
    lines = []
    for i in range(n):
        lines.append(f"A> {_chunk(f'tick {i} ')}")
        lines.append(f'!> {{"sleep": {gap}}}')
    return "\n".join(lines)


def test_kill_9_mid_stream(script):
    s = script(f"[P]\n{_stream(200, 0.02)}\n{END}", BACK)

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            await until(lambda: turn.text.count("tick") >= 5, 60, "some of the stream")
            pid = agent.pid
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(AgentExited) as err:
                await asyncio.wait_for(turn.wait(), 60)
            assert err.value.code == -signal.SIGKILL
            assert turn.text.startswith("tick 0 tick 1 tick 2 tick 3 tick 4") and turn.status == "failed"
            assert agent.status == "exited" and not alive(pid)
            assert "Agent exited with code -9" in render_items(agent.conversation.items)
            await agent.restart()
            assert (await agent.send("hello")).text == "hello again"

    run(go())


# -- big lines, floods, hangs ---------------------------------------------------------------------------
def test_a_5_mib_line(script):
    big = "é" + "z" * (5 * 1024 * 1024) + "🚀"
    s = script(f"[P]\nA> {_chunk(big)}\n{END}")

    async def go():
        async with s.running() as agent:
            started = time.monotonic()
            result = await agent.send("go")
            assert result.text == big
            assert time.monotonic() - started < 10
            assert agent.transport.skipped_count == 0 and agent.status == "idle"

    run(go())
    s.assert_ok()


def test_100_mb_of_stderr_stalls_nothing(script):
    total = 100 * 1024 * 1024
    s = script(f'[P]\n!> {{"stderr_fill": {total}, "chunk": 4194304}}\nE> last words\n'
                         f'A> {_chunk("done")}\n{END}')

    async def go():
        agent = s.agent()
        gaps = []

        async def ticker():  # the loop must stay responsive during the flood
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        try:
            await agent.ready()
            tick = asyncio.get_running_loop().create_task(ticker())
            started = time.monotonic()
            result = await agent.send("go")
            elapsed = time.monotonic() - started
            tick.cancel()
            assert result.text == "done"
            assert agent.stderr.total >= total
            tail = agent.stderr.tail()
            assert tail.endswith("last words") and len(tail.encode()) <= 64 * 1024
            assert elapsed < 20, elapsed
            assert max(gaps) < 0.5, max(gaps)
        finally:
            await agent.close()

    run(go(), timeout=60)
    s.assert_ok()


def test_hung_agent_never_answering_initialize(script):
    """It also ignores SIGTERM: the group is killed after the grace."""
    s = script([{"ignore_sigterm": True}, {"spawn": ["sleep", "600"]}, {"hang": True}])

    async def go():
        agent = s.agent(start_timeout=1)
        started = time.monotonic()
        with pytest.raises(AgentError) as err:
            await agent.ready()
        assert "did not answer initialize" in str(err.value) and "1 s" in str(err.value)
        assert time.monotonic() - started < 3
        assert agent.status == "failed"
        pid = agent.pid
        # EOF_GRACE (2 s) to exit on end of input, SIGTERM ignored for 3 s, then SIGKILL
        await until(lambda: not group_members(pid), 8, "the agent's process group to end")
        assert "did not answer initialize" in render_items(agent.conversation.items)
        await agent.close()

    run(go())
    assert [json.loads(e["line"])["method"] for e in s.entries()] == ["initialize"]


# -- disk full --------------------------------------------------------------------------------------------
def test_disk_full_when_writing_the_transcript(tmp_path, script, monkeypatch):
    from escouade_nb.wire import transcript
    from escouade_nb.widgets import AgentView

    folder = tmp_path / "transcripts"
    folder.mkdir()
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(folder))
    monkeypatch.setattr(transcript.time, "strftime", lambda *a: "20000101-000000")
    (folder / f"script-20000101-000000-{os.getpid()}.jsonl").symlink_to("/dev/full")
    s = script(f"[P]\nA> {_chunk('still working')}\n{END}")

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.text == "still working" and agent.status == "idle"
            await until(lambda: any(isinstance(i, Notice) for i in agent.conversation.items), what="the notice")
            (notice,) = [i for i in agent.conversation.items if isinstance(i, Notice)]
            assert notice.level == "warning" and "No space left on device" in notice.text
            assert "not be resumable" in notice.text
            assert "No space left on device" in repr(view)

    run(go())
    s.assert_ok()


# -- nothing lost: resume -------------------------------------------------------------------------------------
FIRST_SESSION = [
    _chunk("Hello "),
    _chunk("world"),
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call",'
    '"toolCallId":"t1","title":"Read a.py","kind":"read","status":"completed"}}}',
    _chunk("Done."),
]
USER_REPLAY = ('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
               '{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"go"}}}}')
ORIGINAL = f"{LOAD_INIT}\n{P_NEW_K}\n{P_PROMPT}\n" + "\n".join(f"A> {line}" for line in FIRST_SESSION) + f"\n{END}"
MORE = f"""
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"more"}}]}}}}
A> {_chunk("More.")}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
"""
RELOADED = (f"{LOAD_INIT}\n"
            'C> {"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"$WS","mcpServers":"$ANY"}}\n'
            + f"A> {USER_REPLAY}\n" + "\n".join(f"A> {line}" for line in FIRST_SESSION)
            + '\nA> {"jsonrpc":"2.0","id":1,"result":{}}\n' + MORE)
NO_LOAD = f"{P_INIT}\n{P_NEW.replace('s1', 's2')}\n" + MORE.replace('"s1"', '"s2"')


def _first_session(tmp_path, *runs):
    """A session played to its end by a first agent; returns the script and the
    agent's transcript file and conversation text."""
    s = Script(tmp_path, ORIGINAL, *runs)

    async def go():
        async with s.running() as agent:
            result = await agent.send("go")
            assert result.text == "Hello world" + "Done."
        return agent.transcript.path, conversation_text(agent.conversation)

    path, text = run(go())
    assert text == "you: go\nagent: Hello world\n[tool] Read a.py (read, completed)\nagent: Done."
    return s, path, text


def test_resume_with_session_load_does_not_append_twice(tmp_path):
    s, path, before = _first_session(tmp_path, RELOADED)

    async def go():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            assert agent.status == "resumable"
            assert conversation_text(agent.conversation) == before  # rebuilt from the transcript alone
            agent.start()
            await agent.ready()
            assert agent.session_id == "s1"
            assert conversation_text(agent.conversation) == before  # the agent's replay was not appended again
            assert "Reattached to session s1" in render_items(agent.conversation.items)
            result = await agent.send("more")
            assert result.text == "More."
            assert conversation_text(agent.conversation) == before + "\nyou: more\nagent: More."
        finally:
            await agent.close()
        # a second kernel restart: the transcript (with the load's replay in it) still gives it once
        again = Agent.resume(path, None, program=None)
        assert conversation_text(again.conversation) == before + "\nyou: more\nagent: More."

    run(go())
    s.assert_ok(runs=2)
    (load,) = [m for m in s.received(run=1) if m.get("method") == "session/load"]
    assert load["params"]["sessionId"] == "s1"


def _user(text: str) -> str:
    return ('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
            '{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":%s}}}}' % json.dumps(text))


LOAD = 'C> {"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"$WS","mcpServers":"$ANY"}}\n'
LOADED = '\nA> {"jsonrpc":"2.0","id":1,"result":{}}\n'
AGAIN = MORE.replace('"more"', '"again"').replace("More.", "Again.")
RELOADED_TWICE = (f"{LOAD_INIT}\n{LOAD}" + f"A> {USER_REPLAY}\n" + "\n".join(f"A> {line}" for line in FIRST_SESSION)
                  + f"\nA> {_user('more')}\nA> {_chunk('More.')}" + LOADED + AGAIN)
RECHUNKED = (f"{LOAD_INIT}\n{LOAD}" + f"A> {_user('g')}\nA> {_user('o')}\nA> {_chunk('Hello world')}\n"
             f"A> {FIRST_SESSION[2]}\nA> {_chunk('Do')}\nA> {_chunk('ne.')}" + LOADED + MORE)




def test_a_conversation_resumed_twice_keeps_its_history(tmp_path):
    """Resume, send, resume again (each a new ``Agent.resume``, as a new kernel does):
    every earlier message is shown once, whatever the number of resumes — in the view
    rebuilt from the transcript and after the agent's ``session/load`` replay."""
    s, path, before = _first_session(tmp_path, RELOADED, RELOADED_TWICE)
    once = before + "\nyou: more\nagent: More."
    assert resume_and_send(s, path, "more", "More.") == once
    assert conversation_text(Agent.resume(path, None, program=None).conversation) == once
    twice = once + "\nyou: again\nagent: Again."
    assert resume_and_send(s, path, "again", "Again.") == twice
    assert conversation_text(Agent.resume(path, None, program=None).conversation) == twice
    s.assert_ok(runs=3)


def test_a_replay_chunked_differently_from_the_live_stream_is_shown_once(tmp_path):
    """The live stream said "Hello " + "world" and "Done."; the replay of ``session/load``
    says "Hello world" and "Do" + "ne." (and the prompt in two pieces): recognised by
    content, not by chunk boundaries."""
    s, path, before = _first_session(tmp_path, RECHUNKED)
    assert resume_and_send(s, path, "more", "More.") == before + "\nyou: more\nagent: More."
    s.assert_ok(runs=2)


AFTER_RESTART = (f"{LOAD_INIT}\n{P_NEW_K.replace('s1', 's2')}\n" + P_PROMPT.replace('"s1"', '"s2"').replace('"go"', '"more"')
                 + f"\nA> {_chunk('More.', 's2')}\n{END}")
RELOAD_S2 = (f"{LOAD_INIT}\n" + LOAD.replace('"s1"', '"s2"') + f"A> {_user('more').replace('s1', 's2')}\n"
             f"A> {_chunk('More.', 's2')}" + LOADED + AGAIN.replace('"s1"', '"s2"'))


def test_a_conversation_restarted_then_resumed_keeps_what_came_before_the_restart(script):
    """Restart starts a new process, session and transcript file; a later resume (a new
    kernel) still shows the conversation from before the restart, once, and reloads the
    newest session."""
    s = script(ORIGINAL, AFTER_RESTART, RELOAD_S2)

    async def go():
        async with s.running() as agent:
            assert (await agent.send("go")).text == "Hello worldDone."
            await agent.restart()
            assert (await agent.send("more")).text == "More."
        return agent.transcript.path

    path = run(go())
    history = "you: go\nagent: Hello world\n[tool] Read a.py (read, completed)\nagent: Done.\nyou: more\nagent: More."
    assert conversation_text(Agent.resume(path, None, program=None).conversation) == history
    assert resume_and_send(s, path, "again", "Again.") == history + "\nyou: again\nagent: Again."
    s.assert_ok(runs=3)
    (load,) = [m for m in s.received(run=2) if m.get("method") == "session/load"]
    assert load["params"]["sessionId"] == "s2"


def test_resume_without_load_session_starts_a_new_one_and_says_so(tmp_path):
    s, path, before = _first_session(tmp_path, NO_LOAD)

    async def go():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            agent.start()
            await agent.ready()
            assert agent.session_id == "s2"
            notices = [i.text for i in agent.conversation.items if isinstance(i, Notice)]
            assert any("new session was started" in n and "loadSession" in n for n in notices), notices
            assert conversation_text(agent.conversation) == before
            assert (await agent.send("more")).text == "More."
        finally:
            await agent.close()

    run(go())
    s.assert_ok(runs=2)
    assert [m.get("method") for m in s.received(run=1)] == ["initialize", "session/new", "session/prompt"]


def test_resume_with_the_harness_gone_keeps_the_conversation_readable(tmp_path):
    from escouade_nb.widgets import AgentView

    s, path, before = _first_session(tmp_path)

    async def go():
        agent = Agent.resume(path, None, program=None)
        assert agent.status == "harness missing" and agent.name == "script"
        assert conversation_text(agent.conversation) == before
        view = AgentView(agent)
        shown = repr(view)
        assert "Harness missing" in shown and "script: Hello world" in shown
        assert not view.head()["can"]["send"] and not view.head()["can"]["restart"]
        assert view.head()["status_text"] == "Harness missing"
        view.close()

    run(go())
    assert s.statuses() == [{"run": 0, "status": "ok", "why": ""}]  # nothing was started again


# -- in a real kernel: interrupts, %escouade stop, shutdown --------------------------------------------
@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from kernel_client import Kernel

    plugins = tmp_path_factory.mktemp("plugins")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
        k = Kernel(tmp_path_factory.mktemp("kernel-ws"))
    k.plugins = plugins
    k.run("%load_ext escouade_nb\nimport asyncio")
    yield k
    k.run("from escouade_nb import get_squad\nfor a in list(get_squad().agents.values()):\n    await a.close()",
          allow_error=True)
    k.shutdown()


def run_then_interrupt(kernel, code: str, after: float) -> str | None:
    """Execute ``code``, interrupt the kernel ``after`` seconds later; the error's name."""
    msg_id = kernel.kc.execute(code)
    time.sleep(after)
    kernel.km.interrupt_kernel()
    error = None
    deadline = time.monotonic() + 30
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            error = msg["content"]["ename"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return error


@pytest.mark.kernel
def test_kernel_interrupt_does_not_kill_agents(kernel):
    out = kernel.run("intr = %escouade fake --as intr\nawait intr.ready()\nprint('PID', intr.pid)").text
    pid = int(re.search(r"PID (\d+)", out).group(1))
    kernel.km.interrupt_kernel()  # while idle
    time.sleep(0.5)
    assert alive(pid)
    assert kernel.run("print((await intr.send('hello one')).stop_reason)").text.strip() == "end_turn"
    # while a cell awaits the agent's turn
    error = run_then_interrupt(kernel, "r = await intr.send('slow')", after=1.0)
    assert error in ("KeyboardInterrupt", "CancelledError"), error
    assert alive(pid)
    out = kernel.run("intr.cancel()\nr = await intr.send('hello two')\n"
                     "print(intr.pid, intr.status, 'two' in r.text)").text
    assert out.split() == [str(pid), "idle", "True"]


GROUPED = [*steps_of(P_INIT + "\n" + P_NEW_K), {"spawn": ["sleep", "600"]}]


def _wait_group(pid: int, count: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    members = group_members(pid)
    while len(members) != count and time.monotonic() < deadline:
        time.sleep(0.05)
        members = group_members(pid)
    return members


@pytest.mark.kernel
def test_escouade_stop_kills_the_whole_process_group(kernel, script):
    s = script(GROUPED, name="grouped")
    s.install(kernel.plugins)
    out = kernel.run(f"g = %escouade grouped --cwd {s.ws}\nawait g.ready()\nprint('PID', g.pid)").text
    pid = int(re.search(r"PID (\d+)", out).group(1))
    members = _wait_group(pid, 2)
    assert len(members) == 2 and pid in members  # the agent and the sleep it spawned
    out = kernel.run("%escouade stop grouped\nimport time\nend = time.monotonic() + 30\n"
                     "while g.status != 'closed' and time.monotonic() < end:\n"
                     "    await asyncio.sleep(0.05)\nprint(g.status)").text
    assert out.strip().endswith("closed")
    assert _wait_group(pid, 0) == []


@pytest.mark.kernel
def test_kernel_shutdown_kills_the_whole_process_group(tmp_path, script, monkeypatch):
    """An agent that ignores SIGTERM and left a child: both are gone after shutdown."""
    from kernel_client import Kernel

    s = script([{"ignore_sigterm": True}, *GROUPED], name="stubborn")
    plugins = tmp_path / "plugins"
    s.install(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    k = Kernel(tmp_path)
    try:
        out = k.run(f"%load_ext escouade_nb\ng = %escouade stubborn --cwd {s.ws}\nawait g.ready()\n"
                    "print('PID', g.pid)").text
        pid = int(re.search(r"PID (\d+)", out).group(1))
        assert len(_wait_group(pid, 2)) == 2
    finally:
        k.shutdown()
    assert _wait_group(pid, 0, timeout=10) == []


def test_an_agent_that_exits_leaves_nothing_running(script):
    """It crashed mid-turn, leaving a child in its process group: the child goes too."""
    s = script('[P]\n!> {"spawn": ["sleep", "600"]}\n!> {"sleep": 0.2}\n!> {"exit": 3}')

    async def go():
        async with s.running() as agent:
            await agent.ready()
            pid = agent.pid
            turn = agent.send("go")
            await until(lambda: len(group_members(pid)) == 2, 60, "the agent's child")
            with pytest.raises(AgentExited):
                await turn
            await until(lambda: not group_members(pid), 60, "the child's end")

    run(go())


# -- a rule plugin killed mid-decision ------------------------------------------------------------
ASKS = """
[P]
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"x1","title":"Run make","kind":"execute","status":"pending","rawInput":{"command":"make"}},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_rule_plugin_killed_mid_decision(tmp_path, script, monkeypatch):
    """kill -9 of the rule plugin deciding a card: the user is asked at once (not after
    the plugins' time limit), the session goes on, the plugin is restarted."""
    from fixtures.plugins.cards import make_rules

    from escouade_nb.manifest.project import Project

    seen = tmp_path / "plugin-input.log"
    monkeypatch.setenv("FIXTURE_LOG", str(seen))
    s = script(ASKS)

    async def go():
        rules = make_rules(tmp_path, "hang")  # a plugin that never answers: it is mid-decision until killed
        rules.start_soon()
        proc = rules.host.processes["test.fixture.hang"]
        await asyncio.wait_for(proc.wait_ready(), 60)
        first_plugin = proc.pid
        agent = s.agent(policies=[rules.broker], project=Project.for_folder(s.ws))
        try:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            await until(lambda: seen.exists() and "permissions/decide" in seen.read_text(), 60, "the decision asked")
            assert card.permission.deciding and card.state == "pending"
            killed = time.monotonic()
            os.kill(first_plugin, signal.SIGKILL)
            await until(lambda: agent.status == "waiting", 60, "the user to be asked")
            assert time.monotonic() - killed < 0.3  # the crash, not the plugins' time limit (0.5 s)
            assert not card.permission.deciding and card.state == "pending"
            card.choose("ok")
            assert (await turn).stop_reason == "end_turn"
            await asyncio.wait_for(proc.wait_ready(), 60)
            assert proc.pid != first_plugin and not alive(first_plugin)
            assert "a crash; the user is asked" in rules.journal.text("test.fixture.hang")
        finally:
            await agent.close()
            await rules.aclose()

    run(go())
    s.assert_ok()


@pytest.mark.kernel
def test_nothing_lost_across_a_kernel_restart(tmp_path, script, monkeypatch):
    """Kernel 1 runs a session; kernel 2 resumes it from the transcript while the plugin
    is gone ("Harness missing", readable), then again once it is back: ``session/load``,
    the conversation once, and the session goes on."""
    from kernel_client import Kernel

    s = script(ORIGINAL, RELOADED, name="keeper")
    plugins, away = tmp_path / "plugins", tmp_path / "away"
    s.install(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    first = Kernel(tmp_path)
    try:
        out = first.run(f"%load_ext escouade_nb\na = %escouade keeper --cwd {s.ws}\n"
                        "print((await a.send('go')).text)").text
        assert "Hello worldDone." in out
    finally:
        first.shutdown()
    plugins.rename(away)  # the plugin is gone when the kernel comes back
    second = Kernel(tmp_path)
    try:
        out = second.run("%load_ext escouade_nb\nfrom escouade_nb.widgets import views_of\n"
                         "a = %escouade resume keeper\nprint('STATUS', a.status)\nprint(repr(views_of(a)[-1]))").text
        assert "STATUS harness missing" in out and "Harness missing" in out
        assert "you: go" in out and "Hello world" in out
        away.rename(plugins)  # back
        out = second.run("import asyncio\na = %escouade resume keeper\nawait a.ready()\nr = await a.send('more')\n"
                         "import time\nend = time.monotonic() + 30\n"  # the turn's end shown: idle, its answer in the view
                         "while not (a.status == 'idle' and 'More.' in repr(views_of(a)[-1])) and time.monotonic() < end:\n"
                         "    await asyncio.sleep(0.02)\n"
                         "print('STATUS', a.status, a.session_id)\nprint(repr(views_of(a)[-1]))").text
        out = out[out.index("STATUS"):]  # what the view shows now (not the view displayed by the magic)
        assert "STATUS idle s1" in out
        assert out.count("you: go") == 1 and out.count("Hello world") == 1 and "Reattached to session s1" in out
        assert "you: more" in out and "More." in out
    finally:
        second.run("await a.close()", allow_error=True)
        second.shutdown()
    s.assert_ok(runs=2)
    (load,) = [m for m in s.received(run=1) if m.get("method") == "session/load"]
    assert [e["name"] for e in load["params"]["mcpServers"]] == ["escouade"]  # resumed with the kernel's tools


def test_messages_after_restart_are_new_messages(tmp_path):
    """Message ids are the agent's per session: after Restart, the new process may reuse
    them, and its reply must not be glued onto an old message (nor leave the turn empty)."""
    from escouade_nb.engine.agent import Agent as _Agent
    from escouade_nb.core.conversation import Message
    from escouade_nb.manifest import discover, locate_program

    async def go():
        ref = discover().find("fake")
        agent = _Agent(ref, program=locate_program(ref.harness), cwd=tmp_path)
        try:
            await agent.ready()
            first = await agent.send("first")
            await agent.restart()
            second = await agent.send("second after restart")
            assert "You said: second after restart" in second.text
            replies = [i.text for i in agent.conversation.items if isinstance(i, Message) and i.role == "agent"]
            assert len(replies) == 2 and replies[0] == first.text and "second" not in replies[0]
        finally:
            await agent.close()

    asyncio.run(asyncio.wait_for(go(), 60))
