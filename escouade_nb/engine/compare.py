"""Turns of one prompt side by side: a comparison table (``squad.ask``, ``%%escouade A,B``).

:func:`comparison` makes the rows from the turns as they are (a running turn shows
``running``): one per agent — stop reason, duration, tokens and cost when the agent
reports them, files changed (its worktree's diff stat when it has one, else the files its
tool calls aimed at), tool calls, permission cards and who answered them.
:func:`comparison_text` and :func:`comparison_html` render them (plain text is
deterministic apart from the duration; ``durations=False`` leaves it out, for nbval).
"""

from __future__ import annotations

import html
from typing import Any

from ..core.conversation import Permission
from ..core.render_text import answer_label
from .turns import Turn
from .workspace import EDIT_KINDS, paths_of

COLUMNS = ("agent", "stop", "duration", "tokens", "cost", "files changed", "tool calls", "cards")


def comparison(turns: list[Turn], *, durations: bool = True) -> list[dict[str, str]]:
    """One row per turn (text cells, keys :data:`COLUMNS`)."""
    rows = []
    for turn in turns:
        agent = turn.agent
        usage = agent.conversation.usage or {}
        cost = usage.get("cost") or {}
        wt = getattr(agent, "worktree", None)
        if wt is not None and wt.last_stat is not None:
            files = f"{wt.last_stat} ({', '.join(wt.last_stat.paths[:4])})" if wt.last_stat.files else "none"
        else:
            edited = sorted({p for c in turn.tool_calls if c.kind in EDIT_KINDS for p in paths_of(c)})
            files = ", ".join(_short(p, agent.cwd) for p in edited) or "none"
        cards = [i for i in turn.items if isinstance(i, Permission)]
        stop = turn.stop_reason or ("failed" if turn.error else turn.status)
        rows.append({
            "agent": agent.name,
            "stop": stop,
            "duration": (f"{turn.duration:.1f} s" if turn.duration is not None else "—") if durations else "",
            "tokens": f"{usage['used']}/{usage.get('size')}" if usage.get("used") is not None else "—",
            "cost": f"{cost.get('amount')} {cost.get('currency', '')}".strip() if cost else "—",
            "files changed": files,
            "tool calls": str(len(turn.tool_calls)),
            "cards": "; ".join(answer_label(c) for c in cards) or "none",
        })
    return rows


def _short(path: str, cwd: Any) -> str:
    prefix = f"{cwd}/"
    return path[len(prefix):] if path.startswith(prefix) else path


def comparison_text(turns: list[Turn], *, durations: bool = True) -> str:
    rows = comparison(turns, durations=durations)
    cols = [c for c in COLUMNS if durations or c != "duration"]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols} if rows else {c: len(c) for c in cols}
    line = lambda r: "  ".join(r[c].ljust(widths[c]) for c in cols).rstrip()  # noqa: E731
    return "\n".join([line({c: c for c in cols}), *(line(r) for r in rows)])


def comparison_html(turns: list[Turn], *, durations: bool = True) -> str:
    rows = comparison(turns, durations=durations)
    cols = [c for c in COLUMNS if durations or c != "duration"]
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px'>{html.escape(r[c])}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table class='escouade-comparison'><tr>{head}</tr>{body}</table>"
