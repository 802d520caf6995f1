"""A budget of tokens or cost counts only what the agent reports (issue 32, finding 6a): an agent
that reports no usage never reaches it. After a turn without a report, the budget says so
("tokens: not reported by this agent"); seconds, measured by the kernel, still count."""

from __future__ import annotations

from scripted_agent import INIT_ANY, P_NEW, P_PROMPT, init_result, run

SILENT = "\n".join([
    INIT_ANY, init_result(), P_NEW, P_PROMPT,
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',  # no usage, no usage_update
])


def test_an_agent_that_reports_no_usage_is_said_so_where_the_budget_is_shown(script):
    s = script(SILENT)

    async def go():
        async with s.running() as agent:
            budget = agent.set_budget(tokens=10_000, cost=1.0, seconds=3600)
            assert "not reported" not in repr(budget)  # nothing known before a turn
            await agent.send("go")
            view = agent.budget.view()
            assert view["text"] == ("tokens: not reported by this agent (limit 10,000 tokens) · cost: not reported by "
                                    "this agent (limit 1.00) · " + view["text"].rsplit(" · ", 1)[1])
            assert view["text"].endswith("of 3600 s")  # the seconds the kernel measured
            assert [i["reported"] for i in view["items"]] == [False, False, True]
            assert "tokens: not reported by this agent" in repr(agent.budget)
            assert agent.budget.spent.seconds > 0 and agent.budget.card is None

    run(go())
    s.assert_ok()
