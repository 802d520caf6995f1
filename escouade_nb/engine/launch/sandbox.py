"""A sandbox per agent (``--sandbox``): the agent's process under bubblewrap (``bwrap``),
its network through passt's ``pasta``.

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
  folder under ``/tmp`` is still the real one), and its own ``/proc`` and ``/dev``; its own
  pid, IPC, UTS (and cgroup, where it can) namespaces.

Inside those, what makes the kernel's own git (and yours) run code stays read-only
(:func:`git_protected`): a main worktree's ``.git`` folder whole (nothing made or written in
it — a planted ``commondir`` would send git to the agent's copy of it —, and it cannot be
renamed: a mount point; so a sandboxed agent reads its repository there but cannot commit:
``--worktree`` is for committing); in a git worktree its admin folder's ``commondir``,
``gitdir`` and ``config.worktree``.

**Hidden** (an empty tmpfs over each, :func:`hidden_folders`): Jupyter's runtime folder
(``kernel-*.json`` with each kernel's HMAC key, ``jpserver-*.json`` with the server's
token), ``$XDG_RUNTIME_DIR`` (its unix sockets stay connectable through a read-only bind:
hidden, not made read-only), ``/run`` (the system's sockets; the file ``/etc/resolv.conf``
points into there bound back read-only: :func:`resolv_conf`) and the kernel's MCP token
folder, of which only this agent's own token file is bound back, read-only. A folder the
agent needs under one of them (its own folder, a state folder) is bound after the tmpfs and
keeps working.

**Its own network** (``--unshare-net``): the host's loopback is cut. Outbound traffic goes
through passt's ``pasta`` (:class:`Network`), attached from outside to the namespace once
bwrap made it (``--info-fd`` gives the pid, ``--block-fd`` holds the agent's program until
pasta has configured the namespace), with no port forwarded from the host and, towards
the host's 127.0.0.1, exactly: the kernel's MCP server's port (the agent's own endpoint:
its token is the only credential it holds) and the ports the user declared for it
(:attr:`Sandbox.ports`: a local model). pasta runs in the foreground as the kernel's child
(under ``setpriv --pdeathsig KILL``: it dies with the kernel, even a killed one); it is held by
:class:`Confined` and it is killed when the agent's process ends, is stopped, restarted,
closed, or the kernel exits (:meth:`Confined.close`). ``offline=True``: no pasta, no
network at all (the kernel's tools are not reachable then). It runs in its own pid
namespace (``--unshare-pid``: it cannot read the kernel's ``/proc/PID/environ`` nor signal
it), without capabilities when the kernel runs as root (``--cap-drop ALL``: a root agent
could otherwise unmount what hides), and dies with its ``bwrap`` (``--die-with-parent``).
The environment is inherited, never put on bwrap's command line (``--setenv`` is an argv
every local user reads in ``/proc``).

What escouade_nb does *for* a sandboxed agent is held to the same world, built from the
same :class:`Binds` as its process's command line (:meth:`Sandbox.binds`, one computation):
its client file system (:func:`client_confinement`, set by the agent's start through
:meth:`~...wire.client.EscouadeClient.confine`) writes only in the process's writable set,
never in what :func:`git_protected` keeps read-only, and reads nothing in
:func:`hidden_folders` (the one list of what the sandbox hides, the kernel's ``/tmp``
first) but what the sandbox binds there, nor in the kernel's ``/proc``, ``/dev``, ``/sys``
(:data:`KERNEL_WORLD`); its client terminals, its terminal sign-in and
its worktree's setup and cleanup run under bwrap with the same binds, hidden folders and
protected git files, less its token file (:func:`terminal_command`, the one place a
terminal is wrapped), each in a network namespace of its own with its own pasta attached
the same way (:class:`Confined`: the declared ports, and the kernel's MCP port for the
terminals of a started agent), ended with the terminal's process.

Refused rather than weaker: without ``bwrap`` (:class:`SandboxMissing`), without ``pasta``
(:class:`SandboxMissing`, unless offline), or when pasta cannot attach
(:class:`SandboxError`), the start fails in one line and nothing is left running.
:meth:`Sandbox.command` does its file work (expanding and making the state folders,
reading the worktree's ``.git`` file, making the pipes) in a thread
(``asyncio.to_thread``), never on the kernel's loop; :meth:`Confined.attach` runs pasta as
an async subprocess and reads bwrap's info pipe in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import EscouadeError
from ..._resources import package_home as _package_home
from ...wire.fs import Confinement

if TYPE_CHECKING:
    from .interfaces import SandboxedAgent

__all__ = ["BWRAP", "PACKAGE", "PASTA", "PASTA_PACKAGE", "Binds", "Confined", "Network", "Sandbox", "SandboxError",
           "SandboxMissing", "bwrap_argv", "client_confinement", "client_reach", "expand_state_folder", "find_bwrap",
           "far_command", "find_pasta", "git_protected", "hidden_folders", "main_git_folders", "resolv_conf",
           "sandbox_check", "sandboxed",
           "terminal_command", "worktree_git_folders"]

BWRAP = "bwrap"
"""The program looked up on ``PATH``."""

PACKAGE = "bubblewrap"
"""The Debian (and Fedora, Arch, Alpine) package that has it."""

PASTA = "pasta"
"""passt's user-mode network for a namespace, looked up on ``PATH``."""

PASTA_PACKAGE = "passt"
"""The Debian package that has it."""

