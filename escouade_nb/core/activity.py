"""What an agent is doing now, and whether it has gone quiet: the activity state machine.

Pure (no I/O, no loop): the engine feeds it the conversation's changes, the turn's start
and end and whether a card waits, and asks it at a deadline whether the agent stalled.

States (:data:`STATES`)::

    idle      no prompt turn runs
    thinking  a turn runs; the latest sign of life is a thought chunk (``agent_thought_chunk``),
              the prompt just sent, or a tool call that finished (the agent has its result)
    writing   … a reply chunk (``agent_message_chunk``)
    tool      … a tool call announced or in progress (``detail``: its title, else its kind)
    waiting   a card (permission or question) waits for the user: never stalled — the agent waits for us
    stalled   a turn runs, no card waits, and no update came for ``stall_after`` seconds

Any update of the agent counts as a sign of life (a plan, usage, a notice of the agent's, a
subagent's chunk…); the client's own changes (its notices, a message closed at a Stop) do not:
the engine feeds it the fold of the agent's updates only. ACP v2's ``state_update``
(``running`` / ``idle`` / ``requires_action``) is data: it counts as a sign of life and
is kept in :attr:`ActivityTracker.agent_says`, but it never ends our turn nor hides a card
(an agent saying ``idle`` while its ``session/prompt`` is unanswered is shown as such, in
``detail``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from .conversation import Change, Message, Notice, ToolCall

ActivityState = Literal["idle", "thinking", "writing", "tool", "waiting", "stalled"]
STATES: tuple[ActivityState, ...] = ("idle", "thinking", "writing", "tool", "waiting", "stalled")
"""Every state, in the order of the module's table."""

STALL_AFTER = 60.0
"""Seconds without an update, while a turn runs and no card waits, after which the agent is *stalled*."""

_UNFINISHED = (None, "pending", "in_progress")


def check_stall_after(value: object) -> float | None:
    """``value`` as a number of seconds (None: never stalled). ``ValueError`` for anything
    but a positive finite number or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"stall_after must be a positive number of seconds or None, not {value!r}")
    return float(value)


def seconds_text(seconds: float) -> str:
    """``74 s``, ``3 min 05 s``, ``1 h 02 min``: a quiet spell's length as shown."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass(frozen=True)
class Activity:
    """What the agent is doing now: ``state`` (one of :data:`STATES`), ``detail`` (the
    tool's title for ``tool``; for ``stalled``, how long; the agent's own word where it
    sent ACP v2's ``state_update``; else empty) and ``since``, when it entered that state
    (a timezone-aware UTC ``datetime``). ``quiet``: seconds since the agent's last update
    while a turn runs (None when none runs)."""

    state: ActivityState
    detail: str
    since: datetime
    quiet: float | None = None

    @property
    def text(self) -> str:
        """The words a view shows: ``thinking``, ``writing``, ``running a tool: Read x.py``,
        ``waiting for you``, ``idle``, ``stalled for 74 s``."""
        if self.state == "stalled":
            return f"stalled for {seconds_text(self.quiet or 0)}"
        words = {"tool": "running a tool", "waiting": "waiting for you"}.get(self.state, self.state)
        return f"{words}: {self.detail}" if self.detail else words

    def __str__(self) -> str:
        return self.text


