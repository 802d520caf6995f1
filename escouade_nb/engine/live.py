"""One process of an agent, from spawn to end: :class:`Live`.

A ``Live`` bundles what exists for one process — the
:class:`~..wire.session.AgentSession`, its cards (:class:`~.cards.CardDesk`), its files
and terminals (:class:`~.workspace.Workspace`), the per-session flags — and runs it:
``initialize``, ``session/new`` or ``session/load``, the sign-in, the mode to set, then
the end (cards answered, tool calls closed, the running turn failed, the status saying
how). ``Agent.restart()`` makes a new ``Live``: nothing of a dead process survives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import acp

from ..core import acp_v1_25
from ..core import plans
from ..core.adapters import adapt
from ..core.status import AgentStatus
from ..wire.client import EscouadeClient, capabilities
from ..wire.errors import AgentError, AgentExited, AuthRequired
from ..wire.fs import Confinement
from ..wire.process import terminate_group
from ..wire.session import AgentSession, ExitInfo, SessionClosed
from ..wire.transcript import Transcript
from ..wire.transport import MAX_LINE_BYTES
from .cards import CardDesk
from .kernel_access import KernelAccess
from .launch import remote
from .launch.far_side import FarSideError, far_sandbox_refusal
from .launch.far_side import probe as probe_far_side
from .launch.launcher import agent_env, launch_argv
from .resume import ReplaySkip
from .launch.sandbox import SandboxError, client_reach, far_command, sandboxed
from .workspace import Workspace

if TYPE_CHECKING:
    from .interfaces import LiveAgent

log = logging.getLogger(__name__)

START_LIMIT_ENV = "ESCOUADE_NB_START_TIMEOUT"
"""Environment variable: seconds a start may wait for the agent's answers to
``initialize`` and ``session/new`` (unset, empty or 0: no limit; see :func:`start_limit`)."""
STILL_STARTING = 10.0
"""Seconds of a start without an answer after which the conversation says it still waits."""
START_TICK = 5.0
"""Seconds between two redraws of a waiting start's head (how long it has waited)."""
STOP_GRACE = 1.0
"""Seconds a process stopped while it starts has between SIGTERM and SIGKILL."""


