"""The squad view (``%escouade squad``): one row per agent of the kernel, live."""

from __future__ import annotations

import time

import ipywidgets as w

from ..core.observers import Subscription
from ..engine.agent import Agent
from ..engine.squad import Squad
from .agent_view import STATUS_COLOR, AgentView, _run, status_text
from .render import esc
from .views import FullText, Releasing, Throttle, close_tree, on_loop

COLUMNS = ("agent", "harness", "folder", "worktree", "mode", "status", "last activity", "tokens", "cost", "cards",
           "subagents")


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
        "folder": str(agent.cwd) + (f" via {agent.via}" if getattr(agent, "via", None) else ""),
        "worktree": _worktree_cell(agent),
        "mode": mode,
        "status": status_text(agent.status),
        "last activity": _ago(agent.last_activity, now),
        "tokens": f"{usage.get('used')}/{usage.get('size')}" if usage.get("used") is not None else "—",
        "cost": f"{cost.get('amount')} {cost.get('currency', '')}".strip() if cost else "—",
        "cards": str(len(agent.pending_cards) + len(agent.pending_questions)),
        "subagents": _subagents_cell(agent),
    }


class SquadView(FullText, Releasing, w.VBox):
    """A table of the squad's agents — name, harness, folder, mode, status, last
    activity, tokens and cost when reported, pending cards — with Open, Stop and Restart
    buttons per agent. Redrawn at most ``RENDERS_PER_SECOND`` times a second.

    It listens to each agent it shows and lets go of an agent that left the squad;
    ``close()`` lets go of all of them and closes the agent view it opened."""

    def __init__(self, squad: Squad) -> None:
        super().__init__(layout=w.Layout(border="1px solid #d0d7de", padding="6px"))
        self.add_class("escouade-squad")
        self.squad = squad
        self.throttle = Throttle()
        self.table = w.VBox()
        self.opened = w.Output()
        self.opened_view: AgentView | None = None
        self._watched: dict[Agent, tuple[Subscription, Subscription]] = {}
        self._rows: dict[Agent, tuple[w.HTML, w.HBox]] = {}
        self._header = w.HTML()
        self.children = [w.HTML("<b>Squad</b>"), self.table, self.opened]
        self.redraws_on(self.throttle, self.refresh)
        self.refresh()

    def _changed(self, *_args) -> None:
        self.throttle.request(self.refresh)

    def _watch(self, agent: Agent) -> None:
        if agent not in self._watched:
            self._watched[agent] = (agent.on_status.subscribe(self._changed),
                                    agent.conversation.subscribe(self._changed))

    def _forget(self, agents: list[Agent]) -> list[w.HBox]:
        """Let go of the agents no longer in the squad: their subscriptions now; their
        rows are returned, to close once out of the table."""
        keep = {id(a) for a in agents}
        for agent in [a for a in self._watched if id(a) not in keep]:
            for sub in self._watched.pop(agent):
                sub.close()
        return [self._rows.pop(a)[1] for a in [a for a in self._rows if id(a) not in keep]]

    def _buttons(self, agent: Agent) -> w.HBox:
        open_b = w.Button(description="Open", layout=w.Layout(width="auto"), tooltip=f"Show {agent.name}'s view")
        stop_b = w.Button(description="Stop", layout=w.Layout(width="auto"), tooltip=f"Stop {agent.name}")
        restart_b = w.Button(description="Restart", layout=w.Layout(width="auto"), tooltip=f"Restart {agent.name}")

        def open_view(_b) -> None:
            if self.closed:
                return
            self.opened.clear_output()
            if self.opened_view is not None:
                self.opened_view.close()
            self.opened_view = view = AgentView(agent)
            with self.opened:
                from IPython.display import display
                display(view)

        open_b.on_click(on_loop(open_view))
        stop_b.on_click(on_loop(lambda _b: _run(agent.close())))
        restart_b.on_click(on_loop(lambda _b: _run(agent.restart())))
        return w.HBox([open_b, stop_b, restart_b])

    def refresh(self) -> None:
        if self.closed:
            return
        now = time.time()
        head = "".join(f"<th style='text-align:left;padding:0 8px'>{c}</th>" for c in COLUMNS)
        rows = []
        agents = list(self.squad.agents.values())
        gone = self._forget(agents)
        for agent in agents:
            self._watch(agent)
            row = agent_row(agent, now)
            color = STATUS_COLOR.get(agent.status, "#57606a")
            cells = "".join(
                f"<td style='padding:0 8px;{'color:' + color + ';font-weight:600' if c == 'status' else ''}'>"
                f"{esc(row[c])}</td>" for c in COLUMNS)
            if agent not in self._rows:  # by agent, not name: a new agent of the same name gets its own buttons
                html = w.HTML()
                self._rows[agent] = (html, w.HBox([html, self._buttons(agent)]))
            html, box = self._rows[agent]
            value = f"<table class='escouade-squad-row'><tr>{cells}</tr></table>"
            if html.value != value:
                html.value = value
            rows.append(box)
        header = f"<table><tr>{head}</tr></table>" if rows else "<i>No agents yet.</i>"
        if self._header.value != header:
            self._header.value = header
        children = (self._header, *rows)
        if tuple(self.table.children) != children:
            self.table.children = children
        for box in gone:
            close_tree(box)

    def release(self) -> None:
        for subs in self._watched.values():
            for sub in subs:
                sub.close()
        self._watched.clear()
        for _html, box in self._rows.values():
            close_tree(box)  # its buttons hold the agent
        self._rows.clear()
        if self.opened_view is not None:
            self.opened_view.close()
            self.opened_view = None

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
                         + (f" subagents={r['subagents']}" if r["subagents"] != "—" else ""))
        return "\n".join(lines)
