"""ACP as it stands at the end of 2026 (issue 13), each feature played by the scripted
agent over real pipes against the public :class:`~escouade_nb.engine.agent.Agent`:
notices and compaction (opt-in client capabilities), the session lifecycle
(``session/list``, ``session/resume``, ``session/close``, ``session/delete``,
``additionalDirectories`` and the fence), the client's ``systemPrompt``, the tool call's
stable ``name``, ``$/cancel_request`` for an abandoned request, ``session/set_model`` only
with a models state; the magics in a kernel. The wire shapes are those of
``escouade_nb/core/acp_v1_25.py``.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from escouade_nb.core.conversation import Compaction, Notice, Unknown
from escouade_nb.core.render_text import render_item, render_items
from escouade_nb.engine.agent import Agent
from scripted_agent import END, INIT_ANY, P_NEW, P_PROMPT, chunk_line, init_result, run, until, update_line
from view_helpers import buttons_of, html_shown

INIT_2026 = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
             '{"fs":{"readTextFile":true,"writeTextFile":true},"session":{"notices":{},"compaction":{}}}}}')



# -- notices and compaction ---------------------------------------------------------------------
NOTICES = "\n".join([
    INIT_2026, init_result(), P_NEW, P_PROMPT,
    chunk_line("Before."),
    update_line('{"sessionUpdate":"notice","severity":"warning","title":"Rate limit close",'
            '"description":"80% of the hourly budget used"}'),
    update_line('{"sessionUpdate":"compaction_update","compactionId":"c1","status":"in_progress"}'),
    update_line('{"sessionUpdate":"compaction_summary_chunk","compactionId":"c1",'
            '"content":{"type":"text","text":"Kept: the failing test "}}'),
    update_line('{"sessionUpdate":"compaction_summary_chunk","compactionId":"c1",'
            '"content":{"type":"text","text":"in test_a.py."}}'),
    update_line('{"sessionUpdate":"compaction_update","compactionId":"c1","status":"completed"}'),
    update_line('{"sessionUpdate":"notice","severity":"fyi","title":"Odd severity"}'),
    update_line('{"sessionUpdate":"hologram_update","shape":"cube"}'),
    chunk_line("After."),
    END,
])


def test_notices_and_compaction_are_advertised_shown_and_replayed(script):
    from escouade_nb.widgets import AgentView

    s = script(NOTICES)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            await asyncio.sleep(0.1)
            return agent.transcript.path, agent.conversation, repr(view), "".join(html_shown(view))

    path, conv, shown, html = run(go())
    s.assert_ok()
    init = s.received()[0]
    assert init["params"]["clientCapabilities"]["session"] == {"configOptions": {"boolean": {}}, "notices": {}, "compaction": {}}
    assert isinstance(init["id"], str) and init["id"].startswith("escouade-")  # our transport, not the SDK's
    notices = [i for i in conv.items if isinstance(i, Notice) and i.origin == "agent"]
    assert [(n.level, n.severity, n.text, n.detail) for n in notices] == [
        ("warning", "warning", "Rate limit close", "80% of the hourly budget used"), ("info", "fyi", "Odd severity", "")]
    (compaction,) = [i for i in conv.items if isinstance(i, Compaction)]
    assert compaction.status == "completed" and compaction.summary_text == "Kept: the failing test in test_a.py."
    text = render_items(conv.items)
    assert ("agent: Before.\n[agent warning] Rate limit close\n  80% of the hourly budget used\n"
            "──── earlier context summarised ────\n  summary: Kept: the failing test in test_a.py.\n"
            "[agent fyi] Odd severity\n") in text
    # an update of a kind nobody asked for: kept, said readably (never pydantic's list of tags)
    (unknown,) = [i for i in conv.items if isinstance(i, Unknown)]
    assert render_item(unknown) == ("[unknown update hologram_update] an update of kind 'hologram_update' that this "
                                    "client does not know")
    assert "Input tag" not in text and "expected tags" not in text
    # the view: its text repr, and the HTML of the boundary and of the notice
    assert "earlier context summarised" in shown and "Rate limit close" in shown
    assert "earlier context summarised" in html and "<details><summary>summary</summary>" in html
    assert "Scripted · warning: <b>Rate limit close</b>" in html and "Input tag" not in html

    # the exported notebook says it too
    from escouade_nb.engine.export import notebook_cells

    md = "\n".join("".join(c["source"]) for c in notebook_cells(conv.items, speaker="Scripted"))
    assert "> **Scripted · warning:** Rate limit close" in md
    assert "──── earlier context summarised ────\n  summary: Kept: the failing test in test_a.py." in md
    # a resumed conversation (a new kernel) says what context the agent lost
    again = Agent.resume(path, None, program=None)
    assert render_items([i for i in again.conversation.items if not isinstance(i, Notice) or i.origin == "agent"]) \
        == render_items([i for i in conv.items if not isinstance(i, Notice) or i.origin == "agent"])
    (replayed,) = [i for i in again.conversation.items if isinstance(i, Compaction)]
    assert replayed.summary_text == "Kept: the failing test in test_a.py."


def test_compaction_upsert_patches_and_failed():
    """The upsert rules, through the fold: a chunk of an unseen id makes an in-progress
    compaction; ``summary`` replaces, ``null`` clears; a failed one says why."""
    from escouade_nb.core.conversation import Conversation

    conv = Conversation()
    conv.apply({"sessionUpdate": "compaction_summary_chunk", "compactionId": "c9",
                "content": {"type": "text", "text": "partial"}})
    (item,) = conv.items
    assert item.status == "in_progress" and render_item(item).startswith("──── summarising earlier context…")
    conv.apply({"sessionUpdate": "compaction_update", "compactionId": "c9", "status": "completed",
                "summary": [{"type": "text", "text": "whole"}]})
    assert item.summary_text == "whole" and len(conv.items) == 1
    conv.apply({"sessionUpdate": "compaction_update", "compactionId": "c9", "status": "failed", "summary": None,
                "error": "model refused"})
    assert render_item(item) == "──── summarising earlier context failed ────\n  error: model refused"
    conv.apply({"sessionUpdate": "compaction_update", "status": "completed"})  # no compactionId
    assert render_item(conv.items[-1]) == ("[unknown update compaction_update] a compaction_update update this "
                                           "client cannot read (compactionId: Field required)")


# -- the session lifecycle -------------------------------------------------------------------------
LIFECYCLE_CAPS = '{"list":{},"resume":{},"close":{},"delete":{},"additionalDirectories":{}}'
FIRST = "\n".join([
    INIT_ANY, init_result(LIFECYCLE_CAPS, load=True),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[],'
    '"additionalDirectories":["$EXTRA"]}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    P_PROMPT, chunk_line("Hello."), END,
    'C> {"jsonrpc":"2.0","id":3,"method":"session/list","params":{"cwd":"$WS","cursor":"$ABSENT"}}',
    'A> {"jsonrpc":"2.0","id":3,"result":{"sessions":[{"sessionId":"s1","cwd":"$WS","title":"Fix tests",'
    '"updatedAt":"2026-10-01T09:00:00Z"}],"nextCursor":"p2"}}',
    'C> {"jsonrpc":"2.0","id":4,"method":"session/list","params":{"cwd":"$WS","cursor":"p2"}}',
    'A> {"jsonrpc":"2.0","id":4,"result":{"sessions":[{"sessionId":"old","cwd":"$WS"}]}}',
    'C> {"jsonrpc":"2.0","id":5,"method":"session/delete","params":{"sessionId":"old"}}',
    'A> {"jsonrpc":"2.0","id":5,"result":{}}',
    # close: session/close first, then the end of stdin
    'C> {"jsonrpc":"2.0","id":6,"method":"session/close","params":{"sessionId":"s1"}}',
    'A> {"jsonrpc":"2.0","id":6,"result":{}}',
    '!> {"wait_eof": 5}',
])
RESUMED = "\n".join([
    INIT_ANY, init_result(LIFECYCLE_CAPS, load=True),
    # session/resume, not session/load (no replay): the agent sends nothing before its answer
    'C> {"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"s1","cwd":"$WS",'
    '"mcpServers":[],"additionalDirectories":["$EXTRA"]}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{}}',
    'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text",'
    '"text":"more"}]}}',
    chunk_line("More."), END,
    'C> {"jsonrpc":"2.0","id":6,"method":"session/close","params":{"sessionId":"s1"}}',
    'A> {"jsonrpc":"2.0","id":6,"result":{}}',
    '!> {"wait_eof": 5}',
])


def test_list_delete_close_then_resume_without_replay(tmp_path, script):
    extra = (tmp_path / "extra").resolve()
    extra.mkdir()
    s = script(FIRST, RESUMED, variables={"EXTRA": str(extra)},
               forbid=[{"method": "session/load"}])

    async def first():
        async with s.running(add_dirs=[extra]) as agent:
            assert (await agent.send("go")).text == "Hello."
            page = await agent.sessions()
            assert page.sessions == [{"sessionId": "s1", "cwd": str(s.ws), "title": "Fix tests",
                                      "updatedAt": "2026-10-01T09:00:00Z"}]
            assert page.next_cursor == "p2"
            last = await agent.sessions(cursor=page.next_cursor)
            assert [i["sessionId"] for i in last.sessions] == ["old"] and last.next_cursor is None
            await agent.delete_session("old")
            assert agent.session.additional_directories == [str(extra)]
        assert agent.status == "closed"
        return agent.transcript.path

    path = run(first())

    async def second():
        agent = Agent.resume(path, s.ref, program=sys.executable, add_dirs=[extra])
        try:
            agent.start()
            await agent.ready()
            assert agent.session.resumed and not agent.session.loaded
            assert (await agent.send("more")).text == "More."
            text = render_items(agent.conversation.items)
        finally:
            await agent.close()
        return text

    text = run(second())
    s.assert_ok(runs=2)
    assert "agent: Hello." in text and text.count("agent: Hello.") == 1  # from the transcript, once
    assert "(session/resume: the conversation above is from the transcript)" in text
    assert text.rstrip().endswith("you: more\nagent: More.")


NO_LIFECYCLE = "\n".join([INIT_ANY, init_result(), P_NEW, '!> {"wait_eof": 5}'])


def test_without_the_capabilities_nothing_is_sent_and_errors_say_why(tmp_path, script):
    """An agent offering none of it: no session/close on close, sessions() and
    delete_session() say what is missing, --add-dir is said not given."""
    from escouade_nb.wire.errors import AgentError

    extra = tmp_path / "extra"
    extra.mkdir()
    s = script(NO_LIFECYCLE, forbid=[{"method": "session/close"}, {"method": "session/list"},
                                               {"method": "session/delete"}, {"method": "logout"}])

    async def go():
        async with s.running(add_dirs=[extra]) as agent:
            await agent.ready()
            for call, missing in ((agent.sessions(), "sessionCapabilities.list"),
                                  (agent.delete_session("x"), "sessionCapabilities.delete"),
                                  (agent.logout(), "agentCapabilities.auth.logout")):
                try:
                    await call
                except AgentError as exc:
                    assert missing in str(exc)
                else:
                    raise AssertionError("no error")
            notices = [i.text for i in agent.conversation.items if isinstance(i, Notice)]
            assert any("does not take additional directories" in n for n in notices), notices

    run(go())
    s.assert_ok()
    new = s.received()[1]
    assert "additionalDirectories" not in new["params"]


# -- the magics, in a kernel ----------------------------------------------------------------------
MAGICS_CAPS = '{"list":{},"resume":{},"additionalDirectories":{},"systemPrompt":{"mode":{"override":{}}}}'
MAGICS = "\n".join([
    INIT_ANY, init_result(MAGICS_CAPS, load=True),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY",'
    '"additionalDirectories":["$EXTRA","$EXTRA2"],'
    '"systemPrompt":{"mode":"override","content":[{"type":"text","text":"Answer in French."}]}}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    'C> {"jsonrpc":"2.0","id":3,"method":"session/list","params":{"cwd":"$WS"}}',
    'A> {"jsonrpc":"2.0","id":3,"result":{"sessions":[{"sessionId":"s1","cwd":"$WS","title":"Fix tests",'
    '"updatedAt":"2026-10-01T09:00:00Z"}],"nextCursor":"p2"}}',
    '!> {"wait_eof": 10}',
])
OPENED = "\n".join([
    # a listed session, no transcript of ours: session/load for its replay (resume would show nothing)
    INIT_ANY, init_result(MAGICS_CAPS, load=True),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"$WS",'
    '"additionalDirectories":["$EXTRA","$EXTRA2"]}}',
    update_line('{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"fix the tests"}}'),
    chunk_line("Fixed."),
    'A> {"jsonrpc":"2.0","id":1,"result":{}}',
    '!> {"wait_eof": 10}',
])


@pytest.mark.kernel
def test_magics_add_dir_system_prompt_and_sessions(tmp_path, script, monkeypatch):
    import pytest

    pytest.importorskip("ipykernel")
    from kernel_client import Kernel

    extra, extra2 = (tmp_path / "extra").resolve(), (tmp_path / "extra2").resolve()
    extra.mkdir()
    extra2.mkdir()
    s = script(MAGICS, OPENED, name="sessy", variables={"EXTRA": str(extra), "EXTRA2": str(extra2)},
               forbid=[{"method": "session/resume"}])
    plugins = tmp_path / "plugins"
    s.install(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    kernel = Kernel(tmp_path)
    try:
        out = kernel.run(f"%load_ext escouade_nb\na = %escouade sessy --cwd {s.ws} --add-dir {extra} "
                         f"--add-dir ../extra2 --system-prompt 'Answer in French.' --system-prompt-mode override\n"
                         "await a.ready()\nfrom escouade_nb.widgets import views_of\nprint(repr(views_of(a)[-1]))").text
        assert f"+ {extra}, {extra2}" in out  # the header says the session's other folders
        def displayed(messages):
            return [m["content"]["data"].get("text/plain", "") for m in messages
                    if m["msg_type"] in ("display_data", "update_display_data")]

        messages = kernel.run("import asyncio\n%escouade sessions sessy").messages
        if not any("--cursor p2" in t for t in displayed(messages)):  # the agent's answer shown after the cell
            messages += kernel.drain_iopub(60, until=lambda m: any("--cursor p2" in t for t in displayed([m]))).messages
        shown = displayed(messages)
        shown = [t for t in shown if t]  # the widget's own output says nothing: its saved form has the text
        assert shown[0] == "asking sessy for its sessions…"
        lines = shown[-1].splitlines()
        assert lines[0] == "Sessions of sessy:" and lines[1].split() == ["2026-10-01T09:00:00Z", "Fix", "tests", "s1"]
        assert "%escouade sessions sessy --cursor p2" in shown[-1]
        bad = kernel.run("%escouade sessy --as other --cwd " + str(s.ws) + " --add-dir nowhere").text
        assert "--add-dir nowhere: no such folder" in bad
        out = kernel.run("b = %escouade resume sessy --session s1\nawait b.ready()\nimport time\n"
                         "end = time.monotonic() + 30\n"  # the replayed session in the view
                         "while 'Fixed.' not in repr(views_of(b)[-1]) and time.monotonic() < end:\n"
                         "    await asyncio.sleep(0.02)\n"
                         "print('NAME', b.name, b.session_id)\nprint(repr(views_of(b)[-1]))").text
        out = out[out.index("NAME"):]
        assert "NAME sessy-2 s1" in out and "you: fix the tests" in out and "Fixed." in out
        assert "Reattached to session s1 (session/load)" in out
    finally:
        kernel.run("await a.close()\nawait b.close()", allow_error=True)
        kernel.shutdown()
    s.assert_ok(runs=2)


# -- fences widened to the additional directories ----------------------------------------------------
FENCED = "\n".join([
    INIT_ANY, init_result('{"additionalDirectories":{}}'),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","additionalDirectories":["$EXTRA"]}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    P_PROMPT,
    'A> {"jsonrpc":"2.0","id":110,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"$EXTRA/notes.txt"}}',
    'C> {"jsonrpc":"2.0","id":110,"result":{"content":"from the other folder\\n"}}',
    'A> {"jsonrpc":"2.0","id":111,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"$OUT/secret.txt"}}',
    'C> {"jsonrpc":"2.0","id":111,"error":{"code":-32602}}',
    END,
])


def test_a_private_projects_fence_takes_in_the_additional_directories(tmp_path, script):
    from escouade_nb.manifest.project import Project

    extra, out = (tmp_path / "extra").resolve(), (tmp_path / "out").resolve()
    extra.mkdir()
    out.mkdir()
    (extra / "notes.txt").write_text("from the other folder\n")
    (out / "secret.txt").write_text("secret\n")
    s = script(FENCED, variables={"EXTRA": str(extra), "OUT": str(out)})

    async def go():
        agent = s.agent(add_dirs=[extra], project=Project.for_folder(s.ws, private=True))
        try:
            assert (await agent.send("go")).stop_reason == "end_turn"
        finally:
            await agent.close()

    run(go())
    s.assert_ok()


# -- the client's system prompt ----------------------------------------------------------------------
def _system_prompt_runs(offer: str) -> list[str]:
    run_ = "\n".join([
        INIT_ANY, init_result('{"systemPrompt":' + offer + '}'),
        'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","systemPrompt":{"mode":"append",'
        '"content":[{"type":"text","text":"$ANY"}]}}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        P_PROMPT, chunk_line("Oui."), END,
    ])
    return [run_, run_]  # the same again after a restart: resent


def test_questions_preamble_and_system_prompt_go_in_system_prompt_where_offered(script):
    from escouade_nb.core.plans import QUESTIONS_PREAMBLE

    s = script(*_system_prompt_runs("{}"))
    s.ref.harness.acp.questions_in_text = True

    async def go():
        async with s.running(system_prompt="Answer in French.", system_prompt_mode="override") as agent:
            assert (await agent.send("go")).text == "Oui."
            await agent.restart()
            assert (await agent.send("go")).text == "Oui."
            return [i.text for i in agent.conversation.items if isinstance(i, Notice)]

    notices = run(go())
    s.assert_ok(runs=2)
    for n in (0, 1):
        new, prompt = [m for m in s.received(run=n) if m.get("method") in ("session/new", "session/prompt")]
        assert new["params"]["systemPrompt"] == {"mode": "append", "content": [
            {"type": "text", "text": QUESTIONS_PREAMBLE + "Answer in French."}]}
        assert prompt["params"]["prompt"] == [{"type": "text", "text": "go"}]  # nothing of it in the prompt
    # override was asked, the agent offers append only: said, and appended
    assert sum("append only" in n for n in notices) == 2


NO_SYSTEM_PROMPT = "\n".join([
    INIT_ANY, init_result(),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","systemPrompt":"$ABSENT"}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text",'
    '"text":"$ANY"},{"type":"text","text":"go"}]}}',
    chunk_line("Oui."), END,
])


def test_without_the_offer_the_system_prompt_goes_before_the_first_prompt(script):
    from escouade_nb.core.plans import QUESTIONS_PREAMBLE

    s = script(NO_SYSTEM_PROMPT)
    s.ref.harness.acp.questions_in_text = True

    async def go():
        async with s.running(system_prompt="Answer in French.") as agent:
            assert (await agent.send("go")).text == "Oui."

    run(go())
    s.assert_ok()
    (prompt,) = [m for m in s.received() if m.get("method") == "session/prompt"]
    assert prompt["params"]["prompt"][0]["text"] == QUESTIONS_PREAMBLE + "Answer in French.\n\n"


# -- smaller stable things --------------------------------------------------------------------------
NAMED = "\n".join([
    INIT_ANY, init_result(), P_NEW, P_PROMPT,
    # the request is the first the client hears of the call: its stable name must survive the SDK's model
    'A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":'
    '{"toolCallId":"t1","name":"Bash","title":"Run ls","kind":"execute","rawInput":{"command":"ls"},'
    '"_meta":{"claudeCode":{"toolName":"Shell"}}},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"}]}}',
    'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}',
    END,
])


def test_the_tool_calls_stable_name_comes_first_for_rule_plugins(script):
    from escouade_nb.permissions.request import agent_tool_name, normalise

    s = script(NAMED)

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            call = card.permission.tool_call
            assert call.extra.get("name") == "Bash"
            assert agent_tool_name(call) == ("Bash", None)  # before _meta.claudeCode.toolName
            # a harness map naming both: the stable name decides what rule plugins are told
            assert normalise(call, {"Shell": "Write", "Bash": "Bash"}).tool == "Bash"
            card.choose("ok")
            assert (await turn).stop_reason == "end_turn"

    run(go())
    s.assert_ok()


CONFIG = "\n".join([
    INIT_ANY, init_result(),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS"}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1","configOptions":[{"id":"effort","name":"Effort",'
    '"type":"select","currentValue":"low","options":[{"value":"low","name":"Low"},{"value":"high","name":"High"}]}]}}',
    'C> {"jsonrpc":"2.0","id":5,"method":"session/set_config_option","params":{"sessionId":"s1","configId":"effort",'
    '"value":"high"}}',
    # the agent is slow; the user gives up: the client withdraws its request
    'C> {"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"$ANY"}}',
    'A> {"jsonrpc":"2.0","id":5,"error":{"code":-32800,"message":"Request cancelled"}}',
    '!> {"wait_eof": 5}',
])


def test_an_abandoned_set_config_option_is_withdrawn_with_cancel_request(script):
    s = script(CONFIG)

    async def go():
        async with s.running() as agent:
            await agent.ready()
            task = asyncio.ensure_future(agent.set_config_option("effort", "high"))
            await until(lambda: agent.conversation.config_options[0]["currentValue"] == "high",
                        what="the new value shown")  # before the agent answers
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert agent.conversation.config_options[0]["currentValue"] == "low"  # rolled back
            await asyncio.sleep(0.3)  # the late error answer is dropped, nothing breaks
            assert agent.status == "idle"

    run(go())
    s.assert_ok()
    sent = s.received()
    (request,) = [m for m in sent if m.get("method") == "session/set_config_option"]
    (cancel,) = [m for m in sent if m.get("method") == "$/cancel_request"]
    assert cancel["params"] == {"requestId": request["id"]}


def test_session_set_model_only_with_a_models_state(script):
    """Without a config option of category model nor a models state (goose's), no
    ``session/set_model`` (gone from ACP) is sent: a clear error instead."""
    s = script("\n".join([INIT_ANY, init_result(), P_NEW, '!> {"wait_eof": 5}']),
               forbid=[{"method": "session/set_model"}])

    async def go():
        async with s.running() as agent:
            await agent.ready()
            try:
                await agent.set_model("big")
            except ValueError as exc:
                assert "no config option of category 'model'" in str(exc)
            else:
                raise AssertionError("no error")

    run(go())
    s.assert_ok()


SETUP_CAPS = '{"resume":{},"additionalDirectories":{},"systemPrompt":{}}'
SETUP_PARAMS = ('"additionalDirectories":["$EXTRA"],"systemPrompt":{"mode":"append","content":[{"type":"text",'
                '"text":"Answer in French."}]}')


def test_the_session_setup_is_resent_on_resume_from_the_transcript(tmp_path, script):
    """A new kernel resuming the agent sets the session up as it was: the same
    ``additionalDirectories`` and ``systemPrompt`` (kept in the transcript's header)."""
    extra = (tmp_path / "extra").resolve()
    extra.mkdir()
    first = "\n".join([
        INIT_ANY, init_result(SETUP_CAPS),
        'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS",' + SETUP_PARAMS + '}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        P_PROMPT, chunk_line("Oui."), END,
    ])
    again = "\n".join([
        INIT_ANY, init_result(SETUP_CAPS),
        'C> {"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"s1","cwd":"$WS",'
        + SETUP_PARAMS + '}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{}}',
        '!> {"wait_eof": 5}',
    ])
    s = script(first, again, variables={"EXTRA": str(extra)})

    async def go():
        async with s.running(add_dirs=[extra], system_prompt="Answer in French.") as agent:
            assert (await agent.send("go")).text == "Oui."
        resumed = Agent.resume(agent.transcript.path, s.ref, program=sys.executable)
        assert resumed.add_dirs == [extra] and resumed.system_prompt == "Answer in French."
        try:
            resumed.start()
            await resumed.ready()
            assert resumed.session.resumed
        finally:
            await resumed.close()

    run(go())
    s.assert_ok(runs=2)


LOGOUT = "\n".join([
    INIT_ANY,
    'A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"auth":{"logout":{}}},'
    '"authMethods":[]}}',
    P_NEW,
    'C> {"jsonrpc":"2.0","id":2,"method":"logout","params":{}}',
    'A> {"jsonrpc":"2.0","id":2,"result":{}}',
    '!> {"wait_eof": 5}',
])


def test_logout_where_offered(script):
    s = script(LOGOUT)

    async def go():
        async with s.running() as agent:
            await agent.logout()
            assert any(isinstance(i, Notice) and i.text.startswith("Signed out") for i in agent.conversation.items)

    run(go())
    s.assert_ok()


# -- subagent child sessions ---------------------------------------------------------------------
INIT_SUBAGENTS = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
                  '{"subagents":{}}}}')
SUBAGENT = "\n".join([
    INIT_SUBAGENTS, init_result(), P_NEW, P_PROMPT,
    update_line('{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Task: find the bug","kind":"other",'
            '"status":"in_progress"}'),
    # announced on the parent session, before anything carries the child's id
    update_line('{"sessionUpdate":"subagent_update","sessionId":"c1","title":"explorer","description":"looks around",'
            '"capabilities":{"cancel":{}},"state":{"state":"running"}}'),
    update_line('{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Looking."}}', session="c1"),
    update_line('{"sessionUpdate":"tool_call","toolCallId":"c1-t1","title":"Read a.py","kind":"read",'
            '"status":"pending"}', session="c1"),
    # the child's own requests go through: a read, a permission
    'A> {"jsonrpc":"2.0","id":102,"method":"fs/read_text_file","params":{"sessionId":"c1","path":"$WS/a.py"}}',
    'C> {"jsonrpc":"2.0","id":102,"result":{"content":"x = 1\\n"}}',
    'A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"c1","toolCall":'
    '{"toolCallId":"c1-t2","title":"Run pytest","kind":"execute","rawInput":{"command":"pytest"}},'
    '"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},'
    '{"optionId":"no","name":"Reject","kind":"reject_once"}]}}',
    'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}',
    update_line('{"sessionUpdate":"tool_call_update","toolCallId":"c1-t2","status":"in_progress"}', session="c1"),
    update_line('{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Running the tests."}}',
            session="c1"),
    # a session nobody announced is still refused
    'A> {"jsonrpc":"2.0","id":101,"method":"fs/read_text_file","params":{"sessionId":"zz","path":"$WS/a.py"}}',
    'C> {"jsonrpc":"2.0","id":101,"error":{"code":-32602}}',
    # the user stops the parent: its session/cancel, then the child's (it allows cancel)
    'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
    'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"c1"}}',
    update_line('{"sessionUpdate":"subagent_update","sessionId":"c1","state":{"state":"idle","stopReason":"cancelled"}}'),
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}',
])


