"""An agent's status: one enum, its transitions, and the named groups every layer tests.

The one place that knows a status. ``AgentStatus`` is a ``str`` enum, so a status
compares equal to its old string (``agent.status == "idle"``) and prints as one.

The machine (h11's ``_state.py`` style: a table, and a move not in it is a bug)::

    starting ─▶ idle ◀─▶ working ◀─▶ waiting          (a card waits for the user)
       │          ▲  ╲       │            │
       ▼          │   ▼      ▼            ▼
    sign-in ──────┘  exited / closed / failed ─▶ starting   (Restart)
    resumable ─▶ starting        harness missing ─▶ starting (the manifest is back)

    A Restart of a live agent goes straight to ``starting`` (the old process closes
    while it does): idle, working, waiting and sign-in may move there too.
"""

from __future__ import annotations

from enum import Enum

from .._errors import EscouadeError


class AgentStatus(str, Enum):
    """What an agent is doing. The values are the words shown (and the old strings)."""

    STARTING = "starting"
    IDLE = "idle"
    WORKING = "working"
    WAITING = "waiting"
    SIGN_IN = "sign-in"
    EXITED = "exited"
    CLOSED = "closed"
    FAILED = "failed"
    RESUMABLE = "resumable"
    HARNESS_MISSING = "harness missing"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # shown as the word it is, in lists and reprs of users' code
        return repr(self.value)

    @property
    def text(self) -> str:
        """The words a view shows for it."""
        return _TEXT[self]

    def can_go(self, to: AgentStatus) -> bool:
        """Whether ``self → to`` is a move of the machine (staying put always is)."""
        return to is self or to in TRANSITIONS[self]


S = AgentStatus

ENDED = frozenset({S.EXITED, S.CLOSED, S.FAILED})
"""No process: it exited by itself, was closed, or never started. Restart starts anew."""

NAME_FREE = ENDED | {S.HARNESS_MISSING}
"""An agent in one of these may be replaced in the squad by a new one of the same name
(``--as NAME``, ``%escouade resume NAME``, a new agent of the harness)."""

NAME_REUSED = frozenset({S.CLOSED, S.FAILED})
"""A new agent of the harness takes this agent's name without being asked: it was closed
or never started. One that exited by itself, or whose harness is missing, keeps its name
(its conversation and its exit stay in the squad to read); the new one is ``NAME-2``."""

BUSY = frozenset({S.WORKING, S.WAITING})
"""A prompt turn runs: Stop (``session/cancel``) has something to stop."""

CONTROLS_OFF = ENDED | {S.STARTING, S.HARNESS_MISSING}
"""Its modes, options and model cannot be changed now."""

CAN_SEND = frozenset(S) - ENDED - {S.HARNESS_MISSING}
"""A prompt sent now is queued and runs (after the start or the sign-in)."""

CAN_RESTART = frozenset(S) - {S.STARTING, S.HARNESS_MISSING}
"""Restart (a new process and session) is offered."""

_LIVE = {S.IDLE, S.WORKING, S.WAITING, S.SIGN_IN}
TRANSITIONS: dict[AgentStatus, frozenset[AgentStatus]] = {
    S.STARTING: frozenset({S.IDLE, S.SIGN_IN, *ENDED}),
    S.IDLE: frozenset({S.WORKING, S.WAITING, S.SIGN_IN, S.EXITED, S.CLOSED, S.STARTING}),
    S.WORKING: frozenset({S.IDLE, S.WAITING, S.SIGN_IN, S.EXITED, S.CLOSED, S.STARTING}),
    S.WAITING: frozenset({S.IDLE, S.WORKING, S.SIGN_IN, S.EXITED, S.CLOSED, S.STARTING}),
    S.SIGN_IN: frozenset({S.IDLE, S.WORKING, S.STARTING, *ENDED}),
    S.EXITED: frozenset({S.STARTING, S.CLOSED}),
    S.CLOSED: frozenset({S.STARTING}),
    S.FAILED: frozenset({S.STARTING, S.CLOSED}),
    S.RESUMABLE: frozenset({S.STARTING, S.CLOSED}),
    S.HARNESS_MISSING: frozenset({S.STARTING, S.CLOSED}),
}
"""Every allowed move (``from → {to}``)."""

_TEXT = {
    S.STARTING: "starting…", S.IDLE: "idle", S.WORKING: "working…", S.WAITING: "waiting for you",
    S.SIGN_IN: "sign in needed", S.EXITED: "exited", S.CLOSED: "closed", S.FAILED: "failed to start",
    S.RESUMABLE: "resumable", S.HARNESS_MISSING: "Harness missing",
}


class InvalidTransition(EscouadeError, RuntimeError):
    """A move the machine does not have: a bug of the client, never of the agent."""
