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
import html
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .agent import Agent
from ..core.observers import Observers
from ..core.status import NAME_FREE, NAME_REUSED
from ..manifest import Discovery, HarnessRef, discover, install_hint, locate_program, read_version, version_status
from ..manifest.locate import read_version_async
from ..permissions import RulePlugins
from ..wire.errors import running_loop
from ..manifest.project import Project

log = logging.getLogger(__name__)

READING = "reading"
"""The status of a listing row whose version is being read."""


class SquadError(Exception):
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
    returns once every version is in. Everything else of it is fixed when it is made."""

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
            lines.append(f"  {a.name:<12} {a.harness.short_id:<12} {a.status:<10} {a.cwd}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td><b>{e(r.ref.short_id)}</b></td><td>{e(r.ref.harness.display_name)}</td>"
            f"<td>{e(r.program or 'not found on PATH')}</td>"
            f"<td>{'<i>reading…</i>' if r.status == READING else e(r.version or '')}</td>"
            f"<td>{'' if r.status == READING else e(r.status)}</td></tr>" for r in self.rows)
        errors = "".join(f"<li style='color:#cf222e'>{e(x)}</li>" for x in self.errors)
        agents = "".join(f"<tr><td><b>{e(a.name)}</b></td><td>{e(a.harness.short_id)}</td><td>{e(a.status)}</td>"
                         f"<td>{e(str(a.cwd))}</td></tr>" for a in self.agents)
        return (f"<b>Harnesses</b><table><tr><th>id</th><th>name</th><th>program</th><th>version</th>"
                f"<th>tested</th></tr>{rows}</table>{'<ul>' + errors + '</ul>' if errors else ''}"
                f"<b>Agents</b>" + (f"<table><tr><th>name</th><th>harness</th><th>status</th><th>folder</th></tr>"
                                    f"{agents}</table>" if agents else " none running"))


class Squad:
    """All agents of this process, by name."""

    def __init__(self) -> None:
        self.agents: dict[str, Agent] = {}
        self._versions: dict[tuple, str | None] = {}  # (program, args, mtime, size) -> version read
        self._reads: dict[tuple, asyncio.Task] = {}  # the same key -> its read in flight
        self._tasks: dict[asyncio.Task, bool] = {}  # the squad's own tasks -> whether aclose() cancels it
        self._discovery: Discovery | None = None
        self.rules = RulePlugins()  # rule plugins: host, broker (every agent's policy), journal, states

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
                known, version = self._known(program, ref.harness.version_args)
                if known:
                    row.version, row.status = version, version_status(version, ref.harness.tested)
            rows.append(row)
        listing = Listing(rows, [str(x) for x in d.errors], list(self.agents.values()))
        pending = [r for r in rows if r.status == READING]
        if pending:
            if _running_loop() is None:
                for r in pending:
                    r.version = self.version_now(r.program, r.ref.harness.version_args)
                    r.status = version_status(r.version, r.ref.harness.tested)
            else:
                listing._task = self._own(self._fill(listing, pending), "escouade listing versions")
        return listing

    async def _fill(self, listing: Listing, rows: list[HarnessRow]) -> None:
        async def one(row: HarnessRow) -> None:
            listing._filled(row, await self.version_of(row.program, row.ref.harness.version_args))
        await asyncio.gather(*(one(r) for r in rows))

    @staticmethod
    def _key(program: str, version_args: list[str]) -> tuple | None:
        try:
            stat = os.stat(program)
        except OSError:
            return None
        return (program, tuple(version_args), stat.st_mtime_ns, stat.st_size)

    def _known(self, program: str, version_args: list[str]) -> tuple[bool, str | None]:
        """(True, version) when this program file's version was read already."""
        key = self._key(program, version_args)
        if key is not None and key in self._versions:
            return True, self._versions[key]
        return False, None

    async def version_of(self, program: str, version_args: list[str]) -> str | None:
        """The program's version (``versionArgs``), read once per program file (path,
        size, modification time) without blocking the loop: starting fifty agents of one
        harness runs ``--version`` once, not fifty times, and callers asking while it runs
        share that one read. ``None`` when it has no readable version."""
        key = self._key(program, version_args)
        if key is None:
            return None  # no such file (any more)
        if key in self._versions:
            return self._versions[key]
        task = self._reads.get(key)
        if task is None:
            task = self._reads[key] = self._own(read_version_async(program, version_args),
                                                f"escouade --version of {program}")

            def done(t: asyncio.Task, key: tuple = key) -> None:
                self._reads.pop(key, None)
                if not t.cancelled() and t.exception() is None:
                    self._versions[key] = t.result()
            task.add_done_callback(done)
        return await asyncio.shield(task)  # one caller cancelled does not cancel the others' read

    def read_version_soon(self, program: str, version_args: list[str], then: Callable[[str | None], None]) -> None:
        """Call ``then(version)`` with :meth:`version_of` — at once when it was read
        already, else once read (a task the squad owns)."""
        known, version = self._known(program, version_args)
        if known:
            then(version)
            return

        async def read() -> None:
            then(await self.version_of(program, version_args))
        self._own(read(), f"escouade --version of {program}")

    def version_now(self, program: str, version_args: list[str]) -> str | None:
        """:meth:`version_of` for code without a loop (it blocks while ``--version``
        runs): the same cache."""
        key = self._key(program, version_args)
        if key is None:
            return None
        if key not in self._versions:
            self._versions[key] = read_version(program, version_args)
        return self._versions[key]

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

    def _check_version(self, agent: Agent, version: str | None) -> None:
        """Warn in the agent's conversation when ``version`` is outside the manifest's
        ``tested`` range, unless a version was compared already (``agent.version_checked``:
        one warning at most, whoever compares)."""
        if version is None or agent.version_checked:
            return
        agent.version_checked = True
        status = version_status(version, agent.harness.harness.tested)
        if status in ("older", "newer"):
            tested = agent.harness.harness.tested
            agent.conversation.add_notice(
                f"{agent.harness.harness.display_name} {version} is {status} than the versions tested with this "
                f"manifest ({tested.oldest}–{tested.newest}).", level="warning")

    async def _check_later(self, agent: Agent, program: str, version_args: list[str]) -> None:
        """The program's ``--version`` is what counts; the version the agent gives in
        ``initialize`` only when it has none. While it is read, ``version_checked`` is set
        so the agent's own check (at ``initialize``) leaves it to this; if it gives no
        version, the one ``initialize`` gave meanwhile is compared here, or, if that has
        not come yet, the agent compares it itself when it comes."""
        version = None
        try:
            version = await self.version_of(program, version_args)
        finally:
            agent.version_checked = False
            if version is None:
                version = (agent.agent_info or {}).get("version")
            self._check_version(agent, version)

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

    def check(self, harness: str, *, cwd: str | Path | None = None, name: str | None = None,
              via: str | list[str] | None = None) -> tuple[HarnessRef, Path, list[str], str]:
        """What can be checked of a start without an event loop: the harness (short or
        full id), the folder, the name, the program. Returns ``(ref, folder, launcher
        argv, program)``; raises :class:`SquadError` or :class:`ProgramNotFound` (with
        the manifest's install command) as :meth:`start` does."""
        import shlex

        ref = self.find(harness)
        folder = Path(cwd).expanduser() if cwd else Path.cwd()
        if not folder.is_dir():
            raise SquadError(f"folder {folder} does not exist")
        if name is not None and name in self.agents and self.agents[name].status not in NAME_FREE:
            raise SquadError(f"an agent named {name!r} is already running; stop it first or pick another --as")
        launcher = shlex.split(via) if isinstance(via, str) else list(via or [])
        if launcher:
            program = (ref.harness.locate.names[0] if ref.harness.locate and ref.harness.locate.names
                       else ref.short_id)
        else:
            program = locate_program(ref.harness)
            if program is None:
                raise ProgramNotFound(ref)
        return ref, folder, launcher, program

    def start(self, harness: str, *, cwd: str | Path | None = None, name: str | None = None,
              private: bool = False, mode: str | None = None, via: str | list[str] | None = None,
              account: str | None = None, fs: bool | None = None, mcp: list[str] | None = None,
              kernel_tools: bool | None = None) -> Agent:
        """Find ``harness`` (short or full id), locate its program, start an agent on
        the running loop and return it at once (status ``starting``). The program's
        version is read meanwhile (once per program file); a version outside the
        manifest's ``tested`` range puts a warning in the agent's conversation when read.

        ``mode``: an Escouade mode (``acceptEdits``…) set once the session exists.
        ``via``: a launcher prefix (``"ssh host"``, ``"kubectl exec -i POD --"``): the
        program then runs wherever the launcher puts it, is not looked up here, and
        client fs is off unless ``fs=True``. ``account``: the manifest's ``accountVar``
        points at that account's own folder (:func:`account_dir`), so two accounts of a
        harness run side by side. ``mcp``: which of your ``mcp.json`` servers the agent
        gets (None: all; ``[]`` or ``["none"]``: none); ``kernel_tools``: the kernel's own
        MCP server (default: when running in a kernel).

        Raises :class:`SquadError` (unknown harness, name taken, missing folder, a mode
        or account the harness does not have), :class:`ProgramNotFound` (with the
        manifest's install command) — all checked by :meth:`check` — then
        :class:`~..wire.errors.NoEventLoop` where no event loop runs."""
        ref, folder, launcher, program = self.check(harness, cwd=cwd, name=name, via=via)
        running_loop(f"starting an agent of {ref.short_id!r}")  # NoEventLoop (where it works) before anything is registered
        env: dict[str, str] = {}
        if account is not None:
            if not ref.harness.account_var:
                raise SquadError(f"{ref.harness.display_name} has no accountVar in its manifest: it has no accounts")
            env[ref.harness.account_var] = str(account_dir(ref, account))
        project = Project.for_folder(folder, private=private)
        self.rules.start_soon()  # the plugins that decide run before the first request
        try:
            agent = Agent(ref, program=program, name=name or self._free_name(ref.short_id), cwd=folder,
                          policies=[self.rules.broker], mode=mode, via=launcher, fs=fs, project=project,
                          env=env, kernel_tools=kernel_tools,
                          mcp=None if mcp is None else [m for m in mcp if m != "none"])
        except Exception as exc:  # AgentError: a mode it lacks, fs:false in a private project
            raise SquadError(str(exc)) from None
        self.agents[agent.name] = agent
        if not launcher:  # through a launcher the program is elsewhere: its initialize tells its version
            known, version = self._known(program, ref.harness.version_args)
            if known:
                self._check_version(agent, version)
            else:
                agent.version_checked = True  # claimed until read: see _check_later
                self._own(self._check_later(agent, program, ref.harness.version_args),
                          f"escouade version check of {agent.name}")
        agent.start()
        return agent

    def resumable(self) -> dict[str, Path]:
        """The newest transcript of each agent name that ran before (any kernel)."""
        from ..wire import transcript
        return transcript.latest()

    def resume(self, name: str) -> Agent:
        """Rebuild agent ``name`` from its newest transcript and reattach it (see
        :meth:`Agent.resume`). A harness whose manifest has gone leaves the agent listed
        as "Harness missing", its conversation readable; resume again once it is back."""
        from ..wire import transcript
        found = transcript.latest(name)
        if name not in found:
            known = ", ".join(transcript.latest()) or "none"
            raise SquadError(f"no transcript of an agent named {name!r} (resumable: {known})")
        if name in self.agents and self.agents[name].status not in NAME_FREE:
            raise SquadError(f"agent {name!r} is running; stop it first")
        head = transcript.header(found[name]) or {}
        ref = program = None
        try:
            ref = self.discovery(refresh=True).find(str(head.get("harness", "")))
            program = locate_program(ref.harness)
        except LookupError:
            ref = None
        if ref is not None and program is None:
            raise ProgramNotFound(ref)
        cwd = head.get("cwd")
        project = Project.for_folder(Path(cwd)) if cwd and Path(cwd).is_dir() else None
        agent = Agent.resume(found[name], ref, program=program, policies=[self.rules.broker], project=project)
        self.agents[agent.name] = agent
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


_squad: Squad | None = None


def get_squad() -> Squad:
    """The process-wide squad (created on first use, killed at exit)."""
    global _squad
    if _squad is None:
        _squad = Squad()
        atexit.register(_at_exit)
    return _squad


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
