"""The client terminals of ACP: ``terminal/create``, ``/output``, ``/wait_for_exit``,
``/kill`` and ``/release``, on real processes.

:class:`TerminalManager` runs the commands an agent asks for, for one session folder.

Command shapes (real agents send both)
    * ``command`` with a non-empty ``args``: the program is executed directly with those
      arguments, no shell (``["git", "status"]``); a program name without ``/`` is looked
      up on the terminal's ``PATH``.
    * ``command`` with no ``args`` (absent or ``[]``): it is a shell line, run as
      ``/bin/sh -c COMMAND`` (``"npm test && echo ok"``, ``"ls | wc -l"``, ``"pytest"``),
      except when ``command`` is the path of an existing executable file (it contains a
      ``/``), which is executed directly, so ``/opt/My Tools/run`` is not split at its
      space. A single word like ``pytest`` goes through the shell too: the result is the
      same, and shell builtins (``cd``, ``exit 3``) work.

Processes
    Each command runs in its own process group (``start_new_session``) with stdin from
    ``/dev/null`` (a pipe for the client's own commands, ``create(stdin=True)``); stdout and
    stderr go to one pipe, so the output interleaves as on a console. Its environment is
    the manager's ``env`` (the agent's own environment; ``os.environ`` when not given)
    plus the request's ``env`` entries.

Working folder
    ``cwd`` absent or empty: the session folder. A relative one is taken against the
    session folder, an absolute one as is. The command starts in its *real* folder (``..``
    and every symlink resolved), which is what :attr:`Terminal.cwd` holds. A missing one
    is refused (-32602). With a ``fence`` (a private project's folder; also the session's
    additional directories, ``also``), a real folder outside them is refused before any
    process starts (-32602, ``data`` ``{cwd, realCwd, fence, reason: "outside_fence"}``,
    the sentence naming the folder and the fence): an absolute folder elsewhere, ``..``
    climbing out, a symlink inside pointing out, a sibling sharing the prefix — and the
    session folder itself when no ``cwd`` is given and it is outside. The check says
    where a command starts, not what it may reach: a command can ``cd`` anywhere, a
    terminal is no sandbox (its permission card is the gate). The folder is resolved and
    checked in a worker thread, off the event loop.
    A sandboxed agent's terminals (``confinement`` and ``wrap`` set, ``--sandbox``) run
    inside the same sandbox as its process: the real folder must be in its writable set
    (else -32602, ``data.reason`` ``"outside_sandbox"``), and the command line is
    ``wrap(argv, folder)`` (bwrap with the agent's binds, hidden folders and read-only git
    files, starting in that folder), so what the command reaches is what the agent's
    process reaches. Its network is its own, cut as the agent's is: ``wrap`` gives a
    :class:`Wrapped` whose pipes bwrap inherits, and its own pasta is attached before the
    command runs (a failure refuses the request, nothing left running) and ended when the
    command's process ends, is killed or released. bwrap itself runs
    outside the sandbox, so a request whose ``env`` sets a variable the dynamic loader or
    the C library reads at start (:data:`LOADER_VARIABLES`, every ``LD_*``) is refused
    (-32602, ``"loader_variable"``); bwrap is found on the manager's ``env``'s ``PATH``,
    never the request's. Until ``wrap`` is given (the sandbox is made as the agent starts),
    a sandboxed agent's ``terminal/create`` is refused.
    When the command (the group leader) exits, whatever it left running in its group is
    killed (SIGKILL), so a terminal never leaks processes (a program that must outlive
    it has to leave the group with ``setsid``). ``kill`` and ``release`` send SIGTERM to
    the whole group, then SIGKILL after ``kill_grace`` seconds.

Exit status
    ``exitCode`` for a normal exit, else ``signal`` with the signal's name (``"SIGTERM"``,
    ``"SIGKILL"``): what ``waitpid`` said, nothing invented. A command run through the
    shell whose child was killed reports what the shell reports (usually 128 + n).

Output
    Bytes are kept up to ``outputByteLimit`` (``DEFAULT_OUTPUT_BYTE_LIMIT`` when the agent
    gives none): the NEWEST bytes are kept, the oldest dropped, and the cut is moved
    forward to a UTF-8 character boundary (so slightly fewer bytes than the limit may be
    kept); ``truncated`` is then true. Bytes that are not UTF-8 show as U+FFFD; while the
    command runs, a character split across reads is held back until it is complete.

Bounds
    At most ``max_running`` (16) commands run at once: a further ``terminal/create`` is
    refused with an error asking to kill or release one. At most ``max_kept`` (64)
    terminals are held unreleased: beyond that the oldest *finished* one is released
    (forgotten) to make room. Released terminals are forgotten by the agent's calls (an
    error), but the last ``released_kept`` (32) stay readable through :meth:`snapshot`,
    for a view that shows a terminal's output after the agent released it.

Lifecycle
    Reading the pipes needs a host task group: run the manager with ``async with
    manager:`` or ``tg.start_soon(manager.serve)`` for the agent's lifetime. Leaving it
    (or cancelling ``serve``) kills every command still running; :meth:`close_all` does
    the same on demand, and :meth:`kill_now` synchronously (at interpreter exit: the
    commands are in their own process groups, so killing the agent's group does not
    reach them). ``terminal/create`` outside it is refused.

Changes are told to subscribers (:meth:`subscribe`) as :class:`TerminalEvent`
(``created``, ``output``, ``exited``, ``released``), synchronously on the event loop;
:meth:`snapshot` gives a terminal's ``(output, truncated, exit_status)``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
from acp import RequestError
from acp.schema import TerminalExitStatus
from anyio.abc import Process, TaskGroup

from ..core.observers import Observers, Subscription
from .fs import Confinement, inside
from .process import signal_group

__all__ = [
    "DEFAULT_OUTPUT_BYTE_LIMIT",
    "KILL_GRACE",
    "LOADER_VARIABLES",
    "MAX_KEPT",
    "MAX_RUNNING",
    "RELEASED_KEPT",
    "SHELL",
    "Terminal",
    "TerminalEvent",
    "TerminalManager",
    "Wrap",
    "Wrapped",
    "command_argv",
]

log = logging.getLogger(__name__)

SHELL = "/bin/sh"
MAX_RUNNING = 16
MAX_KEPT = 64
RELEASED_KEPT = 32
DEFAULT_OUTPUT_BYTE_LIMIT = 1024 * 1024
KILL_GRACE = 1.0
PIPE_DRAIN_TIMEOUT = 1.0
"""After the command and its group are gone, how long to wait for the pipe's end
(a process that left the group may still hold it)."""

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

LOADER_VARIABLES = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
    "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS"})
"""Variables the C library or the dynamic loader reads as a program starts (with every
``LD_*``): glibc's own list of what it ignores for a setuid program. A sandboxed agent's
terminal refuses a request that sets one: bwrap runs outside the sandbox, and
``LD_PRELOAD`` would run the agent's code in it, unconfined."""

