"""Turns of one prompt side by side: their comparison (``squad.ask``, ``%%escouade A,B``).

A :class:`Comparison` follows the turns while they run and is **frozen** when the last
one has ended (:meth:`Comparison.freeze`, once the worktrees' diff stats are re-counted):
from then on its rows are a record — what each turn did, at that moment — and what
happens later (a merge, a rebase, a discard, more edits) is said apart, as
:meth:`Comparison.since` notes, never by rewriting a row.

One row per turn (text cells, keys :data:`COLUMNS`): the stop reason; the agent's time
(from its sending to its end, minus the time a card waited for you) and that waiting
time, apart; the tokens and cost **of this turn** (the deltas of the agent's
``usage_update`` from its start to its end, with the context's use after it); the files
changed (its worktree's diff stat when it has one and no later turn of the agent started
before the freeze, else the files its edit tool calls aimed at); its tool calls; its
permission cards and who answered them.

:func:`comparison_text` renders rows as plain text (deterministic when ``durations=False``:
the times are left out, for nbval and saved outputs' ``text/plain``); their HTML is the
views' (:func:`~..widgets.tables.comparison_html`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from ..core.conversation import Permission
from ..core.render_text import answer_label
from ..core.status import AgentStatus
from .turns import Turn
from .workspace import EDIT_KINDS, paths_of

COLUMNS = ("agent", "stop", "agent time", "waited for you", "tokens", "cost", "files changed", "tool calls",
           "cards")
SHORT = ("agent", "stop", "agent time", "waited for you", "tokens", "cost", "tool calls")
"""The columns whose cells never wrap (numbers with their unit)."""
TIMES = ("agent time", "waited for you")
"""The columns left out with ``durations=False`` (they differ from run to run)."""


class Comparison:
    """The comparison of ``turns`` (one prompt's turns, in order). While they run it
    follows them (each agent's status: the time a card waits for you is counted apart);
    :meth:`freeze` makes it a record. ``watch=False``: no subscription (a comparison made
    after the turns ended, e.g. by :func:`comparison`: the waiting time is unknown, "—").
    ``close()`` ends the subscriptions (a frozen comparison keeps its rows).

    ``clock``: seconds, monotonic (``time.monotonic``, the turns' own clock)."""

    def __init__(self, turns: list[Turn], *, watch: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.turns = list(turns)
        self.clock = clock
        self.watched = watch
        self.waited = [0.0] * len(self.turns)  # seconds a card of the turn waited for you
        self._waiting_since: list[float | None] = [None] * len(self.turns)
        self.later = [False] * len(self.turns)  # a later turn of the agent started before the freeze
        self.frozen: list[dict[str, str]] | None = None
        self._frozen_at: list[tuple[str | None, int]] = []  # per turn: (diff stat, worktree events) when frozen
        self._tokens: list[Callable[[], object]] = []
        if watch:
            for agent in {id(t.agent): t.agent for t in self.turns}.values():
                self._tokens.append(agent.on_status.subscribe(self._status))
            for turn in self.turns:
                self._status(turn.agent)

    def _status(self, agent: Any) -> None:
        now = self.clock()
        for i, turn in enumerate(self.turns):
            if turn.agent is not agent:
                continue
            current = agent.turns.current
            waiting = agent.status == AgentStatus.WAITING and not turn.done and current is turn
            if turn.done and current is not None and current is not turn:
                self.later[i] = True  # its worktree's diff stat may now count that turn's work
            since = self._waiting_since[i]
            if waiting and since is None:
                self._waiting_since[i] = now
            elif not waiting and since is not None:
                self.waited[i] += now - since
                self._waiting_since[i] = None

    @property
    def done(self) -> bool:
        """Whether every turn has ended."""
        return all(t.done for t in self.turns)

    def waiting_time(self, i: int) -> float | None:
        """Seconds turn ``i``'s cards waited for you (so far), None when not watched."""
        if not self.watched:
            return None
        since = self._waiting_since[i]
        turn = self.turns[i]
        if since is None:
            return self.waited[i]
        end = turn.ended if turn.ended is not None else self.clock()
        return self.waited[i] + max(0.0, end - since)

    # -- rows -------------------------------------------------------------------------------------------
    def row(self, i: int) -> dict[str, str]:
        """Turn ``i``'s row as it stands now (text cells, keys :data:`COLUMNS`)."""
        turn = self.turns[i]
        agent = turn.agent
        waited = self.waiting_time(i)
        sent = turn.started is not None  # a turn never sent (queued, or failed before) used nothing
        if turn.duration is not None:
            agent_time = f"{max(0.0, turn.duration - (waited or 0.0)):.1f} s"
        elif turn.started is not None:
            agent_time = "running"
        else:
            agent_time = "—"
        return {
            "agent": agent.name,
            "stop": _stop(turn),
            "agent time": agent_time,
            "waited for you": "—" if waited is None else f"{waited:.1f} s",
            "tokens": _tokens(turn.usage_before, _usage_after(turn), turn) if sent else "—",
            "cost": _cost(turn.usage_before, _usage_after(turn), turn) if sent else "—",
            "files changed": _files(turn, diffstat=not self.later[i]),
            "tool calls": str(len(turn.tool_calls)),
            "cards": "; ".join(answer_label(c) for c in turn.items if isinstance(c, Permission)) or "none",
        }

    def rows(self, *, durations: bool = True) -> list[dict[str, str]]:
        """The rows: the frozen ones once frozen, else as the turns stand now."""
        rows = self.frozen if self.frozen is not None else [self.row(i) for i in range(len(self.turns))]
        if durations:
            return [dict(r) for r in rows]
        return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]

    def freeze(self) -> bool:
        """Make the rows a record, once every turn has ended (the caller re-counts the
        worktrees' diff stats first: :meth:`~.squad.Squad.restat_soon`). Returns whether
        it is frozen (False while a turn still runs); freezing twice keeps the first."""
        if self.frozen is not None:
            return True
        if not self.done:
            return False
        for i in range(len(self.turns)):
            self._status(self.turns[i].agent)
        self.frozen = [self.row(i) for i in range(len(self.turns))]
        self._frozen_at = [_worktree_state(t.agent) for t in self.turns]
        self.close()
        return True

    def since(self) -> list[str]:
        """What changed since the comparison was frozen, one line per agent that changed:
        ``"a: merged into main since"``, ``"a: its worktree was discarded since"``,
        ``"a: files changed now: …"``. Empty before freezing."""
        if self.frozen is None:
            return []
        out = []
        for turn, (stat, seen) in zip(self.turns, self._frozen_at, strict=False):
            wt = turn.agent.worktree
            if wt is None:
                continue
            events = wt.events[seen:]
            now = str(wt.last_stat) if wt.last_stat is not None else None
            if events:
                out.append(f"{turn.agent.name}: {', '.join(events)} since")
            elif now != stat:
                out.append(f"{turn.agent.name}: files changed now: {now or 'unknown'} (changed since)")
        return out

    def close(self) -> None:
        for token in self._tokens:
            token()
        self._tokens.clear()


def _worktree_state(agent: Any) -> tuple[str | None, int]:
    wt = agent.worktree
    if wt is None:
        return None, 0
    return (str(wt.last_stat) if wt.last_stat is not None else None), len(wt.events)


def _stop(turn: Turn) -> str:
    if turn.stop_reason:
        return turn.stop_reason
    if turn.error is not None:
        return "failed"
    if turn.status == "running":
        status = turn.agent.status  # the words of core.status: the same as the turn's own head
        return AgentStatus(status).text if isinstance(status, AgentStatus) else str(status)
    return turn.status


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.6g}"


def _tokens(before: dict | None, after: dict | None, turn: Turn) -> str:
    """``+N (used/size)`` — the context's growth over the turn, then its use after it."""
    after = after or {}
    used = _number(after.get("used"))
    if used is None:
        return "—"
    size = after.get("size")
    now = f"{_fmt(used)}/{size}" if size is not None else _fmt(used)
    start = _number((before or {}).get("used")) if before is not None else None
    if before is None:
        return now  # not known when the turn started (a turn never sent, an old turn)
    delta = used - (start or 0.0)
    return f"{'+' if delta >= 0 else '−'}{_fmt(abs(delta))} ({now})"


def _cost(before: dict | None, after: dict | None, turn: Turn) -> str:
    """The cost of this turn (the delta of the agent's running cost), with its currency."""
    cost = (after or {}).get("cost") or {}
    amount = _number(cost.get("amount")) if isinstance(cost, dict) else None
    if amount is None:
        return "—"
    currency = str(cost.get("currency") or "")
    if before is None:
        return f"{_fmt(amount)} {currency}".strip() + " (total)"
    old = (before.get("cost") or {}) if isinstance(before.get("cost"), dict) else {}
    start = _number(old.get("amount")) or 0.0
    return f"{_fmt(round(amount - start, 6))} {currency}".strip()


def _usage_after(turn: Turn) -> dict | None:
    """The agent's usage when the turn ended (its current one while the turn runs)."""
    after = turn.usage_after
    return after if turn.done and after is not None else turn.agent.conversation.usage


def _files(turn: Turn, diffstat: bool = True) -> str:
    """Its worktree's diff stat (``diffstat``: no later turn of the agent may have changed the
    worktree since), else the files its edit tool calls aimed at."""
    agent = turn.agent
    wt = agent.worktree
    if diffstat and wt is not None and wt.last_stat is not None:
        return f"{wt.last_stat} ({', '.join(wt.last_stat.paths[:4])})" if wt.last_stat.files else "none"
    edited = sorted({p for c in turn.tool_calls if c.kind in EDIT_KINDS for p in paths_of(c)})
    return ", ".join(_short(p, agent.cwd) for p in edited) or "none"


def comparison(turns: list[Turn], *, durations: bool = True) -> list[dict[str, str]]:
    """One row per turn as they stand now (text cells, keys :data:`COLUMNS`; without the
    times when ``durations`` is false), from a comparison that did not watch them (the
    waiting time is "—"). A view keeps a :class:`Comparison` instead."""
    return Comparison(turns, watch=False).rows(durations=durations)


def _short(path: str, cwd: Any) -> str:
    prefix = f"{cwd}/"
    return path[len(prefix):] if path.startswith(prefix) else path


def comparison_rows(source: list[Turn] | Comparison | list[dict[str, str]], durations: bool) -> list[dict[str, str]]:
    """The rows of ``source`` (turns, a :class:`Comparison`, or rows; without the times when
    ``durations`` is false)."""
    if isinstance(source, Comparison):
        return source.rows(durations=durations)
    if source and isinstance(source[0], dict):
        return [{k: v for k, v in r.items() if durations or k not in TIMES} for r in source]
    return comparison(list(cast(list[Turn], source)), durations=durations)


def comparison_text(source: list[Turn] | Comparison | list[dict[str, str]], *, durations: bool = True) -> str:
    """The rows of ``source`` (turns, a :class:`Comparison`, or rows) as an aligned plain-text table."""
    rows = comparison_rows(source, durations)
    cols = [c for c in COLUMNS if durations or c not in TIMES]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols} if rows else {c: len(c) for c in cols}
    line = lambda r: "  ".join(r[c].ljust(widths[c]) for c in cols).rstrip()  # noqa: E731
    return "\n".join([line({c: c for c in cols}), *(line(r) for r in rows)])
