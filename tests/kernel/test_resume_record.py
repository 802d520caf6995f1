"""The transcript is the record (issue 26, items 4–6): a resume rebuilds exactly what the
live view showed — every card with who answered it (you, a rule plugin's name, the kernel's
``run_code`` card), the client's notices, each agent process's own tool calls even when a
new process reuses the ids of the one before (the shipped fake restarts them per process) —
any number of times, across kernel restarts. Real kernels, the shipped ``fake`` agent, its
real MCP calls."""

from __future__ import annotations

import json

import pytest

from kernel_client import Kernel, scratch_kernel, wait_for

pytestmark = pytest.mark.kernel

SETUP = ("%load_ext escouade_nb\n"
         "import json\n"
         "from escouade_nb.core.render_text import render_items, answer_label\n"
         "from escouade_nb.widgets.agent_view import AgentView\n"
         "async def answer(agent, prompt, option, **how):\n"
         "    t = agent.send(prompt)\n"
         "    while (card := await agent.next_permission(timeout=60)).answered:\n"
         "        pass\n"
         "    card.choose(option, **how)\n"
         "    return await t\n")
# what the conversation shows, as text and as the agent view's items, the first N items
SHOWN = ("v = AgentView(a)\nkeys = {v.feed.key(i) for i in a.conversation.items[:N]}\n"
         "print(json.dumps({'text': [render_items([i]) for i in a.conversation.items[:N]],"
         " 'view': [x for x in v.state()['items'] if x[0] in keys],"
         " 'cards': [answer_label(i) for i in a.conversation.items[:N] if type(i).__name__ == 'Permission'],"
         " 'n': len(a.conversation.items)}))")


