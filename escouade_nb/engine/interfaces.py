"""What the agent's parts need of it, as Protocols: the parts (cards, controls, kernel
access, live, resume, sign-in, turns, records) take the agent's
:class:`~.state.AgentState` typed by these, never the :class:`~.agent.Agent` façade,
the way :mod:`..permissions.interfaces` types the cards for the permission layer.

This module imports no engine module, so that no part imports another through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.conversation import Conversation
from ..core.observers import Observers
from ..core.status import AgentStatus
from ..manifest import HarnessRef
from ..manifest.project import Project
from ..wire.errors import AuthRequired
from ..wire.session import AgentSession
from ..wire.transcript import Transcript

__all__ = ["AgentHandle", "Forker", "KernelRequests", "LiveSession", "ResumedAgent", "default_forker",
           "register_default_forker"]


class ResumedAgent(Protocol):
    """What :func:`~.resume.rebuild` needs of an agent rebuilt from its transcript."""

    harness: HarnessRef
    conversation: Conversation
    keeper: Any  # its ConversationRecord (``paused`` while the transcript is replayed)

    def resume_from(self, path: Path, session_id: str | None, replay: Any) -> None: ...

    def mark(self, status: AgentStatus, error: str | None = None) -> None: ...


class AgentHandle(ResumedAgent, Protocol):
    """The agent as its parts see it: what it is (configuration), what it holds (the
    state: status, error, sign-in, transcript, worktree, observers) and the changes the
    parts make (each a method). ``live``, ``turns``, ``controls`` are its parts (typed
    ``Any`` here: naming their classes would tie this module to theirs)."""

    public: Any  # the Agent the user holds: what cards and turns name, what on_status observers get
    program: str
    name: str
    cwd: Path
    start_timeout: float | None
    policies: list[Any]
    via: list[str]
    extra_env: dict[str, str]
    project: Project | None
    record: bool
    kernel_tools: bool
    mcp: list[str] | None
    add_dirs: list[Path]
    system_prompt: str | None
    system_prompt_mode: str
    status: AgentStatus
    error: str | None
    on_status: Observers[[Any]]
    controls: Any
    turns: Any
    live: Any
    previous_transcript: Path | None
    auth_required: AuthRequired | None
    auth_prompt: list[dict[str, Any]] | None
    sign_in_job: Any
    sign_in_retry: Any
    reads_refusal_messages: bool
    version_checked: bool
    worktree: Any
    early_desk: Any  # a CardDesk for cards before the session exists (worktree_setup's confirmation)
    budget: Any  # its AgentBudget (engine/budget.py): set_budget, the budget card
    sandbox: Any  # its engine.sandbox.Sandbox (``--sandbox``), else None

    @property
    def transcript(self) -> Transcript | None: ...

    @property
    def session(self) -> AgentSession | None: ...

    @property
    def agent_capabilities(self) -> dict[str, Any]: ...

    @property
    def auth_methods(self) -> list[dict[str, Any]]: ...

    @property
    def agent_info(self) -> dict[str, Any] | None: ...

    @property
    def restarting(self) -> bool: ...

    @property
    def private(self) -> bool: ...

    @property
    def fence(self) -> Path | None: ...

    @property
    def uses_client_fs(self) -> bool: ...

    def argv(self) -> list[str]: ...

    # -- the changes the parts make --------------------------------------------------------------
    def set_status(self, status: AgentStatus | str) -> None: ...

    def notify_status(self) -> None: ...

    def wake_waiters(self) -> None: ...

    def cards_waiting(self) -> None: ...

    def cards_answered(self) -> None: ...

    def fail_start(self, message: str, *, notice: str | None = None) -> None: ...

    def stopped_while_starting(self, error: str, notice: str) -> None: ...

    def process_exited(self, error: str, code: int | None, stderr_tail: str) -> None: ...

    def initialized(self, escouade_meta: dict[str, Any]) -> None: ...

    def needs_sign_in(self, error: AuthRequired) -> None: ...

    def signed_in(self) -> None: ...

    def sign_in_started(self, job: Any) -> None: ...

    def sign_in_ended(self) -> None: ...

    def retry_after_sign_in(self, prompt: list[dict[str, Any]]) -> None: ...

    def use_transcript(self, transcript: Transcript | None) -> None: ...

    def transcript_failed(self, exc: OSError) -> None: ...

    def wants_sign_in(self, error: AuthRequired, prompt: list[dict[str, Any]],
                      primer: dict[str, Any] | None) -> None: ...

    def take_auth_prompt(self) -> list[dict[str, Any]] | None: ...

    def take_primer(self) -> dict[str, Any] | None: ...

    def questions_from_text(self, turn: Any) -> None: ...

    def turn_ended(self, turn: Any) -> None: ...

    def active_policies(self) -> list[Any]: ...

    def check_version(self, version: str | None) -> None: ...

    def in_worktree(self, worktree: Any) -> None: ...

    def claim_version_check(self) -> None: ...

    def release_version_check(self) -> None: ...

    def send(self, prompt: str | Sequence[Any]) -> Any: ...

    async def ready(self) -> Any: ...

    async def ready_session(self) -> AgentSession: ...

    async def restart(self) -> Any: ...

    async def close(self) -> None: ...


class Forker(Protocol):
    """Who forks an agent (the squad: :meth:`~.squad.Squad.fork`)."""

    def fork(self, agent: Any, name: str | None = None) -> Any: ...


_default_forker: Callable[[], Forker] | None = None


def register_default_forker(source: Callable[[], Forker]) -> None:
    """Who forks an agent that no squad holds: ``source()`` gives it when one forks
    (:mod:`.squad` registers :func:`~.squad.get_squad` when it is imported)."""
    global _default_forker
    _default_forker = source


def default_forker() -> Forker | None:
    """The forker registered by :func:`register_default_forker` (the process-wide squad,
    made on first use), or None when none was registered."""
    return _default_forker() if _default_forker is not None else None


class KernelRequests(Protocol):
    """What a session's card desk asks of its kernel access (:class:`~.kernel_access.KernelAccess`)."""

    def recognise(self, call: Any) -> Any: ...

    def identify(self, probe: Any, known: Any) -> Any: ...

    async def agent_asks_run_code(self, tool_call: dict[str, Any], options: list[dict[str, Any]], code: str) -> Any: ...

    async def agent_asks_execute_cell(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                                      cell_id: str) -> Any: ...


class LiveSession(Protocol):
    """One process of an agent as its kernel access sees it (:class:`~.live.Live`)."""

    agent: AgentHandle
    session: AgentSession
    desk: Any  # its CardDesk
    ended: bool

    @property
    def current(self) -> bool: ...
