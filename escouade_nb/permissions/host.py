"""The rule plugin host: finds the plugins that decide, runs them, speaks JSON-RPC to them.

A rule plugin is a folder with an ``escouade-plugin.json`` whose manifest asks
``"permissions": {"decide": true}`` and names its program::

    "program": {"python": "team_rules.py"}         run with the kernel's Python
    "program": {"command": ["node", "rules.js"]}   a program on PATH (or "./x" in the folder)
    "program": {"python": "rules.py", "env": ["RULES_URL"]}   plus variables it is given

Paths are relative to the plugin folder, which is also the program's working folder.
The host speaks JSON-RPC 2.0 on the program's stdin/stdout, one message per line
(:mod:`.protocol`, through the client of :mod:`.jsonrpc`): ``initialize`` first
(:class:`~.protocol.InitializeParams`: protocol version 1, who speaks, the plugin and its
folder), then ``permissions/decide`` requests, ``shutdown`` last (the plugin answers,
then exits; it is terminated if it does not). Lines that are not JSON-RPC are skipped
(and journaled); a request of the plugin is answered "method not found"; a plugin's
stderr is kept in a ring.

Least privilege: a rule plugin never gets the kernel's whole environment (its API keys
and tokens stay in the kernel). It gets only (:func:`plugin_environment`):

* ``PATH``, ``HOME``, the locale (``LANG``, ``LANGUAGE``, ``LC_*``), the temporary folder
  (``TMPDIR``, ``TEMP``, ``TMP``) — and on Windows ``SYSTEMROOT``, ``PATHEXT``,
  ``COMSPEC``, without which programs do not start;
* for a ``program.python`` plugin, ``PYTHONPATH``, ``PYTHONHOME`` (and where bytecode goes:
  ``PYTHONDONTWRITEBYTECODE``, ``PYTHONPYCACHEPREFIX``), so the kernel's
  interpreter finds the packages (the plugin SDK) it finds in the kernel;
* the variables its manifest names in ``program.env`` (a list of names), each passed
  on from the kernel's environment when it is set there. Values are never written in a
  manifest: a plugin that needs a secret names it, and the user sees it named.

A plugin that exits on its own is restarted with back-off (0.25 s, doubling to 30 s;
back to 0.25 s after a minute up); the requests it had in flight fail with
:class:`PluginCrashed`. A plugin that answers ``initialize`` with another protocol
version is stopped for good.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import Process
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..manifest import MANIFEST_FILENAME, SHIPPED_PLUGINS_DIR, Manifest, discover
from ..wire.framing import Skipped
from ..wire.process import StderrRing, drain, kill_group_now, spawn, terminate_group
from .journal import Journal
from .jsonrpc import LineClient, PeerClosed, RemoteError, RpcError
from .protocol import INITIALIZE, PROTOCOL_VERSION, SHUTDOWN, InitializeParams, InitializeResult, PluginInfo
from .states import PluginStates

log = logging.getLogger(__name__)

__all__ = [
    "PROTOCOL_VERSION", "PluginError", "PluginCrashed", "PluginNotRunning", "PluginRefused", "ProgramSpec",
    "InitializeParams", "InitializeResult", "PluginSpec", "PluginProcess", "PluginHost", "rule_plugin_spec",
    "BASE_ENV", "plugin_environment",
]

START_TIMEOUT = 10.0
"""Seconds a plugin has to answer ``initialize``."""
SHUTDOWN_GRACE = 1.0
BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET_AFTER = 0.25, 30.0, 60.0
GARBAGE_JOURNALED = 5
"""Lines that are not JSON-RPC journaled per process start (the rest are only counted)."""

PluginError = RpcError
"""A request to a plugin did not get a result (the JSON-RPC client's :class:`~.jsonrpc.RpcError`)."""
PluginCrashed = PeerClosed
"""The plugin's process ended (or stopped reading) while the request was in flight."""
PluginRefused = RemoteError
"""The plugin answered with a JSON-RPC error (``code``, ``message``)."""


class PluginNotRunning(PluginError):
    """The plugin is not running (stopped, restarting, failed)."""


# -- the environment ---------------------------------------------------------------------

BASE_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP")
"""Variables every rule plugin gets from the kernel's environment (with ``LC_*``)."""
WINDOWS_ENV = ("SYSTEMROOT", "PATHEXT", "COMSPEC")
PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
"""Also given to a ``program.python`` plugin (run with the kernel's interpreter)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def plugin_environment(declared: Sequence[str] = (), *, python: bool = False,
                       base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a rule plugin (see the module's doc): from ``base`` (the
    kernel's environment by default), only :data:`BASE_ENV`, ``LC_*``, the Windows
    essentials, :data:`PYTHON_ENV` when ``python``, and the ``declared`` names that are set."""
    source = os.environ if base is None else base
    keep = set(BASE_ENV) | set(declared)
    if os.name == "nt":
        keep |= set(WINDOWS_ENV)
    if python:
        keep |= set(PYTHON_ENV)
    return {k: v for k, v in source.items() if k in keep or k.startswith("LC_")}


# -- the manifest's program ---------------------------------------------------------------


class ProgramSpec(BaseModel):
    """The manifest's ``program``: ``python`` (a script of the folder, run with the
    kernel's interpreter) or ``command`` (argv; its first word a program name on PATH,
    or ``./name`` in the folder); ``env``: names of variables passed on to it from the
    kernel's environment (never values)."""

    model_config = ConfigDict(extra="allow")

    python: str | None = None
    command: list[str] | None = None
    env: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not _ENV_NAME.match(n)]
        if bad:
            raise ValueError(f"program.env lists variable names, not {bad[0]!r}")
        return names

    @model_validator(mode="after")
    def _one(self) -> ProgramSpec:
        if (self.python is None) == (self.command is None):
            raise ValueError("give exactly one of program.python and program.command")
        if self.command is not None and not self.command:
            raise ValueError("program.command is empty")
        return self