ATTACH_LIMIT = 20.0
"""Seconds bwrap's info and pasta's configuration of the namespace may take, together."""


class SandboxError(EscouadeError):
    """The sandbox cannot be set up (a state folder that expands to ``/`` or to the home
    folder itself, one that cannot be made, pasta failing to attach…); the message is one
    line."""


class SandboxMissing(SandboxError):
    """``bwrap`` or ``pasta`` is not on ``PATH``: the message names the package to install."""


def sandbox_check(via: Sequence[str] = (), *, offline: bool = False) -> str:
    """What a sandboxed start checks here before anything starts: with a launcher (``--via``)
    nothing (bwrap runs on the far side, never around the local launcher: the far side's probe
    checks it, :func:`far_command`; returns ``""``); else ``bwrap`` on ``PATH`` and, unless
    ``offline``, ``pasta`` (:class:`SandboxMissing`). Returns bwrap's path."""
    if via:
        return ""
    found = find_bwrap()
    if not offline:
        find_pasta()
    return found


def find_bwrap(path: str | None = None) -> str:
    """The ``bwrap`` program on ``path`` (default ``$PATH``): its path, else
    :class:`SandboxMissing`. A few stats (what a PATH lookup costs), fine on the loop."""
    found = shutil.which(BWRAP, path=path)
    if found is None:
        raise SandboxMissing(f"--sandbox needs bubblewrap: `{BWRAP}` is not on PATH (install the package "
                             f"{PACKAGE}: apt-get install {PACKAGE}); nothing was started")
    return found


def find_pasta(path: str | None = None) -> str:
    """The ``pasta`` program on ``path`` (default ``$PATH``): its path, else
    :class:`SandboxMissing` naming the package (passt)."""
    found = shutil.which(PASTA, path=path)
    if found is None:
        raise SandboxMissing(f"--sandbox needs passt's {PASTA} (apt-get install {PASTA_PACKAGE}) to cut the host's "
                             f"loopback; nothing was started")
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
    admin = _worktree_admin(worktree)
    if admin is None:
        return []
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


def _worktree_admin(worktree: Path) -> Path | None:
    """The admin folder named by ``worktree/.git`` when it is a ``gitdir:`` file, else None."""
    dot_git = worktree / ".git"
    if not dot_git.is_file():
        return None
    line = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    if not line.startswith("gitdir:"):
        return None
    return (worktree / line.split(":", 1)[1].strip()).resolve()


ADMIN_PROTECTED = ("config", "config.worktree", "hooks", "info", "commondir", "gitdir", "modules", "objects/info")
"""What, in a git worktree's administration folder (``<repo>/.git/worktrees/NAME``, writable
for the agent of that worktree), makes git run code or read another repository's: the files
pointing at another folder (``commondir``, ``gitdir``), ``config.worktree``, and the
config-like names. Bound read-only (those that exist) over its writable bind."""


def main_git_folders(folder: Path) -> list[Path]:
    """The main ``.git`` folder git would find for ``folder``: walking up from it, the first
    ``.git``, when it is a folder (a main worktree's: the folder's own, or the enclosing
    repository's); none when that first ``.git`` is a file (a git worktree: its admin folder
    is :func:`worktree_git_folders`') or there is none. File stats: off the loop."""
    for top in (folder, *folder.parents):
        dot = top / ".git"
        if dot.is_dir() and not dot.is_symlink():
            return [dot]
        if dot.is_symlink() and dot.is_dir():
            return [dot.resolve()]
        if dot.exists():
            return []
    return []


def git_protected(folders: Iterable[Path]) -> list[Path]:
    """What stays read-only over the writable binds (one list, bound read-only after them),
    so the kernel's git (the checkpoints, the review, a worktree's commit) and yours never
    read a config, a hook, a ``commondir`` the agent wrote:

    * for each of ``folders`` that is in a main worktree (:func:`main_git_folders`), that
      ``.git`` folder **whole**: a mount point cannot be renamed (``mv .git`` fails) and
      nothing inside it can be written or made (a ``.git/commondir`` planted, ``.git/config``,
      a hook): the agent reads its repository (log, diff, status) but cannot commit, stage or
      move a ref there — an agent that commits gets ``--worktree``;
    * for a worktree's admin folder among ``folders`` (it holds ``commondir``), its
      :data:`ADMIN_PROTECTED` files that exist.

    File stats: off the loop."""
    found: list[Path] = []
    for folder in folders:
        if folder.is_dir() and (folder / "commondir").is_file() and (folder / "gitdir").is_file():
            found += [folder / name for name in ADMIN_PROTECTED if (folder / name).exists()]
            continue
        for dot in main_git_folders(folder):
            if dot not in found:
                found.append(dot)
    return found


