"""What the launch wing needs of an agent, as Protocols: each part of the wing is given an
object with these members (the engine passes the agent's state, which has them), never the
agent's whole state (the engine's :mod:`~..interfaces` builds its own Protocols on these).
Read-only members (properties): a part reads them, it sets nothing on the agent but through
the methods declared here.

This module imports no engine module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ...core.conversation import Conversation
from ...manifest import HarnessRef

__all__ = ["Branch", "LaunchedAgent", "SandboxedAgent", "SignInAgent", "VersionedAgent"]


class Branch(Protocol):
    """An agent's git worktree as its sandbox binds it: its folder and its branch."""

    @property
    def path(self) -> Path: ...

    @property
    def branch(self) -> str: ...


class LaunchedAgent(Protocol):
    """What :func:`.launcher.agent_env` needs: its manifest and the start's environment."""

    @property
    def harness(self) -> HarnessRef: ...

    @property
    def extra_env(self) -> Mapping[str, str]: ...


class SandboxedAgent(LaunchedAgent, Protocol):
    """What :func:`.sandbox.sandboxed` needs: its folders, manifest, environment, sandbox and worktree."""

    @property
    def cwd(self) -> Path: ...

    @property
    def add_dirs(self) -> Sequence[Path]: ...

    @property
    def sandbox(self) -> Any: ...  # its :class:`.sandbox.Sandbox` (``--sandbox``), else None

    @property
    def worktree(self) -> Branch | None: ...


class SignInAgent(SandboxedAgent, Protocol):
    """An agent signing in with a terminal (:mod:`.sign_in`): its program and launcher, its
    conversation (the notices, the terminal's card), its process's token folder (``live``:
    an object with ``token_folder``, or None), and the changes the sign-in makes."""

    far_side: Any  # --sandbox --via: the far side's probe (a .far_side.FarSide), else None

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


class VersionedAgent(Protocol):
    """What :class:`.versions.ProgramVersions` needs: its name, the version its ``initialize`` gave,
    and the check against its manifest's tested range (claimed while ``--version`` is read)."""

    @property
    def name(self) -> str: ...

    @property
    def agent_info(self) -> dict[str, Any] | None: ...

    def check_version(self, version: str | None) -> None: ...

    def claim_version_check(self) -> None: ...

    def release_version_check(self) -> None: ...