# -- plugins found ----------------------------------------------------------------------


@dataclass
class PluginSpec:
    """A rule plugin found on disk. ``shipped``: it comes with escouade_nb (off by
    default); ``stamp`` changes when a file of its folder changes (an update); ``env``
    the variable names its manifest passes on; ``python``: run with the kernel's Python."""

    id: str
    name: str
    version: str | None
    folder: Path
    argv: list[str] | None
    shipped: bool
    stamp: tuple
    manifest: Manifest
    error: str | None = None
    env: tuple[str, ...] = ()
    python: bool = False

    @property
    def default_on(self) -> bool:
        return not self.shipped

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment its program is started with (:func:`plugin_environment`)."""
        return plugin_environment(self.env, python=self.python, base=base)
def _folder_stamp(folder: Path) -> tuple:
    out = []
    try:
        for p in sorted(folder.iterdir()):
            if p.is_file():
                st = p.stat()
                out.append((p.name, st.st_mtime_ns, st.st_size))
    except OSError:
        pass
    return tuple(out)


def _inside(folder: Path, rel: str) -> Path:
    path = (folder / rel).resolve()
    if os.path.isabs(rel) or not path.is_relative_to(folder.resolve()):
        raise ValueError(f"{rel!r} is not a path inside the plugin folder")
    return path


def program_argv(spec: ProgramSpec, folder: Path) -> list[str]:
    """The argv of a plugin's program; ``ValueError`` when it cannot be found."""
    if spec.python is not None:
        script = _inside(folder, spec.python)
        if not script.is_file():
            raise ValueError(f"program.python: no file {spec.python} in the plugin folder")
        return [sys.executable, "-u", str(script)]
    first, *rest = spec.command or []
    if first.startswith("./"):
        exe = _inside(folder, first)
        if not exe.is_file():
            raise ValueError(f"program.command: no file {first} in the plugin folder")
        return [str(exe), *rest]
    if "/" in first or "\\" in first:
        raise ValueError("program.command: a program name on PATH, or ./name in the plugin folder, never a path")
    found = shutil.which(first)
    if not found:
        raise ValueError(f"program.command: no program named {first} on PATH")
    return [found, *rest]


def rule_plugin_spec(manifest: Manifest, manifest_path: Path) -> PluginSpec | None:
    """The :class:`PluginSpec` of a manifest that asks to decide (None otherwise); a bad
    ``program`` gives a spec with ``error`` set and no ``argv``."""
    if not (manifest.permissions and manifest.permissions.decide):
        return None
    folder = manifest_path.parent.resolve()
    argv: list[str] | None = None
    program: ProgramSpec | None = None
    error = None
    raw = (manifest.model_extra or {}).get("program")
    try:
        if raw is None:
            raise ValueError("program: field required (a rule plugin names its program)")
        program = ProgramSpec.model_validate(raw)
        argv = program_argv(program, folder)
    except ValidationError as exc:
        error = f"program: {exc.errors()[0]['msg']}"
    except ValueError as exc:
        error = str(exc)
    shipped = folder.is_relative_to(SHIPPED_PLUGINS_DIR.resolve())
    return PluginSpec(id=manifest.id, name=manifest.name, version=manifest.version, folder=folder, argv=argv,
                      shipped=shipped, stamp=_folder_stamp(folder), manifest=manifest,
                      error=f"{manifest_path}: {error}" if error else None,
                      env=tuple(program.env) if program else (), python=bool(program and program.python))


