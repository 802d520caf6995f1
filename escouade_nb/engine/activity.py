"""An agent's activity (``agent.activity``) and its stall timer: :class:`ActivityWatch`.

The machine is :class:`~..core.activity.ActivityTracker` (pure); this part feeds it every
update of the agent (from :class:`~.live.Live`'s fold: the client's own changes are no sign
of the agent's life), its turns and its cards, and owns the one timer task of the agent: it
sleeps until the agent would be stalled (an update only moves a float: the task wakes at
the old deadline and sleeps the rest), and while stalled redraws the views every few
seconds (the count, "stalled for 74 s"). No turn, or a card waiting for the user: no task.

The record: when a stall ends — the agent sends something again, or the turn ends (Stop)
— the conversation says how long it was quiet, in a notice ("No update from the agent for
1 min 14 s (stalled), then it sent an update" / "…, when the turn ended"): a notice is in
the transcript, so the saved form, a resume and an export keep it. Each is said when the turn
ends, in the order they happened (a notice in the middle would cut the reply the agent was
streaming in two); the live word
"stalled", like "working…", is a state and is not kept. Why a notice: a stall is what the
user could not see in the record otherwise (the chunks' times are there, but a silence of a
minute between two of them reads like any other), and it says only what we saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from ..core.activity import STALL_AFTER, Activity, ActivityTracker, seconds_text
from ..core.conversation import Change, Conversation


class Watched(Protocol):
    """What the watch needs of its agent: its name, its conversation, and the status
    observers' nudge (:meth:`~.state.AgentState.notify_status`)."""

    name: str
    conversation: Conversation

    def notify_status(self) -> None: ...

TICK = 5.0
"""Seconds between two redraws of a stall's count (shorter for a short ``stall_after``)."""


class ActivityWatch:
    """The activity of one agent (see the module); ``close()`` cancels its timer."""

    def __init__(self, agent: Watched, stall_after: float | None = STALL_AFTER) -> None:
        self.agent = agent
        self.tracker = ActivityTracker(stall_after)
        self.tracker.read_agent_state = lambda: agent.conversation.agent_state
        self._timer: asyncio.Task | None = None
        self._ended: list[float] = []  # quiet spells an update ended in this turn, said when it ends

    # -- inputs ----------------------------------------------------------------------------------------
    def saw(self, changes: Iterable[Change]) -> None:
        """The changes one update of the agent made (its session's or a subagent's; none
        when an adapter swallowed it): a sign of life, and what it does."""
        tracker = self.tracker
        before = tracker.shown
        ended = tracker.saw(changes, update=True)
        if ended is not None:  # said when the turn ends: a notice now would cut the reply it streams in two
            self._ended.append(ended)
        if tracker.shown != before:
            self.agent.notify_status()

    def turn_started(self) -> None:
        self.tracker.turn_started()
        self.agent.notify_status()
        self._arm()

    def turn_ended(self) -> None:
        ended = self.tracker.turn_ended()
        self._disarm()
        spells, self._ended = self._ended, []
        for seconds in spells:
            self._quiet_ended(seconds, "then it sent an update")
        if ended is not None:
            self._quiet_ended(ended, "when the turn ended")

    def cards(self, waiting: bool) -> None:
        before = self.tracker.shown
        self.tracker.cards(waiting)
        if waiting:
            self._disarm()  # never stalled while it waits for us: no deadline
        else:
            self._arm()
        if self.tracker.shown != before:
            self.agent.notify_status()

    def kernel_run(self, started: bool) -> None:
        """The kernel runs (or ended running) the agent's ``run_code``: never stalled meanwhile."""
        before = self.tracker.shown
        self.tracker.kernel_run(started)
        if started:
            self._disarm()
        else:
            self._arm()
        if self.tracker.shown != before:
            self.agent.notify_status()

    @property
    def stall_after(self) -> float | None:
        return self.tracker.stall_after

    @stall_after.setter
    def stall_after(self, seconds: float | None) -> None:
        self.tracker.set_stall_after(seconds)
        self._disarm()  # the deadline moved: a new sleep
        if self.tracker.check():
            self.agent.notify_status()
        self._arm()

    def activity(self) -> Activity:
        return self.tracker.activity()

    def close(self) -> None:
        self._disarm()

    # -- the timer -------------------------------------------------------------------------------------
    def _arm(self) -> None:
        if self.tracker.due_in() is None or (self._timer is not None and not self._timer.done()):
            return
        self._timer = asyncio.get_running_loop().create_task(self._watch(),
                                                             name=f"escouade activity of {self.agent.name}")

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _watch(self) -> None:
        tracker = self.tracker
        while (due := tracker.due_in()) is not None:
            if due > 0:
                await asyncio.sleep(due)
                continue
            tracker.check()
            self.agent.notify_status()  # stalled now, or its count grew
            await asyncio.sleep(max(1.0, min(TICK, (tracker.stall_after or TICK) / 2)))
        if tracker.check():  # a card came (never stalled while it waits) or the turn ended
            self.agent.notify_status()

    def _quiet_ended(self, seconds: float, how: str) -> None:
        self.agent.conversation.add_notice(
            f"No update from the agent for {seconds_text(seconds)} (stalled), {how}", level="warning")
