"""The kernel's MCP server ``escouade``: plain asyncio with the ``mcp`` SDK's own client,
the stdio bridge as a real subprocess, the fake agent over real pipes, and a real kernel."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pandas as pd
import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, HttpMcpServer, McpServerStdio, ToolCallProgress, ToolCallStart
from kernel_client import Kernel, McpProcess
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from acp_clients import AGENT_CMD, RecordingClient
from deadlines import run, until

from escouade_nb.kernel_mcp.server import (BUSY_GRACE, SERVER_NAME, TOOLS, KernelServer, Refused,
                                              run_result_text)

FIXTURES = Path(__file__).parents[1] / "fixtures"
BRIDGE = [sys.executable, "-m", "escouade_nb.tools.mcp_bridge"]


class Owner:
    """A ToolOwner for tests: ``mode`` allow / refuse / wait (``release`` it yourself)."""

    name = "test owner"

    def __init__(self, mode: str = "allow") -> None:
        self.mode = mode
        self.asked: list[str] = []
        self.reads: list[tuple[str, dict]] = []
        self.ran: list[tuple[str, dict]] = []
        self.cancelled = False
        self.waiting = asyncio.Event()
        self.release: asyncio.Future | None = None

    async def ask_run_code(self, code: str) -> None:
        self.asked.append(code)
        if self.mode == "refuse":
            raise Refused("no code from agents in this notebook")
        if self.mode == "wait":
            self.release = asyncio.get_running_loop().create_future()
            self.waiting.set()
            try:
                await self.release
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    async def allow_read(self, tool: str, arguments: dict) -> None:
        self.reads.append((tool, arguments))
        if self.mode == "refuse-reads":
            raise Refused("reads are off")

    def ran_code(self, code: str, result: dict) -> None:
        self.ran.append((code, result))


@asynccontextmanager
async def mcp_client(url: str, token: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content)


def frame() -> pd.DataFrame:
    return pd.DataFrame({"region": ["north", "south", "east"], "revenue": [10.5, 7.25, 3.0]})


# -- plain asyncio, the SDK's client -------------------------------------------------------------
def test_tools_are_listed_with_documented_schemas():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        try:
            assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")
            grant = server.grant(Owner())
            async with mcp_client(server.url, grant.token) as session:
                listed = (await session.list_tools()).tools
                by_name = {t.name: t for t in listed}
                assert tuple(by_name) == TOOLS
                for tool in listed:
                    assert tool.output_schema is None  # plain text results (no structuredContent)
                    assert "Input:" in tool.description
                    for prop in tool.input_schema["properties"].values():
                        assert prop["description"]
                assert by_name["inspect_variable"].input_schema["required"] == ["name"]
                rows = by_name["inspect_variable"].input_schema["properties"]["rows"]
                assert (rows["default"], rows["minimum"], rows["maximum"]) == (5, 0, 1000)
                assert by_name["notebook_cells"].input_schema["properties"]["source"]["enum"] == \
                    ["history", "file", "both", "live"]
                assert by_name["run_code"].input_schema["required"] == ["code"]
        finally:
            await server.aclose()

    run(main())


def test_inspect_a_live_dataframe_and_list_variables():
    async def main() -> None:
        import math

        ns = {"df": frame(), "math": math, "n": 3, "_private": 1}
        root = logging.getLogger()
        before = (root.handlers[:], root.level)
        server = await KernelServer(namespace=ns).start()
        assert (root.handlers, root.level) == before  # MCPServer() left the root logger as it was
        try:
            owner = Owner()
            grant = server.grant(owner)
            seen: list[Any] = []
            grant.on_connect.subscribe(seen.append)
            assert grant.connected is False and "token" not in repr(grant) and grant.token not in repr(grant)
            async with mcp_client(server.url, grant.token) as session:
                result = await session.call_tool("inspect_variable", {"name": "df"})
                assert result.is_error is False and result.structured_content is None
                text = text_of(result)
                assert text.startswith("df: pandas.DataFrame\nDataFrame 3×2, columns region: ")
                assert "shape: (3, 2)" in text and "  revenue: float64" in text
                assert text.splitlines()[-1].split() == ["2", "east", "3.00"]
                listing = text_of(await session.call_tool("list_variables", {})).splitlines()
                assert listing[0] == "2 variables (modules, functions, classes and _private names not listed):"
                assert listing[1].startswith("- df: pandas.DataFrame — DataFrame 3×2, columns region: ")
                assert listing[2:] == ["- n: int — int = 3"]
                assert "math" in text_of(await session.call_tool("list_variables", {"include_all": True}))
                missing = await session.call_tool("inspect_variable", {"name": "nope"})
                assert missing.is_error and "no variable named 'nope'" in text_of(missing)
                cells = text_of(await session.call_tool("notebook_cells", {"source": "both"}))
                assert "no IPython history" in cells and "does not know its notebook" in cells
            assert grant.connected and seen == [grant] and grant.calls == 5
            assert [t for t, _ in owner.reads] == ["inspect_variable", "list_variables", "list_variables",
                                                   "inspect_variable", "notebook_cells"]
            assert owner.reads[0][1] == {"name": "df", "rows": 5, "attributes": False}
        finally:
            await server.aclose()

    run(main())


def test_notebook_cells_reads_the_kernels_notebook_file_and_says_which(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Sales"),
                                         nbformat.v4.new_code_cell("df.head()", execution_count=4, outputs=[
                                             nbformat.v4.new_output("execute_result", {"text/plain": "   a\n0  1"},
                                                                    execution_count=4)])])
    path = tmp_path / "sales.ipynb"
    nbformat.write(nb, str(path))

    async def main() -> None:
        ns: dict[str, Any] = {"__session__": str(path), "In": ["", "x = 1", "x"], "Out": {2: 1}}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner()
            grant = server.grant(owner)
            async with mcp_client(server.url, grant.token) as session:
                both = text_of(await session.call_tool("notebook_cells", {"source": "both"}))
                history, _, file = both.partition("\n\n")
                assert history == ("History: 2 cells run in this kernel (execution counts 1–2):\n"
                                   "In [1]:\nx = 1\nIn [2]:\nx\nOut[2]:\n1")
                assert file.startswith(f"Notebook file {path} (from __session__): the saved version (unsaved edits "
                                       "are not in it), 2 cells:\n--- cell 1 · markdown")
                assert "--- cell 2 · code [4] · id " in file and file.endswith("df.head()\n--- outputs ---\n   a\n0  1")
                assert owner.reads[-1] == ("notebook_cells", {"start": None, "end": None, "source": "both",
                                                              "path": str(path)})
                last = text_of(await session.call_tool("notebook_cells", {"source": "file", "start": -1}))
                assert "2 cells, 1 shown:" in last and "cell 1" not in last
                ns["__session__"] = str(tmp_path / "renamed.ipynb")
                stale = text_of(await session.call_tool("notebook_cells", {"source": "file"}))
                assert stale == (f"Notebook file: {tmp_path / 'renamed.ipynb'} (from __session__, not found: renamed "
                                 "or moved since the kernel started?); nothing was read.")
                bad = await session.call_tool("notebook_cells", {"source": "elsewhere"})
                assert bad.is_error and "source" in text_of(bad)
        finally:
            await server.aclose()

    run(main())


def test_reads_refused_by_the_owner_say_why():
    async def main() -> None:
        server = await KernelServer(namespace={"x": 1}).start()
        try:
            grant = server.grant(Owner("refuse-reads"))
            async with mcp_client(server.url, grant.token) as session:
                result = await session.call_tool("inspect_variable", {"name": "x"})
                assert result.is_error and text_of(result) == \
                    "Error executing tool inspect_variable: refused: reads are off"
        finally:
            await server.aclose()

    run(main())


def test_run_code_allowed():
    async def main() -> None:
        ns: dict[str, Any] = {"df": frame()}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner("allow")
            grant = server.grant(owner)
            async with mcp_client(server.url, grant.token) as session:
                code = "import sys\ntotal = df['revenue'].sum()\nprint('sum is', total)\nprint('warn', file=sys.stderr)\nfloat(total * 2)"
                result = await session.call_tool("run_code", {"code": code})
                assert result.is_error is False
                assert text_of(result) == "stdout:\nsum is 20.75\nstderr:\nwarn\nresult:\n41.5"
                assert ns["total"] == 20.75  # defined in the user namespace
                assert owner.asked == [code]
                assert owner.ran == [(code, {"stdout": "sum is 20.75\n", "stderr": "warn\n", "result": "41.5",
                                             "error": None})]
                failed = text_of(await session.call_tool("run_code", {"code": "x = 1\nundefined_name"}))
                assert failed.startswith("error:\nTraceback (most recent call last):\n  File \"<escouade run_code")
                assert "undefined_name" in failed and failed.endswith("NameError: name 'undefined_name' is not defined")
                assert ns["x"] == 1
                syntax = text_of(await session.call_tool("run_code", {"code": "def ("}))
                assert syntax.startswith("error:\n") and "SyntaxError" in syntax
                awaited = text_of(await session.call_tool("run_code", {"code": "import asyncio\nawait asyncio.sleep(0)\n7"}))
                assert awaited == "result:\n7"
                exited = text_of(await session.call_tool("run_code", {"code": "raise SystemExit(3)"}))
                assert exited.endswith("SystemExit: 3")
                quiet = text_of(await session.call_tool("run_code", {"code": "y = 2"}))
                assert quiet == "(ran: no output, no result)"
                flood = await session.call_tool("run_code", {"code": "print('x' * 200_000)"})
                assert "[cut: " in text_of(flood) and len(text_of(flood)) < 60_000
            assert server.blocked_for() == 0.0
        finally:
            await server.aclose()

    run(main())


def test_run_code_refused_by_the_owner_is_not_run():
    async def main() -> None:
        ns: dict[str, Any] = {}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner("refuse")
            grant = server.grant(owner)
            async with mcp_client(server.url, grant.token) as session:
                result = await session.call_tool("run_code", {"code": "ran = True"})
                assert result.is_error
                assert text_of(result) == "Error executing tool run_code: refused: no code from agents in this notebook"
            assert "ran" not in ns and owner.asked == ["ran = True"] and owner.ran == []
        finally:
            await server.aclose()

    run(main())


def test_a_run_code_cancelled_while_its_card_waits_is_never_run():
    async def main() -> None:
        ns: dict[str, Any] = {}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner("wait")
            grant = server.grant(owner)
            async with mcp_client(server.url, grant.token) as session:
                call = asyncio.ensure_future(session.call_tool("run_code", {"code": "ran = True"}))
                await asyncio.wait_for(owner.waiting.wait(), 60)
                call.cancel()  # the client gives up: the SDK sends notifications/cancelled
                with pytest.raises(asyncio.CancelledError):
                    await call
                await until(lambda: owner.cancelled, what="the owner's ask cancelled")
                assert owner.cancelled  # the owner's ask was cancelled: the card is withdrawn
                assert "ran" not in ns and owner.ran == []
                # the session is still good
                assert not (await session.call_tool("list_variables", {})).is_error
        finally:
            await server.aclose()

    run(main())


def test_two_run_codes_at_once_keep_their_own_output_and_restore_sys_stdout():
    async def main() -> None:
        ns: dict[str, Any] = {"asyncio": asyncio, "a_may_go_on": asyncio.Event(), "b_may_start": asyncio.Event()}
        kernel_out, kernel_err = io.StringIO(), io.StringIO()  # the kernel's own streams
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = kernel_out, kernel_err
        server = await KernelServer(namespace=ns).start()
        try:
            grant = server.grant(Owner())
            first = ("print('A1')\nb_may_start.set()\nawait a_may_go_on.wait()\nprint('A2')\n"
                     "import sys; print('A-err', file=sys.stderr)\n'A done'")
            second = ("await b_may_start.wait()\nprint('B1')\na_may_go_on.set()\nawait asyncio.sleep(0)\n"
                      "print('B2')\n'B done'")

            async def elsewhere() -> None:  # a task of the kernel that prints while both runs wait
                await ns["b_may_start"].wait()
                print("printed by the kernel meanwhile")

            async with mcp_client(server.url, grant.token) as one, mcp_client(server.url, grant.token) as two:
                other = asyncio.ensure_future(elsewhere())
                a, b = await asyncio.gather(one.call_tool("run_code", {"code": first}),
                                            two.call_tool("run_code", {"code": second}))
                await other
                assert text_of(a) == "stdout:\nA1\nA2\nstderr:\nA-err\nresult:\n'A done'"
                assert text_of(b) == "stdout:\nB1\nB2\nresult:\n'B done'"
                assert sys.stdout is kernel_out and sys.stderr is kernel_err
                print("printed by the kernel afterwards")
            assert kernel_out.getvalue() == "printed by the kernel meanwhile\nprinted by the kernel afterwards\n"
        finally:
            sys.stdout, sys.stderr = saved
            await server.aclose()

    run(main())


def test_a_run_code_whose_client_went_away_is_withdrawn_and_never_run():
    async def main() -> None:
        ns: dict[str, Any] = {}
        server = await KernelServer(namespace=ns).start()
        client = None
        try:
            owner = Owner("wait")
            grant = server.grant(owner)
            client = await asyncio.create_subprocess_exec(
                sys.executable, str(FIXTURES / "mcp_call.py"), server.url, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "ESCOUADE_MCP_TOKEN": grant.token})
            assert json.loads(await client.stdout.readline()) == {"ready": True}
            client.stdin.write(json.dumps({"tool": "run_code", "arguments": {"code": "ran = True"}}).encode() + b"\n")
            await client.stdin.drain()
            await asyncio.wait_for(owner.waiting.wait(), 20)
            client.kill()  # the client goes away: its connections close, no cancel notification, no DELETE
            await client.wait()
            with contextlib.suppress(AssertionError):
                await until(lambda: owner.cancelled, what="the owner's ask cancelled")
            if not owner.cancelled:
                owner.release.set_result(None)  # the user presses Run on the card left behind
                await asyncio.sleep(0.5)
            assert owner.cancelled  # the owner's ask was cancelled: the card is withdrawn
            assert "ran" not in ns and owner.ran == []
        finally:
            if client is not None and client.returncode is None:
                client.kill()
                await client.wait()
            await server.aclose()

    run(main())


def test_an_mcp_session_answers_only_the_token_that_opened_it():
    async def main() -> None:
        server = await KernelServer(namespace={"n": 1}).start()
        try:
            a, b = server.grant(Owner()), server.grant(Owner())
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "0"}}}
            accept = {"Accept": "application/json, text/event-stream"}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "list_variables", "arguments": {}}}
            async with httpx2.AsyncClient() as http:
                opened = await http.post(server.url, json=init, headers={**accept, "Authorization": a.authorization})
                assert opened.status_code == 200
                sid = opened.headers["mcp-session-id"]
                as_a = {**accept, "Authorization": a.authorization, "Mcp-Session-Id": sid,
                        "Mcp-Protocol-Version": "2025-06-18"}
                as_b = {**as_a, "Authorization": b.authorization}
                await http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                headers=as_a)
                # agent B's token with agent A's session: refused as an unknown session, whatever the method
                used = await http.post(server.url, json=call, headers=as_b)
                async with http.stream("GET", server.url, headers=as_b) as listened:
                    listened_status = listened.status_code
                deleted = await http.delete(server.url, headers=as_b)
                assert (used.status_code, listened_status, deleted.status_code) == (404, 404, 404)
                assert b.calls == 0
                # A's session is intact and answers A
                own = await http.post(server.url, json=call, headers=as_a)
                assert own.status_code == 200 and "- n: int" in own.text and a.calls == 1
                # a session id nobody opened gets 404 too
                made_up = await http.post(server.url, json=call, headers={**as_a, "Mcp-Session-Id": "0" * 32})
                assert made_up.status_code == 404
                # A may end its own session
                assert (await http.delete(server.url, headers=as_a)).status_code in (200, 204)
                assert (await http.post(server.url, json=call, headers=as_a)).status_code == 404
        finally:
            await server.aclose()

    run(main())


def test_wrong_missing_or_revoked_token_gets_401():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        try:
            grant = server.grant(Owner())
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "0"}}}
            accept = {"Accept": "application/json, text/event-stream"}
            async with httpx2.AsyncClient() as http:
                missing = await http.post(server.url, json=init, headers=accept)
                wrong = await http.post(server.url, json=init, headers={**accept, "Authorization": "Bearer nope"})
                scheme = await http.post(server.url, json=init,
                                         headers={**accept, "Authorization": f"Basic {grant.token}"})
                ok = await http.post(server.url, json=init, headers={**accept, "Authorization": grant.authorization})
                assert (missing.status_code, wrong.status_code, scheme.status_code, ok.status_code) == \
                    (401, 401, 401, 200)
                assert "bearer token" in missing.json()["error"]
                assert grant.connected
                server.revoke(grant)
                revoked = await http.post(server.url, json=init, headers={**accept,
                                                                          "Authorization": grant.authorization})
                assert revoked.status_code == 401
                # requests on a kept-alive connection are not held by Nagle + delayed ACK (40 ms each)
                times = []
                for _ in range(11):
                    t0 = time.perf_counter()
                    assert (await http.get(server.url.replace("/mcp", "/floor"))).status_code == 401
                    times.append(time.perf_counter() - t0)
                assert sorted(times)[5] < 0.030, times
        finally:
            await server.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            server.grant(Owner())

    run(main())


class SlowRepr:
    """A value whose ``__repr__`` sleeps (up to 4 s, or until ``release`` is set)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.left = threading.Event()
        self.release = threading.Event()

    def __repr__(self) -> str:
        self.entered.set()
        try:
            self.release.wait(4)
            return "SlowRepr(finally)"
        finally:
            self.left.set()


