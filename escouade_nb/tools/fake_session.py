"""The fake agent's sessions and prompt turns: a :class:`_Session` per ``session/new``, a
:class:`_Turn` of helpers per ``session/prompt`` (its text streamed, thoughts, sleeps that
a cancel ends, permission requests with the three :data:`PERMISSION_OPTIONS`), and
:class:`FakeParts`, what every part of :class:`~escouade_nb.tools.fake_agent.FakeAgent`
shares (the connection, the client's capabilities, the sessions).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    PermissionOption,
    ToolCallUpdate,
)

from .fake_words import _split

#: The three permission options, in the order they are offered.
PERMISSION_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("allow-once", "Allow once", "allow_once"),
    ("allow-always", "Always allow", "allow_always"),
    ("reject-once", "Reject", "reject_once"),
)
_ALLOW_IDS = frozenset({"allow-once", "allow-always"})


def _permission_options() -> list[PermissionOption]:
    return [PermissionOption(option_id=o, name=n, kind=k) for o, n, k in PERMISSION_OPTIONS]


def _is_not_found(exc: RequestError) -> bool:
    if exc.code == -32002:
        return True
    blob = f"{exc} {exc.data!r}".lower()
    return any(s in blob for s in ("not found", "no such file", "does not exist", "enoent"))


def _is_context(block: Any) -> bool:
    """Whether a prompt block (SDK model) is context the client marked as not the user's
    words (``_meta.escouade.context``; see ``escouade_nb.core.prompt.context``)."""
    meta = getattr(block, "field_meta", None)
    ours = meta.get("escouade") if isinstance(meta, dict) else None
    return isinstance(ours, dict) and bool(ours.get("context"))



class _Cancelled(Exception):
    """Raised inside a scenario when the turn has been cancelled."""


@dataclass
class _Session:
    session_id: str
    cwd: str
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    mode: str = "ask"
    config: dict[str, Any] = field(default_factory=lambda: {"sandbox": "workspace-write", "model": "fake-small",
                                                             "verbose": False})
    tool_calls: int = 0
    messages: int = 0
    turns: int = 0
    mcp: dict[str, Any] = field(default_factory=dict)  # server name -> _McpLink (session/new|load's mcpServers)
    title: str | None = None  # its first prompt (cut), for session/list
    updated_at: str | None = None  # ISO 8601 UTC time of its last prompt, for session/list

    def next_tool_call_id(self) -> str:
        self.tool_calls += 1
        return f"call-{self.tool_calls}"

    def next_message_id(self, kind: str = "msg") -> str:
        self.messages += 1
        return f"{self.session_id}-{kind}-{self.messages}"




class FakeParts:
    """What the parts of the fake agent (its files and terminals, its modes and questions,
    its MCP servers) share: the ACP connection (``conn``), the client's capabilities of
    ``initialize``, the sessions by id. Each part is a class of its own deriving from this
    one; :class:`~escouade_nb.tools.fake_agent.FakeAgent` derives from them all."""

    conn: Any
    client_capabilities: ClientCapabilities | None
    sessions: dict[str, _Session]

    @property
    def can_read(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.fs and caps.fs.read_text_file)

    @property
    def can_write(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.fs and caps.fs.write_text_file)

    @property
    def can_terminal(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.terminal)

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        return session


class _Turn:
    """Helpers bound to one prompt turn of one session."""

    def __init__(self, agent: FakeParts, session: _Session) -> None:
        self.agent = agent
        self.session = session
        self.sid = session.session_id
        self._message_id: str | None = None
        self._thought_id: str | None = None
        self.refusal: str | None = None

    @property
    def conn(self) -> Any:
        return self.agent.conn

    @property
    def cancelled(self) -> bool:
        return self.session.cancel_event.is_set()

    def check(self) -> None:
        if self.cancelled:
            raise _Cancelled

    async def send(self, update: Any) -> None:
        await self.conn.session_update(self.sid, update)

    async def say(self, text: str, pieces: int = 1) -> None:
        """Stream ``text`` as agent_message_chunk updates sharing one messageId."""
        if self._message_id is None:
            self._message_id = self.session.next_message_id("msg")
        for part in _split(text, pieces):
            self.check()
            await self.send(
                AgentMessageChunk(
                    session_update="agent_message_chunk",
                    content=text_block(part),
                    message_id=self._message_id,
                )
            )

    async def think(self, text: str, pieces: int = 1) -> None:
        if self._thought_id is None:
            self._thought_id = self.session.next_message_id("thought")
        for part in _split(text, pieces):
            self.check()
            await self.send(
                AgentThoughtChunk(
                    session_update="agent_thought_chunk",
                    content=text_block(part),
                    message_id=self._thought_id,
                )
            )

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early (and raising) if the turn is cancelled."""
        try:
            await asyncio.wait_for(self.session.cancel_event.wait(), timeout=seconds)
        except TimeoutError:
            return
        raise _Cancelled

    async def ask(self, tool_call: ToolCallUpdate) -> str:
        """Request permission; return "allow", "reject" or "cancelled"."""
        response = await self.conn.request_permission(self.sid, tool_call, _permission_options())
        outcome = response.outcome
        # what the client told us of a refusal (escouade_nb's _meta extension), if anything
        self.refusal = ((response.field_meta or {}).get("escouade") or {}).get("message")
        if self.cancelled:
            return "cancelled"
        if isinstance(outcome, AllowedOutcome):
            return "allow" if outcome.option_id in _ALLOW_IDS else "reject"
        return "cancelled"