def _runtime_folders(env: Mapping[str, str]) -> list[Path]:
    """Where Jupyter keeps ``kernel-*.json`` and ``jpserver-*.json``, as seen by the kernel
    and by the agent's environment ``env``: ``jupyter_runtime_dir()``,
    ``$JUPYTER_RUNTIME_DIR``, ``<data dir>/runtime`` for each ``HOME`` and
    ``$XDG_DATA_HOME``, the folder of this kernel's own connection file."""
    found: list[str] = []
    with contextlib.suppress(Exception):
        from jupyter_core.paths import jupyter_runtime_dir
        found.append(jupyter_runtime_dir())
    for source in (os.environ, env):
        if source.get("JUPYTER_RUNTIME_DIR"):
            found.append(source["JUPYTER_RUNTIME_DIR"])
        if source.get("JUPYTER_DATA_DIR"):
            found.append(os.path.join(source["JUPYTER_DATA_DIR"], "runtime"))
        if source.get("XDG_DATA_HOME"):
            found.append(os.path.join(source["XDG_DATA_HOME"], "jupyter", "runtime"))
        if source.get("HOME"):
            found.append(os.path.join(source["HOME"], ".local", "share", "jupyter", "runtime"))
    with contextlib.suppress(Exception):  # inside a kernel: the folder of its own connection file
        from ipykernel.connect import get_connection_file
        found.append(os.path.dirname(get_connection_file()))
    return [Path(f) for f in found if f]


TMP = Path("/tmp")
"""The kernel's ``/tmp``: the sandbox has its own (an empty tmpfs, mounted first)."""

RUN = (Path("/run"), Path("/var/run"))
"""Where the system keeps its unix sockets (docker's, dbus's, munge's, a Jupyter started with
``--sock``…): hidden (``/var/run`` when it is not a link into ``/run``); the file
``/etc/resolv.conf`` points into there is bound back read-only (:func:`resolv_conf`)."""

KERNEL_WORLD = (Path("/proc"), Path("/dev"), Path("/sys"))
"""The kernel's own ``/proc``, ``/dev`` and ``/sys``: the sandbox has its own ``/proc`` and
``/dev``, so its client file system reads none of the kernel's (its environment, other
processes' command lines): what :func:`client_confinement` hides besides :func:`hidden_folders`."""


def resolv_conf(hidden: Iterable[Path]) -> list[Path]:
    """The real file ``/etc/resolv.conf`` points to when it is inside one of ``hidden``
    (``/run/systemd/resolve/stub-resolv.conf``): bound back read-only, so that names resolve
    in the sandbox where they did outside. File stats: off the loop."""
    try:
        real = Path("/etc/resolv.conf").resolve(strict=True)
    except (OSError, RuntimeError):
        return []
    return [real] if real.is_file() and any(real.is_relative_to(h) for h in hidden) else []


def hidden_folders(env: Mapping[str, str], token_folder: Path | None = None) -> list[Path]:
    """What a sandboxed agent cannot see, the one list (real paths, each once): the
    kernel's ``/tmp`` first (the sandbox mounts its own, an empty tmpfs), then the folders
    it sees empty (an empty tmpfs over each, existing ones): Jupyter's runtime folders
    (:func:`_runtime_folders`: the kernels' connection files, the server's token),
    ``$XDG_RUNTIME_DIR`` (the kernel's and ``env``'s, the agent's environment),
    ``token_folder`` (the kernel's MCP token folder) and :data:`RUN` (the system's unix
    sockets). The argv builder hides them
    (:func:`bwrap_argv`) and the client file system reads nothing in them
    (:func:`client_confinement`) but what the sandbox binds there (its own folder under
    ``/tmp``, its own token file). Neither ``/`` nor ``/tmp`` again (one under ``/tmp``
    is hidden too: a HOME under ``/tmp`` is bound back read-only whole). File stats: off
    the loop."""
    wanted = _runtime_folders(env)
    for source in (os.environ, env):
        if source.get("XDG_RUNTIME_DIR"):
            wanted.append(Path(source["XDG_RUNTIME_DIR"]))
    if token_folder is not None:
        wanted.append(Path(token_folder))
    wanted += [run for run in RUN if not run.is_symlink()]
    found: list[Path] = [TMP]
    for path in wanted:
        if not path.is_absolute() or not path.is_dir():
            continue
        resolved = path.resolve()
        if resolved == Path("/") or resolved in found:
            continue
        found.append(resolved)
    return found


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
    package_home = _package_home()  # the folder holding escouade_nb: an editable install's checkout
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


def _far_under_tmp(command: Sequence[str]) -> list[Path]:
    """What the far sandbox's private ``/tmp`` would hide that the agent may need there (each
    bound read-only only where it exists over there): the program's own prefix (as
    :func:`_under_tmp`, unchecked: a far-side path), and this Python's prefix and escouade_nb's
    folder when under ``/tmp`` (a far side on this host, or one that mounts them: a venv or a
    clone made under ``/tmp``)."""
    tmp = Path("/tmp")
    found: list[Path] = []
    for local in (Path(sys.prefix), _package_home()):
        if local.is_relative_to(tmp) and local != tmp:
            found.append(local)
    program = Path(command[0]) if command else None
    if program is not None and program.is_absolute() and program.is_relative_to(tmp):
        holder = program.parent.parent
        if holder != tmp and holder.is_relative_to(tmp):
            found.append(holder)
    return found


_HIDE, _READ, _WRITE, _PROTECT = range(4)