def test_a_subagent_folds_under_its_tool_call_asks_by_name_and_is_cancelled_with_the_parent(script):
    from escouade_nb.core.conversation import Message, Permission, Subagent
    from escouade_nb.widgets import AgentView
    from escouade_nb.widgets.squad_view import agent_row

    s = script(SUBAGENT)
    (s.ws / "a.py").write_text("x = 1\n")
    asked: list[str] = []

    async def policy(card):  # as rule plugins are given it: the request names the subagent
        asked.append(card.agent_name)

    async def go():
        async with s.running(policies=[policy]) as agent:
            view = AgentView(agent)
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            assert card.subagent is not None and card.subagent.session_id == "c1"
            assert card.agent_name == "script › explorer"
            # the card is in the subagent's nested conversation, not the parent's
            assert card.permission in card.subagent.conversation.items
            assert not any(isinstance(i, Permission) for i in agent.conversation.items)
            await asyncio.sleep(0.1)
            html = "".join(html_shown(view))
            assert "explorer" in html and "Run pytest" in html
            (button,) = [b for b in buttons_of(html) if b["label"] == "Allow once"]
            assert agent_row(agent)["subagents"] == "1 (1 running)"
            view.act({"k": "act", **button})  # answered in the nested view
            assert card.state == "selected"
            await until_text(agent, "Running the tests.")
            agent.cancel()
            result = await turn
            await asyncio.sleep(0.1)
            return agent, result, repr(view)

    agent, result, shown = run(go())
    s.assert_ok()
    assert result.stop_reason == "cancelled"
    assert asked == ["script › explorer"]
    conv = agent.conversation
    (sub,) = conv.subagents.values()
    assert isinstance(sub, Subagent) and sub.tool_call is conv.tool_calls["t1"] and sub not in conv.items
    assert sub.state == "idle" and sub.stop_reason == "cancelled" and sub.cancelled
    texts = [i.text for i in sub.conversation.items if isinstance(i, Message)]
    assert texts == ["Looking.", "Running the tests."]
    assert sub.conversation.tool_calls["c1-t2"].shown_status == "cancelled"
    assert not any(isinstance(i, Message) and "Looking" in i.text for i in conv.items)
    # the text repr: the nested conversation, indented under the parent's tool call
    text = render_items(conv.items)
    assert text == "\n".join([
        "you: go",
        "[tool] Task: find the bug (other, cancelled)",
        "    ⤷ subagent explorer (idle, cancelled) — looks around",
        "      agent: Looking.",
        "      [tool] Read a.py (read, cancelled)",
        "      [tool] Run pytest (execute, cancelled)",
        "        input: pytest",
        "      [permission] Run pytest: Allowed once by you",
        "      agent: Running the tests.",
        "[info] Stopped by you",  # the turn the user stopped ends on this marker
    ])
    assert "⤷ subagent explorer" in shown
    assert agent_row(agent)["subagents"] == "1"
    # a new kernel: the transcript rebuilds the nested conversation, the card in it
    again = Agent.resume(agent.transcript.path, None, program=None)
    (sub,) = again.conversation.subagents.values()
    assert render_items(sub.conversation.items) == render_items(agent.conversation.subagents["c1"].conversation.items)


