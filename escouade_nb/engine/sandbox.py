"""A sandbox per agent (``--sandbox``): the agent's process under bubblewrap (``bwrap``).

Our fences (``--private``) hold for what goes through escouade_nb's file system and
terminals; an agent that writes with its own tools (a shell, its own edit tool) is not
fenced by them. Under :class:`Sandbox` the agent's whole process tree sees the file system
read-only except:

* its folder (the session folder: its worktree with ``--worktree``) and its additional
  directories (``--add-dir``);
* the state folders its manifest declares (``acp.stateFolders``: where it keeps its own
  config, sessions and logs), made (mode 0700) when missing, since their parent is
  read-only;
* for an agent in a git worktree: the worktree's own git administration
  (``<repo>/.git/worktrees/NAME``), the object store, and the folders of its branch's ref
  and reflog (``refs/heads/escouade/``, ``logs/refs/heads/escouade/``), so ``git add`` and
  ``git commit`` work; the main worktree's files stay read-only;
* a private ``/tmp`` (an empty tmpfs, mounted *before* the folders above are bound, so a
  folder under ``/tmp`` is still the real one), and its own ``/proc`` and ``/dev``.

It runs in its own pid namespace (``--unshare-pid``: it cannot read the kernel's
``/proc/PID/environ`` nor signal it) and dies with its ``bwrap`` (``--die-with-parent``).
The network is shared (the model's API and the kernel's MCP server on 127.0.0.1 keep
working); ``offline=True`` cuts it (``--unshare-net``: then only an agent that reaches
nothing on the network — the stdio MCP bridge, a local model — works). The environment is
inherited, never put on bwrap's command line (``--setenv`` is an argv every local user
reads in ``/proc``).

What escouade_nb does *for* a sandboxed agent is held to the same world
(:meth:`~..wire.client.EscouadeClient.confine`, set by the agent's start): its client file
system writes only in the writable set above (not the private ``/tmp``, which is not the
kernel's) and reads nothing in :func:`hidden_folders` (the one list of what a sandboxed
agent must not read) but what the sandbox binds there (:func:`client_confinement`); its
client terminals run under bwrap with the same :class:`Binds` as its process, less the
kernel's token folder (:func:`terminal_command`, the one place a terminal is wrapped).

bwrap is looked up on ``PATH`` (Debian's package ``bubblewrap``); :func:`find_bwrap`
raises :class:`SandboxMissing` (one line naming the package) when it is not there.
:meth:`Sandbox.command` does its file work (expanding and making the state folders,
reading the worktree's ``.git`` file) in a thread (``asyncio.to_thread``), never on the
kernel's loop.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import EscouadeError
from ..wire.fs import Confinement

if TYPE_CHECKING:
    from .interfaces import AgentHandle

__all__ = ["BWRAP", "PACKAGE", "Binds", "Sandbox", "SandboxError", "SandboxMissing", "bwrap_argv",
           "client_confinement", "client_reach", "expand_state_folder", "find_bwrap", "hidden_folders",
           "sandbox_check", "sandboxed", "sandboxed_command", "terminal_command", "worktree_git_folders"]

BWRAP = "bwrap"
"""The program looked up on ``PATH``."""

PACKAGE = "bubblewrap"
"""The Debian (and Fedora, Arch, Alpine) package that has it."""


class SandboxError(EscouadeError):
    """The sandbox cannot be set up (a state folder that expands to ``/`` or to the home
    folder itself, one that cannot be made…); the message is one line."""


class SandboxMissing(SandboxError):
    """``bwrap`` is not on ``PATH``: the message names the package to install."""


def sandbox_check(via: Sequence[str] = ()) -> str:
    """What a sandboxed start checks before anything starts: no launcher (``--via``:
    :class:`SandboxError` — bwrap would wrap the local launcher, not the remote agent), and
    ``bwrap`` on ``PATH`` (:class:`SandboxMissing`). Returns bwrap's path."""
    if via:
        raise SandboxError(f"--sandbox cannot be used with --via ({' '.join(via)}): bwrap would confine the local "
                           f"launcher, not the agent on the other host; run bwrap there in the launcher itself")
    return find_bwrap()


def find_bwrap(path: str | None = None) -> str:
    """The ``bwrap`` program on ``path`` (default ``$PATH``): its path, else
    :class:`SandboxMissing`. A few stats (what a PATH lookup costs), fine on the loop."""
    found = shutil.which(BWRAP, path=path)
    if found is None:
        raise SandboxMissing(f"--sandbox needs bubblewrap: `{BWRAP}` is not on PATH (install the package "
                             f"{PACKAGE}: apt-get install {PACKAGE}); nothing was started")
    return found


