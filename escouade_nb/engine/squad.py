"""The squad: every agent of this kernel (or script), found harnesses, and the exit hook.

``get_squad()`` returns the process-wide :class:`Squad`. At interpreter exit (kernel
shutdown included) every live agent's process group is killed.

Nothing here blocks the loop: a program's ``--version`` runs as an async subprocess in a
task the squad owns (cancelled by :meth:`Squad.aclose` and at exit). :meth:`Squad.start`
returns at once and the "older/newer than tested" notice arrives when the version is read;
:meth:`Squad.listing` returns at once with the versions already known, and the others
arrive when read (:attr:`Listing.on_change`, :meth:`Listing.wait`).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import shlex
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .agent import Agent, protections, state_of
from .budget import SquadBudget
from .interfaces import register_default_forker
from .kernel_access import in_kernel as kernel_in_process
from ..kernel_mcp.server import preload_in_kernel
from .launch.far_side import far_sandbox_refusal
from .launch.far_side import probe as probe_far_side
from .launch.remote import remote_harness
from .launch.versions import ProgramVersions
from .worktrees import agent_worktrees, worktree_setup
from .launch.sandbox import Sandbox, SandboxError, sandbox_check
from .worktrees.worktree import Worktree, WorktreeError, repository_of
from .._errors import EscouadeError
from ..core.observers import Observers
from ..core.status import ENDED, NAME_FREE, NAME_REUSED, AgentStatus
from ..manifest import Discovery, HarnessRef, discover, install_hint, locate_program, version_status
from ..permissions import RulePlugins
from ..wire import url_bridge
from ..wire.errors import running_loop
from ..manifest.project import Project, ProjectFileError, project_launcher, read_worktree_config

log = logging.getLogger(__name__)

READING = "reading"
"""The status of a listing row whose version is being read."""


class AgentTable(dict):
    """The squad's agents by name (a ``dict``); ``on_change`` is told (no argument) when
    one is set or removed, so a squad view sees agents come and go."""

    def __init__(self) -> None:
        super().__init__()
        self.on_change: Observers[[]] = Observers("squad agents")

    def __setitem__(self, name: str, agent: Agent) -> None:
        super().__setitem__(name, agent)
        self.on_change.emit()

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self.on_change.emit()

    def pop(self, name: str, *default: Any) -> Any:
        out = super().pop(name, *default)
        self.on_change.emit()
        return out



def _ports(ports: Sequence[int | str]) -> tuple[int, ...]:
    """``sandbox_ports`` checked: TCP ports 1–65535, each once, in order; :class:`SquadError`
    naming a bad one."""
    found: list[int] = []
    for port in ports:
        try:
            number = int(port)
        except (TypeError, ValueError):
            number = 0
        if not 0 < number < 65536 or isinstance(port, bool):
            raise SquadError(f"sandbox port {port!r}: not a TCP port (1-65535)")
        if number not in found:
            found.append(number)
    return tuple(found)


def named_program(ref: HarnessRef) -> str:
    """The program of ``ref`` run through a launcher (``--via``): wherever the launcher puts
    it, so named (its manifest's first ``locate.names``, else its short id), not looked up here."""
    locate = ref.harness.locate
    return locate.names[0] if locate and locate.names else ref.short_id

async def _in_turn(coros: list[Coroutine[Any, Any, Any]]) -> None:
    """Await ``coros`` one after the other (an agent's preparations); the ones never begun are closed."""
    try:
        for coro in coros:
            await coro
    finally:
        for rest in coros:
            rest.close()


class SquadError(EscouadeError):
    """A request the squad cannot carry out; the message is one line for the user."""


class ProgramNotFound(SquadError):
    """The harness's program is on neither PATH nor the Python environment's scripts."""

    def __init__(self, ref: HarnessRef) -> None:
        names = ", ".join(ref.harness.locate.names) if ref.harness.locate else ref.short_id
        hint = install_hint(ref.harness)
        msg = f"{ref.harness.display_name}: no program named {names} on PATH."
        msg += f" Install it with: {hint}" if hint else " The manifest gives no install command."
        super().__init__(msg)
        self.ref = ref
        self.install_hint = hint


@dataclass
class HarnessRow:
    """One line of ``%escouade``: a harness, where its program is, its version."""

    ref: HarnessRef
    program: str | None
    version: str | None
    status: str  # tested / older / newer / unknown / missing / reading (its version is being read)


class Listing:
    """What ``%escouade`` shows: harnesses found, broken manifests, running agents.

    Made at once: a version not read yet shows as ``reading…`` (row status
    ``"reading"``) and is filled in when read; ``on_change`` is told of each one
    (``listing.on_change.subscribe(fn)``, ``fn(listing)``), and ``await listing.wait()``
    returns once every version is in. Everything else of it is fixed when it is made.
    Its HTML is the views' (:func:`~..widgets.tables.squad_html`)."""

    def __init__(self, rows: list[HarnessRow], errors: list[str], agents: list[Agent]) -> None:
        self.rows, self.errors, self.agents = rows, errors, agents
        self.on_change: Observers[[Listing]] = Observers("listing")
        self._task: asyncio.Task | None = None

    @property
    def complete(self) -> bool:
        """Whether every version is read."""
        return all(r.status != READING for r in self.rows)

    async def wait(self) -> Listing:
        """Wait until every version is read (cancelling this wait leaves the reads be)."""
        if self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        return self

    def _filled(self, row: HarnessRow, version: str | None) -> None:
        row.version = version
        row.status = version_status(version, row.ref.harness.tested)
        self.on_change.emit(self)

    def __repr__(self) -> str:
        lines = ["Harnesses:"]
        shorts = [r.ref.short_id for r in self.rows]
        for r in self.rows:
            if shorts.count(r.ref.short_id) > 1:  # ambiguous: the full id is what starts it
                lines.append(f"  {r.ref.id}")
            where = r.program or "not found on PATH"
            version = " (version: reading…)" if r.status == READING else f" {r.version}" if r.version else ""
            note = f" ({r.status} than tested)" if r.status in ("older", "newer") else ""
            lines.append(f"  {r.ref.short_id:<12} {r.ref.harness.display_name:<14} {where}{version}{note}")
        for e in self.errors:
            lines.append(f"  ! {e}")
        lines.append("Agents:" if self.agents else "Agents: none running")
        for a in self.agents:
            held = ", ".join(word for word, _meaning in protections(a))
            lines.append(f"  {a.name:<12} {a.harness.short_id:<12} {a.status:<10} {a.cwd}"
                         + (f" ({held})" if held else ""))
        return "\n".join(lines)


class Squad:
    """All agents of this process, by name."""

    def __init__(self) -> None:
        self.agents: AgentTable = AgentTable()
        self._tasks: dict[asyncio.Task, bool] = {}  # the squad's own tasks -> whether aclose() cancels it
        self.versions = ProgramVersions(self._own)  # the programs' --version, read once per program file
        self._discovery: Discovery | None = None
        self.rules = RulePlugins()  # rule plugins: host, broker (every agent's policy), journal, states
        self.budget = SquadBudget(lambda: list(self.agents.values()))  # set_budget: the sum of its running agents

    def set_budget(self, tokens: float | None = None, cost: float | None = None,
                   seconds: float | None = None) -> SquadBudget:
        """Cap what the squad's running agents spend together from now (each agent's spend
        since then summed; kinds and the card as :meth:`Agent.set_budget`, the card saying
        "the squad's budget"). All None clears it. ``ValueError`` for a limit that is not
        a positive number."""
        return self.budget.set(tokens=tokens, cost=cost, seconds=seconds)

    def discovery(self, refresh: bool = False) -> Discovery:
        if self._discovery is None or refresh:
            self._discovery = discover()
        return self._discovery

    def listing(self) -> Listing:
        """The harnesses found, at once. On a running loop the versions not known yet
        are read concurrently in the background and arrive in the listing when read;
        without one (a plain script) they are read before it returns."""
        d = self.discovery(refresh=True)
        rows = []
        for ref in d.harnesses:
            program = locate_program(ref.harness)
            row = HarnessRow(ref, program, None, "missing" if program is None else READING)
            if program is not None:
                known, version = self.versions.known(program, ref.harness.version_args)
                if known:
                    row.version, row.status = version, version_status(version, ref.harness.tested)
            rows.append(row)
        listing = Listing(rows, [str(x) for x in d.errors], list(self.agents.values()))
        pending = [r for r in rows if r.status == READING]
        if pending:
            if _running_loop() is None:
                for r in pending:
                    r.version = self.versions.now(r.program, r.ref.harness.version_args)
                    r.status = version_status(r.version, r.ref.harness.tested)
            else:
                listing._task = self._own(self._fill(listing, pending), "escouade listing versions")
        return listing

    async def _fill(self, listing: Listing, rows: list[HarnessRow]) -> None:
        async def one(row: HarnessRow) -> None:
            listing._filled(row, await self.versions.version_of(row.program, row.ref.harness.version_args))
        await asyncio.gather(*(one(r) for r in rows))

    def read_version_soon(self, program: str, version_args: list[str], then: Callable[[str | None], None]) -> None:
        """Call ``then(version)`` with the program's version (:meth:`.versions.ProgramVersions.read_soon`)."""
        self.versions.read_soon(program, version_args, then)

    def _own(self, coro: Coroutine[Any, Any, Any], name: str, *, cancel: bool = True) -> asyncio.Task:
        """Run ``coro`` as a task of the squad's own: kept until done, its failure
        logged; cancelled by :meth:`aclose` (unless ``cancel=False``: it is awaited) and
        at exit."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = cancel

        def done(t: asyncio.Task) -> None:
            self._tasks.pop(t, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed", t.get_name(), exc_info=t.exception())
        task.add_done_callback(done)
        return task

    def _add(self, agent: Agent) -> None:
        """Put ``agent`` in the table; it forks through this squad (:meth:`Agent.fork`)."""
        state_of(agent).in_squad(self)
        self.agents[agent.name] = agent

    def _free_name(self, base: str) -> str:
        if base not in self.agents or self.agents[base].status in NAME_REUSED:
            return base
        n = 2
        while f"{base}-{n}" in self.agents and self.agents[f"{base}-{n}"].status not in NAME_REUSED:
            n += 1
        return f"{base}-{n}"

    def find(self, harness: str) -> HarnessRef:
        """A harness by short or full id (rescanning once); :class:`SquadError` if none."""
        try:
            return self.discovery().find(harness)
        except LookupError:
            try:
                return self.discovery(refresh=True).find(harness)
            except LookupError as exc:
                raise SquadError(str(exc).strip("'\"")) from None

    def check(self, harness: str | HarnessRef, *, cwd: str | Path | None = None, name: str | None = None,
              via: str | list[str] | None = None) -> tuple[HarnessRef, Path, list[str], str]:
        """What can be checked of a start without an event loop: the harness (short or
        full id), the folder, the name, the program. Returns ``(ref, folder, launcher
        argv, program)``; raises :class:`SquadError` or :class:`ProgramNotFound` (with
        the manifest's install command) as :meth:`start` does."""

        ref = harness if isinstance(harness, HarnessRef) else self.find(harness)
        folder = Path(cwd).expanduser() if cwd else Path.cwd()
        if not folder.is_dir():
            raise SquadError(f"{folder} is a file, not a folder" if folder.exists()
                             else f"folder {folder} does not exist")
        if name is not None and name in self.agents and self.agents[name].status not in NAME_FREE:
            raise SquadError(f"an agent named {name!r} is already running; stop it first or pick another --as")
        launcher = shlex.split(via) if isinstance(via, str) else list(via or [])
        if via is None:  # the folder's own launcher (.escouade.yml's via:), in the forms it may name
            try:
                launcher = project_launcher(folder) or []
            except ProjectFileError as exc:
                raise SquadError(str(exc)) from None
        program = named_program(ref) if launcher else locate_program(ref.harness)
        if program is None:
            raise ProgramNotFound(ref)
        return ref, folder, launcher, program

    def start(self, harness: str | HarnessRef, *, cwd: str | Path | None = None, name: str | None = None,
              private: bool = False, mode: str | None = None, via: str | list[str] | None = None,
              account: str | None = None, fs: bool | None = None, mcp: list[str] | None = None,
              kernel_tools: bool | None = None, worktree: bool | str = False,
              worktree_base: str | None = None, add_dirs: Sequence[str | Path] = (),
              system_prompt: str | None = None, system_prompt_mode: str = "append",
              session_id: str | None = None, review: bool = False, sandbox: bool = False,
              sandbox_ports: Sequence[int] = ()) -> Agent:
        """Find ``harness`` (short or full id), locate its program, start an agent on
        the running loop and return it at once (status ``starting``). The program's
        version is read meanwhile (once per program file); a version outside the
        manifest's ``tested`` range puts a warning in the agent's conversation when read.

        ``mode``: an Escouade mode (``acceptEdits``…) set once the session exists.
        ``via``: a launcher prefix (``"ssh host"``, ``"podman exec -i C"``, ``"srun -N1 --unbuffered"``,
        ``"kubectl exec -i POD --"``; None: the folder's ``.escouade.yml`` ``via:``, if any): the
        program then runs wherever the launcher puts it, is located and its version read
        there before the start (:mod:`.launch.far_side`: an unreachable place fails the agent in
        one line), and client fs is off unless ``fs=True``. ``account``: the manifest's ``accountVar``
        points at that account's own folder (:func:`account_dir`), so two accounts of a
        harness run side by side. ``mcp``: which of your ``mcp.json`` servers the agent
        gets (None: all; ``[]`` or ``["none"]``: none); ``kernel_tools``: the kernel's own
        MCP server (default: when running in a kernel). ``worktree``: True (branch
        ``escouade/<name>``) or a branch name: the agent works in its own git worktree off
        the repository's ``HEAD`` (or ``worktree_base``), made before it starts
        (:class:`~.worktrees.worktree.Worktree`, ``agent.worktree``); git's refusals (a dirty index,
        a branch taken) fail the agent with one line. ``add_dirs``: more folders of the
        session (ACP ``additionalDirectories``, relative ones against ``cwd``; the fence of
        a private project takes them in), sent where the agent offers it.
        ``system_prompt`` (``system_prompt_mode`` ``"append"`` or ``"override"``): ACP
        ``systemPrompt`` where the agent offers it, else before the first prompt.
        ``session_id``: open that session of the agent's own (see :meth:`open_session`).
        ``review``: the files it changes in each turn pend your Keep or Reject in
        ``agent.pending_edits`` (:mod:`.file_review`; also when the folder's ``.escouade.yml``
        says ``review: true``).
        ``sandbox``: its process under bubblewrap (:mod:`.sandbox`: the file system
        read-only but its folder, its manifest's ``acp.stateFolders`` and a private
        ``/tmp``; its own pid namespace); also when the folder's ``.escouade.yml`` says
        ``sandbox: true``. Its network is its own (passt's ``pasta``): the host's loopback
        is cut but for the kernel's MCP server and ``sandbox_ports`` (the host's 127.0.0.1
        TCP ports it may reach: a local model; they imply ``sandbox``). Refused in one line
        naming the package where ``bwrap`` or ``pasta`` is not on ``PATH``. With ``via``, bwrap
        runs on the far side, inside the launcher's command (:func:`~.launch.sandbox.far_command`:
        the same profile, its network the far side's own), refused in one line naming the place
        where there is no bwrap there.

        Raises :class:`SquadError` (unknown harness, name taken, missing folder, a mode
        or account the harness does not have), :class:`ProgramNotFound` (with the
        manifest's install command) — all checked by :meth:`check` — then
        :class:`~..wire.errors.NoEventLoop` where no event loop runs."""
        ref, folder, launcher, program = self.check(harness, cwd=cwd, name=name, via=via)
        for extra in add_dirs:
            if not (folder / extra).is_dir():
                raise SquadError(f"--add-dir {extra}: no such folder ({(folder / extra).resolve()})")
        # NoEventLoop (where it works) before anything is registered
        running_loop(f"starting an agent of {ref.short_id!r}")
        env: dict[str, str] = {}
        if account is not None:
            if not ref.harness.account_var:
                raise SquadError(f"{ref.harness.display_name} has no accountVar in its manifest: it has no accounts")
            if launcher and os.path.basename(launcher[0]) != "srun":
                # the account's folder is on this machine, and these launchers pass no environment across
                raise SquadError(f"--account cannot be used with --via {shlex.join(launcher)}: the account's folder "
                                 f"is on this machine and the launcher carries no environment to the far side; set "
                                 f"{ref.harness.account_var} there instead")
            env[ref.harness.account_var] = str(account_dir(ref, account))
        if launcher and sandbox_ports:  # no pasta runs over there: the ports would be a claim, not a rule
            raise SquadError(f"--sandbox-port cannot be used with --via {shlex.join(launcher)}: a sandbox over there "
                             f"has that side's own network, no port rule; use --sandbox alone")
        try:
            ports = _ports(sandbox_ports)
            project: Project | None = Project.for_folder(folder, private=private, sandbox=sandbox or bool(ports))
        except ProjectFileError as exc:  # a .escouade.yml that is not YAML: said, nothing started
            raise SquadError(str(exc)) from None
        if project is not None and project.sandbox:  # before anything is registered or started
            try:
                sandbox_check(launcher)
            except SandboxError as exc:
                raise SquadError(str(exc)) from None
        name = name or self._free_name(ref.short_id)
        planned: Worktree | None = None
        if worktree:
            repo = repository_of(folder)
            if repo is None:
                raise SquadError(f"{folder} is not inside a git repository: --worktree needs one")
            try:  # .escouade.yml's worktree block (issue 25): `worktree: false` refuses, in one line
                setup = read_worktree_config(folder)
            except ProjectFileError as exc:
                raise SquadError(str(exc)) from None
            refused = worktree_setup.refuse_worktree(setup)
            if refused is not None:
                raise SquadError(refused)
            start_folder = folder.resolve()
            planned = agent_worktrees.plan(repo, name, worktree if isinstance(worktree, str) else None,
                                           worktree_base or "")
            folder, project = agent_worktrees.moved_into(planned, folder.resolve(), repo, project)
        self.rules.start_soon()  # the plugins that decide run before the first request
        try:
            agent = Agent(ref, program=program, name=name, cwd=folder,
                          policies=[self.rules.broker], mode=mode, via=launcher, fs=fs, project=project,
                          env=env, kernel_tools=kernel_tools,
                          mcp=None if mcp is None else [m for m in mcp if m != "none"],
                          add_dirs=[folder / d for d in add_dirs], system_prompt=system_prompt,
                          system_prompt_mode=system_prompt_mode, session_id=session_id, review=review,
                          sandbox=Sandbox(ports=ports) if project is not None and project.sandbox else None)
        except Exception as exc:  # AgentError: a mode it lacks, fs:false in a private project
            raise SquadError(str(exc)) from None
        self._add(agent)
        prepared: list[Coroutine[Any, Any, Any]] = []
        if launcher and url_bridge.url_of(launcher) is not None:
            pass  # served elsewhere: its server runs the program, its initialize tells its version
        elif launcher:  # the program is on the far side: located and its version read there first
            state_of(agent).claim_version_check()
            prepared.append(self._far_side(state_of(agent), launcher, ref))
        else:
            self.versions.check_at_start(state_of(agent), program, ref.harness.version_args)
        if planned is not None:
            # its confirmation card, git worktree add, copies, setup (sandboxed when the agent is)
            prepared.append(worktree_setup.prepare(state_of(agent), planned, worktree_base, setup, start_folder,
                                                   journal=self.rules.journal))
        if prepared:
            state_of(agent).prepare_then_start(_in_turn(prepared), name=f"escouade preparation of {agent.name}")
        agent.start()
        return agent

    @staticmethod
    async def _far_side(agent: Any, launcher: list[str], ref: HarnessRef) -> None:
        """Before an agent starts through ``launcher``: its program located and its version read
        on the far side (:func:`~.launch.far_side.probe`), said in its conversation, the version
        compared with the manifest's ``tested`` range. Raises :class:`~.launch.far_side.FarSideError`
        (one line: the host unreachable, the container not running, the allocation refused, no such
        program there; with ``--sandbox``: no bwrap there, or one that cannot sandbox, or no agent's
        folder there): the agent then fails with it and nothing has started on either side."""
        names = list(ref.harness.locate.names) if ref.harness.locate and ref.harness.locate.names \
            else [named_program(ref)]
        sandboxed = agent.sandbox is not None
        try:
            far = await probe_far_side(launcher, names, ref.harness.version_args,
                                       sandbox_folder=str(agent.cwd) if sandboxed else None)
        finally:
            agent.release_version_check()
        if sandboxed:
            far_sandbox_refusal(far, agent.cwd)
            agent.far_side = far  # the far sandbox's command line is built from it (engine/live.py)
        agent.conversation.add_notice(
            f"Runs via {far.where}: {far.program}" + (f" {far.version}" if far.version else ""))
        agent.check_version(far.version)

    def connect(self, name: str, url: str, *, token_file: str | Path, harness: str | None = None,
                cwd: str | Path | None = None, **start: Any) -> Agent:
        """An agent served elsewhere, spoken to over ACP on a WebSocket (``ws://`` or
        ``wss://HOST:PORT/…``; ``escouade-acp-serve`` serves any stdio agent so), started on
        the running loop and returned at once, like :meth:`start`: the same views, cards,
        journal, record and close. ``token_file``: the bearer token's file, mode 0600 (a
        looser mode is refused), sent as ``Authorization: Bearer`` on the handshake, never
        on a command line nor in the record. ``harness``: what is served there (its
        manifest's adapters and modes; default: a generic ACP agent). ``start``: the other
        keywords of :meth:`start` (``mode``, ``mcp``, ``fs``…); ``via`` and ``sandbox`` are
        refused (it runs where its server is). A dropped connection is reconnected and the
        session reopened (``engine/launch/remote.py``). The kernel's own tools are not
        offered to it (said in its conversation).

        Raises :class:`SquadError` (one line) for a URL that is not ``ws://``/``wss://``, a
        token file missing or too open, and what :meth:`start` raises."""
        for refused in ("via", "sandbox", "sandbox_ports", "worktree"):
            if start.get(refused):
                raise SquadError(f"connect: {refused} is not for an agent reached by URL (it runs where its server "
                                 f"is)")
        try:
            launcher = url_bridge.launcher(url, token_file)
            url_bridge.read_token(token_file)
        except url_bridge.RemoteError as exc:
            raise SquadError(str(exc)) from None
        ref = self.find(harness) if harness is not None else remote_harness()
        return self.start(ref, cwd=cwd, name=name, via=launcher, **start)

    # -- one prompt to several agents, merges, forks -------------------------------------------------
    def agent_for(self, name: str) -> Agent:
        """The agent ``name`` if it runs (or starts), else a new agent of harness ``name``
        (an ended one of that name is replaced). :class:`SquadError` for neither."""
        agent = self.agents.get(name)
        if agent is None or agent.status in ENDED:
            agent = self.start(agent.harness.short_id if agent is not None else name,
                               name=name if agent is not None else None)
        return agent

    def ask_soon(self, names: list[str], prompt: str, **send: Any) -> list[Any]:
        """The same prompt to each agent of ``names`` (started when needed: see
        :meth:`agent_for`), at once: the :class:`~.turns.Turn` of each, in order, running
        concurrently (each agent runs its own turns). ``send``: :meth:`Agent.send`'s
        keywords. :class:`SquadError` for a name that is neither an agent nor a harness,
        or a name given twice."""
        if len(set(names)) != len(names):
            raise SquadError(f"an agent is named twice in {', '.join(names)}")
        agents = [self.agent_for(n) for n in names]
        return [a.send(prompt, **send) for a in agents]

    def restat_soon(self, turns: list[Any], then: Callable[[], None] | None = None) -> asyncio.Task:
        """Once every turn has ended, re-count the diff stat of the agents with a worktree
        (a task of the squad's), then ``then()`` (a view redraws its comparison)."""
        async def restat() -> None:
            await asyncio.gather(*(t.wait() for t in turns), return_exceptions=True)
            await asyncio.gather(*(agent_worktrees.restat(state_of(t.agent)) for t in turns
                                   if t.agent.worktree is not None), return_exceptions=True)
            if then is not None:
                then()
        return self._own(restat(), "escouade diff stats after a prompt")

    async def ask(self, names: list[str], prompt: str, **send: Any) -> list[Any]:
        """:meth:`ask_soon`, then wait for every turn: the turns, in the order of
        ``names``, each ended (a failed turn is returned with its ``error``, not raised)."""
        turns = self.ask_soon(names, prompt, **send)
        await asyncio.gather(*(t.wait() for t in turns), return_exceptions=True)
        await asyncio.gather(*(agent_worktrees.restat(state_of(t.agent)) for t in turns
                               if t.agent.worktree is not None))
        return turns

    async def merge(self, name: str) -> Any:
        """Merge agent ``name``'s worktree branch into its base (:meth:`Worktree.merge`)
        and journal it; :class:`SquadError` when it has no worktree."""
        return await self._on_worktree(name, agent_worktrees.merge, self.rules.journal)

    async def rebase(self, name: str) -> Any:
        """Rebase agent ``name``'s worktree branch onto its base (:meth:`Worktree.rebase`)."""
        return await self._on_worktree(name, agent_worktrees.rebase)

    async def discard(self, name: str, force: bool = False) -> None:
        """Stop agent ``name`` and remove its worktree and branch
        (:meth:`Worktree.discard`; refused with uncommitted changes unless ``force``), and
        journal it. ``.escouade.yml``'s ``cleanup`` runs first when you confirmed it
        (:func:`.worktree_setup.cleanup`; its failure is said, the discard goes on)."""
        await self._on_worktree(name, agent_worktrees.discard, self.rules.journal, force,
                                functools.partial(worktree_setup.cleanup, journal=self.rules.journal))

    async def _on_worktree(self, name: str, work: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """``work(agent's state, *args)`` (:mod:`.agent_worktrees`), git's refusals said as :class:`SquadError`."""
        agent = self.get(name)
        try:
            return await work(state_of(agent), *args)
        except WorktreeError as exc:
            raise SquadError(str(exc)) from None

    def fork(self, parent: str | Agent, name: str | None = None) -> Agent:
        """A new agent of ``parent``'s harness carrying its conversation, returned at once
        (starting). Where the parent's session offers ``session/fork`` (unstable in ACP:
        ``sessionCapabilities.fork``) and can be reloaded (``loadSession``), the parent's
        agent forks its session and the new agent loads the fork; else the new agent gets a
        new session and the conversation so far goes, as text, with its first prompt — its
        conversation says which. With a worktree, the fork's branches from the parent's."""
        source = self.get(parent) if isinstance(parent, str) else parent
        name = name or self._free_name(f"{source.name}-fork")
        if name in self.agents and self.agents[name].status not in NAME_FREE:
            raise SquadError(f"an agent named {name!r} is already running; pick another --as")
        if source.program is None or source.status in (AgentStatus.HARNESS_MISSING,):
            raise SquadError(f"agent {source.name!r} cannot be forked: its harness is missing")
        cwd, project = source.cwd, source.project
        planned: Worktree | None = None
        if source.worktree is not None:
            planned = agent_worktrees.plan(source.worktree.repo, name, base=source.worktree.base)
            cwd, project = agent_worktrees.moved_into(planned, source.cwd, source.worktree.path, project)
        agent = Agent(source.harness, program=source.program, name=name, cwd=cwd, policies=list(source.policies),
                      via=source.via, project=project, env=source.extra_env, kernel_tools=source.kernel_tools,
                      mcp=source.mcp, review=source.review,
                      sandbox=source.sandbox)  # a fork of a sandboxed agent is sandboxed
        self._add(agent)
        state_of(agent).claim_version_check()  # the parent's program: checked already
        state_of(agent).prepare_then_start(self._prepare_fork(source, agent, planned),
                                           name=f"escouade fork of {source.name}")
        agent.start()
        return agent

    async def _prepare_fork(self, source: Agent, agent: Agent, planned: Worktree | None) -> None:
        from ..core.prompt import carried_items
        if planned is not None and source.worktree is not None:
            await source.worktree.commit(f"{source.name}'s work, up to the fork {agent.name} (escouade_nb)")
            await agent_worktrees.make(state_of(agent), planned, None, parent=source.worktree)
        caps = source.agent_capabilities or {}
        offers = (caps.get("sessionCapabilities") or {}).get("fork") is not None and caps.get("loadSession")
        if offers and source.session is not None and source.session_id:
            result = await source.session.request("session/fork", {"sessionId": source.session_id,
                                                                   "cwd": str(agent.cwd), "mcpServers": []})
            state_of(agent).opens_session((result or {}).get("sessionId"))
            agent.conversation.add_notice(f"Forked from {source.name} with session/fork: the agent carries its "
                                          f"conversation itself (session {state_of(agent).resume_id}).")
            return
        state_of(agent).carries(carried_items(agent.name, source.name, list(source.conversation.items),
                                              source.harness.speaker))
        why = "it offers no session/fork" if not offers else "its session is not running"
        agent.conversation.add_notice(
            f"Forked from {source.name} as a new session ({source.harness.display_name}: {why}): the "
            f"conversation so far ({len(source.conversation.items)} items) goes, as text, with your first prompt.")

    def resumable(self) -> dict[str, Path]:
        """The newest transcript of each agent name that ran before (any kernel, any folder)."""
        from ..wire import transcript
        return transcript.latest()

    def resumable_summaries(self, *, everywhere: bool = False) -> Any:
        """A :class:`~.listing.Listing` of the histories that can be resumed (``%escouade
        resume``): this project's (the notebook's folder, or the git repository holding
        it), those of other folders counted (listed with ``everywhere``); agents running in
        this kernel left out. What this process has queued is written first. It reads each
        file's first line and the newest files' heads up to their first prompt (256 KiB at
        most each): :meth:`resumable_soon` reads them in a thread instead."""
        from ..wire import transcript
        from .listing import listing
        transcript.flush_all()
        return self._not_running(listing(everywhere=everywhere))

    def _not_running(self, found: Any) -> Any:
        def free(h: Any) -> bool:
            return h.name not in self.agents or self.agents[h.name].status in NAME_FREE
        found.here, found.elsewhere = [h for h in found.here if free(h)], [h for h in found.elsewhere if free(h)]
        return found

    def resumable_soon(self, then: Callable[[Any, BaseException | None], None], *,
                       everywhere: bool = False) -> asyncio.Task:
        """:meth:`resumable_summaries` read in a thread (many or big transcripts never hold
        the loop), as a task of the squad's own; ``then(listing, None)`` or ``then(None,
        error)`` on the loop when read (for a view; ``%escouade resume`` prints at once)."""
        from .listing import listing, project_root
        root = project_root()

        async def read() -> None:
            try:
                found = await asyncio.to_thread(listing, root, everywhere=everywhere)
            except Exception as exc:
                then(None, exc)
                return
            then(self._not_running(found), None)
        return self._own(read(), "escouade resumable transcripts")

    def resume(self, name: str, picked: str | None = None) -> Agent:
        """Rebuild agent ``name`` from its transcript and reattach it (see
        :meth:`Agent.resume`): this project's only history of that name, or ``picked``
        (a transcript's file name or path: ``%escouade resume NAME --from FILE``). Several
        of that name, or none here: :class:`SquadError` listing what exists and how to
        pick (:func:`~.listing.choose`). A harness whose manifest has gone leaves the agent
        listed as "Harness missing", its conversation readable; resume again once it is back."""
        from ..wire import transcript
        from .listing import choose, listing
        transcript.flush_all()
        try:
            chosen = choose(listing(everywhere=True), name, picked)
        except LookupError as exc:
            raise SquadError(str(exc)) from None
        found = {name: chosen.path}
        if name in self.agents and self.agents[name].status not in NAME_FREE:
            raise SquadError(f"agent {name!r} is running; stop it first")
        head = transcript.header(found[name]) or {}
        ref = program = None
        via = head.get("via") if isinstance(head.get("via"), list) else None
        try:
            if via and url_bridge.url_of(via) is not None and head.get("harness") == remote_harness().id:
                ref = remote_harness()  # an agent by URL of no named harness: reached again the same way
            else:
                ref = self.discovery(refresh=True).find(str(head.get("harness", "")))
            program = named_program(ref) if via else locate_program(ref.harness)
        except LookupError:
            ref = None
        if ref is not None and program is None:
            raise ProgramNotFound(ref)
        cwd = head.get("cwd")
        project = Project.for_folder(Path(cwd)) if cwd and Path(cwd).is_dir() else None
        recorded: dict[str, Any] = head["worktree"] if isinstance(head.get("worktree"), dict) else {}
        if project is not None and recorded.get("repo") and Path(recorded["repo"]).is_dir():
            # the repository's project, fenced to the worktree
            repo_project = Project.for_folder(Path(recorded["repo"]))
            project = Project(id=repo_project.id, name=repo_project.name, folder=project.folder,
                              private=repo_project.private or project.private,
                              review=repo_project.review or project.review,
                              sandbox=repo_project.sandbox or project.sandbox)
        sandboxed = isinstance(head.get("sandbox"), dict) or (project is not None and project.sandbox)
        agent = Agent.resume(found[name], ref, program=program, policies=[self.rules.broker], project=project,
                             sandbox=Sandbox.from_record(head.get("sandbox")) if sandboxed else None)  # sandboxed again
        if isinstance(head.get("worktree"), dict):  # reattached: git still has it (or the view says it has gone)
            try:
                state_of(agent).in_worktree(Worktree.from_record(head["worktree"]))
            except KeyError:
                pass
            else:
                self._own(agent_worktrees.restat(state_of(agent)), f"escouade worktree of {agent.name}")
        self._add(agent)
        if ref is not None:
            agent.start()
        return agent

    def get(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(self.agents) or "none"
            raise SquadError(f"no agent named {name!r} (running: {known})") from None

    async def stop(self, name: str) -> Agent:
        agent = self.get(name)
        await agent.close()
        return agent

    def stop_soon(self, name: str) -> asyncio.Task:
        """:meth:`stop` as a task of the squad's own, returned at once (``%escouade stop``)."""
        self.get(name)  # SquadError now, not in the task
        return self._own(self.stop(name), f"escouade stop {name}", cancel=False)

    def export_soon(self, name: str, path: str | Path, *, force: bool = False,
                    then: Callable[[Path | None, BaseException | None], None] | None = None) -> asyncio.Task:
        """``agent.to_notebook(path, force=force)`` as a task of the squad's own, returned
        at once (``%escouade export``); ``then(written_path, None)`` or ``then(None,
        error)`` when it ends (the error is then the caller's to show; without ``then``
        it is logged). :class:`SquadError` now for an unknown agent."""
        agent = self.get(name)

        async def export() -> Path | None:
            try:
                written = await agent.to_notebook(path, force=force)
            except Exception as exc:
                if then is None:
                    raise
                then(None, exc)
                return None
            if then is not None:
                then(written, None)
            return written
        return self._own(export(), f"escouade export {name}")

    def open_session(self, name: str, session_id: str, *, as_name: str | None = None) -> Agent:
        """Open one of agent ``name``'s own sessions (``%escouade sessions``, ACP
        ``session/list``) in a new agent of the same harness, folder, privacy and
        additional directories, named ``as_name`` (else a free name): ``session/load``
        (its replay is the view) where offered, else ``session/resume``, else a new
        session, said so. :class:`SquadError` as :meth:`start`."""
        agent = self.get(name)
        elsewhere = agent.sessions_elsewhere.get(session_id)
        if elsewhere is not None:  # listed (--all) as a session of another folder: opened in its own
            if not Path(elsewhere).is_dir():
                raise SquadError(f"session {session_id} is of the folder {elsewhere}, which does not exist here")
            return self.start(agent.harness.id, cwd=Path(elsewhere), name=as_name, private=agent.private,
                              session_id=session_id, sandbox=agent.sandbox is not None)
        return self.start(agent.harness.id, cwd=agent.cwd, name=as_name, private=agent.private,
                          add_dirs=list(agent.add_dirs), session_id=session_id, sandbox=agent.sandbox is not None)

    def sessions_soon(self, name: str, then: Callable[[Any, BaseException | None], None], *,
                      cursor: str | None = None, everywhere: bool = False) -> asyncio.Task:
        """``agent.sessions(cursor, everywhere=everywhere)`` as a task of the squad's own, returned at once
        (``%escouade sessions``); ``then(page, None)`` or ``then(None, error)`` when it
        ends. :class:`SquadError` now for an unknown agent."""
        agent = self.get(name)

        async def listing() -> None:
            try:
                page = await agent.sessions(cursor=cursor, everywhere=everywhere)
            except Exception as exc:
                then(None, exc)
                return
            then(page, None)
        return self._own(listing(), f"escouade sessions of {name}")

    async def aclose(self) -> None:
        """Cancel the squad's own tasks (version reads and their checks) and wait for
        them, and for the stops under way; the agents are left as they are (``close()``
        each to stop them)."""
        owned = list(self._tasks.items())
        for task, cancel in owned:
            if cancel:
                task.cancel()
        await asyncio.gather(*(task for task, _ in owned), return_exceptions=True)

    def kill_all_now(self) -> None:
        """Synchronously kill every live agent's process group (interpreter exit); the
        squad's own tasks are cancelled."""
        for task in list(self._tasks):
            task.cancel()
        for agent in list(self.agents.values()):
            try:
                agent.kill_now()
            except Exception:
                pass
        self.rules.kill_now()

    def update_soon(self, harness: str) -> tuple[HarnessRef, asyncio.Future[str | None]]:
        """``%escouade update NAME`` before its run (:class:`~.launch.harness_update.UpdateJob`): the
        harness, checked — :class:`SquadError` (unknown, no ``updateCommand``), :class:`ProgramNotFound`,
        then :class:`~escouade_nb.wire.errors.NoEventLoop` — and a future of its version now (read off the loop)."""
        from .launch.harness_update import program_to_update

        ref = self.find(harness)
        try:
            program = program_to_update(ref)
        except ValueError as exc:
            raise SquadError(str(exc)) from None
        if program is None:
            raise ProgramNotFound(ref)
        before: asyncio.Future[str | None] = running_loop("%escouade").create_future()
        self.read_version_soon(program, ref.harness.version_args,
                               lambda v: None if before.done() else before.set_result(v))
        return ref, before

    async def install(self, name: str, *, on_line: Callable[[str], object] | None = None,
                      refresh: bool = False) -> Any:
        """``%escouade install NAME``: install the ACP registry's agent *name* per user and write
        its harness manifest (:func:`~.launch.registry_install.install_agent`); ``on_line(line)``
        sees npm's or pip's output as it comes; *refresh* fetches the registry first
        (:func:`~.launch.registry_install.refresh_registry`; its one-line note goes to
        ``on_line``). Returns the :class:`~.launch.registry_install.InstallResult`, the
        discovery read again (the harness is found at once). :class:`SquadError` (one line)
        when the entry is refused or the install fails: nothing was changed then."""
        from ..manifest.registry import PLUGIN_PREFIX, RegistryError
        from .launch.registry_install import InstallError, install_agent, refresh_registry

        registry = None
        if refresh:
            registry, note = await refresh_registry()
            if on_line is not None:
                on_line(note)
        described = {ref.short_id: (ref.manifest.to_dict(), ref.harness.id)
                     for ref in self.discovery().harnesses
                     if not ref.folder.name.startswith(PLUGIN_PREFIX)}
        try:
            result = await install_agent(name, on_line=on_line, described=described, registry=registry)
        except (RegistryError, InstallError) as exc:
            raise SquadError(str(exc)) from None
        await asyncio.to_thread(self.discovery, True)
        return result

    async def registry_listing(self, refresh: bool = False) -> str:
        """``%escouade install`` alone: what the ACP registry offers (the cached or shipped copy;
        fetched first with *refresh*, its note on the first line)."""
        from ..manifest.registry import load_registry
        from .launch.registry_install import refresh_registry, registry_listing

        note = None
        if refresh:
            registry, note = await refresh_registry()
        else:
            registry = await asyncio.to_thread(load_registry)
        text = registry_listing(registry)
        return f"{note}\n{text}" if note else text



_squad: Squad | None = None


def get_squad() -> Squad:
    """The process-wide squad (created on first use, killed at exit). In a kernel, the
    first call also loads what the first agent's start would otherwise load on the loop
    (about a second, in the calling cell; see :func:`~escouade_nb.kernel_mcp.server.preload_in_kernel`)
    and reads the plugins' manifests (a start rereads them if its harness is not found)."""
    global _squad
    if _squad is None:
        in_kernel = kernel_in_process()
        if in_kernel:
            preload_in_kernel()
        _squad = Squad()
        atexit.register(_at_exit)
        if in_kernel:
            _squad.discovery()
    return _squad


register_default_forker(get_squad)  # an agent built outside a squad forks into this one (Agent.fork)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def account_dir(ref: HarnessRef, account: str) -> Path:
    """The configuration folder of ``account`` for a harness, created on first use:
    ``$ESCOUADE_NB_ACCOUNTS_DIR/<harness>/<account>``, else
    ``<jupyter data dir>/escouade_nb/accounts/<harness>/<account>``."""
    if not account or any(c in account for c in "/\\") or account in (".", ".."):
        raise SquadError(f"bad account name {account!r}: a plain name, no path")
    base = os.environ.get("ESCOUADE_NB_ACCOUNTS_DIR")
    if base is None:
        from jupyter_core.paths import jupyter_data_dir
        base = str(Path(jupyter_data_dir()) / "escouade_nb" / "accounts")
    folder = Path(base).expanduser() / ref.short_id / account
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _at_exit() -> None:
    if _squad is not None and os.getpid() == _pid:
        _squad.kill_all_now()


_pid = os.getpid()