async def until_text(agent, text, timeout=60.0):
    import time

    deadline = time.monotonic() + timeout
    while not any(text in render_items(s.conversation.items) for s in agent.conversation.subagents.values()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {text!r}")
        await asyncio.sleep(0.02)


SUBAGENT_RULES = "\n".join([
    INIT_SUBAGENTS, init_result(), P_NEW, P_PROMPT,
    update_line('{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Task","kind":"other","status":"in_progress"}'),
    update_line('{"sessionUpdate":"subagent_update","sessionId":"c1","title":"tester","state":{"state":"running"}}'),
    'A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"c1","toolCall":'
    '{"toolCallId":"c1-t1","title":"npm test","kind":"execute","rawInput":{"command":"npm test"}},'
    '"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},'
    '{"optionId":"no","name":"Reject","kind":"reject_once"}]}}',
    # the team's rule plugin allows it: the subagent is answered without the user
    'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}',
    update_line('{"sessionUpdate":"subagent_update","sessionId":"c1","state":{"state":"idle","stopReason":"end_turn"}}'),
    END,
])


def test_a_subagents_request_reaches_rule_plugins_named_parent_child(tmp_path, script, monkeypatch):
    """The real team-rules plugin decides a subagent's request; its journal names the
    agent "parent › child" (what the broker sent as ``agent.name``)."""
    from escouade_nb.engine.squad import Squad
    from escouade_nb.manifest.project import Project
    from escouade_nb.permissions.commands import plugins_command

    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    s = script(SUBAGENT_RULES)

    async def go():
        squad = Squad()
        plugins_command(squad.rules, ["on", "team-rules", "--project", str(s.ws)])
        squad.rules.start_soon()
        agent = s.agent(policies=[squad.rules.broker], project=Project.for_folder(s.ws))
        try:
            assert (await agent.send("go")).stop_reason == "end_turn"
            (perm,) = [i for i in agent.conversation.subagents["c1"].conversation.items if isinstance(i, Permission)]
            return perm, [d.verdict.decision for d in squad.rules.broker.history], \
                [e.agent for e in squad.rules.journal.entries(kind="Decision")]
        finally:
            await agent.close()
            await squad.rules.aclose()

    from escouade_nb.core.conversation import Permission

    perm, verdicts, agents = run(go(), timeout=60)
    s.assert_ok()
    assert perm.answered_by == "Team rules via Escouade" and perm.option_id == "ok"
    assert verdicts == ["allow"] and agents == ["script › tester"]


# -- terminal sign-in -------------------------------------------------------------------------------
INIT_AUTH = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
             '{"auth":{"terminal":true}}}}')
