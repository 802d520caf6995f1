"""Issue 26, items 9, 12 and 13, in a real kernel: what the squad lists and opens is this
project's (an agent's ``session/list`` rows of other folders, the transcripts of other
projects) and never a silent pick between two of one name; a slow start waits as long as
the agent's process lives, says so, and Stop ends it at once; a fork carries its parent's
conversation as context, apart from the user's words, never read as commands."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from deadlines import wait_until
from kernel_client import act, kernel_with_env, wait_for
from scripted_agent import INIT_ANY, init_result

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    ws = root / "project"
    ws.mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    k = kernel_with_env(ws, env)
    k.root, k.ws, k.plugins = root, ws, root / "plugins"
    k.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb import get_squad")
    yield k
    k.run("for a in list(get_squad().agents.values()):\n    await a.close()", allow_error=True)
    k.shutdown()


# -- item 13 ----------------------------------------------------------------------------------------
def test_a_fork_of_the_demo_agent_reads_its_carried_conversation_as_context_not_commands(kernel):
    """The fake's greeting names its ``crash`` scenario; the fork carries it and must not
    play it. The carried conversation is a block of its own, marked as context, ending
    with a separator and a blank line; the user's words are a block of their own, last."""
    out = kernel.run("demo = %escouade fake --as demo\nr = await demo.send('hello there')\n"
                     "print('crash' in r.text, r.stop_reason)").text
    assert out.split()[-2:] == ["True", "end_turn"]  # the greeting names `crash`
    out = kernel.run("sent = []\nchild = %escouade fork demo --as demo-fork\nawait child.ready()\n"
                     "child.transport.observers.append(lambda d, m: d == 'out' and m.get('method') == "
                     "'session/prompt' and sent.append(m['params']['prompt']))\n"
                     "r = await child.send('What is 2+2?')\n"
                     "print(r.stop_reason, child.status, json.dumps(sent[0]))").text
    stop, status, prompt = out.strip().splitlines()[-1].split(" ", 2)
    assert (stop, status) == ("end_turn", "idle")  # not played as `crash` (exit code 3)
    blocks = json.loads(prompt)
    assert blocks[-1] == {"type": "text", "text": "What is 2+2?"}  # the user's words, alone
    carried = [b for b in blocks[:-1] if (b.get("_meta") or {}).get("escouade", {}).get("context") == "fork"]
    assert len(carried) == 1
    text = carried[0]["text"] if carried[0]["type"] == "text" else carried[0]["resource"]["text"]
    assert "hello there" in text and "crash" in text and "forked from demo" in text
    assert text.endswith("--- end of the earlier conversation; my next message follows. ---\n\n")
    # the view shows the user's words as the user's message, not the carried conversation
    out = kernel.run("print(json.dumps([i.text for i in child.conversation.items if getattr(i, 'role', '') == "
                     "'user']))").text
    assert json.loads(out.strip().splitlines()[-1]) == ["What is 2+2?"]
    # …and so does the conversation rebuilt from its transcript (a resume)
    out = kernel.run("from escouade_nb.wire import transcript as tr\nfrom escouade_nb.core.conversation import "
                     "Conversation\nre_read = Conversation()\ntr.replay(tr.read(child.transcript.path), re_read)\n"
                     "print(json.dumps([i.text for i in re_read.items if getattr(i, 'role', '') == 'user']))").text
    assert json.loads(out.strip().splitlines()[-1]) == ["What is 2+2?"]


