"""Awareness with a real agent (the shipped fake agent over real pipes): the user's edit of a
cell the agent changed in its current turn is told once, at the head of its next prompt
when no tool call came first; once that next turn has begun, the cells of the turn before
are no longer "this turn" (the user's later edit of them is not told); a change dropped
(the page reloaded without saving it) leaves ``agent.pending_edits`` and is told once. The
page's side: tests/widgets/test_page_awareness.py; in a browser: tests/browser/test_lab_awareness.py."""

from __future__ import annotations

import asyncio

from escouade_nb.engine.review import cell_review
from test_live_cell_edits import Settled


def test_the_users_edit_of_the_agents_cell_is_told_once_in_its_next_prompt_and_a_drop_too(tmp_path):
    from escouade_nb.engine.agent import Agent, state_of
    from escouade_nb.manifest import discover, locate_program

    async def main() -> None:
        ref = discover().find("fake")
        agent = Agent(ref, program=locate_program(ref.harness), cwd=tmp_path)
        try:
            await agent.ready()
            sent: list = []
            agent.transport.observers.append(
                lambda d, m: d == "out" and m.get("method") == "session/prompt" and sent.append(m["params"]["prompt"]))
            await agent.send("hello one")
            review = state_of(agent).edit_review
            review.add("c1", "edit", Settled())  # the agent's changes in its turn
            review.add("c2", "insert", Settled())
            assert cell_review.user_changed("c1", "edited") == 1
            assert cell_review.user_changed("c1", "edited") == 0, "once per cell and kind"
            assert cell_review.drop("c2", "the notebook's page was reloaded without saving it")
            assert [e.cell_id for e in agent.pending_edits] == ["c1"]
            await agent.send("hello two")
            # the turn before is over: the user's edit of c1 now is not news
            assert cell_review.user_changed("c1", "edited") == 0
            await agent.send("hello three")
            notices = [[b for b in prompt if (b.get("_meta") or {}).get("escouade") == {"context": "notice"}]
                       for prompt in sent]
            assert [len(n) for n in notices] == [0, 1, 0], "told once, in the next prompt"
            text = notices[1][0]["text"]
            assert "The user changed cells you touched in this turn: cell c1 edited by the user." in text
            assert "dropped, neither kept nor rejected: insert of cell c2 (the notebook's page was reloaded" in text
        finally:
            await agent.close()

    asyncio.run(asyncio.wait_for(main(), 60))