def test_a_slow_repr_does_not_freeze_the_loop_and_is_reported_as_too_slow():
    async def main() -> None:
        slow = SlowRepr()
        ns = {"slow": slow, "n": 3}
        server = await KernelServer(namespace=ns).start()
        ticked_during_repr = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                if slow.entered.is_set() and not slow.left.is_set():
                    ticked_during_repr.append(True)
                await asyncio.sleep(0.02)

        ticks = asyncio.ensure_future(ticker())
        try:
            grant = server.grant(Owner())
            async with mcp_client(server.url, grant.token) as session, mcp_client(server.url, grant.token) as other:
                inspect = asyncio.ensure_future(session.call_tool("inspect_variable", {"name": "slow"}))
                while not slow.entered.is_set():
                    await asyncio.sleep(0.01)
                # a second call answers while the repr still runs: the value is not read again
                listing = text_of(await other.call_tool("list_variables", {}))
                assert not slow.left.is_set()
                assert "- n: int — int = 3" in listing
                assert "- slow: test_kernel_server.SlowRepr — (not read: its repr from an earlier call is still " \
                       "running" in listing
                text = text_of(await inspect)
                assert text.startswith("slow: test_kernel_server.SlowRepr\n(incomplete: its repr took longer than "
                                       "2 s: not shown (it goes on in a worker thread))"), text
                assert "SlowRepr(finally)" not in text
                assert ticked_during_repr  # the loop served other tasks while the repr ran
                slow.release.set()
                while not slow.left.is_set():
                    await asyncio.sleep(0.01)
                deadline = time.monotonic() + 30  # the reader has finished with the value: it is read again, whole
                while "SlowRepr(finally)" not in (again := text_of(await other.call_tool("inspect_variable",
                                                                                         {"name": "slow"}))):
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.02)
                assert again.endswith("repr:\nSlowRepr(finally)"), again
        finally:
            slow.release.set()
            stop.set()
            await ticks
            await server.aclose()

    run(main())


