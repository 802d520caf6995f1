"""One agent of the squad: a façade over its current session and the parts that outlive it.

The engine works without Jupyter: in a plain ``asyncio.run`` script,
``agent = Agent(ref, program=...); agent.start(); await agent.ready()`` then
``await agent.send("hi")``. In a kernel the magics do the same on the kernel's loop;
views subscribe to ``agent.conversation`` and to ``agent.on_status``.

What lives as long as the agent: its configuration, the :class:`Conversation`, the
status, the turn queue (:mod:`.turns`), the dials (:mod:`.controls`). What lives as long
as one process — the :class:`~..wire.session.AgentSession`, its cards
(:class:`~.cards.CardDesk`), its files and terminals (:class:`~.workspace.Workspace`),
its per-session flags — is one :class:`~.live.Live` object: ``restart()`` replaces it
whole, so no state of a dead process survives by construction.

This class is the public surface; the work is in the modules named above.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ..core import plans
from ..core.conversation import Change, Conversation, Question, ToolCall
from ..core.observers import Observers
from ..core.prompt import blocks
from ..core.status import BUSY, ENDED, AgentStatus, InvalidTransition
from ..manifest import HarnessRef
from ..manifest.project import Project, project_id
from ..wire.errors import AgentError, AgentExited, AuthRequired, running_loop
from ..wire.process import StderrRing, kill_group_now
from ..wire.session import AgentSession, SessionPage
from ..wire.transcript import Transcript
from .cards import PermissionCard, Policy, QuestionCard
from .controls import Controls
from .kernel_access import context_blocks
from .kernel_access import in_kernel as kernel_in_process
from .launcher import launch_argv
from .live import Live, start_limit
from .record import ConversationRecord
from .resume import ReplaySkip, resumed
from .turns import Turn, TurnQueue
from .worktree import Worktree

log = logging.getLogger(__name__)

__all__ = ["Agent", "AgentError", "AgentExited", "AuthRequired", "PermissionCard", "QuestionCard", "Turn", "Policy",
           "Live"]


class Agent:
    """One harness agent. ``status`` is an :class:`~..core.status.AgentStatus` (a str:
    ``starting``, ``idle``, ``working``, ``waiting`` — a card waits for the user —,
    ``sign-in``, ``exited`` — the process ended by itself —, ``closed``, ``failed`` —
    could not start —, ``resumable``, ``harness missing``). ``on_status`` observers get
    the agent.

    ``program`` is the located executable; ``cwd`` the session folder (absolute);
    ``name`` the agent's name in the squad. ``policies`` are consulted on every
    permission request before the user is called (see :data:`~.cards.Policy`). ``mode``
    an Escouade mode set once the session exists; ``via`` a launcher prefix; ``fs``
    overrides whether client fs is offered; ``project`` the folder's
    :class:`~..manifest.project.Project`; ``env`` extra environment for the agent.
    ``kernel_tools``: give the agent the kernel's MCP server (variables, cells,
    ``run_code`` behind a card; default: when running in a kernel); ``mcp``: which of
    your ``mcp.json`` servers it gets (None: all of them; ``[]``: none).
    ``start_timeout``: seconds a start may wait for the agent's answers to ``initialize``
    and ``session/new`` (None: ``$ESCOUADE_NB_START_TIMEOUT``'s, else no limit — it waits
    while the process lives, saying how long, and Stop ends it; 0: no limit).
    ``add_dirs``: more folders of the session (ACP ``additionalDirectories``, relative
    ones against ``cwd``; a private project's fence takes them in). ``system_prompt``
    (``system_prompt_mode`` ``"append"`` or ``"override"``): ACP ``systemPrompt`` where
    the agent offers it, else sent before the first prompt. ``session_id``: one of the
    agent's own sessions (:meth:`sessions`) to open instead of a new one (``session/load``
    for its replay, else ``session/resume``; a new session, said so, when neither).
    Raises :class:`AgentError` for a mode the harness lacks, or an ``"fs": false``
    harness in a private project."""

    def __init__(self, harness: HarnessRef, *, program: str, name: str | None = None,
                 cwd: str | Path | None = None, start_timeout: float | None = None,
                 policies: Sequence[Policy] = (), mode: str | None = None, record: bool = True,
                 via: Sequence[str] = (), fs: bool | None = None, project: Project | None = None,
                 env: dict[str, str] | None = None, kernel_tools: bool | None = None,
                 mcp: Sequence[str] | None = None, add_dirs: Sequence[str | Path] = (),
                 system_prompt: str | None = None, system_prompt_mode: str = "append",
                 session_id: str | None = None) -> None:
        self.harness = harness
        self.program = program
        self.name = name or harness.short_id
        self.cwd = Path(cwd or Path.cwd()).resolve()
        # seconds a start waits for initialize / session/new; None: as long as the process lives
        self.start_timeout = start_limit() if start_timeout is None else (start_timeout or None)
        self.policies: list[Policy] = list(policies or [])
        self.via = list(via)
        self.extra_env = dict(env or {})  # e.g. the account's folder in the manifest's accountVar
        self.project = project  # None: not private, the folder's own project
        self.record = record
        self._fs_override = fs
        self.kernel_tools = kernel_in_process() if kernel_tools is None else bool(kernel_tools)
        self.mcp: list[str] | None = None if mcp is None else list(mcp)
        # ACP additionalDirectories (absolute; relative ones are against cwd): sent where offered, fenced in
        self.add_dirs: list[Path] = [(self.cwd / d).resolve() for d in add_dirs]
        if system_prompt_mode not in ("append", "override"):
            raise AgentError(f"system_prompt_mode must be 'append' or 'override', not {system_prompt_mode!r}")
        self.system_prompt = system_prompt  # the user's --system-prompt (ACP systemPrompt where offered)
        self.system_prompt_mode = system_prompt_mode
        self.conversation = Conversation()
        self.keeper = ConversationRecord(self)  # its notices and card answers in the transcript
        self.status = AgentStatus.STARTING
        self.error: str | None = None
        self.on_status: Observers[[Agent]] = Observers(f"status of {self.name}")
        self.controls = Controls(self)
        self.turns = TurnQueue(self)
        self.live: Live | None = None
        self._transcript: Transcript | None = None
        self.previous_transcript: Path | None = None  # the file before a restart (its header names it)
        self.auth_required: AuthRequired | None = None
        self.auth_prompt: list[dict[str, Any]] | None = None  # the prompt refused with auth_required (-32000)
        self.sign_in_job: Any = None  # the terminal sign-in running (engine/sign_in.py), else None
        self.sign_in_retry: Turn | None = None  # the refused prompt, sent again after a terminal sign-in
        self.reads_refusal_messages = False
        self.last_activity: float | None = None  # wall-clock time of the last conversation change
        self.version_checked = False  # the squad already compared the program's --version with ``tested``
        self._main_task: asyncio.Task | None = None
        self._restarting = False
        self._restart_task: asyncio.Task | None = None
        self._lifecycle = asyncio.Lock()  # restart and close, one at a time
        self._wake = asyncio.Event()
        self._resume_id: str | None = session_id  # one of the agent's own sessions to open (session/list)
        self._replay = ReplaySkip()
        self.worktree: Worktree | None = None  # its own git worktree and branch (``--worktree``), if any
        self._preparing: asyncio.Task | None = None  # work before the first start (its worktree being made)
        self._primer: dict[str, Any] | None = None  # a fork's conversation so far, sent with its first prompt
        self._restat: asyncio.Task | None = None  # its worktree's diff stat re-counted after a turn (close() cancels)
        self.sessions_elsewhere: dict[str, str] = {}  # session id -> its folder, of session/list rows not of cwd
        self.sessions_hidden = 0  # rows of other folders left out of the last session/list page
        self._stop_task: asyncio.Task | None = None  # Stop pressed while it starts: its process ended (awaited by close)
        self.conversation.subscribe(self._collect)
        if mode is not None and mode != "default" and mode not in self.escouade_modes():
            raise AgentError(f"{harness.harness.display_name} does not offer the mode {mode!r}; it offers: "
                             f"{', '.join(self.escouade_modes())}")
        self._initial_mode = mode
        if self.private and harness.harness.acp.fs is False:
            raise AgentError(f"{harness.harness.display_name} reads and writes files by itself (its manifest says "
                             f'"fs": false), so it cannot run in a private project: the fence would not hold')

    # -- what the current session knows -----------------------------------------------------
    @property
    def session(self) -> AgentSession | None:
        return self.live.session if self.live is not None else None

    def _of_session(self, attr: str, default: Any = None) -> Any:
        return getattr(self.live.session, attr) if self.live is not None else default

    pid = property(lambda self: self._of_session("pid"), doc="The process id (its process group's too).")
    alive = property(lambda self: bool(self._of_session("alive", False)), doc="Whether the process runs.")
    session_id = property(lambda self: self._of_session("session_id"), doc="ACP's ``sessionId``.")
    agent_info = property(lambda self: self._of_session("agent_info"), doc="``initialize``'s ``agentInfo``.")
    agent_capabilities = property(lambda self: self._of_session("agent_capabilities", {}),
                                  doc="``initialize``'s ``agentCapabilities`` (wire dict).")
    auth_methods = property(lambda self: self._of_session("auth_methods", []), doc="Its ``authMethods``.")
    exit = property(lambda self: self._of_session("exit"), doc="How the process ended (:class:`ExitInfo`).")
    transport = property(lambda self: self._of_session("transport"), doc="The session's line transport.")
    client = property(lambda self: self._of_session("client"), doc="Our ACP client handlers (fs, terminals).")
    stderr = property(lambda self: self._of_session("stderr") or StderrRing(), doc="Its stderr (newest 64 KiB).")

    @property
    def kernel_tools_state(self) -> tuple[str, str]:
        """What the current session has of the kernel's MCP server, and why: ``off`` (not
        asked), ``pending`` (starting), ``offered``, ``connected``, ``not offered`` (the
        reason says why)."""
        if self.live is None:
            return ("pending" if self.kernel_tools else "off"), ""
        return self.live.kernel.state, self.live.kernel.why

    @property
    def start_waiting(self) -> str | None:
        """While it starts, what it waits for and how long (``waiting 1 min 05 s for its
        answer to initialize``; redrawn every few seconds: ``on_status``), else None."""
        return self.live.waiting_text() if self.live is not None else None

    @property
    def restarting(self) -> bool:
        """A restart is under way: the old process is closing, a new one comes."""
        return self._restarting

    @property
    def pending_cards(self) -> list[PermissionCard]:
        return list(self.live.desk.cards) if self.live is not None else []

    @property
    def pending_questions(self) -> list[QuestionCard]:
        return list(self.live.desk.questions) if self.live is not None else []

    @property
    def escouade_mode(self) -> str | None:
        """Escouade's mode the agent is in (see :meth:`set_escouade_mode`): the agent's own
        mode mapped back through the manifest; None when it is in a mode none maps to."""
        return self.controls.mode

    @property
    def models(self) -> dict[str, Any] | None:
        return self.controls.models

    @property
    def private(self) -> bool:
        return bool(getattr(self.project, "private", False))

    @property
    def fence(self) -> Path | None:
        """The folder the client's fs is fenced to: a private project's folder, else None."""
        if not self.private:
            return None
        return Path(getattr(self.project, "folder", None) or self.cwd)

    @property
    def uses_client_fs(self) -> bool:
        """Whether we offer ``fs/*``: the manifest's ``acp.fs`` (default true), but not
        through a launcher — the files are not ours — unless told otherwise."""
        if self._fs_override is not None:
            return self._fs_override and self.harness.harness.acp.fs is not False
        return self.harness.harness.acp.fs is not False and not self.via

    def argv(self) -> list[str]:
        """The command line: ``[*via, program, *acp.args]`` — ``via`` is a launcher
        prefix such as ``ssh host`` or ``kubectl exec -i POD --`` (ACP is plain stdio);
        through ``ssh``, the remote command is quoted and wrapped so that ending the local
        ``ssh`` ends the remote agent too (:mod:`.launcher`)."""
        return launch_argv(self.via, [self.program, *self.harness.harness.acp.args])

    def terminal_snapshot(self, terminal_id: str) -> tuple[str, bool, Any] | None:
        """(output, truncated, exit status) of a terminal of the current session, or None."""
        return self.live.workspace.snapshot(terminal_id) if self.live is not None else None

    async def to_notebook(self, path: str | Path, *, title: str | None = None, force: bool = False) -> Path:
        """Export the conversation so far as a Jupyter notebook at ``path`` (absolute
        path returned): messages, tool calls with their diffs and outputs, cards with who
        answered, notices, and the code run through the kernel's ``run_code`` as code
        cells (:mod:`.export`). ``ValueError`` unless ``path`` ends in ``.ipynb``,
        ``FileExistsError`` for an existing file unless ``force``."""
        from .export import to_notebook

        spec = self.harness.harness
        info = {"name": self.name, "harness": self.harness.id, "display_name": spec.display_name,
                "version": (self.agent_info or {}).get("version"), "cwd": str(self.cwd),
                "session_id": self.session_id, "speaker": spec.speaker or spec.display_name}
        return await to_notebook(self.conversation, path, title=title, agent=info, force=force)

    # -- status -----------------------------------------------------------------------------------
    def set_status(self, status: AgentStatus | str) -> None:
        """Move the status machine; :class:`InvalidTransition` for a move it lacks."""
        status = AgentStatus(status)
        if status is self.status:
            return
        if not self.status.can_go(status):
            raise InvalidTransition(f"agent {self.name!r}: {self.status} -> {status}")
        self.status = status
        self.on_status.emit(self)

    def mark(self, status: AgentStatus, error: str | None = None) -> None:
        """The initial status of an agent rebuilt from its transcript (before anyone
        subscribes): ``resumable`` or ``harness missing``."""
        self.status, self.error = status, error

    def notify_status(self) -> None:
        """Tell status observers that something they show changed (a mode)."""
        self.on_status.emit(self)

    def wake_waiters(self) -> None:
        """Wake every ``ready()`` / ``next_permission()`` / ``next_question()`` wait: a
        card came, the session became ready, wants a sign-in, or ended."""
        self._wake.set()
        self._wake = asyncio.Event()

    def cards_waiting(self) -> None:
        if self.status in (AgentStatus.IDLE, AgentStatus.WORKING):
            self.set_status(AgentStatus.WAITING)

    def cards_answered(self) -> None:
        if self.status is AgentStatus.WAITING:
            self.set_status(AgentStatus.WORKING if self.turns.current is not None else AgentStatus.IDLE)

    def _collect(self, changes: list[Change]) -> None:
        self.last_activity = time.time()
        if self.live is not None:
            self.live.workspace.changed(changes)
            if self.live.desk.grants:
                for change in changes:
                    if isinstance(change.item, ToolCall):
                        self.live.desk.note_unasked(change.item)
        turn = self.turns.current
        if turn is not None and not turn.done:
            turn.items.extend(c.item for c in changes if c.kind == "added" and c.item is not None)

    # -- start ----------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        """Schedule the start on the running loop and return at once (a no-op while a
        process of this agent is running or starting)."""
        if self._preparing is not None and not self._preparing.done():
            return self._preparing  # it starts the agent when done (or fails it)
        if self._main_task is None:
            running_loop(f"starting agent {self.name!r}")  # NoEventLoop, said plainly, before anything changes
            if self.status is not AgentStatus.STARTING:
                self.set_status(AgentStatus.STARTING)
            live = Live(self, resume=self._resume_id, replay=self._replay,
                        mode=self._initial_mode if self._initial_mode is not None else self.controls.chosen)
            self.live, self._initial_mode, self._resume_id, self._replay = live, None, None, ReplaySkip()
            self._main_task = asyncio.get_running_loop().create_task(live.run(), name=f"escouade agent {self.name}")
        return self._main_task

    def prepare_then_start(self, coro: Any, *, name: str) -> asyncio.Task:
        """Run ``coro`` (the agent's preparation: its worktree made…) before the first
        start: ``start()`` and ``ready()`` wait for it; then the agent starts, or, when it
        raises, fails with its message (status ``failed``, one line in the conversation)."""
        async def prepare() -> None:
            try:
                await coro
            except Exception as exc:
                self._preparing = None
                self.fail_start(str(exc))
                return
            self._preparing = None
            self.start()
        self._preparing = task = asyncio.get_running_loop().create_task(prepare(), name=name)
        task.add_done_callback(lambda _t: coro.close())  # cancelled before it began: never left un-awaited
        return task

    async def _restat_worktree(self) -> None:
        """Re-count the worktree's diff stat; the views redraw their header."""
        worktree = self.worktree
        if worktree is None:
            return
        try:
            await worktree.diffstat()
        except Exception as exc:  # the worktree removed behind our back…: said once in the log
            log.info("diff stat of %s: %s", self.name, exc)
            return
        self.notify_status()

    def fork(self, name: str | None = None) -> Agent:
        """A new agent of this harness carrying this conversation, in the squad
        (:meth:`~.squad.Squad.fork`: ``session/fork`` where offered, else the conversation
        as context of its first prompt); returned at once, starting."""
        from .squad import get_squad
        return get_squad().fork(self, name)

    def fail_start(self, message: str) -> None:
        """The start cannot happen (its worktree was refused…): ``failed``, saying why."""
        self.error = message
        self.conversation.add_notice(message, level="error")
        if self.status is not AgentStatus.FAILED:
            self.set_status(AgentStatus.FAILED)
        self.wake_waiters()

    async def authenticate(self, method_id: str) -> Agent:
        """Sign in with one of the agent's ``authMethods`` (agent type: ACP
        ``authenticate``), then retry the session once. A terminal-type method
        (``{"type": "terminal", "args", "env"}``) is never called: the agent's own command
        plus its ``args`` runs in a client terminal shown in the view (answer what it
        reads with :meth:`sign_in_input`); on exit 0 the agent is restarted and the prompt
        it refused is sent once more (``sign_in_retry``). Raises ``ValueError`` for a
        method it does not offer, :class:`AuthRequired` when still not signed in,
        :class:`AgentError` when the sign-in fails (a terminal program's non-zero exit)."""
        method = next((m for m in self.auth_methods if m.get("id") == method_id), None)
        if method is None:
            raise ValueError(f"no sign-in method {method_id!r}; the agent offers: "
                             f"{', '.join(m.get('id', '?') for m in self.auth_methods) or 'none'}")
        if method.get("type") == "terminal":
            if self.sign_in_job is not None:
                raise AgentError(f"a sign-in of {self.name!r} is already running: answer it (sign_in_input)")
            from .sign_in import sign_in_with_terminal

            await sign_in_with_terminal(self, method)
            return self
        await self.live.authenticate(method_id)
        return self

    async def sign_in_input(self, text: str) -> None:
        """Answer the running terminal sign-in: ``text`` and a newline on its program's
        stdin. :class:`AgentError` when no terminal sign-in runs."""
        if self.sign_in_job is None:
            raise AgentError(f"no terminal sign-in of {self.name!r} is running")
        await self.sign_in_job.send(text)

    async def ready(self) -> Agent:
        """Wait until the session exists; raises :class:`AuthRequired` while the agent
        wants a sign-in, :class:`AgentError` if the start failed or the agent ended."""
        self.start()
        while True:
            wake, live = self._wake, self.live
            if live is not None and live.ready.is_set() and not (live.ended or live.session.closing):
                return self
            if self.auth_required is not None and self.status is AgentStatus.SIGN_IN:
                raise self.auth_required
            if self.status in ENDED and not self._restarting:
                raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
            await wake.wait()

    async def ready_session(self) -> AgentSession:
        """The current session, once ready (see :meth:`ready`)."""
        await self.ready()
        return self.live.session

    def transcript_failed(self, exc: OSError) -> None:
        """The transcript could not be written: the conversation warns (the transcript
        itself tells once)."""
        self.conversation.add_notice(f"The transcript could not be written ({exc.strerror or exc}); the session goes "
                                     f"on, but it will not be resumable after a kernel restart.", level="warning")

    # -- turns ---------------------------------------------------------------------------------------
    def send(self, prompt: str | Sequence[Any], *, attach: Sequence[str | Path] = (),
             variables: Sequence[str] = (), cells: Sequence[int] | str = ()) -> Turn:
        """Queue a prompt turn and return its :class:`Turn` at once. ``prompt`` is text,
        or a list of ACP content blocks (dicts or SDK models). One turn runs at a time;
        later sends wait their turn in order.

        ``attach``: files sent along (relative paths are taken in the agent's folder;
        ``FileNotFoundError`` at once for a missing one), read in a thread when the turn
        runs: an image as an image block, a UTF-8 text file as an embedded resource,
        anything else (or bigger than 4 MiB) as a ``resource_link`` to its ``file://``
        URI. What the agent does not take (``promptCapabilities``) becomes a link, or is
        left out with a notice (images).

        ``variables``: names of the kernel's variables sent along, each as a resource block
        with its summary (type, shape, dtypes, head… — what the kernel's
        ``inspect_variable`` tool gives), taken now; ``cells``: execution counts
        (``[3, 4]`` or ``"3-5"``) whose In/Out are sent along. ``KeyError`` for a variable
        the kernel lacks, ``ValueError`` for a cell that was not run."""
        context = context_blocks(variables, cells) if variables or cells else []
        paths = [self.cwd / p for p in attach]  # the folder is absolute; an absolute path stays itself
        for path in paths:
            if not path.is_file():
                raise FileNotFoundError(f"no file to attach: {path}")
        return self.turns.send(Turn(self, [*blocks(prompt), *context], attach=paths))

    def take_primer(self) -> dict[str, Any] | None:
        """A fork's conversation so far (:func:`~..core.prompt.carried_conversation`), once:
        the turn that sends it takes it (and puts it back when the agent refused the prompt
        for a sign-in)."""
        primer, self._primer = self._primer, None
        return primer

    def cancel(self) -> None:
        """Stop the running turn: send ``session/cancel``, answer every pending card
        ``cancelled`` (ACP requires the client to), mark unfinished tool calls cancelled.
        The turn then ends with the agent's stop reason (``cancelled``). Queued turns
        stay queued. While the agent starts (no session yet), Stop ends the start: its
        process group is ended at once (no grace for a session it never had), the status
        is ``closed`` and the conversation says so; Restart starts it again."""
        live = self.live
        if self.status is AgentStatus.STARTING and live is not None and not self._restarting:
            self._stop_task = asyncio.get_running_loop().create_task(live.stop_start(),
                                                                      name=f"escouade stop start {self.name}")
            return
        self.turns.cancel()

    def questions_from_text(self, turn: Turn) -> None:
        """A ``questionsInText`` harness ended its turn on an ``<escouade_question>``
        block: a question card."""
        if self.harness.harness.acp.questions_in_text and self.live is not None:
            questions = plans.questions_in(turn.text)
            if questions:
                self.live.desk.add_question(Question("", message="", mode="text", questions=questions))

    def turn_ended(self, turn: Turn) -> None:
        if self.transcript is not None:  # a turn's end is on disk, whatever comes next
            self.transcript.flush()
        self.conversation.settle_rejected()
        self.conversation.close_messages()
        if self.live is not None:
            self.live.kernel.turn_ended()  # an allowance of its own run_code request does not outlive the turn
        if self.worktree is not None and (self._restat is None or self._restat.done()):
            self._restat = asyncio.get_running_loop().create_task(self._restat_worktree(),
                                                                  name=f"escouade diff stat of {self.name}")
        if self.status in BUSY:
            waiting = self.live is not None and (self.live.desk.cards or self.live.desk.questions)
            self.set_status(AgentStatus.WAITING if waiting else AgentStatus.IDLE)

    # -- cards -----------------------------------------------------------------------------------------
    def active_policies(self) -> list[Policy]:
        """Rule plugins first (a team's denial beats the mode), then the kernel's reads
        (:meth:`.kernel_access.KernelAccess.policy`), then the mode."""
        kernel = self.live.kernel.policy if self.live is not None and self.live.kernel.server_names else None
        return [*self.policies, *([kernel] if kernel else []), *([self.controls.policy] if self.controls.applies else [])]

    # -- rule plugins ------------------------------------------------------------------------------------
    @property
    def project_folder(self) -> Path:
        """The folder that is this agent's project for rule plugins (what ``%escouade
        plugins on PLUGIN --project DIR`` takes): its project's folder, or, for an agent in a
        worktree, the folder in the repository it was started from (its project's id)."""
        project = self.project or Project.for_folder(self.cwd)
        candidates = [project.folder, self.cwd]
        if self.worktree is not None and self.cwd.is_relative_to(self.worktree.path):
            candidates += [self.worktree.repo / self.cwd.relative_to(self.worktree.path), self.worktree.repo]
        return next((Path(c) for c in candidates if project_id(c) == project.id), Path(project.folder))

    def rules_guarding(self) -> list[tuple[str, str]]:
        """The rule plugins that answer this agent's permissions, ``[(plugin id, display
        name), …]`` (each a ``RuleGuard`` named tuple: ``.id``, ``.name``): those on for its
        project (its folder), granted and runnable, of the policies that know rule plugins
        (the squad's broker). Cheap and side-effect free (no plugin started): for views."""
        project = self.project or Project.for_folder(self.cwd)
        out: list[tuple[str, str]] = []
        for policy in self.policies:
            guarding = getattr(policy, "guarding", None)
            if callable(guarding):
                out += [g for g in guarding(project) if g not in out]
        return out

    def rules_hint(self) -> str | None:
        """None when a rule plugin guards this agent (:meth:`rules_guarding`); else one line
        saying how to turn one on for its own project — ``%escouade plugins on PLUGIN
        --project FOLDER``, its folder, which may not be the kernel's."""
        project = self.project or Project.for_folder(self.cwd)
        hints = [p.hint for p in self.policies if callable(getattr(p, "hint", None))
                 and callable(getattr(p, "guarding", None))]
        if not hints:
            return (f"No rule plugin answers {self.name}'s permissions: it was started without them "
                    f"(the squad's agents have them: `%escouade NAME`)")
        folder = self.project_folder
        said = [hint(project, folder) for hint in hints]
        return None if None in said else said[0]

    async def next_permission(self, timeout: float | None = None) -> PermissionCard:
        """The next permission card of this agent not handed out yet (waits for one).
        Raises ``TimeoutError`` after ``timeout`` seconds, :class:`AgentError` if the
        agent ends first. A wait that is cancelled takes no card."""
        return await self._next("permission", timeout, "permission request")

    async def next_question(self, timeout: float | None = None) -> QuestionCard:
        """The next question card not handed out yet (waits for one; as :meth:`next_permission`)."""
        return await self._next("question", timeout, "question")

    async def _next(self, kind: str, timeout: float | None, what: str) -> Any:
        try:
            with anyio.fail_after(timeout):
                while True:
                    wake, live = self._wake, self.live
                    card = live.desk.take(kind) if live is not None else None
                    if card is not None:
                        return card
                    if self.status in ENDED:  # set once the session's end is handled (cards closed)
                        raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
                    await wake.wait()
        except TimeoutError:
            raise TimeoutError(f"no {what} from {self.name!r} within {timeout} s") from None

    # -- modes, config options, models (see .controls) --------------------------------------------
    def escouade_modes(self) -> dict[str, str]:
        return self.controls.escouade_modes()

    async def set_escouade_mode(self, mode: str) -> bool:
        return await self.controls.set_escouade_mode(mode)

    async def set_mode(self, mode_id: str) -> bool:
        return await self.controls.set_mode(mode_id)

    async def set_config_option(self, config_id: str, value: str | bool) -> bool:
        return await self.controls.set_config_option(config_id, value)

    def model_choices(self) -> tuple[str | None, list[tuple[str, str]]]:
        return self.controls.model_choices()

    async def set_model(self, model_id: str) -> bool:
        return await self.controls.set_model(model_id)

    # -- the agent's own sessions (ACP session/list, session/delete) -------------------------------
    async def sessions(self, cursor: str | None = None, *, everywhere: bool = False) -> SessionPage:
        """One page of the agent's own sessions for its folder (ACP ``session/list``),
        newest as the agent orders them: ``SessionPage(sessions, next_cursor)``, each
        session ``{"sessionId", "cwd", "title"?, "updatedAt"?}``; pass ``next_cursor`` for
        the next page (None: the last). Waits for the agent to be ready. ``AgentError``
        when it does not offer ``session/list``; ``acp.RequestError`` when it refuses.

        An agent may ignore the ``cwd`` asked for and list sessions of other folders: they
        are left out (``sessions_hidden`` counts those of this page), unless
        ``everywhere``; either way :attr:`sessions_elsewhere` remembers their folders, so
        that opening one (:meth:`~.squad.Squad.open_session`) opens it in its own folder."""
        page = await (await self.ready_session()).list_sessions(cursor=cursor)
        here: list[dict[str, Any]] = []
        for info in page.sessions:
            if self._of_this_folder(info.get("cwd")):
                here.append(info)
            else:
                self.sessions_elsewhere[str(info.get("sessionId"))] = str(info.get("cwd"))
        self.sessions_hidden = 0 if everywhere else len(page.sessions) - len(here)
        return page if everywhere else SessionPage(here, page.next_cursor)

    def _of_this_folder(self, cwd: Any) -> bool:
        """Whether a listed session's ``cwd`` is this agent's folder (a missing one is taken
        as asked: ACP requires it)."""
        if not isinstance(cwd, str) or not cwd:
            return True
        try:
            return Path(cwd).expanduser().resolve() == self.cwd
        except (OSError, RuntimeError):
            return False

    async def delete_session(self, session_id: str) -> None:
        """Delete one of the agent's own sessions (ACP ``session/delete``; an unknown id
        succeeds silently). ``AgentError`` when the agent does not offer it."""
        await (await self.ready_session()).delete_session(session_id)

    async def logout(self) -> None:
        """Sign out of the agent (ACP ``logout``): its sessions may then ask for a sign-in
        again. ``AgentError`` when it does not offer it (``agentCapabilities.auth.logout``)."""
        await (await self.ready_session()).logout()
        self.conversation.add_notice("Signed out (logout): the agent may ask you to sign in again.")

    # -- restart, resume, close --------------------------------------------------------------------
    async def restart(self) -> Agent:
        """Start a fresh process and session for this agent (after a crash, or to get
        out of a stuck turn): the current process is closed and its session object
        replaced. The conversation so far stays; a notice marks the restart. Queued
        turns run on the new session. Restarts and closes run one at a time; a restart
        asked while one runs joins it (a double click is one restart), and a cancelled
        wait (a kernel interrupt) does not stop it halfway."""
        task = self._restart_task
        if task is None or task.done():
            task = self._restart_task = asyncio.get_running_loop().create_task(
                self._restart(), name=f"escouade restart {self.name}")
        await asyncio.shield(task)
        await self.ready()
        return self

    async def _restart(self) -> None:
        async with self._lifecycle:
            self._restarting = True
            try:
                self.set_status(AgentStatus.STARTING)  # at once: Restart is off while the old process closes
                await self._close_session()
                self._main_task = None
                self.live = None
                self.error = None
                self.auth_required = None
                if self.transcript is not None:  # a new process, a new transcript, which names the one before
                    self.previous_transcript = self.transcript.path
                self.transcript = None
                self.conversation.add_notice("Restarted: a new process and a new session.")
                self.start()
            finally:
                self._restarting = False

    @classmethod
    def resume(cls, transcript_path: Path, harness: HarnessRef | None, *, program: str | None,
               **kwargs: Any) -> Agent:
        """An agent rebuilt from its transcript (after a kernel restart): the
        conversation is replayed at once; call ``start()`` to reattach — with
        ``session/load`` when the agent advertises ``loadSession`` (its replay is folded
        into this conversation, not appended twice), else with a new session (said so).
        ``harness`` None means its manifest has gone: the agent is listed as
        "harness missing" and its conversation stays readable."""
        return resumed(cls, transcript_path, harness, program=program, **kwargs)

    def _resume_from(self, path: Path, session_id: str | None, replay: ReplaySkip) -> None:
        self._resume_id = session_id  # the next Live reloads it
        self._replay = replay
        self.transcript = Transcript(path, on_error=self.transcript_failed)
        self.transcript.event("resume")

    async def _close_session(self) -> None:
        live, task = self.live, self._main_task
        if live is None:
            return
        if live.starting:  # no session yet: nothing to end cleanly, the process group ends at once
            await live.stop_start(by_you=False)
        else:
            await live.session.close()
        if task is not None and not task.done():
            with anyio.move_on_after(5):
                await asyncio.shield(task)

    async def close(self) -> None:
        """End the agent: close its stdin, terminate its process group, end every turn
        (the running one and the queued ones, with an error), and a terminal sign-in under
        way (its program's group). After a restart under way."""
        if self.sign_in_job is not None:
            await self.sign_in_job.stop()  # its authenticate() then fails, saying so; no restart
        async with self._lifecycle:
            for task in (self._restat, self._preparing):  # a worktree being made: this agent will not start
                if task is not None:
                    task.cancel()
            await self._close_session()
            self.turns.close()
            if self.status not in (AgentStatus.FAILED, AgentStatus.EXITED, AgentStatus.CLOSED):
                self.set_status(AgentStatus.CLOSED)
            self.wake_waiters()

    def kill_now(self) -> None:
        """Kill the process group synchronously (interpreter exit), and its terminals."""
        if self.transcript is not None:
            self.transcript.flush()
        if self.sign_in_job is not None:
            self.sign_in_job.kill_now()
        session = self.session
        if session is None:
            return
        session.closing = True
        session.client.terminals.kill_now()
        if session.alive:
            kill_group_now(session.pid)

    @property
    def transcript(self) -> Transcript | None:
        """The transcript file of the current process (None between a process and the next)."""
        return self._transcript

    @transcript.setter
    def transcript(self, transcript: Transcript | None) -> None:
        self._transcript = transcript
        if transcript is not None:
            self.keeper.attached()  # a new segment: its mark, and the notices that waited for it

    def __repr__(self) -> str:
        return f"<Agent {self.name} ({self.harness.id}) {self.status}>"


for _name in ("escouade_modes", "set_escouade_mode", "set_mode", "set_config_option", "model_choices", "set_model"):
    getattr(Agent, _name).__doc__ = getattr(Controls, _name).__doc__  # the façade says what the work does
del _name