TERMINAL_AUTH = ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":['
                 '{"type":"terminal","id":"login","name":"Log in with a token","description":"asks for a token",'
                 '"args":["login"],"env":{"LOGIN_MODE":"test"}}]}}')
SIGNED_OUT = "\n".join([
    INIT_AUTH, TERMINAL_AUTH, P_NEW, P_PROMPT,
    'A> {"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Authentication required"}}',
    '!> {"wait_eof": 20}',  # the client runs the sign-in program itself: never authenticate
])
SIGNED_IN = "\n".join([
    INIT_AUTH, TERMINAL_AUTH, P_NEW, P_PROMPT,  # reconnected; the refused prompt sent once more
    chunk_line("Signed in, going."), END,
])


def test_a_terminal_sign_in_answered_from_the_view_then_the_prompt_retried(script):
    from escouade_nb.engine.agent import AuthRequired
    from escouade_nb.widgets import AgentView

    s = script(SIGNED_OUT, SIGNED_IN, forbid=[{"method": "authenticate"}])

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            view.act({"k": "act", "act": "send", "text": "go"})  # refused: the text goes back in the input
            while agent.status != "sign-in":
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
            assert view.prompt_value == "go" and isinstance(agent.auth_required, AuthRequired)
            await asyncio.sleep(0.1)
            methods = view.head()["sign_in"]["methods"]
            assert [m["label"] for m in methods] == ["Sign in: Log in with a token (terminal)"]
            signing = asyncio.ensure_future(agent.authenticate("login"))
            while agent.sign_in_job is None or "Paste your token" not in render_items(agent.conversation.items):
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
            shown = "".join(html_shown(view))
            assert "Paste your token" in shown  # its output, in the view
            assert view.head()["sign_in"] == {"input": True}  # the box to answer it
            view.act({"k": "act", "act": "sign_in_input", "text": "s3cret"})  # answered from the view
            await asyncio.wait_for(signing, 20)
            retried = await agent.sign_in_retry
            await asyncio.sleep(0.1)
            assert view.prompt_value == ""  # sent again by the sign-in: not left to send twice
            return agent, retried, view

    agent, retried, view = run(go(), timeout=40)
    s.assert_ok(runs=2)
    assert retried.text == "Signed in, going." and retried.stop_reason == "end_turn"
    (login,) = [e for e in s.entries("login")]
    assert login["line"] == "s3cret" and login["env"] == "test"  # the method's env, its stdin
    text = render_items(agent.conversation.items)
    assert "[tool] Sign in: Log in with a token (execute, completed)" in text
    assert f"input: LOGIN_MODE=test {sys.executable} " in text and " login" in text
    assert "  terminal sign-in-1: exited with code 0\n  Paste your token: \n  Signed in.\n" in text
    assert "Signed in (Log in with a token): reconnecting." in text
    assert view.head()["sign_in"] is None
    with __import__("pytest").raises(Exception, match="no terminal sign-in"):
        run(agent.sign_in_input("late"))


