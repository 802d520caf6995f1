"""One prompt's turns side by side (``%%escouade A,B``), and their comparison: one widget
model (:class:`~.front.FrontView`, kind ``compare``) drawn by ``widgets/escouade.js``.

Each column is headed by its agent (name, harness, worktree and its diff stat — no status:
the turn's own head says it, in :mod:`..core.status`'s words) and holds the turn's
:class:`~.agent_view.TurnView` (every card answerable where it is). Under them, the
comparison (:class:`~..engine.compare.Comparison`): live while the turns run, frozen once
they have all ended and the worktrees' diff stats are re-counted (:meth:`CompareView.finish`);
what happens later (a merge…) shows under it as such.

Saved form: the companion output before the widget (:meth:`CompareView.companion_bundle`)
becomes, when the comparison freezes, the finished turns side by side (each one's own
saved form, :meth:`TurnView.companion_bundle`) and the frozen table — what a notebook
reopened without its kernel, nbconvert and GitHub show. Its ``text/plain``: each turn's
whole text and the table without times (deterministic).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import traitlets

from ..engine import Comparison, Turn, comparison_text
from .agent_view import TurnView, _prompt_text, _where
from .front import HIDE_ORPHAN, FrontView, _static_css, static_page
from .render import esc
from .tables import comparison_html
from .views import CurrentText


class CompareView(CurrentText, FrontView):
    """The turns of one prompt, one column each, and their comparison (see the module).
    ``views``: the turn views, in order; ``comparison``: the
    :class:`~..engine.compare.Comparison`. ``close()`` closes the turn views."""

    columns = traitlets.List(traitlets.Instance(w.Widget)).tag(sync=True, **w.widget_serialization)

    def __init__(self, turns: list[Turn], *, cell: str | None = None) -> None:
        super().__init__(kind="compare")
        self.turns = list(turns)
        self.comparison = Comparison(self.turns)
        self.hold(self.comparison.close)
        self.views = [TurnView(t, cell=None) for t in self.turns]
        self.columns = list(self.views)
        self._sent: dict | None = None
        self._saved_since: list[str] = []
        for turn in self.turns:
            turn.add_done_callback(lambda _t: self.refresh())
        for agent in {id(t.agent): t.agent for t in self.turns}.values():
            self.hold(agent.on_status.subscribe(lambda _a: self.refresh()))  # queued -> running, a diff stat, a merge

    # -- the live view ------------------------------------------------------------------------------
    def head(self, turn: Turn) -> dict[str, str]:
        """A column's head: the agent's name, harness and where it works (no status)."""
        agent = turn.agent
        return {"name": agent.name, "harness": agent.harness.display_name, "where": _where(agent)}

    def state(self) -> dict[str, Any]:
        state = {"heads": [self.head(t) for t in self.turns],
                 "table": comparison_html(self.comparison),
                 "frozen": self.comparison.frozen is not None,
                 "since": self.comparison.since()}
        self._sent = state
        return state

    def collect(self) -> tuple[list, bool]:
        before = self._sent
        state = self.state()
        return ([["cp", state]] if state != before else []), False

    def refresh(self) -> None:
        """Redraw the heads and the table (a turn started or ended, a diff stat changed); once
        frozen, a later change (a merge) also goes into the saved form, as such."""
        if self.closed:
            return
        self.push([], 0, True)
        if self.comparison.frozen is not None and self.comparison.since() != self._saved_since:
            self.update_companion(final=True)

    def finish(self) -> None:
        """Every turn has ended and the worktrees' diff stats are re-counted
        (:meth:`~..engine.squad.Squad.restat_soon` calls it): the comparison freezes and
        the saved form becomes the finished turns and the frozen table."""
        if self.closed or not self.comparison.freeze():
            return
        self.refresh()
        self.update_companion(final=True)

    # -- saved forms --------------------------------------------------------------------------------
    def widget_text(self, final: bool) -> str:
        """The widget output's text: a sentence saying what it is while the turns run (their
        ``queued``/``working`` would go stale), nothing once the saved form above holds the text."""
        if final:
            return ""
        return (f"{', '.join(t.agent.name for t in self.turns)}: one prompt side by side (the turns and their "
                f"comparison show above once they have all ended)")

    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        if not final or self.comparison.frozen is None:
            names = ", ".join(t.agent.name for t in self.turns)
            prompt = _prompt_text(self.turns[0]) if self.turns else ""
            if len(prompt) > 200:
                prompt = prompt[:199] + "…"
            return {"text/plain": "",  # the widget's own text/plain follows
                    "text/html": f'<div class="esc-saved" style="font-size:12px;color:var(--jp-ui-font-color1,#333)">'
                                 f'<b>{esc(names)}</b>, prompted: “{esc(prompt)}” — the turns side by side and '
                                 f'their comparison show here once they have all ended (in JupyterLab or '
                                 f'Notebook 7)</div>{HIDE_ORPHAN}'}
        self._saved_since = since = self.comparison.since()
        inner_style = f"<style>{_static_css()}</style>"
        columns = []
        for view in self.views:
            turn_html = view.companion_bundle(final=True)["text/html"]  # the turn's own saved form
            turn_html = turn_html.replace(inner_style, "").replace(HIDE_ORPHAN, "")  # once, around all of them
            columns.append(f'<div class="esc-compare-col">{self._saved_head(view.turn)}{turn_html}</div>')
        notes = "".join(f'<div class="esc-compare-since">{esc(line)}</div>' for line in since)
        body = (f'<div class="esc-view esc-compare escouade-compare esc-saved">'
                f'<div class="esc-compare-cols">{"".join(columns)}</div>'
                f'<div class="esc-compare-state esc-dim">The comparison, as the turns ended:</div>'
                f'<div class="esc-table-wrap esc-compare-table">{comparison_html(self.comparison)}</div>'
                f'{notes}</div>')
        return {"text/plain": self.text(), "text/html": static_page(body) + HIDE_ORPHAN}

    @staticmethod
    def _saved_head(turn: Turn) -> str:
        """A column's head in the saved form: name, harness, worktree branch (no folder, no
        path of the machine that ran it)."""
        agent = turn.agent
        wt = getattr(agent, "worktree", None)
        where = f" · worktree {wt.branch} (off {wt.base})" if wt is not None else ""
        return (f'<div class="escouade-compare-head esc-compare-head"><b>{esc(agent.name)}</b>'
                f'<span class="esc-dim"> · {esc(agent.harness.display_name)}{esc(where)}</span></div>')

    def text(self) -> str:
        """The whole plain text: each turn's, then the table without times (and what
        changed since it froze)."""
        parts = [repr(v) for v in self.views]
        since = self.comparison.since()
        table = comparison_text(self.comparison, durations=False)
        return "\n\n".join([*parts, table, *(["\n".join(since)] if since else [])])

    def release(self) -> None:
        for view in self.views:
            view.close()

    def __repr__(self) -> str:
        return self.text()
