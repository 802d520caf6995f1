"""Launching an agent program: its own process group, a drained stderr, a group kill.

An ACP agent is a child process spoken to over stdin/stdout. We start it ourselves
rather than through the SDK's ``spawn_agent_process`` because that helper trims the
environment, never reads stderr (a chatty agent then blocks in ``write(2)``) and keeps
the child in the kernel's process group (a kernel interrupt would kill it).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 64 * 1024
"""How much of an agent's stderr is kept (bytes, the newest)."""


class StderrRing:
    """The newest ``capacity`` bytes of a byte stream, kept as whole chunks. ``watchers``:
    callables each given every chunk as it is fed (they must not raise nor block: the
    drain calls them on the loop), e.g. the ssh reverse forward's port reader."""

    def __init__(self, capacity: int = STDERR_TAIL_BYTES) -> None:
        self.capacity = capacity
        self.total = 0
        self.watchers: list[Callable[[bytes], None]] = []
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        for watch in self.watchers:
            watch(data)
        if len(data) >= self.capacity:
            self._chunks.clear()
            self._chunks.append(data[-self.capacity:])
            self._size = self.capacity
            return
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.capacity:
            first = self._chunks.popleft()
            excess = self._size - self.capacity
            if len(first) > excess:
                self._chunks.appendleft(first[excess:])
                self._size -= excess
            else:
                self._size -= len(first)

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines, decoded as UTF-8 (bad bytes replaced)."""
        text = b"".join(self._chunks).decode("utf-8", "replace")
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def agent_environment(remove: Sequence[str] = (), extra: Mapping[str, str] | None = None,
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment (or ``base``) minus ``remove`` plus ``extra`` — the
    manifest's ``acp.removeEnv`` and ``acp.env``."""
    env = dict(os.environ if base is None else base)
    for name in remove:
        env.pop(name, None)
    env.update(extra or {})
    return env


_spawn_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _spawn_gate() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    gate = _spawn_gates.get(loop)
    if gate is None:
        gate = _spawn_gates[loop] = asyncio.Lock()
    return gate


async def spawn(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], pass_fds: Sequence[int] = ()) -> Process:
    """Start ``argv`` with piped stdio in a new session (its own process group);
    ``pass_fds``: file descriptors it inherits (a sandbox's pipes to bwrap).

    The spawns of one loop take turns: each runs fork/exec, the wait for the exec and the
    start of asyncio's child-watcher thread synchronously on the loop (3–10 ms on a busy
    machine), and the agents one cell starts all reached it in the same turn of the loop
    (ten of them held it ~50 ms); in turns, the loop runs its other callbacks in between.

    Raises ``OSError`` (e.g. ``FileNotFoundError``) when the program cannot start."""
    async with _spawn_gate():
        return await anyio.open_process(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd=str(cwd), env=dict(env),
                                        start_new_session=True, pass_fds=tuple(pass_fds))


async def drain(stream, ring: StderrRing) -> None:
    """Read ``stream`` to its end into ``ring``, so the child never blocks on stderr."""
    try:
        async for chunk in stream:
            ring.feed(chunk)
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pid``; False when it is gone (or not ours).
    The one process-group signal helper (agents, terminals, plugins, updates)."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


EOF_GRACE = 2.0
"""Seconds an agent has to exit by itself once its stdin is closed (the end of an ACP
stdio session), before its process group gets SIGTERM (see :func:`terminate_group`)."""


async def terminate_group(process: Process, grace: float = 3.0, *, eof_grace: float = 0.0) -> int | None:
    """End the agent's whole process group: wait up to ``eof_grace`` seconds for the
    child to exit by itself (its stdin was closed: an agent that exits on end of input
    ends cleanly, exit code 0), then SIGTERM the group, then SIGKILL after ``grace``
    seconds. Some agents ignore stdin EOF, and launchers do not always pass signals on,
    so the group is signalled, not only the child. Returns the child's exit code."""
    if process.returncode is None and eof_grace > 0:
        with anyio.move_on_after(eof_grace):
            await process.wait()
    if process.returncode is None:
        signal_group(process.pid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            await process.wait()
    signal_group(process.pid, signal.SIGKILL)  # stragglers of the group, even after the leader left
    with anyio.move_on_after(grace):
        await process.wait()
    return process.returncode


def kill_group_now(pid: int, grace: float = 1.0) -> None:
    """Synchronous group kill, for interpreter exit (no event loop to await on):
    SIGTERM, poll up to ``grace`` seconds, then SIGKILL."""
    if not signal_group(pid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            break
        time.sleep(0.02)
    signal_group(pid, signal.SIGKILL)