def test_reads_use_a_bounded_pool_of_reader_threads():
    async def main() -> None:
        slows = [SlowRepr() for _ in range(6)]
        ns: dict[str, Any] = {"n": 3, **{f"slow{i}": v for i, v in enumerate(slows)}}
        server = await KernelServer(namespace=ns).start()
        server.read_budget = 0.5
        try:
            grant = server.grant(Owner())
            async with mcp_client(server.url, grant.token) as session:
                listing = text_of(await session.call_tool("list_variables", {})).splitlines()
                readers = server._readers._threads
                assert len(readers) == 4 and all(t.daemon for t in readers)
                assert listing[1] == "- n: int — int = 3"
                took_long = [line for line in listing if "its repr took longer than 0.5 s" in line]
                busy = [line for line in listing if "not read: every reader thread is busy" in line]
                assert len(took_long) == 4 - 1 + 1 and len(busy) == 6 - 4  # n took one thread first, then freed it
                again = text_of(await session.call_tool("list_variables", {}))
                assert again.count("from an earlier call is still running") == 4 and "- n: int" in again
                assert server._readers._threads == readers  # no thread started for the second call
        finally:
            for slow in slows:
                slow.release.set()
            await server.aclose()

    run(main())


# -- the stdio bridge, a real subprocess ---------------------------------------------------------------
async def bridge(url: str, token: str):
    env = {**os.environ, "ESCOUADE_MCP_URL": url, "ESCOUADE_MCP_TOKEN": token}
    return await asyncio.create_subprocess_exec(*BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, env=env)


