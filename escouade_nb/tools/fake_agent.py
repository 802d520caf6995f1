"""``escouade-fake-agent``: the shipped, scripted ACP agent called "fake".

A real ACP agent program (agent side of the ``acp`` SDK, JSON-RPC over stdio)
whose behaviour is fully deterministic, so the demo notebook and the tests can
exercise every part of a client: streamed text, thoughts, plans, tool calls,
permission requests, file edits through the client's ``fs/*`` methods,
cancellation, a flood of stderr and a crash. It offers ``session/list`` (its first
prompt as the title, the time of its last one as ``updatedAt``) and ``session/close``
over the sessions of its process; never ``loadSession`` (it keeps nothing on disk).

The prompt's text picks a scenario (case-insensitive, first match wins): the user's own
words only, never a block the client marked as context (``_meta.escouade.context``: a
fork's conversation so far, a preamble), nor an embedded resource.

==================  ======================================================
``stream N of W at R/s``  N chunks of W characters of prose (words, a blank line every ~400
                    characters), R chunks a second (a model's pace); honours cancel. Checked first
``stream code N at R/s``  one fenced ``python`` block of about N bytes (plain Python lines) in
                    ~20-byte chunks, R a second; honours cancel. Checked first
``crash``           two chunks, a few stderr lines, then ``os._exit(3)``
``flood``           2 MiB of stderr, then a short reply
``slow``            50 ``tick N`` chunks, 0.1 s apart; honours cancel
``chunks N [of W]`` exactly N chunks of W (default 40) characters, no sleeps
``think``           a thought (2 chunks), then a reply
``present plan``    a plan to approve (``ExitPlanMode``): Approve / Keep planning
``plan``            a plan of 3 entries, updated twice
``ask me``          an ``elicitation/create`` form; reports the answer
``open link``       a URL-mode elicitation (a sign-in link); reports the answer
``question block``  ends its reply on an ``<escouade_question>`` block (questionsInText)
``switch mode``     a ``current_mode_update`` from the agent itself
``which mode``      reports its mode, sandbox option and model
``variables``       MCP: ``list_variables`` of the ``escouade`` server (a line of its own)
``inspect VAR``     MCP: ``inspect_variable`` of VAR on the ``escouade`` server (line start)
``run code CODE``   MCP: ``run_code`` of CODE (the rest of the prompt) on ``escouade``
``call S T {json}`` MCP: tool T of server S with those arguments (default ``{}``)
``run CMD``         an ``execute`` tool call behind a permission (simulated)
``edit`` / write    an ``edit`` tool call with a diff behind a permission
``terminal args``   ``terminal/create`` echo + args, embedded in a tool call; reports the output
``terminal line``   a whole shell line in ``command`` (``echo hello && echo world``), no args
``terminal limit``  ``printf`` of 50 lines with ``outputByteLimit`` 17 (truncated output)
``terminal kill``   ``sleep 30``, killed by the agent; reports the signal
``terminal release`` a running command released; reports the client's error for it after
``terminal fail``   a shell line writing to stderr and exiting 3
``write outside P`` ``fs/write_text_file`` of path P as given; reports a refusal's text
``write notebook P`` edits notebook P (first code cell's source changed, outputs cleared, a
                    markdown cell added; a new 2-cell notebook when P is missing), behind a permission
``write bad notebook P`` writes P as a notebook whose code cell lacks ``outputs``; reports the refusal
``crlf FILE``       reads FILE, writes it back edited with LF endings, reads it again
``latin1 FILE``     reads FILE (also ``non-utf8``); reports the client's error (and tries to overwrite)
anything else       a markdown greeting that echoes the prompt
==================  ======================================================

Only ACP goes to stdout (the SDK writes it); diagnostics go to stderr. With
``ESCOUADE_FAKE_MCP_IN_ARGV`` set it copies the ``mcpServers`` of each session onto a child
process's command line (``--mcp-config <json>``), as claude-agent 0.23.1's SDK does: a
stand-in for the tests of a manifest's ``mcpInArgv``.

``--version`` and ``--help`` are answered before anything else is imported (the ACP SDK
alone takes about a second to import here): a client reads ``--version`` of every
harness it lists.
"""

from __future__ import annotations

import os
import sys

AGENT_NAME = "escouade-fake-agent"
AGENT_VERSION = "0.1.0"
USAGE = f"usage: {AGENT_NAME} [--version]\n\nA scripted ACP agent on stdio (for demos and tests)."


def _answer_flags(args: list[str]) -> int | None:
    """Answer ``--version``/``-V`` and ``--help``/``-h`` (the exit code), else ``None``."""
    if "--version" in args or "-V" in args:
        print(f"{AGENT_NAME} {AGENT_VERSION}")
        return 0
    if "--help" in args or "-h" in args:
        print(USAGE)
        return 0
    return None


