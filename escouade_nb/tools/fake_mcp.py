"""The fake agent's MCP side: the servers given in ``session/new|load`` (``mcpServers``:
http and stdio), connected at once, and the scenarios that call their tools
(``variables``, ``inspect VAR``, ``run code CODE``, ``call S T {json}``, and the live
notebook's words of :mod:`.fake_live`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any

from acp import start_tool_call, text_block, tool_content, update_tool_call
from acp.schema import ToolCallUpdate

from .fake_live import LiveCellWords
from .fake_session import FakeParts, _Session, _Turn
from .fake_words import AGENT_NAME, AGENT_VERSION, _log


class McpTools(LiveCellWords, FakeParts):
    """The MCP servers of each session and the scenarios calling their tools. Keywords,
    each at the start of a line: "variables", "inspect VAR", "run code CODE", "call SERVER
    TOOL {json}", and the live notebook's (:mod:`.fake_live`, checked first). Checked before
    every other scenario ("run code" before "run")."""

    _MCP_VARIABLES_RE = re.compile(r"^[ \t]*(?:list[ \t]+)?variables[ \t]*[.!?]?[ \t]*$", re.IGNORECASE | re.MULTILINE)
    _MCP_INSPECT_RE = re.compile(r"^[ \t]*inspect[ \t]+`?([A-Za-z_][\w]*)`?", re.IGNORECASE | re.MULTILINE)
    _MCP_RUN_CODE_RE = re.compile(r"^[ \t]*run[ \t]+code[ \t]*\n?(.+)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
    _MCP_LONG_RUN_RE = re.compile(r"^[ \t]*run[ \t]+long[ \t]+code[ \t]*\n?(.+)",
                                  re.IGNORECASE | re.MULTILINE | re.DOTALL)
    _MCP_TASK_RE = re.compile(r"^[ \t]*(task[ \t]+status|wait[ \t]+for[ \t]+task|cancel[ \t]+task)"
                              r"[ \t]+`?(task-[0-9a-f]+)`?", re.IGNORECASE | re.MULTILINE)
    LONG_RUN_WAIT = 2
    """Seconds ``run long code`` lets its run go before the answer comes with a task id."""
    TASK_WAIT = 60
    """Seconds ``wait for task`` waits for the task's end (task_status's wait)."""
    _MCP_CALL_RE = re.compile(r"^[ \t]*call[ \t]+(\S+)[ \t]+(\S+)[ \t]*(.*)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
    KERNEL_SERVER = "escouade"

    async def _connect_mcp(self, session: _Session, servers: Any) -> None:
        """Connect to each server of ``mcpServers`` (initialize, tools/list), all at once;
        a failure is kept on its link and told when a scenario uses that server."""
        links = []
        for server in servers or []:
            link = _McpLink.of(server)
            old = session.mcp.pop(link.name, None)
            if old is not None:
                await old.close()
            session.mcp[link.name] = link
            links.append(link)
        await asyncio.gather(*(link.connect() for link in links))
        if servers and os.environ.get(MCP_IN_ARGV_ENV):
            await self._mcp_config_in_argv(servers)

    async def _mcp_config_in_argv(self, servers: Any) -> None:
        """Do what claude-agent's SDK does with ``mcpServers``: start a process (here one
        that waits for its stdin to close) with the whole config, headers and env
        included, as ``--mcp-config <json>`` in its argv; it lives as long as this agent."""
        config: dict[str, dict[str, Any]] = {"mcpServers": {}}
        for server in servers:
            entry = server.model_dump(by_alias=True, exclude_none=True)
            name = entry.pop("name", "?")
            for key in ("headers", "env"):
                if isinstance(entry.get(key), list):
                    entry[key] = {pair["name"]: pair["value"] for pair in entry[key]}
            config["mcpServers"][name] = entry
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdin.buffer.read()", "--mcp-config",
            json.dumps(config, separators=(",", ":")), stdin=asyncio.subprocess.PIPE)
        self.__dict__.setdefault("_argv_holders", []).append(holder)

    async def close_mcp(self) -> None:
        links = [link for s in self.sessions.values() for link in s.mcp.values()]
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
        for holder in self.__dict__.pop("_argv_holders", []):
            if holder.stdin is not None:
                holder.stdin.close()
            try:
                await asyncio.wait_for(holder.wait(), 2)
            except TimeoutError:
                holder.kill()

    @staticmethod
    def _strip_fence(code: str) -> str:
        """Code given in backticks or a fenced block, without them."""
        code = code.strip()
        fence = re.fullmatch(r"```[\w+-]*\n(.*?)\n?```", code, re.DOTALL)
        if fence:
            return fence.group(1)
        if len(code) > 1 and code.startswith("`") and code.endswith("`"):
            return code.strip("`")
        return code

    async def _dispatch_mcp(self, turn: _Turn, text: str) -> str | None:
        live = await self._dispatch_live(turn, text)
        if live is not None:
            return live
        m = self._MCP_CALL_RE.search(text)
        if m:
            raw = m.group(3).strip()
            try:
                arguments = json.loads(raw) if raw else {}
            except ValueError as exc:
                await turn.say(f"The arguments of `call {m.group(1)} {m.group(2)}` are not JSON: {exc}")
                return "end_turn"
            if not isinstance(arguments, dict):
                await turn.say(f"The arguments of `call {m.group(1)} {m.group(2)}` must be a JSON object.")
                return "end_turn"
            return await self._mcp_call(turn, m.group(1), m.group(2), arguments)
        m = self._MCP_LONG_RUN_RE.search(text)
        if m and m.group(1).strip():
            return await self._mcp_call(turn, self.KERNEL_SERVER, "run_code",
                                        {"code": self._strip_fence(m.group(1)), "wait": self.LONG_RUN_WAIT})
        m = self._MCP_TASK_RE.search(text)
        if m:
            word, task_id = " ".join(m.group(1).lower().split()), m.group(2)
            if word == "cancel task":
                return await self._mcp_call(turn, self.KERNEL_SERVER, "task_cancel", {"task_id": task_id})
            wait = self.TASK_WAIT if word == "wait for task" else 0
            return await self._mcp_call(turn, self.KERNEL_SERVER, "task_status", {"task_id": task_id, "wait": wait})
        m = self._MCP_RUN_CODE_RE.search(text)
        if m and m.group(1).strip():
            return await self._mcp_call(turn, self.KERNEL_SERVER, "run_code", {"code": self._strip_fence(m.group(1))})
        m = self._MCP_INSPECT_RE.search(text)
        if m:
            return await self._mcp_call(turn, self.KERNEL_SERVER, "inspect_variable", {"name": m.group(1)})
        if self._MCP_VARIABLES_RE.search(text):
            return await self._mcp_call(turn, self.KERNEL_SERVER, "list_variables", {})
        return None

    async def _mcp_call(self, turn: _Turn, server: str, tool: str, arguments: dict[str, Any]) -> str:
        """Ask permission (``mcp__SERVER__TOOL``, kind ``other``, rawInput the arguments, as
        claude-agent does), then call the tool: a ``tool_call`` in progress, its update
        completed or failed with the result as text, and a reply naming the result."""
        got = await self._mcp_result(turn, server, tool, arguments)
        if isinstance(got, str):
            return got
        text, failed = got
        await turn.say(f"mcp__{server}__{tool} {'failed' if failed else 'returned'}: {text}")
        return "end_turn"

    async def _mcp_result(self, turn: _Turn, server: str, tool: str,
                          arguments: dict[str, Any]) -> tuple[str, bool] | str:
        """:meth:`_mcp_call` without the reply: ``(the result's text, whether it failed)``, or
        the turn's stop reason when the tool was not called (what happened already said)."""
        link = turn.session.mcp.get(server)
        if link is None:
            given = ", ".join(sorted(turn.session.mcp)) or "none"
            await turn.say(f"No MCP server named {server!r} was given to this session (given: {given}).")
            return "end_turn"
        if link.error is not None:
            await turn.say(f"The MCP server {server!r} could not be reached: {link.error}")
            return "end_turn"
        title = f"mcp__{server}__{tool}"
        call_id = turn.session.next_tool_call_id()
        turn.check()
        decision = await turn.ask(ToolCallUpdate(tool_call_id=call_id, title=title, kind="other", raw_input=arguments))
        if decision == "cancelled":
            return "cancelled"
        if decision != "allow":
            await turn.say(f"I did not call {title}: permission refused." + (f" I was told: {turn.refusal}"
                                                                            if turn.refusal else ""))
            return "end_turn"
        await turn.send(start_tool_call(call_id, title, kind="other", status="in_progress", raw_input=arguments))
        try:
            text, failed = await link.call_tool(tool, arguments)
        except Exception as exc:
            text, failed = f"{type(exc).__name__}: {exc}", True
        await turn.send(update_tool_call(call_id, status="failed" if failed else "completed",
                                         content=[tool_content(text_block(text))], raw_output={"text": text}))
        return text, failed


MCP_CONNECT_TIMEOUT = 15.0
"""Seconds a server of ``mcpServers`` has to answer ``initialize`` and ``tools/list``."""
MCP_IN_ARGV_ENV = "ESCOUADE_FAKE_MCP_IN_ARGV"
"""When set (to anything), the agent also copies the ``mcpServers`` it is given onto a
child process's command line, as claude-agent 0.23.1 does (``--mcp-config <json>``): a
test's stand-in for an agent whose manifest says ``mcpInArgv``."""


class _McpLink:
    """One server of a session's ``mcpServers``, as this agent uses it: connected at
    session/new|load (``initialize``, ``tools/list``), then ``tools/call``. ``error`` says
    why it is not usable (kept, told when a scenario names the server)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tools: list[str] = []
        self.error: str | None = None

    @staticmethod
    def of(server: Any) -> _McpLink:
        name = str(getattr(server, "name", "") or "?")
        kind = getattr(server, "type", None)
        if kind == "http":
            headers = {h.name: h.value for h in getattr(server, "headers", None) or []}
            return _HttpLink(name, server.url, headers)
        if kind is None and getattr(server, "command", None):
            env = {e.name: e.value for e in getattr(server, "env", None) or []}
            return _StdioLink(name, server.command, list(server.args or []), env)
        link = _McpLink(name)
        link.error = f"{kind or 'this'} MCP servers are not supported by the fake agent (http and stdio are)"
        return link

    async def _open(self) -> None:
        raise NotImplementedError

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError

    async def connect(self) -> None:
        if self.error is not None:
            return
        try:
            await asyncio.wait_for(self._open(), MCP_CONNECT_TIMEOUT)
            listed = await asyncio.wait_for(self.request("tools/list", {}), MCP_CONNECT_TIMEOUT)
            self.tools = [t.get("name", "?") for t in (listed or {}).get("tools", [])]
            _log(f"MCP server {self.name}: {len(self.tools)} tools")
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            _log(f"MCP server {self.name}: {self.error}")

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(the result's text contents, joined; whether it is an error result)."""
        result = await self.request("tools/call", {"name": tool, "arguments": arguments}) or {}
        parts = []
        for block in result.get("content") or []:
            parts.append(block.get("text", "") if block.get("type") == "text" else f"[{block.get('type')}]")
        return "\n".join(parts), bool(result.get("isError"))

    async def close(self) -> None:
        return None


class _HttpLink(_McpLink):
    """An ``http`` entry, with its headers, through the bridge's HTTP client (in threads)."""

    def __init__(self, name: str, url: str, headers: dict[str, str]) -> None:
        super().__init__(name)
        from escouade_nb.tools.mcp_bridge import McpHttpClient

        self.client = McpHttpClient(url, headers)

    async def _open(self) -> None:
        await asyncio.to_thread(self.client.initialize, AGENT_NAME, AGENT_VERSION)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await asyncio.to_thread(self.client.request, method, params)

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)


