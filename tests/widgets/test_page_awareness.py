"""Awareness through the kernel's side of the channel to its notebook's pages
(``widgets/notebook_pages`` with ``engine/review/cell_review``), with comms of our own standing
for the browser tabs: the user's edit or deletion of a cell an agent touched in its current
turn is told to that agent once (not to another agent, not after its next turn begins); a
deleted pending cell leaves ``pending_edits``; after a reload (a new client of the same tab)
the pending changes the page still holds are re-linked to it and the others are dropped and
told once; the other pages of the notebook are told of each change made in one. The real
pages: tests/browser/test_lab_awareness.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from escouade_nb.engine.review.cell_review import EditReview
from escouade_nb.widgets import notebook_pages
from escouade_nb.widgets.notebook_pages import TARGET, NotebookPages
from test_notebook_pages import Comm, Manager


def hello(pages_manager: Manager, client: str, tab: str, pending: list[str] | None,
          path: str = "nb.ipynb") -> Comm:
    """A page says hello on a comm of its own (as after a ping, or by itself after a reload)."""
    comm = Comm()
    pages_manager.targets[TARGET](comm, {"content": {"data": {
        "v": 1, "client": client, "hello": {"path": path, "panel": "p-" + client, "tab": tab, "pending": pending}}}})
    return comm


def say(comm: Comm, data: dict) -> None:
    comm.on_message({"content": {"data": data}})


async def answer(comm: Comm, coro, **reply: Any) -> Any:
    """Run ``coro`` (a request to the page on ``comm``) and answer it with ``reply``."""
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.sleep(0.01)
        ops = [m for m in comm.sent if "req" in m]
        for op in ops:
            comm.sent.remove(op)
            say(comm, {"client": op["to"], "reply": op["req"], "ok": True, **reply})
    return task.result()


def setup(pings: list | None = None) -> tuple[NotebookPages, Manager]:
    manager = Manager()

    def ping(data: dict) -> Comm:
        if pings is not None:
            pings.append(data)
        return Comm()

    pages = NotebookPages(open_comm=ping, comm_manager=manager, notebook=lambda: Path("/srv/work/nb.ipynb"))
    pages.start()
    return pages, manager


def test_the_users_edit_or_deletion_of_a_cell_the_agent_touched_this_turn_is_told_once():
    async def main() -> None:
        pages, manager = setup()
        a = hello(manager, "a", "tab-1", [])
        mine, other = EditReview(), EditReview()
        try:
            mine.add("c1", "edit", pages)
            mine.add("c2", "insert", pages)
            other.add("c9", "insert", pages)
            mine.touch("c3")  # a cell it ran
            say(a, {"client": "a", "touched": {"cell": "c1", "what": "edited"}})
            say(a, {"client": "a", "touched": {"cell": "c1", "what": "edited"}})  # more typing: told once
            say(a, {"client": "a", "touched": {"cell": "c3", "what": "deleted"}})
            say(a, {"client": "a", "touched": {"cell": "zz", "what": "edited"}})  # touched by no agent
            told = mine.take_notice()
            assert told is not None and told.startswith("[escouade_nb notice] ")
            assert "The user changed cells you touched in this turn: cell c1 edited by the user; " \
                   "cell c3 deleted by the user." in told and "zz" not in told
            assert mine.take_notice() is None, "told once"
            assert other.take_notice() is None, "the other agent did not touch those cells"
            # the user deletes a pending cell: out of pending_edits, dropped, and told (touched this turn)
            (c2,) = [e for e in mine.pending if e.cell_id == "c2"]
            say(a, {"client": "a", "touched": {"cell": "c2", "what": "deleted"}})
            assert c2.state == "dropped" and [e.cell_id for e in mine.pending] == ["c1"]
            assert "cell c2 deleted by the user" in (mine.take_notice() or "")
            # the agent's next turn: what it touched before is not told any more
            mine.new_turn()
            say(a, {"client": "a", "touched": {"cell": "c1", "what": "edited"}})
            assert mine.take_notice() is None
            # a report that is not one is dropped
            strays = pages.strays
            say(a, {"client": "a", "touched": {"cell": "c1", "what": "renamed"}})
            assert pages.strays == strays + 1
        finally:
            mine.close()
            other.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_reload_relinks_the_pending_changes_it_kept_and_drops_the_others_once(monkeypatch):
    monkeypatch.setattr(notebook_pages, "RELINK_PINGS", (0.05, 5.0))

    async def main() -> None:
        pings: list = []
        pages, manager = setup(pings)
        b = hello(manager, "b", "tab-2", [])  # another tab of the notebook
        a = hello(manager, "a", "tab-1", [])  # the latest hello: the changes go to this one
        review = EditReview()
        try:
            for cell in ("saved", "unsaved"):
                got = await answer(a, pages.change_cell("insert", {"source": "1", "cell_type": "code", "after": None,
                                                                   "agent": "claude"}), cell_id=cell, change="insert")
                review.add(got["cell_id"], got["change"], pages)
            # the other tab was told each change, not asked anything
            notes = [m for m in b.sent if "elsewhere" in m]
            assert [(m["to"], m["elsewhere"]) for m in notes] == [
                ("b", {"change": "insert", "agent": "claude", "cell": "saved"}),
                ("b", {"change": "insert", "agent": "claude", "cell": "unsaved"})]
            assert not any("elsewhere" in m for m in a.sent), "not the page that made the change"
            # a browser tab opened from tab 1 (its sessionStorage, so its tab id, copied) while tab 1 is
            # still here: not a reload, nothing concluded
            hello(manager, "copy", "tab-1", [])
            assert [e.cell_id for e in review.pending] == ["saved", "unsaved"] and review.take_notice() is None
            # tab 1 reloads: bye, then the new page's hello with what its document holds pending
            a.on_closed({})
            await asyncio.sleep(0.2)
            assert len(pings) == 1, "the kernel pings while no page holds its pending changes"
            hello(manager, "b2", "tab-2", [])  # a hello from another tab concludes nothing
            assert [e.cell_id for e in review.pending] == ["saved", "unsaved"]
            hello(manager, "a2", "tab-1", None)  # not loaded yet: nothing concluded
            assert [e.cell_id for e in review.pending] == ["saved", "unsaved"]
            a2 = hello(manager, "a2", "tab-1", ["saved"])
            (kept,) = review.pending
            assert kept.cell_id == "saved"
            assert "insert of cell unsaved (the notebook's page was reloaded without saving it" in (
                review.take_notice() or "")
            assert review.take_notice() is None, "told once"
            # Keep from Python goes to the reloaded page (the one holding the cell), not the latest hello
            assert await answer(a2, kept.keep(), outcome="kept") == "kept"
            assert review.pending == [] and kept.state == "kept"
            pages.close()
            assert not pages._timers, "the later ping cancelled with the pages"
        finally:
            review.close()

    asyncio.run(asyncio.wait_for(main(), 30))