def _is_the_program() -> bool:
    """Whether this module runs as the program (``python -m`` or the console script,
    which imports it before calling :func:`main`), not imported by other code."""
    if __name__ == "__main__":
        return True
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name in (AGENT_NAME, f"{AGENT_NAME}.exe", f"{AGENT_NAME}-script.py", f"{AGENT_NAME}-script.pyw")


if _is_the_program() and (_code := _answer_flags(sys.argv[1:])) is not None:
    sys.stdout.flush()
    raise SystemExit(_code)  # before the imports below: a --version costs an interpreter start, no more

import asyncio  # noqa: E402  (the flags above are answered first, on purpose)
import datetime  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import acp  # noqa: E402
from acp import (  # noqa: E402
    RequestError,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_plan,
    update_tool_call,
)
from acp.schema import (  # noqa: E402
    AgentCapabilities,
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PlanEntry,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionListCapabilities,
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

_CHUNKS_RE = re.compile(r"chunks\s+(\d+)(?:\s+of\s+(\d+))?", re.IGNORECASE)
_RATE = r"\s+at\s+(\d+(?:\.\d+)?)\s*/\s*s\b"
_STREAM_RE = re.compile(r"\bstream\s+(\d+)\s+of\s+(\d+)" + _RATE, re.IGNORECASE)
_STREAM_CODE_RE = re.compile(r"\bstream\s+code\s+(\d+)" + _RATE, re.IGNORECASE)
CODE_CHUNK = 20
# words for the ``stream`` scenarios' prose and code, most frequent first (drawn Zipf-like from a
# seeded generator, so the text compresses about as well as English or Python does, ~3x with zlib)
_WORDS = tuple("""the of and to a in is that for it as with was on be by this are from or at an not have which
but we can all one has their more when will there been if would its so what about into other only out new some
time these two may then do first any like now such our over also after most where through way between many
well being because those while should each just very under both last same since during without another might
agent notebook cell kernel data frame column row value plot trend result model test file function change run
summary table index series chart error output input reader writer token window buffer session prompt reply
branch commit review patch build cache query schema record field report metric sample batch epoch weight layer
shape array vector matrix graph node edge path folder module package version config option flag mode card
reads writes shows loads keeps drops finds checks counts sorts joins splits merges groups filters maps plots
fast slow large small early late clear short long new old simple careful empty full open closed stable""".split())
_CODE_VERBS = ("load", "parse", "scale", "merge", "split", "count", "filter", "render", "check", "build", "read",
               "write", "group", "sort", "clean", "score", "fetch", "store", "update", "compare")
_CODE_NOUNS = ("rows", "frame", "values", "records", "batch", "table", "cells", "tokens", "paths", "items",
               "scores", "labels", "columns", "samples", "weights", "options", "results", "entries")
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


def _chunk_text(i: int, width: int = CHUNK_WIDTH) -> str:
    """The i-th chunk of the ``chunks N [of W]`` scenario: exactly ``width`` (≥ 8)
    characters, default 40, ending in a newline."""
    head = f"{i:05d} "
    return (head + "x" * width)[: width - 1] + "\n"


def _prose(size: int) -> str:
    """``size`` characters of prose: words and spaces, sentences of 6–18 words, a blank line
    every ~400 characters (so a markdown view sees paragraphs). Deterministic."""
    import random

    rng = random.Random(size)
    weights = [1 / (rank + 1) for rank in range(len(_WORDS))]
    out: list[str] = []
    total = para = 0
    while total < size:
        words = rng.choices(_WORDS, weights, k=rng.randint(6, 18))
        if len(words) > 9 and rng.random() < 0.4:
            words[rng.randint(3, len(words) - 3)] += ","
        sentence = " ".join(words).capitalize() + "."
        para += len(sentence) + 1
        if para >= 400:
            sentence += "\n\n"
            para = 0
        else:
            sentence += " "
        out.append(sentence)
        total += len(sentence)
    return "".join(out)[:size]


def _python_code(size: int) -> str:
    """About ``size`` bytes (ASCII) of plain Python that compiles: small functions of varied
    names, arguments and bodies, then comment lines up to the size, in a fenced ``python``
    block (the fence counts). Deterministic."""
    import random

    rng = random.Random(size)
    head, tail = "```python\n", "```\n"
    room = size - len(head) - len(tail)
    parts: list[str] = []
    while True:
        verb, (noun, other) = rng.choice(_CODE_VERBS), rng.sample(_CODE_NOUNS, 2)
        name, limit, scale = f"{verb}_{noun}", rng.randint(2, 500), round(rng.uniform(0.1, 9.9), 2)
        shape = rng.randrange(3)
        if shape == 0:
            body = (f"    result = []\n"
                    f"    for index, item in enumerate({noun}):\n"
                    f"        if item is not None and index < {limit}:\n"
                    f"            result.append(item * {scale})\n"
                    f"    return result\n")
        elif shape == 1:
            body = (f"    seen = {{}}\n"
                    f"    for key, {other[:-1]} in {noun}.items():\n"
                    f"        seen.setdefault(key, []).append({other[:-1]})\n"
                    f"    return {{k: len(v) for k, v in seen.items() if len(v) > {limit % 7}}}\n")
        else:
            body = (f"    total = sum(x for x in {noun} if x > {scale})\n"
                    f"    if total > {limit}:\n"
                    f"        raise ValueError(f\"{verb} {noun}: {{total}} > {limit}\")\n"
                    f"    return total / max(1, len({noun}))\n")
        doc = " ".join(rng.choices(_WORDS, k=rng.randint(5, 14))).capitalize()
        note = " ".join(rng.choices(_WORDS, k=rng.randint(4, 10)))
        block = (f"def {name}({noun}, {other}=None):\n"
                 f"    \"\"\"{doc}.\"\"\"\n"
                 f"    # {note}\n"
                 f"{body}\n\n")
        if len(block) > room:
            break
        parts.append(block)
        room -= len(block)
    while room >= 3:
        line = ("# " + " ".join(rng.choices(_WORDS, k=12)))[: min(room, 64) - 1].rstrip() + "\n"
        parts.append(line)
        room -= len(line)
    return head + "".join(parts) + tail


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


class _Turn:
    """Helpers bound to one prompt turn of one session."""

    def __init__(self, agent: FakeAgent, session: _Session) -> None:
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
        except asyncio.TimeoutError:
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


class FakeAgent:
    """The scripted agent. One instance serves one connection.

    Why one class of ~580 lines: it is the SDK's ``acp.interfaces.Agent`` (one method per
    ACP request) plus one short method per scenario of the table above, each a few lines
    of wire; splitting the scenarios into modules would spread one script over many
    files without making any piece simpler to read."""

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
            # our own extension: this agent reads a refusal message in the permission answer's _meta
            # session/list and session/close over the sessions of this process (no loadSession: it keeps
            # nothing on disk, so a listed session is opened in a new one)
            agent_capabilities=AgentCapabilities(load_session=False, field_meta={"escouade": {"refusalMessage": True}},
                                                 mcp_capabilities=McpCapabilities(http=True, sse=False),
                                                 session_capabilities=SessionCapabilities(
                                                     list=SessionListCapabilities(),
                                                     close=SessionCloseCapabilities())),
            auth_methods=[],
            agent_info=Implementation(name=AGENT_NAME, version=AGENT_VERSION),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._session_counter += 1
        session_id = f"fake-session-{self._session_counter}"
        session = self.sessions[session_id] = _Session(session_id=session_id, cwd=cwd)
        await self._connect_mcp(session, kwargs.get("mcp_servers"))

        async def advertise() -> None:  # the slash commands it offers, once the client has the session
            from acp.schema import AvailableCommand, AvailableCommandsUpdate
            await asyncio.sleep(0.05)
            await self.conn.session_update(session_id, AvailableCommandsUpdate(
                session_update="available_commands_update", available_commands=[
                    AvailableCommand(name="plan", description="Present a plan to approve"),
                    AvailableCommand(name="test", description="Run the tests")]))
        self.advertising = asyncio.ensure_future(advertise())  # held: the task is not collected
        return NewSessionResponse(session_id=session_id, modes=self._modes_state(session),
                                  config_options=self._config_options(session))

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> Any:
        """Not advertised (``loadSession`` false): a client that sends it anyway gets the
        session (an empty one when unknown) with the MCP servers given now."""
        from acp.schema import LoadSessionResponse

        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(session_id=session_id, cwd=cwd)
        await self._connect_mcp(session, kwargs.get("mcp_servers"))
        return LoadSessionResponse(modes=self._modes_state(session), config_options=self._config_options(session))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any) -> Any:
        """``session/list``: this process's sessions (of ``cwd`` when given), newest first,
        one page (no cursor)."""
        from acp.schema import ListSessionsResponse, SessionInfo

        found = [s for s in self.sessions.values() if cwd is None or s.cwd == cwd]
        found.sort(key=lambda s: s.updated_at or "", reverse=True)
        return ListSessionsResponse(sessions=[SessionInfo(session_id=s.session_id, cwd=s.cwd, title=s.title,
                                                          updated_at=s.updated_at) for s in found])

    async def close_session(self, session_id: str, **kwargs: Any) -> Any:
        """``session/close``: its turn cancelled, the session forgotten (unknown: fine)."""
        from acp.schema import CloseSessionResponse

        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.cancel_event.set()
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel_event.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        session.cancel_event = asyncio.Event()  # a fresh turn forgets an old cancel
        text = "\n".join(block.text for block in prompt if getattr(block, "type", None) == "text"
                          and not _is_context(block))  # the user's own words: not a fork's carried conversation
        if session.title is None and text.strip():
            first = text.strip().splitlines()[-1]  # after any preamble the client put first
            session.title = first if len(first) <= 60 else first[:59] + "…"
        session.updated_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        turn = _Turn(self, session)
        try:
            stop = await self._dispatch(turn, text)
        except _Cancelled:
            stop = "cancelled"
        session.turns += 1  # a deterministic token count, so clients can show usage
        from acp.schema import Cost, UsageUpdate
        await turn.send(UsageUpdate(session_update="usage_update", used=1200 * session.turns, size=200_000,
                                    cost=Cost(amount=round(0.004 * session.turns, 3), currency="USD")))
        return PromptResponse(stop_reason=stop)

    # -- scenarios --------------------------------------------------------
    async def _dispatch(self, turn: _Turn, text: str) -> str:
        low = text.lower()
        m = _STREAM_CODE_RE.search(text)  # first: no other scenario may take these words
        if m:
            code = _python_code(int(m.group(1)))
            return await self._paced(turn, [code[i:i + CODE_CHUNK] for i in range(0, len(code), CODE_CHUNK)],
                                     float(m.group(2)))
        m = _STREAM_RE.search(text)
        if m:
            count, width = int(m.group(1)), max(1, int(m.group(2)))
            prose = _prose(count * width)
            return await self._paced(turn, [prose[i * width:(i + 1) * width] for i in range(count)],
                                     float(m.group(3)))
        special = await self._dispatch_mcp(turn, text)  # before ``run CMD``: ``run code`` is MCP
        if special is not None:
            return special
        special = await self._dispatch_modes(turn, low)
        if special is not None:
            return special
        special = await self._dispatch_files_terminals(turn, text)
        if special is not None:
            return special
        if "crash" in low:
            return await self._crash(turn)
        if "flood" in low:
            return await self._flood(turn)
        if "slow" in low:
            return await self._slow(turn)
        m = _CHUNKS_RE.search(text)
        if m:
            return await self._chunks(turn, int(m.group(1)), max(8, int(m.group(2) or CHUNK_WIDTH)))
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

    async def _paced(self, turn: _Turn, parts: list[str], rate: float) -> str:
        """Send ``parts`` as chunks of one message, ``rate`` a second (on a schedule, so the
        sends' own time does not slow the pace); a cancel ends it at the next chunk."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i, part in enumerate(parts):
            if i and rate > 0:
                wait = start + i / rate - loop.time()
                if wait > 0:
                    await turn.sleep(wait)
            await turn.say(part)  # checks the cancel
        return "end_turn"

    async def _chunks(self, turn: _Turn, count: int, width: int = CHUNK_WIDTH) -> str:
        for i in range(count):
            await turn.say(_chunk_text(i, width))
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
        await turn.say(f"I did not run `{cmd}`." + (f" I was told: {turn.refusal}" if turn.refusal else ""))
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

    # -- modes, config options, plans, questions ----------------------------------
    # Two independent axes, as in the plan-mode seed: the mode (ask / accept-edits /
    # yolo / plan / read-only) and the sandbox config option; switching one never
    # touches the other. The model is a config option of category "model".
    MODES = (("ask", "Ask", "Asks before every tool."), ("accept-edits", "Accept edits", "Edits without asking."),
             ("yolo", "YOLO", "Never asks."), ("plan", "Plan", "Plans first, presents the plan for approval."),
             ("read-only", "Read only", "Changes nothing."))

    def _modes_state(self, session: _Session) -> Any:
        from acp.schema import SessionMode, SessionModeState
        return SessionModeState(current_mode_id=session.mode, available_modes=[
            SessionMode(id=i, name=n, description=d) for i, n, d in self.MODES])

    def _config_options(self, session: _Session) -> list[Any]:
        from acp.schema import (SessionConfigOptionBoolean, SessionConfigOptionSelect, SessionConfigSelectGroup,
                                SessionConfigSelectOption)
        opts: list[Any] = [
            SessionConfigOptionSelect(id="sandbox", name="Sandbox", category="sandbox", type="select",
                                      current_value=session.config["sandbox"], options=[
                                          SessionConfigSelectOption(value=v, name=v)
                                          for v in ("read-only", "workspace-write", "full-access")]),
            SessionConfigOptionSelect(id="model", name="Model", category="model", type="select",
                                      current_value=session.config["model"], options=[
                                          SessionConfigSelectGroup(group="small", name="Small", options=[
                                              SessionConfigSelectOption(value="fake-small", name="Fake small")]),
                                          SessionConfigSelectGroup(group="large", name="Large", options=[
                                              SessionConfigSelectOption(value="fake-large", name="Fake large")])]),
        ]
        caps = self.client_capabilities
        if caps and caps.session and caps.session.config_options and caps.session.config_options.boolean is not None:
            opts.append(SessionConfigOptionBoolean(id="verbose", name="Verbose", type="boolean",
                                                   current_value=bool(session.config["verbose"])))
        return opts

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> Any:
        from acp.schema import CurrentModeUpdate, SetSessionModeResponse
        session = self._session(session_id)
        if mode_id not in {m[0] for m in self.MODES}:
            raise RequestError.invalid_params({"modeId": mode_id, "reason": "unknown mode"})
        session.mode = mode_id
        await self.conn.session_update(session_id, CurrentModeUpdate(session_update="current_mode_update",
                                                                     current_mode_id=mode_id))
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **kwargs: Any) -> Any:
        from acp.schema import SetSessionConfigOptionResponse
        session = self._session(session_id)
        allowed = {"sandbox": {"read-only", "workspace-write", "full-access"}, "model": {"fake-small", "fake-large"},
                   "verbose": {True, False}}
        if config_id not in allowed or value not in allowed[config_id]:
            raise RequestError.invalid_params({"configId": config_id, "value": value, "reason": "not allowed"})
        session.config[config_id] = value
        return SetSessionConfigOptionResponse(config_options=self._config_options(session))

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        return session

    async def _dispatch_modes(self, turn: _Turn, low: str) -> str | None:
        if "present plan" in low or "exit plan" in low:
            return await self._present_plan(turn)
        if "ask me" in low:
            return await self._elicit_form(turn)
        if "open link" in low:
            return await self._elicit_url(turn)
        if "question block" in low:
            return await self._question_block(turn)
        if "switch mode" in low:
            from acp.schema import CurrentModeUpdate
            turn.session.mode = "plan"
            await turn.send(CurrentModeUpdate(session_update="current_mode_update", current_mode_id="plan"))
            await turn.say("I switched myself to plan mode.")
            return "end_turn"
        if "which mode" in low:
            s = turn.session
            await turn.say(f"mode={s.mode} sandbox={s.config['sandbox']} model={s.config['model']}")
            return "end_turn"
        return None

    async def _present_plan(self, turn: _Turn) -> str:
        plan_md = "## Plan\n\n1. Read `notes.txt`\n2. Add a summary line\n3. Run the tests"
        call_id = turn.session.next_tool_call_id()
        await turn.send(start_tool_call(call_id, "exit_plan_mode", kind="switch_mode", status="pending",
                                        content=[tool_content(text_block(plan_md))],
                                        raw_input={"plan": plan_md}))
        options = [PermissionOption(option_id="approve", name="Approve", kind="allow_once"),
                   PermissionOption(option_id="keep-planning", name="Keep planning", kind="reject_once")]
        response = await self.conn.request_permission(
            turn.sid, ToolCallUpdate(tool_call_id=call_id, title="exit_plan_mode", kind="switch_mode",
                                     raw_input={"plan": plan_md}), options)
        outcome = response.outcome
        if turn.cancelled or not isinstance(outcome, AllowedOutcome):
            await turn.send(update_tool_call(call_id, status="failed"))
            return "cancelled"
        if outcome.option_id == "approve":
            from acp.schema import CurrentModeUpdate
            await turn.send(update_tool_call(call_id, status="completed"))
            if turn.session.mode == "plan":
                turn.session.mode = "ask"
                await turn.send(CurrentModeUpdate(session_update="current_mode_update", current_mode_id="ask"))
            await turn.say("Plan approved; starting with step 1.")
            return "end_turn"
        feedback = ((response.field_meta or {}).get("escouade") or {}).get("message")
        await turn.send(update_tool_call(call_id, status="failed"))
        await turn.say(f"Keeping on planning. Feedback received: {feedback}" if feedback
                       else "Keeping on planning (no feedback received).")
        return "end_turn"

    async def _elicit_form(self, turn: _Turn) -> str:
        from acp.schema import ElicitationFormSessionMode
        schema = {"type": "object", "title": "Database", "required": ["database"], "properties": {
            "database": {"type": "string", "title": "Database", "enum": ["postgres", "sqlite"]},
            "replicas": {"type": "integer", "title": "Replicas", "minimum": 0, "default": 1},
            "migrate": {"type": "boolean", "title": "Run migrations", "default": False},
            "note": {"type": "string", "title": "Note"}}}
        mode = ElicitationFormSessionMode(session_id=turn.sid, requested_schema=schema)
        answer = await self.conn.create_elicitation("Which database should I use?", mode)
        if answer.action == "accept":
            content = getattr(answer, "content", None) or {}
            await turn.say("You chose: " + ", ".join(f"{k}={content[k]}" for k in sorted(content)))
        elif answer.action == "decline":
            await turn.say("You declined to answer; I will pick sqlite.")
        else:
            return "cancelled"
        return "end_turn"

    async def _elicit_url(self, turn: _Turn) -> str:
        from acp.schema import ElicitationUrlSessionMode
        mode = ElicitationUrlSessionMode(session_id=turn.sid, elicitation_id="login-1",
                                         url="https://example.com/login")
        answer = await self.conn.create_elicitation("Please sign in, then come back.", mode)
        await turn.say(f"Sign-in answer: {answer.action}.")
        return "end_turn"

    async def _question_block(self, turn: _Turn) -> str:
        await turn.say('Before I go on, I need a decision.\n\n<escouade_question>{"questions": ['
                       '{"id": "db", "question": "Which database?", "options": ["postgres", "sqlite"]}, '
                       '{"id": "name", "question": "Name of the new table?"}]}</escouade_question>', pieces=4)
        return "end_turn"

    # -- terminals and the client's files (fences, line endings, encodings) ----------------
    # Keywords: "terminal args|line|limit|kill|release|fail", "write outside PATH",
    # "crlf FILE", "latin1 FILE" / "non-utf8 FILE". Checked after the modes' keywords.
    _TERMINAL_RE = re.compile(r"\bterminal\s+(args|line|limit|kill|release|fail)\b[ \t]*(.*)",
                              re.IGNORECASE | re.DOTALL)
    _OUTSIDE_RE = re.compile(r"\bwrite\s+outside\s+(\S+)", re.IGNORECASE)
    _NOTEBOOK_RE = re.compile(r"\bwrite\s+(bad\s+)?notebook\s+(\S+)", re.IGNORECASE)
    _ENCODING_RE = re.compile(r"\b(crlf|latin1|non-utf8)\b", re.IGNORECASE)
    OUTSIDE_TEXT = "Written outside by the fake agent.\n"

    @property
    def can_terminal(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.terminal)

    async def _dispatch_files_terminals(self, turn: _Turn, text: str) -> str | None:
        m = self._TERMINAL_RE.search(text)
        if m:
            return await self._terminal(turn, m.group(1).lower(), m.group(2).strip())
        m = self._NOTEBOOK_RE.search(text)
        if m:
            return await self._write_notebook(turn, m.group(2).strip(_TOKEN_STRIP), bad=bool(m.group(1)))
        m = self._OUTSIDE_RE.search(text)
        if m:
            return await self._write_outside(turn, m.group(1).strip(_TOKEN_STRIP))
        m = self._ENCODING_RE.search(text)
        if m:
            name = find_file_name(text)
            if m.group(1).lower() == "crlf":
                return await self._crlf(turn, name)
            return await self._non_utf8(turn, name)
        return None

    @staticmethod
    def _terminal_request(shape: str, rest: str) -> tuple[str, list[str] | None, int | None]:
        """(command, args, outputByteLimit) of each terminal scenario."""
        if shape == "args":
            return "echo", (rest.split() or ["hello", "from", "args"]), None
        if shape == "line":
            return (rest or "echo hello && echo world"), None, None
        if shape == "limit":  # 50 lines "Né\n"; 17 bytes cut inside an "é"
            return "printf", ["%sé\\n", *(str(i) for i in range(1, 51))], 17
        if shape == "kill":
            return "sleep", ["30"], None
        if shape == "release":
            return "echo started; sleep 30", None, None
        return "echo oops >&2; exit 3", None, None  # fail

    async def _terminal(self, turn: _Turn, shape: str, rest: str) -> str:
        import shlex

        from acp.schema import TerminalToolCallContent

        if not self.can_terminal:
            await turn.say("The client offers no terminal, so I cannot run commands.")
            return "end_turn"
        command, args, limit = self._terminal_request(shape, rest)
        shown = shlex.join([command, *args]) if args else command
        try:
            created = await self.conn.create_terminal(session_id=turn.sid, command=command, args=args,
                                                      cwd=turn.session.cwd, output_byte_limit=limit)
        except RequestError as exc:
            await turn.say(f"The client would not run `{shown}`: {exc}")
            return "end_turn"
        tid = created.terminal_id
        call_id = turn.session.next_tool_call_id()
        content = [TerminalToolCallContent(type="terminal", terminal_id=tid)]
        await turn.send(start_tool_call(call_id, f"Run {shown}", kind="execute", status="in_progress",
                                        content=content, raw_input={"command": command, "args": args or []}))
        if shape == "release":
            for _ in range(250):  # until it has started (at most 5 s)
                if "started" in (await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)).output:
                    break
                await asyncio.sleep(0.02)
            await self.conn.release_terminal(session_id=turn.sid, terminal_id=tid)
            try:
                await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)
                after = "it still answered"
            except RequestError as exc:
                after = f"the client says: {exc}"
            await turn.send(update_tool_call(call_id, status="completed", content=content))
            await turn.say(f"Released `{shown}` while it was running ({tid}). Asking for its output after "
                           f"the release, {after}")
            return "end_turn"
        if shape == "kill":
            await asyncio.sleep(0.2)
            await self.conn.kill_terminal(session_id=turn.sid, terminal_id=tid)
        status = await self.conn.wait_for_terminal_exit(session_id=turn.sid, terminal_id=tid)
        out = await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=turn.sid, terminal_id=tid)
        ok = status.exit_code == 0
        await turn.send(update_tool_call(call_id, status="completed" if ok else "failed", content=content,
                                         raw_output={"exitCode": status.exit_code, "signal": status.signal,
                                                     "truncated": out.truncated}))
        how = (f"was killed by {status.signal}" if status.signal else f"exited with code {status.exit_code}")
        note = " (truncated: the newest bytes only)" if out.truncated else ""
        await turn.say(f"`{shown}` {how}. Output{note}:\n```\n{out.output}```")
        return "end_turn"

    async def _write_outside(self, turn: _Turn, path: str) -> str:
        call_id = turn.session.next_tool_call_id()
        title = f"Write {path}"
        await turn.send(start_tool_call(call_id, title, kind="edit", status="pending",
                                        content=[tool_diff_content(path, self.OUTSIDE_TEXT, None)],
                                        raw_input={"path": path, "content": self.OUTSIDE_TEXT}))
        if not self.can_write:
            await turn.send(update_tool_call(call_id, status="failed"))
            await turn.say("The client does not offer fs/write_text_file.")
            return "end_turn"
        try:  # the path exactly as given: a relative one is the client's to resolve
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=self.OUTSIDE_TEXT)
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed",
                                             content=[tool_content(text_block(str(exc)))]))
            await turn.say(f"The client refused to write {path}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed"))
        await turn.say(f"Wrote {path}.")
        return "end_turn"

    NOTEBOOK_EDIT = "\n# edited by the fake agent"

    @classmethod
    def _notebook_text(cls, old: str | None, bad: bool) -> tuple[str, str]:
        """(new notebook text as nbformat writes it, what was done). A bad one: a code
        cell without ``outputs`` (valid JSON, not a valid notebook)."""
        import json

        def code(cell_id: str, source: str) -> dict[str, Any]:
            return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {}, "outputs": [],
                    "source": source}

        def md(cell_id: str, source: str) -> dict[str, Any]:
            return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}

        nb: Any = None
        if old is not None and not bad:
            try:
                nb = json.loads(old)
            except ValueError:
                nb = None
        if bad:
            cell = code("fake-bad", "print('no outputs field')")
            del cell["outputs"]
            nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
            done = "a code cell without outputs"
        elif isinstance(nb, dict) and isinstance(nb.get("cells"), list):
            cells = nb["cells"]
            first = next((c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"), None)
            done = []
            if first is not None:
                src = first.get("source", "")
                first["source"] = ("".join(src) if isinstance(src, list) else src) + cls.NOTEBOOK_EDIT
                first["outputs"], first["execution_count"] = [], None
                done.append(f"changed cell {first.get('id', '?')} and cleared its outputs")
            ids = {c.get("id") for c in cells if isinstance(c, dict)}
            new_id = next(f"fake-added-{n}" for n in range(1, len(ids) + 2) if f"fake-added-{n}" not in ids)
            cells.append(md(new_id, "Added by the fake agent."))
            done.append(f"added cell {new_id}")
            done = ", ".join(done)
        else:
            nb = {"cells": [md("fake-title", "# A notebook of the fake agent"), code("fake-code", "print(6 * 7)")],
                  "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                  "nbformat": 4, "nbformat_minor": 5}
            done = "a new notebook of 2 cells"
        return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", done

    async def _write_notebook(self, turn: _Turn, name: str, bad: bool) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, os.path.expanduser(name)))
        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            old = await self._read(turn.sid, path)
        except RequestError as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new, done = self._notebook_text(old, bad)
        call_id = turn.session.next_tool_call_id()
        title = f"Edit {name}"
        diff = [tool_diff_content(path, new, old)]
        locations = [ToolCallLocation(path=path)]
        raw_input = {"path": path, "content": new}
        await turn.send(start_tool_call(call_id, title, kind="edit", status="pending", content=diff,
                                        locations=locations, raw_input=raw_input))
        if not bad:
            decision = await turn.ask(ToolCallUpdate(tool_call_id=call_id, title=title, kind="edit", content=diff,
                                                     locations=locations, raw_input=raw_input))
            if decision != "allow":
                await turn.send(update_tool_call(call_id, status="failed"))
                if decision == "cancelled":
                    return "cancelled"
                await turn.say(f"I left {name} alone.")
                return "end_turn"
        try:
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=new)
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed", content=[tool_content(text_block(str(exc)))]))
            await turn.say(f"The client refused to write {name}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed", content=diff))
        await turn.say(f"Wrote notebook {name}: {done}.")
        return "end_turn"

    async def _crlf(self, turn: _Turn, name: str) -> str:
        """Read a file, write it back with a line added and LF endings (as many agents
        do), read it again: the reply tells which line endings each read saw."""
        path = os.path.normpath(os.path.join(turn.session.cwd, name))

        def endings(text: str) -> str:
            lines = text.count("\n")
            crlf = text.count("\r\n")
            kind = "CRLF" if lines and crlf == lines else "LF" if not crlf else "mixed"
            return f"{lines} lines, {kind}"

        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            old = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new = old.replace("\r\n", "\n") + EDIT_MARKER
        call_id = turn.session.next_tool_call_id()
        diff = [tool_diff_content(path, new, old)]
        await turn.send(start_tool_call(call_id, f"Edit {name}", kind="edit", status="in_progress", content=diff,
                                        locations=[ToolCallLocation(path=path)],
                                        raw_input={"path": path, "content": new}))
        try:
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=new)
            again = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed"))
            await turn.say(f"I could not write {name}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed", content=diff))
        await turn.say(f"Read {name}: {endings(old)}. Wrote it back with a line added, sent with LF endings. "
                       f"Read it again: {endings(again)}.")
        return "end_turn"

    async def _non_utf8(self, turn: _Turn, name: str) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, name))
        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            content = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            reply = f"The client could not read {name}: {exc}."
            try:
                await self.conn.write_text_file(session_id=turn.sid, path=path, content="replaced\n")
                reply += " It let me overwrite it."
            except RequestError as exc2:
                reply += f" Overwriting it was refused too: {exc2}."
            await turn.say(reply)
            return "end_turn"
        await turn.say(f"Read {name} ({len(content)} characters): it is valid UTF-8.")
        return "end_turn"

    # -- MCP: the servers given in session/new|load, and their tools ----------------------
    # Keywords, each at the start of a line: "variables", "inspect VAR", "run code CODE",
    # "call SERVER TOOL {json}". Checked before every other scenario ("run code" before "run").
    _MCP_VARIABLES_RE = re.compile(r"^[ \t]*(?:list[ \t]+)?variables[ \t]*[.!?]?[ \t]*$", re.IGNORECASE | re.MULTILINE)
    _MCP_INSPECT_RE = re.compile(r"^[ \t]*inspect[ \t]+`?([A-Za-z_][\w]*)`?", re.IGNORECASE | re.MULTILINE)
    _MCP_RUN_CODE_RE = re.compile(r"^[ \t]*run[ \t]+code[ \t]*\n?(.+)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
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
        config = {"mcpServers": {}}
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
            except asyncio.TimeoutError:
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
        await turn.say(f"{title} {'failed' if failed else 'returned'}: {text}")
        return "end_turn"

    async def _hello(self, turn: _Turn, text: str) -> str:
        reply = (
            "Hello! I am the **fake** agent.\n\nYou said: "
            + text
            + "\n\nTry `edit notes.txt`, `run npm test`, `plan`, `think`, `slow`, `crash`."
        )
        await turn.say(reply, pieces=8)
        return "end_turn"


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
        self._pending: dict[int, asyncio.Future] = {}
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
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``escouade-fake-agent``."""
    args = list(sys.argv[1:] if argv is None else argv)
    answered = _answer_flags(args)
    if answered is not None:
        return answered
    agent = FakeAgent()

    async def serve() -> None:
        try:
            await acp.run_agent(agent, use_unstable_protocol=True)  # session/close is routed as unstable
        finally:
            await agent.close_mcp()  # the stdio MCP servers it spawned end with it

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
