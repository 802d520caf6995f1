"""Cell runs as tasks (issue 36): ``run_code``/``execute_cell`` with ``wait`` answer a ``task_id``
while the code goes on; ``task_status``/``task_cancel`` come back to it; a synchronous run no
longer holds the kernel's loop; Jupyter's Interrupt stops a run. Plain asyncio with the ``mcp``
SDK's own client over real HTTP, and a real kernel for the Interrupt."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from deadlines import run, until
from kernel_client import Kernel
from test_kernel_server import Owner, mcp_client, text_of

from escouade_nb.kernel_mcp.server import KernelServer


class TaskOwner(Owner):
    """:class:`Owner` that also keeps how each call ended (``tool_done``), task ends included."""

    def __init__(self, mode: str = "allow") -> None:
        super().__init__(mode)
        self.done: list[tuple[str, dict, str, str]] = []

    def tool_done(self, tool: str, arguments: dict, status: str, text: str) -> None:
        self.done.append((tool, arguments, status, text))


def namespace() -> dict[str, Any]:
    return {"gate": threading.Event(), "begun": threading.Event()}


WAITING = "import time\nprint('started', flush=True)\nbegun.set()\ngate.wait(60)\nprint('after')\n6 * 7"
LOOPING = "import time\nbegun.set()\nn = 0\nwhile True:\n    n += 1\n    time.sleep(0.02)"


async def start_task(session: Any, code: str) -> dict[str, Any]:
    got = await session.call_tool("run_code", {"code": code, "wait": 0})
    assert not got.is_error, text_of(got)
    assert got.structured_content["status"] == "running", got.structured_content
    task_id = got.structured_content["task_id"]
    assert task_id in text_of(got)
    return got.structured_content


def test_a_run_with_wait_answers_a_task_that_task_status_follows_to_its_result():
    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        owner = TaskOwner()
        try:
            async with mcp_client(server.url, server.grant(owner).token) as session:
                task = await start_task(session, WAITING)
                await until(ns["begun"].is_set, 60, "the run to start")
                seen = ""
                while "started" not in seen:  # the output since, as it comes
                    got = await session.call_tool("task_status", {"task_id": task["task_id"], "wait": 0})
                    assert got.structured_content["status"] == "running"
                    seen += got.structured_content["stdout"]
                assert "task_cancel" in text_of(got)
                seen_after = got.structured_content["seconds"]
                ns["gate"].set()
                got = await session.call_tool("task_status", {"task_id": task["task_id"], "wait": 60})
                assert got.structured_content["status"] == "done", text_of(got)
                ended = got.structured_content["seconds"]  # how long it ran, from its start: stopped at its end
                assert ended >= seen_after, (ended, seen_after)
                again = await session.call_tool("task_status", {"task_id": task["task_id"]})
                assert again.structured_content["seconds"] == ended
                assert got.structured_content["stdout"] == "after\n"  # only what came since the last look
                assert got.structured_content["result"] == "stdout:\nstarted\nafter\nresult:\n42"
                assert text_of(got).endswith("done\nresult:\nstdout:\nstarted\nafter\nresult:\n42")
            ends = [d for d in owner.done if d[0] == "task"]
            assert [(d[1]["task_id"], d[1]["tool"], d[2]) for d in ends] == [(task["task_id"], "run_code", "done")]
            assert [d[2] for d in owner.done if d[0] == "run_code"] == ["running"]
            assert [code for code, _ in owner.ran] == [WAITING]  # the owner's card gets the output at the end
        finally:
            ns["gate"].set()
            await server.aclose()

    run(main())


def test_a_synchronous_run_code_leaves_the_loop_free_for_other_calls():
    """Without wait the call lasts as long as the code, but no longer holds the loop: a read
    answers while a blocking run is under way."""
    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        try:
            grant = server.grant(TaskOwner())
            async with mcp_client(server.url, grant.token) as session, mcp_client(server.url, grant.token) as other:
                running = asyncio.ensure_future(session.call_tool("run_code", {"code": WAITING}))
                await until(ns["begun"].is_set, 60, "the run to start")
                with anyio_fail_after(60):  # on the loop, the run would hold this read until it ends
                    listed = await other.call_tool("list_variables", {"include_all": True})
                assert "- gate:" in text_of(listed) and not running.done()
                ns["gate"].set()
                got = await running
                assert text_of(got) == "stdout:\nstarted\nafter\nresult:\n42" and not got.is_error
                assert got.structured_content is None  # no task: today's answer
        finally:
            ns["gate"].set()
            await server.aclose()

    run(main())


def anyio_fail_after(seconds: float) -> Any:
    import anyio

    return anyio.fail_after(seconds)


def test_task_cancel_interrupts_the_run_and_says_so():
    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        owner = TaskOwner()
        try:
            async with mcp_client(server.url, server.grant(owner).token) as session:
                task = await start_task(session, LOOPING)
                await until(ns["begun"].is_set, 60, "the run to start")
                got = await session.call_tool("task_cancel", {"task_id": task["task_id"]})
                assert got.structured_content["status"] == "cancelled", text_of(got)
                assert "KeyboardInterrupt" in got.structured_content["result"]
                assert "interrupted by the agent (task_cancel)" in got.structured_content["result"]
                n = ns["n"]
                await asyncio.sleep(0.3)  # the loop's thread has stopped: n no longer moves
                assert ns["n"] == n
                # an awaiting run on the loop is interrupted too
                task = await start_task(session, "import asyncio\nawait asyncio.sleep(3600)")
                got = await session.call_tool("task_cancel", {"task_id": task["task_id"]})
                assert got.structured_content["status"] == "cancelled", text_of(got)
                assert "KeyboardInterrupt: interrupted by the agent (task_cancel)" in got.structured_content["result"]
                after = await session.call_tool("run_code", {"code": "1 + 1"})
                assert text_of(after) == "result:\n2"  # the server goes on
            assert [d[2] for d in owner.done if d[0] == "task"] == ["cancelled", "cancelled"]
        finally:
            await server.aclose()

    run(main())


def test_another_agents_task_is_refused_like_an_unknown_one_and_a_revoked_grant_ends_its_tasks():
    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        mine, hostile = TaskOwner(), TaskOwner()
        try:
            grant = server.grant(mine)
            async with mcp_client(server.url, grant.token) as session, \
                    mcp_client(server.url, server.grant(hostile).token) as other:
                task = await start_task(session, LOOPING)
                await until(ns["begun"].is_set, 60, "the run to start")
                unknown = await other.call_tool("task_status", {"task_id": "task-0000000000000000"})
                for tool in ("task_status", "task_cancel"):
                    got = await other.call_tool(tool, {"task_id": task["task_id"]})
                    assert got.is_error
                    words = text_of(got).split(": ", 1)[1]  # after the SDK's "Error executing tool NAME: "
                    assert words == text_of(unknown).split(": ", 1)[1].replace("task-0000000000000000", task["task_id"])
                assert [d[2] for d in hostile.done] == ["refused"] * 3
                still = await session.call_tool("task_status", {"task_id": task["task_id"]})
                assert still.structured_content["status"] == "running"  # untouched by the other agent
                server.revoke(grant)  # its agent closed
                await until(lambda: any(d[0] == "task" for d in mine.done), 60, "the task's end")
            (end,) = [d for d in mine.done if d[0] == "task"]
            assert end[2] == "ended" and "KeyboardInterrupt" in end[3]
            n = ns["n"]
            await asyncio.sleep(0.3)
            assert ns["n"] == n  # its run stopped
        finally:
            await server.aclose()

    run(main())


def test_a_waiting_run_sends_its_output_as_mcp_progress():
    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        try:
            async with mcp_client(server.url, server.grant(TaskOwner()).token) as session:
                told: list[tuple[float, str | None]] = []

                async def progress(value: float, total: float | None, message: str | None) -> None:
                    told.append((value, message))
                    if message and "started" in message:
                        ns["gate"].set()

                got = await session.call_tool("run_code", {"code": WAITING}, progress_callback=progress)
                assert text_of(got) == "stdout:\nstarted\nafter\nresult:\n42"
                assert told and told[0][1].startswith("started")
        finally:
            ns["gate"].set()
            await server.aclose()

    run(main())


KERNEL_SETUP = """
import threading
from escouade_nb.kernel_mcp.server import KernelServer
begun = threading.Event()
class Owner:
    name = "kernel test"
    async def ask_run_code(self, code):
        return None