def test_the_shipped_fake_agent_lists_its_sessions_and_answers_close(tmp_path, monkeypatch):
    """``fake`` offers ``session/list`` and ``session/close`` (never ``loadSession``):
    the session of a prompt is listed, titled by it; Stop sends ``session/close``, answered."""
    from escouade_nb.engine.squad import Squad
    from escouade_nb.wire import transcript as tr

    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))

    async def go():
        squad = Squad()
        agent = squad.start("fake", cwd=tmp_path)
        try:
            await agent.ready()
            assert agent.agent_capabilities["loadSession"] is False
            assert agent.agent_capabilities["sessionCapabilities"] == {"list": {}, "close": {}}
            await agent.send("hello there")
            page = await agent.sessions()
        finally:
            await agent.close()
            await squad.rules.aclose()
        return agent, page

    agent, page = run(go(), timeout=60)
    (info,) = page.sessions
    assert info["sessionId"] == agent.session_id and info["title"] == "hello there" and info["cwd"] == str(tmp_path)
    assert page.next_cursor is None
    records = list(tr.read(agent.transcript.path))
    (close,) = [r.msg for r in records if r.kind == "out" and (r.msg or {}).get("method") == "session/close"]
    assert close["params"] == {"sessionId": agent.session_id}
    assert [r.msg.get("result") for r in records if r.kind == "in" and (r.msg or {}).get("id") == close["id"]] == [{}]