class ActivityTracker:
    """The machine (see the module). ``clock``: monotonic seconds (the quiet spell);
    ``wall``: the UTC ``datetime`` of ``since``. ``stall_after``: seconds (None: never
    stalled). Every method is O(changes) and allocates nothing per update but what the
    state change itself needs."""

    def __init__(self, stall_after: float | None = STALL_AFTER, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.stall_after = check_stall_after(stall_after)
        self.clock, self.wall = clock, wall
        self.running = False  # a prompt turn runs (its prompt was sent)
        self.waiting = False  # a card waits for the user
        self.kernel_runs = 0  # the agent's run_code calls the kernel is running (the work is ours: never stalled)
        self.stalled = False
        self.doing: ActivityState = "thinking"  # the latest sign of life of the running turn
        self.detail = ""
        self.agent_says: str | None = None  # ACP v2 state_update's ``state``, as the agent sent it
        self.read_agent_state: Callable[[], str | None] = lambda: None  # where a state_update was folded
        self.last_update: float = clock()
        self.since = wall()
        self.shown: tuple[str, str] = ("idle", "")
        """(state, detail) as last settled: compare it before and after an input to know
        whether what a view shows changed."""

    # -- inputs ------------------------------------------------------------------------------------------
    def saw(self, changes: Iterable[Change], *, update: bool = False) -> float | None:
        """A batch of the conversation's changes; ``update``: they are the fold of one
        update of the agent (a sign of life even when they are empty: an update an adapter
        swallowed). Returns the length of the quiet spell it ended when the agent was
        stalled (seconds), else None."""
        alive = update
        doing, detail, says = self.doing, self.detail, self.agent_says
        for change in changes:
            item = change.item
            if isinstance(item, Notice) and item.origin != "agent":
                continue  # our own words are no sign of the agent's life
            alive = True
            if item is None:
                if change.name == "agent_state":
                    says = self.read_agent_state()
            elif isinstance(item, Message):
                if item.role == "thought":
                    doing, detail = "thinking", ""
                elif item.role == "agent":
                    doing, detail = "writing", ""
            elif isinstance(item, ToolCall) and item.origin is None:
                if item.status in _UNFINISHED and not item.cancelled:
                    title = item.title or item.kind or ""  # the agent's words: shown as text, cut short
                    doing, detail = "tool", title if len(title) <= 80 else title[:79] + "…"
                elif doing == "tool":
                    doing, detail = "thinking", ""  # it has the tool's result
        if not alive:
            return None
        now = self.clock()
        ended = now - self.last_update if self.stalled else None
        self.last_update = now
        # the common case (one more chunk of what it was doing) settles nothing: no allocation
        if ended is not None or doing != self.doing or detail != self.detail or says != self.agent_says:
            self.doing, self.detail, self.agent_says, self.stalled = doing, detail, says, False
            self._settle()
        return ended

    def agent_state(self, state: str | None) -> None:
        """ACP v2's ``state_update`` (``running``, ``idle``, ``requires_action``…): kept as
        the agent's word (shown in ``detail``); it moves nothing of ours."""
        self.agent_says = state
        self._settle()

    def turn_started(self) -> None:
        """The turn's prompt was sent: the quiet spell counts from now."""
        self.running, self.stalled, self.kernel_runs = True, False, 0
        self.doing, self.detail, self.agent_says = "thinking", "", None
        self.last_update = self.clock()
        self._settle()

    def turn_ended(self) -> float | None:
        """The turn ended; returns the quiet spell it ended in when stalled, else None."""
        ended = self.clock() - self.last_update if self.stalled else None
        self.running = self.stalled = False
        self.agent_says, self.kernel_runs = None, 0
        self._settle()
        return ended

    def cards(self, waiting: bool) -> None:
        """Whether a card waits for the user. An answered card restarts the quiet spell
        (the agent had nothing to say while it waited for us)."""
        if waiting == self.waiting:
            return
        self.waiting = waiting
        if not waiting:
            self.last_update = self.clock()
        else:
            self.stalled = False
        self._settle()

    def kernel_run(self, started: bool) -> None:
        """The kernel started (or ended) running code the agent asked for in a tool call it
        waits on: the kernel works, not the agent, so no quiet spell counts meanwhile; the
        spell restarts when the call is answered."""
        self.kernel_runs = self.kernel_runs + 1 if started else max(0, self.kernel_runs - 1)
        self.last_update = self.clock()
        self.stalled = False
        self._settle()

    def set_stall_after(self, seconds: object) -> None:
        """A new ``stall_after`` (see :func:`check_stall_after`); a stall it no longer
        reaches clears at the next :meth:`check`."""
        self.stall_after = check_stall_after(seconds)

    # -- the deadline ------------------------------------------------------------------------------------
    def due_in(self) -> float | None:
        """Seconds until the agent would be stalled (0 when it is, or past due); None when it
        cannot stall now (no turn, a card waits, no ``stall_after``)."""
        if not self.running or self.waiting or self.kernel_runs or self.stall_after is None:
            return None
        return max(0.0, self.last_update + self.stall_after - self.clock())

    def check(self) -> bool:
        """Whether it is stalled now (moving into or out of ``stalled``); True when the
        state shown changed."""
        due = self.due_in()
        stalled = due is not None and due <= 0
        if stalled == self.stalled:
            return False
        self.stalled = stalled
        return self._settle()

    # -- output ----------------------------------------------------------------------------------------
    @property
    def state(self) -> ActivityState:
        if not self.running:
            return "idle"
        if self.waiting:
            return "waiting"
        if self.stalled:
            return "stalled"
        return self.doing

    def _detail(self, state: ActivityState) -> str:
        if state in ("idle", "waiting", "stalled"):
            base = ""
        else:
            base = self.detail
        says = f"the agent says {self.agent_says}" if self.agent_says and self.running else ""
        return " · ".join(p for p in (base, says) if p)

    def _settle(self) -> bool:
        state = self.state
        shown = (state, self._detail(state))
        if shown == self.shown:
            return False
        if shown[0] != self.shown[0]:
            self.since = self.wall()
        self.shown = shown
        return True

    def activity(self) -> Activity:
        """The :class:`Activity` now."""
        state, detail = self.shown
        quiet = self.clock() - self.last_update if self.running else None
        if state == "stalled":
            detail = f"no update for {seconds_text(quiet or 0)}"
        return Activity(state, detail, self.since, quiet)  # type: ignore[arg-type]