server = await KernelServer.shared()
grant = server.grant(Owner())
print("URL", server.url)
print("TOKEN", grant.token)
"""


@pytest.mark.kernel
def test_jupyters_interrupt_stops_a_run_left_running_in_a_real_kernel(tmp_path):
    k = Kernel(tmp_path)
    try:
        out = k.run(KERNEL_SETUP, timeout=120)
        lines = dict(line.split(" ", 1) for line in out.text.splitlines() if line[:4] in ("URL ", "TOKE"))

        async def main() -> None:
            async with mcp_client(lines["URL"], lines["TOKEN"]) as session:
                task = await start_task(session, LOOPING)
                got = await session.call_tool("task_status", {"task_id": task["task_id"], "wait": 1})
                assert got.structured_content["status"] == "running"
                # the kernel is idle (the run is not a cell): cells run meanwhile
                assert (await asyncio.to_thread(k.run, "print('cell', n > 0)", 60)).text == "cell True\n"
                await asyncio.to_thread(k.km.interrupt_kernel)
                got = await session.call_tool("task_status", {"task_id": task["task_id"], "wait": 60})
                assert got.structured_content["status"] == "interrupted", text_of(got)
                assert "interrupted by Jupyter's Interrupt" in got.structured_content["result"]
                # the kernel lives on, and an idle Interrupt with no run left does nothing
                await asyncio.to_thread(k.km.interrupt_kernel)
                assert (await asyncio.to_thread(k.run, "print('alive')", 60)).text == "alive\n"
                left = await start_task(session, LOOPING)
            return left["task_id"]

        left = run(main(), timeout=240)
        # a kernel restart ends every task: the new kernel's server knows none, and says why
        k.km.restart_kernel(now=True)
        k.kc.wait_for_ready(timeout=60)
        out = k.run(KERNEL_SETUP, timeout=120)
        lines = dict(line.split(" ", 1) for line in out.text.splitlines() if line[:4] in ("URL ", "TOKE"))

        async def after_restart() -> None:
            async with mcp_client(lines["URL"], lines["TOKEN"]) as session:
                got = await session.call_tool("task_status", {"task_id": left})
                assert got.is_error and f"no task {left!r} of this agent in this kernel" in text_of(got)
                assert "a kernel restart or the end of the agent's session ends its tasks" in text_of(got)

        run(after_restart(), timeout=120)
    finally:
        k.shutdown()


@pytest.mark.kernel
def test_jupyters_interrupt_stops_a_run_that_began_while_a_cell_ran(tmp_path):
    """A run approved during a cell (``await a.send(…)``, the documented style) outlives it: that
    cell's end puts back the idle kernel's ``SIG_IGN``; Interrupt must still stop the run."""
    k = Kernel(tmp_path)
    try:
        out = k.run(KERNEL_SETUP, timeout=120)
        lines = dict(line.split(" ", 1) for line in out.text.splitlines() if line[:4] in ("URL ", "TOKE"))
        marker = tmp_path / "cell-started"

        async def main() -> None:
            async with mcp_client(lines["URL"], lines["TOKEN"]) as session:
                k.kc.execute(f"import asyncio, pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                             "while not begun.is_set():\n    await asyncio.sleep(0.05)\n"
                             "await asyncio.sleep(0.5)")  # a cell that awaits: the loop answers meanwhile
                await until(marker.exists, timeout=60, what="the cell started")
                task = await start_task(session, LOOPING)  # begun within that cell
                assert (await asyncio.to_thread(k.run, "print('after', n > 0)", 90)).text == "after True\n"
                probe = "import signal\nprint(getattr(signal.getsignal(signal.SIGINT), '__name__', 'other'))"

                async def ours() -> bool:  # the idle kernel's SIGINT is ours again (ipykernel's is SIG_IGN)
                    return "_on_sigint" in text_of(await session.call_tool("run_code", {"code": probe}))
                deadline = asyncio.get_running_loop().time() + 60
                while not await ours():
                    assert asyncio.get_running_loop().time() < deadline, "SIGINT never ours again"
                await asyncio.to_thread(k.km.interrupt_kernel)  # the kernel is idle again
                got = await session.call_tool("task_status", {"task_id": task["task_id"], "wait": 60})
                assert got.structured_content["status"] == "interrupted", text_of(got)

        run(main(), timeout=240)
    finally:
        k.shutdown()


def test_the_fake_agent_starts_a_long_run_watches_it_and_cancels_it(tmp_path):
    """Its words (docs/fake-agent.md): ``run long code``, ``task status``, ``wait for task``, ``cancel task``."""
    import re

    from acp import text_block
    from acp_clients import RecordingClient
    from test_kernel_server import fake_agent, http_entry

    ns = namespace()

    async def main() -> None:
        server = await KernelServer(namespace=ns).start()
        owner = TaskOwner()
        client = RecordingClient("allow-once")
        try:
            async with fake_agent(client, tmp_path, [http_entry(server, server.grant(owner))]) as (conn, sid, _init):
                await conn.prompt(session_id=sid, prompt=[text_block("run long code\n" + LOOPING.replace(
                    "begun.set()", "begun.set()\nprint('looping', flush=True)"))])
                said = client.text()
                assert said.startswith("mcp__escouade__run_code returned: task_id: task-"), said
                assert client.permissions[0][0].raw_input["wait"] == 2 and owner.asked  # the one card
                task_id = re.search(r"task-[0-9a-f]+", said).group(0)
                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block(f"task status {task_id}")])
                assert f"task {task_id} (run_code): running for" in client.text()
                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block(f"cancel task {task_id}")])
                assert f"task {task_id} (run_code): cancelled by the agent (task_cancel)" in client.text()
                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block(f"wait for task {task_id}")])
                assert "cancelled by the agent" in client.text() and "KeyboardInterrupt" in client.text()
            assert [d[2] for d in owner.done if d[0] == "task"] == ["cancelled"]
        finally:
            await server.aclose()

    run(main(), timeout=120)


def test_an_execute_cell_left_running_is_a_task_that_task_status_follows_to_its_outputs():
    """The page (a stand-in for the views' NotebookPages, as tests/kernel/test_execute_cell_gate.py) answers
    the cell's run when the test releases it; task_cancel of it says why it cannot, and stops nothing."""
    import hashlib

    class Page:
        def __init__(self) -> None:
            self.release = asyncio.Event()
            self.runs: list[str] = []

        async def live_cells(self) -> dict:
            return {"path": "nb.ipynb", "cells": []}

        async def cell_to_run(self, cell_id: str) -> dict:
            source = "import time\ntime.sleep(600)"
            return {"source": source, "sha256": hashlib.sha256(source.encode()).hexdigest(), "pending": False}

        async def run_cell(self, cell_id: str, base: str, by: dict) -> dict:
            self.runs.append(cell_id)
            await self.release.wait()
            return {"execution_count": 3, "outputs": [{"output_type": "stream", "name": "stdout", "text": "slept\n"}]}

    class CellOwner(TaskOwner):
        async def ask_execute_cell(self, cell_id: str, source: str, unreviewed: bool) -> None:
            self.asked.append(source)

    page = Page()

    async def main() -> None:
        server = await KernelServer(namespace={}, live=page).start()
        owner = CellOwner()
        try:
            async with mcp_client(server.url, server.grant(owner).token) as session:
                got = await session.call_tool("execute_cell", {"cell_id": "c1", "wait": 0})
                assert got.structured_content["status"] == "running" and got.structured_content["tool"] == \
                    "execute_cell", text_of(got)
                task_id = got.structured_content["task_id"]
                assert page.runs == ["c1"] and owner.asked == ["import time\ntime.sleep(600)"]  # one card
                cancel = await session.call_tool("task_cancel", {"task_id": task_id})
                assert cancel.is_error and "Jupyter's Interrupt" in text_of(cancel)
                page.release.set()
                got = await session.call_tool("task_status", {"task_id": task_id, "wait": 60})
                assert got.structured_content["status"] == "done", text_of(got)
                assert got.structured_content["result"] == "cell c1 ran in the notebook [3]:\nslept\n"
            assert [(d[1]["tool"], d[2]) for d in owner.done if d[0] == "task"] == [("execute_cell", "done")]
        finally:
            page.release.set()
            await server.aclose()

    run(main())