class Wrapped(Protocol):
    """A sandboxed terminal's command line and its network (``engine.launch.sandbox.Confined``):
    spawned with :attr:`pass_fds`, then :meth:`spawned` and :meth:`attach` (its pasta
    attached before the command runs), :meth:`close` once its process has ended
    (idempotent, never raises)."""

    argv: list[str]

    @property
    def pass_fds(self) -> tuple[int, ...]: ...

    def spawned(self) -> None: ...

    async def attach(self) -> None: ...

    def close(self) -> None: ...


Wrap = Callable[[list[str], Path], Wrapped]
"""``wrap(argv, folder)``: a sandboxed agent's terminal (bwrap around ``argv``, starting
in the real folder ``folder``, with a network of its own). It makes pipes: called in a
worker thread."""


def _loader_variable(name: str) -> bool:
    return name.startswith("LD_") or name in LOADER_VARIABLES


def command_argv(command: str, args: Iterable[str] | None, *, shell: str = SHELL) -> tuple[list[str], bool]:
    """The argv to execute for a ``terminal/create`` request, and whether it is a
    shell line (see the module's "Command shapes")."""
    args = list(args or [])
    if args:
        return [command, *args], False
    if "/" in command and os.path.isfile(command) and os.access(command, os.X_OK):
        return [command], False
    return [shell, "-c", command], True


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def _exit_status(returncode: int | None) -> TerminalExitStatus:
    if returncode is None:
        return TerminalExitStatus()
    if returncode < 0:
        return TerminalExitStatus(signal=_signal_name(-returncode))
    return TerminalExitStatus(exit_code=returncode)