def find_rule_plugins(extra_dirs: Sequence[Path] | None = None) -> tuple[dict[str, PluginSpec], list[str]]:
    """Rule plugins among every manifest found (shipped, user, entry points, extra dirs;
    a later one with the same id wins), and the errors met."""
    d = discover(list(extra_dirs) if extra_dirs else None)
    specs: dict[str, PluginSpec] = {}
    for manifest, path in d.plugins:
        spec = rule_plugin_spec(manifest, path)
        if spec is not None:
            specs[spec.id] = spec
    errors = [str(e) for e in d.errors] + [s.error for s in specs.values() if s.error]
    return specs, errors


# -- one plugin's process -----------------------------------------------------------------

State = Literal["stopped", "starting", "ready", "backoff", "failed"]



class PluginProcess:
    """One rule plugin's program, supervised: started, restarted after a crash, stopped.

    ``call(method, params)`` sends a request and awaits its result; it raises
    :class:`PluginNotRunning` unless ``state == "ready"``, :class:`PluginCrashed` if the
    process ends first, :class:`PluginRefused` on a JSON-RPC error. Callers bound it in
    time themselves (the broker gives 500 ms)."""

    def __init__(self, spec: PluginSpec, journal: Journal) -> None:
        self.spec = spec
        self.journal = journal
        self.state: State = "stopped"
        self.pid: int | None = None
        self.starts = 0
        self.restarts = 0
        self.grace_used = False
        self.ever_ready = False
        self.garbage = 0
        self.stderr = StderrRing(16 * 1024)
        self.last_exit: int | None = None
        self.capabilities: dict[str, Any] = {}
        self._want = False
        self._task: asyncio.Task | None = None
        self._proc: Process | None = None
        self._client: LineClient | None = None
        self._ready: asyncio.Event | None = None
        self._backoff = BACKOFF_FIRST

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def alive(self) -> bool:
        """Its program runs (or is being stopped)."""
        return self._proc is not None

    def describe(self) -> str:
        if self.state == "ready":
            return f"running (pid {self.pid})"
        if self.state == "backoff":
            return f"restarting after a crash (exit {self.last_exit})"
        if self.state == "failed":
            return "failed"
        return self.state

    # -- lifecycle ----------------------------------------------------------------------
    def ensure_running(self) -> None:
        """Start the supervisor on the running loop (no-op if it runs)."""
        if self.spec.argv is None:
            self.state = "failed"
            return
        self._want = True
        if self._ready is None:
            self._ready = asyncio.Event()
        if not self.running:
            self.state = "starting"
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"rule plugin {self.id}")

    async def wait_ready(self) -> None:
        """Wait until the plugin answered ``initialize`` (bound it in time yourself);
        :class:`PluginNotRunning` if it cannot get there."""
        while True:
            if self.state == "ready":
                return
            if self.state in ("failed", "stopped") or self._ready is None:
                raise PluginNotRunning(self.describe())
            await self._ready.wait()

    def _wake(self) -> None:
        if self._ready is not None:
            self._ready.set()  # wake waiters: they see the state
            self._ready = asyncio.Event()

    async def _supervise(self) -> None:
        try:
            while self._want:
                began = time.monotonic()
                code = await self._run_once()
                if not self._want or self.state == "failed":
                    break
                if time.monotonic() - began > BACKOFF_RESET_AFTER:
                    self._backoff = BACKOFF_FIRST
                delay = self._backoff
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
                self.state = "backoff"
                self.restarts += 1
                tail = self.stderr.tail(3)
                self.journal.add(self.id, "Crash", f"exited with code {code}; restarting in {delay:g} s"
                                 + (f" (stderr: {tail.splitlines()[-1][:200]})" if tail else ""))
                await anyio.sleep(delay)
        finally:
            if self.state != "failed":
                self.state = "stopped"
            self.pid = None
            self._wake()

    async def _run_once(self) -> int | None:
        self.state = "starting"
        self.garbage = 0
        assert self.spec.argv is not None
        t0 = time.monotonic()
        try:
            proc = await spawn(self.spec.argv, cwd=self.spec.folder, env=self.spec.environment())
        except OSError as exc:
            self.journal.add(self.id, "Error", f"could not start {' '.join(self.spec.argv)}: {exc}")
            return None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        client = LineClient(proc.stdin, on_skip=self._garbage, on_close=self._not_ready)
        self._proc, self._client = proc, client
        self.pid = proc.pid
        self.starts += 1
        code: int | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, proc.stderr, self.stderr)
                tg.start_soon(client.run, proc.stdout)
                tg.start_soon(self._handshake, client, t0)
                code = await proc.wait()
                self.last_exit = code
                if self.state != "failed":
                    self.state = "backoff" if self._want else "stopped"  # not ready any more, at once
                client.close(f"the plugin exited with code {code}")
                await anyio.sleep(0.02)  # let the readers take the last bytes
                tg.cancel_scope.cancel()
        finally:
            if proc.returncode is None:  # cancelled (stopped): take the group down
                with anyio.CancelScope(shield=True):
                    await terminate_group(proc, grace=SHUTDOWN_GRACE)
            client.close("the plugin stopped")
            self._proc = self._client = None
        return code

    async def _handshake(self, client: LineClient, t0: float) -> None:
        params = InitializeParams(plugin=PluginInfo(id=self.id, version=self.spec.version,
                                                    folder=str(self.spec.folder)))
        try:
            with anyio.fail_after(START_TIMEOUT):
                raw = await client.request(INITIALIZE, params.wire())
            result = InitializeResult.model_validate(raw)
        except TimeoutError:
            self.journal.add(self.id, "Error", f"no answer to initialize within {START_TIMEOUT:g} s")
            await self._kill()
            return
        except (PluginError, ValidationError) as exc:
            self.journal.add(self.id, "Error", f"bad answer to initialize: {str(exc).splitlines()[0]}")
            await self._kill()
            return
        if result.protocol_version != PROTOCOL_VERSION:
            self.journal.add(self.id, "Error", f"speaks plugin protocol version {result.protocol_version}; "
                             f"escouade_nb speaks version {PROTOCOL_VERSION}: not used")
            self.state = "failed"
            self._want = False
            await self._kill()
            return
        self.capabilities = result.capabilities
        self.state = "ready"
        self.ever_ready = True
        ms = (time.monotonic() - t0) * 1000
        self.journal.add(self.id, "Start", f"started (pid {self.pid}, ready in {ms:.0f} ms)")
        self._wake()

    async def _kill(self) -> None:
        if self._proc is not None:
            await terminate_group(self._proc, grace=SHUTDOWN_GRACE)

    async def stop(self) -> None:
        """``shutdown``, then close stdin; the group is terminated if it lingers."""
        self._want = False
        proc, client, task = self._proc, self._client, self._task
        if proc is not None and client is not None and self.state == "ready":
            try:
                with anyio.move_on_after(SHUTDOWN_GRACE):
                    await client.request(SHUTDOWN)
            except PluginError:
                pass
            if proc.stdin is not None:
                try:
                    await proc.stdin.aclose()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
            with anyio.move_on_after(SHUTDOWN_GRACE):
                await proc.wait()
        if proc is not None and proc.returncode is None:
            await terminate_group(proc, grace=SHUTDOWN_GRACE)
        if task is not None and not task.done():
            task.cancel()
            with anyio.move_on_after(5):
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        if self.starts:
            self.journal.add(self.id, "Stop", "stopped")
        self.state = "stopped" if self.state != "failed" else "failed"

    def kill_now(self) -> None:
        """Synchronous group kill (interpreter exit: no loop to await on)."""
        self._want = False
        if self._proc is not None and self._proc.returncode is None:
            kill_group_now(self._proc.pid, grace=0.5)

    # -- messages -----------------------------------------------------------------------
    async def call(self, method: str, params: Any = None, *, encoded: bytes | None = None) -> Any:
        """The result of ``method`` (see the class's doc for the errors); ``encoded``:
        the params already encoded (:meth:`.jsonrpc.LineClient.request`)."""
        client = self._client
        if self.state != "ready" or client is None:
            raise PluginNotRunning(self.describe())
        return await client.request(method, params, encoded=encoded)

    def _not_ready(self, _reason: str) -> None:
        """The plugin's output ended (or its process did): no request may go to it."""
        if self.state == "ready":
            self.state = "backoff" if self._want else "stopped"

    def _garbage(self, line: bytes | Skipped) -> None:
        self.garbage += 1
        if self.garbage <= GARBAGE_JOURNALED:
            if isinstance(line, Skipped):
                text = f"({line.why})"
            else:
                text = line.decode("utf-8", "replace").strip()
                text = text if len(text) <= 200 else text[:200] + "…"
            more = "; further ones are not journaled" if self.garbage == GARBAGE_JOURNALED else ""
            self.journal.add(self.id, "Output", f"ignored a line that is not JSON-RPC: {text}{more}")


