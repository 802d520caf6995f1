"""What one agent is made of: :class:`AgentConfig`, what it is started with (frozen, checked
once), and :class:`AgentState`, what changes, which its parts take.

:class:`~.agent.Agent` (what the user holds) is :class:`AgentState`'s subclass adding the
user's API: one object, so nothing is declared twice. :class:`AgentState` reads its start
parameters from its config (read-only) and owns everything that
changes — the status and its machine (:mod:`..core.status`), the error, the sign-in
state (``auth_required``, ``auth_prompt``, ``sign_in_job``, ``sign_in_retry``), the
transcript, the worktree, the observers and the waiters — and the parts of the agent
(:class:`~.turns.TurnQueue`, :class:`~.controls.Controls`, :class:`~.record.ConversationRecord`,
the current :class:`~.live.Live`). The parts receive this object, typed by the Protocols
of :mod:`.interfaces` (each the size of its use; never the concrete class), and change
it through its methods (:meth:`set_status`, :meth:`wake_waiters`, :meth:`cards_waiting`,
:meth:`turn_ended`…). Its optional capabilities (``file_watch``, ``sandbox``,
``worktree``…) are always attributes, None when absent (the table:
:class:`~.interfaces.OptionalParts`).

Only :mod:`.agent` (which subclasses it) and :mod:`.squad` hold the concrete class.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Never, TypeVar, cast

import anyio

from ..core import plans
from ..core.activity import Activity
from ..core.conversation import Change, Conversation, Question, ToolCall
from ..core.observers import Observers
from ..core.prompt import blocks
from ..core.status import BUSY, ENDED, AgentStatus, InvalidTransition
from ..manifest import HarnessRef, version_status
from ..manifest.project import Project
from ..wire import kernel_calls
from ..wire.errors import AgentError, AuthRequired, running_loop
from ..wire.process import kill_group_now
from ..wire.session import AgentSession
from ..wire.transcript import Transcript
from .activity import ActivityWatch
from .budget import AgentBudget
from .cards import Policy
from .review.cell_review import EditReview
from .review.file_review import FileWatch
from .review.checkpoints import Checkpoints
from .controls import Controls
from .interfaces import Forker
from .kernel_access import in_kernel as kernel_in_process
from .launch import remote
from .launch.launcher import launch_argv
from .live import Live, start_limit
from .record import ConversationRecord
from .resume import ReplaySkip
from .launch.sandbox import Sandbox
from .turns import Turn, TurnQueue
from .kernel_git import GitRepo
from .worktrees.worktree import Worktree

log = logging.getLogger(__name__)

__all__ = ["AgentConfig", "AgentState"]

T = TypeVar("T")


def _kernel_notebook() -> set[Path]:
    """The notebook the kernel runs (JupyterLab saves it while the agent works): not watched."""
    from .workspace import kernel_notebook_path

    path = kernel_notebook_path()
    return {path} if path is not None else set()


@dataclass(frozen=True)
class AgentConfig:
    """What one agent is started with, checked once: the keywords of
    :class:`~.agent.Agent` (documented there), made canonical — ``name`` the harness's
    short id when None, ``cwd`` absolute (the current folder when None), ``add_dirs``
    absolute (relative ones against ``cwd``), ``start_timeout`` in seconds or None (no
    limit; None given: ``$ESCOUADE_NB_START_TIMEOUT``'s, 0 given: no limit), ``kernel_tools``
    a bool (None given: whether it runs in a kernel), sequences as tuples, ``env`` a copy.
    ``sandbox``: its :class:`~.launch.sandbox.Sandbox` (``--sandbox``), else None.

    Frozen: an agent's start parameters never change under it; start another agent (or
    :func:`dataclasses.replace` a config) for other ones. Raises :class:`AgentError` naming
    the field for a value of the wrong type or out of range (``system_prompt_mode`` not
    ``"append"``/``"override"``, a negative ``start_timeout``…)."""

    harness: HarnessRef
    program: str
    name: str | None = None
    cwd: Path | None = None
    start_timeout: float | None = None
    policies: tuple[Policy, ...] = ()
    mode: str | None = None
    record: bool = True
    via: tuple[str, ...] = ()
    fs: bool | None = None
    project: Project | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    kernel_tools: bool | None = None
    mcp: tuple[str, ...] | None = None
    add_dirs: tuple[Path, ...] = ()
    system_prompt: str | None = None
    system_prompt_mode: Literal["append", "override"] = "append"
    session_id: str | None = None
    review: bool = False
    sandbox: Sandbox | None = None

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, wanted: str) -> AgentError:
            return AgentError(f"AgentConfig.{name}: {wanted}, not {value!r}")

        def words(name: str, value: Any, *, none: bool = False) -> tuple[str, ...] | None:
            if value is None and none:
                return None
            if isinstance(value, str | bytes) or not isinstance(value, Sequence) \
                    or not all(isinstance(w, str) for w in value):
                raise bad(name, value, "a list of strings" + (" or None" if none else ""))
            return tuple(value)

        set_ = functools.partial(object.__setattr__, self)
        if not isinstance(self.harness, HarnessRef):
            raise bad("harness", self.harness, "a HarnessRef (a manifest found by discovery)")
        if not isinstance(self.program, str):
            raise bad("program", self.program, "the program's path or name (a string)")
        for name, value, kind, wanted in (
                ("name", self.name, str | None, "a string or None"),
                ("mode", self.mode, str | None, "a string or None"),
                ("system_prompt", self.system_prompt, str | None, "a string or None"),
                ("session_id", self.session_id, str | None, "a string or None"),
                ("record", self.record, bool, "True or False"), ("review", self.review, bool, "True or False"),
                ("fs", self.fs, bool | None, "True, False or None"),
                ("kernel_tools", self.kernel_tools, bool | None, "True, False or None"),
                ("project", self.project, Project | None, "a Project or None"),
                ("sandbox", self.sandbox, Sandbox | None, "a Sandbox or None")):
            if not isinstance(value, kind):
                raise bad(name, value, wanted)
        if self.system_prompt_mode not in ("append", "override"):
            raise bad("system_prompt_mode", self.system_prompt_mode, "'append' or 'override'")
        timeout = self.start_timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not timeout >= 0):
            raise bad("start_timeout", timeout, "seconds (a number ≥ 0) or None")
        env = self.env or {}
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise bad("env", self.env, "a mapping of strings to strings")
        if callable(self.policies) or not isinstance(self.policies or (), Sequence) \
                or not all(callable(p) for p in self.policies or ()):
            raise bad("policies", self.policies, "a list of policies (async callables taking a card)")
        if not isinstance(self.add_dirs, Sequence) or isinstance(self.add_dirs, str | bytes) \
                or not all(isinstance(d, str | Path) for d in self.add_dirs):
            raise bad("add_dirs", self.add_dirs, "a list of folders")
        if self.cwd is not None and not isinstance(self.cwd, str | Path):
            raise bad("cwd", self.cwd, "a folder or None")
        cwd = Path(self.cwd or Path.cwd()).resolve()
        set_("name", self.name or self.harness.short_id)
        set_("cwd", cwd)
        # seconds a start waits for initialize / session/new; None: as long as the process lives
        set_("start_timeout", start_limit() if timeout is None else (timeout or None))
        set_("policies", tuple(self.policies or ()))
        set_("via", words("via", self.via))
        set_("env", dict(env))  # e.g. the account's folder in the manifest's accountVar
        set_("kernel_tools", kernel_in_process() if self.kernel_tools is None else self.kernel_tools)
        set_("mcp", words("mcp", self.mcp, none=True))
        # ACP additionalDirectories (absolute; relative ones are against cwd): sent where offered, fenced in
        set_("add_dirs", tuple((cwd / d).resolve() for d in self.add_dirs))


class _Start(Generic[T]):
    """A start parameter of the agent, read (never set) from its :class:`AgentConfig`:
    ``name = _Start[str]()`` on :class:`AgentState` reads ``config.name``; ``of`` names a
    config field of another name (``extra_env`` reads ``env``); ``as_list``: the config's
    tuple read as a new list (what the agent has always given: ``agent.via == [...]``)."""

    def __init__(self, of: str | None = None, *, as_list: bool = False) -> None:
        self._of, self._as_list = of, as_list

    def __set_name__(self, owner: type, name: str) -> None:
        self._read = operator.attrgetter(self._of or name)
        self._name = name

    def __get__(self, state: Any, owner: type | None = None) -> T:
        value = self._read(state.config)
        return cast(T, list(value) if self._as_list and value is not None else value)

    def __set__(self, state: Any, value: Never) -> None:  # Never: mypy refuses every assignment too
        raise AttributeError(f"{self._name} is a start parameter of the agent (its AgentConfig): start an agent "
                             f"with another value instead")


class AgentState:
    """The mutable state of one agent and the changes its parts make to it (see the
    module). Built from its :class:`AgentConfig`: the start parameters are read from it
    (read-only: setting one raises ``AttributeError``)."""

    harness = _Start[HarnessRef]()
    program = _Start[str]()
    name = _Start[str]()
    cwd = _Start[Path]()
    start_timeout = _Start[float | None]()
    policies = _Start[list[Policy]](as_list=True)
    via = _Start[list[str]](as_list=True)
    extra_env = _Start[Mapping[str, str]]("env")
    project = _Start[Project | None]()
    record = _Start[bool]()
    kernel_tools = _Start[bool]()
    mcp = _Start[list[str] | None](as_list=True)
    add_dirs = _Start[list[Path]](as_list=True)
    system_prompt = _Start[str | None]()
    system_prompt_mode = _Start[str]()
    sandbox = _Start[Sandbox | None]()

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.forker: Forker | None = None  # the squad holding it, which forks it (Squad.fork)
        self.conversation = Conversation()
        # its changes to the open notebook, pending review: the views redraw as it changes, each answer on record
        self.edit_review = EditReview(on_change=self.notify_status, on_settled=self._edit_settled,
                                      on_failed=self._edit_not_settled)
        self.keeper = ConversationRecord(self)  # its notices and card answers in the transcript
        self.budget = AgentBudget(self)  # set_budget: what it may spend before it pauses on a card
        self.activity_watch = ActivityWatch(self)  # what it does now, and its stall timer (agent.activity)
        self.file_watch = FileWatch(self.edit_review, self.cwd, self.conversation, lambda: self.transcript,
                                    _kernel_notebook, self._recorded_repository) if self.review else None
        self.status = AgentStatus.STARTING
        self.error: str | None = None
        self.on_status: Observers[[Any]] = Observers(f"status of {self.name}")
        self.controls = Controls(self)
        self.turns = TurnQueue(self)
        self.folder_checkpoints = Checkpoints(self)  # its folder before each turn, and the rewind
        self.live: Live | None = None
        self._transcript: Transcript | None = None
        self.previous_transcript: Path | None = None  # the file before a restart (its header names it)
        self.auth_required: AuthRequired | None = None
        self.auth_prompt: list[dict[str, Any]] | None = None  # the prompt refused with auth_required (-32000)
        self.sign_in_job: Any = None  # the terminal sign-in running (engine/launch/sign_in.py), else None
        self.sign_in_retry: Turn | None = None  # the refused prompt, sent again after a terminal sign-in
        self.reads_refusal_messages = False
        self.last_activity: float | None = None  # wall-clock time of the last conversation change
        self.version_checked = False  # the squad already compared the program's --version with ``tested``
        self.far_side: Any = None  # --sandbox --via: what the probe found there (a launch.far_side.FarSide)
        self._main_task: asyncio.Task | None = None
        self._restarting = False
        self._restart_task: asyncio.Task | None = None
        self._reconnect_task: asyncio.Task | None = None  # a remote agent's reconnection (launch/remote.py)
        self.reconnecting = False  # a reconnection's new process is starting
        self._lifecycle = asyncio.Lock()  # restart and close, one at a time
        self._wake = asyncio.Event()
        self.resume_id: str | None = config.session_id  # one of its own sessions to open (session/list), next start
        self._replay = ReplaySkip()
        self.worktree: Worktree | None = None  # its own git worktree and branch (``--worktree``), if any
        self._preparing: asyncio.Task | None = None  # work before the first start (its worktree being made)
        self.early_desk: Any = None  # cards before its session exists (a worktree's commands to confirm)
        self.primer: dict[str, Any] | None = None  # a fork's conversation so far, sent with its first prompt
        self._restat: asyncio.Task | None = None  # its worktree's diff stat re-counted after a turn (close() cancels)
        self.sessions_elsewhere: dict[str, str] = {}  # session id -> its folder, of session/list rows not of cwd
        self.sessions_hidden = 0  # rows of other folders left out of the last session/list page
        # Stop pressed while it starts: its process ended (awaited by close)
        self._stop_task: asyncio.Task | None = None
        self.conversation.subscribe(self._heard)  # every change, each chunk too
        self.conversation.subscribe(self._collect, chunks=False)  # tool calls and items added: never a chunk
        mode, harness = config.mode, config.harness
        if mode is not None and mode != "default" and mode not in self.controls.escouade_modes():
            raise AgentError(f"{harness.display_name} does not offer the mode {mode!r}; it offers: "
                             f"{', '.join(self.controls.escouade_modes())}")
        self._initial_mode = mode
        if self.private and harness.acp.fs is False:
            raise AgentError(f"{harness.display_name} reads and writes files by itself (its manifest says "
                             f'"fs": false), so it cannot run in a private project: the fence would not hold')

    @property
    def review(self) -> bool:
        """Whether the files it changes in each turn pend review (``review=True``, or
        ``review: true`` in its project's ``.escouade.yml``)."""
        return self.config.review or (self.project is not None and self.project.review)

    @property
    def session(self) -> AgentSession | None:
        """The current :class:`~..wire.session.AgentSession`, or None."""
        return self.live.session if self.live is not None else None

    @property
    def agent_capabilities(self) -> dict[str, Any]:
        """``initialize``'s ``agentCapabilities`` (wire dict; empty before a session)."""
        return self.live.session.agent_capabilities if self.live is not None else {}

    @property
    def auth_methods(self) -> list[dict[str, Any]]:
        """Its ``authMethods`` (empty before a session)."""
        return self.live.session.auth_methods if self.live is not None else []

    @property
    def agent_info(self) -> dict[str, Any] | None:
        """``initialize``'s ``agentInfo``, else None."""
        return self.live.session.agent_info if self.live is not None else None

    @property
    def restarting(self) -> bool:
        """A restart is under way: the old process is closing, a new one comes."""
        return self._restarting

    @property
    def private(self) -> bool:
        return self.project is not None and self.project.private

    @property
    def fence(self) -> Path | None:
        """The folder the client's fs is fenced to: a private project's folder, else None."""
        if self.project is None or not self.project.private:
            return None
        return Path(self.project.folder or self.cwd)

    @property
    def uses_client_fs(self) -> bool:
        """Whether we offer ``fs/*``: the manifest's ``acp.fs`` (default true), but not
        through a launcher — the files are not ours — unless told otherwise."""
        if self.config.fs is not None:
            return self.config.fs and self.harness.acp.fs is not False
        return self.harness.acp.fs is not False and not self.via

    def argv(self) -> list[str]:
        """The command line: ``[*via, program, *acp.args]`` — ``via`` is a launcher
        prefix such as ``ssh host`` or ``kubectl exec -i POD --`` (ACP is plain stdio);
        through ``ssh``, the remote command is quoted and wrapped so that ending the local
        ``ssh`` ends the remote agent too (:mod:`.launcher`)."""
        return launch_argv(self.via, [self.program, *self.harness.acp.args])

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

    def _edit_settled(self, edit: Any) -> None:
        """One of its changes to the open notebook was answered: said in the conversation (a
        notice, so in the transcript: ``%escouade resume`` shows it) and written as a
        ``kernel_tool`` line of phase ``settle`` (``cell``, ``change``, ``outcome``; ``told: false``
        for a Reject answered after the agent closed, which it is never told)."""
        if edit.cell_id is None and self.file_watch is not None:  # a file's edit (engine/review/file_review.py)
            self.file_watch.settled(edit)
            return
        words = {"kept": "kept", "rejected": "rejected (taken back)",
                 "dropped": "dropped (the agent removed its own new cell before review)"}
        closed = self.edit_review.closed  # answered after the agent closed: a Reject cannot be told to it
        told = {"told": False} if closed and edit.state == "rejected" else {}
        after = (" after the agent closed (not told to the agent)" if told
                 else " after the agent closed" if closed else "")
        self.conversation.add_notice(f"Notebook review: {edit.label} {words.get(edit.state, edit.state)}{after}")
        if self.transcript is not None:
            self.transcript.event(kernel_calls.EVENT, phase="settle", tool=None, cell=edit.cell_id,
                                  change=edit.change, outcome=edit.state, **told)

    def _edit_not_settled(self, edit: Any, keep: bool, error: BaseException) -> None:
        """A Keep or Reject of one of its changes failed (no page answered…): said in the
        conversation, the change still pending (the view offers it again)."""
        what = "Notebook review" if edit.cell_id is not None else "File review"
        self.conversation.add_notice(f"{what}: the {'Keep' if keep else 'Reject'} of {edit.label} was not "
                                     f"done ({error}); it is still pending", level="warning")

    def notify_status(self) -> None:
        """Tell status observers that something they show changed (a mode)."""
        self.on_status.emit(self)

    def wake_waiters(self) -> None:
        """Wake every ``ready()`` / ``next_permission()`` / ``next_question()`` wait: a
        card came, the session became ready, wants a sign-in, or ended."""
        self._wake.set()
        self._wake = asyncio.Event()

    def cards_waiting(self) -> None:
        self.activity_watch.cards(True)  # never stalled while a card waits for the user
        if self.status in (AgentStatus.IDLE, AgentStatus.WORKING):
            self.set_status(AgentStatus.WAITING)

    def cards_answered(self) -> None:
        self.activity_watch.cards(False)
        if self.status is AgentStatus.WAITING:
            self.set_status(AgentStatus.WORKING if self.turns.current is not None else AgentStatus.IDLE)

    @property
    def activity(self) -> Activity:
        """What it is doing now (:class:`~..core.activity.Activity`): ``.state`` one of
        ``idle``, ``thinking``, ``writing``, ``tool``, ``waiting`` (a card waits for you),
        ``stalled`` (a turn runs and no update came for :attr:`stall_after` seconds);
        ``.detail`` (the tool's title, how long it is quiet…); ``.since``, a UTC ``datetime``;
        ``.text``, the words the views show."""
        return self.activity_watch.activity()

    @property
    def stall_after(self) -> float | None:
        """Seconds without an update from the agent, while a turn runs and no card waits,
        after which it is *stalled* (default 60; None: never). Setting it takes effect at
        once; ``ValueError`` for anything but a positive number or None."""
        return self.activity_watch.stall_after

    @stall_after.setter
    def stall_after(self, seconds: float | None) -> None:
        self.activity_watch.stall_after = seconds

    def _heard(self, _changes: list[Change]) -> None:
        self.last_activity = time.time()

    def _collect(self, changes: list[Change]) -> None:
        if self.live is not None:
            self.live.workspace.changed(changes)
            if self.live.desk.grants:
                for change in changes:
                    if isinstance(change.item, ToolCall):
                        self.live.desk.note_unasked(change.item)
        turn = self.turns.current
        if turn is not None and not turn.done:
            turn.items.extend(c.item for c in changes if c.kind == "added" and c.item is not None)

    def start(self) -> asyncio.Task:
        """Schedule the start on the running loop and return at once (a no-op while a
        process of this agent is running or starting)."""
        if self._preparing is not None and not self._preparing.done():
            return self._preparing  # it starts the agent when done (or fails it)
        if self._main_task is None:
            running_loop(f"starting agent {self.name!r}")  # NoEventLoop, said plainly, before anything changes
            if self.status is not AgentStatus.STARTING:
                self.set_status(AgentStatus.STARTING)
            live = Live(self, resume=self.resume_id, replay=self._replay,
                        mode=self._initial_mode if self._initial_mode is not None else self.controls.chosen)
            self.live, self._initial_mode, self.resume_id, self._replay = live, None, None, ReplaySkip()
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

    def fail_start(self, message: str, *, notice: str | None = None) -> None:
        """The start cannot happen (its worktree was refused, the agent refused the
        session…): ``failed``, saying why (``notice``: the conversation's words, else
        ``message``)."""
        self.error = message
        self.conversation.add_notice(message if notice is None else notice, level="error")
        if self.status is not AgentStatus.FAILED:
            self.set_status(AgentStatus.FAILED)
        self.wake_waiters()

    async def ready(self) -> Any:
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
        assert self.live is not None  # ready: a live session
        return self.live.session

    def transcript_failed(self, exc: OSError) -> None:
        """The transcript could not be written: the conversation warns (the transcript
        itself tells once)."""
        self.conversation.add_notice(f"The transcript could not be written ({exc.strerror or exc}); the session goes "
                                     f"on, but it will not be resumable after a kernel restart.", level="warning")

    def send(self, prompt: str | Sequence[Any]) -> Turn:
        """Queue ``prompt`` (text or ACP content blocks) as a turn of the agent: what a card's
        feedback, a question's answers and a sign-in's retry send."""
        return self.turns.send(Turn(self, blocks(prompt)))

    def stopped_while_starting(self, error: str, notice: str) -> None:
        """Stop was pressed while it started: ``closed`` (Restart starts it again), saying so."""
        self.error = error
        self.conversation.add_notice(notice)
        self.set_status(AgentStatus.CLOSED)
        self.wake_waiters()

    def process_exited(self, error: str, code: int | None, stderr_tail: str) -> None:
        """Its process ended by itself (not closed by us): ``error`` says how; the
        conversation shows the exit code and the end of its stderr."""
        self.error = error
        self.conversation.add_notice(f"Agent exited with code {code}", level="error", detail=stderr_tail)

    def initialized(self, escouade_meta: dict[str, Any]) -> None:
        """The agent answered ``initialize``: what its ``_meta.escouade`` says it reads
        (``refusalMessage``: a rule plugin's reason in a refusal)."""
        self.reads_refusal_messages = bool(escouade_meta.get("refusalMessage"))

    def needs_sign_in(self, error: AuthRequired) -> None:
        """The agent wants a sign-in before a session (``initialize``/``session/new``
        refused): status ``sign-in``, the waiters woken (``ready()`` raises it)."""
        self.auth_required = error
        self.conversation.add_notice("The agent asks you to sign in", level="warning", detail=str(error))
        self.set_status(AgentStatus.SIGN_IN)
        self.wake_waiters()

    def signed_in(self) -> None:
        """A session opened (or a sign-in during one went through): no sign-in is wanted."""
        self.auth_required = None

    def sign_in_started(self, job: Any) -> None:
        """A terminal sign-in runs (``job``: :class:`~.launch.sign_in.TerminalSignIn`); the view shows its input box."""
        self.sign_in_job = job
        self.notify_status()

    def sign_in_ended(self) -> None:
        """The terminal sign-in's program ended."""
        self.sign_in_job = None
        self.notify_status()

    def retry_after_sign_in(self, prompt: list[dict[str, Any]]) -> None:
        """Send once more the prompt refused for want of a sign-in (``sign_in_retry``: its turn)."""
        self.sign_in_retry = self.send(prompt)

    def wants_sign_in(self, error: AuthRequired, prompt: list[dict[str, Any]], primer: dict[str, Any] | None) -> None:
        """The agent refused ``prompt`` until the user signs in: kept (with a fork's
        ``primer`` not sent yet) for the retry after a terminal sign-in; status ``sign-in``."""
        self.auth_required, self.auth_prompt = error, prompt
        self.primer = self.primer or primer
        self.conversation.add_notice("The agent asks you to sign in; your prompt was kept (turn.prompt)",
                                     level="warning", detail=str(error))
        self.set_status(AgentStatus.SIGN_IN)  # the view offers the sign-in methods

    def take_auth_prompt(self) -> list[dict[str, Any]] | None:
        """The prompt refused for a sign-in, once (see :meth:`wants_sign_in`)."""
        prompt, self.auth_prompt = self.auth_prompt, None
        return prompt

    def take_primer(self) -> dict[str, Any] | None:
        """A fork's conversation so far (:func:`~..core.prompt.carried_conversation`), once:
        the turn that sends it takes it (and puts it back when the agent refused the prompt
        for a sign-in)."""
        primer, self.primer = self.primer, None
        return primer

    def in_squad(self, forker: Forker) -> None:
        """It is one of ``forker``'s agents (a squad's): :meth:`~.agent.Agent.fork` goes through it."""
        self.forker = forker

    def opens_session(self, session_id: str | None) -> None:
        """Its next start opens ``session_id`` (one of the agent's own: a fork made with
        ``session/fork``) instead of a new session."""
        self.resume_id = session_id

    def carries(self, primer: dict[str, Any]) -> None:
        """A fork's conversation so far (:func:`~..core.prompt.carried_conversation`), sent
        with its first prompt (:meth:`take_primer`)."""
        self.primer = primer

    def _recorded_repository(self) -> GitRepo | None:
        """Its worktree's repository as the kernel recorded it (never read from the worktree's ``.git``)."""
        wt = self.worktree
        if wt is None or wt.admin is None or wt.common_dir is None:
            return None
        return GitRepo(wt.path, wt.admin, wt.common_dir)

    def in_worktree(self, worktree: Worktree | None) -> None:
        """It works in ``worktree`` now (made before its start, or found again on a
        resume); None: its worktree was discarded."""
        self.worktree = worktree

    # -- the program's version against the manifest's ``tested`` range ---------------------------
    def check_version(self, version: str | None) -> None:
        """Warn in the conversation when ``version`` is outside the manifest's ``tested``
        range, unless a version was compared already (``version_checked``: one warning at
        most, whoever compares — the squad's ``--version`` read or ``initialize``)."""
        if version is None or self.version_checked:
            return
        self.version_checked = True
        tested = self.harness.harness.tested
        status = version_status(version, tested)
        if status in ("older", "newer") and tested is not None:
            self.conversation.add_notice(
                f"{self.harness.display_name} {version} is {status} than the versions tested with this "
                f"manifest ({tested.oldest}–{tested.newest}).", level="warning")

    def claim_version_check(self) -> None:
        """The version is compared elsewhere (the squad reads ``--version``; a fork's parent
        was compared): ``initialize``'s is not."""
        self.version_checked = True

    def release_version_check(self) -> None:
        """The squad's ``--version`` read is over: the next :meth:`check_version` compares."""
        self.version_checked = False

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
        if self.harness.acp.questions_in_text and self.live is not None:
            questions = plans.questions_in(turn.text)
            if questions:
                self.live.desk.add_question(Question("", message="", mode="text", questions=questions))

    def turn_ended(self, turn: Turn) -> None:
        if self.transcript is not None:  # a turn's end is on disk, whatever comes next
            self.transcript.flush()
        self.activity_watch.turn_ended()  # a stall it ended in is said (a notice) before the turn's last words
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

    def active_policies(self) -> list[Policy]:
        """Rule plugins first (a team's denial beats the mode), then the kernel's reads
        (:meth:`.kernel_access.KernelAccess.policy`), then the mode."""
        kernel = self.live.kernel.policy if self.live is not None and self.live.kernel.server_names else None
        mode = [self.controls.policy] if self.controls.applies else []
        return [*self.policies, *([kernel] if kernel else []), *mode]

    async def next_card(self, kind: Literal["permission", "question"], timeout: float | None, what: str) -> Any:
        """The next card of ``kind`` (``"permission"`` or ``"question"``) not handed out yet,
        waiting for one; ``TimeoutError`` after ``timeout`` seconds (``what`` names it),
        :class:`AgentError` when the agent ends first."""
        try:
            with anyio.fail_after(timeout):
                while True:
                    wake, live = self._wake, self.live
                    card = live.desk.take(kind) if live is not None else None
                    if card is None and self.early_desk is not None:  # before the session: worktree_setup
                        card = self.early_desk.take(kind)
                    if card is not None:
                        return card
                    if self.status in ENDED:  # set once the session's end is handled (cards closed)
                        raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
                    await wake.wait()
        except TimeoutError:
            raise TimeoutError(f"no {what} from {self.name!r} within {timeout} s") from None

    async def restart(self) -> Any:
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
        return await self.ready()

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
                self.use_transcript(None)
                self.conversation.add_notice("Restarted: a new process and a new session.")
                self.start()
            finally:
                self._restarting = False

    @property
    def place(self) -> str:
        """Where it runs, as its head says it: ``at HOST:PORT`` (by URL), ``via LAUNCHER…``, ``""`` (here)."""
        return remote.place(self.via)

    @property
    def reconnect_pending(self) -> bool:
        """A dropped connection (an agent by URL) is being reconnected (:meth:`reconnect_soon`)."""
        task = self._reconnect_task
        return self.reconnecting or (task is not None and not task.done())

    async def reconnected(self) -> None:
        """Return once a reconnection under way (an agent by URL) has ended, however it ended
        (at once when none is): a prompt sent meanwhile goes to the reopened session."""
        task = self._reconnect_task
        if task is not None and not task.done():
            await asyncio.wait({task})  # not shielded nor raised: the task is the squad's, its end is said

    def reconnect_soon(self, session_id: str | None) -> None:
        """Its connection (an agent by URL) dropped: reconnect and reopen ``session_id`` in
        the background (:func:`~.launch.remote.reconnect`; one at a time, ended by :meth:`close`)."""
        task = self._reconnect_task
        if self.reconnecting or (task is not None and not task.done()):
            return  # a try under way: it goes on by itself
        self._reconnect_task = asyncio.get_running_loop().create_task(
            remote.reconnect(self, session_id), name=f"escouade reconnect {self.name}")

    def resume_reconnected(self, session_id: str | None, replay: ReplaySkip) -> None:
        """The next start reopens ``session_id`` of the dropped connection (None: a new
        session), skipping what ``replay`` says the conversation has, and writes on in the
        same transcript."""
        self._main_task = None
        self.live = None
        self.error = None
        if self.transcript is not None:  # a new process's stretch of the same file (its ``resume`` mark)
            self.transcript.flush()
            self.resume_from(self.transcript.path, session_id, replay)
        else:
            self.resume_id, self._replay = session_id, replay

    def resume_from(self, path: Path, session_id: str | None, replay: ReplaySkip) -> None:
        """Rebuilt from the transcript at ``path``: the next start reopens ``session_id``
        (skipping what ``replay`` says the conversation has) and writes on in that file."""
        self.resume_id = session_id  # the next Live reloads it
        self._replay = replay
        transcript = Transcript(path, on_error=self.transcript_failed)
        self.use_transcript(transcript)
        transcript.event("resume")

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
            for task in (self._restat, self._preparing, self._reconnect_task):  # a worktree being made, a
                # reconnection under way: this agent will not start
                if task is not None:
                    task.cancel()
            if self.early_desk is not None:  # a worktree's commands to confirm: answered cancelled
                self.early_desk.close("agent closed")
            await self._close_session()
            self.budget.close()
            self.activity_watch.close()
            self.turns.close()
            self.edit_review.close()
            await self.folder_checkpoints.aclose()
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
        if session.alive and session.pid is not None:
            kill_group_now(session.pid)
        session.end_confined()  # its sandbox's pasta
        if self.file_watch is not None and self.transcript is not None:  # review=True: its writes since its last turn
            self.file_watch.killed_at_exit()  # recorded pending (a resume lists them unanswered)
            self.transcript.flush()

    @property
    def transcript(self) -> Transcript | None:
        """The transcript file of the current process (None between a process and the next)."""
        return self._transcript

    def use_transcript(self, transcript: Transcript | None) -> None:
        """Write on in ``transcript`` (a new process's file, or the one a resume reopens;
        None between a process and the next)."""
        self._transcript = transcript
        if transcript is not None:
            self.keeper.attached()  # a new segment: its mark, and the notices that waited for it