def bwrap_argv(bwrap: str, command: Sequence[str], *, folder: Path, writable: Iterable[Path] = (),
               readable: Iterable[Path] = (), offline: bool = False, hidden: Iterable[Path] = (),
               protected: Iterable[Path] = (), files: Iterable[Path] = (), network_fds: tuple[int, int] | None = None,
               drop_caps: bool | None = None, chdir: Path | None = None, user_ns: bool = False,
               share_net: bool = False, read_if_there: bool = False) -> list[str]:
    """The command line that runs ``command`` under ``bwrap`` (see the module): ``/``
    read-only, a new ``/dev`` and ``/proc``, a private ``/tmp``, then, parents before what
    they hold: an empty tmpfs over each of ``hidden`` (:func:`hidden_folders`; ``/tmp``
    has its tmpfs already), each of ``readable`` (what the private ``/tmp`` would hide:
    the program's own folder…) and ``files`` bound read-only, ``folder`` and each of
    ``writable`` bound writable, each of ``protected`` (:func:`git_protected`) bound
    read-only over them (absolute, existing paths); its own pid and network namespaces
    (``offline`` or not: the network, when there is one, is pasta's); ``network_fds``:
    bwrap's ``--info-fd`` and ``--block-fd`` (:class:`Network`); ``drop_caps`` (default:
    when running as root): ``--cap-drop ALL``; it starts in ``chdir`` (default
    ``folder``). ``user_ns``: its own user namespace (``--unshare-user``: what root without
    ``CAP_SYS_ADMIN``, as in a container, needs); ``share_net``: no network namespace of its
    own (a far side's sandbox, where no pasta is run: :func:`far_command`); ``read_if_there``:
    each of ``readable`` bound only where it exists (``--ro-bind-try``: a far side's paths,
    which this machine cannot check). Pure."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", str(TMP)]
    ops: dict[tuple[Path, int], None] = {}
    for kind, paths in ((_HIDE, [p for p in hidden if Path(p) != TMP]), (_READ, [*readable, *files]),
                        (_WRITE, [folder, *writable]), (_PROTECT, protected)):
        for path in paths:
            ops[(Path(path), kind)] = None
    # parents first; at one path: hidden, then read-only, then writable, then protected over it
    for path, kind in sorted(ops, key=lambda op: (len(op[0].parts), op[1], str(op[0]))):
        if kind == _HIDE:
            argv += ["--tmpfs", str(path)]
        else:
            bind = "--bind" if kind == _WRITE else \
                "--ro-bind-try" if kind == _READ and read_if_there else "--ro-bind"
            argv += [bind, str(path), str(path)]
    argv += ["--unshare-user"] if user_ns else []
    argv += ["--unshare-pid", *([] if share_net else ["--unshare-net"]), "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent"]
    if drop_caps if drop_caps is not None else os.geteuid() == 0:
        argv += ["--cap-drop", "ALL"]
    if network_fds is not None and not offline:
        argv += ["--info-fd", str(network_fds[0]), "--block-fd", str(network_fds[1])]
    argv += ["--chdir", str(chdir if chdir is not None else folder), "--", *command]
    return argv


FAR_PRELUDE = r"""
n=$1; shift
while [ "$n" -gt 0 ]; do mkdir -p -m 0700 -- "$1" || exit 126; shift; n=$((n-1)); done
exec "$@"
"""
"""Run on the far side before bwrap (``sh -c FAR_PRELUDE escouade_nb N DIR… BWRAP ARGS…``): the
``N`` state folders made (mode 0700) where they are missing — their parent is read-only inside —,
then bwrap in its place."""


def far_command(command: Sequence[str], *, folder: str | Path, home: str | None,
                state_folders: Sequence[str] = (), also: Sequence[str | Path] = (),
                run_dirs: Sequence[str] = (), offline: bool = False) -> list[str]:
    """``command`` (the agent's program and arguments on the far side of a launcher) under
    bwrap *there*, with the local sandbox's profile (:func:`bwrap_argv`, far-side paths): ``/``
    read-only, a private ``/tmp``, its own ``/proc`` and ``/dev``, pid, IPC and UTS namespaces;
    ``folder`` (the agent's folder, the same path there) and ``also`` (its additional
    directories) writable, its manifest's ``state_folders`` expanded against the far side's
    ``home`` (a ``${VAR:-~/.x}`` takes its default: the far side's variables are not read) made
    and writable; ``run_dirs`` (the far side's ``/run``, ``/var/run``, ``$XDG_RUNTIME_DIR``,
    Jupyter's runtime folders there) hidden. Its own user namespace and no capabilities (root in a container has no
    ``CAP_SYS_ADMIN``). What does not hold there: no pasta is run on the far side, so its
    network is the far side's own (``offline``: none at all); the kernel's token folder and
    git files are this machine's, neither hidden nor protected there (a far side sharing them: the
    same host, a shared home). Pure: the far command line,
    ``["sh", "-c", FAR_PRELUDE, …]``, to put inside the launcher's wrapper. :class:`SandboxError`
    for a state folder that is ``/`` or the home folder itself."""
    env = {"HOME": home} if home else {}
    made: list[Path] = []
    for spec in state_folders:
        path = expand_state_folder(spec, env) if home else None
        if path is None:
            continue
        path = Path(os.path.normpath(path))
        if path == Path("/") or (home and path == Path(os.path.normpath(home))):
            raise SandboxError(f"state folder {spec!r} is {path} over there: a sandbox cannot make that writable")
        made.append(path)
    argv = bwrap_argv(BWRAP, command, folder=Path(folder), writable=[*made, *map(Path, also)],
                      readable=_far_under_tmp(command), read_if_there=True,
                      hidden=[Path(d) for d in run_dirs], offline=offline, drop_caps=True, user_ns=True,
                      share_net=not offline)
    return ["sh", "-c", FAR_PRELUDE, "escouade_nb", str(len(made)), *map(str, made), *argv]


def pasta_argv(pasta: str, pid: int, ports: Sequence[int], ns_fds: tuple[int, int] | None = None) -> list[str]:
    """pasta attached to process ``pid``'s network namespace: its network configured
    (``--config-net``), the host's gateway not mapped to the host (``--no-map-gw``), no
    port forwarded into it (``-t none -u none``), no UDP towards the host's loopback, and
    TCP towards the host's 127.0.0.1 on ``ports`` only (``-T``; ``-T none`` when empty: with
    no explicit list pasta forwards every bound port). As root: ``--runas 0`` (pasta
    otherwise drops to ``nobody``, who cannot open the namespace) and ``--netns-only``.
    ``ns_fds`` (not root): ``(user namespace fd, network namespace fd)`` inherited by pasta,
    which joins that user namespace — the one owning the network namespace, which
    unprivileged bwrap made; its child runs in a nested one — then the network's. In the
    foreground (``-f``): pasta stays the kernel's child, under util-linux's ``setpriv
    --pdeathsig KILL`` when it is on ``PATH``, so that it dies with the kernel even when the
    kernel is killed (SIGKILL) and nothing else could end it. Pure but for that lookup."""
    setpriv = shutil.which("setpriv")
    argv = [setpriv, "--pdeathsig", "KILL", "--", pasta] if setpriv is not None else [pasta]
    if os.geteuid() == 0:
        argv += ["--runas", "0"]
    argv += ["--config-net", "--no-map-gw", "-t", "none", "-u", "none", "-U", "none",
             "-T", ",".join(str(p) for p in sorted(set(ports))) or "none"]
    if ns_fds is not None:
        argv += ["--userns", f"/proc/self/fd/{ns_fds[0]}", "--netns", f"/proc/self/fd/{ns_fds[1]}"]
    else:
        argv += ["--netns", f"/proc/{pid}/ns/net", "--netns-only"]
    argv += ["-f", "-q"]
    return argv


NS_GET_USERNS = 0xB701
"""ioctl(2) on a namespace's fd: a new fd of the user namespace that owns it."""


