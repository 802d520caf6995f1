"""``insert_cell``, ``edit_cell``, ``delete_cell`` through the kernel's MCP server (plain
asyncio, the ``mcp`` SDK's client) with a page of our own standing for the notebook's
(it checks the hash as the real page does, tests/browser/test_lab_cell_edits.py): each change
answers at once "pending review" with the cell id, asks no card (the owner's read check,
with the notebook path, is all), and tells the owner how it ended (its provenance sent with the change, for the cell's
metadata once kept; a Reject told to the agent in its next tool result, once); a stale edit is a tool
error saying the cell changed since; the live read shows a pending cell with ``pending:
true``; without a channel, one line."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from test_live_cells_read import Owner, client, text_of

from escouade_nb.engine.review.cell_review import EditReview
from escouade_nb.kernel_mcp.server import KernelServer, LiveNotebook
from escouade_nb.kernel_mcp.tools import ToolFailure


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Page:
    """The page's side, as labextension/src/index.js does it: changes marked pending in place."""

    def __init__(self) -> None:
        self.cells: list[dict[str, Any]] = [{"id": "a1", "cell_type": "code", "source": "df = load()"}]
        self.ops: list[tuple[str, dict]] = []

    async def live_cells(self) -> dict[str, Any]:
        return {"path": "nb.ipynb", "client": "t", "cells": [dict(c) for c in self.cells]}

    async def change_cell(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        self.ops.append((op, fields))
        if op == "insert":
            at = len(self.cells) if fields["after"] is None else \
                [c["id"] for c in self.cells].index(fields["after"]) + 1
            cell = {"id": f"n{len(self.ops)}", "cell_type": fields["cell_type"], "source": fields["source"],
                    "pending": "insert"}
            self.cells.insert(at, cell)
            return {"cell_id": cell["id"], "change": "insert"}
        (cell,) = [c for c in self.cells if c["id"] == fields["cell"]]
        if sha(cell["source"]) != fields["base"]:
            raise ToolFailure(f"cell {cell['id']} changed since you read it: read it again")
        if op == "edit":
            cell["source"] = fields["source"]
        if cell.get("pending") == "insert" and op == "delete":
            self.cells.remove(cell)
            return {"cell_id": cell["id"], "change": "removed"}
        cell.setdefault("original", cell["source"] if op == "delete" else self.before)
        cell.setdefault("pending", op)
        return {"cell_id": cell["id"], "change": op}

    before = ""

    async def settle_cell(self, cell_id: str, keep: bool) -> dict[str, Any]:
        self.ops.append(("settle", {"cell": cell_id, "keep": keep}))
        cell = next((c for c in self.cells if c["id"] == cell_id and "pending" in c), None)
        if cell is None:
            raise ToolFailure(f"the notebook page answered: cell {cell_id} has no change pending review")
        change = cell.pop("pending")
        original = cell.pop("original", None)
        if (keep and change == "delete") or (not keep and change == "insert"):
            self.cells.remove(cell)
        elif not keep and change == "edit":
            cell["source"] = original
        return {"outcome": "kept" if keep else "rejected"}


class Owner2(Owner):
    def __init__(self) -> None:
        super().__init__()
        self.done: list[tuple[str, str]] = []
        self.review = EditReview()

    def edited(self, cell_id: str, change: str, live: Any) -> None:
        self.review.add(cell_id, change, live)

    def tool_done(self, tool: str, arguments: dict, status: str, text: str) -> None:
        self.done.append((tool, status))


def test_changes_answer_pending_review_at_once_and_a_stale_edit_is_refused():
    async def main() -> None:
        page = Page()
        assert isinstance(page, LiveNotebook)
        server = await KernelServer(namespace={"__session__": "/srv/work/nb.ipynb"}, live=page).start()
        try:
            owner = Owner2()
            async with client(server.url, server.grant(owner).token) as session:
                got = await session.call_tool("insert_cell", {"source": "df.plot()", "after_cell_id": "a1"})
                assert not got.is_error, text_of(got)
                answer = json.loads(text_of(got))
                assert answer["status"] == "pending review" and answer["cell_id"] == "n1"
                by = page.ops[-1][1].pop("by")
                assert page.ops[-1] == ("insert", {"source": "df.plot()", "cell_type": "code", "after": "a1",
                                                   "agent": "test owner"})
                assert {k: by[k] for k in ("agent", "harness", "session", "turn")} == {
                    "agent": "test owner", "harness": None, "session": None, "turn": None}  # no provenance()
                assert owner.reads[-1] == ("insert_cell", {"source": "df.plot()", "cell_type": "code",
                                                           "after_cell_id": "a1", "path": "/srv/work/nb.ipynb"})
                live = json.loads(text_of(await session.call_tool("notebook_cells", {"source": "live"})))
                new = live["cells"][1]
                assert (new["id"], new["pending"], new["pending_change"], new["sha256"]) == \
                    ("n1", True, "insert", sha("df.plot()"))
                assert live["cells"][0]["pending"] is False and "pending_change" not in live["cells"][0]
                # the user typed into a1 after the agent read it: the edit naming the old hash is refused
                page.cells[0]["source"] = "df = load('2024')"
                stale = await session.call_tool("edit_cell", {"cell_id": "a1", "source": "df = 1",
                                                              "base_sha256": sha("df = load()")})
                assert stale.is_error and "changed since" in text_of(stale) and "\n" not in text_of(stale)
                assert page.cells[0]["source"] == "df = load('2024')"
                # the edit naming what is there now is made, pending
                page.before = "df = load('2024')"
                ok = await session.call_tool("edit_cell", {"cell_id": "a1", "source": "df = 1",
                                                           "base_sha256": sha("df = load('2024')")})
                assert not ok.is_error and json.loads(text_of(ok))["status"] == "pending review"
                gone = await session.call_tool("delete_cell", {"cell_id": "n1", "base_sha256": sha("df.plot()")})
                assert json.loads(text_of(gone))["cell_id"] == "n1"
                assert owner.done == [("insert_cell", "ok"), ("notebook_cells", "ok"), ("edit_cell", "error"),
                                      ("edit_cell", "ok"), ("delete_cell", "ok")]
                # the agent deleted its own new cell: gone, nothing to review of it; its edit of a1 is pending
                assert [(e.cell_id, e.change) for e in owner.review.pending] == [("a1", "edit")]
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_keep_and_reject_awaited_or_not_and_reject_restores_exactly():
    async def main() -> None:
        page = Page()
        server = await KernelServer(namespace={}, live=page).start()
        try:
            owner = Owner2()
            async with client(server.url, server.grant(owner).token) as session:
                new = json.loads(text_of(await session.call_tool("insert_cell", {"source": "1 + 1"})))["cell_id"]
                page.before = "df = load()"
                await session.call_tool("edit_cell", {"cell_id": "a1", "source": "df = 2",
                                                      "base_sha256": sha("df = load()")})
                edits = owner.review.pending
                assert [(e.cell_id, e.change, e.state) for e in edits] == [(new, "insert", "pending"),
                                                                           ("a1", "edit", "pending")]
                # Reject, awaited: the user's source back exactly, the new cell gone
                assert await edits[1].reject() == "rejected"
                assert [(c["id"], c["source"], c.get("pending")) for c in page.cells] == \
                    [("a1", "df = load()", None), (new, "1 + 1", "insert")]
                settling = edits[0].reject()  # not awaited: it runs all the same
                while not settling.done:
                    await asyncio.sleep(0.01)
                assert [c["id"] for c in page.cells] == ["a1"] and page.cells[0]["source"] == "df = load()"
                assert owner.review.pending == [] and (edits[0].state, edits[1].state) == ("rejected", "rejected")
                # Keep: the change stays; a settled edit is not settled twice
                await session.call_tool("insert_cell", {"source": "kept = True"})
                (kept,) = owner.review.pending
                assert await kept.keep() == "kept" and page.cells[-1]["source"] == "kept = True"
                assert "pending" not in page.cells[-1]
                try:
                    kept.reject()
                    raise AssertionError("a settled edit was settled again")
                except ValueError as exc:
                    assert "already kept" in str(exc)
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_changes_without_a_channel_say_so_in_one_line():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        try:
            async with client(server.url, server.grant(Owner()).token) as session:
                for tool, args in (("insert_cell", {"source": "1"}),
                                   ("edit_cell", {"cell_id": "a", "source": "1", "base_sha256": "0" * 64}),
                                   ("delete_cell", {"cell_id": "a", "base_sha256": "0" * 64})):
                    got = await session.call_tool(tool, args)
                    assert got.is_error and "\n" not in text_of(got).strip()
                    assert f"{tool} needs escouade_nb loaded in a kernel" in text_of(got)
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


class Owner3(Owner2):
    """An owner as an agent's session is: its provenance, the notice of its review."""

    def provenance(self) -> dict[str, Any]:
        return {"agent": "claude", "harness": "claude-agent", "session": "sess-9", "turn": 3}

    def notice(self) -> str | None:
        return self.review.take_notice()


def test_each_change_carries_its_provenance_and_a_reject_is_told_in_the_next_tool_result_once():
    async def main() -> None:
        page = Page()
        server = await KernelServer(namespace={}, live=page).start()
        try:
            owner = Owner3()
            async with client(server.url, server.grant(owner).token) as session:
                new = json.loads(text_of(await session.call_tool("insert_cell", {"source": "1 + 1"})))["cell_id"]
                by = page.ops[-1][1]["by"]
                at = by.pop("at")
                assert by == {"agent": "claude", "harness": "claude-agent", "session": "sess-9", "turn": 3}
                assert at.endswith("Z") and "T" in at
                page.before = "df = load()"
                await session.call_tool("edit_cell", {"cell_id": "a1", "source": "df = 2",
                                                      "base_sha256": sha("df = load()")})
                first, second = owner.review.pending
                assert await first.reject() == "rejected" and await second.keep() == "kept"
                told = text_of(await session.call_tool("notebook_cells", {"source": "live"}))
                assert f"The user rejected your change(s) to the open notebook: insert of cell {new}." in told
                assert "a1" not in told.split("[escouade_nb notice]")[1], "a kept change is not told"
                again = text_of(await session.call_tool("notebook_cells", {"source": "live"}))
                assert "rejected" not in again, "told once"
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


class Settled:
    """A page that answers every Keep or Reject."""

    async def settle_cell(self, cell_id: str, keep: bool) -> dict[str, Any]:
        return {"outcome": "kept" if keep else "rejected"}


def test_a_reject_is_told_in_the_next_prompt_when_no_tool_call_came_first(tmp_path):
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
            review = state_of(agent).edit_review
            review.add("c1", "insert", Settled())
            review.add("c2", "edit", Settled())
            first, second = agent.pending_edits
            assert await first.reject() == "rejected" and await second.keep() == "kept"
            await agent.send("hello one")
            await agent.send("hello two")
            notices = [[b for b in prompt if (b.get("_meta") or {}).get("escouade") == {"context": "notice"}]
                       for prompt in sent]
            assert [len(n) for n in notices] == [1, 0], "told once, in the next prompt"
            assert "rejected your change(s) to the open notebook: insert of cell c1." in notices[0][0]["text"]
            assert "c2" not in notices[0][0]["text"]
        finally:
            await agent.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_provenance_of_a_real_agents_change_names_it_its_harness_session_and_turn(tmp_path):
    from escouade_nb.engine.agent import Agent, state_of
    from escouade_nb.manifest import discover, locate_program

    async def main() -> None:
        ref = discover().find("fake")
        agent = Agent(ref, program=locate_program(ref.harness), cwd=tmp_path, name="scribe")
        try:
            await agent.ready()
            await agent.send("hello one")
            await agent.send("hello two")
            live = state_of(agent).live
            assert live is not None
            assert live.kernel.provenance() == {"agent": "scribe", "harness": "fake",
                                                "session": live.session.session_id, "turn": 2}
            assert isinstance(live.session.session_id, str) and live.session.session_id
        finally:
            await agent.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_closed_review_keeps_its_pending_changes_settleable_until_each_is_answered():
    """``agent.close()`` closes its review: the changes still pending stay found by the page's
    click (``pending_edit``) and settle; the user's later edits are no longer noted for the closed
    agent; the kernel lets go of the review once nothing is left to answer, and a review closed with
    nothing pending is gone at once."""
    import gc

    from escouade_nb.engine.review import cell_review

    async def main() -> None:
        page = Page()
        page.cells.append({"id": "b2", "cell_type": "code", "source": "x = 1", "pending": "edit", "original": "x"})
        page.cells.append({"id": "c3", "cell_type": "code", "source": "y = 2", "pending": "insert"})
        review = EditReview()
        review.add("b2", "edit", page)
        review.add("c3", "insert", page)
        review.new_turn()
        review.touch("b2")
        review.close()
        assert review.closed and cell_review.pending_edit("b2") is not None
        assert cell_review.user_changed("b2", "edited") == 0, "a closed agent is not told"
        del review
        gc.collect()  # the user's variable gone: the kernel still holds the review
        edit = cell_review.pending_edit("b2")
        assert edit is not None and await edit.reject() == "rejected"
        assert page.cells[1]["source"] == "x"
        last = cell_review.pending_edit("c3")
        assert last is not None and await last.keep() == "kept"
        held = last._review
        assert held not in cell_review._held and held not in set(cell_review._reviews)
        empty = EditReview()
        empty.close()
        assert empty not in set(cell_review._reviews) and empty not in cell_review._held

    asyncio.run(asyncio.wait_for(main(), 60))
