"""ACP clients for the tests that drive the shipped fake agent (``escouade-fake-agent``) as a
real subprocess: :class:`RecordingClient` on the SDK's client side, and
:func:`escouade_session` with the product's own ``EscouadeClient``, and :func:`fake_agent`, the
product's own :class:`Agent` of the shipped ``fake`` harness."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    DeniedOutcome,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

from escouade_nb.engine.agent import Agent
from escouade_nb.manifest import discover, locate_program
from escouade_nb.wire.client import EscouadeClient, capabilities

_SCRIPT = Path(sys.executable).with_name("escouade-fake-agent")
AGENT_CMD: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "escouade_nb.tools.fake_agent"]
"""How to start the fake agent: its console script next to this Python, else ``python -m``."""


def fake_agent(cwd: Path, **kwargs: Any) -> Agent:
    """An :class:`Agent` of the shipped ``fake`` harness in ``cwd`` (``kwargs`` go to ``Agent``)."""
    ref = discover().find("fake")
    return Agent(ref, program=locate_program(ref.harness), cwd=cwd, **kwargs)


class RecordingClient:
    """Minimal ACP client: records updates, answers permissions, serves fs on disk."""

    def __init__(self, answer: str = "allow-once") -> None:
        # answer: an option id, "cancelled", or "wait" (resolve ``self.pending`` yourself)
        self.answer = answer
        self.updates: list[Any] = []
        self.commands: list[Any] = []
        self.permissions: list[tuple[Any, list[Any]]] = []
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.pending: asyncio.Future[RequestPermissionResponse] | None = None
        self.permission_asked = asyncio.Event()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any):
        self.permissions.append((tool_call, options))
        self.permission_asked.set()
        if self.answer == "wait":
            self.pending = asyncio.get_running_loop().create_future()
            return await self.pending
        if self.answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        if getattr(update, "session_update", None) == "available_commands_update":
            self.commands.append(update)  # sent once after session/new: kept apart from the turns' updates
            return
        self.updates.append(update)

    async def read_text_file(self, session_id: str, path: str, line=None, limit=None, **kw: Any):
        self.reads.append(path)
        p = Path(path)
        if not p.exists():
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=p.read_text(encoding="utf-8"))

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any):
        self.writes.append((path, content))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content, encoding="utf-8")
        return WriteTextFileResponse()

    # views -----------------------------------------------------------------
    def of(self, cls: type) -> list[Any]:
        return [u for u in self.updates if isinstance(u, cls)]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of(AgentMessageChunk))


class Session:
    """What one end-to-end session saw."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.writes: list[tuple[Path, str | None, str]] = []
        self.wire: list[dict[str, Any]] = []
        self.client: EscouadeClient | None = None
        self.conn: Any = None
        self.session_id = ""

    async def prompt(self, text: str) -> str:
        """Send a prompt; return the agent's reply text of that turn."""
        start = len(self.updates)
        with anyio.fail_after(60):
            response = await self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)])
        assert response.stop_reason == "end_turn"
        return "".join(u["content"]["text"] for u in self.updates[start:]
                       if u.get("sessionUpdate") == "agent_message_chunk")

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [m["params"] for m in self.wire if m.get("method") == method and "id" in m]

    def tool_updates(self) -> list[dict[str, Any]]:
        return [u for u in self.updates if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]


@asynccontextmanager
async def escouade_session(cwd: Path, *, fence: Path | None = None, fs: bool = True, terminal: bool = True):
    """The fake agent as a real process, spoken to by ``EscouadeClient`` (its terminals
    served for the session's lifetime)."""
    s = Session()

    async def no_permission(tool_call, options):
        raise AssertionError(f"unexpected permission request: {tool_call}")

    client = s.client = EscouadeClient(cwd=cwd, on_permission=no_permission, on_update=s.updates.append,
                                       on_file_written=lambda *w: s.writes.append(w), fence=fence)
    async with client.terminals:
        async with spawn_agent_process(client, *AGENT_CMD, cwd=cwd, transport_kwargs={"stderr": subprocess.DEVNULL},
                                       observers=[lambda ev: s.wire.append(ev.message)]) as (conn, _proc):
            s.conn = conn
            with anyio.fail_after(60):  # a start on a loaded machine
                await conn.initialize(protocol_version=PROTOCOL_VERSION,
                                      client_capabilities=capabilities(fs, terminal),
                                      client_info=Implementation(name="test", version="0"))
                s.session_id = (await conn.new_session(cwd=str(cwd))).session_id
            yield s
