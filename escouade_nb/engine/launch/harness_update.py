"""``%escouade update NAME``: run a harness's ``updateCommand``, bounded and killable.

The manifest's ``updateCommand`` is one shell line (like its install commands). It runs
through ``/bin/sh -c`` in a process group of its own (:func:`~escouade_nb.wire.process.spawn`),
its output (stdout and stderr, in the order read) kept up to ``MAX_OUTPUT`` bytes, for at
most ``timeout`` seconds. Whatever the end — it exited, it timed out, the task running it
was cancelled — the whole group is ended (:func:`~escouade_nb.wire.process.terminate_group`),
so no installer child outlives it. The version is read afterwards in a thread, never on
the loop.

:class:`UpdateJob` is the owner of one run: it keeps the task, ``cancel()`` ends it (the
group killed), and at interpreter exit (kernel shutdown) every group still running is
killed synchronously.
"""

from __future__ import annotations

import asyncio
import atexit
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from ...manifest import HarnessRef, locate_program
from ...manifest.locate import read_version_async
from ...wire.process import kill_group_now, spawn, terminate_group

UPDATE_TIMEOUT = 600.0
"""How long an update may run (seconds) before its process group is killed."""
MAX_OUTPUT = 256 * 1024
"""How much of its output is kept (bytes, the newest)."""
PIPE_GRACE = 1.0
"""After the shell exits, how long a child still holding its output open is waited for."""
KILL_GRACE = 3.0
"""SIGTERM to SIGKILL, when the group is ended."""


@dataclass(frozen=True)
class UpdateResult:
    """How an update ended. ``code`` is the shell's exit code (None if it timed out or
    was cancelled); ``version`` the one read after it (None when unknown)."""

    code: int | None
    output: str
    version: str | None
    timed_out: float | None = None  # the timeout, when it struck
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def verdict(self) -> str:
        if self.timed_out is not None:
            return f"timed out after {self.timed_out:g} s"
        if self.cancelled:
            return "cancelled"
        return "updated" if self.code == 0 else f"failed (exit code {self.code})"


_running: set[int] = set()  # process-group ids of the updates running now
_atexit_registered = False


def running_groups() -> frozenset[int]:
    """The process-group ids of the updates running now."""
    return frozenset(_running)


def _kill_running() -> None:
    for pgid in list(_running):
        kill_group_now(pgid, grace=0.5)
    _running.clear()


def track_group(pgid: int) -> None:
    """Kill process group ``pgid`` at interpreter exit unless :func:`untrack_group` came first
    (an installer's: ``%escouade update``'s and ``%escouade install``'s)."""
    _track(pgid)


def untrack_group(pgid: int) -> None:
    """The group ended: no longer killed at exit."""
    _running.discard(pgid)


def _track(pgid: int) -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_kill_running)
        _atexit_registered = True
    _running.add(pgid)


def shell_argv(line: str) -> list[str]:
    """The argv that runs a shell line (what ``asyncio.create_subprocess_shell`` runs)."""
    return ["/bin/sh", "-c", line] if os.name == "posix" else [os.environ.get("COMSPEC", "cmd.exe"), "/c", line]


async def _read(stream, out: bytearray, done: anyio.Event, on_output: Callable[[bytes], object] | None) -> None:
    try:
        async for chunk in stream:
            out.extend(chunk)
            if len(out) > MAX_OUTPUT:
                del out[:len(out) - MAX_OUTPUT]
            if on_output is not None:
                on_output(chunk)
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        done.set()


def _update_command(ref: HarnessRef) -> str:
    """``ref``'s ``updateCommand``; ``ValueError`` saying so when its manifest gives none."""
    line = ref.harness.update_command
    if not line:
        raise ValueError(f"{ref.harness.display_name}'s manifest gives no updateCommand")
    return line


def program_to_update(ref: HarnessRef) -> str | None:
    """What ``%escouade update`` checks before it shows anything: the path of the program
    ``ref``'s ``updateCommand`` updates (its version is read before and after the run),
    ``None`` when it is not installed; ``ValueError`` when the manifest gives no
    ``updateCommand``. Looks at the file system (no process is run)."""
    _update_command(ref)
    return locate_program(ref.harness)


