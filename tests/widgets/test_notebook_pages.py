"""The kernel's side of the channel to its notebook's pages (``widgets/notebook_pages``),
with comms of our own standing for the browser tabs: the ping, the hellos, each request
sent on ONE page's comm (the page that said hello last among those showing the kernel's
notebook), replies from another client or for no request dropped, a page that closes its
comm forgotten, one that does not answer replaced by another, and the one-line error when
no page answers. The real pages: tests/browser/test_lab_live_cells.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from deadlines import until

from escouade_nb.kernel_mcp.tools import ToolFailure
from escouade_nb.widgets import notebook_pages
from escouade_nb.widgets.notebook_pages import NO_PAGE, TARGET, NotebookPages, shows


class Comm:
    """A comm of the kernel's side: what was sent on it, its callbacks."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.closed = False
        self.on_message = None
        self.on_closed = None

    def send(self, data: dict) -> None:
        self.sent.append(data)

    def close(self) -> None:
        self.closed = True

    def on_msg(self, fn) -> None:
        self.on_message = fn

    def on_close(self, fn) -> None:
        self.on_closed = fn


class Manager:
    def __init__(self) -> None:
        self.targets: dict[str, Any] = {}

    def register_target(self, name: str, fn) -> None:
        self.targets[name] = fn


class Tab:
    """One notebook panel in one browser tab: answers the pings with a hello on its own
    comm, and each request sent on that comm (unless told to stay silent)."""

    def __init__(self, pages: NotebookPages, manager: Manager, client: str, path: str, cells: list) -> None:
        self.pages, self.manager, self.client, self.path, self.cells = pages, manager, client, path, cells
        self.comm: Comm | None = None
        self.answered: list[str] = []
        self.silent = False

    def ping(self) -> None:
        self.comm = Comm()
        self.manager.targets[TARGET](self.comm, {"content": {"data": {
            "v": 1, "client": self.client, "hello": {"path": self.path, "panel": "id-" + self.client}}}})

    def serve(self) -> None:
        """Answer what was sent on this tab's comm since the last call."""
        assert self.comm is not None
        while self.comm.sent:
            op = self.comm.sent.pop(0)
            assert op["to"] == self.client
            if self.silent:
                continue
            self.answered.append(op["req"])
            self.comm.on_message({"content": {"data": {"v": 1, "client": self.client, "reply": op["req"],
                                                       "ok": True, "path": self.path, "cells": self.cells}}})


def setup(tabs: list[tuple[str, str]], notebook: Path | None = Path("/srv/work/nb.ipynb")):
    manager = Manager()
    opened: list[Tab] = []
    made: list[Tab] = []

    def open_comm(data: dict) -> Comm:
        assert data == {"v": 1, "ping": True}
        for tab in made:
            tab.ping()
        opened.append(data)
        return Comm()

    pages = NotebookPages(open_comm=open_comm, comm_manager=manager, notebook=lambda: notebook)
    made.extend(Tab(pages, manager, client, path, [{"id": client, "cell_type": "code", "source": client}])
                for client, path in tabs)
    return pages, made, opened


async def served(pages: NotebookPages, tabs: list[Tab], coro) -> Any:
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.sleep(0.01)
        for tab in tabs:
            if tab.comm is not None:
                tab.serve()
    return task.result()