async def send(proc: Any, message: dict) -> None:
    proc.stdin.write((json.dumps(message) + "\n").encode())
    await proc.stdin.drain()


async def answer(proc: Any, timeout: float = 30) -> dict:
    return json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout))


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def test_the_bridge_relays_stdio_to_http():
    async def main() -> None:
        server = await KernelServer(namespace={"df": frame()}).start()
        owner = Owner("wait")
        grant = server.grant(owner)
        proc = await bridge(server.url, grant.token)
        try:
            await send(proc, INIT)
            init = await answer(proc)
            assert init["id"] == 0 and init["result"]["serverInfo"]["name"] == SERVER_NAME
            await send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            # a run_code waiting on its card does not hold up the requests behind it
            await send(proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "run_code", "arguments": {"code": "6 * 7"}}})
            await asyncio.wait_for(owner.waiting.wait(), 30)
            await send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": "inspect_variable", "arguments": {"name": "df"}}})
            second = await answer(proc)
            assert second["id"] == 2 and second["result"]["content"][0]["text"].startswith("df: pandas.DataFrame")
            owner.release.set_result(None)
            first = await answer(proc)
            assert first["id"] == 1 and first["result"]["content"][0]["text"] == "result:\n42"
            await send(proc, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
            assert (await answer(proc)) == {"jsonrpc": "2.0", "id": 3, "result": {}}
            proc.stdin.write(b"not json\n")
            bad = await answer(proc)
            assert bad["id"] is None and bad["error"]["code"] == -32700
        finally:
            proc.stdin.close()
            assert await asyncio.wait_for(proc.wait(), 10) == 0
            await server.aclose()

    run(main())


def test_the_bridge_answers_http_failures_as_jsonrpc_errors():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        url = server.url
        proc = await bridge(url, "wrong-token")
        try:
            await send(proc, INIT)
            refused = await answer(proc)
            assert refused["id"] == 0 and refused["error"]["code"] == -32000
            assert refused["error"]["message"].startswith(f"HTTP 401 from the MCP server at {url}")
            assert refused["error"]["data"] == {"status": 401}
        finally:
            proc.stdin.close()
            await proc.wait()
        await server.aclose()
        proc = await bridge(url, "x")  # the server is gone
        try:
            await send(proc, INIT)
            gone = await answer(proc)
            assert gone["id"] == 0 and "is unreachable" in gone["error"]["message"]
        finally:
            proc.stdin.close()
            await proc.wait()
        out = subprocess.run(BRIDGE, capture_output=True, text=True, env={**os.environ, "ESCOUADE_MCP_URL": ""},
                             timeout=30)
        assert out.returncode == 2 and "ESCOUADE_MCP_URL is not set" in out.stderr

    run(main())


def test_a_run_code_after_a_long_block_is_not_run_but_reads_answer():
    """The busy rule: the loop blocked longer than busy_limit while the calls waited."""
    async def main() -> None:
        ns: dict[str, Any] = {"n": 5}
        server = await KernelServer(namespace=ns, busy_limit=1.0).start()
        owner = Owner("allow")
        grant = server.grant(owner)
        proc = await bridge(server.url, grant.token)
        try:
            await send(proc, INIT)
            await answer(proc)
            await send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            await send(proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "run_code", "arguments": {"code": "ran = True"}}})
            await send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": "inspect_variable", "arguments": {"name": "n"}}})
            time.sleep(3)  # a cell blocking the loop: the bridge's POSTs wait in the socket
            answers = {m["id"]: m for m in [await answer(proc), await answer(proc)]}
            busy = answers[1]["result"]
            assert busy["isError"] and re.search(r"the kernel was busy running a cell for [234] s; the call was not "
                                                 r"run — call it again$", busy["content"][0]["text"])
            assert "ran" not in ns and owner.asked == []  # no card for a stale call
            assert answers[2]["result"]["content"][0]["text"].startswith("n: int")
            # once the loop is free again, run_code runs
            await asyncio.sleep(BUSY_GRACE + 0.5)
            await send(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                              "params": {"name": "run_code", "arguments": {"code": "ran = True"}}})
            assert not (await answer(proc))["result"]["isError"] and ns["ran"] is True
        finally:
            proc.stdin.close()
            await proc.wait()
            await server.aclose()

    run(main())