async def installed_version(ref: HarnessRef) -> str | None:
    """The harness program's version, read off the loop (None: not found or unknown)."""
    program = await asyncio.to_thread(locate_program, ref.harness)
    if program is None:
        return None
    return await read_version_async(program, ref.harness.version_args)


async def run_update(ref: HarnessRef, timeout: float = UPDATE_TIMEOUT, *, cwd: str | Path | None = None,
                     on_output: Callable[[bytes], object] | None = None) -> UpdateResult:
    """Run ``ref``'s ``updateCommand`` (``ValueError`` if it has none) in ``cwd`` (the
    current folder by default) and return how it ended. ``on_output(chunk)`` sees the
    output as it is read. On timeout the result says so; on cancellation the group is
    killed, then the cancellation goes on. ``OSError`` if the shell cannot start."""
    line = _update_command(ref)
    process = await spawn(shell_argv(line), cwd=Path(cwd or Path.cwd()), env=os.environ)
    _track(process.pid)
    out = bytearray()
    timed_out = None
    try:
        if process.stdin is not None:
            await process.stdin.aclose()  # nothing to answer: a prompt reads end of file
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                out_done, err_done = anyio.Event(), anyio.Event()
                tg.start_soon(_read, process.stdout, out, out_done, on_output)
                tg.start_soon(_read, process.stderr, out, err_done, on_output)
                await process.wait()
                with anyio.move_on_after(PIPE_GRACE):  # a child may still hold the pipes
                    await out_done.wait()
                    await err_done.wait()
                tg.cancel_scope.cancel()
        if scope.cancelled_caught:
            timed_out = timeout
    finally:
        with anyio.CancelScope(shield=True):
            await terminate_group(process, KILL_GRACE)  # the group's stragglers too, whatever the end
            _running.discard(process.pid)
    version = await installed_version(ref)
    return UpdateResult(code=None if timed_out is not None else process.returncode,
                        output=out.decode("utf-8", "replace"), version=version, timed_out=timed_out)


class UpdateJob:
    """One run of :func:`run_update`, owned: ``task`` runs it on the loop that made the
    job, ``cancel()`` ends it (its process group killed), ``output`` is what it wrote so
    far, ``result`` its :class:`UpdateResult` once done (a cancelled run gives
    ``cancelled=True``; one that could not start, ``code`` None and the error as output).
    Every job running is kept by the module until it ends (its task is never dropped)."""

    def __init__(self, ref: HarnessRef, timeout: float = UPDATE_TIMEOUT, *, cwd: str | Path | None = None) -> None:
        self.ref = ref
        self.timeout = timeout
        self.cwd = cwd
        self.result: UpdateResult | None = None
        self._output = bytearray()
        self._scope = anyio.CancelScope()
        self.task: asyncio.Task = asyncio.get_running_loop().create_task(self._main())
        _jobs.add(self)
        self.task.add_done_callback(lambda _t: _jobs.discard(self))

    async def _main(self) -> UpdateResult:
        try:
            with self._scope:
                try:
                    self.result = await run_update(self.ref, self.timeout, cwd=self.cwd, on_output=self._keep)
                except OSError as exc:
                    self.result = UpdateResult(code=None, output=f"could not start the shell: {exc}", version=None)
        finally:
            if self.result is None:  # cancelled: by cancel(), or the task itself (a loop shutting down)
                self.result = UpdateResult(code=None, output=self.output, version=None, cancelled=True)
        return self.result

    def _keep(self, chunk: bytes) -> None:
        self._output.extend(chunk)
        if len(self._output) > MAX_OUTPUT:
            del self._output[:len(self._output) - MAX_OUTPUT]

    @property
    def output(self) -> str:
        """The output read so far (stdout and stderr, the newest ``MAX_OUTPUT`` bytes)."""
        return self._output.decode("utf-8", "replace")

    @property
    def done(self) -> bool:
        return self.task.done()

    def cancel(self) -> None:
        """End the run: its process group is killed, ``result`` says cancelled."""
        self._scope.cancel()

    def add_done_callback(self, fn) -> None:
        """Call ``fn(job)`` on the loop once the run has ended."""
        self.task.add_done_callback(lambda _t: fn(self))

    def __await__(self):
        return self.task.__await__()


_jobs: set[UpdateJob] = set()
