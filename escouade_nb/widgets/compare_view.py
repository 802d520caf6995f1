"""One prompt's turns side by side (``%%escouade A,B``), and their comparison table."""

from __future__ import annotations

import html

import ipywidgets as w

from ..engine.compare import comparison_html, comparison_text
from ..engine.turns import Turn
from .agent_view import TurnView, status_line
from .views import FullText, Releasing, close_tree


class CompareView(FullText, Releasing, w.VBox):
    """The turns of one prompt, one column each (a :class:`TurnView` per agent, every
    card answerable), and under them the comparison table (:mod:`..engine.compare`),
    redrawn as each turn ends and once the worktrees' diff stats are re-counted
    (:meth:`refresh`). ``close()`` closes the turn views."""

    def __init__(self, turns: list[Turn], *, cell: str | None = None) -> None:
        super().__init__()
        self.add_class("escouade-compare")
        self.turns = list(turns)
        self.views = [TurnView(t, cell=None) for t in self.turns]
        # each column headed by its agent (name, harness, worktree and diff stat, status): the
        # turns alone do not say whose they are; below ~320 px a column wraps under the other
        self.heads = [w.HTML(layout=w.Layout(padding="0 6px")) for _ in self.turns]
        columns = []
        for head, view in zip(self.heads, self.views):
            head.add_class("escouade-compare-head")
            columns.append(w.VBox([head, view], layout=w.Layout(
                flex="1 1 320px", min_width="0", border_right="1px solid var(--jp-border-color2, #e0e0e0)", padding="0 6px")))
        self.table = w.HTML(layout=w.Layout(overflow="auto"))  # scrolls in a narrow window, never cut
        self.children = [w.HBox(columns, layout=w.Layout(width="100%", flex_flow="row wrap")), self.table]
        for turn in self.turns:
            turn.add_done_callback(lambda _t: self.refresh())
            self.hold(turn.agent.on_status.subscribe(lambda _a: self.refresh()))  # queued -> running
        self.refresh()

    def refresh(self) -> None:
        if self.closed:
            return
        value = comparison_html(self.turns)
        if self.table.value != value:
            self.table.value = value
        for head, turn in zip(self.heads, self.turns):
            name = turn.agent.name  # status_line starts with it: bold, as a column's title
            text = f"<b>{html.escape(name)}</b>{html.escape(status_line(turn.agent)[len(name):])}"
            if head.value != text:
                head.value = text

    def release(self) -> None:
        for view in self.views:
            close_tree(view)

    def __repr__(self) -> str:
        parts = [repr(v) for v in self.views]
        return "\n\n".join([*parts, comparison_text(self.turns, durations=False)])