def _incomplete_tail(buf: bytes | bytearray) -> int:
    """How many bytes at the end of ``buf`` are the start of a UTF-8 character whose
    other bytes have not arrived yet (0 to 3)."""
    n = len(buf)
    for back in range(1, min(4, n) + 1):
        byte = buf[n - back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        if byte < 0xC0:
            return 0
        need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4 if byte < 0xF8 else 1
        return back if back < need else 0
    return 0


@dataclass(frozen=True)
class TerminalEvent:
    """A change of one terminal: ``created``, ``output`` (new bytes), ``exited``
    (``exit_status`` is set) or ``released``."""

    terminal_id: str
    kind: Literal["created", "output", "exited", "released"]


@dataclass(eq=False)
class Terminal:
    """One command and what it printed."""

    id: str
    command: str
    args: list[str]
    argv: list[str]
    shell: bool
    cwd: Path
    output_byte_limit: int
    process: Process | None = None
    confined: Wrapped | None = None  # a sandboxed terminal's network (its pasta), closed when the process ends
    truncated: bool = False
    exit_status: TerminalExitStatus | None = None
    released: bool = False
    exited: anyio.Event = field(default_factory=anyio.Event)
    pipe_closed: anyio.Event = field(default_factory=anyio.Event)
    _buf: bytearray = field(default_factory=bytearray)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return not self.exited.is_set()

    @property
    def command_line(self) -> str:
        """How the command reads for a person (the shell line, or the argv joined)."""
        return self.command if self.shell else shlex.join(self.argv)

    def feed(self, data: bytes) -> None:
        """Append output, keeping the newest ``output_byte_limit`` bytes, cut at a
        character boundary."""
        buf = self._buf
        buf += data
        over = len(buf) - self.output_byte_limit
        if over > 0:
            cut = over
            while cut < len(buf) and cut - over < 3 and buf[cut] & 0xC0 == 0x80:
                cut += 1
            del buf[:cut]
            self.truncated = True

    @property
    def output(self) -> str:
        data = bytes(self._buf)
        if not self.exited.is_set():
            hold = _incomplete_tail(data)
            if hold:
                data = data[:-hold]
        return data.decode("utf-8", "replace")

    @property
    def output_bytes(self) -> int:
        return len(self._buf)


class TerminalManager:
    """The terminals of one agent. ``cwd`` is the session folder, ``env`` the base
    environment of the commands (default ``os.environ``); ``fence`` (a private project's
    folder) and ``also`` (the session's additional directories) bound the folders a
    command may start in. See the module's docs."""

    def __init__(self, cwd: Path, *, env: Mapping[str, str] | None = None, shell: str = SHELL,
                 max_running: int = MAX_RUNNING, max_kept: int = MAX_KEPT,
                 released_kept: int = RELEASED_KEPT,
                 default_output_byte_limit: int = DEFAULT_OUTPUT_BYTE_LIMIT,
                 kill_grace: float = KILL_GRACE, id_prefix: str = "term",
                 fence: Path | None = None, also: Sequence[Path] = (),
                 confinement: Confinement | None = None, wrap: Wrap | None = None) -> None:
        self.cwd = Path(os.path.abspath(cwd))
        self.confinement = confinement  # a sandboxed agent's: its terminals run in its sandbox, through ``wrap``
        self.wrap = wrap
        self.fence = Path(os.path.realpath(fence)) if fence is not None else None
        self.also = [Path(os.path.realpath(d)) for d in also]
        self.env = dict(env) if env is not None else None
        self.shell = shell
        self.max_running = max_running
        self.max_kept = max(max_kept, max_running)
        self.released_kept = released_kept
        self.default_output_byte_limit = default_output_byte_limit
        self.kill_grace = kill_grace
        self._terminals: dict[str, Terminal] = {}
        self._released: collections.OrderedDict[str, Terminal] = collections.OrderedDict()
        self._observers: Observers[[TerminalEvent]] = Observers("terminals")
        self._ids = itertools.count(1)
        self._prefix = id_prefix  # terminal ids are PREFIX-N
        self._tg: TaskGroup | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> TerminalManager:
        if self._tg is not None:
            raise RuntimeError("TerminalManager is already running")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        tg, self._tg = self._tg, None  # no new terminal from now on
        assert tg is not None
        try:
            with anyio.CancelScope(shield=True):
                await self.close_all()
        finally:
            tg.cancel_scope.cancel()
            result = await tg.__aexit__(*exc_info)
        return result

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the terminals until cancelled (then kill what still runs)."""
        async with self:
            task_status.started()
            await anyio.sleep_forever()

    @property
    def serving(self) -> bool:
        return self._tg is not None

    async def close_all(self) -> None:
        """Kill every command still running (SIGTERM to its group, SIGKILL after the
        grace) and wait for them; the terminals stay readable until released."""
        async with anyio.create_task_group() as tg:
            for term in list(self._terminals.values()):
                if term.running:
                    tg.start_soon(self._kill, term)

    def kill_now(self) -> None:
        """SIGKILL every running command's group at once, without waiting: for
        interpreter exit, when no event loop can run :meth:`close_all`."""
        for term in self._terminals.values():
            if term.running and term.pid is not None:
                signal_group(term.pid, signal.SIGKILL)
            if term.confined is not None:  # its pasta too
                term.confined.close()

    # -- subscribers ---------------------------------------------------------------------------
    def subscribe(self, fn: Callable[[TerminalEvent], None]) -> Subscription:
        """Call ``fn(event)`` on every change; returns the :class:`Subscription` token."""
        return self._observers.subscribe(fn)

    def _emit(self, terminal_id: str, kind: Literal["created", "output", "exited", "released"]) -> None:
        self._observers.emit(TerminalEvent(terminal_id, kind))

    def get(self, terminal_id: str) -> Terminal:
        """A terminal the agent may still use, or a recently released one (``KeyError``)."""
        term = self._terminals.get(terminal_id) or self._released.get(terminal_id)
        if term is None:
            raise KeyError(terminal_id)
        return term

    def snapshot(self, terminal_id: str) -> tuple[str, bool, TerminalExitStatus | None]:
        """``(output, truncated, exit_status)``; ``exit_status`` is ``None`` while the
        command runs. Works for the last released terminals too; ``KeyError`` else."""
        term = self.get(terminal_id)
        return term.output, term.truncated, term.exit_status

    @property
    def terminals(self) -> list[Terminal]:
        """The terminals not released, oldest first."""
        return list(self._terminals.values())

    def _live(self, terminal_id: str) -> Terminal:
        term = self._terminals.get(terminal_id)
        if term is None:
            why = "it was released" if terminal_id in self._released else "no such terminal"
            raise RequestError(INVALID_PARAMS, f"Unknown terminal {terminal_id!r}: {why}",
                               {"terminalId": terminal_id})
        return term

    # -- terminal/create -----------------------------------------------------------------------
    async def create(self, command: str, args: list[str] | None = None, env: Iterable[Any] | None = None,
                     cwd: str | None = None, output_byte_limit: int | None = None, *, stdin: bool = False) -> str:
        """Start a command; returns its terminal id. ``env`` holds ``{name, value}``
        (dicts or ``acp.schema.EnvVariable``). ``stdin``: a pipe the client writes with
        :meth:`write` (the client's own terminals: a sign-in program), else ``/dev/null``
        (every ``terminal/create`` of an agent)."""
        if self._tg is None:
            raise RequestError(INTERNAL_ERROR, "Terminals are not available: the client's terminal manager is "
                                               "not running", {"command": command})
        if not command:
            raise RequestError(INVALID_PARAMS, "Empty command", {"command": command})
        running = sum(1 for t in self._terminals.values() if t.running)
        if running >= self.max_running:
            raise RequestError(INTERNAL_ERROR, f"Too many terminals running ({running}, the limit is "
                                               f"{self.max_running}): kill or release one first",
                               {"command": command, "limit": self.max_running})
        if output_byte_limit is not None and output_byte_limit < 0:
            raise RequestError(INVALID_PARAMS, f"outputByteLimit must be 0 or more, not {output_byte_limit}",
                               {"outputByteLimit": output_byte_limit})
        workdir = await asyncio.to_thread(self._workdir, cwd)
        full_env = dict(os.environ if self.env is None else self.env)
        for var in env or ():
            name, value = (var["name"], var["value"]) if isinstance(var, Mapping) else (var.name, var.value)
            if self.confinement is not None and _loader_variable(name):
                raise RequestError(INVALID_PARAMS, f"Refused: this agent is sandboxed and its terminal's env sets "
                                                   f"{name}, which the program that makes the sandbox (bwrap, "
                                                   "outside it) would read; nothing was started",
                                   {"command": command, "name": name, "reason": "loader_variable"})
            full_env[name] = value
        argv, shell = command_argv(command, args, shell=self.shell)
        spawned, confined = argv, None
        if self.confinement is not None:
            wrap = self.wrap
            if wrap is None:
                raise RequestError(INTERNAL_ERROR, "Refused: this agent is sandboxed and its sandbox is not made yet; "
                                                   "nothing was started", {"command": command})
            try:
                confined = await asyncio.to_thread(wrap, argv, workdir)
            except OSError as exc:
                raise RequestError(INTERNAL_ERROR, f"Cannot make this sandboxed terminal: {exc.strerror or exc}; "
                                                   "nothing was started", {"command": command}) from None
            spawned = confined.argv
        try:
            process = await anyio.open_process(spawned, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                               stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, cwd=str(workdir), env=full_env,
                                               start_new_session=True,
                                               pass_fds=confined.pass_fds if confined is not None else ())
        except OSError as exc:
            if confined is not None:
                confined.close()
            raise RequestError(INVALID_PARAMS, f"Cannot run {argv[0]!r}: {exc.strerror or exc}",
                               {"command": command, "args": list(args or [])}) from None
        except BaseException:
            if confined is not None:
                confined.close()
            raise
        if confined is not None:
            await self._attach(confined, process, command)
        limit = self.default_output_byte_limit if output_byte_limit is None else output_byte_limit
        term = Terminal(id=f"{self._prefix}-{next(self._ids)}", command=command, args=list(args or []), argv=argv,
                        shell=shell, cwd=workdir, output_byte_limit=limit, process=process, confined=confined)
        self._terminals[term.id] = term
        self._tg.start_soon(self._run, term, name=f"terminal {term.id}")
        self._make_room()
        self._emit(term.id, "created")
        return term.id

    @staticmethod
    async def _attach(confined: Wrapped, process: Process, command: str) -> None:
        """A sandboxed terminal's network attached (its own pasta) before its command runs
        (bwrap waits on it); on a failure the process and its network end and the request
        is refused (``RequestError``, nothing left running)."""
        confined.spawned()
        try:
            await confined.attach()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                signal_group(process.pid, signal.SIGKILL)
                with anyio.move_on_after(5):
                    await process.wait()
                confined.close()
                with anyio.move_on_after(1):
                    await process.aclose()
            if isinstance(exc, Exception):
                raise RequestError(INTERNAL_ERROR, f"This sandboxed terminal could not start: {exc}",
                                   {"command": command}) from None
            raise

    def _workdir(self, cwd: str | None) -> Path:
        """The real folder a command asked to start in ``cwd`` starts in (blocking: a
        worker thread); ``RequestError`` when it is missing or outside the fence."""
        given = self.cwd if not cwd else Path(os.path.normpath(self.cwd / cwd))
        real = Path(os.path.realpath(given))
        shown = cwd or str(self.cwd)
        if self.fence is not None and not inside(real, (self.fence, *self.also)):
            really = "" if str(real) == shown else f" (really {real})"
            raise RequestError(INVALID_PARAMS, f"Refused: the terminal's folder {shown}{really} is outside the "
                                               f"private project folder {self.fence}; escouade_nb starts commands "
                                               "only inside it",
                               {"cwd": shown, "realCwd": str(real), "fence": str(self.fence),
                                "reason": "outside_fence"})
        box = self.confinement
        if box is not None and not box.may_write(real):
            really = "" if str(real) == shown else f" (really {real})"
            raise RequestError(INVALID_PARAMS, f"Refused: the terminal's folder {shown}{really} is outside what this "
                                               f"sandboxed agent may write ({', '.join(map(str, box.writable))}); "
                                               "escouade_nb starts its commands only there, in its sandbox",
                               {"cwd": shown, "realCwd": str(real), "writable": [str(p) for p in box.writable],
                                "reason": "outside_sandbox"})
        if not real.is_dir():
            raise RequestError(INVALID_PARAMS, f"The working folder {given} does not exist", {"cwd": str(given)})
        return real

    def _make_room(self) -> None:
        while len(self._terminals) > self.max_kept:
            oldest = next((t for t in self._terminals.values() if not t.running), None)
            if oldest is None:
                return
            self._forget(oldest)

    def _forget(self, term: Terminal) -> None:
        self._terminals.pop(term.id, None)
        term.released = True
        self._released[term.id] = term
        while len(self._released) > self.released_kept:
            self._released.popitem(last=False)
        self._emit(term.id, "released")

    async def _run(self, term: Terminal) -> None:
        process = term.process
        assert process is not None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, term)
                await process.wait()
                # The command is gone: what it left in its group goes too. The group id
                # cannot have been reused while members remain, so this is safe.
                signal_group(process.pid, signal.SIGKILL)
                if term.confined is not None:  # a sandboxed terminal's pasta never outlives it
                    term.confined.close()
                with anyio.move_on_after(PIPE_DRAIN_TIMEOUT):
                    await term.pipe_closed.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:  # cancelled: the host is going away
                    signal_group(process.pid, signal.SIGKILL)
                    with anyio.move_on_after(5):
                        await process.wait()
                if term.confined is not None:
                    term.confined.close()
                term.exit_status = _exit_status(process.returncode)
                term.exited.set()
                self._emit(term.id, "exited")
                with anyio.move_on_after(1):
                    await process.aclose()

    async def _pump(self, term: Terminal) -> None:
        assert term.process is not None and term.process.stdout is not None
        try:
            async for chunk in term.process.stdout:
                term.feed(chunk)
                self._emit(term.id, "output")
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            term.pipe_closed.set()

    # -- the other requests --------------------------------------------------------------------
    async def output(self, terminal_id: str) -> tuple[str, bool, TerminalExitStatus | None]:
        """``terminal/output``: ``(output, truncated, exit_status)``."""
        term = self._live(terminal_id)
        return term.output, term.truncated, term.exit_status

    async def wait_for_exit(self, terminal_id: str) -> TerminalExitStatus:
        """``terminal/wait_for_exit``: waits for the command's end."""
        term = self._live(terminal_id)
        await term.exited.wait()
        assert term.exit_status is not None
        return term.exit_status

    async def write(self, terminal_id: str, data: bytes) -> None:
        """Write ``data`` to the stdin of a command started with ``stdin=True``;
        ``RequestError`` when it has none or has ended (its stdin closed)."""
        term = self._live(terminal_id)
        pipe = term.process.stdin if term.process is not None else None
        if pipe is None or not term.running:
            raise RequestError(INVALID_PARAMS, f"Terminal {terminal_id!r} takes no input"
                               + ("" if pipe is None else " (its command ended)"), {"terminalId": terminal_id})
        try:
            await pipe.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise RequestError(INVALID_PARAMS, f"Terminal {terminal_id!r} closed its input: {exc}",
                               {"terminalId": terminal_id}) from None

    async def kill(self, terminal_id: str) -> None:
        """``terminal/kill``: ends the command (its whole group); the terminal stays."""
        await self._kill(self._live(terminal_id))

    async def release(self, terminal_id: str) -> None:
        """``terminal/release``: kills what still runs and forgets the terminal."""
        term = self._live(terminal_id)
        await self._kill(term)
        self._forget(term)

    async def _kill(self, term: Terminal) -> None:
        if not term.running or term.pid is None:
            return
        signal_group(term.pid, signal.SIGTERM)
        with anyio.move_on_after(self.kill_grace):
            await term.exited.wait()
        if term.running:
            signal_group(term.pid, signal.SIGKILL)
            with anyio.move_on_after(5):
                await term.exited.wait()