def test_a_request_goes_to_one_page_the_latest_of_those_showing_the_notebook():
    async def main() -> None:
        pages, (a, b, other), opened = setup([("a", "work/nb.ipynb"), ("b", "nb.ipynb"), ("c", "other.ipynb")])
        pages.start()
        assert opened == [] and pages.pages == {}  # nothing sent before a page is needed
        pages.ping()
        assert len(opened) == 1 and set(pages.pages) == {"a", "b", "c"}
        got = await served(pages, [a, b, other], pages.live_cells())
        assert got["client"] == "b" and b.answered == ["r1"] and a.answered == [] and other.answered == []
        assert pages.strays == 0 and len(pages.round_trips) == 1
        # a reply from a client the request was not sent to, and one for no request: dropped
        assert a.comm is not None
        a.comm.on_message({"content": {"data": {"client": "a", "reply": "r1", "ok": True, "cells": []}}})
        a.comm.on_message({"content": {"data": {"client": "b", "reply": "r9", "ok": True, "cells": []}}})
        assert pages.strays == 2
        # b closes its panel: the next request goes to a
        assert b.comm is not None and b.comm.on_closed is not None
        b.comm.on_closed({})
        got = await served(pages, [a, b, other], pages.live_cells())
        assert got["client"] == "a" and a.answered == ["r2"]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_page_that_does_not_answer_is_replaced(monkeypatch):
    monkeypatch.setattr(notebook_pages, "REPLY_WAIT", 0.2)

    async def main() -> None:
        pages, (a, b), _ = setup([("a", "nb.ipynb"), ("b", "nb.ipynb")])
        pages.start()
        pages.ping()
        b.silent = True  # a reloaded tab: its comm is gone, it said no bye
        got = await served(pages, [a, b], pages.live_cells())
        assert got["client"] == "a" and "b" not in pages.pages and b.comm is not None and b.comm.closed

    asyncio.run(asyncio.wait_for(main(), 30))


def test_no_page_answers_in_one_line(monkeypatch):
    monkeypatch.setattr(notebook_pages, "HELLO_WAIT", 0.2)

    async def main() -> None:
        pages, _, opened = setup([])
        pages.start()
        with pytest.raises(ToolFailure) as failed:
            await pages.live_cells()
        assert str(failed.value) == NO_PAGE and "\n" not in NO_PAGE
        assert len(opened) == 1  # pinged once, when a page was needed

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_page_path_names_the_kernels_notebook():
    nb = Path("/srv/work/sub/nb.ipynb")
    assert shows(nb, "sub/nb.ipynb") and shows(nb, "nb.ipynb") and shows(nb, "RTC:sub/nb.ipynb")
    assert not shows(nb, "other/nb.ipynb") and not shows(nb, "b.ipynb") and not shows(nb, "")


