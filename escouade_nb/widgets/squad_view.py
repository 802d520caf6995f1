"""The squad view (``%escouade squad``): one aligned table, a row per agent of the kernel,
live; per row Open, Cancel turn, Restart and Stop agent (the last two confirmed in the
browser); the oldest card waiting for you across the squad, answerable in place (its keys
act after a 500 ms settle, as Escouade's overview does). One widget model."""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as w
import traitlets

import logging

from ..core.conversation import Conversation
from ..core.observers import Subscription
from ..core.status import BUSY, CAN_RESTART, ENDED
from ..engine import Agent, Squad
from .agent_view import STATUS_TONE, AgentView, CardActions, _run, activity_words, status_text
from .feed import Feed
from .front import HIDE_ORPHAN, FrontView, static_page
from .render import esc

log = logging.getLogger(__name__)

COLUMNS = ("agent", "harness", "folder", "worktree", "mode", "status", "last activity", "tokens", "cost", "budget",
           "cards", "subagents")


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "—"
    s = max(0, int(now - t))
    return f"{s} s ago" if s < 60 else f"{s // 60} min ago" if s < 3600 else f"{s // 3600} h ago"


def _worktree_cell(agent: Agent) -> str:
    """Its branch (off which base) and the latest diff stat, or a dash without a worktree."""
    wt = getattr(agent, "worktree", None)
    if wt is None:
        return "—"
    return f"{wt.branch} (off {wt.base})" + (f": {wt.last_stat}" if wt.last_stat is not None else "")


def _subagents_cell(agent: Agent) -> str:
    """Its child sessions (ACP subagents): "2 (1 running)", "1", or a dash when none."""
    subs = list(agent.conversation.subagents.values())
    if not subs:
        return "—"
    running = sum(s.running for s in subs)
    return f"{len(subs)} ({running} running)" if running else str(len(subs))


_WHOLE = ("tokens", "cost", "cards")
"""Columns of the saved table never cut inside a value (a number wrapped is misread)."""
SAVED_TABLE = ('<style>.esc-static table.esc-squad-table{table-layout:auto;margin:0}.esc-static .esc-squad-table td,'
               '.esc-static .esc-squad-table th{text-align:left}.esc-static .esc-squad-table td.esc-nowrap,'
               '.esc-static .esc-squad-table .esc-status{white-space:nowrap;overflow-wrap:normal}</style>')
"""The saved table drawn as live where a rendered-HTML output (JupyterLab, nbconvert) lays
tables out its own way (fixed equal columns, cells aligned right)."""


def saved_folder(path) -> str:
    """``path`` as a saved form shows it: relative to the kernel's folder when inside it
    (``.`` for that folder), else its last part after ``…/`` — never a machine's whole path."""
    import os

    try:
        rel = os.path.relpath(str(path), os.getcwd())
    except ValueError:
        rel = os.pardir
    if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
        return rel
    return "…/" + os.path.basename(os.path.normpath(str(path)))


def agent_row(agent: Agent, now: float | None = None) -> dict[str, str]:
    """One row of the squad table, as text (also the plain-text repr's source)."""
    now = time.time() if now is None else now
    usage = agent.conversation.usage or {}
    cost = usage.get("cost") or {}
    mode = agent.escouade_mode if agent.escouade_mode not in ("default", None) else \
        (agent.conversation.current_mode_id or "default")
    if agent.escouade_mode is None:  # a mode of the agent's own that no Escouade mode maps to
        mode = f"{agent.controls.agent_mode()} (its own)"
    return {
        "agent": agent.name,
        "harness": agent.harness.short_id,
        "folder": str(agent.cwd) + (f" {agent.place}" if agent.place else ""),
        "worktree": _worktree_cell(agent),
        "mode": mode,
        "status": _status_cell(agent),
        "last activity": _ago(agent.last_activity, now),
        "tokens": f"{usage.get('used')}/{usage.get('size')}" if usage.get("used") is not None else "—",
        "cost": f"{cost.get('amount')} {cost.get('currency', '')}".strip() if cost else "—",
        "budget": _budget_cell(agent),
        "cards": str(len(agent.pending_cards) + len(agent.pending_questions)),
        "subagents": _subagents_cell(agent),
    }


