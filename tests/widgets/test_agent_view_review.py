"""Keep all / Reject all in the agent's view (the Python side): the view's head lists the
agent's changes to the open notebook pending review (``agent.pending_edits``), follows them
as they arrive and are answered (in the view, from Python, in the page), and draws nothing
once they are; each answer is a notice in the conversation and a ``kernel_tool`` ``settle``
line in the transcript, so ``%escouade resume`` shows it; the saved form says what was
kept and rejected, with no button. Against the shipped fake agent, a page of our own
answering the settles (the real page: tests/browser/test_lab_agent_view_review.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from acp_clients import fake_agent

from scripted_agent import until
from deadlines import run
from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import Agent, state_of
from escouade_nb.widgets import AgentView


class Page:
    """A page that answers every Keep or Reject (and says which page was asked)."""

    def __init__(self) -> None:
        self.settles: list[tuple[str, bool]] = []

    async def settle_cell(self, cell_id: str, keep: bool, client: str | None = None) -> dict[str, Any]:
        self.settles.append((cell_id, keep))
        await asyncio.sleep(0)
        return {"outcome": "kept" if keep else "rejected"}


def review_of(view: AgentView) -> Any:
    return view.head()["review"]


def heads_sent(view: AgentView) -> list[dict]:
    """The heads the view would send now (what the front-end redraws from)."""
    ops, _more = view.collect()
    return [op[1] for op in ops if op[0] == "hd"]


def test_the_agent_view_lists_pending_changes_live_and_keep_all_answers_them(tmp_path):
    async def go():
        agent = fake_agent(tmp_path, name="scribe")
        view = other = None
        try:
            await agent.ready()
            view, other = AgentView(agent), AgentView(agent)  # two views of one agent
            heads_sent(view)
            assert review_of(view) is None  # nothing pending: nothing drawn
            page = Page()
            review = state_of(agent).edit_review
            review.add("c1", "insert", page)
            (head,) = heads_sent(view)  # a change arriving redraws the view
            assert head["review"] == {"edits": [{"cell": "c1", "change": "insert", "busy": False,
                                                 "label": "new cell c1"}]}
            review.add("c2", "edit", page)
            review.add("c3", "delete", page)
            assert [e["label"] for e in heads_sent(view)[0]["review"]["edits"]] == [
                "new cell c1", "edit of cell c2", "deletion of cell c3"]

            view.act({"k": "act", "act": "review", "value": "keep", "key": ""})  # Keep all, in one view
            await until(lambda: not agent.pending_edits)
            assert sorted(page.settles) == [("c1", True), ("c2", True), ("c3", True)]
            assert review_of(view) is None and review_of(other) is None  # gone in both views
            assert heads_sent(other)[-1]["review"] is None
            view.act({"k": "act", "act": "review", "value": "keep", "key": ""})  # nothing left: nothing sent
            await asyncio.sleep(0.05)
            assert len(page.settles) == 3
            assert [e.state for e in review.settled] == ["kept", "kept", "kept"]
        finally:
            for v in (view, other):
                if v is not None:
                    v.close()
            await agent.close()
    run(go())


def test_one_change_rejected_in_the_view_another_kept_from_python_and_the_saved_form_says_so(tmp_path):
    async def go():
        agent = fake_agent(tmp_path, name="scribe")
        view = None
        try:
            await agent.ready()
            view = AgentView(agent)
            page = Page()
            review = state_of(agent).edit_review
            for cell, change in (("c1", "insert"), ("c2", "edit"), ("c3", "insert")):
                review.add(cell, change, page)
            view.act({"k": "act", "act": "review", "value": "reject", "key": "c2"})  # one, in the view
            await until(lambda: [e.cell_id for e in agent.pending_edits] == ["c1", "c3"])
            assert [e["cell"] for e in review_of(view)["edits"]] == ["c1", "c3"]
            await agent.pending_edits[0].keep()  # from Python: the view follows
            assert [e["cell"] for e in review_of(view)["edits"]] == ["c3"]
            review.add("c3", "removed", page)  # the agent deleted its own new cell: dropped
            assert review_of(view) is None and page.settles == [("c2", False), ("c1", True)]

            saved = view.companion_bundle()
            assert "Its changes to the notebook: edit of cell c2: rejected; new cell c1: kept; new cell c3: dropped" \
                in saved["text/plain"]
            html = saved["text/html"]
            assert "edit of cell c2: rejected" in html and "new cell c1: kept" in html
            assert "Keep all" not in html and "<button" not in html  # a record, never live buttons
        finally:
            if view is not None:
                view.close()
            await agent.close()
    run(go())


def test_each_answer_is_in_the_transcript_and_resume_shows_it(tmp_path):
    async def go() -> tuple[Any, str]:
        agent = fake_agent(tmp_path, name="scribe")
        try:
            await agent.ready()
            await agent.send("hello")
            page = Page()
            review = state_of(agent).edit_review
            review.add("c1", "insert", page)
            review.add("c2", "edit", page)
            review.add("c9", "insert", page)
            await agent.pending_edits[0].keep()
            await agent.pending_edits[0].reject()
            review.add("c9", "removed", page)
            shown = render_items(agent.conversation.items)
            path = agent.transcript.path
        finally:
            await agent.close()
        return path, shown

    path, shown = run(go())
    for words in ("new cell c1 kept", "edit of cell c2 rejected (taken back)", "new cell c9 dropped"):
        assert f"Notebook review: {words}" in shown
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    settles = [r["data"] for r in lines if r.get("kind") == "event" and r.get("event") == "kernel_tool"
               and r["data"].get("phase") == "settle"]
    assert [(s["cell"], s["change"], s["outcome"]) for s in settles] == [
        ("c1", "insert", "kept"), ("c2", "edit", "rejected"), ("c9", "insert", "dropped")]

    async def resumed_view() -> tuple[str, str]:
        resumed = Agent.resume(path, None, program=None)  # the record outlives the view and the kernel
        view = AgentView(resumed)
        try:
            return render_items(resumed.conversation.items), view.companion_bundle()["text/plain"]
        finally:
            view.close()
            await resumed.close()

    again, saved = run(resumed_view())
    for words in ("new cell c1 kept", "edit of cell c2 rejected (taken back)", "new cell c9 dropped"):
        assert f"Notebook review: {words}" in again
    assert "Its changes to the notebook: new cell c1: kept; edit of cell c2: rejected; new cell c9: dropped" in saved


class NoPage:
    """No page answers: the settle fails as the channel says."""

    async def settle_cell(self, cell_id: str, keep: bool, client: str | None = None) -> dict[str, Any]:
        from escouade_nb.kernel_mcp.tools import ToolFailure

        raise ToolFailure("changing a cell needs this notebook open (no such page answered): nothing was changed")


def test_a_keep_all_that_no_page_answers_says_so_and_offers_them_again(tmp_path):
    async def go():
        agent = fake_agent(tmp_path, name="scribe")
        view = None
        try:
            await agent.ready()
            view = AgentView(agent)
            state_of(agent).edit_review.add("c1", "insert", NoPage())
            view.act({"k": "act", "act": "review", "value": "keep", "key": ""})
            assert review_of(view)["edits"][0]["busy"] is True  # under way: no button offered twice
            shown = lambda: render_items(agent.conversation.items)  # noqa: E731
            await until(lambda: "was not done" in shown())
            assert "Notebook review: the Keep of new cell c1 was not done (changing a cell needs this notebook " \
                   "open (no such page answered): nothing was changed); it is still pending" in shown()
            await until(lambda: not review_of(view)["edits"][0]["busy"])  # offered again
            assert [e.state for e in agent.pending_edits] == ["pending"]
        finally:
            if view is not None:
                view.close()
            await agent.close()
    run(go())