def start_limit() -> float | None:
    """The start limit of :data:`START_LIMIT_ENV` in seconds, or None: no limit (unset,
    empty, 0, negative or not a number — a typo waits rather than cuts a slow agent).

    Why no limit by default: a start ends by itself when the process exits (its exit code
    and stderr then say why), some agents take minutes starting their own MCP servers, and
    the head shows how long it has waited while Stop ends it at once. A limit is for runs
    nobody watches (nbclient, CI)."""
    try:
        value = float(os.environ.get(START_LIMIT_ENV) or 0)
    except ValueError:
        return None
    return value if value > 0 else None


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``."""
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class Live:
    """One process of ``agent``. ``resume``: the session id to reload (``session/load``)
    with ``replay`` the updates it will replay that the conversation already has;
    ``mode``: the Escouade mode to set once the session exists."""

    def __init__(self, agent: LiveAgent, *, resume: str | None = None, replay: ReplaySkip | None = None,
                 mode: str | None = None) -> None:
        self.agent = agent
        self.resume = resume
        self.replay = replay or ReplaySkip()
        self.mode = mode
        self.ready = asyncio.Event()
        self.told_about_questions = False  # the questionsInText preamble, once per session
        self._preamble = plans.QUESTIONS_PREAMBLE if agent.harness.acp.questions_in_text else ""
        self._harness_id = agent.harness.short_id  # a start parameter: read once, not at each update (_fold)
        self.cancel_sent = False  # one session/cancel per Stop
        self.mcp_servers: list[Any] = []  # the MCP servers its session was given (a checkpoint's session/fork too)
        self.ended = False
        self._files_token: int | None = None  # review=True: this process's token in the agent's file watch
        self.waiting: str | None = None  # the request a start waits for the answer to (``initialize``…)
        self.waiting_since: float | None = None  # time.monotonic() when the start began
        self.stopped_starting = False  # Stop pressed (or closed) while it started
        env = agent_env(agent)
        if agent.record and agent.transcript is None:
            agent.use_transcript(Transcript.new(agent.name, {
                "agent": agent.name, "harness": agent.harness.id, "cwd": str(agent.cwd), "argv": agent.argv(),
                "started_from": os.getcwd(),  # the notebook's folder: its project lists it (engine/listing.py)
                **({"via": list(agent.via)} if agent.via else {}),  # a resume runs it there again
                **({"worktree": agent.worktree.record()} if agent.worktree is not None else {}),
                **({"sandbox": agent.sandbox.record()} if agent.sandbox is not None else {}),
                **({"previous": str(agent.previous_transcript)} if agent.previous_transcript is not None else {}),
                **({"add_dirs": [str(d) for d in agent.add_dirs]} if agent.add_dirs else {}),
                **({"system_prompt": agent.system_prompt, "system_prompt_mode": agent.system_prompt_mode}
                   if agent.system_prompt else {}),
                **({"review": True} if agent.review else {})},
                on_error=agent.transcript_failed))
        self.desk = CardDesk(agent)
        self.token_folder: Path | None = None  # the kernel's MCP token folder, once a sandboxed start asked for it
        confinement = None
        if agent.sandbox is not None:  # until its sandbox is made: its folders only, no terminal (run() sets it)
            folders = (Path(agent.cwd), *map(Path, agent.add_dirs))
            confinement = Confinement(writable=folders, hidden=(Path("/"),), shown=folders)
        client = EscouadeClient(cwd=agent.cwd, on_permission=self.desk.on_permission, on_update=self._fold,
                                on_file_written=self._file_written,
                                fence=agent.fence, also=agent.add_dirs, terminal_env=env,
                                on_elicitation=self.desk.on_elicitation,
                                on_elicitation_complete=self.desk.on_elicitation_complete, confinement=confinement)
        self.workspace = Workspace(agent.conversation, agent.cwd, name=agent.name, fenced=agent.private,
                                   terminals=client.terminals)
        client.terminals.subscribe(self.workspace.terminal_event)
        transcript = agent.transcript
        self.session = AgentSession(
            name=agent.name, argv=agent.argv(), cwd=agent.cwd, env=env, client=client, fold=self._fold,
            withdrawn=self.desk.withdrawn, on_fatal=self._on_fatal, on_refused=self._on_refused,
            on_models=agent.controls.set_models,
            on_exit=lambda info: self.end(), fold_child=self._fold_child,
            # None: no limit, which AgentSession handles (anyio.fail_after(None)); its annotation says float
            start_timeout=agent.start_timeout,  # type: ignore[arg-type]
            line_observers=[transcript.wire_line] if transcript is not None else ())
        self.desk.session = self.session
        client.on_child_permission = self.desk.on_child_permission
        self.kernel = KernelAccess(self)
        self.desk.kernel = self.kernel

    @property
    def current(self) -> bool:
        return self.agent.live is self

    # -- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Spawn, open the session, wait for the process's end (the agent's main task)."""
        try:
            if self.agent.sandbox is not None and self.agent.via:  # bwrap on the far side, inside the launcher
                await self._far_sandbox()
            elif self.agent.sandbox is not None:  # bwrap around it: the folders it may write, made off the loop
                # the kernel's server: its port forwarded into the agent's network, its token folder hidden
                # but for this session's own token file (the stdio bridge's)
                port, folder, token_file = await self.kernel.sandbox_view()
                self.token_folder = folder  # hidden from its terminal sign-in too
                binds = await sandboxed(self.agent, self.session.argv, self.session.env,
                                        kernel_port=port, token_folder=folder, token_file=token_file)
                confined = await asyncio.to_thread(binds.confined, self.session.argv)
                self.session.argv, self.session.confined = confined.argv, confined  # pasta attached at the spawn
                # its client fs and terminals reach what its process reaches, from the same binds
                # (engine/launch/sandbox.py, wire/fs.py, wire/terminals.py)
                self.session.client.confine(*client_reach(binds))
            await self.kernel.before_spawn(self.session)  # a launcher's relay; an ssh launcher's reverse forward
            files = self.agent.file_watch  # review=True: the folder now, compared at its end
            if files is not None:
                self._files_token = await files.process_started()
            async with self.session:
                await self._handshake()
                await self.session.exited.wait()
        except SessionClosed:
            pass  # closed (or restarted) before it was up: end() says so
        except (SandboxError, FarSideError) as exc:  # no bwrap (here or there), a state folder: nothing started
            self._fail(str(exc))
        except OSError as exc:  # the program could not start
            self._fail(f"could not start {' '.join(self.agent.argv())}: {exc}")
        except Exception as exc:  # a bug of ours: the agent ends, saying why
            log.exception("agent %s failed", self.agent.name)
            self._fail(f"agent {self.agent.name!r} failed: {exc}")
        finally:
            self.end()  # a no-op when the process's end was handled already (on_exit)
            await self._files_after_exit()

    async def _far_sandbox(self) -> None:
        """``--sandbox --via``: the agent's far command under bwrap on the far side, inside the
        launcher's wrapper (:func:`~.launch.sandbox.far_command`), from what the probe found there
        (the squad's, else probed now: a resume, a restart); said in one line, with what does not
        hold there. :class:`~.launch.far_side.FarSideError` (one line) where it cannot."""
        agent = self.agent
        far = agent.far_side
        if far is None:
            locate = agent.harness.harness.locate
            names = list(locate.names) if locate and locate.names else [agent.program]
            far = await probe_far_side(list(agent.via), names, sandbox_folder=str(agent.cwd))
            far_sandbox_refusal(far, agent.cwd)
            agent.far_side = far
        acp_spec = agent.harness.acp
        sandbox = agent.sandbox
        command = far_command([agent.program, *acp_spec.args], folder=agent.cwd, home=far.home,
                              state_folders=list(acp_spec.state_folders or ()), also=list(agent.add_dirs),
                              run_dirs=far.run_dirs, offline=sandbox.offline)
        self.session.argv = launch_argv(agent.via, command)
        agent.conversation.add_notice(
            f"Sandboxed over there (bwrap in {far.where}): {agent.cwd} writable, the rest read-only, a private "
            f"/tmp; " + ("no network at all" if sandbox.offline else
                         "its network is the far side's own (no pasta there: neither cut nor limited to the "
                         "kernel's port)") + "; nothing of this machine is fenced by it")

    async def _files_after_exit(self) -> None:
        """review=True: what the process changed since its last turn is pending review."""
        files, token = self.agent.file_watch, self._files_token
        if files is None or token is None:
            return
        self._files_token = None
        try:
            await files.process_ended(token)
        except Exception:  # a bug of ours: the agent's end goes on
            log.exception("escouade_nb: the file review at the process's end failed")

    @property
    def starting(self) -> bool:
        """The process is starting: no session yet, no sign-in asked, not ended."""
        return not self.ready.is_set() and not self.ended and self.agent.status is AgentStatus.STARTING

    def waiting_text(self) -> str | None:
        """While it starts, what it waits for and how long (``waiting 1 min 05 s for its
        answer to session/new``), else None."""
        if not self.starting or self.waiting_since is None:
            return None
        limit = self.agent.start_timeout
        return (f"waiting {_duration(time.monotonic() - self.waiting_since)} for its answer to "
                f"{self.waiting or 'the start'}" + (f", at most {_duration(limit)}" if limit else ""))

    async def _tick(self) -> None:
        """While the start waits: the head redrawn every :data:`START_TICK` seconds (how
        long), and once, after :data:`STILL_STARTING`, a notice that it still waits."""
        agent = self.agent
        told = False
        while self.starting:
            await asyncio.sleep(START_TICK)
            if not self.starting:
                return
            if not told and self.waiting_since is not None and time.monotonic() - self.waiting_since >= STILL_STARTING:
                told = True
                limit = agent.start_timeout
                agent.conversation.add_notice(
                    f"{agent.name} has not answered {self.waiting or 'the start'} after {STILL_STARTING:g} s (some "
                    f"agents start their own MCP servers first): still waiting, "
                    + (f"up to {_duration(limit)} ({START_LIMIT_ENV})" if limit else "as long as its process runs")
                    + ". Stop ends the start.")
            agent.notify_status()

    async def stop_start(self, by_you: bool = True) -> None:
        """End a start under way (Stop, or a close): its process group gets SIGTERM now and
        SIGKILL after :data:`STOP_GRACE` seconds — it has no session to end cleanly; a
        spawn not done yet never speaks. ``by_you``: Stop was pressed: the conversation
        says so and the agent is ``closed`` (Restart starts it again). Returns once the
        process is gone."""
        agent, session = self.agent, self.session
        if self.stopped_starting or not self.starting:
            return
        self.stopped_starting = True
        session.closing = True
        if by_you and self.current:
            waited = f" after {_duration(time.monotonic() - self.waiting_since)}" if self.waiting_since else ""
            agent.stopped_while_starting(f"agent {agent.name!r} was stopped by you while it started",
                                         f"Stopped by you while starting{waited}: its process was ended "
                                         f"(Restart starts it again).")
        if session.process is not None:
            await terminate_group(session.process, grace=STOP_GRACE)
            await session.exited.wait()

    async def _handshake(self) -> None:
        agent, session = self.agent, self.session
        self.waiting, self.waiting_since = "initialize", time.monotonic()
        loop = asyncio.get_running_loop()
        ticker = loop.create_task(self._tick(), name=f"escouade start of {agent.name}")
        steps = loop.create_task(self._handshake_steps(), name=f"escouade handshake of {agent.name}")
        gone = loop.create_task(session.exited.wait(), name=f"escouade exit during the start of {agent.name}")
        try:
            # the process's end ends the wait: a request it will never answer is not waited on (no time limit
            # by default); end() says how it ended
            await asyncio.wait({steps, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (ticker, steps, gone):
                task.cancel()
            await asyncio.gather(ticker, steps, gone, return_exceptions=True)
            self.waiting = None
        failure = steps.exception() if steps.done() and not steps.cancelled() else None
        if failure is not None:
            raise failure

    async def _handshake_steps(self) -> None:
        agent, session = self.agent, self.session
        try:
            await session.initialize(capabilities(agent.uses_client_fs, terminal=True, questions=True),
                                     extra=acp_v1_25.client_capabilities(notices=True, compaction=True, subagents=True,
                                                                         auth_terminal=True))
            self._check_version()
            ours = (session.agent_capabilities.get("_meta") or {}).get("escouade") or {}
            agent.initialized(ours)
            await self.open()
        except TimeoutError:
            await self._abort(f"agent {agent.name!r} did not answer initialize/session/new within "
                              f"{agent.start_timeout:g} s ({START_LIMIT_ENV})")
        except AuthRequired as exc:
            agent.needs_sign_in(exc)
        except AgentError as exc:
            await self._abort(str(exc))
        except acp.RequestError as exc:
            await self._abort(f"agent {agent.name!r} refused to start a session: {exc} ({exc.code})")
        except ConnectionError:
            pass  # the process ended; end() tells why
        except Exception as exc:  # a malformed answer (e.g. a protocolVersion that is not an integer)
            await self._abort(session.protocol_error() or f"agent {agent.name!r} gave an answer this client "
                                                          f"cannot read: {str(exc).splitlines()[0]}")
        else:
            await self.session_ready()

    def _check_version(self) -> None:
        """Warn when the version the agent gives in ``initialize`` (``agentInfo``) is
        outside the manifest's ``tested`` range (for agents without a version flag)."""
        version = (self.session.agent_info or {}).get("version")
        if version and self.agent.harness.harness.tested is not None:
            self.agent.check_version(version)

    async def open(self) -> None:
        """``session/new``, or ``session/load`` when resuming an agent that supports it."""
        conversation, session, resume = self.agent.conversation, self.session, self.resume

        def before_load() -> None:
            conversation.new_session()  # the replay folds afresh (what the transcript has is skipped)
            self.replay.active = True

        servers = self.mcp_servers = await self.kernel.servers()  # a checkpoint's session/fork gives them too
        known = bool(conversation.items)  # the session's history, from the transcript
        self.waiting = "session/load" if resume and session.agent_capabilities.get("loadSession") else (
            "session/resume" if resume else "session/new")
        try:
            answer = await session.open(resume=resume, before_load=before_load, mcp_servers=servers,
                                        additional_directories=self.agent.add_dirs,
                                        system_prompt=self._system_prompt(),
                                        replay=not known)  # nothing of it here: load replays it
        finally:
            self.replay.done()
        self._said_setup()
        if session.resumed:
            conversation.close_messages()
            conversation.add_notice(f"Reattached to session {session.session_id} (session/resume: the conversation "
                                    f"above is from the transcript)." if known else
                                    f"Reattached to session {session.session_id} (session/resume: the agent does not "
                                    f"replay it, so its earlier messages are not shown).")
        elif session.loaded:
            conversation.add_notice(f"Reattached to session {session.session_id} (session/load).")
        if self.replay.shown and (session.loaded or session.resumed):  # the agent is untrusted: say it
            conversation.add_notice(
                f"The agent's replay of session {session.session_id} differs from this conversation's record: "
                f"the {self.replay.shown} update(s) it replayed that the record does not have are shown above, "
                f"after the record's own.", level="warning")
        else:
            if resume:
                conversation.add_notice(
                    "This agent cannot reload a session (no loadSession): a new session was started; "
                    "the conversation above is the old one's transcript.", level="warning")
            conversation.new_session()
        self.resume = None
        conversation.set_session_state(
            modes=answer.modes.model_dump(mode="json", by_alias=True, exclude_none=True) if answer.modes else None,
            config_options=[o.model_dump(mode="json", by_alias=True, exclude_none=True)
                            for o in (answer.config_options or [])] or None)
        session.opened()
        self.kernel.opened()

    def _system_prompt(self) -> acp_v1_25.SystemPrompt | None:
        """ACP ``systemPrompt`` for the session setup where the agent offers it: the
        questionsInText instruction and the user's ``--system-prompt`` (in its mode; an
        ``override`` the agent does not offer is sent as ``append``). Else None: they go
        before the first prompt (:meth:`take_preamble`)."""
        agent, caps = self.agent, self.session.agent_capabilities
        text = "".join(filter(None, [self._preamble if not self.told_about_questions else "", agent.system_prompt]))
        if not text or not acp_v1_25.offers_system_prompt(caps):
            return None
        mode = agent.system_prompt_mode if agent.system_prompt else "append"
        if mode == "override" and not acp_v1_25.offers_system_prompt(caps, "override"):
            agent.conversation.add_notice(f"{agent.name} takes a system prompt to append only (no systemPrompt "
                                          f"override): yours was appended.", level="warning")
            mode = "append"
        return acp_v1_25.SystemPrompt.text(text.strip(), mode)  # type: ignore[arg-type]

    def _said_setup(self) -> None:
        """After the session setup: what went in ``systemPrompt`` is not sent again; the
        user's system prompt goes before the first prompt where none could be sent."""
        agent, session = self.agent, self.session
        if session.system_prompt_sent:
            self.told_about_questions = True
        elif agent.system_prompt:
            self._preamble += agent.system_prompt.strip() + "\n\n"
            agent.conversation.add_notice(f"{agent.name} takes no system prompt (no sessionCapabilities.systemPrompt):"
                                          f" yours goes before your first prompt.", level="warning")
        if agent.add_dirs and not session.additional_directories:
            agent.conversation.add_notice(
                f"{agent.name} does not take additional directories (no sessionCapabilities.additionalDirectories): "
                f"{', '.join(map(str, agent.add_dirs))} were not given to it.", level="warning")

    def take_preamble(self) -> str:
        """What goes before the first prompt of this session, once: the questionsInText
        instruction and the user's system prompt where no ``systemPrompt`` took them."""
        if self.told_about_questions:
            return ""
        self.told_about_questions = True  # once per session: a restart tells the new one
        return self._preamble

    async def session_ready(self) -> None:
        agent = self.agent
        if not self.current or self.session.closing:  # closed or replaced while it opened
            return
        if agent.transcript is not None:
            agent.transcript.event("session", session_id=self.session.session_id)
        agent.signed_in()
        self.ready.set()
        agent.set_status(AgentStatus.IDLE)
        agent.wake_waiters()
        agent.controls.session_opened()  # the menus show the agent's real mode, mapped back to Escouade's
        if self.mode is not None and self.mode != agent.controls.mode and self.mode in agent.controls.escouade_modes():
            await agent.controls.set_escouade_mode(self.mode)

    async def authenticate(self, method_id: str) -> None:
        """ACP ``authenticate``, then the session (see :meth:`~.agent.Agent.authenticate`)."""
        agent = self.agent
        try:
            await self.session.authenticate(method_id)
            if self.session.session_id is None:
                await self.open()
        except AuthRequired as exc:
            agent.conversation.add_notice("Still not signed in", level="error", detail=str(exc))
            raise
        except acp.RequestError as exc:
            offered = ", ".join(f"{m.get('id')} ({m.get('name')})" for m in agent.auth_methods)
            error = AgentError(f"sign-in with {method_id!r} failed: {exc}; sign-in methods: {offered}")
            agent.conversation.add_notice("Sign-in failed", level="error", detail=str(error))
            raise error from None
        if self.ready.is_set():  # signed in again during a session (a prompt got -32000): it goes on
            agent.signed_in()
            agent.set_status(AgentStatus.IDLE)
            return
        await self.session_ready()

    # -- incoming -------------------------------------------------------------------------------
    def _file_written(self, path: Path, old: str | None, new: str) -> None:
        """A write through our fs: a diff in its tool card; with ``review=True``, a file pending review."""
        self.workspace.file_written(path, old, new)
        files = self.agent.file_watch
        if files is not None:
            files.written(path, old, new)

    def _fold(self, update: Any) -> None:
        replay = self.replay
        if replay.active and replay.skip(update):  # already in the conversation, rebuilt from the transcript
            return
        conversation = self.agent.conversation
        with self.agent.keeper.folding():  # what the fold adds (an adapter's notice) a replay adds again
            update = adapt(self._harness_id, conversation, update)
            changes = [] if update is None else conversation.apply(update if isinstance(update, dict)
                                                                    else {"value": update})
        self.agent.activity_watch.saw(changes)  # a sign of life, and what it does (engine/activity.py)

    def _fold_child(self, session_id: str, update: Any) -> None:
        """An update of a child session (a subagent): into its nested conversation."""
        sub = self.agent.conversation.subagents.get(session_id)
        if sub is None:
            return
        update = adapt(self._harness_id, sub.conversation, update)
        changes = [] if update is None else sub.conversation.apply(update if isinstance(update, dict)
                                                                   else {"value": update})
        self.agent.activity_watch.saw(changes)  # its subagent's work is its own

    def _on_refused(self, size: int, envelope: dict[str, Any]) -> None:
        """A message of the agent over the wire's cap was refused unread: one line says so."""
        cap = self.session.transport.max_line_bytes if self.session.transport is not None else MAX_LINE_BYTES
        what = envelope.get("method") or "a message"
        answered = ", answered with an error" if "id" in envelope else ""
        self.agent.conversation.add_notice(
            f"A message of {size / 1e6:.1f} MB from the agent was refused: over the cap of {cap / (1 << 20):g} MiB "
            f"({what}{answered}); nothing of it was read.", level="info")

    def _on_fatal(self, message: str) -> None:
        self.agent.conversation.add_notice(f"Transport error: {message.removeprefix('transport error: ')}; the "
                                           f"agent was stopped (restart it to go on).", level="error")

    # -- the end ---------------------------------------------------------------------------------
    def _fail(self, error: str) -> None:
        self.agent.fail_start(error, notice=f"Could not start: {error}")

    async def _abort(self, error: str) -> None:
        self._fail(error)
        await self.session.close()

    def end(self) -> None:
        """The process ended (or never started): cards answered, tool calls closed, the
        running turn failed, the status says how. Once."""
        if self.ended:
            return
        self.ended = True
        agent, session = self.agent, self.session
        info = session.exit or ExitInfo(None, session.stderr.tail(), session.closing)
        if session.process is not None and agent.transcript is not None:
            agent.transcript.event("exit", code=info.code, stderr_tail=info.stderr_tail, expected=info.expected)
        dropped = None if info.expected or session.fatal else remote.lost(agent.via, info.code)
        if dropped is not None:  # an agent by URL: its connection dropped, a reconnection follows
            agent.error = f"the connection to {dropped} was lost"
            agent.conversation.add_notice(f"The connection to {dropped} was lost: reconnecting.", level="warning",
                                          detail=info.stderr_tail)
        elif not info.expected and agent.status is not AgentStatus.FAILED:
            agent.process_exited(session.fatal or str(AgentExited(agent.name, info.code, info.stderr_tail)),
                                 info.code, info.stderr_tail)
        why = "connection lost" if dropped is not None else "agent exited" if not info.expected else \
            "agent restarted" if agent.restarting else "agent closed"
        self.desk.close(why)
        self.kernel.close()
        agent.conversation.cancel_unfinished()
        agent.conversation.close_messages()
        if self.current and agent.status is not AgentStatus.FAILED and not agent.restarting:
            agent.set_status(AgentStatus.CLOSED if info.expected else AgentStatus.EXITED)
        turn = agent.turns.current
        if turn is not None:
            turn._finish(error=self.turn_error())
        agent.wake_waiters()
        if dropped is not None and self.current and agent.status is AgentStatus.EXITED:
            agent.reconnect_soon(session.session_id or self.resume)

    def turn_error(self) -> AgentError:
        """Why a turn of this process ended without an answer: the wire broke, we closed
        or restarted it (not a crash), or it exited by itself (:class:`AgentExited`)."""
        agent, session = self.agent, self.session
        info = session.exit or ExitInfo(None, session.stderr.tail(), session.closing)
        if session.fatal:
            return AgentError(f"agent {agent.name!r} was stopped: {session.fatal}")
        dropped = None if info.expected else remote.lost(agent.via, info.code)
        if dropped is not None:
            return AgentError(f"agent {agent.name!r}: the connection to {dropped} was lost during the turn")
        if info.expected:
            return AgentError(f"agent {agent.name!r} was {'restarted' if agent.restarting else 'closed'} during the "
                              f"turn")
        return AgentExited(agent.name, info.code, info.stderr_tail, during="the turn")