def test_shared_is_one_server_per_loop_and_stops():
    async def main() -> KernelServer:
        first, second = await asyncio.gather(KernelServer.shared(), KernelServer.shared())
        assert first is second and first.started
        url = first.url
        await KernelServer.close_shared()
        assert not first.started
        async with httpx2.AsyncClient() as http:
            with pytest.raises(httpx2.ConnectError):
                await http.post(url, json={})
        again = await KernelServer.shared()
        assert again is not first
        await again.aclose()
        return again

    server = run(main())
    assert server._serve_task.done() and server._heartbeat_task.done()  # no task left behind


def test_importing_the_engine_does_not_import_mcp():
    code = ("import sys, escouade_nb.engine, escouade_nb.kernel_mcp.server, escouade_nb.tools.mcp_bridge; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'uvicorn', 'starlette', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_run_result_text():
    assert run_result_text({"stdout": "a\n", "stderr": "", "result": "1", "error": None}) == "stdout:\na\nresult:\n1"


# -- the fake agent over real pipes ----------------------------------------------------------------------
@asynccontextmanager
async def fake_agent(client: RecordingClient, cwd: Path, servers: list[Any]):
    async with spawn_agent_process(client, *AGENT_CMD, cwd=cwd,
                                   transport_kwargs={"stderr": subprocess.DEVNULL}) as (conn, proc):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
        session = await conn.new_session(cwd=str(cwd), mcp_servers=servers)
        yield conn, session.session_id, init


def http_entry(server: KernelServer, grant: Any, name: str = SERVER_NAME) -> HttpMcpServer:
    return HttpMcpServer(type="http", name=name, url=server.url,
                         headers=[{"name": "Authorization", "value": grant.authorization}])


def stdio_entry(server: KernelServer, grant: Any, name: str = SERVER_NAME) -> McpServerStdio:
    return McpServerStdio(name=name, command=sys.executable, args=["-m", "escouade_nb.tools.mcp_bridge"],
                          env=[{"name": "ESCOUADE_MCP_URL", "value": server.url},
                               {"name": "ESCOUADE_MCP_TOKEN", "value": grant.token}])


def test_fake_agent_inspects_and_runs_code_through_the_kernel_server(tmp_path):
    async def main() -> None:
        ns: dict[str, Any] = {"df": frame()}
        server = await KernelServer(namespace=ns).start()
        owner = Owner("allow")
        grant = server.grant(owner)
        client = RecordingClient("allow-once")
        try:
            async with fake_agent(client, tmp_path, [http_entry(server, grant)]) as (conn, sid, init):
                assert init.agent_capabilities.mcp_capabilities.http is True
                assert init.agent_capabilities.mcp_capabilities.sse is False
                assert grant.connected  # it connected during session/new
                reply = await conn.prompt(session_id=sid, prompt=[text_block("inspect df")])
                assert reply.stop_reason == "end_turn"
                (tool_call, _options), = client.permissions
                assert (tool_call.title, tool_call.kind, tool_call.raw_input) == \
                    ("mcp__escouade__inspect_variable", "other", {"name": "df"})
                start, = client.of(ToolCallStart)
                assert (start.status, start.title, start.kind) == ("in_progress", "mcp__escouade__inspect_variable",
                                                                   "other")
                done, = client.of(ToolCallProgress)
                assert done.status == "completed" and done.content[0].content.text.startswith("df: pandas.DataFrame")
                assert client.text().startswith("mcp__escouade__inspect_variable returned: df: pandas.DataFrame")

                client.updates.clear()
                client.permissions.clear()
                await conn.prompt(session_id=sid, prompt=[text_block("run code\n```python\nx = 41 + 1\nx\n```")])
                assert client.permissions[0][0].raw_input == {"code": "x = 41 + 1\nx"}
                assert ns["x"] == 42 and owner.asked == ["x = 41 + 1\nx"]
                assert client.text() == "mcp__escouade__run_code returned: result:\n42"

                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block("call nosuch tool {}")])
                assert client.text() == "No MCP server named 'nosuch' was given to this session (given: escouade)."
                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block('call escouade inspect_variable {"name": "zz"}')])
                failed, = client.of(ToolCallProgress)
                assert failed.status == "failed"
                assert client.text().startswith("mcp__escouade__inspect_variable failed: Error executing tool "
                                                "inspect_variable: no variable named 'zz'")
        finally:
            await server.aclose()

    run(main(), timeout=90)