def _status_cell(agent: Agent) -> str:
    """Its status, or while its turn runs what it does (``running a tool: …``, ``stalled for 74 s``)."""
    doing = activity_words(agent)
    return doing[0] if doing is not None else status_text(agent.status)


def _tone(agent: Agent) -> str:
    doing = activity_words(agent)
    return doing[1] if doing is not None else STATUS_TONE.get(agent.status, "idle")


def _budget_cell(agent: Agent) -> str:
    """Its spend against its own budget (``210 of 250 tokens``; "over: " when passed), else "—"."""
    budget = getattr(agent, "budget", None)
    shown = budget.view() if budget is not None else None
    if not shown:
        return "—"
    return ("over: " if shown["over"] else "") + shown["text"]


def squad_budget_text(squad: Squad) -> str | None:
    """The squad's spend against its budget (``140 of 100 tokens``), else None."""
    budget = getattr(squad, "budget", None)
    shown = budget.view() if budget is not None else None
    return shown["text"] if shown else None


class SquadView(FrontView):
    """The squad's table and its oldest pending card (see the module). It listens to
    each agent it shows and lets go of an agent that left the squad; ``close()`` lets go
    of all of them and closes the agent view it opened."""

    opened = traitlets.Instance(w.Widget, allow_none=True).tag(sync=True, **w.widget_serialization)

    def __init__(self, squad: Squad) -> None:
        super().__init__(kind="squad")
        self.squad = squad
        self.opened_view: AgentView | None = None
        self._watched: dict[Agent, tuple[Subscription, Subscription]] = {}
        self._sent: dict | None = None
        self._card_cache: tuple | None = None
        self._first_seen: dict[int, float] = {}  # id of a pending card's item -> when first seen pending
        self.actions.update(open=self._act_open, cancel=self._act_cancel, stop=self._act_stop,
                            restart=self._act_restart, choose=self._card_act, approve=self._card_act,
                            keep=self._card_act, answer=self._card_act, decline=self._card_act, cancel_q=self._card_act)
        on_change = getattr(squad.agents, "on_change", None)  # an AgentTable (a plain dict in some tests)
        if on_change is not None:
            self.hold(on_change.subscribe(self._urgent))
        self._watch_all()

    # -- following the squad --------------------------------------------------------------------------
    def _changed(self, *_args) -> None:
        self.push([], 0, False)

    def _urgent(self, *_args) -> None:
        self.push([], 0, True)
        self.update_companion_soon()  # a status or the squad changed: the saved form follows, debounced

    def _watch_all(self) -> list[Agent]:
        agents = list(self.squad.agents.values())
        keep = {id(a) for a in agents}
        for agent in [a for a in self._watched if id(a) not in keep]:
            for sub in self._watched.pop(agent):
                sub.close()
        if self.opened_view is not None and id(self.opened_view.agent) not in keep:  # it left the squad
            self.opened_view.close()
            self.opened_view = None
            self.opened = None
        for agent in agents:
            if agent not in self._watched:
                self._watched[agent] = (agent.on_status.subscribe(self._urgent),
                                        agent.conversation.subscribe(self._changed))
        return agents

    def collect(self) -> tuple[list, bool]:
        table = self.table()
        if table == self._sent:
            return [], False
        self._sent = table
        return [["sq", table]], False

    def state(self) -> dict[str, Any]:
        self._sent = table = self.table()
        return table

    def table(self) -> dict[str, Any]:
        """The rows (text cells, status tone, last activity as epoch seconds, what can be
        done) and the oldest pending card across the squad (its HTML, escaped)."""
        if self.closed:
            return self._sent or {"columns": list(COLUMNS), "rows": [], "pending": None}
        agents = self._watch_all()
        now = time.time()
        rows = []
        for agent in agents:
            cells = agent_row(agent, now)
            cells["last activity"] = ""  # the browser counts it from "at" (no message a second)
            rows.append({"name": agent.name, "cells": cells, "tone": _tone(agent),
                         "status": str(agent.status), "activity": agent.activity.state,
                         "at": agent.last_activity, "cards": len(agent.pending_cards) + len(agent.pending_questions),
                         "can": {"cancel": agent.status in BUSY and agent.turns.current is not None,
                                 "restart": agent.status in CAN_RESTART, "stop": agent.status not in ENDED}})
        return {"columns": list(COLUMNS), "rows": rows, "pending": self._oldest_card(agents),
                "budget": squad_budget_text(self.squad)}

    def _oldest_card(self, agents: list[Agent]) -> dict[str, Any] | None:
        """The card that has waited longest across the squad (by when this view first saw
        it pending), with its HTML and how many wait in all."""
        now = time.monotonic()
        # by the card itself: a subagent's card has a key of its own conversation's, which
        # may be a parent card's too (both wait, both count)
        pending: dict[int, tuple[Agent, Any]] = {}
        for agent in agents:
            for item in [c.permission for c in agent.pending_cards] + [q.question for q in agent.pending_questions]:
                pending[id(item)] = (agent, item)
        self._first_seen = {k: self._first_seen.get(k, now) for k in pending}
        if not pending:
            self._card_cache = None
            return None
        count = len(pending)
        order = {k: n for n, k in enumerate(pending)}
        oldest = min(pending, key=lambda k: (self._first_seen[k], order[k]))
        agent, item = pending[oldest]
        cache_key = (id(agent), id(item), item.version)
        if self._card_cache is None or self._card_cache[0] != cache_key:
            # drawn on its own, its buttons keyed by the card itself: a subagent's card has a key
            # of its own conversation's, which may be a parent card's too
            feed = Feed(Conversation(), speaker=agent.harness.harness.speaker or agent.name, prefix=f"c{id(item)}/")
            try:
                html = feed.render(item)[0]
            finally:
                feed.close()
            self._card_cache = (cache_key, html)
        return {"agent": agent.name, "key": f"c{id(item)}/{item.key}", "html": self._card_cache[1], "count": count}

    # -- actions ------------------------------------------------------------------------------------------
    def _agent(self, msg: dict) -> Agent | None:
        return self.squad.agents.get(str(msg.get("name")))

    def _act_open(self, msg: dict) -> None:
        agent = self._agent(msg)
        if agent is None:
            return
        if self.opened_view is not None and self.opened_view.agent is agent and not self.opened_view.closed:
            return
        if self.opened_view is not None:
            self.opened_view.close()
        self.opened_view = AgentView(agent)
        self.opened = self.opened_view

    def _act_cancel(self, msg: dict) -> None:
        agent = self._agent(msg)
        if agent is not None:
            agent.cancel()

    def _act_stop(self, msg: dict) -> None:
        agent = self._agent(msg)
        if agent is not None:
            _run(agent.close())

    def _act_restart(self, msg: dict) -> None:
        agent = self._agent(msg)
        if agent is not None and agent.status in CAN_RESTART:
            _run(agent.restart())

    def _card_act(self, msg: dict) -> None:
        """A button of the squad's pending card: the card is found by the token its keys
        carry (``c<id>/…``) among the agent's pending cards, never by an item key alone."""
        agent = self._agent(msg)
        if agent is not None:
            CardActions(agent, lambda key: self._pending_item(agent, key)).dispatch(msg)

    @staticmethod
    def _pending_item(agent: Agent, key: str):
        """The pending permission or question a ``c<id>/…`` key of this view names, or None."""
        if not key.startswith("c") or "/" not in key:
            return None
        token = key[1:].split("/", 1)[0]
        items = [c.permission for c in agent.pending_cards] + [q.question for q in agent.pending_questions]
        return next((i for i in items if str(id(i)) == token), None)

    def release(self) -> None:
        for subs in self._watched.values():
            for sub in subs:
                sub.close()
        self._watched.clear()
        if self.opened_view is not None:
            self.opened_view.close()
            self.opened_view = None

    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        """The squad's saved form: its table as last drawn (redrawn
        :data:`~.front.COMPANION_WAIT` after an agent's status or the squad changes), with
        no "last activity" (a time "ago" is false the next minute) and folders relative to
        the kernel's (no machine's path). ``text/plain``: the same rows."""
        agents = list(self.squad.agents.values()) if not self.closed else []
        cols = [c for c in COLUMNS if c != "last activity"]
        rows = []
        for agent in agents:
            cells = agent_row(agent)
            cells["folder"] = saved_folder(agent.cwd)
            rows.append((agent, cells))
        if all(cells["budget"] == "—" for _a, cells in rows):
            cols.remove("budget")
        note = ('<div class="esc-dim esc-small">The squad as last drawn (live while its kernel runs: '
                '<code>%escouade squad</code>).</div>')
        if rows:
            head = "".join(f"<th>{esc(c)}</th>" for c in cols)
            body = "".join(
                "<tr>" + "".join(f'<td><span class="esc-status esc-st-{_tone(a)}">● '
                                 f'{esc(cells[c])}</span></td>' if c == "status" else
                                 f'<td class="esc-nowrap">{esc(cells[c])}</td>' if c in _WHOLE else
                                 f"<td>{esc(cells[c])}</td>"
                                 for c in cols) + "</tr>" for a, cells in rows)
            table = (f'<div class="esc-table-wrap">{SAVED_TABLE}<table class="esc-squad-table"><tr>{head}</tr>{body}'
                     f'</table></div>')
        else:
            table = '<div class="esc-dim">No agents.</div>'
        html = static_page(f'<div class="esc-view esc-saved esc-saved-squad"><div class="esc-head">'
                           f'<div class="esc-head-main">'
                           f'<b>Squad</b> · {len(rows)} agent{"" if len(rows) == 1 else "s"}</div>{note}</div>'
                           f'{table}</div>') + HIDE_ORPHAN
        lines = ["Squad:" if rows else "Squad: no agents"]
        for _a, r in rows:
            lines.append(f"  {r['agent']:<10} {r['harness']:<8} {r['status']:<16} mode={r['mode']} "
                         f"cards={r['cards']} tokens={r['tokens']}"
                         + (f" worktree={r['worktree']}" if r["worktree"] != "—" else "")
                         + (f" budget={r['budget']}" if r["budget"] != "—" else ""))
        spent = squad_budget_text(self.squad) if not self.closed else None
        if spent:
            lines.append(f"  squad budget: {spent}")
        return {"text/plain": "\n".join(lines), "text/html": html}

    def __repr__(self) -> str:
        agents = list(self.squad.agents.values())
        if not agents:
            return "Squad: no agents"
        now = time.time()
        lines = ["Squad:"]
        for a in agents:
            r = agent_row(a, now)
            lines.append(f"  {r['agent']:<10} {r['harness']:<8} {r['status']:<16} mode={r['mode']} "
                         f"cards={r['cards']} tokens={r['tokens']}"
                         + (f" worktree={r['worktree']}" if r["worktree"] != "—" else "")
                         + (f" subagents={r['subagents']}" if r["subagents"] != "—" else "")
                         + (f" budget={r['budget']}" if r["budget"] != "—" else ""))
        spent = squad_budget_text(self.squad)
        if spent:
            lines.append(f"  squad budget: {spent}")
        return "\n".join(lines)
