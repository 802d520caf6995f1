"""The harness programs' versions, for the squad: each program file's ``--version``
(the manifest's ``versionArgs``) read once, without blocking the loop, and an agent's
version compared with its manifest's ``tested`` range when it starts.

A program file is its path, its ``versionArgs``, its size and modification time:
starting fifty agents of one harness runs ``--version`` once, and a program updated in
place is read again. The reads run as tasks of their owner's (the squad's
:meth:`~.squad.Squad._own`: cancelled by its ``aclose()`` and at exit).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

from ..manifest import read_version
from ..manifest.locate import read_version_async
from .interfaces import VersionedAgent

__all__ = ["ProgramVersions"]

Owner = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]


class ProgramVersions:
    """The versions read so far, by program file, and the reads in flight (``reads``);
    ``own(coro, name)`` runs a read as a task of the owner's."""

    def __init__(self, own: Owner) -> None:
        self._read: dict[tuple, str | None] = {}  # (program, args, mtime, size) -> version read
        self.reads: dict[tuple, asyncio.Task] = {}  # the same key -> its read in flight
        self._own = own

    @staticmethod
    def _key(program: str | None, version_args: list[str]) -> tuple | None:
        if program is None:
            return None
        try:
            stat = os.stat(program)
        except OSError:
            return None
        return (program, tuple(version_args), stat.st_mtime_ns, stat.st_size)

    def known(self, program: str, version_args: list[str]) -> tuple[bool, str | None]:
        """(True, version) when this program file's version was read already, else (False, None)."""
        key = self._key(program, version_args)
        if key is not None and key in self._read:
            return True, self._read[key]
        return False, None

    async def version_of(self, program: str | None, version_args: list[str]) -> str | None:
        """The program's version, read once per program file without blocking the loop;
        callers asking while it is read share that one read (one caller cancelled does
        not cancel the others'). ``None`` when it has no readable version (or no program)."""
        key = self._key(program, version_args)
        if key is None or program is None:
            return None  # no such file (any more)
        if key in self._read:
            return self._read[key]
        task = self.reads.get(key)
        if task is None:
            task = self.reads[key] = self._own(read_version_async(program, version_args),
                                               f"escouade --version of {program}")

            def done(t: asyncio.Task, key: tuple = key) -> None:
                self.reads.pop(key, None)
                if not t.cancelled() and t.exception() is None:
                    self._read[key] = t.result()
            task.add_done_callback(done)
        return await asyncio.shield(task)

    def read_soon(self, program: str, version_args: list[str], then: Callable[[str | None], None]) -> None:
        """Call ``then(version)`` with :meth:`version_of` — at once when it was read
        already, else once read (a task of the owner's)."""
        known, version = self.known(program, version_args)
        if known:
            then(version)
            return

        async def read() -> None:
            then(await self.version_of(program, version_args))
        self._own(read(), f"escouade --version of {program}")

    def now(self, program: str | None, version_args: list[str]) -> str | None:
        """:meth:`version_of` for code without a loop (it blocks while ``--version``
        runs): the same cache."""
        key = self._key(program, version_args)
        if key is None or program is None:
            return None
        if key not in self._read:
            self._read[key] = read_version(program, version_args)
        return self._read[key]

    def check_at_start(self, agent: VersionedAgent, program: str, version_args: list[str]) -> None:
        """Compare the version of ``agent``'s program with its manifest's ``tested``
        range (:meth:`~.state.AgentState.check_version`): at once when it was read
        already, else once read (a task of the owner's; the check is claimed meanwhile,
        see :meth:`_check_later`)."""
        known, version = self.known(program, version_args)
        if known:
            agent.check_version(version)
            return
        agent.claim_version_check()
        self._own(self._check_later(agent, program, version_args), f"escouade version check of {agent.name}")

    async def _check_later(self, agent: VersionedAgent, program: str, version_args: list[str]) -> None:
        """The program's ``--version`` is what counts; the version the agent gives in
        ``initialize`` only when it has none. While it is read the check is claimed, so
        the agent's own check (at ``initialize``) leaves it to this; if it gives no
        version, the one ``initialize`` gave meanwhile is compared here, or, if that has
        not come yet, the agent compares it itself when it comes."""
        version = None
        try:
            version = await self.version_of(program, version_args)
        finally:
            agent.release_version_check()
            if version is None:
                version = (agent.agent_info or {}).get("version")
            agent.check_version(version)