class _StdioLink(_McpLink):
    """A stdio entry: the program spawned with its env (added to this agent's), newline
    JSON-RPC on its stdin/stdout; its stderr is this agent's."""

    def __init__(self, name: str, command: str, args: list[str], env: dict[str, str]) -> None:
        super().__init__(name)
        self.argv = [command, *args]
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[Any, asyncio.Future] = {}  # by JSON-RPC id (ours are ints)
        self._ids = 0

    async def _open(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **self.env}, limit=64 * 2**20)
        self._reader = asyncio.ensure_future(self._read())
        await self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": AGENT_NAME, "version": AGENT_VERSION}})
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
        await self.proc.stdin.drain()

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    _log(f"MCP server {self.name}: not JSON: {line[:200]!r}")
                    continue
                future = self._pending.pop(message.get("id"), None) if isinstance(message, dict) else None
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"the MCP server {self.name} closed its output"))
            self._pending.clear()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        from escouade_nb.tools.mcp_bridge import McpRpcError

        if self._reader is None or self._reader.done():
            raise ConnectionError(f"the MCP server {self.name} is not running")
        self._ids += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._ids] = future
        await self._send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params or {}})
        answer = await future
        if "error" in answer:
            raise McpRpcError(answer["error"] if isinstance(answer["error"], dict) else {})
        return answer.get("result")

    async def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()  # a stdio server ends at EOF
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