LISTED = "\n".join([
    INIT_ANY, init_result('{"list":{},"delete":{}}', load=True),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
    'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
    'C> {"jsonrpc":"2.0","id":3,"method":"session/list","params":{"cwd":"$WS"}}',
    'A> {"jsonrpc":"2.0","id":3,"result":{"sessions":[{"sessionId":"s1","cwd":"$WS","title":"Fix tests",'
    '"updatedAt":"2026-10-01T09:00:00Z"},{"sessionId":"old","cwd":"$WS","title":"Old work"}]}}',
    # Delete, then Keep: nothing sent; Delete, then Confirm: session/delete
    'C> {"jsonrpc":"2.0","id":4,"method":"session/delete","params":{"sessionId":"old"}}',
    'A> {"jsonrpc":"2.0","id":4,"result":{}}',
    '!> {"wait_eof": 5}',
])
LISTED_OPEN = "\n".join([  # Open on the row of s1: a new agent on it (session/load: its replay is the view)
    INIT_ANY, init_result('{"list":{},"delete":{}}', load=True),
    'C> {"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"$WS"}}',
    update_line('{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"fix the tests"}}'),
    chunk_line("Fixed."),
    'A> {"jsonrpc":"2.0","id":1,"result":{}}',
    '!> {"wait_eof": 5}',
])


