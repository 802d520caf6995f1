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
``go silent``       one chunk, then no update at all until cancelled (a hang: the client sees it stall)
``go quiet N s``    one chunk, N seconds of silence, then a last chunk (a stall that clears)
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
``run long code C`` MCP: ``run_code`` of C with ``wait`` 2 s (a run still going: its task id);
                    ``task status ID`` / ``wait for task ID`` (60 s) / ``cancel task ID``:
                    ``task_status`` / ``task_cancel`` of that task
``call S T {json}`` MCP: tool T of server S with those arguments (default ``{}``)
``live cells``      MCP: ``notebook_cells(source="live")`` on ``escouade`` (a line of its own)
``insert cell …``   MCP: ``insert_cell`` of the rest of the prompt (``insert markdown cell``,
                    ``insert cell after ID``); ``edit cell ID SRC`` / ``delete cell ID``: the
                    live cells read, then ``edit_cell``/``delete_cell`` naming the hash read;
                    ``execute cell ID``: ``execute_cell`` (see :mod:`.fake_live`). Checked first
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

from .fake_words import AGENT_NAME, AGENT_VERSION  # light: no ACP

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
from typing import Any  # noqa: E402

import acp  # noqa: E402
from acp import (  # noqa: E402
    RequestError,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    update_plan,
    update_tool_call,
)
from acp.schema import (  # noqa: E402
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PlanEntry,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionListCapabilities,
    ToolCallUpdate,
)

from .fake_files import FilesAndTerminals  # noqa: E402
from .fake_mcp import McpTools  # noqa: E402
from .fake_modes import ModesAndQuestions  # noqa: E402
from .fake_session import PERMISSION_OPTIONS, _Cancelled, _is_context, _Session, _Turn  # noqa: E402
from .fake_words import (  # noqa: E402
    _CHUNKS_RE,
    _QUIET_RE,
    _RUN_RE,
    _STREAM_CODE_RE,
    _STREAM_RE,
    CHUNK_WIDTH,
    CODE_CHUNK,
    FLOOD_BYTES,
    SILENT_WORDS,
    SLOW_DELAY,
    SLOW_TICKS,
    _chunk_text,
    _prose,
    _python_code,
    find_file_name,
)

__all__ = [
    "AGENT_NAME",
    "AGENT_VERSION",
    "PERMISSION_OPTIONS",
    "FakeAgent",
    "main",
]


class FakeAgent(McpTools, ModesAndQuestions, FilesAndTerminals):
    """The scripted agent. One instance serves one connection: the SDK's
    ``acp.interfaces.Agent`` (one method per ACP request), the scenarios' dispatch, and
    the scenarios of the conversation itself (streams, chunks, thoughts, plans, a
    simulated command, a crash, a flood); its other parts play the rest — files and
    terminals (:mod:`.fake_files`), modes and questions (:mod:`.fake_modes`), MCP servers
    (:mod:`.fake_mcp`), over the sessions and turns of :mod:`.fake_session`."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.client_capabilities: ClientCapabilities | None = None
        self.sessions: dict[str, _Session] = {}
        self._session_counter = 0

    # -- connection -------------------------------------------------------
    def on_connect(self, conn: Any) -> None:
        self.conn = conn

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
        session.updated_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        turn = _Turn(self, session)
        try:
            stop = await self._dispatch(turn, text)
        except _Cancelled:
            stop = "cancelled"
        session.turns += 1  # a deterministic token count, so clients can show usage
        from acp.schema import Cost, Usage, UsageUpdate
        await turn.send(UsageUpdate(session_update="usage_update", used=1200 * session.turns, size=200_000,
                                    cost=Cost(amount=round(0.004 * session.turns, 3), currency="USD")))
        # the turn's own tokens (what budgets count): 1,200 a turn
        return PromptResponse(stop_reason=stop, usage=Usage(total_tokens=1200, input_tokens=1000, output_tokens=200))

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
        if "go silent" in low:
            return await self._silent(turn, None)
        m = _QUIET_RE.search(text)
        if m:
            return await self._silent(turn, float(m.group(1)))
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

    async def _silent(self, turn: _Turn, seconds: float | None) -> str:
        """A chunk, then nothing at all: until the turn is cancelled (``seconds`` None: a
        hang, Stop ends it), or for ``seconds``, then a last chunk (it resumes)."""
        await turn.say(SILENT_WORDS)
        await turn.sleep(seconds if seconds is not None else 24 * 3600)
        await turn.say(" …and I am back.")
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
        decision = await turn.ask(ToolCallUpdate(tool_call_id=call_id, title=title, kind="execute",
                                                 raw_input=raw_input))
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
    answered = _answer_flags(args)
    if answered is not None:
        return answered
    agent = FakeAgent()

    async def serve() -> None:
        try:
            # session/close is routed as unstable; the SDK answers "method not found" for the methods
            # of its Agent protocol the fake does not define (authenticate, fork, resume…)
            await acp.run_agent(agent, use_unstable_protocol=True)  # type: ignore[arg-type]
        finally:
            await agent.close_mcp()  # the stdio MCP servers it spawned end with it

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
