"""Budgets over real pipes (issue 24.4): scripted agents report usage (tokens in the prompt's
answer, cost in ``usage_update``) or take their time; the budget card pauses the agent, is
handed out by ``next_permission()``, is never put to the policies (rule plugins, the mode),
``continue`` re-arms it, ``stop`` cancels the turn; a squad's budget sums its agents; a
resume shows the card as it was answered."""

from __future__ import annotations

import asyncio
import json

from scripted_agent import INIT_ANY, P_NEW, P_PROMPT, chunk_line, init_result, run, until, update_line

PROMPT_MORE = ('C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1",'
               '"prompt":[{"type":"text","text":"more"}]}}')


def _end(rpc_id: int, tokens: int | None = None, stop: str = "end_turn") -> str:
    usage = f',"usage":{{"totalTokens":{tokens},"inputTokens":{tokens - 10},"outputTokens":10}}' if tokens else ""
    return f'A> {{"jsonrpc":"2.0","id":{rpc_id},"result":{{"stopReason":"{stop}"{usage}}}}}'


def _cost(amount: float, used: int = 5000) -> str:
    return update_line(f'{{"sessionUpdate":"usage_update","used":{used},"size":200000,'
                       f'"cost":{{"amount":{amount},"currency":"USD"}}}}')


def _ask(rpc_id: int, call: str) -> str:
    return (f'A> {{"jsonrpc":"2.0","id":{rpc_id},"method":"session/request_permission","params":{{"sessionId":"s1",'
            f'"toolCall":{{"toolCallId":"{call}","title":"Run ls","kind":"execute","rawInput":{{"command":"ls"}}}},'
            '"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},'
            '{"optionId":"no","name":"Reject","kind":"reject_once"}]}}')


