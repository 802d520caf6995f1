"""Budgets: what an agent (or a squad) may spend before it pauses on a card.

``agent.set_budget(tokens=None, cost=None, seconds=None)`` and ``squad.set_budget(...)``
(the sum over the squad's running agents) count from the moment they are set:

``tokens``
    tokens spent, as the agent reports them at the end of each prompt turn (the
    ``usage.totalTokens`` of ACP's ``PromptResponse``, taken as the turn's own). Never
    ``usage_update.used``: that is the context's size, which drops after a compaction.
``cost``
    the growth of the cost the agent reports (``usage_update.cost.amount``, cumulative
    for its session): each rise counts; a lower amount is a new session (a restart),
    which counts from zero.
``seconds``
    wall time of prompt turns (from sending the prompt to its answer), a running turn's
    too: a timer passes the limit while the turn runs.

Tokens and cost count **only what the agent reports**: an agent that reports no usage
never reaches them. Once a turn has ended without the agent having reported that kind,
the budget's text says so (``tokens: not reported by this agent``, :data:`UNREPORTED`) and
its item has ``"reported": False``; ``seconds`` is the budget the kernel measures itself.

When one is passed the agent pauses on a **budget card**: a permission card of the
client (never sent to rule plugins nor to the mode: no policy answers it) whose text
says "budget", with two options, ``continue`` (re-arms that budget by the same amount,
counted from what is spent now) and ``stop`` (cancels the running turn — or, raised with no
turn running, sends nothing: the card says which; the budget stays spent, so the next prompt
asks again). The prompts waiting behind the card are named on it ("Held behind this card: …",
:data:`HELD`), live, in its saved form and on record. ``await agent.next_permission()`` hands it
out like any card. While it waits the running turn goes on streaming, but no other
permission card is decided (they wait behind it) and no queued prompt is sent. It is on
record in the transcript (``budget`` events: :mod:`..wire.transcript` replays them), so
``%escouade resume`` shows it as it was answered; each answer is also an ``Answer`` line of the
squad's journal under ``budget`` (``%escouade journal budget``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.conversation import Change, ToolCall, frozen_request
from ..core.status import ENDED
from ..wire.transcript import BUDGET_EVENT, BUDGET_ORIGIN
from .kernel_record import journal_of

if TYPE_CHECKING:
    from .cards import PermissionCard
    from .interfaces import BudgetedAgent

KINDS = ("tokens", "cost", "seconds")
"""The budgets' kinds, in the order their words are said."""
CONTINUE, STOP = "continue", "stop"
"""The budget card's option ids, exactly."""
CARD_PREFIX = "escouade-budget-"
"""The start of the budget card's tool call ids (``escouade-budget-N``): a name for the record only.
That a card is the budget's is known from who made it (``ToolCall.origin == ORIGIN``), never from
this id: an agent may send any id, this one too, and its request stays the agent's."""
ORIGIN = BUDGET_ORIGIN
"""The budget card's :attr:`~..core.conversation.ToolCall.origin`."""
JOURNAL_ID = "budget"
"""The journal's name for the budget cards' answers (a file ``budget.jsonl`` beside the rule plugins')."""
HELD = "Held behind this card: "
"""How the budget card's last line names the prompts waiting behind it (each quoted)."""
HELD_CHARS = 80
"""A held prompt is named on the card cut to this many characters."""
UNREPORTED = "not reported by this agent"
"""How a budget's text names a kind the agent has not reported after a turn (tokens, cost)."""
_serial = itertools.count(1)


@dataclass
class Spend:
    """Amounts spent: ``tokens`` (int), ``cost`` (float, in the agent's currency),
    ``seconds`` (float)."""

    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0

    def of(self, kind: str) -> float:
        return float(dataclasses.asdict(self)[kind])

    def minus(self, other: Spend) -> Spend:
        return Spend(self.tokens - other.tokens, self.cost - other.cost, self.seconds - other.seconds)

    def plus(self, other: Spend) -> Spend:
        return Spend(self.tokens + other.tokens, self.cost + other.cost, self.seconds + other.seconds)


def _limits(tokens: float | None, cost: float | None, seconds: float | None) -> dict[str, float]:
    """The limits given, checked: ``ValueError`` for one not a positive number."""
    out: dict[str, float] = {}
    for kind, value in zip(KINDS, (tokens, cost, seconds), strict=True):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"set_budget: {kind} must be a positive number or None, not {value!r}")
        out[kind] = float(value)
    return out