def _namespace_fds(pid: int) -> tuple[int, int]:
    """``(user namespace fd, network namespace fd)`` of ``pid``'s network namespace (the
    user namespace that owns it). ``OSError`` when they cannot be opened."""
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(net, NS_GET_USERNS), net
    except BaseException:
        os.close(net)
        raise


def _network_up(pid: int, ports: Sequence[int], stop: threading.Event) -> bool:
    """Whether process ``pid``'s network namespace is ready, as pasta leaves it once
    configured: a default route (IPv4 or IPv6, not loopback's own reject route) and each
    of ``ports`` listening (pasta's side of a ``-T`` forward), before ``stop`` is set or
    :data:`ATTACH_LIMIT` seconds pass; read from ``/proc/PID/net`` every millisecond (call
    it in a thread)."""
    wanted = {f"{port:04X}" for port in ports}
    deadline = time.monotonic() + ATTACH_LIMIT
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            net = Path(f"/proc/{pid}/net")
            v4 = (net / "route").read_text().splitlines()[1:]
            v6 = (net / "ipv6_route").read_text().splitlines()
            sockets = [(net / name).read_text().splitlines()[1:] for name in ("tcp", "tcp6")]
        except OSError:
            return False  # gone
        routed = any(f[1:2] == ["00000000"] and f[0] != "lo" for f in map(str.split, v4)) or any(
            f[:2] == ["0" * 32, "00"] and f[-1] != "lo" for f in map(str.split, v6))  # lo's own: a reject
        listening = {f[1].rsplit(":", 1)[1] for table in sockets for f in map(str.split, table)
                     if len(f) > 3 and f[3] == "0A"}  # TCP_LISTEN
        if routed and wanted <= listening:
            return True
        time.sleep(0.001)
    return False


