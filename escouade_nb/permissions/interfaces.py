"""What the permissions layer needs of the engine, as ``typing.Protocol``s (the ACP SDK's
``interfaces.py`` style): the broker is typed against these, never against the engine's
classes, and never probes with ``getattr``.

The engine's ``PermissionCard`` and ``Agent`` satisfy them structurally (no
inheritance); so does any stand-in of the tests. Read-only properties here are satisfied
by plain attributes too. Both are ``runtime_checkable``: ``isinstance`` checks that the
members exist (not their types).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from ..core.conversation import Permission
from ..manifest.discovery import HarnessRef
from ..manifest.project import Project

__all__ = ["PermissionAgent", "PermissionRequest"]


@runtime_checkable
class PermissionAgent(Protocol):
    """The agent that asks: its ``name`` (as the squad knows it), its working folder
    ``cwd``, its ``project`` (None: the project of ``cwd``, not private) and its
    ``harness`` (None for an agent without a manifest; its ``harness.acp.tools`` maps
    the agent's tool names to Claude Code's)."""

    @property
    def name(self) -> str: ...

    @property
    def cwd(self) -> Path: ...

    @property
    def project(self) -> Project | None: ...

    @property
    def harness(self) -> HarnessRef | None: ...


@runtime_checkable
class PermissionRequest(Protocol):
    """A permission request waiting for an answer (a card): the conversation's
    ``permission`` (``request`` — what was asked, frozen: decide on it — ``tool_call``,
    ``options`` — the agent's own ``{optionId, name, kind}`` — ``state``, ``answered_by``),
    the ``agent`` that asks, and ``choose``.

    ``choose(option, by, message, reply)`` answers with ``option`` (an ``optionId`` or an
    option kind); ``by`` and ``message`` are what the card shows ("Denied by Team rules
    via Escouade — no rm -rf here"), ``reply`` what the agent is told (else ``message``).
    It returns False when the request was already answered (the first answer wins) and
    raises ``ValueError`` for an option the agent did not offer. ``deny(by, message,
    reply)`` refuses whatever the agent offered (see :meth:`deny`)."""

    @property
    def agent(self) -> PermissionAgent: ...

    @property
    def permission(self) -> Permission: ...

    def choose(self, option: str, by: str = "you", message: str | None = None,
               reply: str | None = None) -> bool: ...

    def deny(self, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        """Refuse: the agent's ``reject_once`` option, else (it offered none) the
        ``cancelled`` outcome; the card says "Denied by ``by`` — ``message``". False when
        already answered."""
        ...