def test_fake_agent_through_the_stdio_bridge_and_a_refused_permission(tmp_path):
    async def main() -> None:
        ns: dict[str, Any] = {"df": frame(), "n": 1}
        server = await KernelServer(namespace=ns).start()
        grant = server.grant(Owner("allow"))
        client = RecordingClient("reject-once")
        try:
            async with fake_agent(client, tmp_path, [stdio_entry(server, grant)]) as (conn, sid, _init):
                assert grant.connected
                await conn.prompt(session_id=sid, prompt=[text_block("variables")])
                assert client.permissions[0][0].title == "mcp__escouade__list_variables"
                assert client.text() == "I did not call mcp__escouade__list_variables: permission refused."
                assert grant.calls == 0 and client.of(ToolCallStart) == []
                client.answer = "allow-once"
                client.updates.clear()
                await conn.prompt(session_id=sid, prompt=[text_block("variables")])
                assert client.text().startswith("mcp__escouade__list_variables returned: 2 variables")
                assert "- n: int — int = 1" in client.text()
                assert grant.calls == 1
        finally:
            await server.aclose()

    run(main(), timeout=90)


def test_fake_agent_says_when_a_server_cannot_be_reached(tmp_path):
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        grant = server.grant(Owner())
        bad = HttpMcpServer(type="http", name=SERVER_NAME, url=server.url,
                            headers=[{"name": "Authorization", "value": "Bearer wrong"}])
        client = RecordingClient()
        try:
            async with fake_agent(client, tmp_path, [bad]) as (conn, sid, _init):
                await conn.prompt(session_id=sid, prompt=[text_block("inspect df")])
                assert client.text().startswith("The MCP server 'escouade' could not be reached: McpHttpError: "
                                                "HTTP 401")
                assert client.permissions == [] and not grant.connected
        finally:
            await server.aclose()

    run(main(), timeout=60)