def amount_text(kind: str, value: float, currency: str = "") -> str:
    """``1,250 tokens``, ``0.62 USD``, ``31 s``: one amount in words."""
    if kind == "tokens":
        return f"{int(value):,} tokens"
    if kind == "cost":
        return f"{value:.2f}{' ' + currency if currency else ''}"
    return f"{value:.0f} s"


class Meter:
    """What one agent has spent since it was made (cumulative): tokens reported at each
    turn's end, the growth of its reported cost, the wall time of its turns (the running
    one's up to now). Budgets keep a baseline of it and count the difference."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.tokens = 0
        self.cost = 0.0
        self.currency = ""
        self.done_seconds = 0.0
        self.running_since: float | None = None
        self._last_cost: float | None = None
        self.turns = 0  # turns ended
        self.reported: set[str] = set()  # the kinds the agent has reported at least once ("tokens", "cost")

    def unreported(self) -> set[str]:
        """Tokens and cost the agent has not reported after a turn ended: a budget of them never passes."""
        return {"tokens", "cost"} - self.reported if self.turns else set()

    def spent(self) -> Spend:
        running = self.clock() - self.running_since if self.running_since is not None else 0.0
        return Spend(self.tokens, self.cost, self.done_seconds + running)

    def cost_reported(self, amount: float, currency: str) -> bool:
        """A ``usage_update`` said the session's cost is ``amount``; True when it grew."""
        last, self._last_cost = self._last_cost, amount
        self.reported.add("cost")
        self.currency = currency or self.currency
        grown = amount if last is None or amount < last else amount - last
        self.cost += grown
        return grown > 0

    def new_session(self) -> None:
        """A new process (a restart): its session's cost counts from zero."""
        self._last_cost = None


@dataclass
class Limits:
    """One budget: its ``limits`` by kind, the amounts it was set (or last re-armed) by
    (``amounts``), and the spend it counts from (``base``)."""

    limits: dict[str, float]
    amounts: dict[str, float]
    base: Any = field(default_factory=Spend)

    def over(self, spent: Spend) -> list[str]:
        """The kinds whose limit ``spent`` (counted from the base) has reached."""
        return [k for k, v in self.limits.items() if spent.of(k) >= v]

    def rearm(self, kinds: Iterable[str], spent: Spend) -> None:
        """Give each of ``kinds`` its amount more, from ``spent``."""
        for kind in kinds:
            self.limits[kind] = spent.of(kind) + self.amounts[kind]


