"""``escouade-fake-agent``: the shipped, scripted ACP agent called "fake".

A real ACP agent program (agent side of the ``acp`` SDK, JSON-RPC over stdio)
whose behaviour is fully deterministic, so the demo notebook and the tests can
exercise every part of a client: streamed text, thoughts, plans, tool calls,
permission requests, file edits through the client's ``fs/*`` methods,
cancellation, a flood of stderr and a crash.

The prompt's text picks a scenario (case-insensitive, first match wins):

==================  ======================================================
``crash``           two chunks, a few stderr lines, then ``os._exit(3)``
``flood``           2 MiB of stderr, then a short reply
``slow``            50 ``tick N`` chunks, 0.1 s apart; honours cancel
``chunks N``        exactly N chunks of 40 characters, no sleeps
``think``           a thought (2 chunks), then a reply
``plan``            a plan of 3 entries, updated twice
``run CMD``         an ``execute`` tool call behind a permission (simulated)
``edit`` / write    an ``edit`` tool call with a diff behind a permission
anything else       a markdown greeting that echoes the prompt
==================  ======================================================

Only ACP goes to stdout (the SDK writes it); diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import acp
from acp import (
    RequestError,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PlanEntry,
    PromptResponse,
    ToolCallLocation,
    ToolCallUpdate,
)

__all__ = [
    "AGENT_NAME",
    "AGENT_VERSION",
    "PERMISSION_OPTIONS",
    "FakeAgent",
    "main",
]

AGENT_NAME = "escouade-fake-agent"
AGENT_VERSION = "0.1.0"

#: The three permission options, in the order they are offered.
PERMISSION_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("allow-once", "Allow once", "allow_once"),
    ("allow-always", "Always allow", "allow_always"),
    ("reject-once", "Reject", "reject_once"),
)
_ALLOW_IDS = frozenset({"allow-once", "allow-always"})

EDIT_MARKER = "Edited by the fake agent.\n"
DEFAULT_FILE = "notes.txt"
FLOOD_BYTES = 2 * 1024 * 1024
SLOW_TICKS = 50
SLOW_DELAY = 0.1
CHUNK_WIDTH = 40

_CHUNKS_RE = re.compile(r"chunks\s+(\d+)", re.IGNORECASE)
_RUN_RE = re.compile(r"\brun\s+(.+)", re.IGNORECASE)
# A token "looks like a file name" when it ends in a dot and an extension.
_FILE_RE = re.compile(r"^[\w./\\~-]*\w\.[A-Za-z0-9]{1,10}$")
_TOKEN_STRIP = "`'\"()[]{}<>,;:!?"


def _log(line: str) -> None:
    """Write one diagnostic line to stderr (never stdout)."""
    sys.stderr.write(f"fake agent: {line}\n")
    sys.stderr.flush()


def _split(text: str, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` non-empty, contiguous parts."""
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _chunk_text(i: int) -> str:
    """The i-th chunk of the ``chunks N`` scenario: exactly 40 characters."""
    head = f"{i:05d} "
    return (head + "x" * CHUNK_WIDTH)[: CHUNK_WIDTH - 1] + "\n"


def find_file_name(text: str) -> str:
    """First whitespace-separated token that looks like a file name, else ``notes.txt``."""
    for raw in text.split():
        token = raw.lstrip(_TOKEN_STRIP).rstrip(_TOKEN_STRIP + ".")
        if _FILE_RE.match(token):
            return token
    return DEFAULT_FILE


def _permission_options() -> list[PermissionOption]:
    return [PermissionOption(option_id=o, name=n, kind=k) for o, n, k in PERMISSION_OPTIONS]


def _is_not_found(exc: RequestError) -> bool:
    if exc.code == -32002:
        return True
    blob = f"{exc} {exc.data!r}".lower()
    return any(s in blob for s in ("not found", "no such file", "does not exist", "enoent"))


class _Cancelled(Exception):
    """Raised inside a scenario when the turn has been cancelled."""


@dataclass
class _Session:
    session_id: str
    cwd: str
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    tool_calls: int = 0
    messages: int = 0

    def next_tool_call_id(self) -> str:
        self.tool_calls += 1
        return f"call-{self.tool_calls}"

    def next_message_id(self, kind: str = "msg") -> str:
        self.messages += 1
        return f"{self.session_id}-{kind}-{self.messages}"