class Network:
    """pasta for one start of a sandboxed agent: the pipes bwrap reports on (``--info-fd``)
    and waits on (``--block-fd``), pasta's attach once bwrap made the namespace, and its end.

    Made in a thread by :meth:`Sandbox.command` (the pipes, the pid file's folder). The
    spawn passes :attr:`pass_fds` to bwrap, then calls :meth:`spawned` (our copies of
    bwrap's ends closed) and awaits :meth:`attach`; :meth:`close` (idempotent, never
    raises) kills pasta and closes what is left."""

    def __init__(self, pasta: str, ports: Sequence[int]) -> None:
        self.pasta = pasta
        self.ports = sorted(set(ports))
        self.pid: int | None = None  # pasta's, once attached
        self._pidfd: int | None = None
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        self._folder = Path(tempfile.mkdtemp(prefix="escouade-pasta-"))
        self.closed = False

    @property
    def pass_fds(self) -> tuple[int, int]:
        """bwrap's ends: ``(info fd, block fd)``, its ``--info-fd`` and ``--block-fd``."""
        return self._info_w, self._block_r

    def spawned(self) -> None:
        """bwrap runs: our copies of its ends are closed (so a bwrap that dies early gives
        end of file on the info pipe, not a wait)."""
        for fd in (self._info_w, self._block_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._info_w = self._block_r = -1

    def _read_info(self) -> int:
        data = b""
        while True:
            chunk = os.read(self._info_r, 4096)
            if not chunk:
                raise SandboxError("--sandbox: bwrap ended before it made the agent's network namespace "
                                   "(can it unshare the network here?); nothing was started")
            data += chunk
            with contextlib.suppress(ValueError):
                child = int(json.loads(data)["child-pid"])
                break
        if os.geteuid() == 0:
            self._dropped(child)
        return child

    @staticmethod
    def _dropped(child: int) -> None:
        """As root: wait (in this thread) until bwrap's child has dropped its capabilities
        (``--cap-drop ALL``, a few ms after it reports its pid, before it blocks on the
        block pipe): pasta, which keeps only a few, may open the namespace of a process
        holding no more than it (the kernel's ptrace access rule), not before."""
        deadline = time.monotonic() + ATTACH_LIMIT
        while time.monotonic() < deadline:
            try:
                status = Path(f"/proc/{child}/status").read_text()
            except OSError:
                return  # gone: pasta says so
            if any(line.split() == ["CapPrm:", "0000000000000000"] for line in status.splitlines()):
                return
            time.sleep(0.001)

    async def attach(self) -> None:
        """bwrap's child's pid read from the info pipe (in a thread), pasta run on its
        namespace (an async subprocess in the foreground, the kernel's child: see
        :func:`pasta_argv`), the namespace's default route and forwarded ports awaited (in a
        thread: :func:`_network_up`), then the block pipe written: the agent's program starts.
        :class:`SandboxError` (one line, pasta's last line of error) when bwrap ended first,
        pasta ended before the network was up, or it took over :data:`ATTACH_LIMIT` seconds."""
        ns_fds: tuple[int, int] | None = None
        try:
            child = await asyncio.wait_for(asyncio.to_thread(self._read_info), ATTACH_LIMIT)
            if os.geteuid() != 0:  # not root: pasta joins the user namespace owning the network one
                try:
                    ns_fds = _namespace_fds(child)
                except OSError as exc:
                    raise SandboxError(f"--sandbox: the agent's network namespace cannot be opened "
                                       f"({exc.strerror or exc}); nothing was started") from None
            errors = self._folder / "pasta.err"
            with open(errors, "wb") as err:  # read only when it fails: nothing reads a pipe of it meanwhile
                process = await asyncio.create_subprocess_exec(
                    *pasta_argv(self.pasta, child, self.ports, ns_fds), stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True, pass_fds=ns_fds or ())
            self._held(process.pid)
            stop = threading.Event()
            up = asyncio.ensure_future(asyncio.to_thread(_network_up, child, self.ports, stop))
            ended = asyncio.ensure_future(process.wait())
            try:
                await asyncio.wait({up, ended}, timeout=ATTACH_LIMIT, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.set()
                ended.cancel()
            if not (up.done() and up.result()):
                if process.returncode is None:
                    raise TimeoutError
                why = [line for line in errors.read_text("utf-8", "replace").splitlines()
                       if line.strip() and "syslog" not in line]
                raise SandboxError(f"--sandbox: pasta could not give the agent its network "
                                   f"({why[-1] if why else f'exit code {process.returncode}'}); nothing was started")
            os.write(self._block_w, b"1")
        except TimeoutError:
            raise SandboxError(f"--sandbox: the agent's network was not ready within {ATTACH_LIMIT:g} s; "
                               f"nothing was started") from None
        finally:
            for fd in (self._block_w, *(ns_fds or ())):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._block_w = -1

    def _held(self, pid: int) -> None:
        if pid <= 0:
            return
        self.pid = pid
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)  # signalled through it: a reused pid is never hit

    def close(self) -> None:
        """pasta killed (SIGKILL through its pidfd: it holds nothing to save), the pipes
        closed and the pid file's folder removed. Idempotent; never raises."""
        if self.closed:
            return
        self.closed = True
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        elif self.pid is not None:  # no pidfd here (an old kernel): by pid, if it is still pasta
            with contextlib.suppress(OSError):
                if PASTA.encode() in Path(f"/proc/{self.pid}/cmdline").read_bytes():
                    os.kill(self.pid, signal.SIGKILL)
        for fd in (self._info_r, self._info_w, self._block_r, self._block_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._info_r = self._info_w = self._block_r = self._block_w = -1
        shutil.rmtree(self._folder, ignore_errors=True)


@dataclass
class Confined:
    """One start's command line under bwrap and its network (None: ``offline``, or a
    command with no network at all). What the spawn needs: :attr:`pass_fds`, then
    :meth:`spawned` and :meth:`attach`; :meth:`close` when the process ended (idempotent)."""

    argv: list[str]
    network: Network | None = None

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return self.network.pass_fds if self.network is not None else ()

    def spawned(self) -> None:
        if self.network is not None:
            self.network.spawned()

    async def attach(self) -> None:
        if self.network is not None:
            await self.network.attach()

    def close(self) -> None:
        if self.network is not None:
            self.network.close()


@dataclass(frozen=True)
class Binds:
    """What one sandboxed start binds, hides and protects (:meth:`Sandbox.binds`, the one
    computation behind the agent's command line, its client file system's reach and its
    terminals' command lines): ``bwrap`` (its path), ``folder`` (the agent's folder, real
    path), ``writable`` (its other writable folders: additional directories, state
    folders, a worktree's git folders; real paths), ``readable`` (bound read-only after the
    private ``/tmp``), ``hidden`` (:func:`hidden_folders`: ``/tmp`` and the folders seen
    empty), ``protected`` (:func:`git_protected`: read-only over the writable ones),
    ``files`` (bound back read-only inside a hidden folder: its own token file), ``pasta``
    (its path; None: no network at all) and ``ports`` (the host's 127.0.0.1 TCP ports its
    network reaches). :meth:`argv` is a command line, :meth:`confined` one with its own
    network."""

    bwrap: str
    folder: Path
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()
    files: tuple[Path, ...] = ()
    pasta: str | None = None
    ports: tuple[int, ...] = ()

    @property
    def writable_set(self) -> tuple[Path, ...]:
        """Every folder the sandboxed process may write (its private ``/tmp`` aside, which
        is not the kernel's): ``folder`` and ``writable`` (less :attr:`protected`)."""
        return (self.folder, *self.writable)

    def for_terminals(self) -> Binds:
        """The same sandbox for a client terminal or a terminal sign-in: the same hidden
        folders, protected files and network, less the files bound back (the agent's token
        file: the token folder stays hidden whole)."""
        return dataclasses.replace(self, files=())

    def argv(self, command: Sequence[str], chdir: Path | None = None,
             network_fds: tuple[int, int] | None = None) -> list[str]:
        """``command`` under bwrap with these binds (:func:`bwrap_argv`), starting in
        ``chdir`` (default the folder); ``network_fds``: its network's pipes. Pure."""
        return bwrap_argv(self.bwrap, command, folder=self.folder, writable=self.writable, readable=self.readable,
                          offline=self.pasta is None, hidden=self.hidden, protected=self.protected, files=self.files,
                          network_fds=network_fds, chdir=chdir)

    def confined(self, command: Sequence[str], chdir: Path | None = None) -> Confined:
        """``command`` under bwrap with these binds and a network of its own (a
        :class:`Network`: pasta attached at the spawn; none when :attr:`pasta` is None).
        Makes two pipes and a folder: off the loop. The caller spawns with
        :attr:`Confined.pass_fds` and ends it with :meth:`Confined.close`."""
        net = Network(self.pasta, self.ports) if self.pasta is not None else None
        try:
            argv = self.argv(command, chdir, net.pass_fds if net is not None else None)
        except BaseException:
            if net is not None:
                net.close()
            raise
        return Confined(argv, net)


def client_confinement(binds: Binds) -> Confinement:
    """What the client file system and terminals of an agent sandboxed with ``binds``
    may touch (:class:`~escouade_nb.wire.fs.Confinement`), the process's own reach: write
    only in its writable set, never over a protected git file; read anything but the
    hidden folders (:attr:`Binds.hidden`), except inside the folders the sandbox binds
    there (its own, its program's…, never a hidden one itself; not its token file) — and
    neither the kernel's ``/proc``, ``/dev`` nor ``/sys`` (:data:`KERNEL_WORLD`)."""
    hidden_real = [Path(os.path.realpath(p)) for p in (*binds.hidden, *KERNEL_WORLD)]
    shown = [p for p in (*binds.writable_set, *binds.readable) if Path(os.path.realpath(p)) not in hidden_real]
    return Confinement(writable=binds.writable_set, hidden=tuple(hidden_real), shown=tuple(shown),
                       readonly=binds.protected)


def client_reach(binds: Binds) -> tuple[Confinement, Callable[[list[str], Path], Confined]]:
    """What the client may do for an agent sandboxed with ``binds``: its
    :func:`client_confinement`, and the ``wrap(argv, cwd)`` of its terminals
    (:func:`terminal_command`: a :class:`Confined` to spawn, attach and close). For
    :meth:`~...wire.client.EscouadeClient.confine` and a
    :class:`~...wire.terminals.TerminalManager`. Pure (``wrap`` is not: call it off the
    loop)."""
    return client_confinement(binds), lambda argv, cwd: terminal_command(binds, argv, cwd)


def terminal_command(binds: Binds, argv: Sequence[str], cwd: Path) -> Confined:
    """A client terminal's ``argv`` (``terminal/create`` of a sandboxed agent, or its
    terminal sign-in) under the same sandbox as the agent's process: its ``binds`` less
    its token file (:meth:`Binds.for_terminals`), starting in ``cwd`` (checked to be in
    its writable set by the terminal manager), with a network of its own cut the same
    way (its own pasta, the same ports; none for an offline agent). The one place a
    terminal is wrapped. Makes pipes: off the loop."""
    return binds.for_terminals().confined(argv, chdir=cwd)


@dataclass(frozen=True)
class Sandbox:
    """How one agent is sandboxed: ``offline`` cuts the network whole (no pasta);
    ``ports``: the host's 127.0.0.1 TCP ports the agent may reach besides the kernel's MCP
    server (a local model: ``squad.start(..., sandbox_ports=[11434])``,
    ``%escouade NAME --sandbox-port 11434``). Held by the agent (``agent.sandbox``);
    :meth:`binds` makes what each start binds, :meth:`command` its command line."""

    offline: bool = False
    ports: tuple[int, ...] = field(default=())

    def record(self) -> dict[str, Any]:
        """What a transcript header keeps of it (``{"offline": bool, "ports": [int]}``): a
        resume sandboxes the agent again, with the same ports."""
        return {"offline": self.offline, **({"ports": list(self.ports)} if self.ports else {})}

    @classmethod
    def from_record(cls, record: Any) -> Sandbox:
        """The sandbox of a transcript header's ``sandbox`` entry (:meth:`record`)."""
        record = record if isinstance(record, dict) else {}
        ports = record.get("ports") or []
        return cls(offline=bool(record.get("offline")),
                   ports=tuple(p for p in ports if type(p) is int and 0 < p < 65536))

    async def command(self, command: Sequence[str], *, folder: Path, env: Mapping[str, str],
                      state_folders: Sequence[str] = (), also: Sequence[Path] = (),
                      worktree: Path | None = None, branch: str | None = None,
                      readable: Sequence[Path] = (), kernel_port: int | None = None,
                      token_folder: Path | None = None, token_file: Path | None = None,
                      network: bool = True) -> Confined:
        """``command`` wrapped in bwrap for an agent working in ``folder`` with environment
        ``env``: :meth:`binds` (same arguments, same errors), then :meth:`Binds.confined`
        (in the same thread)."""
        binds = await self.binds(command, folder=folder, env=env, state_folders=state_folders, also=also,
                                 worktree=worktree, branch=branch, readable=readable, kernel_port=kernel_port,
                                 token_folder=token_folder, token_file=token_file, network=network)
        return await asyncio.to_thread(binds.confined, command)

    async def binds(self, command: Sequence[str], *, folder: Path, env: Mapping[str, str],
                    state_folders: Sequence[str] = (), also: Sequence[Path] = (),
                    worktree: Path | None = None, branch: str | None = None,
                    readable: Sequence[Path] = (), kernel_port: int | None = None,
                    token_folder: Path | None = None, token_file: Path | None = None,
                    network: bool = True) -> Binds:
        """What bwrap binds, hides and protects for ``command`` run by an agent working in
        ``folder`` with environment ``env`` (what expands its ``state_folders``, the
        manifest's ``acp.stateFolders``); ``also``: more writable folders (its additional
        directories); ``worktree`` / ``branch``: its git worktree (see
        :func:`worktree_git_folders`); ``readable``: folders bound read-only (existing ones;
        after the private ``/tmp``); ``token_folder``: the kernel's MCP token folder, hidden
        but for ``token_file`` (this agent's own, bound read-only); ``kernel_port``: the
        kernel's MCP server's port, forwarded with :attr:`ports`; ``network`` False (a
        worktree's setup): no network, as ``offline``. The file work runs in a thread.
        :class:`SandboxMissing` without bwrap (or pasta, when there is a network),
        :class:`SandboxError` for a state folder that is ``/``, the home folder itself, or
        cannot be made."""
        bwrap = find_bwrap(env.get("PATH"))
        online = network and not self.offline
        pasta = find_pasta(env.get("PATH")) if online else None
        ports = tuple(sorted({*self.ports, *([kernel_port] if kernel_port else [])}))
        return await asyncio.to_thread(self._binds, bwrap, pasta, ports, list(command), folder, dict(env),
                                       list(state_folders), list(also), worktree, branch, list(readable),
                                       token_folder, token_file)

    def _binds(self, bwrap: str, pasta: str | None, ports: tuple[int, ...], command: list[str], folder: Path,
               env: dict[str, str], state_folders: list[str], also: list[Path], worktree: Path | None,
               branch: str | None, extra: list[Path], token_folder: Path | None, token_file: Path | None) -> Binds:
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
        folder = Path(folder).resolve()
        protected = git_protected([folder, *writable])
        if worktree is not None:
            git_folders = worktree_git_folders(Path(worktree), branch)
            writable += git_folders
            if git_folders:
                protected += git_protected(git_folders[:1])  # its admin folder's commondir, gitdir, config.worktree
                if git_folders[1].is_relative_to("/tmp"):  # the repository, hidden by the private /tmp
                    readable.append(git_folders[1].parent.parent)  # <repo>/.git/objects -> <repo>: read-only
        hidden = hidden_folders(env, token_folder)
        readable += resolv_conf(hidden)
        files = [Path(token_file)] if token_file is not None and Path(token_file).is_file() else []
        return Binds(bwrap, folder, tuple(writable), tuple(readable), tuple(hidden), tuple(protected), tuple(files),
                     pasta, ports)


async def sandboxed(agent: SandboxedAgent, argv: Sequence[str], env: Mapping[str, str],
                    readable: Sequence[Path] = (), *, kernel_port: int | None = None,
                    token_folder: Path | None = None, token_file: Path | None = None,
                    network: bool = True) -> Binds:
    """The binds of ``argv`` (the agent's command line) under ``agent.sandbox`` for this
    start: its folder, additional directories, manifest's ``acp.stateFolders`` (expanded
    with ``env``, its environment) and worktree; ``readable``: more folders bound
    read-only; ``kernel_port``, ``token_folder``, ``token_file``, ``network``: as
    :meth:`Sandbox.binds`. ``binds.confined(argv)`` is its command line and network.
    Errors as :meth:`Sandbox.binds`."""
    sandbox: Sandbox | None = agent.sandbox
    if sandbox is None:
        raise SandboxError(f"{agent.harness.display_name}: not sandboxed (no --sandbox)")
    acp_spec = agent.harness.acp
    worktree = agent.worktree
    return await sandbox.binds(argv, folder=agent.cwd, env=env,
                               state_folders=list(acp_spec.state_folders) if acp_spec is not None else [],
                               also=list(agent.add_dirs), worktree=worktree.path if worktree is not None else None,
                               branch=worktree.branch if worktree is not None else None, readable=readable,
                               kernel_port=kernel_port, token_folder=token_folder, token_file=token_file,
                               network=network)
