"""One running agent: a harness's process, its ACP session, its conversation, its cards.

The engine works without Jupyter: in a plain ``asyncio.run`` script,
``agent = Agent(ref, program=...); agent.start(); await agent.ready()`` then
``await agent.send("hi")``. In a kernel the magics do the same on the kernel's loop;
views subscribe to ``agent.conversation`` and to ``agent.on_status``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import acp
import anyio
from acp.schema import Implementation

from .._version import __version__
from ..wire.client import EscouadeClient, capabilities
from ..wire.process import StderrRing, agent_environment, drain, kill_group_now, spawn, terminate_group
from ..wire.transport import LineTransport
from ..core.conversation import Change, Conversation, Item, Message, Permission, Question, ToolCall
from ..core import plans
from ..core.adapters import adapt
from ..core.observers import Observers
from .controls import flatten_options
from ..manifest import HarnessRef, version_status
from ..wire.transcript import Transcript
from ..core.render_text import answer_label, render_item

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
"""Seconds an agent has to answer ``initialize`` and ``session/new``."""

Policy = Callable[["PermissionCard"], Awaitable[None]]
"""A permission policy: given a fresh card, it may settle it (``card.choose(option,
by=..., message=...)``) or leave it pending. Policies run in order, before the user is
called; rule plugins (the broker) and the agent's Escouade mode are policies. A
policy must return promptly (the broker bounds plugins to 500 ms)."""


class AgentError(RuntimeError):
    """The agent could not start, or stopped answering."""


class AuthRequired(AgentError):
    """The agent wants the user to sign in (ACP ``-32000``). ``methods`` are its
    ``authMethods``; ``await agent.authenticate(method_id)`` then retries once."""

    def __init__(self, message: str, methods: list[dict[str, Any]]) -> None:
        self.methods = methods
        names = ", ".join(f"{m.get('id')} ({m.get('name')})" for m in methods) or "none advertised"
        super().__init__(f"{message}; sign-in methods: {names}")


class AgentExited(AgentError):
    """The agent's process ended; ``code`` is its exit code, ``stderr_tail`` its last lines."""

    def __init__(self, name: str, code: int | None, stderr_tail: str, during: str = "") -> None:
        self.code = code
        self.stderr_tail = stderr_tail
        where = f" during {during}" if during else ""
        msg = f"agent {name!r} exited with code {code}{where}"
        if stderr_tail:
            msg += "; its stderr ended with:\n" + stderr_tail
        super().__init__(msg)


class _Card:
    """What the agent waits on: one answer (a future), the first one wins."""

    def __init__(self, agent: Agent, item: Item) -> None:
        self.agent = agent
        self._item = item
        self._future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def wait(self) -> dict[str, Any]:
        """The answer sent to the agent (a wire dict)."""
        return await asyncio.shield(self._future)

    def __repr__(self) -> str:
        return render_item(self._item)