class _Turn:
    """Helpers bound to one prompt turn of one session."""

    def __init__(self, agent: FakeAgent, session: _Session) -> None:
        self.agent = agent
        self.session = session
        self.sid = session.session_id
        self._message_id: str | None = None
        self._thought_id: str | None = None

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
        except asyncio.TimeoutError:
            return
        raise _Cancelled

    async def ask(self, tool_call: ToolCallUpdate) -> str:
        """Request permission; return "allow", "reject" or "cancelled"."""
        response = await self.conn.request_permission(self.sid, tool_call, _permission_options())
        outcome = response.outcome
        if self.cancelled:
            return "cancelled"
        if isinstance(outcome, AllowedOutcome):
            return "allow" if outcome.option_id in _ALLOW_IDS else "reject"
        return "cancelled"


class FakeAgent:
    """The scripted agent. One instance serves one connection."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.client_capabilities: ClientCapabilities | None = None
        self.sessions: dict[str, _Session] = {}
        self._session_counter = 0

    # -- connection -------------------------------------------------------
    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    @property
    def can_read(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.fs and caps.fs.read_text_file)

    @property
    def can_write(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.fs and caps.fs.write_text_file)

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.client_capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(load_session=False),
            auth_methods=[],
            agent_info=Implementation(name=AGENT_NAME, version=AGENT_VERSION),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._session_counter += 1
        session_id = f"fake-session-{self._session_counter}"
        self.sessions[session_id] = _Session(session_id=session_id, cwd=cwd)
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel_event.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        session.cancel_event = asyncio.Event()  # a fresh turn forgets an old cancel
        text = "\n".join(getattr(block, "text", "") for block in prompt if getattr(block, "type", None) == "text")
        turn = _Turn(self, session)
        try:
            stop = await self._dispatch(turn, text)
        except _Cancelled:
            stop = "cancelled"
        return PromptResponse(stop_reason=stop)

    # -- scenarios --------------------------------------------------------
    async def _dispatch(self, turn: _Turn, text: str) -> str:
        low = text.lower()
        if "crash" in low:
            return await self._crash(turn)
        if "flood" in low:
            return await self._flood(turn)
        if "slow" in low:
            return await self._slow(turn)
        m = _CHUNKS_RE.search(text)
        if m:
            return await self._chunks(turn, int(m.group(1)))
        if "think" in low:
            return await self._think(turn)
        if "plan" in low:
            return await self._plan(turn)
        m = _RUN_RE.search(text)
        if m and m.group(1).strip():
            return await self._run(turn, m.group(1).strip())
        if "edit" in low or "write" in low:
            return await self._edit(turn, find_file_name(text))
        return await self._hello(turn, text)

    async def _crash(self, turn: _Turn) -> str:
        await turn.say("Working on it…", pieces=2)
        sys.stderr.write(
            "fake agent: about to crash\n"
            "fake agent: Traceback (most recent call last):\n"
            'fake agent:   File "fake_agent.py", line 1, in <scripted>\n'
            "fake agent: RuntimeError: simulated crash (exit code 3)\n"
        )
        sys.stderr.flush()
        os._exit(3)

    async def _flood(self, turn: _Turn) -> str:
        lines: list[str] = []
        total = 0
        i = 0
        while total < FLOOD_BYTES:
            line = f"fake agent: flood line {i:06d} ".ljust(79, ".") + "\n"
            line = line[: FLOOD_BYTES - total]
            lines.append(line)
            total += len(line)
            i += 1
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
        await turn.say("Flooded stderr with 2 MiB.")
        return "end_turn"

    async def _slow(self, turn: _Turn) -> str:
        for n in range(1, SLOW_TICKS + 1):
            await turn.say(f"tick {n} ")
            if n < SLOW_TICKS:
                await turn.sleep(SLOW_DELAY)
        return "end_turn"

    async def _chunks(self, turn: _Turn, count: int) -> str:
        for i in range(count):
            await turn.say(_chunk_text(i))
        return "end_turn"

    async def _think(self, turn: _Turn) -> str:
        await turn.think("Let me think about this step by step.", pieces=2)
        await turn.say("I thought it over. The answer is **42**.", pieces=3)
        return "end_turn"

    async def _plan(self, turn: _Turn) -> str:
        steps = [
            ("Read the notebook", "high"),
            ("Write the code", "medium"),
            ("Run the tests", "low"),
        ]

        def plan(*statuses: str) -> Any:
            entries: list[PlanEntry] = [
                plan_entry(content, priority=prio, status=status)  # type: ignore[arg-type]
                for (content, prio), status in zip(steps, statuses, strict=True)
            ]
            return update_plan(entries)

        turn.check()
        await turn.send(plan("pending", "pending", "pending"))
        await turn.say("Here is my plan.\n\n")
        turn.check()
        await turn.send(plan("in_progress", "pending", "pending"))
        await turn.say("Working through it…\n\n")
        turn.check()
        await turn.send(plan("completed", "completed", "completed"))
        await turn.say("Done: all 3 steps are completed.")
        return "end_turn"

    async def _run(self, turn: _Turn, cmd: str) -> str:
        call_id = turn.session.next_tool_call_id()
        title = f"Run {cmd}"
        raw_input = {"command": cmd}
        turn.check()
        await turn.send(start_tool_call(call_id, title, kind="execute", status="pending", raw_input=raw_input))
        decision = await turn.ask(ToolCallUpdate(tool_call_id=call_id, title=title, kind="execute", raw_input=raw_input))
        if decision == "allow":
            await turn.send(update_tool_call(call_id, status="in_progress"))
            # Simulated: the command is never executed.
            output = f"(simulated) $ {cmd}\nok"
            await turn.send(update_tool_call(call_id, status="completed", content=[tool_content(text_block(output))]))
            await turn.say(f"Ran `{cmd}`.")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="failed"))
        if decision == "cancelled":
            return "cancelled"
        await turn.say(f"I did not run `{cmd}`.")
        return "end_turn"

    async def _edit(self, turn: _Turn, name: str) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, os.path.expanduser(name)))
        try:
            old = await self._read(turn.sid, path)
        except (RequestError, OSError, UnicodeDecodeError) as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new = (old or "") + EDIT_MARKER
        call_id = turn.session.next_tool_call_id()
        title = f"Edit {name}"
        diff = [tool_diff_content(path, new, old)]
        locations = [ToolCallLocation(path=path)]
        raw_input = {"path": path, "content": new}
        turn.check()
        await turn.send(
            start_tool_call(
                call_id,
                title,
                kind="edit",
                status="pending",
                content=diff,
                locations=locations,
                raw_input=raw_input,
            )
        )
        decision = await turn.ask(
            ToolCallUpdate(
                tool_call_id=call_id,
                title=title,
                kind="edit",
                content=diff,
                locations=locations,
                raw_input=raw_input,
            )
        )
        if decision == "allow":
            try:
                await self._write(turn.sid, path, new)
            except (RequestError, OSError) as exc:
                await turn.send(update_tool_call(call_id, status="failed"))
                await turn.say(f"I could not write {name}: {exc}")
                return "end_turn"
            await turn.send(update_tool_call(call_id, status="completed", content=diff))
            await turn.say(f"Edited {name}.")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="failed"))
        if decision == "cancelled":
            return "cancelled"
        await turn.say(f"I left {name} alone.")
        return "end_turn"

    async def _read(self, session_id: str, path: str) -> str | None:
        if self.can_read:
            try:
                response = await self.conn.read_text_file(session_id, path)
            except RequestError as exc:
                if _is_not_found(exc):
                    return None
                raise
            return response.content
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    async def _write(self, session_id: str, path: str, content: str) -> None:
        if self.can_write:
            await self.conn.write_text_file(session_id, path, content)
            return
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)

    async def _hello(self, turn: _Turn, text: str) -> str:
        reply = (
            "Hello! I am the **fake** agent.\n\nYou said: "
            + text
            + "\n\nTry `edit notes.txt`, `run npm test`, `plan`, `think`, `slow`, `crash`."
        )
        await turn.say(reply, pieces=8)
        return "end_turn"


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``escouade-fake-agent``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args or "-V" in args:
        print(f"{AGENT_NAME} {AGENT_VERSION}")
        return 0
    if "--help" in args or "-h" in args:
        print(f"usage: {AGENT_NAME} [--version]\n\nA scripted ACP agent on stdio (for demos and tests).")
        return 0
    try:
        asyncio.run(acp.run_agent(FakeAgent()))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
