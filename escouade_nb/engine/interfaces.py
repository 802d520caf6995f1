"""What the agent's parts need of it, as Protocols, each the size of its use: the parts
(cards, controls, kernel access, live, resume, sign-in, turns, records, budget, versions,
the launcher, the sandbox, worktrees) take the agent typed by these, never its concrete
class, the way :mod:`..permissions.interfaces` types the cards for the permission layer.
Its optional capabilities are declared once, in :class:`OptionalParts` (a part takes the
``Has…`` row it uses); absent is None.

This module imports no engine module but the launch wing's Protocols (the wing's own, which the
agent's handles here are built on), so that no part imports another through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.conversation import Conversation
from ..core.status import AgentStatus
from ..manifest import HarnessRef
from ..manifest.project import Project
from ..wire.errors import AuthRequired
from ..wire.session import AgentSession
from ..wire.transcript import Transcript
from .launch.interfaces import LaunchedAgent, SandboxedAgent, SignInAgent, VersionedAgent

__all__ = ["BudgetPart", "BudgetedAgent", "CardsAgent", "CheckpointsPart", "ControlledAgent", "EditReviewPart",
           "FileWatchPart", "Forker", "HasEditReview", "HasFileWatch", "HasFolderCheckpoints", "JournaledAgent",
           "KernelRequests", "KernelToolsAgent", "LaunchedAgent", "LiveAgent", "LiveSession", "Named",
           "OptionalParts", "RecordedAgent", "ResumedAgent", "SandboxedAgent", "SignInAgent", "TurnsAgent",
           "VersionedAgent", "WorktreeAgent", "WorktreePart", "default_forker", "register_default_forker"]


# -- the agent's optional capabilities: ONE table ------------------------------------------------
# Each is declared here with its name and its type; an agent without one has it as None (a
# typed None, never a missing attribute): a part reads ``agent.file_watch`` and tests ``is None``,
# never looks it up by its name as a string. The model is the ACP SDK's ``Route(optional=True)``.


class FileWatchPart(Protocol):
    """``file_watch``: the files it changes pend review (``review=True``; :class:`~.review.file_review.FileWatch`)."""

    async def before_turn(self) -> None: ...

    async def after_turn(self) -> Any: ...

    async def process_started(self) -> int: ...

    async def process_ended(self, token: int) -> Any: ...

    def written(self, path: Path, old: str | None, new: str) -> None: ...

    async def rewound(self, paths: list[Path]) -> None: ...


class EditReviewPart(Protocol):
    """``edit_review``: its changes to the open notebook pending review (:class:`~.review.cell_review.EditReview`)."""

    def add(self, cell_id: str, change: str, live: Any) -> Any: ...

    def touch(self, cell_id: str) -> None: ...

    def take_notice(self) -> str | None: ...

    def new_turn(self) -> None: ...

    def restore(self, cell_id: str, change: str, outcome: str) -> None: ...

    def restore_item(self, edit: Any) -> None: ...


class CheckpointsPart(Protocol):
    """``folder_checkpoints``: its folder before each turn, and the rewind
    (:class:`~.review.checkpoints.Checkpoints`)."""

    async def before_prompt(self, turn: Any, live: Any) -> None: ...

    def rebuild(self, records: list[Any]) -> None: ...


class BudgetPart(Protocol):
    """``budget``: what it may spend before it pauses on a card (:class:`~.budget.AgentBudget`)."""

    async def hold_permission(self) -> None: ...

    def turn_started(self) -> None: ...

    def turn_ended(self, tokens: int | None) -> None: ...

    async def hold(self) -> bool: ...


class ActivityPart(Protocol):
    """``activity_watch``: what it does now and its stall timer (:class:`~.activity.ActivityWatch`)."""

    def turn_started(self) -> None: ...

    def saw(self, changes: list[Any]) -> None: ...


class WorktreePart(Protocol):
    """``worktree``: its own git worktree and branch (``--worktree``; :class:`~.worktrees.worktree.Worktree`)."""

    path: Path
    repo: Path
    admin: Path | None
    common_dir: Path | None

    def record(self) -> dict[str, Any]: ...


class HasFileWatch(Protocol):
    @property
    def file_watch(self) -> FileWatchPart | None: ...


class HasEditReview(Protocol):
    @property
    def edit_review(self) -> EditReviewPart | None: ...


class HasFolderCheckpoints(Protocol):
    @property
    def folder_checkpoints(self) -> CheckpointsPart | None: ...


class OptionalParts(HasFileWatch, HasEditReview, HasFolderCheckpoints, Protocol):
    """The table: every optional capability of an agent, its name and its type (None: absent);
    a part that uses one takes its ``Has…`` row (``TurnsAgent(…, HasFileWatch, …)``). (Its
    ``budget`` is always there: :class:`BudgetPart`, declared by the parts that use it.)"""

    @property
    def sandbox(self) -> Any | None: ...  # its engine.launch.sandbox.Sandbox (``--sandbox``)

    @property
    def worktree(self) -> WorktreePart | None: ...

    @property
    def sign_in_job(self) -> Any | None: ...  # its engine.launch.sign_in.TerminalSignIn while one runs

    @property
    def early_desk(self) -> Any | None: ...  # a CardDesk for cards before its session (worktree_setup)


# -- what each part needs of the agent (each the size of its use) ---------------------------------


class Named(Protocol):
    """What every part reads: who it is, and its conversation."""

    @property
    def name(self) -> str: ...

    @property
    def harness(self) -> HarnessRef: ...

    @property
    def conversation(self) -> Conversation: ...






class RecordedAgent(Protocol):
    """What :class:`~.record.ConversationRecord` needs."""

    @property
    def conversation(self) -> Conversation: ...

    @property
    def record(self) -> bool: ...

    @property
    def transcript(self) -> Transcript | None: ...


class JournaledAgent(Protocol):
    """What :mod:`.kernel_record` needs: its name, policies (their journal), project, transcript."""

    @property
    def name(self) -> str: ...

    @property
    def policies(self) -> Sequence[Any]: ...

    @property
    def project(self) -> Project | None: ...

    @property
    def transcript(self) -> Transcript | None: ...


class ControlledAgent(Named, Protocol):
    """What :class:`~.controls.Controls` (its dials) needs."""

    @property
    def cwd(self) -> Path: ...

    def notify_status(self) -> None: ...

    async def ready_session(self) -> AgentSession: ...




class BudgetedAgent(JournaledAgent, Named, Protocol):
    """What its :class:`~.budget.AgentBudget` needs: its session's cards, its running turn,
    the squad holding it (the squad's budget), and Stop."""

    status: AgentStatus
    live: Any  # its current Live (its desk shows the budget card)
    turns: Any  # its TurnQueue (the running turn)

    @property
    def forker(self) -> Forker | None: ...

    def cards_waiting(self) -> None: ...

    def notify_status(self) -> None: ...

    def cancel(self) -> None: ...


class ResumedAgent(Named, HasEditReview, HasFolderCheckpoints, Protocol):
    """What :func:`~.resume.rebuild` needs of an agent rebuilt from its transcript."""

    keeper: Any  # its ConversationRecord (``paused`` while the transcript is replayed)

    def resume_from(self, path: Path, session_id: str | None, replay: Any) -> None: ...

    def mark(self, status: AgentStatus, error: str | None = None) -> None: ...


class CardsAgent(Named, Protocol):
    """What a session's :class:`~.cards.CardDesk` needs: the policies, the status's waiting
    moves, the waiters, its budget's hold, and a card's feedback sent as a prompt."""

    reads_refusal_messages: bool

    @property
    def budget(self) -> BudgetPart: ...

    def active_policies(self) -> list[Any]: ...

    def cards_waiting(self) -> None: ...

    def cards_answered(self) -> None: ...

    def wake_waiters(self) -> None: ...

    def send(self, prompt: str | Sequence[Any]) -> Any: ...


class WorktreeAgent(CardsAgent, SandboxedAgent, Protocol):
    """What :mod:`.agent_worktrees` and :mod:`.worktree_setup` need: its worktree, its folder
    (its setup commands run as its process would: :class:`SandboxedAgent`), its cards before
    the session (a :class:`~.cards.CardDesk` of its own: what one needs)."""

    early_desk: Any

    @property
    def worktree(self) -> Any | None: ...  # its whole worktree (:class:`~.worktrees.worktree.Worktree`), not a Branch

    def notify_status(self) -> None: ...

    def in_worktree(self, worktree: Any) -> None: ...

    async def close(self) -> None: ...


class KernelToolsAgent(JournaledAgent, Named, HasEditReview, Protocol):
    """What :class:`~.kernel_access.KernelAccess` (the kernel's MCP server for one session)
    needs: whether it has the kernel's tools, which servers, its fence, its pending edits."""

    @property
    def via(self) -> Sequence[str]: ...

    @property
    def kernel_tools(self) -> bool: ...

    @property
    def mcp(self) -> Sequence[str] | None: ...

    @property
    def fence(self) -> Path | None: ...

    @property
    def session(self) -> AgentSession | None: ...

    @property
    def agent_capabilities(self) -> dict[str, Any]: ...

    @property
    def program(self) -> str: ...

    @property
    def sandbox(self) -> Any | None: ...  # --sandbox (a launch.sandbox.Sandbox), else None

    @property
    def activity_watch(self) -> Any: ...  # what it does now (activity.ActivityWatch): told the kernel runs its code

    def argv(self) -> list[str]: ...

    def notify_status(self) -> None: ...


class TurnsAgent(Named, HasFileWatch, HasEditReview, HasFolderCheckpoints, Protocol):
    """What its :class:`~.turns.TurnQueue` needs: the session to send on, the status moves of
    a turn, its sign-in and primer, its budget, and the parts a turn passes through (the
    folder before it, the notebook's pending edits, the files pending review)."""

    status: AgentStatus
    live: Any  # its current Live
    turns: Any  # its TurnQueue (this one)

    @property
    def budget(self) -> BudgetPart: ...

    @property
    def activity_watch(self) -> ActivityPart: ...

    @property
    def transcript(self) -> Transcript | None: ...

    @property
    def agent_capabilities(self) -> dict[str, Any]: ...

    @property
    def auth_methods(self) -> list[dict[str, Any]]: ...

    @property
    def restarting(self) -> bool: ...

    async def reconnected(self) -> None: ...  # an agent by URL: its reconnection under way has ended

    def set_status(self, status: AgentStatus | str) -> None: ...

    def notify_status(self) -> None: ...

    def wants_sign_in(self, error: AuthRequired, prompt: list[dict[str, Any]],
                      primer: dict[str, Any] | None) -> None: ...

    def take_primer(self) -> dict[str, Any] | None: ...

    def questions_from_text(self, turn: Any) -> None: ...

    def turn_ended(self, turn: Any) -> None: ...

    async def ready(self) -> Any: ...

    async def restart(self) -> Any: ...




class LiveAgent(CardsAgent, RecordedAgent, SandboxedAgent, KernelToolsAgent, HasFileWatch, Protocol):
    """What one process of the agent (:class:`~.live.Live`) needs: its whole start (command
    line, folders, start limit, system prompt, transcript), the status and sign-in moves of
    the start and of the process's end, and its other parts (``controls``, ``turns``; typed
    ``Any`` here: naming their classes would tie this module to theirs)."""

    keeper: Any  # its ConversationRecord

    @property
    def activity_watch(self) -> ActivityPart: ...  # what it does now: fed every update of the agent
    status: AgentStatus
    controls: Any
    turns: Any
    live: Any
    previous_transcript: Path | None
    error: str | None
    far_side: Any  # --sandbox --via: the far side's probe (a launch.far_side.FarSide), else None
    program: str

    @property
    def worktree(self) -> Any | None: ...  # its whole worktree (:class:`~.worktrees.worktree.Worktree`), not a Branch

    @property
    def start_timeout(self) -> float | None: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def system_prompt_mode(self) -> str: ...

    @property
    def review(self) -> bool: ...

    @property
    def auth_methods(self) -> list[dict[str, Any]]: ...

    @property
    def restarting(self) -> bool: ...

    @property
    def private(self) -> bool: ...

    @property
    def uses_client_fs(self) -> bool: ...

    def argv(self) -> list[str]: ...

    def set_status(self, status: AgentStatus | str) -> None: ...

    def fail_start(self, message: str, *, notice: str | None = None) -> None: ...

    def stopped_while_starting(self, error: str, notice: str) -> None: ...

    def reconnect_soon(self, session_id: str | None) -> None: ...  # an agent by URL whose connection dropped

    def process_exited(self, error: str, code: int | None, stderr_tail: str) -> None: ...

    def initialized(self, escouade_meta: dict[str, Any]) -> None: ...

    def needs_sign_in(self, error: AuthRequired) -> None: ...

    def signed_in(self) -> None: ...

    def use_transcript(self, transcript: Transcript | None) -> None: ...

    def transcript_failed(self, exc: OSError) -> None: ...

    def check_version(self, version: str | None) -> None: ...


class Forker(Protocol):
    """Who forks an agent (the squad: :meth:`~.squad.Squad.fork`)."""

    budget: Any  # its SquadBudget (engine/budget.py): what its agents spend together

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

    @property
    def agent(self) -> KernelToolsAgent: ...

    session: AgentSession
    desk: Any  # its CardDesk
    ended: bool

    @property
    def current(self) -> bool: ...
