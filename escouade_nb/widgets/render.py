"""HTML fragments for the views. Everything the agent sends is escaped here: agent text
is rendered as markdown with raw HTML turned off (so ``<script>`` shows as text) and
markdown-it's link check refuses ``javascript:`` and ``data:`` URLs."""

from __future__ import annotations

import html
from typing import Any

from markdown_it import MarkdownIt

from ..core.conversation import Plan, ToolCall
from ..core.render_text import PLAN_MARK, content_text, cut, diff_lines, raw_output_text, terminal_state, tool_input_text

_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])

STATUS_COLOR = {
    "pending": "#8a8a8a", "in_progress": "#1f6feb", "completed": "#1a7f37", "failed": "#cf222e",
    "cancelled": "#8a8a8a",
}
_DIFF_CLASS = {"+": "add", "-": "del", "@": "hunk"}
MAX_DIFF_ROWS = 400
"""A diff shows at most this many lines, then says how many more there are."""
MONO = "font-family:var(--jp-code-font-family,monospace);font-size:12px"


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def markdown(text: str) -> str:
    """Markdown to HTML with raw HTML escaped."""
    return f'<div style="line-height:1.5">{_md.render(text)}</div>'


def split_frozen(text: str, max_tail: int = 4096) -> int:
    """Where the settled part of a streaming markdown text ends: after the last blank
    line that is not inside a fenced code block — text before it renders the same
    whatever arrives next. When the still-growing tail would exceed ``max_tail``
    characters with no such line (one endless paragraph), it is cut at its last line
    end outside a fence instead, so a long reply is never re-sent whole."""
    cut_at = 0
    line_cut = 0
    in_fence = False
    pos = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        pos += len(line)
        if in_fence or not line.endswith("\n") or pos >= len(text):
            continue
        line_cut = pos
        if line.strip() == "":
            cut_at = pos
    if len(text) - cut_at > max_tail and line_cut > cut_at:
        return line_cut
    return cut_at


def pre(text: str, style: str = "") -> str:
    return (f'<pre style="{MONO};line-height:1.4;white-space:pre-wrap;margin:2px 0;padding:4px 6px;'
            f'background:var(--jp-layout-color2,#f6f8fa);border-radius:4px;{style}">{esc(text)}</pre>')


def diff_html(item: dict[str, Any]) -> str:
    """An ACP ``diff`` content as added/removed lines (a missing oldText is a new file)."""
    path = item.get("path", "")
    old = item.get("oldText")
    rows = []
    lines = diff_lines(old, item.get("newText", ""), path)
    for tag, line in lines[:MAX_DIFF_ROWS]:  # a huge diff must not freeze the kernel or the browser
        color = {"+": "#e6ffec", "-": "#ffebe9", "@": "#ddf4ff"}.get(tag, "transparent")
        sign = {"@": "", " ": " "}.get(tag, tag)
        rows.append(f'<div class="escouade-diff-{_DIFF_CLASS.get(tag, "ctx")}" '
                    f'style="background:{color};white-space:pre-wrap">{esc(sign + line)}</div>')
    head = "new file" if old is None else "edit"
    hidden = len(lines) - MAX_DIFF_ROWS
    more = f'<div class="escouade-diff-more" style="color:#8a8a8a">… {hidden} more lines</div>' if hidden > 0 else ""
    return (f'<div class="escouade-diff" style="{MONO};line-height:1.4;border:1px solid #d0d7de;'
            f'border-radius:4px;margin:2px 0">'
            f'<div style="padding:2px 6px;background:#f6f8fa;border-bottom:1px solid #d0d7de">{head} '
            f'<b>{esc(path)}</b></div>{"".join(rows)}'
            f'{more}</div>')


def terminal_html(terminal_id: str, term: dict | None) -> str:
    """A terminal embedded in a tool call: its live output and, once it ended, how."""
    if term is None:
        return pre(f"(terminal {terminal_id})")
    head = f'<div style="color:#57606a;font-size:11px">terminal {esc(terminal_id)} · {esc(terminal_state(term))}' \
           f'{" · output truncated (newest kept)" if term.get("truncated") else ""}</div>'
    return f'<div class="escouade-terminal">{head}{pre(cut(term.get("output", ""), 8000))}</div>'


def tool_body_html(call: ToolCall) -> str:
    """The body of a tool card: input (unless a diff shows it), outputs, diffs, terminals."""
    parts = []
    inp = "" if call.diffs else tool_input_text(call.raw_input)  # a diff already shows what is written
    if inp:
        parts.append(f'<div class="escouade-tool-input">{pre(inp)}</div>')
    for c in call.content:
        if c.get("type") == "diff":
            parts.append(diff_html(c))
        elif c.get("type") == "terminal":
            tid = str(c.get("terminalId"))
            parts.append(terminal_html(tid, call.terminals.get(tid)))
        else:
            parts.append(f'<div class="escouade-tool-output">{pre(cut(content_text(c)))}</div>')
    out = raw_output_text(call)
    if out:
        parts.append(f'<div class="escouade-tool-output">{pre(out)}</div>')
    return "".join(parts)


def tool_header_html(call: ToolCall) -> str:
    status = call.shown_status
    color = STATUS_COLOR.get(status, "#8a8a8a")
    return (f'<div class="escouade-tool-header"><span style="color:{color};font-weight:600">● {esc(status)}</span> '
            f'<b>{esc(call.title or call.tool_call_id)}</b> '
            f'<span style="color:#8a8a8a">{esc(call.kind or "other")}</span></div>')


def plan_html(plan: Plan) -> str:
    rows = []
    for e in plan.entries:
        mark = {"[ ]": "☐", "[~]": "◐", "[x]": "☑"}.get(PLAN_MARK.get(e.get("status"), ""), "?")
        style = "text-decoration:line-through;color:#8a8a8a" if e.get("status") == "completed" else ""
        rows.append(f'<li style="list-style:none;{style}">{mark} {esc(e.get("content", ""))}'
                    f' <span style="color:#8a8a8a;font-size:11px">{esc(e.get("priority", ""))}</span></li>')
    body = f'<ul style="margin:2px 0;padding-left:8px">{"".join(rows)}</ul>'
    if plan.markdown:
        body += markdown(plan.markdown)
    title = "Plan" + (" (removed)" if plan.removed else "")
    return f'<div class="escouade-plan"><b>{title}</b>{body}</div>'
