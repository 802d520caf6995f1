"""The channel's ``run`` (``execute_cell``), with comms of our own standing for the browser tabs
(the fakes of test_notebook_pages.py): sent once, to one page, with the hash the card showed and
who asks; the page's immediate reply is not the end — the answer waits for its later ``ran``
message (from that page only: another client's is dropped); a page that closes its comm
mid-run ends the wait with a one-line error; a stale refusal is the page's own words; a cell
of the kernel running is said by ``running()``. The real page: tests/browser/test_lab_execute_cell.py."""

from __future__ import annotations

import asyncio

import pytest
from deadlines import until

from escouade_nb.kernel_mcp.tools import ToolFailure
from test_notebook_pages import setup

BY = {"agent": "runner", "harness": "fake", "session": "s-1", "turn": 2, "at": "2026-12-04T18:00:00Z"}


def test_a_run_is_sent_once_and_answers_with_the_later_ran_message_of_that_page():
    async def main() -> None:
        pages, (a, b), _ = setup([("a", "nb.ipynb"), ("b", "nb.ipynb")])
        pages.start()
        pages.ping()
        run = asyncio.ensure_future(pages.run_cell("c1", "ab" * 32, BY))
        await until(lambda: b.comm is not None and b.comm.sent, what="the run sent to the page")
        assert a.comm is not None and b.comm is not None and a.comm.sent == []
        (op,) = b.comm.sent
        assert {k: op[k] for k in ("op", "cell", "base", "by", "to")} == \
            {"op": "run", "cell": "c1", "base": "ab" * 32, "by": BY, "to": "b"}
        b.comm.sent.clear()
        b.comm.on_message({"content": {"data": {"client": "b", "reply": op["req"], "ok": True, "started": True}}})
        await asyncio.sleep(0.05)
        assert not run.done(), "started is not ended"
        done = {"ran": op["run"], "ok": True, "execution_count": 5,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "42\n"}]}
        a.comm.on_message({"content": {"data": {**done, "client": "a"}}})  # another page: dropped
        await asyncio.sleep(0.05)
        assert not run.done() and pages.strays == 1
        b.comm.on_message({"content": {"data": {**done, "client": "b"}}})
        got = await asyncio.wait_for(run, 60)
        assert got == {"execution_count": 5, "outputs": done["outputs"], "client": "b"}
        assert pages._runs == {}

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_page_closed_mid_run_a_stale_refusal_and_a_running_cell_end_in_one_line():
    async def main() -> None:
        pages, (a,), _ = setup([("a", "nb.ipynb")])
        pages.start()
        pages.ping()
        assert a.comm is not None
        run = asyncio.ensure_future(pages.run_cell("c1", "00", BY))
        await until(lambda: a.comm.sent, what="the run sent to the page")
        op = a.comm.sent.pop()
        a.comm.on_message({"content": {"data": {"client": "a", "reply": op["req"], "ok": True, "started": True}}})
        await asyncio.sleep(0.05)
        assert a.comm.on_closed is not None
        a.comm.on_closed({})  # the tab closed its notebook while the cell ran
        with pytest.raises(ToolFailure, match="closed before the cell's run ended"):
            await asyncio.wait_for(run, 60)

        a.ping()
        run = asyncio.ensure_future(pages.run_cell("c1", "00", BY))
        await until(lambda: a.comm.sent, what="the run sent to the page")
        op = a.comm.sent.pop()
        a.comm.on_message({"content": {"data": {"client": "a", "reply": op["req"], "ok": False, "stale": True,
                                                "error": "cell c1 changed since the card showed it: nothing was run"}}})
        with pytest.raises(ToolFailure) as stale:
            await asyncio.wait_for(run, 60)
        assert str(stale.value) == "cell c1 changed since the card showed it: nothing was run"

        assert pages.running() is None
        pages.cells_running = 1
        assert "a cell of this kernel is running now" in (pages.running() or "")

    asyncio.run(asyncio.wait_for(main(), 30))