# -- a real kernel ---------------------------------------------------------------------------------------
KERNEL_SETUP = """
import asyncio, logging, time
import pandas as pd
from escouade_nb.kernel_mcp.server import KernelServer, Refused
df = pd.DataFrame({"region": ["north", "south"], "revenue": [1.5, 2.5]})
class Owner:
    name = "kernel test"
    async def ask_run_code(self, code):
        return None
root_before = (list(logging.getLogger().handlers), logging.getLogger().level)
server = await KernelServer.shared()
grant = server.grant(Owner())
print("URL", server.url)
print("TOKEN", grant.token)
print("ROOT", (list(logging.getLogger().handlers), logging.getLogger().level) == root_before)
"""


@pytest.mark.kernel
def test_in_a_real_kernel(tmp_path):
    k = Kernel(tmp_path)
    client = None
    try:
        out = k.run(KERNEL_SETUP, timeout=120)
        lines = dict(line.split(" ", 1) for line in out.text.splitlines() if line[:4] in ("URL ", "TOKE", "ROOT"))
        assert lines["ROOT"] == "True"
        assert set(out.text.splitlines()) == {f"URL {lines['URL']}", f"TOKEN {lines['TOKEN']}", "ROOT True"}, \
            out.text  # nothing else reached the cell: no log line of the SDK or uvicorn
        client = McpProcess(lines["URL"], lines["TOKEN"])
        call = client.call

        got = call("inspect_variable", name="df")
        assert got["text"].startswith("df: pandas.DataFrame\nDataFrame 2×2") and not got["is_error"]
        listing = call("list_variables")["text"]
        assert "- df: pandas.DataFrame" in listing and "- grant:" in listing
        assert "In:" not in listing and "- exit" not in listing and "- get_ipython" not in listing
        history = call("notebook_cells", start=1, end=1)["text"]
        assert history.startswith("History: 1 cell run in this kernel (execution counts 1–1):\nIn [1]:\nimport asyncio")

        k.run("df['revenue'] = df['revenue'] * 10")
        assert "15.0" in call("inspect_variable", name="df")["text"]  # the live value
        ran = call("run_code", code="float(df['revenue'].sum())")
        assert ran["text"] == "result:\n40.0"

        # a call made while a cell blocks the loop waits, and answers once the cell has ended
        msg_id = k.kc.execute("print('CELL START', flush=True)\ntime.sleep(5)\nprint('CELL END', time.time())")
        while True:  # the cell blocks the loop from here (get_iopub_msg's timeout is the deadline)
            msg = k.kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") == msg_id and "CELL START" in msg["content"].get("text", ""):
                break
        got = call("inspect_variable", name="df")
        cell_end = None
        while cell_end is None:
            msg = k.kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                cell_end = float(msg["content"]["text"].split()[-1])
        assert got["text"].startswith("df: pandas.DataFrame") and not got["is_error"]
        assert got["answered"] >= cell_end - 0.05 and got["answered"] - got["sent"] >= 2.0
        time.sleep(0.3)
        out = k.run("await KernelServer.close_shared()\nprint(server.started, server._serve_task.done())")
        assert out.text.strip() == "False True"
        # a kernel shut down with its server running (a client connected) stops promptly
        k.run("server = await KernelServer.shared()\ngrant = server.grant(Owner())\nprint('URL', server.url)")
        t0 = time.monotonic()
        k.shutdown()
        assert time.monotonic() - t0 < 10
        k = None
    finally:
        if client is not None:
            client.kill()
        if k is not None:
            k.shutdown()


