"""One agent of the squad: the object the user holds.

The engine works without Jupyter: in a plain ``asyncio.run`` script,
``agent = Agent(ref, program=...); agent.start(); await agent.ready()`` then
``await agent.send("hi")``. In a kernel the magics do the same on the kernel's loop;
views subscribe to ``agent.conversation`` and to ``agent.on_status``.

Everything that changes lives in one :class:`~.state.AgentState` (the status and its
machine, the error, the sign-in, the transcript, the worktree, the observers, the
waiters) with the parts that live as long as the agent: the turn queue (:mod:`.turns`),
the dials (:mod:`.controls`). What lives as long as one process — the
:class:`~..wire.session.AgentSession`, its cards (:class:`~.cards.CardDesk`), its files
and terminals (:class:`~.workspace.Workspace`), its per-session flags — is one
:class:`~.live.Live` object: ``restart()`` replaces it whole, so no state of a dead
process survives by construction. :class:`Agent` is that state's subclass: it adds the
user's API and re-declares none of the state (no forwarding property; the start keywords
are :class:`~.state.AgentConfig`'s, written once). Why one object rather than a façade
holding the state: every attribute is then typed once and checked by mypy (a forwarding
layer is either 46 hand-written properties or a ``__getattr__`` mypy cannot see through),
and the object a card or ``on_status`` names is the object the parts change. The parts
still never import this class: they take the Protocols of :mod:`.interfaces`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.prompt import blocks
from ..manifest import HarnessRef
from ..manifest.project import Project, project_id
from ..wire.errors import AgentError, AgentExited, AuthRequired
from ..wire.process import StderrRing
from ..wire.session import ExitInfo, SessionPage
from .budget import AgentBudget
from .cards import PermissionCard, Policy, QuestionCard
from .review.cell_review import PendingEdit
from .review.checkpoints import Checkpoint
from .controls import Controls
from .interfaces import default_forker
from .kernel_access import context_blocks
from .live import Live
from .resume import rebuild, resumed
from .state import AgentConfig, AgentState
from .turns import Turn

__all__ = ["Agent", "AgentConfig", "AgentError", "AgentExited", "AuthRequired", "PermissionCard", "QuestionCard",
           "Turn", "Policy", "Live", "PROTECTIONS", "protections", "state_of"]

PROTECTIONS = {
    "sandboxed": "Sandboxed (--sandbox): its process, everything it starts, its terminals and the files escouade_nb "
                 "reads and writes for it are held by bubblewrap: it writes only in its folder, its additional "
                 "directories and its state folders (never the kernel's git config or hooks), does not see the "
                 "kernel's /tmp, Jupyter's runtime folder nor $XDG_RUNTIME_DIR, and its network is its own (of the "
                 "host's loopback only the kernel's tools and the ports you declared)",
    "private": "Private (--private): escouade_nb reads and writes files for it and starts its terminals only inside "
               "its project folder, and no rule plugin not turned on for the project sees its requests",
    "reviewed": "Reviewed (--review): every file it changes in a turn waits for your Keep or Reject",
}
"""Each protection's word, as the agent's head says it, and its meaning (the tooltip)."""

FAR_SANDBOX = ("Sandboxed over there (--sandbox --via): bubblewrap runs on the far side of its launcher, around its "
               "process there: it writes only in its folder, its additional directories and its state folders, and "
               "does not see that side's /tmp, /run nor Jupyter's runtime folders; its network is that side's own "
               "(not cut), and nothing of this machine is held by it")
"""The meaning of ``sandboxed`` for an agent run through a launcher (:func:`~.launch.sandbox.far_command`)."""


def protections(agent: AgentState) -> list[tuple[str, str]]:
    """The protections in force for ``agent``, ``[(word, meaning)]`` in the order of
    :data:`PROTECTIONS`: ``sandboxed`` (it has a sandbox; through a launcher its meaning is
    :data:`FAR_SANDBOX`), ``private`` (a private
    project: the fence), ``reviewed`` (``review=True``). Empty when none holds."""
    held = {"sandboxed": agent.sandbox is not None, "private": agent.private, "reviewed": agent.review}
    return [(word, FAR_SANDBOX if word == "sandboxed" and agent.via else meaning)
            for word, meaning in PROTECTIONS.items() if held[word]]


class Agent(AgentState):
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
    ``review``: the files it changes in each turn (through our fs or by itself) pend
    your Keep or Reject in :attr:`pending_edits` (:mod:`.file_review`; also when its
    project's ``.escouade.yml`` says ``review: true``).
    ``sandbox``: its :class:`~.launch.sandbox.Sandbox` (``--sandbox``: its process under
    bubblewrap), else None.

    These keywords are those of :class:`~.state.AgentConfig`, checked once: ``Agent(ref,
    program=...)`` and ``Agent(AgentConfig(ref, program=...))`` are the same agent; they
    are read-only on the agent (``agent.program``, ``agent.cwd``…, ``agent.config``).
    Raises :class:`AgentError` for a value of the wrong type (naming the field), a mode
    the harness lacks, or an ``"fs": false`` harness in a private project.

    One object: :class:`~.state.AgentState` holds what changes and what its parts
    (typed by the Protocols of :mod:`.interfaces`) change it through; this subclass adds
    the user's API (sending, cards, sessions, dials, fork, export) and re-declares none of
    its state."""

    def __init__(self, harness: HarnessRef | AgentConfig, **start: Any) -> None:
        super().__init__(harness if isinstance(harness, AgentConfig) else AgentConfig(harness, **start))

    @property
    def pid(self) -> int | None:
        """The process id (its process group's too), else None."""
        return self.session.pid if self.session is not None else None

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.session is not None and self.session.alive

    @property
    def session_id(self) -> str | None:
        """ACP's ``sessionId``, else None."""
        return self.session.session_id if self.session is not None else None

    @property
    def exit(self) -> ExitInfo | None:
        """How the process ended (:class:`~..wire.process.ExitInfo`), else None."""
        return self.session.exit if self.session is not None else None

    @property
    def transport(self) -> Any:
        """The session's line transport, else None."""
        return self.session.transport if self.session is not None else None

    @property
    def client(self) -> Any:
        """Our ACP client handlers (fs, terminals), else None."""
        return self.session.client if self.session is not None else None

    @property
    def stderr(self) -> StderrRing:
        """Its stderr (newest 64 KiB)."""
        return self.session.stderr if self.session is not None else StderrRing()

    @property
    def kernel_tools_state(self) -> tuple[str, str]:
        """What the current session has of the kernel's MCP server, and why: ``off`` (not
        asked), ``pending`` (starting), ``offered``, ``connected``, ``not offered`` (the
        reason says why); through ssh, ``offered`` and ``connected`` say the forward's remote end."""
        if self.live is None:
            return ("pending" if self.kernel_tools else "off"), ""
        return self.live.kernel.state, self.live.kernel.why

    @property
    def start_waiting(self) -> str | None:
        """While it starts, what it waits for and how long (``waiting 1 min 05 s for its
        answer to initialize``; redrawn every few seconds: ``on_status``), else None."""
        early = self.early_desk  # its worktree's commands to confirm (worktree_setup), before any process
        if early is not None and early.cards:
            return "waiting for you to confirm the worktree commands of .escouade.yml"
        return self.live.waiting_text() if self.live is not None else None

    @property
    def pending_cards(self) -> list[PermissionCard]:
        early = self.early_desk.cards if self.early_desk is not None else []  # before the session
        return [*early, *(self.live.desk.cards if self.live is not None else [])]

    @property
    def pending_edits(self) -> list[PendingEdit]:
        """Its changes still pending review, oldest first: to the open notebook
        (:class:`~.review.cell_review.PendingEdit`) and, with ``review=True``, to files
        (:class:`~.review.file_review.FileEdit`: ``.path``, ``.diff``, ``.hunks``); each with
        ``.keep()`` and ``.reject()`` (await them or not; see :mod:`.cell_review`). Filled
        by the time ``await turn`` returns."""
        return self.edit_review.pending
    def set_budget(self, tokens: float | None = None, cost: float | None = None,
                   seconds: float | None = None) -> AgentBudget:
        """Cap what the agent spends from now: ``tokens`` (reported at each turn's end),
        ``cost`` (growth of its reported cost, its currency), ``seconds`` (wall time of
        turns). Passing one pauses it on a budget card (``continue`` / ``stop``, handed out
        by :meth:`next_permission`, never answered by rule plugins): see :mod:`.budget`.
        All None clears it. ``ValueError`` for a limit that is not a positive number.

        Tokens and cost count only what the agent reports (``PromptResponse.usage``, its
        ``usage_update`` cost): **an agent that reports nothing never reaches them**. After a
        turn without it, the budget's text (its repr, the view's head) says ``tokens: not
        reported by this agent``. ``seconds`` is measured by the kernel: the one budget
        that holds whatever the agent reports."""
        return self.budget.set(tokens=tokens, cost=cost, seconds=seconds)
    @property
    def checkpoints(self) -> list[Checkpoint]:
        """Its folder's checkpoints, one before each turn, oldest first: each a
        :class:`~.review.checkpoints.Checkpoint` (``.turn``, ``.prompt``, ``.at``); see :meth:`rewind`."""
        return list(self.folder_checkpoints.items)

    async def rewind(self, checkpoint: Checkpoint | int) -> Checkpoint:
        """Put its folder back as it was at ``checkpoint`` (one of :attr:`checkpoints`, or a
        turn number) and go on from before that turn: the agent's fork of then where it
        offers ``session/fork``, else a new session carrying the conversation up to there;
        the later turns stay shown, marked rewound (:mod:`.checkpoints`). :class:`AgentError`
        while a turn runs or for another agent's checkpoint, :class:`~.review.checkpoints.CheckpointError`
        when git cannot restore it."""
        return await self.folder_checkpoints.rewind(checkpoint)

    def rewind_soon(self, checkpoint: Checkpoint | int) -> asyncio.Task:
        """:meth:`rewind` as a task the agent owns (*Rewind to here*; ``close()`` cancels it),
        returned at once; a refusal or a failure is said in the conversation."""
        return self.folder_checkpoints.rewind_soon(checkpoint)

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

    def fork(self, name: str | None = None) -> Agent:
        """A new agent of this harness carrying this conversation, in the squad
        (:meth:`~.squad.Squad.fork`: ``session/fork`` where offered, else the conversation
        as context of its first prompt); returned at once, starting. An agent no squad
        holds forks into the process-wide one (``get_squad()``); :class:`AgentError` when
        no squad was loaded (``escouade_nb.Agent`` loads it)."""
        forker = self.forker or default_forker()
        if forker is None:
            raise AgentError(f"agent {self.name!r} is not in a squad and none is loaded: fork it with Squad.fork")
        return forker.fork(self, name)

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
            from .launch.sign_in import sign_in_with_terminal

            await sign_in_with_terminal(self, method)
            return self
        assert self.live is not None  # its authMethods came from its session
        await self.live.authenticate(method_id)
        return self
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

    def steer(self, prompt: str | Sequence[Any]) -> Turn:
        """Send ``prompt`` (text, or ACP content blocks) now, while a turn runs; returns at
        once the :class:`Turn` that carries it (``await`` it for its end).

        Where the agent takes text into its running turn (:attr:`steering`), it goes there
        and the running turn is returned (if that turn ended before the agent took it, the
        text goes as a steered prompt right after it). Otherwise the running turn is
        stopped (``session/cancel``; what it produced stays) and a new prompt carries the
        text, marked steered, run before the prompts queued earlier: that turn is returned.
        A running turn whose prompt has not gone yet (its checkpoint is being taken) is not
        stopped: the text joins its prompt, and that turn is returned. With no turn
        running it is a plain prompt, queued like :meth:`send`'s.
        ``ValueError`` for an empty prompt (:mod:`.steer`)."""
        from .steer import steer

        return steer(self, prompt)

    @property
    def steering(self) -> str | None:
        """The request that puts text into this agent's running turn: ``_session/steering``
        (advertised in its ``initialize`` answer's ``_meta.steering.supported``), goose's
        ``_goose/unstable/session/steer`` (while goose names the running turn's run id), or
        None: :meth:`steer` stops the turn and prompts again."""
        from .steer import native_method

        return native_method(self)

    @property
    def queued(self) -> list[Turn]:
        """The prompts waiting for their turn, in the order they will run (a steered one
        first): each with ``.edit(text)`` and ``.drop()`` (:class:`Turn`)."""
        return self.turns.queued
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
        # the policies are the user's callables: which of them know rule plugins, they say themselves
        hints = [hint for p in self.policies if callable(hint := getattr(p, "hint", None))
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
        return await self.next_card("permission", timeout, "permission request")

    async def next_question(self, timeout: float | None = None) -> QuestionCard:
        """The next question card not handed out yet (waits for one; as :meth:`next_permission`)."""
        return await self.next_card("question", timeout, "question")

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
    async def sign_in_input(self, text: str) -> None:
        """Answer the running terminal sign-in: ``text`` and a newline on its program's
        stdin. :class:`AgentError` when no terminal sign-in runs."""
        if self.sign_in_job is None:
            raise AgentError(f"no terminal sign-in of {self.name!r} is running")
        await self.sign_in_job.send(text)

    async def logout(self) -> None:
        """Sign out of the agent (ACP ``logout``): its sessions may then ask for a sign-in
        again. ``AgentError`` when it does not offer it (``agentCapabilities.auth.logout``)."""
        await (await self.ready_session()).logout()
        self.conversation.add_notice("Signed out (logout): the agent may ask you to sign in again.")

    @classmethod
    def resume(cls, transcript_path: Path, harness: HarnessRef | None, *, program: str | None,
               **kwargs: Any) -> Agent:
        """An agent rebuilt from its transcript (after a kernel restart): the
        conversation is replayed at once; call ``start()`` to reattach — with
        ``session/load`` when the agent advertises ``loadSession`` (its replay is folded
        into this conversation, not appended twice), else with a new session (said so).
        ``harness`` None means its manifest has gone: the agent is listed as
        "harness missing" and its conversation stays readable."""
        agent = cls(**resumed(transcript_path, harness, program=program, **kwargs))
        rebuild(agent, transcript_path, harness)
        return agent

    def __repr__(self) -> str:
        return f"<Agent {self.name} ({self.harness.id}) {self.status}>"


def state_of(agent: Agent) -> AgentState:
    """The :class:`~.state.AgentState` of ``agent``: the agent itself (one object; kept
    for the callers that name the state side)."""
    return agent


Agent.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # help(Agent): AgentConfig's keywords
    [p if p.name == "harness" else p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
     for p in inspect.signature(AgentConfig).parameters.values()])

for _method, _work in ((Agent.escouade_modes, Controls.escouade_modes),
                       (Agent.set_escouade_mode, Controls.set_escouade_mode), (Agent.set_mode, Controls.set_mode),
                       (Agent.set_config_option, Controls.set_config_option),
                       (Agent.model_choices, Controls.model_choices), (Agent.set_model, Controls.set_model)):
    _method.__doc__ = _work.__doc__  # the façade says what the work does
del _method, _work