class Recorder:
    """A permission policy (what rule plugins and the mode are) that allows all it is asked, and says what."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, card) -> None:
        self.asked.append(card.request.title if card.request is not None else "?")
        card.choose("allow_once", by="Recorder")


TOKENS = "\n".join([
    INIT_ANY, init_result(), P_NEW, P_PROMPT,
    chunk_line("Hello."),
    # the context's size (used) is no spend: only the answer's usage counts
    update_line('{"sessionUpdate":"usage_update","used":90000,"size":200000}'),
    _end(2, tokens=150),
    PROMPT_MORE,
    _ask(100, "t1"),
    'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}',
    _end(3, tokens=60),
])


def test_tokens_pass_the_budget_a_card_holds_the_next_prompt_and_continue_rearms(script):
    s = script(TOKENS)
    policy = Recorder()

    async def go():
        async with s.running(policies=[policy]) as agent:
            assert agent.set_budget(tokens=100) is agent.budget
            first = await agent.send("go")
            assert first.tokens == 150 and agent.budget.spent.tokens == 150
            card = await agent.next_permission(timeout=60)
            assert [o["optionId"] for o in card.options] == ["continue", "stop"]
            assert "budget" in repr(card).lower() and "150 of 100 tokens" in repr(card)
            assert agent.status == "waiting" and agent.budget.card is card
            second = agent.send("more")
            await asyncio.sleep(0.5)
            assert second.status == "queued"  # the queue holds while the card waits
            assert len([m for m in s.received() if m.get("method") == "session/prompt"]) == 1
            assert policy.asked == []  # never put to the policies
            card.choose("continue")
            assert (await second).stop_reason == "end_turn"
            assert agent.budget.limits == {"tokens": 250.0}  # re-armed by the same amount, from 150
            assert agent.budget.spent.tokens == 210 and agent.budget.card is None
            assert policy.asked == ["Run ls"]  # the agent's own card went to the policy, the budget's never
            assert card.label.startswith("Allowed")
            view = agent.budget.view()
            assert view["text"] == "210 of 250 tokens" and view["over"] == []

    run(go())
    s.assert_ok()


COST = "\n".join([
    INIT_ANY, init_result(), P_NEW, P_PROMPT,
    _cost(0.2),  # a fresh session's first report: growth from 0
    chunk_line("Working."),
    _cost(0.7),
    _ask(100, "t1"),
    chunk_line(" Still streaming."),
    'C*> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
    'C*> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"cancelled"}}}',
    _end(2, stop="cancelled"),
])


def test_cost_growth_pauses_mid_turn_no_permission_is_granted_and_stop_cancels(script):
    from escouade_nb.core.render_text import render_items

    s = script(COST)
    policy = Recorder()

    async def go():
        async with s.running(policies=[policy]) as agent:
            agent.set_budget(cost=0.5)
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            assert "budget" in card.request.title.lower() and "0.70 of 0.50 USD" in card.request.title
            await until(lambda: "Still streaming" in render_items(agent.conversation.items), 60, "the stream")
            held = await agent.next_permission(timeout=60)  # the agent's own card, behind the budget's
            await asyncio.sleep(0.3)
            assert held.state == "pending" and policy.asked == []  # nothing granted meanwhile
            card.choose("stop")
            done = await turn
            assert done.stop_reason == "cancelled"
            assert held.state == "cancelled" and policy.asked == []
            assert card.label.startswith("Denied") or "Stop" in card.label
            assert agent.budget.card is None and agent.status == "idle"  # stopped: not asked again until a prompt
            # spent, so the next prompt asks first; stop again: not sent
            later = agent.send("again")
            again = await agent.next_permission(timeout=60)
            assert [o["optionId"] for o in again.options] == ["continue", "stop"]
            again.choose("stop")
            assert (await later).stop_reason == "cancelled"

    run(go())
    s.assert_ok()
    assert len([m for m in s.received() if m.get("method") == "session/prompt"]) == 1  # "again" never sent


SLOW = "\n".join([
    INIT_ANY, init_result(), P_NEW, P_PROMPT,
    chunk_line("Thinking for a long time."),
    'C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}',
    _end(2, stop="cancelled"),
])


def test_seconds_of_a_slow_turn_pass_while_it_runs_continue_gives_as_much_again(script):
    s = script(SLOW)

    async def go():
        async with s.running() as agent:
            agent.set_budget(seconds=0.4)
            turn = agent.send("go")
            first = await agent.next_permission(timeout=60)
            assert "s (its budget)" in first.request.title and not turn.done
            first.choose("continue")
            limit = agent.budget.limits["seconds"]
            assert limit >= 0.8  # what was spent (≥ 0.4) and 0.4 more
            second = await agent.next_permission(timeout=60)  # the second 0.4 s passed: asked again
            assert agent.budget.spent.seconds >= limit
            second.choose("stop")
            assert (await turn).stop_reason == "cancelled"

    run(go())
    s.assert_ok()


def _squad_script(name: str, ask: bool = False) -> str:
    asking = [_ask(100, "t1"), 'C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}']
    return "\n".join([INIT_ANY, init_result(), P_NEW, P_PROMPT, *(asking if ask else []), chunk_line(f"I am {name}."),
                      _end(2, tokens=70)])


def test_a_squad_budget_sums_its_agents_and_continue_on_one_rearms_it(script, monkeypatch, tmp_path):
    """With the shipped rule plugin team-rules on for the agents' folder: it is asked the agent's own
    request (its journal says so), never the budget card."""
    from escouade_nb.engine.squad import Squad
    from escouade_nb.permissions.commands import plugins_command

    a, b = script(_squad_script("a", ask=True), name="sa"), script(_squad_script("b"), name="sb")
    plugins = tmp_path / "plugins"
    a.install(plugins)
    b.install(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))

    async def go():
        squad = Squad()
        plugins_command(squad.rules, ["on", "team-rules", "--project", str(a.ws)])
        one, two = squad.start("sa", cwd=a.ws), squad.start("sb", cwd=b.ws)
        try:
            squad.set_budget(tokens=100)
            turn = one.send("go")
            (guard,) = one.rules_guarding()
            asked = await one.next_permission(timeout=60)
            await until(lambda: not asked.permission.deciding, 60, "team-rules to answer")
            assert asked.state == "pending"  # team-rules: "ls" is neither allowed nor denied, you decide
            asked.choose("ok")
            assert (await turn).tokens == 70
            assert squad.budget.spent().tokens == 70 and one.budget.card is None  # 70 of 100: on
            assert (await two.send("go")).tokens == 70
            card = await two.next_permission(timeout=60)  # 140 of 100: the agent that passed it pauses
            assert "the squad's budget" in card.request.title and "140 of 100 tokens" in card.request.title
            assert squad.budget.view()["text"] == "140 of 100 tokens"
            card.choose("continue")
            assert squad.budget.limits == {"tokens": 240.0}
            assert two.budget.limits == {}  # the agent has no budget of its own
            journal = squad.rules.journal
            journal.flush()
            (line,) = [json.loads(x) for x in journal.path("budget").read_text().splitlines()]
            assert line["kind"] == "Answer" and line["verdict"] == "allowed" and line["tool"] == "budget"
            assert line["by"] == "you" and line["agent"] == "sb" and "140 of 100 tokens" in line["target"]
            decisions = [json.loads(x) for x in journal.path(guard.id).read_text().splitlines()]
            decided = [d for d in decisions if d["kind"] == "Decision"]
            assert [d["tool"] for d in decided] == ["Bash"], decisions  # the agent's request; never the budget card
        finally:
            await one.close()
            await two.close()
            await squad.rules.aclose()

    run(go())
    a.assert_ok()
    b.assert_ok()


def test_the_budget_card_is_on_record_and_a_resume_shows_it_answered(script, tmp_path, monkeypatch):
    from escouade_nb.core.render_text import render_items
    from escouade_nb.core.conversation import Conversation
    from escouade_nb.wire.transcript import read, replay

    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    s = script(TOKENS)

    async def go():
        async with s.running(policies=[Recorder()]) as agent:
            agent.set_budget(tokens=100)
            await agent.send("go")
            card = await agent.next_permission(timeout=60)
            card.choose("continue")
            await agent.send("more")
            return agent.transcript.path, render_items(agent.conversation.items)

    path, live = run(go())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    budget = [r["data"] for r in lines if r.get("kind") == "event" and r.get("event") == "budget"]
    assert [d["phase"] for d in budget] == ["card", "end"] and budget[0]["kinds"] == ["tokens"]
    conversation = Conversation()
    replay(read(path), conversation)
    again = render_items(conversation.items)
    assert "Budget reached: 150 of 100 tokens (its budget)" in again
    def budget_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if "budget" in line.lower()]

    assert budget_lines(again) == budget_lines(live) and len(budget_lines(live)) == 3
    assert "Allowed by you: Continue (another 100 tokens)" in again


def test_a_prompt_dropped_while_the_budget_card_waits_is_never_sent(script):
    """Drop offered on a queued prompt held behind the budget card: once Continue is
    clicked it stays dropped — not sent, its turn ended ``dropped`` (a merge found it sent
    anyway, its turn ``running`` for good)."""
    s = script(TOKENS)

    async def go():
        async with s.running(policies=[Recorder()]) as agent:
            agent.set_budget(tokens=100)
            await agent.send("go")
            card = await agent.next_permission(timeout=60)
            second = agent.send("more")
            await until(lambda: second in agent.queued, what="the second turn queued")
            from escouade_nb.core.render_text import render_items
            await until(lambda: "Held behind this card: “more”." in render_items(agent.conversation.items),
                        what="the held prompt named on the card")
            second.drop()
            assert "Held behind" not in render_items(agent.conversation.items)  # it holds nothing now
            card.choose("continue")
            await asyncio.sleep(0.5)  # what would have been sent, has been
            assert second.status == "dropped" and second.done
            assert [m.get("method") for m in s.received()].count("session/prompt") == 1

    asyncio.run(asyncio.wait_for(go(), 60))


def test_the_budget_card_names_the_prompts_it_holds_and_what_stop_does(script, tmp_path, monkeypatch):
    """Raised at a turn's end (no turn runs), the card does not offer to stop a turn: its Stop
    sends nothing, and says so; a prompt sent while it waits is named on it ("Held behind this
    card"), live, once answered, and as a resume rebuilds it from the record (on main it sat in
    ``agent.queued``, shown nowhere, and the card said "Stop cancels the running turn")."""
    from escouade_nb.core.conversation import Conversation
    from escouade_nb.core.render_text import render_items
    from escouade_nb.wire.transcript import read, replay

    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    s = script(TOKENS)

    async def go():
        async with s.running(policies=[Recorder()]) as agent:
            agent.set_budget(tokens=100)
            await agent.send("go")
            card = await agent.next_permission(timeout=60)
            assert agent.turns.current is None  # no turn runs
            assert [o["name"] for o in card.options] == ["Continue (another 100 tokens)", "Stop (send nothing)"]
            text = render_items(agent.conversation.items)
            assert "Stop cancels the running turn" not in text and "No turn is running" in text
            second = agent.send("more")
            await until(lambda: "Held behind this card" in render_items(agent.conversation.items),
                        what="the held prompt named on the card")
            assert "Held behind this card: “more”." in render_items(agent.conversation.items)
            card.choose("continue")
            assert (await second).stop_reason == "end_turn"
            live = render_items(agent.conversation.items)
            assert "Held behind this card: “more”." in live  # what it held, once answered
            return agent.transcript.path, live

    path, live = run(go())
    conversation = Conversation()
    replay(read(path), conversation)
    again = render_items(conversation.items)
    assert "Held behind this card: “more”." in again
    assert [ln for ln in again.splitlines() if "budget" in ln.lower() or "held" in ln.lower()] == \
        [ln for ln in live.splitlines() if "budget" in ln.lower() or "held" in ln.lower()]