_VAR = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_state_folder(spec: str, env: Mapping[str, str]) -> Path | None:
    """One ``acp.stateFolders`` entry as a folder, for an agent whose environment is
    ``env``: ``~`` is ``env["HOME"]``; ``${VAR}`` is ``env[VAR]``; ``${VAR:-~/.x}`` is
    ``env[VAR]`` when set and not empty, else ``~/.x``. None when it names an unset
    variable without a default (nothing to bind). The grammar is checked by the
    manifest's model (:func:`escouade_nb.manifest.models.check_state_folder`)."""
    rest = spec
    m = _VAR.match(spec)
    if m:
        value = env.get(m.group(1)) or m.group(2)
        if not value:
            return None
        rest = value + spec[m.end():]
    if rest == "~" or rest.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        rest = home + rest[1:]
    path = Path(rest)
    return path if path.is_absolute() else None


def worktree_git_folders(worktree: Path, branch: str | None) -> list[Path]:
    """What ``git add`` and ``git commit`` write for the git worktree at ``worktree``
    (file reads: call it off the loop): its administration folder (from its ``.git``
    file's ``gitdir:``), the repository's object store, and the folders holding its
    branch's ref and reflog (made when missing). Empty when ``worktree/.git`` is a
    folder (a main worktree: inside the agent's folder already) or absent."""
    dot_git = worktree / ".git"
    if not dot_git.is_file():
        return []
    line = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    if not line.startswith("gitdir:"):
        return []
    admin = (worktree / line.split(":", 1)[1].strip()).resolve()
    try:
        common = (admin / (admin / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        common = admin.parent.parent
    folders = [admin, common / "objects"]
    if branch:
        for top in ("refs/heads", "logs/refs/heads"):
            holder = (common / top / branch).parent
            holder.mkdir(parents=True, exist_ok=True)
            folders.append(holder)
    return folders


def _under_tmp(command: Sequence[str]) -> list[Path]:
    """What the private ``/tmp`` would hide that the agent needs to read: this Python's
    prefix (a virtual environment made under ``/tmp``: the stdio bridge, the fake agent),
    escouade_nb's own folder when it is under ``/tmp`` (an editable install's checkout),
    the program's own prefix (``/tmp/venv`` for ``/tmp/venv/bin/agent``) and the folder
    of each other word of the command line that is an existing file under ``/tmp``. (The
    agent's ``HOME``, when it is under ``/tmp``, is added by :meth:`Sandbox.command`.)"""
    tmp = Path("/tmp")
    found: list[Path] = []
    prefix = Path(sys.prefix)
    if prefix.is_relative_to(tmp) and prefix != tmp:
        found.append(prefix)
    package_home = Path(__file__).resolve().parents[2]  # escouade_nb's own folder: an editable install's checkout
    if package_home.is_relative_to(tmp) and package_home != tmp and not package_home.is_relative_to(prefix):
        found.append(package_home)  # (CI's fresh clone under /tmp): the stdio bridge imports escouade_nb from it
    for index, word in enumerate(command):
        path = Path(word)
        if not path.is_absolute() or not path.is_relative_to(tmp) or not path.exists():
            continue
        holder = path.parent.parent if index == 0 else path.parent
        if holder != tmp and holder.is_relative_to(tmp):
            found.append(holder)
    return found


def _nested_last(paths: Iterable[Path]) -> list[Path]:
    """Each path once, parents before what they hold (a bind inside a bind comes after)."""
    return sorted(set(paths), key=lambda p: (len(p.parts), str(p)))


def bwrap_argv(bwrap: str, command: Sequence[str], *, folder: Path, writable: Iterable[Path] = (),
               readable: Iterable[Path] = (), offline: bool = False, chdir: Path | None = None) -> list[str]:
    """The command line that runs ``command`` under ``bwrap`` (see the module): ``/``
    read-only, a new ``/dev`` and ``/proc``, a private ``/tmp``, then each of ``readable``
    (what the private ``/tmp`` would hide: the program's own folder…) bound read-only, then
    ``folder`` and each of ``writable`` bound writable (absolute, existing paths), parents
    first; its own pid namespace; ``offline``: its own network namespace too; it starts in
    ``chdir`` (default ``folder``). Pure."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _nested_last(readable):
        argv += ["--ro-bind", str(path), str(path)]
    for path in _nested_last([folder, *writable]):
        argv += ["--bind", str(path), str(path)]
    argv += ["--unshare-pid", "--die-with-parent"]
    if offline:
        argv.append("--unshare-net")
    argv += ["--chdir", str(chdir if chdir is not None else folder), "--", *command]
    return argv


@dataclass(frozen=True)
class Binds:
    """What one sandboxed start binds (:meth:`Sandbox.binds`): ``bwrap`` (its path),
    ``folder`` (the agent's folder, real path), ``writable`` (its other writable folders:
    additional directories, state folders, a worktree's git folders; real paths) and
    ``readable`` (bound read-only after the private ``/tmp``). :meth:`argv` is its command
    line."""

    bwrap: str
    folder: Path
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    offline: bool = False

    @property
    def writable_set(self) -> tuple[Path, ...]:
        """Every folder the sandboxed process may write (its private ``/tmp`` aside, which
        is not the kernel's): ``folder`` and ``writable``."""
        return (self.folder, *self.writable)

    def without(self, hidden: Iterable[Path]) -> Binds:
        """The same binds less the readable ones that are one of ``hidden`` (the kernel's
        token folder: a client terminal has no use for it)."""
        drop = {os.path.realpath(p) for p in hidden}
        return Binds(self.bwrap, self.folder, self.writable,
                     tuple(p for p in self.readable if os.path.realpath(p) not in drop), self.offline)

    def argv(self, command: Sequence[str], chdir: Path | None = None) -> list[str]:
        """``command`` under bwrap with these binds (:func:`bwrap_argv`), starting in
        ``chdir`` (default the folder). Pure."""
        return bwrap_argv(self.bwrap, command, folder=self.folder, writable=self.writable, readable=self.readable,
                          offline=self.offline, chdir=chdir)


def hidden_folders(env: Mapping[str, str], token_folder: Path | None = None) -> list[Path]:
    """The folders a sandboxed agent must not read (real paths, existing or not): the
    kernel's ``/tmp`` (the sandbox has its own, an empty tmpfs), Jupyter's runtime folder
    (``jupyter_core.paths.jupyter_runtime_dir()``: the kernels' connection files, their
    HMAC keys), ``$XDG_RUNTIME_DIR`` (of ``env``, the agent's environment, and of the
    kernel's) and ``token_folder`` (the kernel's MCP token files, :mod:`.token_files`).
    The one list: what the client file system neither reads nor writes for a sandboxed
    agent (:func:`client_confinement`); a folder the sandbox binds inside one of them (its
    own folder under ``/tmp``) stays readable. (:func:`bwrap_argv` hides ``/tmp`` only,
    with its tmpfs; hiding the others in the sandbox itself is to use this list too.)
    Reads the environment only (and resolves symlinks): cheap."""
    from jupyter_core.paths import jupyter_runtime_dir

    found = [Path("/tmp"), Path(jupyter_runtime_dir())]
    for runtime in (env.get("XDG_RUNTIME_DIR"), os.environ.get("XDG_RUNTIME_DIR")):
        if runtime and Path(runtime).is_absolute():
            found.append(Path(runtime))
    if token_folder is not None:
        found.append(Path(token_folder))
    return list(dict.fromkeys(Path(os.path.realpath(p)) for p in found))


def client_confinement(binds: Binds, hidden: Sequence[Path]) -> Confinement:
    """What the client file system and terminals of an agent sandboxed with ``binds``
    may touch (:class:`~escouade_nb.wire.fs.Confinement`): write only in its writable set;
    read anything but the ``hidden`` folders (:func:`hidden_folders`), except inside the
    folders the sandbox binds there (its own, its program's…, never a hidden one itself)."""
    hidden_real = [Path(os.path.realpath(p)) for p in hidden]
    shown = [p for p in (*binds.writable_set, *binds.readable) if Path(os.path.realpath(p)) not in hidden_real]
    return Confinement(writable=binds.writable_set, hidden=tuple(hidden_real), shown=tuple(shown))


def client_reach(binds: Binds, hidden: Sequence[Path]) -> tuple[Confinement, Callable[[list[str], Path], list[str]]]:
    """What the client may do for an agent sandboxed with ``binds``: its
    :func:`client_confinement`, and the ``wrap(argv, cwd)`` of its terminals
    (:func:`terminal_command` with ``binds`` less the ``hidden`` folders bound read-only,
    the kernel's token folder). For :meth:`~..wire.client.EscouadeClient.confine` and a
    :class:`~..wire.terminals.TerminalManager`. Pure."""
    for_terminals = binds.without(hidden)
    return client_confinement(binds, hidden), lambda argv, cwd: terminal_command(for_terminals, argv, cwd)


def terminal_command(binds: Binds, argv: Sequence[str], cwd: Path) -> list[str]:
    """A client terminal's ``argv`` (``terminal/create`` of a sandboxed agent) under the
    same sandbox as the agent's process: its ``binds`` (less the kernel's token folder,
    :meth:`Binds.without`), starting in ``cwd`` (checked to be in its writable set by
    the terminal manager). The one place a terminal is wrapped. Pure."""
    return binds.argv(argv, chdir=cwd)


@dataclass(frozen=True)
class Sandbox:
    """How one agent is sandboxed: ``offline`` cuts the network. Held by the agent
    (``agent.sandbox``); :meth:`command` makes each start's command line."""

    offline: bool = False

    def record(self) -> dict[str, bool]:
        """What a transcript header keeps of it (``{"offline": bool}``): a resume sandboxes
        the agent again."""
        return {"offline": self.offline}

    async def command(self, command: Sequence[str], *, folder: Path, env: Mapping[str, str],
                      state_folders: Sequence[str] = (), also: Sequence[Path] = (),
                      worktree: Path | None = None, branch: str | None = None,
                      readable: Sequence[Path] = ()) -> list[str]:
        """``command`` wrapped in bwrap for an agent working in ``folder`` with environment
        ``env``: :meth:`binds` (same arguments, same errors), then :meth:`Binds.argv`."""
        binds = await self.binds(command, folder=folder, env=env, state_folders=state_folders, also=also,
                                 worktree=worktree, branch=branch, readable=readable)
        return binds.argv(command)

    async def binds(self, command: Sequence[str], *, folder: Path, env: Mapping[str, str],
                    state_folders: Sequence[str] = (), also: Sequence[Path] = (),
                    worktree: Path | None = None, branch: str | None = None,
                    readable: Sequence[Path] = ()) -> Binds:
        """What bwrap binds for ``command`` run by an agent working in ``folder`` with
        environment ``env`` (what expands its ``state_folders``, the manifest's
        ``acp.stateFolders``); ``also``: more writable folders (its additional directories);
        ``worktree`` / ``branch``: its git worktree (see :func:`worktree_git_folders`);
        ``readable``: folders bound read-only (existing ones; after the private ``/tmp``).
        The file work runs in a thread. :class:`SandboxMissing` without bwrap,
        :class:`SandboxError` for a state folder that is ``/``, the home folder itself, or
        cannot be made."""
        bwrap = find_bwrap(env.get("PATH"))
        return await asyncio.to_thread(self._binds, bwrap, list(command), folder, dict(env),
                                       list(state_folders), list(also), worktree, branch, list(readable))

    def _binds(self, bwrap: str, command: list[str], folder: Path, env: dict[str, str], state_folders: list[str],
               also: list[Path], worktree: Path | None, branch: str | None, extra: list[Path]) -> Binds:
        home = Path(env.get("HOME") or str(Path.home())).resolve()
        writable: list[Path] = []
        for spec in state_folders:
            path = expand_state_folder(spec, env)
            if path is None:
                continue
            resolved = path.resolve()
            if resolved == Path("/") or resolved == home:
                raise SandboxError(f"state folder {spec!r} is {resolved}: a sandbox cannot make that writable")
            try:
                resolved.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise SandboxError(f"state folder {spec!r} ({resolved}) cannot be made: "
                                   f"{exc.strerror or exc}") from None
            writable.append(resolved)
        writable += [Path(p).resolve() for p in also if Path(p).is_dir()]
        readable = _under_tmp(command) + [Path(p) for p in extra if Path(p).is_dir()]
        if home.is_relative_to("/tmp") and home != Path("/tmp") and home.is_dir():
            readable.append(home)  # a HOME made under /tmp (a test's): read-only, as a home is elsewhere
        if worktree is not None:
            git_folders = worktree_git_folders(Path(worktree), branch)
            writable += git_folders
            if git_folders and git_folders[1].is_relative_to("/tmp"):  # the repository, hidden by the private /tmp
                readable.append(git_folders[1].parent.parent)  # <repo>/.git/objects -> <repo>: read-only
        return Binds(bwrap, Path(folder).resolve(), tuple(writable), tuple(readable), self.offline)


async def sandboxed(agent: AgentHandle, argv: Sequence[str], env: Mapping[str, str],
                    readable: Sequence[Path] = ()) -> Binds:
    """The binds of ``argv`` (the agent's command line) under ``agent.sandbox`` for this
    start: its folder, additional directories, manifest's ``acp.stateFolders`` (expanded
    with ``env``, its environment) and worktree; ``readable``: more folders bound read-only
    (the kernel's token folder for the stdio bridge). ``binds.argv(argv)`` is its command
    line. Errors as :meth:`Sandbox.binds`."""
    sandbox: Sandbox = agent.sandbox
    acp_spec = agent.harness.acp
    worktree = agent.worktree
    return await sandbox.binds(argv, folder=agent.cwd, env=env,
                               state_folders=list(acp_spec.state_folders) if acp_spec is not None else [],
                               also=list(agent.add_dirs), worktree=worktree.path if worktree is not None else None,
                               branch=worktree.branch if worktree is not None else None, readable=readable)


async def sandboxed_command(agent: AgentHandle, argv: Sequence[str], env: Mapping[str, str],
                            readable: Sequence[Path] = ()) -> list[str]:
    """``argv`` under ``agent.sandbox`` for this start (:func:`sandboxed`), as a command
    line. Errors as :meth:`Sandbox.command`."""
    return (await sandboxed(agent, argv, env, readable)).argv(argv)
