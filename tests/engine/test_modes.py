"""Modes, config options, models, plan approval and questions, against the real fake agent."""

import json

import pytest
from acp_clients import fake_agent
from scripted_agent import until
from deadlines import run

from escouade_nb.engine.agent import AgentError
from escouade_nb.manifest import discover
from escouade_nb.core.plans import answers_prompt, plan_of, questions_in, visible_text
from escouade_nb.core.conversation import ToolCall




def test_escouade_modes_come_from_the_manifest(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        modes = a.escouade_modes()
        assert list(modes) == ["default", "acceptEdits", "bypassPermissions", "readOnly"]
        assert modes["acceptEdits"].startswith("The fake agent's accept-edits mode")
        await a.ready()
        assert await a.set_escouade_mode("acceptEdits")
        assert a.escouade_mode == "acceptEdits" and a.conversation.current_mode_id == "accept-edits"
        assert await a.set_escouade_mode("readOnly")
        assert a.conversation.current_mode_id == "read-only"
        with pytest.raises(ValueError, match="does not offer the mode 'plan'"):
            await a.set_escouade_mode("plan")
        await a.close()
    run(go())


def test_goose_modes_map_to_its_own(tmp_path):
    from escouade_nb.engine.controls import escouade_modes

    ref = discover().find("goose")  # only the manifest part is needed: no process
    assert list(escouade_modes(ref)) == ["default", "acceptEdits", "bypassPermissions", "readOnly"]
    assert escouade_modes(ref)["bypassPermissions"].startswith("Goose asks nothing")


def test_unknown_mode_at_start_is_refused(tmp_path):
    async def go():
        with pytest.raises(AgentError, match="does not offer the mode 'sideways'"):
            fake_agent(tmp_path, mode="sideways")
    run(go())


def test_accept_edits_lets_edits_inside_the_folder_through(tmp_path):
    async def go():
        a = fake_agent(tmp_path, mode="acceptEdits")
        await a.ready()
        # the start-up mode switch runs right after ready
        await until(lambda: a.conversation.current_mode_id == "accept-edits", what="the start-up mode")
        turn = a.send("edit notes.txt")
        card = await a.next_permission(timeout=60)
        r = await turn
        assert r.text == "Edited notes.txt."
        assert card.label == "Allowed once by the mode (accept edits)"
        assert (tmp_path / "notes.txt").exists()
        # outside the folder: the user decides
        turn = a.send("edit ../outside-of-it.txt")
        card = await a.next_permission(timeout=60)
        await until(lambda: not card.permission.deciding, what="the mode's policy done")
        assert card.state == "pending" and a.status == "waiting" and not card.permission.deciding
        card.choose("reject_once")
        assert (await turn).text == "I left ../outside-of-it.txt alone."
        # a command is not an edit
        turn = a.send("run npm test")
        card = await a.next_permission(timeout=60)
        await until(lambda: not card.permission.deciding, what="the mode's policy done")
        assert card.state == "pending"
        card.choose("reject_once")
        await turn
        await a.close()
    run(go())


def test_bypass_allows_everything_by_the_mode(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        await a.set_escouade_mode("bypassPermissions")
        turn = a.send("run rm -rf build")
        card = await a.next_permission(timeout=60)
        r = await turn
        assert card.label == "Allowed once by the mode (bypass permissions)"
        assert r.text == "Ran `rm -rf build`."
        await a.close()
    run(go())


def test_agent_modes_and_config_options_are_independent(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        c = a.conversation
        assert c.current_mode_id == "ask"
        assert [o["id"] for o in c.config_options] == ["sandbox", "model", "verbose"]  # boolean advertised
        assert await a.set_mode("plan")
        assert await a.set_config_option("sandbox", "read-only")
        assert await a.set_mode("ask")
        assert (await a.send("which mode")).text == "mode=ask sandbox=read-only model=fake-small"
        assert await a.set_config_option("sandbox", "full-access")
        assert await a.set_mode("plan")
        assert (await a.send("which mode")).text == "mode=plan sandbox=full-access model=fake-small"
        await a.close()
    run(go())


def test_refused_changes_roll_back_with_a_message(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        c = a.conversation
        assert not await a.set_mode("nonsense")
        assert c.current_mode_id == "ask"
        assert not await a.set_config_option("sandbox", "everything")
        assert next(o for o in c.config_options if o["id"] == "sandbox")["currentValue"] == "workspace-write"
        notices = [i.text for i in c.items if type(i).__name__ == "Notice"]
        assert any("refused the mode 'nonsense'" in n for n in notices)
        assert any("refused sandbox = 'everything'" in n for n in notices)
        with pytest.raises(ValueError, match="no config option 'colour'"):
            await a.set_config_option("colour", "blue")
        await a.close()
    run(go())


def test_agent_changing_its_own_mode_is_applied(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        await a.send("switch mode")
        assert a.conversation.current_mode_id == "plan"
        await a.close()
    run(go())


def test_model_menu_uses_the_model_option(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        current, choices = a.model_choices()
        assert current == "fake-small"
        assert choices == [("fake-small", "Small / Fake small"), ("fake-large", "Large / Fake large")]
        assert await a.set_model("fake-large")
        assert (await a.send("which mode")).text.endswith("model=fake-large")
        await a.close()
    run(go())


def test_plan_approved(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        await a.set_mode("plan")
        turn = a.send("present plan")
        card = await a.next_permission(timeout=60)
        assert card.plan.startswith("## Plan") and not card.permission.deciding
        assert card.approve()
        r = await turn
        assert r.text == "Plan approved; starting with step 1."
        assert card.label == "Approved by you"
        assert a.conversation.current_mode_id == "ask"  # the agent left plan mode
        await a.close()
    run(go())


def test_plan_sent_back_with_feedback_verbatim(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        assert a.reads_refusal_messages
        sent = []
        a.transport.observers.append(lambda d, m: d == "out" and sent.append(m))
        turn = a.send("present plan")
        card = await a.next_permission(timeout=60)
        feedback = "Add a step: update the docs (with *care*)."
        assert card.keep_planning(feedback)
        r = await turn
        assert r.text == f"Keeping on planning. Feedback received: {feedback}"
        answer = next(m["result"] for m in sent if "result" in m and "outcome" in (m["result"] or {}))
        assert answer["outcome"] == {"outcome": "selected", "optionId": "keep-planning"}
        assert answer["_meta"]["escouade"]["message"] == feedback
        assert card.label == f"Sent back by you: {feedback}"
        await a.close()
    run(go())


def test_plan_feedback_goes_as_next_prompt_when_the_agent_cannot_read_it(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        a.initialized({})  # as from an initialize whose _meta.escouade reads no refusal message
        turn = a.send("present plan")
        card = await a.next_permission(timeout=60)
        card.keep_planning("Shorter, please.")
        await turn
        def users():
            return [i.text for i in a.conversation.items if type(i).__name__ == "Message" and i.role == "user"]

        await until(lambda: users()[-1] == "Shorter, please.", what="the answer sent as the user's message")
        assert users()[-1] == "Shorter, please."
        await a.close()
    run(go())


def test_elicitation_form(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        turn = a.send("ask me")
        q = await a.next_question(timeout=60)
        assert list(q.fields) == ["database", "replicas", "migrate", "note"]
        assert a.status == "waiting"
        with pytest.raises(ValueError, match="required field\\(s\\) missing: database"):
            q.accept({"replicas": 3})
        assert q.accept({"database": "sqlite", "replicas": 3})
        assert not q.decline()  # the first answer wins
        assert (await turn).text == "You chose: database=sqlite, replicas=3"
        turn = a.send("ask me")
        q = await a.next_question(timeout=60)
        q.decline()
        assert (await turn).text == "You declined to answer; I will pick sqlite."
        turn = a.send("ask me")
        q = await a.next_question(timeout=60)
        q.cancel()
        assert (await turn).stop_reason == "cancelled"
        await a.close()
    run(go())


def test_elicitation_url(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        await a.ready()
        turn = a.send("open link")
        q = await a.next_question(timeout=60)
        assert q.question.mode == "url" and q.question.url == "https://example.com/login"
        q.accept()
        assert (await turn).text == "Sign-in answer: accept."
        await a.close()
    run(go())


def test_questions_in_text(tmp_path):
    async def go():
        a = fake_agent(tmp_path)
        a.harness.harness.acp.questions_in_text = True
        try:
            await a.ready()
            sent = []
            a.transport.observers.append(lambda d, m: d == "out" and sent.append(m))
            turn = a.send("question block")
            r = await turn
            first = next(m for m in sent if m.get("method") == "session/prompt")
            assert first["params"]["prompt"][0]["text"].startswith("[escouade] You have no tool to ask")
            q = await a.next_question(timeout=60)
            assert q.question.mode == "text"
            assert [x["id"] for x in q.question.questions] == ["db", "name"]
            assert "<escouade_question>" in r.text
            assert visible_text(r.text) == "Before I go on, I need a decision."
            q.accept({"db": "postgres", "name": "events"})

            def users() -> list[str]:
                return [i.text for i in a.conversation.items if type(i).__name__ == "Message" and i.role == "user"]

            def prompts() -> list[dict]:
                return [m for m in sent if m.get("method") == "session/prompt"]

            await until(lambda: users()[-1].startswith("[escouade] The user answered") and len(prompts()) == 2,
                        30, "the answers sent as the next prompt")
            assert users()[-1] == ("[escouade] The user answered your questions:\n- Which database?\n  → postgres\n"
                                 "- Name of the new table?\n  → events")
            assert "You have no tool" not in json.dumps(prompts()[1])  # told once
        finally:
            a.harness.harness.acp.questions_in_text = False
            await a.close()
    run(go())


def test_plan_detection_and_question_parsing():
    call = ToolCall("k", tool_call_id="t", title="ExitPlanMode", raw_input={"plan": "do it"})
    assert plan_of(call) == "do it"
    call = ToolCall("k", tool_call_id="t", title="exit_plan_mode · planning",
                    content=[{"type": "content", "content": {"type": "text", "text": "# P"}}])
    assert plan_of(call) == "# P"
    call = ToolCall("k", tool_call_id="t", title="Bash", meta={"claudeCode": {"toolName": "present_plan"}},
                    raw_input={"plan": "x"})
    assert plan_of(call, {"present_plan": "ExitPlanMode"}) == "x"
    assert plan_of(ToolCall("k", tool_call_id="t", title="Run npm test")) is None
    assert questions_in("no block") is None
    assert questions_in("a <escouade_question>not json</escouade_question>") == [{"id": "q1", "question": "not json"}]
    assert questions_in('<escouade_question>{"question": "Go?", "options": ["y", "n"]}</escouade_question>') == [
        {"id": "q1", "question": "Go?", "options": ["y", "n"]}]
    assert visible_text("hello <escouade_question>{\"quest") == "hello"  # still streaming: hidden already
    assert answers_prompt([{"id": "a", "question": "Q?"}], {}) == "[escouade] The user answered your questions:\n- Q?\n  → (no answer)"


# -- released agents' modes (issue 14): scripted agents over real pipes ------------------------------
def _update(update: dict) -> str:
    return "A> " + json.dumps({"jsonrpc": "2.0", "method": "session/update",
                                "params": {"sessionId": "s1", "update": update}}, separators=(",", ":"))


def _modes(current: str, *ids: str) -> dict:
    return {"currentModeId": current, "availableModes": [{"id": i, "name": i.title()} for i in ids]}


def _scripted(tmp_path, session_result: dict, *lines: str, acp: dict, forbid=None):
    from scripted_agent import P_INIT, Script

    new = ('C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}\n'
           "A> " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1", **session_result}},
                                  separators=(",", ":")))
    return Script(tmp_path, "\n".join([P_INIT, new, *lines]), acp=acp, forbid=forbid)


VIBE_LIKE = {"modes": {"default": "ask", "acceptEdits": "accept-edits", "bypassPermissions": "auto-approve"}}
PROMPT = ('C> {"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"s1",'
          '"prompt":[{"type":"text","text":"%s"}]}}')
ENDS = 'A> {"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn"}}'


def test_the_mode_menus_show_the_agents_real_mode(tmp_path):
    """vibe starts in accept-edits: the Mode menu and the squad say acceptEdits, not
    "default"; the agent's own switches move them; a mode none maps to is said, and the
    menu shows none (the client then answers nothing by itself)."""
    from escouade_nb.core.conversation import Notice
    from escouade_nb.widgets import AgentView
    from escouade_nb.widgets.squad_view import agent_row
    from scripted_agent import until

    s = _scripted(tmp_path, {"modes": _modes("accept-edits", "ask", "accept-edits", "auto-approve", "plan")},
                  PROMPT % (2, "go"),
                  _update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
                  ENDS % 2,
                  PROMPT % (3, "again"),
                  _update({"sessionUpdate": "current_mode_update", "currentModeId": "ask"}),
                  ENDS % 3, acp=VIBE_LIKE)

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)

            def menu() -> dict | None:  # the Mode menu the view's head shows
                return next((c for c in view.head()["controls"] if c["key"] == "escouade_mode"), None)
            await agent.ready()
            assert agent.escouade_mode == "acceptEdits" and agent_row(agent)["mode"] == "acceptEdits"
            await until(lambda: menu() is not None, 60, "the Mode menu")
            await until(lambda: menu()["value"] == "acceptEdits", 60, "acceptEdits shown")
            assert not [i for i in agent.conversation.items if isinstance(i, Notice)]
            await agent.send("go")
            assert agent.escouade_mode is None and not agent.controls.applies
            assert agent_row(agent)["mode"] == "plan (its own)"
            (notice,) = [i for i in agent.conversation.items if isinstance(i, Notice)]
            assert "its own mode 'plan'" in notice.text and "none of Escouade's modes" in notice.text
            await until(lambda: menu()["value"] is None, 60, "no Escouade mode shown")
            await agent.send("again")
            assert agent.escouade_mode == "default"

    run(go())
    s.assert_ok()


def test_the_mode_menus_show_the_agents_real_mode_from_its_config_option(tmp_path):
    """codex starts read-only, said by a config option of category ``mode``: the Mode menu
    says readOnly, not "auto"."""
    option = {"id": "mode", "name": "Approval", "category": "mode", "type": "select", "currentValue": "read-only",
              "options": [{"value": v, "name": v} for v in ("read-only", "auto", "full-access")]}
    s = _scripted(tmp_path, {"configOptions": [option]}, acp={
        "modes": {"default": "auto", "bypassPermissions": "full-access"}, "readOnlyMode": "read-only"})

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert agent.escouade_mode == "readOnly"
            assert list(agent.escouade_modes()) == ["default", "bypassPermissions", "readOnly"]

    run(go())


def test_escouade_modes_a_harness_cannot_switch_are_not_offered_as_if_they_worked(tmp_path):
    """A goose-like agent (modes mapped in its manifest, none in its session, no
    ``session/set_mode``): readOnly is not offered; acceptEdits is offered as applied by
    the client alone, sends no ``session/set_mode``, and recognises a write by the
    manifest's tools map (kind ``other``, title "Write")."""
    call = {"toolCallId": "t1", "title": "Write", "kind": "other", "status": "pending",
            "locations": [{"path": "$WS/notes.txt"}], "rawInput": {"path": "$WS/notes.txt", "content": "x"}}
    s = _scripted(tmp_path, {}, PROMPT % (2, "write"),
                  _update({"sessionUpdate": "tool_call", **call}),
                  "A> " + json.dumps({"jsonrpc": "2.0", "id": 100, "method": "session/request_permission", "params": {
                      "sessionId": "s1", "toolCall": {"toolCallId": "t1"},
                      "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                                  {"optionId": "no", "name": "Deny", "kind": "reject_once"}]}}, separators=(",", ":")),
                  'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"yes"}}}',
                  ENDS % 2,
                  acp={"modes": {"default": "approve", "acceptEdits": "smart_approve", "bypassPermissions": "auto"},
                       "readOnlyMode": "chat", "tools": {"write": "Write", "shell": "Bash"}},
                  forbid=[{"method": "session/set_mode"}, {"method": "session/set_config_option"}])

    async def go():
        async with s.running() as agent:
            assert "readOnly" in agent.escouade_modes()  # before a session: what the manifest maps
            await agent.ready()
            modes = agent.escouade_modes()
            assert list(modes) == ["default", "acceptEdits", "bypassPermissions"]
            assert "has no mode to switch" in modes["acceptEdits"]
            assert await agent.set_escouade_mode("acceptEdits") and agent.escouade_mode == "acceptEdits"
            turn = agent.send("write")
            card = await agent.next_permission(timeout=60)
            await turn
            assert card.label == "Allowed once by the mode (accept edits)"

    run(go())
    s.assert_ok()


def test_accept_edits_recognises_writes_by_the_manifests_tools_map(tmp_path):
    """goose's writes arrive as ACP kind ``other``, titled "Write": Escouade's accept-edits
    policy knows them by the manifest's ``tools`` map (as rule plugins do), not by the
    ACP kind alone; a command of the same shape is still asked."""
    def call(tcid: str, title: str) -> dict:
        return {"toolCallId": tcid, "title": title, "kind": "other", "status": "pending",
                "locations": [{"path": "$WS/notes.txt"}], "rawInput": {"path": "$WS/notes.txt"}}

    def ask(rid: int, tcid: str) -> str:
        return "A> " + json.dumps({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": {
            "sessionId": "s1", "toolCall": {"toolCallId": tcid},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Deny", "kind": "reject_once"}]}}, separators=(",", ":"))

    s = _scripted(tmp_path, {"modes": _modes("approve", "approve", "smart_approve")},
                  'C> {"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"smart_approve"}}',
                  'A> {"jsonrpc":"2.0","id":2,"result":{}}',
                  PROMPT % (3, "write"), _update({"sessionUpdate": "tool_call", **call("t1", "Write")}), ask(100, "t1"),
                  'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"yes"}}}',
                  _update({"sessionUpdate": "tool_call", **call("t2", "shell")}), ask(101, "t2"),
                  'C> {"jsonrpc":"2.0","id":101,"result":{"outcome":{"outcome":"selected","optionId":"no"}}}',
                  ENDS % 3,
                  acp={"modes": {"default": "approve", "acceptEdits": "smart_approve"},
                       "tools": {"write": "Write", "shell": "Bash"}})

    async def go():
        async with s.running() as agent:
            await agent.ready()
            assert await agent.set_escouade_mode("acceptEdits")
            turn = agent.send("write")
            write = await agent.next_permission(timeout=60)
            shell = await agent.next_permission(timeout=60)
            await until(lambda: not write.permission.deciding and not shell.permission.deciding, what="the policies")
            assert write.label == "Allowed once by the mode (accept edits)"
            assert shell.state == "pending"  # a command is not an edit: the user decides
            shell.choose("reject_once")
            await turn

    run(go())
    s.assert_ok()