SLOW_SETUP = """
import threading
from escouade_nb.kernel_mcp.server import KernelServer
class SlowRepr:
    def __init__(self):
        self.release, self.entered, self.inside = threading.Event(), threading.Event(), False
    def __repr__(self):
        self.inside = True
        self.entered.set()
        try:
            self.release.wait(4)
            return 'SlowRepr(finally)'
        finally:
            self.inside = False
slow = SlowRepr()
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
def test_a_slow_repr_leaves_the_real_kernel_running_cells(tmp_path):
    k = Kernel(tmp_path)
    client = None
    try:
        out = k.run(SLOW_SETUP, timeout=120)
        client = McpProcess.from_output(out.text)
        client.send("inspect_variable", name="slow")
        # a cell that waits (on the loop) for the repr to start, then looks: is the repr still inside?
        cell = k.run("import asyncio, time\nend = time.monotonic() + 30\n"
                     "while not slow.entered.is_set() and time.monotonic() < end:\n"
                     "    await asyncio.sleep(0.01)\nprint('INSIDE', slow.entered.is_set(), slow.inside)")
        got = client.answer()
        # the cell ran while the repr was still sleeping: the loop was free (on a frozen loop it runs after)
        assert cell.text.split() == ["INSIDE", "True", "True"]
        assert "its repr took longer than 2 s: not shown" in got["text"] and "SlowRepr(finally)" not in got["text"]
        k.run("slow.release.set()")
    finally:
        if client is not None:
            client.kill()
        k.shutdown()
TOKEN_FILE_SCRIPT = """
import asyncio, json, os, subprocess, sys
from escouade_nb.kernel_mcp.server import KernelServer

class Owner:
    name = "token file test"
    async def ask_run_code(self, code):
        return None

async def main():
    server = KernelServer(namespace={"x": 1})
    await server.start()
    kept, ended = server.grant(Owner()), server.grant(Owner())
    kept_file, ended_file = await server.token_file(kept), await server.token_file(ended)
    assert await server.token_file(kept) == kept_file  # one file per grant
    print(json.dumps({"kept": str(kept_file), "ended": str(ended_file), "token": kept.token}), flush=True)
    server.revoke(ended)
    print(json.dumps({"ended_exists": ended_file.exists()}), flush=True)
    # the bridge reads its token from the file: initialize and tools/list go through
    env = {k: v for k, v in os.environ.items() if k != "ESCOUADE_MCP_TOKEN"}
    env.update({"ESCOUADE_MCP_URL": server.url, "ESCOUADE_MCP_TOKEN_FILE": str(kept_file)})
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "escouade_nb.tools.mcp_bridge", env=env,
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
        proc.stdin.write((json.dumps(message) + "\\n").encode())
    await proc.stdin.drain()
    answers = [json.loads(await proc.stdout.readline()) for _ in range(2)]
    proc.stdin.close()
    await proc.wait()
    print(json.dumps({"tools": sorted(t["name"] for t in answers[1]["result"]["tools"])}), flush=True)
    # no aclose: the interpreter's exit must delete the file and its folder

asyncio.run(main())
"""


def test_a_grants_token_file_is_0600_private_readable_by_the_bridge_and_gone_when_revoked_or_at_exit(tmp_path):
    done = subprocess.run([sys.executable, "-c", TOKEN_FILE_SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"})
    assert done.returncode == 0, done.stderr
    first, revoked, listed = (json.loads(line) for line in done.stdout.splitlines())
    kept, ended = Path(first["kept"]), Path(first["ended"])
    assert kept.parent == ended.parent and kept != ended
    assert revoked == {"ended_exists": False}  # revoke deleted its file at once
    assert {"list_variables", "inspect_variable", "run_code"} <= set(listed["tools"])  # the bridge authenticated
    assert not kept.exists() and not kept.parent.exists()  # the interpreter's exit removed file and folder
    assert "ESCOUADE_MCP_TOKEN" not in done.stderr


def test_token_files_are_0600_in_a_0700_folder(tmp_path, monkeypatch):
    from escouade_nb.kernel_mcp.token_files import TokenFiles

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    files = TokenFiles()
    old = os.umask(0)  # even a permissive umask gives 0600 / 0700
    try:
        path = files.write("secret-token")
    finally:
        os.umask(old)
    try:
        assert path.parent.parent == tmp_path  # under the per-user runtime folder
        assert path.read_text() == "secret-token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        files.remove("secret-token")
        assert not path.exists() and path.parent.exists()
    finally:
        files.remove_all()
    assert not path.parent.exists()