# -- all plugins ------------------------------------------------------------------------------


@dataclass
class PluginHost:
    """Every rule plugin of this kernel: found with :func:`find_rule_plugins`, started
    when wanted (granted and on for some project — see :class:`PluginStates`).

    A process no longer wanted (switched off, removed, replaced by an update) is stopped
    by a task the host keeps (``retiring``) until it is done: :meth:`aclose` waits for
    those, :meth:`kill_now` kills their programs too."""

    journal: Journal
    states: PluginStates
    extra_dirs: list[Path] = field(default_factory=list)
    specs: dict[str, PluginSpec] = field(default_factory=dict)
    processes: dict[str, PluginProcess] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stamp: tuple = ()
    retiring: dict[asyncio.Task, PluginProcess] = field(default_factory=dict)

    def _retire(self, proc: PluginProcess) -> None:
        """Stop ``proc`` in a task the host holds (on the running loop)."""
        if any(p is proc for p in self.retiring.values()):
            return
        task = asyncio.get_running_loop().create_task(proc.stop(), name=f"stop rule plugin {proc.id}")
        self.retiring[task] = proc
        task.add_done_callback(self._retired)

    def _retired(self, task: asyncio.Task) -> None:
        proc = self.retiring.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("stopping rule plugin %s failed", proc.id if proc else "?", exc_info=task.exception())

    def refresh(self) -> None:
        """Find the plugins again; start the ones wanted that do not run (new, switched
        back on), restart the updated ones, stop the ones no longer wanted. Needs a
        running loop to start or stop anything."""
        self.stamp = self.disk_stamp()
        specs, self.errors = find_rule_plugins(self.extra_dirs)
        try:
            asyncio.get_running_loop()
            loop_running = True
        except RuntimeError:
            loop_running = False
        for pid, proc in list(self.processes.items()):
            spec = specs.get(pid)
            if spec is None or not self.states.wanted(pid, default=spec.default_on):
                if loop_running and (proc.running or proc.state != "stopped"):
                    self._retire(proc)
                if spec is None:
                    del self.processes[pid]
                continue
            if spec.stamp != proc.spec.stamp or spec.argv != proc.spec.argv or spec.env != proc.spec.env:
                self.processes[pid] = PluginProcess(spec, self.journal)  # updated: a new process
                if loop_running:
                    self.journal.add(pid, "Stop", "updated on disk: restarting")
                    self._retire(proc)
        self.specs = specs
        for pid, spec in specs.items():
            proc = self.processes.setdefault(pid, PluginProcess(spec, self.journal))
            if loop_running and self.states.wanted(pid, default=spec.default_on) and spec.argv is not None \
                    and not proc.running and proc.state != "failed":
                proc.ensure_running()

    def disk_stamp(self) -> tuple:
        """A cheap fingerprint of the plugin folders and the settings file: it changes
        when a plugin is installed, removed or updated, or switched on or off elsewhere."""
        from ..manifest import user_plugins_dir

        roots = [SHIPPED_PLUGINS_DIR, user_plugins_dir(), *self.extra_dirs]
        out: list[tuple] = []
        for root in roots:
            try:
                with os.scandir(root) as it:
                    for e in it:
                        if e.is_dir():
                            out.append((e.path, _folder_stamp(Path(e.path))))
                        elif e.name == MANIFEST_FILENAME:
                            out.append((e.path, e.stat().st_mtime_ns))
            except OSError:
                out.append((str(root), None))
        try:
            st = Path(self.states.path).stat()
            out.append(("states", st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(("states", None))
        return tuple(out)

    def process(self, plugin: str) -> PluginProcess | None:
        return self.processes.get(plugin)

    async def aclose(self) -> None:
        """Stop every plugin, and wait for the stops already under way (those still
        running after their grace are cancelled: their groups were terminated)."""
        retiring = list(self.retiring.values())
        procs = [p for p in self.processes.values() if (p.running or p.alive) and not any(p is r for r in retiring)]
        async with anyio.create_task_group() as tg:
            for p in procs:
                tg.start_soon(p.stop)
        pending = list(self.retiring)
        if pending:
            _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE * 4 + 5)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1)

    def kill_now(self) -> None:
        """Kill every plugin's group at once (interpreter exit), retiring ones included."""
        for p in [*self.processes.values(), *self.retiring.values()]:
            try:
                p.kill_now()
            except Exception:
                log.exception("killing rule plugin %s failed", p.id)


def manifest_file(folder: Path) -> Path:
    return Path(folder) / MANIFEST_FILENAME
