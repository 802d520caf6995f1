"""The squad view (``%escouade squad``): one row per agent of the kernel, live."""

from __future__ import annotations

import time

import ipywidgets as w

from ..engine.agent import Agent
from ..engine.squad import Squad
from .agent_view import STATUS_COLOR, STATUS_TEXT, AgentView, _run
from .render import esc
from .views import FullText, Throttle, on_loop

COLUMNS = ("agent", "harness", "folder", "mode", "status", "last activity", "tokens", "cost", "cards")


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "—"
    s = max(0, int(now - t))
    return f"{s} s ago" if s < 60 else f"{s // 60} min ago" if s < 3600 else f"{s // 3600} h ago"


def agent_row(agent: Agent, now: float | None = None) -> dict[str, str]:
    """One row of the squad table, as text (also the plain-text repr's source)."""
    now = time.time() if now is None else now
    usage = agent.conversation.usage or {}
    cost = usage.get("cost") or {}
    mode = agent.escouade_mode if agent.escouade_mode != "default" else (agent.conversation.current_mode_id or "default")
    return {
        "agent": agent.name,
        "harness": agent.harness.short_id,
        "folder": str(agent.cwd) + (f" via {agent.via}" if getattr(agent, "via", None) else ""),
        "mode": mode,
        "status": STATUS_TEXT.get(agent.status, agent.status),
        "last activity": _ago(agent.last_activity, now),
        "tokens": f"{usage.get('used')}/{usage.get('size')}" if usage.get("used") is not None else "—",
        "cost": f"{cost.get('amount')} {cost.get('currency', '')}".strip() if cost else "—",
        "cards": str(len(agent.pending_cards) + len(agent.pending_questions)),
    }


class SquadView(FullText, w.VBox):
    """A table of the squad's agents — name, harness, folder, mode, status, last
    activity, tokens and cost when reported, pending cards — with Open, Stop and Restart
    buttons per agent. Redrawn at most ``RENDERS_PER_SECOND`` times a second."""

    def __init__(self, squad: Squad) -> None:
        super().__init__(layout=w.Layout(border="1px solid #d0d7de", padding="6px"))
        self.add_class("escouade-squad")
        self.squad = squad
        self.throttle = Throttle()
        self.table = w.VBox()
        self.opened = w.Output()
        self._watched: set[int] = set()
        self._rows: dict[str, tuple[w.HTML, w.HBox]] = {}
        self._header = w.HTML()
        self.children = [w.HTML("<b>Squad</b>"), self.table, self.opened]
        self.refresh()

    def _watch(self, agent: Agent) -> None:
        if id(agent) in self._watched:
            return
        self._watched.add(id(agent))
        agent.on_status.subscribe(lambda _a: self.throttle.request(self.refresh))
        agent.conversation.subscribe(lambda _c: self.throttle.request(self.refresh))

    def _buttons(self, agent: Agent) -> w.HBox:
        open_b = w.Button(description="Open", layout=w.Layout(width="auto"), tooltip=f"Show {agent.name}'s view")
        stop_b = w.Button(description="Stop", layout=w.Layout(width="auto"), tooltip=f"Stop {agent.name}")
        restart_b = w.Button(description="Restart", layout=w.Layout(width="auto"), tooltip=f"Restart {agent.name}")

        def open_view(_b) -> None:
            self.opened.clear_output()
            with self.opened:
                from IPython.display import display
                display(AgentView(agent))

        open_b.on_click(on_loop(open_view))
        stop_b.on_click(on_loop(lambda _b: _run(agent.close())))
        restart_b.on_click(on_loop(lambda _b: _run(agent.restart())))
        return w.HBox([open_b, stop_b, restart_b])

    def refresh(self) -> None:
        now = time.time()
        head = "".join(f"<th style='text-align:left;padding:0 8px'>{c}</th>" for c in COLUMNS)
        rows = []
        for agent in list(self.squad.agents.values()):
            self._watch(agent)
            row = agent_row(agent, now)
            color = STATUS_COLOR.get(agent.status, "#57606a")
            cells = "".join(
                f"<td style='padding:0 8px;{'color:' + color + ';font-weight:600' if c == 'status' else ''}'>"
                f"{esc(row[c])}</td>" for c in COLUMNS)
            if agent.name not in self._rows:
                html = w.HTML()
                self._rows[agent.name] = (html, w.HBox([html, self._buttons(agent)]))
            html, box = self._rows[agent.name]
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

    def __repr__(self) -> str:
        agents = list(self.squad.agents.values())
        if not agents:
            return "Squad: no agents"
        now = time.time()
        lines = ["Squad:"]
        for a in agents:
            r = agent_row(a, now)
            lines.append(f"  {r['agent']:<10} {r['harness']:<8} {r['status']:<16} mode={r['mode']} "
                         f"cards={r['cards']} tokens={r['tokens']}")
        return "\n".join(lines)
