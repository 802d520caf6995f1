"""What the launch wing needs of an agent, as Protocols: each part of :mod:`.` is given an
object with these members (the engine passes the agent's state, which has them), never the
agent's whole handle (:class:`~..interfaces.AgentHandle`). Read-only members (properties):
a part reads them, it sets nothing on the agent but through the methods declared here.

This module imports no engine module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ...core.conversation import Conversation
from ...manifest import HarnessRef

__all__ = ["Branch", "Launched", "SigningIn", "VersionChecked"]


class Branch(Protocol):
    """An agent's git worktree as its sandbox binds it: its folder and its branch."""

    @property
    def path(self) -> Path: ...

    @property
    def branch(self) -> str: ...


class Launched(Protocol):
    """What an agent's process needs to be started: its environment (:func:`.launcher.agent_env`)
    and its sandbox's binds (:func:`.sandbox.sandboxed`)."""

    @property
    def harness(self) -> HarnessRef: ...

    @property
    def extra_env(self) -> Mapping[str, str]: ...

    @property
    def cwd(self) -> Path: ...

    @property
    def add_dirs(self) -> Sequence[Path]: ...

    @property
    def sandbox(self) -> Any: ...  # its :class:`.sandbox.Sandbox` (``--sandbox``), else None

    @property
    def worktree(self) -> Branch | None: ...


class SigningIn(Launched, Protocol):
    """An agent signing in with a terminal (:mod:`.sign_in`): its program and launcher, its
    conversation (the notices, the terminal's card), its process's token folder (``live``:
    an object with ``token_folder``, or None), and the changes the sign-in makes."""

    @property
    def name(self) -> str: ...

    @property
    def program(self) -> str: ...

    @property
    def via(self) -> Sequence[str]: ...

    @property
    def conversation(self) -> Conversation: ...

    @property
    def live(self) -> Any: ...

    def sign_in_started(self, job: Any) -> None: ...

    def sign_in_ended(self) -> None: ...

    def take_auth_prompt(self) -> list[dict[str, Any]] | None: ...

    async def restart(self) -> Any: ...

    def retry_after_sign_in(self, prompt: list[dict[str, Any]]) -> None: ...


class VersionChecked(Protocol):
    """An agent whose program's version is checked against its manifest's tested range
    (:class:`.versions.ProgramVersions`): its name, the version its ``initialize`` gave, and
    the check (claimed while ``--version`` is read)."""

    @property
    def name(self) -> str: ...

    @property
    def agent_info(self) -> dict[str, Any] | None: ...

    def check_version(self, version: str | None) -> None: ...

    def claim_version_check(self) -> None: ...

    def release_version_check(self) -> None: ...