def describe(limits: Limits | None, spent: Spend, currency: str,
             unreported: set[str] | frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """A budget as the views show it: ``{"text": "1,250 of 10,000 tokens · 0.12 of 1.00 USD",
    "over": [kinds], "items": [{kind, spent, limit, reported}]}``, None without one.
    ``unreported``: kinds the agent has not reported after a turn (said ``tokens: not
    reported by this agent (limit 10,000 tokens)``: that budget never passes)."""
    if limits is None or not limits.limits:
        return None
    items = [{"kind": k, "spent": spent.of(k), "limit": v, "reported": k not in unreported}
             for k, v in limits.limits.items()]
    words = [f"{k}: {UNREPORTED} (limit {amount_text(k, v, currency)})" if k in unreported
             else f"{_num(k, spent.of(k))} of {amount_text(k, v, currency)}" for k, v in limits.limits.items()]
    return {"text": " · ".join(words), "over": limits.over(spent), "items": items}


def _num(kind: str, value: float) -> str:
    return f"{int(value):,}" if kind == "tokens" else f"{value:.2f}" if kind == "cost" else f"{value:.0f}"


class AgentBudget:
    """One agent's budget and meter (``agent.budget``): ``set(tokens, cost, seconds)``,
    ``spent`` (a :class:`Spend` since it was set), ``limits`` (kind -> limit), ``card``
    (the budget card waiting, else None). The squad's budget, when its squad has one,
    is checked with it (``squad``: the squad's :class:`SquadBudget`)."""

    def __init__(self, state: BudgetedAgent) -> None:
        self.state = state
        self.meter = Meter(time.monotonic)
        self.own: Limits | None = None
        self.card: PermissionCard | None = None
        self.card_scope: str | None = None
        self._released: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._live: Any = None
        self._stopped = False  # answered stop: asked again before the next prompt only
        state.conversation.subscribe(self._changed, chunks=False)  # usage only

    # -- what the user sets and reads -------------------------------------------------------------
    def set(self, tokens: float | None = None, cost: float | None = None,
            seconds: float | None = None) -> AgentBudget:
        """Set (or, with all None, clear) the agent's budget, counted from now."""
        limits = _limits(tokens, cost, seconds)
        self.own = Limits(dict(limits), dict(limits), self.meter.spent()) if limits else None
        self._arm_timer()
        self.state.notify_status()
        return self

    @property
    def limits(self) -> dict[str, float]:
        return dict(self.own.limits) if self.own is not None else {}

    @property
    def spent(self) -> Spend:
        """What was spent since the budget was set (zeros without one)."""
        return self.meter.spent().minus(self.own.base) if self.own is not None else Spend()

    @property
    def squad(self) -> SquadBudget | None:
        budget = self.state.forker.budget if self.state.forker is not None else None
        return budget if isinstance(budget, SquadBudget) and budget.own is not None else None

    def view(self) -> dict[str, Any] | None:
        """What the head shows: :func:`describe` of its own budget (None without one); a kind
        the agent has not reported after a turn is said so."""
        return describe(self.own, self.spent, self.meter.currency, self.meter.unreported())

    def __repr__(self) -> str:
        shown = self.view()
        return f"<budget of {self.state.name}: {shown['text'] if shown else 'none'}>"

    # -- what the engine tells it -------------------------------------------------------------
    def turn_started(self) -> None:
        self.meter.running_since = self.meter.clock()
        self._arm_timer()

    def turn_ended(self, tokens: int | None) -> None:
        """A turn ended; ``tokens``: the total its answer reported (None: not reported)."""
        meter = self.meter
        if meter.running_since is not None:
            meter.done_seconds += meter.clock() - meter.running_since
            meter.running_since = None
        meter.turns += 1
        if tokens is not None:
            meter.reported.add("tokens")
        if tokens:
            meter.tokens += int(tokens)
        self._cancel_timer()
        self.check()

    def _changed(self, changes: list[Change]) -> None:
        for change in changes:
            if change.kind == "state" and change.name == "usage":
                live = self.state.live
                if live is not self._live:
                    self._live = live
                    self.meter.new_session()
                cost = (self.state.conversation.usage or {}).get("cost") or {}
                amount = cost.get("amount") if isinstance(cost, dict) else None
                if isinstance(amount, (int, float)) and not isinstance(amount, bool) \
                        and self.meter.cost_reported(float(amount), str(cost.get("currency") or "")):
                    self.check()

    # -- passing ---------------------------------------------------------------------------------
    def passed(self) -> tuple[str, list[str]] | None:
        """``("agent", kinds)`` or ``("squad", kinds)`` when a budget is spent, else None."""
        if self.own is not None:
            over = self.own.over(self.spent)
            if over:
                return "agent", over
        squad = self.squad
        if squad is not None and self.state.status not in ENDED:
            over = squad.over()
            if over:
                return "squad", over
        return None

    def check(self, *, prompt: bool = False) -> PermissionCard | None:
        """Raise the budget card if a budget is spent and none waits (needs a session).
        After a ``stop`` it is raised again only before the next prompt (``prompt``)."""
        if self.card is not None or self.state.live is None or self.state.live.desk.closed:
            return self.card
        if self._stopped and not prompt:
            return None
        self._stopped = False
        found = self.passed()
        if found is None:
            if self.state.turns.current is not None:
                self._arm_timer()
            return None
        scope, kinds = found
        return self._raise(scope, kinds)

    def _raise(self, scope: str, kinds: list[str]) -> PermissionCard:
        squad = self.squad if scope == "squad" else None
        limits = squad.own if squad is not None else self.own
        spent = squad.spent() if squad is not None else self.spent
        assert limits is not None
        currency = self.meter.currency
        said = ", ".join(f"{_num(k, spent.of(k))} of {amount_text(k, limits.limits[k], currency)}" for k in kinds)
        whose = "the squad's budget" if scope == "squad" else "its budget"
        title = f"Budget reached: {said} ({whose})"
        again = ", ".join(amount_text(k, limits.amounts[k], currency) for k in kinds)
        current = self.state.turns.current
        if current is not None and not current.done:  # Stop has a turn to cancel
            text = (f"{self.state.name} has spent {whose} ({said}). While this card waits the turn goes on, but no "
                    f"permission is granted and no prompt is sent. Continue gives another {again}; Stop cancels "
                    f"the running turn.")
            stop = "Stop the turn"
        else:  # no turn runs: Stop cancels nothing, it sends nothing
            text = (f"{self.state.name} has spent {whose} ({said}). No turn is running; while this card waits no "
                    f"prompt is sent. Continue gives another {again} and sends what waits; Stop sends nothing: the "
                    f"prompt held is not sent, and the next prompt asks again.")
            stop = "Stop (send nothing)"
        options = [{"optionId": CONTINUE, "name": f"Continue (another {again})", "kind": "allow_once"},
                   {"optionId": STOP, "name": stop, "kind": "reject_once"}]
        call_id = f"{CARD_PREFIX}{next(_serial)}"
        content: list[dict[str, Any]] = [{"type": "content", "content": {"type": "text", "text": text}}]
        wire = {"toolCallId": call_id, "title": title, "kind": "other", "status": "pending", "content": content}
        request = frozen_request(ToolCall("", tool_call_id=call_id, title=title, kind="other", content=list(content),
                                          origin=ORIGIN))
        transcript = self.state.transcript
        if transcript is not None:  # before the card: its answer line (record.py) settles it on replay
            transcript.event(BUDGET_EVENT, phase="card", call=call_id, title=title, text=text, options=options,
                             scope=scope, kinds=kinds)
        desk = self.state.live.desk
        card = desk.new_card(wire, options, request=request, origin=ORIGIN)
        self.card, self.card_scope = card, scope
        self._released = asyncio.Event()
        card.on_answer(lambda: self._answered(card, kinds))
        if squad is not None:
            squad.waiting.add(self)
        self.state.cards_waiting()  # no policy is asked: the user answers it
        return card

    def _answered(self, card: PermissionCard, kinds: list[str]) -> None:
        scope = self.card_scope
        self.card = self.card_scope = None
        chosen = card.permission.option_id if card.permission.state == "selected" else None
        status = "completed" if chosen == CONTINUE else "failed"
        call = card.permission.tool_call
        call_id = call.tool_call_id if call is not None else ""
        if call is not None:  # our own call, held: no id is looked up (an agent's call of that id is not it)
            self.state.conversation.set_status(call, status)
        transcript = self.state.transcript
        if transcript is not None:
            transcript.event(BUDGET_EVENT, phase="end", call=call_id, status=status)
        journal = journal_of(self.state)
        if journal is not None:  # beside the kernel tools' answers: who let the agent spend more, or stopped it
            perm = card.permission
            verdict = "allowed" if chosen == CONTINUE else "refused" if chosen == STOP else "cancelled"
            journal.add(JOURNAL_ID, "Answer", verdict=verdict, tool="budget",
                        target=perm.tool_call.title if perm.tool_call is not None else None,
                        by=perm.answered_by if chosen else None, message=perm.message, request_id=call_id,
                        agent=self.state.name,
                        project=self.state.project.name if self.state.project is not None else None)
        squad = self.squad if scope == "squad" else None
        if squad is not None:
            squad.waiting.discard(self)
        if chosen == CONTINUE:
            if squad is not None:
                squad.rearm(kinds)
            elif self.own is not None:
                self.own.rearm(kinds, self.spent)
            self.state.notify_status()
        else:  # stop (or the card cancelled: the turn was stopped, the agent closed): asked again at a prompt
            self._stopped = True
        if chosen == STOP:
            self.state.cancel()
        if self._released is not None:
            self._released.set()
        self._arm_timer()

    async def hold(self) -> bool:
        """Before a prompt is sent: wait while a budget card waits (raising one first when a
        budget is spent; the prompts queued are named on it). False when it was answered
        ``stop`` or cancelled: not sent."""
        card = self.check(prompt=True)
        if card is None:
            return True
        self.show_held()
        await card.wait()
        return card.permission.option_id == CONTINUE and card.permission.state == "selected"

    def show_held(self) -> None:
        """Name the prompts queued now (``agent.queued``) on the waiting budget card, as its
        last line (:data:`HELD`; none: no such line), on record too (a ``budget`` event of
        phase ``held``). Once answered the card keeps the prompts it held. No card: nothing."""
        card = self.card
        call = card.permission.tool_call if card is not None else None
        asked = card.permission.request if card is not None else None
        if call is None or asked is None:
            return
        texts = [" ".join("".join(b.get("text", "") for b in t.prompt if isinstance(b, dict)
                                  and b.get("type") == "text").split()) for t in self.state.turns.queued]
        held = ", ".join(f"“{t if len(t) <= HELD_CHARS else t[:HELD_CHARS - 1] + '…'}”" for t in texts)
        line = f"{HELD}{held}." if held else ""
        if held_line(asked.content) == line:
            return
        set_held(asked, line)
        set_held(call, line)
        self.state.conversation.touch(call)
        transcript = self.state.transcript
        if transcript is not None:
            transcript.event(BUDGET_EVENT, phase="held", call=call.tool_call_id, text=line)
        self.state.notify_status()  # the view's queue too

    async def hold_permission(self) -> None:
        """Before a permission card is decided: wait while a budget card waits."""
        released = self._released
        if self.card is not None and released is not None:
            await released.wait()

    # -- the timer for seconds --------------------------------------------------------------------
    def _arm_timer(self) -> None:
        self._cancel_timer()
        if self.meter.running_since is None or self.card is not None:
            return
        delays = []
        if self.own is not None and "seconds" in self.own.limits:
            delays.append(self.own.limits["seconds"] - self.spent.seconds)
        squad = self.squad
        if squad is not None and "seconds" in squad.own.limits:  # type: ignore[union-attr]
            delays.append(squad.seconds_left())
        if delays:
            delay = max(0.02, min(delays))
            self._timer = asyncio.get_running_loop().call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.check()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """The agent is closed: its timer goes."""
        self._cancel_timer()


def held_line(content: list[dict[str, Any]]) -> str:
    """The budget card's :data:`HELD` line in a tool call's ``content``, else ""."""
    for block in content[1:]:
        text = (block.get("content") or {}).get("text") if isinstance(block, dict) else None
        if isinstance(text, str) and text.startswith(HELD):
            return text
    return ""


def set_held(call: ToolCall, line: str) -> None:
    """Put ``line`` as the budget card's held line of ``call`` (ours), or take it away ("")."""
    held = [{"type": "content", "content": {"type": "text", "text": line}}] if line else []
    call.content = [*call.content[:1], *held]


class SquadBudget:
    """The squad's budget (``squad.budget``): the sum of its running agents' spend (each
    counted from when the squad's budget was set, or from the agent's start after it)
    against ``limits``. Passing it pauses every agent with a turn running on a card
    (each its own, saying "the squad's budget"), and any idle agent at its next prompt;
    ``continue`` on any of them re-arms the squad's budget by the same amount (the
    other agents' squad cards are then answered ``continue`` too, "by you, on NAME's card")."""

    def __init__(self, agents: Callable[[], Iterable[Any]]) -> None:
        self._agents = agents
        self.own: Limits | None = None
        self.bases: dict[int, Spend] = {}
        self.waiting: set[AgentBudget] = set()
        self._rearming = False

    def _budgets(self) -> list[AgentBudget]:
        return [a.budget for a in self._agents() if isinstance(a.budget, AgentBudget)]

    def set(self, tokens: float | None = None, cost: float | None = None,
            seconds: float | None = None) -> SquadBudget:
        limits = _limits(tokens, cost, seconds)
        self.own = Limits(dict(limits), dict(limits)) if limits else None
        self.bases = {id(b): b.meter.spent() for b in self._budgets()}
        for budget in self._budgets():
            budget._arm_timer()
            budget.state.notify_status()
        return self

    @property
    def limits(self) -> dict[str, float]:
        return dict(self.own.limits) if self.own is not None else {}

    def _running(self) -> list[AgentBudget]:
        return [b for b in self._budgets() if b.state.status not in ENDED]

    def spent(self) -> Spend:
        """The sum over the squad's running agents of what each spent since the budget was set."""
        total = Spend()
        for budget in self._running():
            total = total.plus(budget.meter.spent().minus(self.bases.get(id(budget), Spend())))
        return total

    def over(self) -> list[str]:
        return self.own.over(self.spent()) if self.own is not None else []

    def seconds_left(self) -> float:
        """Seconds until the sum passes the seconds limit at the present rate (turns running)."""
        assert self.own is not None
        left = self.own.limits["seconds"] - self.spent().seconds
        running = sum(1 for b in self._running() if b.meter.running_since is not None)
        return left / max(1, running)

    def rearm(self, kinds: list[str]) -> None:
        if self.own is None or self._rearming:
            return
        self._rearming = True
        try:
            self._rearm(kinds)
        finally:
            self._rearming = False

    def _rearm(self, kinds: list[str]) -> None:
        assert self.own is not None
        self.own.rearm(kinds, self.spent())
        for budget in list(self.waiting):
            card = budget.card
            if card is not None and budget.card_scope == "squad" and not self.over():
                card.choose(CONTINUE, by="you (the squad's budget re-armed)")
        for budget in self._budgets():
            budget.state.notify_status()

    def view(self) -> dict[str, Any] | None:
        """:func:`describe` of the squad's budget: a kind none of its running agents has
        reported after a turn is said "not reported"."""
        currency = next((b.meter.currency for b in self._budgets() if b.meter.currency), "")
        running = self._running()
        unreported = set.intersection(*(b.meter.unreported() for b in running)) if running else set()
        return describe(self.own, self.spent(), currency, unreported)

    def __repr__(self) -> str:
        shown = self.view()
        return f"<squad budget: {shown['text'] if shown else 'none'}>"