class PermissionCard(_Card):
    """A permission request of the agent, waiting for an answer.

    ``choose(option)`` answers it — ``option`` is one of the agent's ``optionId``s, or an
    option kind (``allow_once``, ``allow_always``, ``reject_once``, ``reject_always``),
    which picks the first option of that kind. The first answer wins; later ones return
    False and send nothing. Clicking a button on the card's view calls the same method.
    """

    def __init__(self, agent: Agent, permission: Permission) -> None:
        super().__init__(agent, permission)
        self.permission = permission

    @property
    def options(self) -> list[dict[str, Any]]:
        return self.permission.options

    @property
    def tool_call(self) -> ToolCall | None:
        return self.permission.tool_call

    @property
    def state(self) -> str:
        return self.permission.state

    @property
    def label(self) -> str:
        return answer_label(self.permission)

    def option(self, option: str) -> dict[str, Any]:
        """The agent's option for an ``optionId`` or a kind; ``ValueError`` if none."""
        for o in self.options:
            if o.get("optionId") == option:
                return o
        for o in self.options:
            if o.get("kind") == option:
                return o
        offered = ", ".join(f"{o.get('optionId')} ({o.get('kind')})" for o in self.options)
        raise ValueError(f"no option {option!r} on this card; the agent offered: {offered}")

    def choose(self, option: str, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        """Answer with ``option``; returns False if the card was already answered.
        ``by`` and ``message`` are what the card says ("Denied by Team rules via
        Escouade — no rm -rf here"); the agent is told ``reply`` (else ``message``) in the
        answer's ``_meta.escouade.message`` — ACP's permission answer has no field for it."""
        chosen = self.option(option)
        if self._future.done():
            return False
        self.agent.conversation.resolve_permission(self.permission, "selected", chosen["optionId"], by, message)
        told = reply or message
        outcome: dict[str, Any] = {"outcome": "selected", "optionId": chosen["optionId"],
                                   "_meta": {"escouade": {"by": by, **({"message": told} if told else {})}}}
        self._future.set_result(outcome)
        self.agent._card_settled(self)
        return True

    @property
    def plan(self) -> str | None:
        """The plan's markdown when this card is a plan to approve, else None."""
        return self.permission.plan

    def approve(self) -> bool:
        """Approve the plan: answer with the agent's allow option (once)."""
        return self.choose(self._first_kind("allow_once", "allow_always"))

    def keep_planning(self, feedback: str = "") -> bool:
        """Send the plan back: answer with the agent's reject option. ``feedback``
        reaches the model verbatim — as the refusal message (``_meta.escouade.message``
        on the answer) when the agent says it reads it
        (``agentCapabilities._meta.escouade.refusalMessage``), else as the next prompt."""
        done = self.choose(self._first_kind("reject_once", "reject_always"), message=feedback or None)
        if done and feedback and not self.agent.reads_refusal_messages:
            self.agent.send(feedback)
        return done

    def _first_kind(self, *kinds: str) -> str:
        for kind in kinds:
            for o in self.options:
                if o.get("kind") == kind:
                    return o["optionId"]
        raise ValueError(f"the agent offered no {' or '.join(kinds)} option: {self.options}")

    def cancel(self, why: str | None = None) -> bool:
        """Answer ``cancelled`` (the turn was stopped); False if already answered."""
        if self._future.done():
            return False
        self.agent.conversation.resolve_permission(self.permission, "cancelled", None, why)
        self._future.set_result({"outcome": "cancelled"})
        self.agent._card_settled(self)
        return True


class QuestionCard(_Card):
    """A question of the agent (ACP ``elicitation/create``, or questions written in
    text). ``accept(content)`` answers with the form's values (a dict matching the
    requested schema; for text questions, answers by question id), ``decline()`` and
    ``cancel()`` refuse. The first answer wins; later ones return False."""

    def __init__(self, agent: Agent, question: Question) -> None:
        super().__init__(agent, question)
        self.question = question

    @property
    def state(self) -> str:
        return self.question.state

    @property
    def fields(self) -> dict[str, Any]:
        """The requested schema's properties (form mode), by field name."""
        return dict((self.question.schema or {}).get("properties") or {})

    def accept(self, content: dict[str, Any] | None = None, by: str = "you") -> bool:
        content = dict(content or {})
        if self.question.mode == "form":
            missing = [f for f in (self.question.schema or {}).get("required") or [] if f not in content]
            if missing:
                raise ValueError(f"required field(s) missing: {', '.join(missing)}")
        return self._settle("accept", content)

    def decline(self) -> bool:
        return self._settle("decline", None)

    def cancel(self) -> bool:
        return self._settle("cancel", None)

    def _settle(self, action: str, content: dict[str, Any] | None) -> bool:
        if self._future.done():
            return False
        self.agent.conversation.resolve_question(self.question, action, content)
        self._future.set_result({"action": action, **({"content": content} if content is not None else {})})
        self.agent._question_settled(self)
        return True


class Turn:
    """One prompt turn. ``await turn`` waits for its end and returns the turn itself;
    it raises :class:`AgentError` (e.g. :class:`AgentExited`) if the turn failed.

    ``stop_reason``: ACP's (``end_turn``, ``cancelled``, ``max_tokens``…), None while
    running or on failure; ``text``: the agent's reply text of this turn; ``tool_calls``;
    ``items``: everything the turn added to the conversation; ``error``: the failure."""

    def __init__(self, agent: Agent, prompt: list[dict[str, Any]]) -> None:
        self.agent = agent
        self.prompt = prompt
        self.items: list[Item] = []
        self.stop_reason: str | None = None
        self.error: AgentError | None = None
        self.cancelled_by_user = False
        self.status = "queued"
        self._done = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        return self._done.done()

    @property
    def text(self) -> str:
        return "".join(i.text for i in self.items if isinstance(i, Message) and i.role == "agent")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [i for i in self.items if isinstance(i, ToolCall)]

    def _finish(self, stop_reason: str | None = None, error: AgentError | None = None) -> None:
        if self._done.done():
            return
        self.stop_reason = stop_reason
        self.error = error
        self.status = "failed" if error else (stop_reason or "done")
        self._done.set_result(None)

    async def wait(self) -> Turn:
        await asyncio.shield(self._done)
        if self.error is not None:
            raise self.error
        return self

    def __await__(self):
        return self.wait().__await__()

    def add_done_callback(self, fn: Callable[[Turn], object]) -> None:
        """Call ``fn(turn)`` on the loop once the turn has ended (at once if it has)."""
        self._done.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        state = self.status if not self.error else f"failed: {str(self.error).splitlines()[0]}"
        return f"<Turn {self.agent.name} {state}: {len(self.text)} chars, {len(self.tool_calls)} tool calls>"


@dataclass
class ExitInfo:
    code: int | None
    stderr_tail: str
    expected: bool


class Agent:
    """One harness session. ``status`` is ``starting``, ``idle``, ``working``,
    ``waiting`` (a card waits for the user), ``exited`` (the process ended by itself),
    ``closed`` or ``failed`` (could not start). ``on_status`` callbacks get the agent.

    ``program`` is the located executable; ``cwd`` the session folder (absolute);
    ``name`` the agent's name in the squad. ``policies`` are consulted on every
    permission request before the user is called (see :data:`Policy`)."""

    def __init__(self, harness: HarnessRef, *, program: str, name: str | None = None,
                 cwd: str | Path | None = None, start_timeout: float = START_TIMEOUT,
                 policies: Sequence[Policy] = (), mode: str | None = None, record: bool = True,
                 via: Sequence[str] = (), fs: bool | None = None, project: Any = None,
                 env: dict[str, str] | None = None) -> None:
        self.harness = harness
        self.program = program
        self.name = name or harness.short_id
        self.cwd = Path(cwd or Path.cwd()).resolve()
        self.start_timeout = start_timeout
        self.conversation = Conversation()
        self.status = "starting"
        self.error: str | None = None
        self.exit: ExitInfo | None = None
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] | None = None
        self.agent_capabilities: dict[str, Any] = {}
        self.stderr = StderrRing()
        self.on_status: Observers[[Agent]] = Observers(f"status of {self.name}")
        self.transport: LineTransport | None = None
        self.client: EscouadeClient | None = None
        self._process = None
        self._conn = None
        self._main_task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._exited = asyncio.Event()
        self._closing = False
        self._turn_lock = asyncio.Lock()
        self._turn: Turn | None = None
        self._turn_tasks: set[asyncio.Task] = set()
        self._pending_cards: list[PermissionCard] = []
        self._new_cards: asyncio.Queue[PermissionCard] = asyncio.Queue()
        self.policies: list[Policy] = list(policies or [])
        self.escouade_mode = "default"
        self.via = list(via)
        self.extra_env = dict(env or {})  # e.g. the account's folder in the manifest's accountVar
        self._fs_override = fs
        self.project = project  # escouade_nb.project.Project, or None (then not private)
        self._fence_notice = False
        self._written: set[str] = set()  # paths written through our fs/write_text_file
        self.last_activity: float | None = None
        self.version_checked = False  # the squad already compared the program's --version with ``tested``  # wall-clock time of the last conversation change
        self.models: dict[str, Any] | None = None  # the agent's own ``models`` state (e.g. goose's), raw
        self.reads_refusal_messages = False
        self._questions_pending: list[QuestionCard] = []
        self._new_questions: asyncio.Queue[QuestionCard] = asyncio.Queue()
        self._told_about_questions = False
        self.auth_methods: list[dict[str, Any]] = []
        self.auth_required: AuthRequired | None = None
        self.transcript: Transcript | None = None
        self.record = record
        self._resume_session: str | None = None
        self._replay_skip: collections.Counter[str] = collections.Counter()
        self._loading = False
        self._early_cancels: set[str] = set()
        self._permission_rpc: dict[Any, str] = {}
        self._early: list[tuple[Any, Any]] = []
        self._auth_event = asyncio.Event()  # JSON-RPC id -> toolCallId of pending permission requests
        self._cancel_sent = False
        self._fatal: str | None = None  # why the client stopped the agent (a transport error)
        self._agent_protocol: Any = None  # the protocolVersion of the agent's initialize answer, raw
        self.conversation.subscribe(self._collect)
        if mode is not None and mode != "default" and mode not in self.escouade_modes():
            raise AgentError(f"{harness.harness.display_name} does not offer the mode {mode!r}; it offers: "
                             f"{', '.join(self.escouade_modes())}")
        self._initial_mode = mode
        if self.private and harness.harness.acp.fs is False:
            raise AgentError(f"{harness.harness.display_name} reads and writes files by itself (its manifest says "
                             f'"fs": false), so it cannot run in a private project: the fence would not hold')

    # -- state ------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def pending_cards(self) -> list[PermissionCard]:
        return list(self._pending_cards)

    def _set_status(self, status: str) -> None:
        if status == self.status:
            return
        self.status = status
        self.on_status.emit(self)

    def _collect(self, changes: list[Change]) -> None:
        self.last_activity = time.time()
        if self.client is not None:
            self._terminals_shown(changes)
        if self.private and not self._fence_notice:
            self._check_fence(changes)
        if self._turn is not None and not self._turn.done:
            for change in changes:
                if change.kind == "added" and change.item is not None:
                    self._turn.items.append(change.item)

    # -- start ----------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        """Schedule the start on the running loop and return at once."""
        if self._main_task is None:
            if self.status in ("resumable", "closed", "exited", "failed"):
                self._set_status("starting")
            self._main_task = asyncio.get_running_loop().create_task(self._main(), name=f"escouade agent {self.name}")
        return self._main_task

    async def ready(self) -> Agent:
        """Wait until the session exists; raises :class:`AgentError` if the start failed."""
        self.start()
        waits = [asyncio.ensure_future(e.wait()) for e in (self._ready, self._exited, self._auth_event)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        if self.auth_required is not None and not self._ready.is_set():
            raise self.auth_required
        if not self._ready.is_set() or self.session_id is None:
            raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
        return self

    def argv(self) -> list[str]:
        """The command line: ``[*via, program, *acp.args]`` — ``via`` is a launcher
        prefix such as ``ssh host`` or ``kubectl exec -i POD --`` (ACP is plain stdio)."""
        return [*self.via, self.program, *self.harness.harness.acp.args]

    @property
    def private(self) -> bool:
        return bool(getattr(self.project, "private", False))

    @property
    def fence(self) -> Path | None:
        """The folder the client's fs is fenced to: a private project's folder, else None."""
        if not self.private:
            return None
        return Path(getattr(self.project, "folder", None) or self.cwd)

    def _check_fence(self, changes: list[Change]) -> None:
        """A private project's fence holds for the files the agent reads and writes
        through us. An edit that completes without a write through us was done by the
        agent itself: the conversation says so, once."""
        for change in changes:
            call = change.item
            if isinstance(call, ToolCall) and call.kind in ("edit", "delete", "move") and call.status == "completed" \
                    and not any(c.get("type") == "diff" and c.get("path") in self._written for c in call.content):
                self._fence_notice = True
                self.conversation.add_notice(
                    f"{self.name} changed files by itself, not through escouade_nb: the fence of this private "
                    f"project does not hold for those.", level="warning")
                return

    def _on_file_written(self, path: Path, old: str | None, new: str) -> None:
        """Show a write through ``fs/write_text_file`` as a diff in its tool card (the
        tool call aiming at that path; a card of its own when none does)."""
        target = str(path)
        self._written.add(target)
        for call in reversed(list(self.conversation.tool_calls.values())):
            if target in [str(Path(p) if Path(p).is_absolute() else self.cwd / p) for p in _paths_of(call)]:
                if not any(c.get("type") == "diff" and c.get("path") == target for c in call.content):
                    self.conversation.add_tool_content(call, {"type": "diff", "path": target, "oldText": old,
                                                              "newText": new})
                return
        self.conversation.apply({"sessionUpdate": "tool_call", "toolCallId": f"escouade-write-{len(self.conversation.items)}",
                                 "title": f"Wrote {target}", "kind": "edit", "status": "completed",
                                 "locations": [{"path": target}],
                                 "content": [{"type": "diff", "path": target, "oldText": old, "newText": new}]})

    def _on_terminal(self, event: Any) -> None:
        """Terminal output or exit: the tool cards that embed that terminal take it."""
        for call in self.conversation.tool_calls.values():
            if any(c.get("type") == "terminal" and c.get("terminalId") == event.terminal_id for c in call.content):
                if self._store_terminal(call, event.terminal_id):
                    self.conversation.touch(call)

    def _store_terminal(self, call: ToolCall, terminal_id: str) -> bool:
        """Copy a terminal's state into the tool call that shows it (kept after the
        terminal is released). Returns whether anything changed."""
        snap = self.terminal_snapshot(terminal_id)
        if snap is None:
            return False
        output, truncated, status = snap
        state = {"output": output, "truncated": truncated, "running": status is None,
                 "exit_code": getattr(status, "exit_code", None), "signal": getattr(status, "signal", None)}
        if call.terminals.get(terminal_id) == state:
            return False
        call.terminals[terminal_id] = state
        return True

    def _terminals_shown(self, changes: list[Change]) -> None:
        """A tool call that embeds a terminal we already ran (content sent after it ended)."""
        for change in changes:
            call = change.item
            if isinstance(call, ToolCall):
                for c in call.content:
                    tid = c.get("terminalId") if c.get("type") == "terminal" else None
                    if tid and tid not in call.terminals and self._store_terminal(call, str(tid)):
                        self.conversation.touch(call)

    def terminal_snapshot(self, terminal_id: str) -> tuple[str, bool, Any] | None:
        """(output, truncated, exit status) of a terminal of this agent, or None."""
        if self.client is None:
            return None
        try:
            return self.client.terminals.snapshot(terminal_id)
        except Exception:
            return None

    @property
    def uses_client_fs(self) -> bool:
        """Whether we offer ``fs/*``: the manifest's ``acp.fs`` (default true), but not
        through a launcher — the files are not ours — unless told otherwise."""
        if self._fs_override is not None:
            return self._fs_override and self.harness.harness.acp.fs is not False
        return self.harness.harness.acp.fs is not False and not self.via

    async def _main(self) -> None:
        acp_spec = self.harness.harness.acp
        env = agent_environment(acp_spec.remove_env or (), {**(acp_spec.env or {}), **self.extra_env})
        if self.record and self.transcript is None:
            self.transcript = Transcript.new(self.name, {
                "agent": self.name, "harness": self.harness.id, "cwd": str(self.cwd), "argv": self.argv()},
                on_error=self._transcript_failed)
        try:
            self._process = await spawn(self.argv(), cwd=self.cwd, env=env)
        except OSError as exc:
            self._fail(f"could not start {' '.join(self.argv())}: {exc}")
            return
        self.client = _AgentClient(self, cwd=self.cwd, on_permission=self._on_permission,
                                   on_update=self.conversation.apply, on_file_written=self._on_file_written,
                                   fence=self.fence, terminal_env=env)
        self.client.terminals.subscribe(self._on_terminal)
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, self._process.stderr, self.stderr)
            await tg.start(self.client.terminals.serve)
            tg.start_soon(self._connect)
            code = await self._process.wait()
            kill_group_now(self._process.pid)  # what it left running in its group (an agent that crashed) goes too
            self._on_exit(code)
            await anyio.sleep(0.05)  # let the drain read the last bytes
            tg.cancel_scope.cancel()

    def _transcript_failed(self, exc: OSError) -> None:
        self.conversation.add_notice(f"The transcript could not be written ({exc.strerror or exc}); the session goes "
                                     f"on, but it will not be resumable after a kernel restart.", level="warning")

    async def _connect(self) -> None:
        self.transport = LineTransport(self._process.stdin, self._process.stdout, intercept=self._intercept,
                                       on_skip=self._on_skip)
        if self.transcript is not None:
            self.transport.line_observers.append(self.transcript.wire_line)
        self.transport.observers.append(self._observe_raw)
        # elicitation/create is routed by the SDK only with its unstable flag
        self._conn = acp.connect_to_agent(self.client, self.transport, use_unstable_protocol=True)
        fs = self.uses_client_fs
        try:
            with anyio.fail_after(self.start_timeout):
                init = await self._conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION, client_capabilities=self._capabilities(fs),
                    client_info=Implementation(name="escouade_nb", title="escouade_nb", version=__version__))
                if self._protocol_error():
                    raise AgentError(self._protocol_error())
                self.agent_info = init.agent_info.model_dump(mode="json", exclude_none=True) if init.agent_info else None
                self._check_version()
                self.agent_capabilities = (init.agent_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
                                           if init.agent_capabilities else {})
                self.auth_methods = [m.model_dump(mode="json", by_alias=True, exclude_none=True)
                                     for m in (init.auth_methods or [])]
                ours = ((self.agent_capabilities.get("_meta") or {}).get("escouade") or {})
                self.reads_refusal_messages = bool(ours.get("refusalMessage"))
                await self._open_session()
        except TimeoutError:
            await self._abort(f"agent {self.name!r} did not answer initialize/session/new within "
                              f"{self.start_timeout:g} s")
            return
        except AuthRequired as exc:
            self.auth_required = exc
            self.conversation.add_notice("The agent asks you to sign in", level="warning", detail=str(exc))
            self._set_status("sign-in")
            self._auth_event.set()
            return
        except AgentError as exc:
            await self._abort(str(exc))
            return
        except acp.RequestError as exc:
            await self._abort(f"agent {self.name!r} refused to start a session: {exc} ({exc.code})")
            return
        except ConnectionError:
            return  # the process ended; _on_exit tells why
        except Exception as exc:  # a malformed answer (e.g. a protocolVersion that is not an integer)
            await self._abort(self._protocol_error() or f"agent {self.name!r} gave an answer this client cannot "
                                                        f"read: {str(exc).splitlines()[0]}")
            return
        await self._session_ready()

    def _check_version(self) -> None:
        """Warn when the version the agent gives in ``initialize`` (``agentInfo``) is
        outside the manifest's ``tested`` range (for agents without a version flag)."""
        version = (self.agent_info or {}).get("version")
        tested = self.harness.harness.tested
        if not version or tested is None or self.version_checked:
            return
        status = version_status(version, tested)
        if status in ("older", "newer"):
            self.conversation.add_notice(
                f"{self.harness.harness.display_name} {version} is {status} than the versions tested with this "
                f"manifest ({tested.oldest}–{tested.newest}).", level="warning")

    async def _open_session(self) -> None:
        """``session/new`` — or ``session/load`` when resuming an agent that supports it.
        Raises :class:`AuthRequired` on ACP's -32000."""
        try:
            if self._resume_session and self.agent_capabilities.get("loadSession"):
                self.conversation.new_session()  # the replay folds afresh (what the transcript has is skipped)
                self._loading = True
                try:
                    session = await self._conn.load_session(cwd=str(self.cwd), session_id=self._resume_session,
                                                            mcp_servers=[])
                    self.session_id = self._resume_session
                    self._flush_early_updates()  # the replay came before the answer: skip what we have
                finally:
                    self._loading = False
                    self._replay_skip.clear()
                self.conversation.add_notice(f"Reattached to session {self.session_id} (session/load).")
            else:
                if self._resume_session:
                    self.conversation.add_notice(
                        "This agent cannot reload a session (no loadSession): a new session was started; "
                        "the conversation above is the old one's transcript.", level="warning")
                session = await self._conn.new_session(cwd=str(self.cwd), mcp_servers=[])
                self.conversation.new_session()
                self.session_id = session.session_id
        except acp.RequestError as exc:
            if exc.code == -32000:
                raise AuthRequired(f"agent {self.name!r}: {exc}", self.auth_methods) from None
            raise
        self._resume_session = None
        self.conversation.set_session_state(
            modes=session.modes.model_dump(mode="json", by_alias=True, exclude_none=True) if session.modes else None,
            config_options=[o.model_dump(mode="json", by_alias=True, exclude_none=True)
                            for o in (session.config_options or [])] or None)
        self._flush_early_updates()

    async def _session_ready(self) -> None:
        if self.transcript is not None:
            self.transcript.event("session", session_id=self.session_id)
        self.auth_required = None
        self._auth_event.clear()
        self._ready.set()
        self._set_status("idle")
        if self._initial_mode not in (None, "default"):
            await self.set_escouade_mode(self._initial_mode)

    async def authenticate(self, method_id: str) -> Agent:
        """Sign in with one of the agent's ``authMethods`` (agent type: ACP
        ``authenticate``), then retry the session once. A terminal-type method is not
        called: its login command is shown to run, then ``restart()``."""
        method = next((m for m in self.auth_methods if m.get("id") == method_id), None)
        if method is None:
            raise ValueError(f"no sign-in method {method_id!r}; the agent offers: "
                             f"{', '.join(m.get('id', '?') for m in self.auth_methods) or 'none'}")
        if method.get("type") == "terminal":
            command = " ".join([*self.argv(), *(method.get("args") or [])])
            env = " ".join(f"{k}={v}" for k, v in (method.get("env") or {}).items())
            self.conversation.add_notice(f"Sign in from a terminal, then restart this agent: {env} {command}".strip())
            return self
        try:
            await self._conn.authenticate(method_id=method_id)
            if self.session_id is None:
                await self._open_session()
        except AuthRequired as exc:
            self.conversation.add_notice("Still not signed in", level="error", detail=str(exc))
            raise
        except acp.RequestError as exc:
            offered = ", ".join(f"{m.get('id')} ({m.get('name')})" for m in self.auth_methods)
            error = AgentError(f"sign-in with {method_id!r} failed: {exc}; sign-in methods: {offered}")
            self.conversation.add_notice("Sign-in failed", level="error", detail=str(error))
            raise error from None
        if self._ready.is_set():  # signed in again during a session (a prompt got -32000): it goes on
            self.auth_required = None
            self._set_status("idle")
            return self
        await self._session_ready()
        return self

    def _intercept(self, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if method == "session/update" and "id" not in message:
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            session = params.get("sessionId")
            if self.session_id is None:
                self._early.append((session, params.get("update")))  # folded once session/new answers
            elif session in (None, self.session_id):
                self._fold(params.get("update"))
            else:
                log.debug("dropped an update for unknown session %r", session)
            return True
        if method == "$/cancel_request" and "id" not in message:
            rpc_id = (message.get("params") or {}).get("requestId")
            self._agent_cancelled(rpc_id)
            return True
        if isinstance(method, str) and "id" in message and self.session_id is not None:
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            session = params.get("sessionId")
            if session is not None and session != self.session_id:  # fs/*, terminal/*, a card: not for it
                self._refuse(message["id"], f"unknown session {session!r}")
                return True
        if method == "session/request_permission" and "id" in message:
            tool_call = ((message.get("params") or {}).get("toolCall") or {})
            self._permission_rpc[message["id"]] = str(tool_call.get("toolCallId", ""))
        return False

    def _refuse(self, rpc_id: Any, why: str) -> None:
        """Answer an agent's request with an invalid-params error, without handling it."""
        async def answer() -> None:
            try:
                await self.transport.send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": why}})
            except ConnectionError:
                pass
        task = asyncio.get_running_loop().create_task(answer())
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)

    def _fold(self, update: Any) -> None:
        if self._loading and self._replay_skip:
            key = _replay_key(update)
            if self._replay_skip[key] > 0:  # already in the conversation, rebuilt from the transcript
                self._replay_skip[key] -= 1
                return
        update = adapt(self.harness.short_id, self.conversation, update)
        if update is not None:
            self.conversation.apply(update if isinstance(update, dict) else {"value": update})

    def _flush_early_updates(self) -> None:
        early, self._early = self._early, []
        for session, update in early:
            if session in (None, self.session_id):
                self._fold(update)
            else:
                log.debug("dropped an early update for session %r (ours is %r)", session, self.session_id)

    def _agent_cancelled(self, rpc_id: Any) -> None:
        """``$/cancel_request`` from the agent: it withdrew a request. A pending card
        is answered ``cancelled`` and closed (also when the request is still on its way
        to its handler)."""
        tool_call_id = self._permission_rpc.get(rpc_id)
        if tool_call_id is None:
            return
        for card in self._pending_cards:
            if card.tool_call is not None and card.tool_call.tool_call_id == tool_call_id:
                card.cancel("the agent withdrew it")
                return
        self._early_cancels.add(tool_call_id)

    def _on_skip(self, why: str) -> None:
        if why.startswith("line longer") and self._fatal is None and not self._closing:
            # the dropped message may be the answer a turn or a card waits for: rather than
            # a silent hang, the agent is stopped and its turn fails saying why
            self._fatal = f"transport error: a message from the agent was {why.removeprefix('line ')}"
            self.conversation.add_notice(f"Transport error: a message from the agent was "
                                         f"{why.removeprefix('line ')}; the agent was stopped (restart it to go on).",
                                         level="error")
            if self._process is not None and self._process.returncode is None:
                task = asyncio.get_running_loop().create_task(terminate_group(self._process))
                self._turn_tasks.add(task)
                task.add_done_callback(self._turn_tasks.discard)

    def _protocol_error(self) -> str | None:
        """Why the agent's ``initialize`` answer cannot be spoken to: a protocol version
        (as it came on the wire) other than ours, an integer. None when it is fine."""
        version = self._agent_protocol
        if version is None or (type(version) is int and version == acp.PROTOCOL_VERSION):
            return None
        return (f"agent {self.name!r} speaks ACP protocol version {version!r}; this client supports "
                f"[{acp.PROTOCOL_VERSION}], so the connection was closed")

    def _observe_raw(self, direction: str, message: dict[str, Any]) -> None:
        if direction == "in" and isinstance(message.get("result"), dict) and "protocolVersion" in message["result"]:
            self._agent_protocol = message["result"]["protocolVersion"]  # initialize's, before the SDK reads it
        # goose's ``models`` in session/new (or load) answers: unstable, dropped by the SDK
        if direction == "in" and isinstance(message.get("result"), dict) and "models" in message["result"]:
            models = message["result"]["models"]
            if isinstance(models, dict):
                self.models = models
                self.conversation.notify_state("models")

    @staticmethod
    def _capabilities(fs: bool):
        from acp.schema import (ClientSessionCapabilities, ElicitationCapabilities,
                                SessionConfigOptionsCapabilities)
        caps = capabilities(fs, terminal=True)
        caps.elicitation = ElicitationCapabilities(form={}, url={})
        caps.session = ClientSessionCapabilities(config_options=SessionConfigOptionsCapabilities(boolean={}))
        return caps

    def _fail(self, error: str) -> None:
        self.error = error
        self.conversation.add_notice(f"Could not start: {error}", level="error")
        self._set_status("failed")
        self._exited.set()

    async def _abort(self, error: str) -> None:
        self._fail(error)
        self._closing = True
        if self.transport is not None:
            await self.transport.close()  # its stdin first, then its process group
        if self._process is not None:
            await terminate_group(self._process)

    # -- exit ---------------------------------------------------------------------------
    def _on_exit(self, code: int | None) -> None:
        tail = self.stderr.tail()
        expected = self._closing
        self.exit = ExitInfo(code, tail, expected)
        if self.transcript is not None:
            self.transcript.event("exit", code=code, stderr_tail=tail, expected=expected)
        if not expected:
            self.error = self._fatal or str(AgentExited(self.name, code, tail))
            self.conversation.add_notice(f"Agent exited with code {code}", level="error", detail=tail)
        for card in list(self._pending_cards):
            card.cancel("agent exited" if not expected else "agent closed")
        for question in list(self._questions_pending):
            question.cancel()
        self.conversation.cancel_unfinished()
        self.conversation.close_messages()
        if self.status != "failed":
            self._set_status("closed" if expected else "exited")
        self._exited.set()
        exc = AgentExited(self.name, code, tail, during="the turn")
        if self._fatal is not None:
            exc = AgentError(f"agent {self.name!r} was stopped: {self._fatal}")
        if self._turn is not None:
            self._turn._finish(error=exc)

    # -- turns ------------------------------------------------------------------------------
    def send(self, prompt: str | Sequence[Any], *, attach: Sequence[str | Path] = ()) -> Turn:
        """Queue a prompt turn and return its :class:`Turn` at once. ``prompt`` is text,
        or a list of ACP content blocks (dicts or SDK models). One turn runs at a time;
        later sends wait their turn in order.

        ``attach``: files sent along (relative paths are taken in the agent's folder), read
        now: an image as an image block, a UTF-8 text file as an embedded resource,
        anything else (or bigger than 4 MiB) as a ``resource_link`` to its ``file://`` URI.
        What the agent does not take (``promptCapabilities``) becomes a link, or is left
        out with a notice (images)."""
        blocks = _blocks(prompt) + [_attachment(self.cwd / Path(p)) for p in attach]
        turn = Turn(self, blocks)
        task = asyncio.get_running_loop().create_task(self._run_turn(turn), name=f"escouade turn {self.name}")
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        async with self._turn_lock:
            if self.status in ("exited", "closed", "failed"):
                turn._finish(error=AgentError(f"agent {self.name!r} is {self.status}; the prompt was not sent"))
                return
            try:
                await self.ready()
            except AgentError as exc:
                turn._finish(error=exc)
                return
            self._turn = turn
            self._cancel_sent = False
            turn.status = "running"
            self._set_status("working")
            turn.prompt = self._gate(turn.prompt)
            self.conversation.add_user_message(turn.prompt)
            wire_prompt = turn.prompt
            if self.harness.harness.acp.questions_in_text and not self._told_about_questions:
                self._told_about_questions = True
                wire_prompt = [{"type": "text", "text": plans.QUESTIONS_PREAMBLE}, *turn.prompt]
            try:
                response = await self._conn.prompt(session_id=self.session_id, prompt=wire_prompt)
            except ConnectionError:
                with anyio.move_on_after(5):
                    await self._exited.wait()
                info = self.exit or ExitInfo(None, self.stderr.tail(), False)
                turn._finish(error=AgentExited(self.name, info.code, info.stderr_tail, during="the turn"))
            except acp.RequestError as exc:
                if exc.code == -32000:
                    self.auth_required = AuthRequired(f"agent {self.name!r}: {exc}", self.auth_methods)
                    self.conversation.add_notice("The agent asks you to sign in; your prompt was kept (turn.prompt)",
                                                 level="warning", detail=str(self.auth_required))
                    self._set_status("sign-in")  # the view offers the sign-in methods
                    turn._finish(error=self.auth_required)
                else:
                    self.conversation.add_notice(f"The agent answered the prompt with an error: {exc}", level="error",
                                                 detail=json.dumps(exc.data, default=str) if exc.data else "")
                    turn._finish(error=AgentError(f"agent {self.name!r} failed the turn: {exc}"))
            except Exception as exc:  # a malformed answer: the turn fails, the agent lives on
                log.exception("prompt failed")
                turn._finish(error=AgentError(f"agent {self.name!r}: {exc}"))
            else:
                self._questions_from_text(turn)
                if response.stop_reason == "refusal":
                    self.conversation.add_notice("The agent refused this prompt (stop reason: refusal); "
                                                 "your text is kept above.", level="warning")
                turn._finish(stop_reason=response.stop_reason)
            finally:
                self._turn = None
                if self.transcript is not None:  # a turn's end is on disk, whatever comes next
                    self.transcript.flush()
                self.conversation.settle_rejected()
                self.conversation.close_messages()
                if self.status in ("working", "waiting"):
                    self._set_status("idle")

    def _gate(self, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep only content the agent said it takes (``promptCapabilities``): an
        embedded resource it cannot take becomes a ``resource_link``; an image or audio
        it cannot take is not sent, and the conversation says so."""
        caps = self.agent_capabilities.get("promptCapabilities") or {}
        out: list[dict[str, Any]] = []
        for block in blocks:
            kind = block.get("type")
            if kind in ("image", "audio") and not caps.get(kind):
                self.conversation.add_notice(f"The {kind} was not sent: {self.name} does not accept {kind}s "
                                             f"(promptCapabilities.{kind} is false).", level="warning")
                continue
            if kind == "resource" and not caps.get("embeddedContext"):
                res = block.get("resource") or {}
                uri = res.get("uri", "")
                link = {"type": "resource_link", "uri": uri, "name": unquote(uri.rsplit("/", 1)[-1]) or uri}
                if res.get("mimeType"):
                    link["mimeType"] = res["mimeType"]
                out.append(link)
                continue
            out.append(block)
        return out

    async def restart(self) -> Agent:
        """Start a fresh process and session for this agent (after a crash, or to get
        out of a stuck turn). The conversation so far stays; a notice marks the restart."""
        if self.alive:
            await self.close()
        self._reset_process_state()
        self.conversation.add_notice("Restarted: a new process and a new session.")
        self.start()
        await self.ready()
        return self

    def _reset_process_state(self) -> None:
        for task in list(self._turn_tasks):
            task.cancel()
        self._process = None
        self._conn = None
        self._main_task = None
        self.session_id = None
        self.exit = None
        self.error = None
        self._fatal = None
        self.auth_required = None
        self._closing = False
        self._ready = asyncio.Event()
        self._exited = asyncio.Event()
        self._auth_event = asyncio.Event()
        self._pending_cards = []
        self._questions_pending = []
        self._permission_rpc = {}
        self._early = []
        self.stderr = StderrRing()
        self.transcript = None
        self._set_status("starting")

    @classmethod
    def resume(cls, transcript_path: Path, harness: HarnessRef | None, *, program: str | None,
               **kwargs: Any) -> Agent:
        """An agent rebuilt from its transcript (after a kernel restart): the
        conversation is replayed at once; call ``start()`` to reattach — with
        ``session/load`` when the agent advertises ``loadSession`` (its replay is folded
        into this conversation, not appended twice), else with a new session (said so).
        ``harness`` None means its manifest has gone: the agent is listed as
        "harness missing" and its conversation stays readable."""
        from ..wire import transcript as tr
        head = tr.header(transcript_path) or {}
        agent = cls(harness if harness is not None else _missing_harness(head.get("harness", "?")),
                    program=program or "", name=head.get("agent"), cwd=head.get("cwd"), **kwargs)
        info = tr.replay(tr.read(transcript_path), agent.conversation)
        agent._resume_session = info.get("session_id")
        agent._replay_skip = collections.Counter(
            _replay_key((r.msg.get("params") or {}).get("update"))
            for r in tr.read(transcript_path) if r.kind == "in" and (r.msg or {}).get("method") == "session/update")
        agent._replay_skip.update(  # our prompts come back as the agent's user_message_chunk
            _replay_key({"sessionUpdate": "user_message_chunk", "content": block})
            for r in tr.read(transcript_path) if r.kind == "out" and (r.msg or {}).get("method") == "session/prompt"
            for block in (r.msg.get("params") or {}).get("prompt") or [])
        agent.transcript = Transcript(transcript_path, on_error=agent._transcript_failed)
        agent.transcript.event("resume")
        if harness is None:
            agent.status = "harness missing"
            agent.error = f"the harness {head.get('harness')!r} is not installed any more"
        else:
            agent.status = "resumable"
        return agent

    def cancel(self) -> None:
        """Stop the running turn: send ``session/cancel``, answer every pending card
        ``cancelled`` (ACP requires the client to), mark unfinished tool calls cancelled.
        The turn then ends with the agent's stop reason (``cancelled``). Queued turns
        stay queued."""
        if self._conn is None or self.session_id is None or self._turn is None:
            return
        self._turn.cancelled_by_user = True
        if self._cancel_sent:  # a double click on Stop sends one session/cancel
            return
        self._cancel_sent = True
        loop = asyncio.get_running_loop()
        conn, session_id = self._conn, self.session_id

        async def notify() -> None:
            try:
                await conn.cancel(session_id=session_id)
            except ConnectionError:
                pass

        task = loop.create_task(notify())
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)
        for card in list(self._pending_cards):
            card.cancel("you stopped the turn")
        for question in list(self._questions_pending):
            if question.question.mode != "text":
                question.cancel()
        self.conversation.cancel_unfinished()

    # -- modes, config options, models ----------------------------------------------------------
    def escouade_modes(self) -> dict[str, str]:
        """Escouade's modes this harness offers, with their menu text: ``default``,
        ``acceptEdits``, ``bypassPermissions`` when the manifest maps them to an ACP mode
        (``acp.modes``), ``readOnly`` when it has ``acp.readOnlyMode``. A mode without a
        mapping is not offered."""
        h = self.harness.harness
        mapping = h.acp.modes or {}
        meanings = {m.id: (m.meaning_text() or m.id) for m in h.mode_caps()}
        out = {mode: meanings.get(mode, mode) for mode in ("default", "acceptEdits", "bypassPermissions")
               if mode in mapping}
        if h.acp.read_only_mode:
            out["readOnly"] = meanings.get("readOnly", "Read only: the agent changes nothing.")
        return out

    async def set_escouade_mode(self, mode: str) -> bool:
        """Switch to one of :meth:`escouade_modes`: the mapped ACP mode is set on the
        agent, and the client applies the mode to permission requests (``acceptEdits``:
        edits inside the agent's folder are allowed; ``bypassPermissions``: every request
        is allowed, the card saying "by the mode"). Returns False (and says why in the
        conversation) if the agent refused."""
        offered = self.escouade_modes()
        if mode not in offered:
            raise ValueError(f"{self.harness.harness.display_name} does not offer the mode {mode!r}; "
                             f"it offers: {', '.join(offered) or 'none'}")
        acp_mode = (self.harness.harness.acp.read_only_mode if mode == "readOnly"
                    else (self.harness.harness.acp.modes or {})[mode])
        previous = self.escouade_mode
        self.escouade_mode = mode
        self._notify_status()
        if await self.set_mode(acp_mode):
            return True
        self.escouade_mode = previous
        self._notify_status()
        return False

    def _mode_option(self) -> dict[str, Any] | None:
        return next((o for o in self.conversation.config_options if o.get("category") == "mode"), None)

    async def set_mode(self, mode_id: str) -> bool:
        """Set the agent's own mode: ``session/set_mode``, or the config option of
        category ``mode`` when the agent has one (config options supersede modes). Shown
        at once; rolled back with a message if the agent refuses."""
        option = self._mode_option()
        if option is not None and (self.conversation.modes is None or not self._has_mode(mode_id)):
            return await self.set_config_option(option["id"], mode_id)
        await self.ready()
        previous = self.conversation.current_mode_id
        self.conversation.set_current_mode(mode_id)
        try:
            await self._conn.set_session_mode(session_id=self.session_id, mode_id=mode_id)
        except (acp.RequestError, ConnectionError) as exc:
            self.conversation.set_current_mode(previous)
            self.conversation.add_notice(f"The agent refused the mode {mode_id!r}: {exc}", level="warning")
            return False
        return True

    def _has_mode(self, mode_id: str) -> bool:
        modes = self.conversation.modes or {}
        return any(m.get("id") == mode_id for m in modes.get("availableModes") or [])

    async def set_config_option(self, config_id: str, value: str | bool) -> bool:
        """``session/set_config_option``: shown at once, replaced by the agent's answer
        (the full list), rolled back with a message if the agent refuses."""
        await self.ready()
        try:
            previous = self.conversation.set_config_value(config_id, value)
        except KeyError:
            raise ValueError(f"the agent has no config option {config_id!r}") from None
        try:
            response = await self._conn.set_config_option(config_id=config_id, session_id=self.session_id,
                                                          value=value)
        except (acp.RequestError, ConnectionError) as exc:
            self.conversation.set_config_value(config_id, previous)
            self.conversation.add_notice(f"The agent refused {config_id} = {value!r}: {exc}", level="warning")
            return False
        options = getattr(response, "config_options", None)
        if options:
            self.conversation.apply({"sessionUpdate": "config_option_update", "configOptions": [
                o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in options]})
        return True

    def model_choices(self) -> tuple[str | None, list[tuple[str, str]]]:
        """(current model id, [(id, label)…]) from the agent's config option of category
        ``model``, else its ``models`` state, else the manifest's ``models``."""
        option = next((o for o in self.conversation.config_options if o.get("category") == "model"), None)
        if option is not None:
            return option.get("currentValue"), flatten_options(option.get("options") or [])
        if self.models:
            available = self.models.get("availableModels") or []
            return self.models.get("currentModelId"), [(m.get("modelId"), m.get("name") or m.get("modelId"))
                                                       for m in available if m.get("modelId")]
        manifest = self.harness.harness.models or []
        return None, [(m.id, m.label_text() if hasattr(m, "label_text") else m.id) for m in manifest]

    async def set_model(self, model_id: str) -> bool:
        """Change the model: the manifest's ``acp.modelOption`` config option when given
        (or the agent's option of category ``model``), else ``session/set_model`` — not
        in the SDK's typed API (removed from the spec, still used by Goose), sent raw."""
        await self.ready()
        option_id = self.harness.harness.acp.model_option
        ids = {o.get("id") for o in self.conversation.config_options}
        if option_id is None or option_id not in ids:
            option_id = next((o.get("id") for o in self.conversation.config_options if o.get("category") == "model"),
                             None)
        if option_id is not None:
            return await self.set_config_option(option_id, model_id)
        previous = (self.models or {}).get("currentModelId")
        if self.models is not None:
            self.models["currentModelId"] = model_id
            self.conversation.notify_state("models")
        try:
            await raw_request(self._conn, "session/set_model", {"sessionId": self.session_id, "modelId": model_id})
        except (acp.RequestError, ConnectionError) as exc:
            if self.models is not None:
                self.models["currentModelId"] = previous
                self.conversation.notify_state("models")
            self.conversation.add_notice(f"The agent refused the model {model_id!r}: {exc}", level="warning")
            return False
        return True

    def _notify_status(self) -> None:
        self.on_status.emit(self)

    async def _mode_policy(self, card: PermissionCard) -> None:
        """The Escouade mode as a policy (runs after the rule plugins)."""
        call = card.tool_call
        if self.escouade_mode == "bypassPermissions":
            card.choose(card._first_kind("allow_once", "allow_always"), by="the mode (bypass permissions)")
        elif self.escouade_mode == "acceptEdits" and call is not None and call.kind in ("edit", "delete", "move"):
            paths = _paths_of(call)
            if paths and all(_inside(p, self.cwd) for p in paths):
                card.choose(card._first_kind("allow_once", "allow_always"), by="the mode (accept edits)")

    # -- questions --------------------------------------------------------------------------------
    async def _on_elicitation(self, message: str, mode: dict[str, Any]) -> dict[str, Any]:
        url = mode.get("url")
        question = Question("", message=message, mode="url" if url else "form",
                            schema=mode.get("requestedSchema"), url=str(url) if url else None,
                            tool_call_id=mode.get("toolCallId"), elicitation_id=mode.get("elicitationId"))
        card = self._add_question(question)
        return await card.wait()

    def _add_question(self, question: Question) -> QuestionCard:
        self.conversation.add_question(question)
        card = QuestionCard(self, question)
        self._questions_pending.append(card)
        self._new_questions.put_nowait(card)
        self._set_status("waiting")
        return card

    def _question_settled(self, card: QuestionCard) -> None:
        if card in self._questions_pending:
            self._questions_pending.remove(card)
        if card.question.mode == "text" and card.question.state == "accept":
            self.send(plans.answers_prompt(card.question.questions, card.question.answer or {}))
        if not self._questions_pending and not self._pending_cards and self.status == "waiting":
            self._set_status("working" if self._turn is not None else "idle")

    def _questions_from_text(self, turn: Turn) -> None:
        if not self.harness.harness.acp.questions_in_text:
            return
        questions = plans.questions_in(turn.text)
        if questions:
            self._add_question(Question("", message="", mode="text", questions=questions))

    async def next_question(self, timeout: float | None = None) -> QuestionCard:
        """The next question card not handed out yet (waits for one)."""
        return await self._next(self._new_questions, timeout, "question")

    @property
    def pending_questions(self) -> list[QuestionCard]:
        return list(self._questions_pending)

    # -- permissions -------------------------------------------------------------------------
    async def _on_permission(self, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> dict[str, Any]:
        perm = self.conversation.add_permission(tool_call, options)
        perm.plan = plans.plan_of(perm.tool_call, self.harness.harness.acp.tools)
        card = PermissionCard(self, perm)
        self._pending_cards.append(card)
        self._new_cards.put_nowait(card)
        tcid = perm.tool_call.tool_call_id if perm.tool_call else ""
        if self._closing or self.status in ("exited", "closed"):
            card.cancel("agent closed")
        elif tcid in self._early_cancels:
            self._early_cancels.discard(tcid)
            card.cancel("the agent withdrew it")
        elif perm.plan is None and self._active_policies():
            self.conversation.set_deciding(perm, True)
            task = asyncio.get_running_loop().create_task(self._consult(card))
            self._turn_tasks.add(task)
            task.add_done_callback(self._turn_tasks.discard)
        else:
            self._set_status("waiting")
        return await card.wait()

    async def _consult(self, card: PermissionCard) -> None:
        """Ask each policy in turn; the first that settles the card wins. The user may
        answer meanwhile. If none settles it, the user is called (``waiting``)."""
        for policy in self._active_policies():
            if card.state != "pending":
                return
            try:
                await policy(card)
            except Exception:
                log.exception("permission policy %r failed; the user decides", policy)
        if card.state == "pending":
            self.conversation.set_deciding(card.permission, False)
            self._set_status("waiting")

    def _active_policies(self) -> list[Policy]:
        """Rule plugins first (a team's denial beats the mode), then the mode."""
        extra = [self._mode_policy] if self.escouade_mode in ("acceptEdits", "bypassPermissions") else []
        return [*self.policies, *extra]

    def _card_settled(self, card: PermissionCard) -> None:
        if card in self._pending_cards:
            self._pending_cards.remove(card)
        if not self._pending_cards and not self._questions_pending and self.status == "waiting":
            self._set_status("working" if self._turn is not None else "idle")

    async def next_permission(self, timeout: float | None = None) -> PermissionCard:
        """The next permission card of this agent not handed out yet (waits for one).
        Raises ``TimeoutError`` after ``timeout`` seconds, :class:`AgentError` if the
        agent ends first."""
        return await self._next(self._new_cards, timeout, "permission request")

    async def _next(self, queue: asyncio.Queue, timeout: float | None, what: str):
        if not queue.empty():
            return queue.get_nowait()
        getter = asyncio.ensure_future(queue.get())
        exited = asyncio.ensure_future(self._exited.wait())
        try:
            done, _ = await asyncio.wait({getter, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        if exited in done:
            raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
        raise TimeoutError(f"no {what} from {self.name!r} within {timeout} s")

    # -- closing ------------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session: close stdin, then terminate the process group."""
        self._closing = True
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:
                pass
        if self._process is not None:
            await terminate_group(self._process)
        if self._main_task is not None:
            with anyio.move_on_after(5):
                await self._exited.wait()
        if self.status not in ("failed", "exited"):
            self._set_status("closed")

    def kill_now(self) -> None:
        """Kill the process group synchronously (interpreter exit), and its terminals."""
        self._closing = True
        if self.transcript is not None:
            self.transcript.flush()
        if self.client is not None:
            self.client.terminals.kill_now()
        if self._process is not None and self._process.returncode is None:
            kill_group_now(self._process.pid)

    def __repr__(self) -> str:
        return f"<Agent {self.name} ({self.harness.id}) {self.status}>"


def _blocks(prompt: str | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    out = []
    for block in prompt:
        if isinstance(block, str):
            out.append({"type": "text", "text": block})
        elif hasattr(block, "model_dump"):
            out.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        else:
            out.append(dict(block))
    return out


def _replay_key(update: Any) -> str:
    """How an update replayed by ``session/load`` is recognised as one the transcript
    already has: a message chunk by its role and content (agents replay them with or
    without their ``messageId``), anything else whole."""
    if isinstance(update, dict) and update.get("sessionUpdate") in (
            "user_message_chunk", "agent_message_chunk", "agent_thought_chunk"):
        return json.dumps([update["sessionUpdate"], update.get("content")], sort_keys=True)
    return json.dumps(update, sort_keys=True)


ATTACH_EMBED_MAX = 4 * 1024 * 1024
"""An attached file bigger than this (bytes) is sent as a link, not embedded."""


def _attachment(path: Path) -> dict[str, Any]:
    """The content block of an attached file (see :meth:`Agent.send`)."""
    import base64
    import mimetypes
    import os

    path = Path(os.path.abspath(path))
    mime = mimetypes.guess_type(path.name)[0]
    link = {"type": "resource_link", "uri": path.as_uri(), "name": path.name, **({"mimeType": mime} if mime else {})}
    if path.stat().st_size > ATTACH_EMBED_MAX:
        return link
    data = path.read_bytes()
    if mime is not None and mime.startswith("image/"):
        return {"type": "image", "mimeType": mime, "data": base64.b64encode(data).decode("ascii")}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return link
    return {"type": "resource", "resource": {"uri": path.as_uri(), "mimeType": mime or "text/plain", "text": text}}


def _paths_of(call: ToolCall) -> list[str]:
    """The files a tool call aims at: its locations, diff paths, and path-like inputs."""
    paths = [loc.get("path") for loc in call.locations if loc.get("path")]
    paths += [c.get("path") for c in call.content if c.get("type") == "diff" and c.get("path")]
    if isinstance(call.raw_input, dict):
        for key in ("path", "file_path", "filePath", "filename", "notebook_path"):
            if isinstance(call.raw_input.get(key), str):
                paths.append(call.raw_input[key])
    return paths


def _inside(path: str, folder: Path) -> bool:
    p = Path(path)
    p = (p if p.is_absolute() else folder / p).resolve()
    return p == folder or folder in p.parents


async def raw_request(conn: Any, method: str, params: dict[str, Any]) -> Any:
    """Send a request the SDK's typed API does not have (``session/set_model``). The
    SDK exposes no public way to send a method without the extension ``_`` prefix, so
    this reaches its JSON-RPC connection (``ClientSideConnection._conn``)."""
    return await conn._conn.send_request(method, params)


class _AgentClient(EscouadeClient):
    """The client handlers plus the question route (elicitation), which needs the agent."""

    def __init__(self, agent: Agent, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._agent = agent

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        from acp.schema import (AcceptElicitationResponse, CancelElicitationResponse,
                                DeclineElicitationResponse)
        raw = mode.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(mode, "model_dump") else mode
        answer = await self._agent._on_elicitation(message, raw)
        if answer["action"] == "accept":
            return AcceptElicitationResponse(action="accept", content=answer.get("content"))
        if answer["action"] == "decline":
            return DeclineElicitationResponse(action="decline")
        return CancelElicitationResponse(action="cancel")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        """The agent says a URL elicitation is done: its card is settled as accepted."""
        for card in self._agent.pending_questions:
            if card.question.elicitation_id == elicitation_id:
                card.accept({})



def _missing_harness(harness_id: str) -> HarnessRef:
    """A stand-in for a harness whose manifest has gone (its agents stay readable)."""
    from ..manifest import Harness, Manifest
    plugin, _, short = harness_id.rpartition(":")
    manifest = Manifest(id=plugin.removeprefix("plugin:") or "missing", name="(missing)")
    return HarnessRef(manifest=manifest, harness=Harness(id=short or harness_id, name=short or harness_id,
                                                         acp={"args": []}),
                      path=Path("(missing)"), source="extra")