def test_a_change_goes_to_one_page_once_and_a_stale_one_says_so(monkeypatch):
    """An edit the page does not answer is not sent to another page (the silent one may have
    made it); a stale edit's error is the page's own words, without a prefix."""
    monkeypatch.setattr(notebook_pages, "REPLY_WAIT", 0.2)

    async def main() -> None:
        pages, (a, b), _ = setup([("a", "nb.ipynb"), ("b", "nb.ipynb")])
        pages.start()
        pages.ping()
        b.silent = True
        with pytest.raises(ToolFailure) as failed:
            await served(pages, [a, b], pages.change_cell("insert", {"source": "1", "cell_type": "code",
                                                                      "after": None, "agent": "x"}))
        assert "may or may not be made" in str(failed.value) and a.answered == []
        # the page refuses a stale edit: its words reach the model as they are
        assert a.comm is not None
        task = asyncio.ensure_future(pages.change_cell("edit", {"cell": "a", "source": "2", "base": "0" * 64,
                                                                "agent": "x"}))
        await until(lambda: a.comm.sent, what="the edit sent to the page")
        (op,) = a.comm.sent
        assert op["op"] == "edit" and op["cell"] == "a" and op["base"] == "0" * 64 and op["to"] == "a"
        a.comm.on_message({"content": {"data": {"client": "a", "reply": op["req"], "ok": False, "stale": True,
                                                "error": "cell a changed since you read it: read it again"}}})
        with pytest.raises(ToolFailure) as stale:
            await task
        assert str(stale.value) == "cell a changed since you read it: read it again"

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_click_on_keep_or_reject_is_settled_by_the_kernel_through_the_agents_review(monkeypatch):
    """The page's ``decide`` does nothing by itself: the kernel settles it, with a ``settle``
    sent back to the page that asked — through the agent's review when one holds the cell
    (its pending_edits stays true), else directly (a pending cell of a saved notebook) when
    Jupyter trusts the saved notebook (its signature known here), else the page is told the
    mark is not trusted and nothing is settled (a forged mark in someone else's file)."""
    from escouade_nb.engine.review.cell_review import EditReview

    trusted: dict[str, Any] = {"value": True, "asked": []}

    def saved_trusted(path: Path) -> bool | None:
        trusted["asked"].append(path)
        return trusted["value"]

    monkeypatch.setattr(notebook_pages.written_reads, "saved_trusted", saved_trusted)

    async def main() -> None:
        pages, (a, b), _ = setup([("a", "nb.ipynb"), ("b", "nb.ipynb")])
        pages.start()
        pages.ping()
        assert a.comm is not None and b.comm is not None
        review = EditReview()
        edit = review.add("c7", "insert", pages)
        assert edit is not None
        # tab a (not the latest to say hello) clicks Keep: the settle goes to tab a, on its comm
        a.comm.on_message({"content": {"data": {"client": "a", "decide": {"cell": "c7", "keep": True}}}})
        a.comm.on_message({"content": {"data": {"client": "a", "decide": {"cell": "c7", "keep": True}}}})  # twice
        await until(lambda: a.comm.sent, what="the settle sent")
        (op,) = a.comm.sent
        assert (op["op"], op["cell"], op["keep"], op["to"]) == ("settle", "c7", True, "a") and b.comm.sent == []
        a.comm.on_message({"content": {"data": {"client": "a", "reply": op["req"], "ok": True, "outcome": "kept"}}})
        await until(lambda: edit.state == "kept", what="the edit kept")
        assert edit.state == "kept" and review.pending == []
        # a cell no agent's review holds: settled directly, by a task the pages own, the saved file trusted
        b.comm.on_message({"content": {"data": {"client": "b", "decide": {"cell": "old", "keep": False}}}})
        await until(lambda: len(b.comm.sent) >= 2, what="two messages to tab b")
        assert trusted["asked"] == [Path("/srv/work/nb.ipynb")]  # the kernel's notebook, checked in a thread
        assert b.comm.sent.pop(0)["elsewhere"] == {"change": "kept", "agent": "", "cell": "c7"}  # told, not asked
        (op,) = b.comm.sent
        assert (op["op"], op["cell"], op["keep"]) == ("settle", "old", False)
        b.comm.sent.clear()
        # the saved file not trusted here (someone else's): the page is told, nothing settled
        trusted["value"] = False
        b.comm.on_message({"content": {"data": {"client": "b", "decide": {"cell": "forged", "keep": False}}}})
        await until(lambda: b.comm.sent, what="the answer to tab b")
        await asyncio.sleep(0.05)  # and nothing more (a check of absence: a fixed look)
        assert b.comm.sent == [{"v": 1, "to": "b", "untrusted": "forged"}]
        b.comm.sent.clear()
        trusted["value"] = True
        pages.close()
        await until(lambda: not pages._tasks, what="the pages' tasks ended")
        # a page with no comm open yet (a reload of a saved notebook with pending cells) says it in its hello
        late = Comm()
        a.manager.targets[TARGET](late, {"content": {"data": {"v": 1, "client": "z", "hello": {
            "path": "nb.ipynb", "panel": "p"}, "decide": {"cell": "saved", "keep": True}}}})
        await until(lambda: late.sent, what="the settle sent to the late tab")
        (op,) = late.sent
        assert (op["op"], op["cell"], op["keep"], op["to"]) == ("settle", "saved", True, "z")
        pages.close()
                # a decision that is not one is dropped
        strays = pages.strays
        b.comm.on_message({"content": {"data": {"client": "b", "decide": {"cell": 3, "keep": "yes"}}}})
        assert pages.strays == strays + 1
        review.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_message_of_no_known_kind_or_shape_is_refused_in_one_log_line(caplog, monkeypatch):
    """The page wire's table (notebook_pages.PAGE_MESSAGES): a message is named by the first of its keys the
    table has, and its value must be of that kind's shape; anything else is refused — a stray, one warning
    naming the page and why — and the page goes on being served. A handler that raises (here the review's
    ``user_changed``) is said in a log line too, never raised into the comm's machinery."""

    async def main() -> None:
        pages, (a,), _opened = setup([("a", "nb.ipynb")])
        pages.start()
        pages.ping()
        assert a.comm is not None and a.comm.on_message is not None
        refused = [["not", "an", "object"], {"client": "a", "bonjour": 1}, {"client": "a", "hello": "again"},
                   {"client": "a", "decide": ["c1", True]}, {"client": "a", "touched": None},
                   {"client": "a", "ran": 5}, {"client": "a", "reply": None, "ok": True}]
        with caplog.at_level("WARNING", logger=notebook_pages.__name__):
            for data in refused:
                a.comm.on_message({"content": {"data": data}})
        lines = [r.getMessage() for r in caplog.records if r.name == notebook_pages.__name__]
        assert pages.strays == len(refused) == len(lines)
        assert all(line.startswith("escouade_nb: refused a message from the notebook page a: ") for line in lines)
        assert "none of the keys that name a message (hello, decide, touched, ran, reply, forms)" in lines[1]
        assert "its 'hello' is not a dict" in lines[2] and "its 'ran' is not a str" in lines[5]
        caplog.clear()

        def fails(cell: str, what: str) -> None:
            raise RuntimeError("the review failed")

        monkeypatch.setattr(notebook_pages, "user_changed", fails)
        with caplog.at_level("WARNING", logger=notebook_pages.__name__):
            a.comm.on_message({"content": {"data": {"client": "a", "touched": {"cell": "c1", "what": "edited"}}}})
        (line,) = [r for r in caplog.records if r.name == notebook_pages.__name__]
        assert "a 'touched' message from the notebook page a failed" in line.getMessage() and line.exc_info
        # the page is still served: a request answered, nothing more counted as stray
        got = await served(pages, [a], pages.live_cells())
        assert got["client"] == "a" and pages.strays == len(refused)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_saved_forms_redraw_goes_to_the_pages_as_a_change_and_whole_to_a_page_holding_another_version():
    """Issue 34: a view's saved form reaches the pages with the extension as what changed (no display update);
    a page whose document holds another version (a tab reopened, a reload) gets it whole; with no page known,
    a display update carrying the form's metadata (VS Code, nbclient)."""
    from escouade_nb.widgets import front

    class Handle:
        def __init__(self) -> None:
            self.updates: list[tuple[dict, dict]] = []

        def update(self, bundle: dict, metadata: dict, raw: bool) -> None:
            self.updates.append((bundle, metadata))

    class Shown(front.FrontView):
        words = "first"

        def state(self) -> dict:
            return {}

        def companion_bundle(self, final: bool = False) -> dict[str, str]:
            return {"text/plain": self.words, "text/html": f"<p>{self.words}</p>"}

    pages, (a, b), _ = setup([("a", "nb.ipynb"), ("b", "nb.ipynb")])
    pages.start()
    view = Shown()
    handle = view._companion = Handle()
    view._companion_sent, view._form_marked = view.companion_bundle(), True
    front.use_form_pages(pages.send_form)
    try:
        view.words = "second"
        view.update_companion()  # no page known yet: a display update, with the form's metadata
        assert handle.updates == [({"text/plain": "second", "text/html": "<p>second</p>"},
                                   {front.FORM_KEY: {"view": view.form_id, "v": 1}})]
        a.ping()
        b.ping()
        view.words = "second, then third"
        view.update_companion()
        assert len(handle.updates) == 1, "no display update where pages of the extension are known"
        for tab in (a, b):
            form = tab.comm.sent.pop()["form"]
            assert form == {"view": view.form_id, "from": 1, "to": 2,
                            "data": {"text/plain": [6, 0, ", then third"], "text/html": [9, 4, ", then third"]}}
        a.comm.on_message({"content": {"data": {"v": 1, "client": "a", "forms": {view.form_id: 1, "not ours": 3}}}})
        assert a.comm.sent == [{"v": 1, "to": "a", "form": {"view": view.form_id, "to": 2, "whole": {
            "text/plain": "second, then third", "text/html": "<p>second, then third</p>"}}}]
        b.comm.on_message({"content": {"data": {"v": 1, "client": "b", "forms": {view.form_id: 2}}}})
        assert b.comm.sent == [], "a page holding the form's version gets nothing"
    finally:
        front.use_form_pages(None)
        view.close()