# -- item 12 ----------------------------------------------------------------------------------------
def _group(pgid: int) -> list[int]:
    """Live processes of a process group (read from /proc; zombies are gone)."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else None
        except OSError:
            continue
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def test_a_slow_start_waits_says_how_long_and_stop_ends_it_with_its_process_group(kernel, script):
    """An agent that does not answer ``initialize`` (it starts its own servers: here a
    child in its group, then a long sleep): the start is not cut at a fixed limit, the
    head says what it waits for and how long, the conversation says it still waits, Stop
    is offered and ends the process group; ``%escouade stop`` during a start ends it too."""
    hanging = [{"spawn": ["sleep", "600"]}, {"hang": True}]
    slow = script(hanging, hanging, name="slow")  # one run per start
    slow.install(kernel.plugins)
    kernel.run("import escouade_nb.engine.live as live_mod\n"
               "live_mod.STILL_STARTING, live_mod.START_TICK = 0.3, 0.1  # the notice and redraws come soon\n"
               "from escouade_nb.widgets import views_of\n"
               f"s1 = %escouade slow --as s1 --cwd {slow.ws}")
    wait_for(kernel, "s1.pid is not None and len(s1.conversation.items) > 0", timeout=60)
    out = kernel.run("view = views_of(s1)[0]\nhead = view.head()\n"
                     "print(json.dumps([s1.pid, s1.start_timeout, s1.live.session.start_timeout, head['status_text'],"
                     " head['can']['stop'], view.model_id, [i.text for i in s1.conversation.items]]))").text
    pid, limit, session_limit, status_text, can_stop, model_id, notes = json.loads(out.strip().splitlines()[-1])
    assert limit is None and session_limit is None  # no fixed limit: it waits while the process lives
    assert re.fullmatch(r"starting… \(waiting \d+ s for its answer to initialize\)", status_text), status_text
    assert can_stop
    assert any("has not answered initialize" in n and "as long as its process runs" in n and "Stop ends" in n
               for n in notes), notes
    assert len(_group(pid)) == 2  # the agent and its child
    act(kernel, model_id, {"act": "stop"})  # the user presses Stop
    wait_for(kernel, "s1.status == 'closed'", timeout=30)
    out = kernel.run("print(json.dumps([views_of(s1)[0].head()['status_text'], "
                     "[i.text for i in s1.conversation.items]]))").text
    status_text, notes = json.loads(out.strip().splitlines()[-1])
    assert status_text == "closed"
    assert any(n.startswith("Stopped by you while starting") and "Restart" in n for n in notes), notes
    wait_until(lambda: not _group(pid), what=f"the group of {pid} gone")
    assert _group(pid) == []  # nothing orphaned: the child of its group is gone too
    wait_for(kernel, "s1._main_task.done()", timeout=30)  # nor a task left waiting for an answer that cannot come
    # %escouade stop while it starts
    kernel.run(f"s2 = %escouade slow --as s2 --cwd {slow.ws}")
    wait_for(kernel, "s2.pid is not None and s2.start_waiting is not None", timeout=30)
    pid2 = int(kernel.run("print(s2.pid)").text.strip())
    kernel.run("%escouade stop s2")
    wait_for(kernel, "s2.status == 'closed' and s2._main_task.done()", timeout=30)
    wait_until(lambda: not _group(pid2), what=f"the group of {pid2} gone")
    assert _group(pid2) == []


# -- item 9 -----------------------------------------------------------------------------------------
LISTER = "\n".join([
    INIT_ANY, init_result('{"list":{},"resume":{}}'),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    # an agent that ignores the cwd asked for: a session of another folder in its list
    'C> {"jsonrpc":"2.0","id":3,"method":"session/list","params":{"cwd":"$WS"}}',
    'A> {"jsonrpc":"2.0","id":3,"result":{"sessions":[{"sessionId":"s1","cwd":"$WS","title":"Here"},'
    '{"sessionId":"s9","cwd":"$OTHER","title":"Another project"}]}}',
    '!> {"wait_eof": 60}',
])
OPENED_ELSEWHERE = "\n".join([
    INIT_ANY, init_result('{"list":{},"resume":{}}'),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"s9","cwd":"$OTHER"}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{}}',
    '!> {"wait_eof": 60}',
])


def _shown(res) -> list[str]:
    return [m["content"]["data"].get("text/plain", "") for m in res.messages
            if m["msg_type"] in ("display_data", "update_display_data")]


def test_sessions_of_other_folders_are_not_listed_as_this_ones_and_open_in_their_own(kernel, tmp_path, script):
    other = (tmp_path / "other-project").resolve()
    other.mkdir()
    s = script(LISTER, OPENED_ELSEWHERE, name="lister", variables={"OTHER": str(other)})
    s.install(kernel.plugins)
    kernel.run(f"lister = %escouade lister --cwd {s.ws}\nawait lister.ready()")
    res = kernel.run("%escouade sessions lister\nimport time\nend = time.monotonic() + 30\n"
                     "while not getattr(lister, 'sessions_elsewhere', None) and time.monotonic() < end:\n"
                     "    await asyncio.sleep(0.05)\nawait asyncio.sleep(0.3)")
    listed = "\n".join(_shown(res))
    assert "Here" in listed and "Another project" not in listed and "s9" not in listed.split("not listed")[0]
    assert "1 session of other folders not listed" in listed and "%escouade sessions lister --all" in listed
    out = kernel.run("o = %escouade resume lister --session s9\nawait o.ready()\nprint(o.cwd)").text
    assert out.strip().splitlines()[-1] == str(other)  # opened as its own folder's, not this one's
    kernel.run("await o.close()\nawait lister.close()")
    s.assert_ok(runs=2)


def test_resume_lists_this_projects_agents_says_others_exist_and_asks_which_of_two(kernel):
    from transcript_files import SETUP, _prompt, _write

    folder = kernel.root / "transcripts"
    folder.mkdir(exist_ok=True)
    harness = kernel.run("from escouade_nb.manifest import discover\nprint(discover().find('fake').id)").text.strip()
    elsewhere = kernel.root / "elsewhere"
    elsewhere.mkdir()
    first = _write(folder / "twin-1.jsonl", *SETUP, _prompt(1, "the first twin"), agent="twin", harness=harness,
                   cwd=str(kernel.ws), when=1_700_000_000)
    _write(folder / "twin-2.jsonl", *SETUP, _prompt(1, "the second twin"), agent="twin", harness=harness,
           cwd=str(kernel.ws / "sub"), when=1_700_000_100)
    _write(folder / "stranger-1.jsonl", *SETUP, _prompt(1, "another project's"), agent="stranger", harness=harness,
           cwd=str(elsewhere))
    out = kernel.run("%escouade resume").text
    twins = [line for line in out.splitlines() if line.strip().startswith("twin ")]
    assert len(twins) == 2 and "“the second twin”" in twins[0] and "in sub  (twin-2.jsonl)" in twins[0]
    assert "“the first twin”" in twins[1] and "in .  (twin-1.jsonl)" in twins[1]
    assert "2 agents were named twin: pick one with %escouade resume twin --from FILE" in out
    assert "stranger" not in out and "more of other folders: %escouade resume --all lists them." in out
    assert str(kernel.root) not in out  # no machine path for this project's agents
    assert "“another project's”" in kernel.run("%escouade resume --all").text
    said = kernel.run("%escouade resume twin", allow_error=True).text
    assert "escouade: 2 agents of this project were named 'twin'" in said
    assert "twin-1.jsonl" in said and "twin-2.jsonl" in said  # listed, none picked
    assert "twin" not in kernel.run("print(list(get_squad().agents))").text
    said = kernel.run("%escouade resume stranger", allow_error=True).text
    assert "no transcript of an agent named 'stranger' in this project" in said and "--from FILE" in said
    out = kernel.run("t = %escouade resume twin --from twin-1.jsonl\nprint(t.transcript.path.name)\n"
                     "print(json.dumps([i.text for i in t.conversation.items if getattr(i, 'role', '') == 'user']))"
                     "\nawait t.close()").text
    assert out.strip().splitlines()[-2:] == [first.name, '["the first twin"]']
