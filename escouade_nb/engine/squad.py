"""The squad: every agent of this kernel (or script), found harnesses, and the exit hook.

``get_squad()`` returns the process-wide :class:`Squad`. At interpreter exit (kernel
shutdown included) every live agent's process group is killed.
"""

from __future__ import annotations

import atexit
import html
import os
from dataclasses import dataclass
from pathlib import Path

from .agent import Agent
from ..manifest import Discovery, HarnessRef, discover, install_hint, locate_program, read_version, version_status
from ..permissions import RulePlugins
from ..manifest.project import Project


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
    status: str  # tested / older / newer / unknown / missing


class Listing:
    """What ``%escouade`` shows: harnesses found, broken manifests, running agents."""

    def __init__(self, rows: list[HarnessRow], errors: list[str], agents: list[Agent]) -> None:
        self.rows, self.errors, self.agents = rows, errors, agents

    def __repr__(self) -> str:
        lines = ["Harnesses:"]
        shorts = [r.ref.short_id for r in self.rows]
        for r in self.rows:
            if shorts.count(r.ref.short_id) > 1:  # ambiguous: the full id is what starts it
                lines.append(f"  {r.ref.id}")
            where = r.program or "not found on PATH"
            version = f" {r.version}" if r.version else ""
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
            f"<td>{e(r.program or 'not found on PATH')}</td><td>{e(r.version or '')}</td>"
            f"<td>{e(r.status)}</td></tr>" for r in self.rows)
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
        self._versions: dict[tuple, str | None] = {}
        self._discovery: Discovery | None = None
        self.rules = RulePlugins()  # rule plugins: host, broker (every agent's policy), journal, states

    def discovery(self, refresh: bool = False) -> Discovery:
        if self._discovery is None or refresh:
            self._discovery = discover()
        return self._discovery

    def listing(self) -> Listing:
        d = self.discovery(refresh=True)
        rows = []
        for ref in d.harnesses:
            program = locate_program(ref.harness)
            version = self.version_of(program, ref.harness.version_args) if program else None
            status = version_status(version, ref.harness.tested) if program else "missing"
            rows.append(HarnessRow(ref, program, version, status))
        return Listing(rows, [str(x) for x in d.errors], list(self.agents.values()))

    def version_of(self, program: str, version_args: list[str]) -> str | None:
        """The program's version (``versionArgs``), read once per program file: starting
        fifty agents of one harness runs ``--version`` once, not fifty times."""
        try:
            stat = os.stat(program)
            key = (program, tuple(version_args), stat.st_mtime_ns, stat.st_size)
        except OSError:
            return read_version(program, version_args)
        if key not in self._versions:
            self._versions[key] = read_version(program, version_args)
        return self._versions[key]

    def _free_name(self, base: str) -> str:
        if base not in self.agents or self.agents[base].status in ("closed", "failed"):
            return base
        n = 2
        while f"{base}-{n}" in self.agents and self.agents[f"{base}-{n}"].status not in ("closed", "failed"):
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

    def start(self, harness: str, *, cwd: str | Path | None = None, name: str | None = None,
              private: bool = False, mode: str | None = None, via: str | list[str] | None = None,
              account: str | None = None, fs: bool | None = None) -> Agent:
        """Find ``harness`` (short or full id), locate its program, start an agent on
        the running loop and return it at once (status ``starting``).

        ``mode``: an Escouade mode (``acceptEdits``…) set once the session exists.
        ``via``: a launcher prefix (``"ssh host"``, ``"kubectl exec -i POD --"``): the
        program then runs wherever the launcher puts it, is not looked up here, and
        client fs is off unless ``fs=True``. ``account``: the manifest's ``accountVar``
        points at that account's own folder (:func:`account_dir`), so two accounts of a
        harness run side by side.

        Raises :class:`SquadError` (unknown harness, name taken, missing folder, a mode
        or account the harness does not have) or :class:`ProgramNotFound` (with the
        manifest's install command)."""
        import shlex

        ref = self.find(harness)
        folder = Path(cwd).expanduser() if cwd else Path.cwd()
        if not folder.is_dir():
            raise SquadError(f"folder {folder} does not exist")
        if name is not None and name in self.agents and self.agents[name].status not in ("closed", "failed", "exited"):
            raise SquadError(f"an agent named {name!r} is already running; stop it first or pick another --as")
        launcher = shlex.split(via) if isinstance(via, str) else list(via or [])
        if launcher:
            program = (ref.harness.locate.names[0] if ref.harness.locate and ref.harness.locate.names
                       else ref.short_id)
        else:
            program = locate_program(ref.harness)
            if program is None:
                raise ProgramNotFound(ref)
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
                          env=env)
        except Exception as exc:  # AgentError: a mode it lacks, fs:false in a private project
            raise SquadError(str(exc)) from None
        version = self.version_of(program, ref.harness.version_args) if not launcher else None
        agent.version_checked = version is not None
        status = version_status(version, ref.harness.tested)
        if status in ("older", "newer"):
            tested = ref.harness.tested
            agent.conversation.add_notice(
                f"{ref.harness.display_name} {version} is {status} than the versions tested with this manifest "
                f"({tested.oldest}–{tested.newest}).", level="warning")
        self.agents[agent.name] = agent
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
        if name in self.agents and self.agents[name].status not in ("closed", "failed", "exited", "harness missing"):
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

    def kill_all_now(self) -> None:
        """Synchronously kill every live agent's process group (interpreter exit)."""
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