def _shown(kernel: Kernel, n: int | None = None) -> dict:
    return json.loads(kernel.run(SHOWN.replace("N", "None" if n is None else str(n))).text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Kernel 1: an edit allowed by you, a command allowed by a rule plugin's answer, a
    ``run_code`` card allowed by you, a restart (a notice; the new process reuses the
    session and tool call ids), an edit of another file. Kernel 2: resumed, then a
    ``run_code`` card and an edit (ids reused again: the run's is the first edit's).
    Kernel 3: resumed again. What each showed."""
    tmp = tmp_path_factory.mktemp("resume-record")
    for folder in ("ws", "plugins"):
        (tmp / folder).mkdir()
    (tmp / "ws" / "notes.txt").write_text("notes\n")
    (tmp / "ws" / "cellcard.txt").write_text("card\n")
    seen: dict = {}
    first = scratch_kernel(tmp)
    try:
        first.run(SETUP + "a = %escouade fake --as rt\nawait a.ready()")
        wait_for(first, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        first.run("await answer(a, 'edit notes.txt', 'allow-once')")
        first.run("await answer(a, 'run ls -la', 'allow-once', by='Team rules via Escouade', message='ls reads')")
        first.run("await answer(a, 'run code x = 6 * 7', 'run')")
        first.run("await a.restart()\nawait answer(a, 'edit cellcard.txt', 'allow-once')")
        seen["live1"] = _shown(first)
    finally:
        first.shutdown()
    second = scratch_kernel(tmp)
    try:
        second.run(SETUP + "a = %escouade resume rt")
        seen["resumed1"] = _shown(second, seen["live1"]["n"])
        second.run("await a.ready()\nawait answer(a, 'run code y = 1', 'run')\n"  # its call-1: the edit's id before
                   "await answer(a, 'edit notes.txt again', 'allow-once')")
        seen["live2"] = _shown(second)
    finally:
        second.shutdown()
    third = scratch_kernel(tmp)
    try:
        third.run(SETUP + "a = %escouade resume rt")
        seen["resumed2"] = _shown(third, seen["live2"]["n"])
    finally:
        third.shutdown()
    return seen


def test_every_card_says_who_answered_it_live(rounds):
    assert rounds["live1"]["cards"] == ["Allowed once by you", "Allowed by Team rules via Escouade — ls reads",
                                        "Allowed by you: Run", "Allowed once by you"]
    text = "\n".join(rounds["live1"]["text"])
    assert "Edit notes.txt" in text and "Edit cellcard.txt" in text
    assert "Restarted: a new process and a new session." in text


def test_a_resume_rebuilds_what_was_live(rounds):
    assert len(rounds["live1"]["view"]) == rounds["live1"]["n"] > 10  # every item drawn, and compared
    for key in ("text", "cards", "view"):
        assert rounds["resumed1"][key] == rounds["live1"][key], key


def test_a_second_resume_after_a_turn_with_reused_ids_rebuilds_what_was_live(rounds):
    assert rounds["live2"]["cards"][:4] == rounds["live1"]["cards"]
    assert rounds["live2"]["cards"][4:] == ["Allowed by you: Run", "Allowed once by you"]
    for key in ("text", "cards", "view"):
        assert rounds["resumed2"][key] == rounds["live2"][key], key


# -- the same, over a scripted agent: ids reused, a replay on session/resume, who answered ---------

def _script_runs() -> tuple[str, str]:
    from scripted_agent import END, INIT_ANY, P_NEW, P_PROMPT, chunk_line, init_result, update_line

    options = ('[{"optionId":"yes","name":"Allow","kind":"allow_once"},'
               '{"optionId":"no","name":"Reject","kind":"reject_once"}]')

    def edit(name: str, status: str = "pending") -> str:
        return update_line('{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Edit ' + name + '","kind":"edit",'
                       '"status":"' + status + '"}')

    def ask(name: str) -> str:  # the same JSON-RPC id and tool call id in both processes
        return ('A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1",'
                '"toolCall":{"toolCallId":"t1","title":"Edit ' + name + '","kind":"edit"},"options":' + options + '}}')

    answered = 'C> {"jsonrpc":"2.0","id":100,"result":"$ANY"}'
    first = "\n".join([INIT_ANY, init_result('{"resume":{}}'), P_NEW, P_PROMPT, edit("a.txt"), ask("a.txt"),
                       answered, edit("a.txt", "completed"), chunk_line("Edited a."), END, '!> {"wait_eof": 5}'])
    second = "\n".join([
        INIT_ANY, init_result('{"resume":{}}'),
        'C> {"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"s1"}}',
        # it must not replay, and does: the history again before its answer
        update_line('{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"go"}}'),
        edit("a.txt", "completed"), chunk_line("Edited a."),
        'A> {"jsonrpc":"2.0","id":1,"result":{}}',
        P_PROMPT.replace('"go"', '"more"'), edit("b.txt"), ask("b.txt"), answered, edit("b.txt", "failed"),
        chunk_line("Not allowed."), END, '!> {"wait_eof": 5}'])
    return first, second


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """A scripted agent: a card answered by you; then, resumed from the transcript, a
    process that replays on ``session/resume`` (it must not) and reuses the tool call id
    ``t1`` and the JSON-RPC ids of the first, with a card a rule plugin refuses; then the
    transcript resumed twice more (two new kernels). What each showed, as text."""
    import sys

    from escouade_nb.core.render_text import render_items
    from escouade_nb.engine.agent import Agent
    from scripted_agent import Script, run

    s = Script(tmp_path_factory.mktemp("scripted"), *_script_runs(), forbid=[{"method": "session/load"}])

    async def live(agent: Agent, prompt: str, answer) -> str:
        try:
            agent.start() if agent.live is None else None
            turn = agent.send(prompt)
            answer(await agent.next_permission(timeout=60))
            await turn
            return render_items(agent.conversation.items)
        finally:
            await agent.close()

    first = s.agent()
    seen = {"live1": run(live(first, "go", lambda card: card.choose("yes")))}
    path = first.transcript.path
    again = Agent.resume(path, s.ref, program=sys.executable)
    seen["resumed1"] = render_items(again.conversation.items)
    seen["live2"] = run(live(again, "more", lambda card: card.deny(by="Team rules via Escouade", message="not b.txt")))
    s.assert_ok(runs=2)
    seen["resumed"] = [render_items(Agent.resume(path, s.ref, program=sys.executable).conversation.items)
                       for _ in range(2)]
    return seen


def test_a_new_process_reusing_tool_call_and_request_ids_never_rewrites_an_earlier_card(scripted):
    """Item 4: the second process's ``t1`` is a new tool call with its own card, live and resumed."""
    for shown in (scripted["live2"], *scripted["resumed"]):
        assert "[tool] Edit a.txt (edit, completed)\n[permission] Edit a.txt: Allowed once by you" in shown
        assert "[tool] Edit b.txt (edit, failed)\n[permission] Edit b.txt: Denied by" in shown


def test_an_agent_that_replays_on_session_resume_is_shown_once(scripted):
    """Item 5: ACP's ``session/resume`` must not replay; one that does is folded, not appended."""
    shown = scripted["live2"]
    assert shown.count("agent: Edited a.") == 1 and shown.count("you: go") == 1
    assert shown.count("Edit a.txt (edit") == 1


def test_who_answered_each_card_reads_the_same_after_each_resume(scripted):
    """Item 6 (and "any number of times"): each resume rebuilds exactly what was live."""
    assert scripted["resumed1"] == scripted["live1"]
    assert "Edit b.txt: Denied by Team rules via Escouade — not b.txt" in scripted["live2"]
    assert scripted["resumed"] == [scripted["live2"], scripted["live2"]]


def test_a_resume_keeps_who_answered_a_plan_why_a_card_was_cancelled_and_a_question(tmp_path, monkeypatch):
    """Item 6: what only the client knew of a card — that it was a plan you approved, that
    your Stop cancelled it, a question card and your answer — is on record, and a resume
    reads it as it was live."""
    from escouade_nb.core.render_text import render_items
    from escouade_nb.engine.agent import Agent
    from escouade_nb.engine.squad import Squad
    from scripted_agent import run

    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    work = tmp_path / "work"
    work.mkdir()

    async def go():
        squad = Squad()
        agent = squad.start("fake", cwd=work, name="who")
        try:
            turn = agent.send("present plan")
            (await agent.next_permission(timeout=60)).approve()
            await turn
            turn = agent.send("run make build")
            await agent.next_permission(timeout=60)
            agent.cancel()
            await turn
            turn = agent.send("ask me")
            question = await agent.next_question(timeout=60)
            by_type = {"integer": 2, "number": 2, "boolean": True, "string": "x"}
            question.accept({name: spec["enum"][0] if "enum" in spec else by_type.get(spec.get("type"), "x")
                             for name, spec in question.fields.items()})
            await turn
            return agent, render_items(agent.conversation.items)
        finally:
            await agent.close()
            await squad.rules.aclose()

    agent, shown = run(go())
    assert "[plan to approve]" in shown and "  Approved by you" in shown
    assert "[permission] Run make build: Cancelled (you stopped the turn)" in shown
    assert "[question] " in shown and "→ answered: {" in shown
    assert render_items(Agent.resume(agent.transcript.path, None, program=None).conversation.items) == shown


def test_a_call_the_agent_ran_without_asking_keeps_its_note_after_a_resume(script):
    """Item 6: "not asked: earlier in this session you chose “Allow always”" is the client's
    note, on no wire line: it is on record, and a resume shows it."""
    import sys

    from escouade_nb.core.render_text import render_items
    from escouade_nb.engine.agent import Agent
    from scripted_agent import END, INIT_ANY, P_NEW, P_PROMPT, init_result, run, update_line

    def edit(call: str, name: str, status: str) -> str:
        return update_line('{"sessionUpdate":"tool_call","toolCallId":"' + call + '","title":"Edit ' + name + '",'
                       '"kind":"edit","status":"' + status + '"}')

    s = script("\n".join([
        INIT_ANY, init_result(), P_NEW, P_PROMPT, edit("t1", "a.txt", "pending"),
        'A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":'
        '{"toolCallId":"t1"},"options":[{"optionId":"always","name":"Allow always","kind":"allow_always"}]}}',
        'C> {"jsonrpc":"2.0","id":100,"result":"$ANY"}', edit("t1", "a.txt", "completed"),
        edit("t2", "b.txt", "completed"), END, '!> {"wait_eof": 5}']))

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            (await agent.next_permission(timeout=60)).choose("always")
            await turn
            return agent, render_items(agent.conversation.items)

    agent, shown = run(go())
    assert "[tool] Edit b.txt (edit, completed)\n  not asked: earlier in this session you chose" in shown
    assert render_items(Agent.resume(agent.transcript.path, s.ref, program=sys.executable).conversation.items) == shown