def test_the_sessions_view_opens_a_row_and_deletes_one_once_confirmed(tmp_path, script, monkeypatch):
    from escouade_nb.engine.squad import Squad
    from escouade_nb.widgets.sessions_view import SessionsView

    s = script(LISTED, LISTED_OPEN, name="lister")
    plugins = tmp_path / "plugins"
    s.install(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))

    async def go():
        squad = Squad()
        agent = squad.start("lister", cwd=s.ws)
        opened = None
        try:
            await agent.ready()
            page = await agent.sessions()
            view = SessionsView(squad, agent, page)
            view.act({"k": "act", "act": "open", "id": "s1"})  # Open
            (opened,) = view.opened
            await opened.ready()
            await until(lambda: "you: fix the tests" in render_items(opened.conversation.items), what="the replay")
            assert opened.session_id == "s1" and opened.name != agent.name
            assert "you: fix the tests" in render_items(opened.conversation.items)
            assert f"(opened s1 as {opened.name})" in repr(view)
            assert repr(view).splitlines()[1].split() == ["2026-10-01T09:00:00Z", "Fix", "tests", "s1"]
            assert view.opened_view_model is not None and view.opened_view_model.agent is opened

            def row(sid):
                return next(r for r in view.state()["rows"] if r["id"] == sid)["state"]

            assert row("old") == "shown" and view.state()["can_delete"]
            view.act({"k": "act", "act": "ask_delete", "id": "old"})  # Delete: asks first
            assert row("old") == "confirm"
            view.act({"k": "act", "act": "keep", "id": "old"})  # Keep
            assert row("old") == "shown" and "session/delete" not in str(s.received())
            view.act({"k": "act", "act": "ask_delete", "id": "old"})
            assert await view.delete("old")  # what Confirm delete runs
            assert view.deleted == {"old"} and "Old work" not in repr(view) and "(deleted old)" in repr(view)
            assert row("old") == "deleted"
            saved = view.companion_bundle(final=True)  # the list, saved as a static table
            assert "<s>Old work old</s> deleted" in saved["text/html"] and "Fix tests" in saved["text/html"]
            assert saved["text/plain"] == repr(view)
            view.close()
            assert opened.alive  # closing the list closes the view it opened, not the agent
        finally:
            for a in (agent, opened):
                if a is not None:
                    await a.close()
            await squad.rules.aclose()

    run(go())
    s.assert_ok(runs=2)


def test_closing_the_agent_ends_a_terminal_sign_in_under_way(script):
    from escouade_nb.engine.agent import AuthRequired
    from escouade_nb.wire.errors import AgentError
    from scripted_agent import alive

    s = script(SIGNED_OUT, forbid=[{"method": "authenticate"}])

    async def go():
        import pytest

        agent = s.agent()
        with pytest.raises(AuthRequired):
            await agent.send("go")
        signing = asyncio.ensure_future(agent.authenticate("login"))
        while agent.sign_in_job is None or not agent.sign_in_job.running:
            await asyncio.sleep(0.02)
        pid = agent.sign_in_job._terminals.get(agent.sign_in_job._terminal_id).pid
        assert alive(pid)
        await agent.close()  # the program waits on stdin: it is ended, not left behind
        with pytest.raises(AgentError, match="was stopped"):
            await asyncio.wait_for(signing, 60)
        assert not alive(pid) and agent.status == "closed" and agent.sign_in_job is None
        return render_items(agent.conversation.items)

    text = run(go())
    s.assert_ok()
    assert "Sign-in 'Log in with a token' stopped: the agent was closed" in text
    assert "Restarted" not in text
