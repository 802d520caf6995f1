"""HTML fragments for the views. Everything the agent sends is escaped here: agent text
is rendered as markdown with raw HTML turned off (so ``<script>`` shows as text) and
markdown-it's link check refuses ``javascript:`` and ``data:`` URLs."""

from __future__ import annotations

import html
from typing import Any

from markdown_it import MarkdownIt

from ..core.conversation import Plan, ToolCall
from ..core.notebook_diff import NotebookDiff, notebook_diff
from ..core.render_text import (PLAN_MARK, blob_size, block_text, content_text, cut, diff_lines, is_notebook_path, raw_output_text,
                                terminal_state, tool_input_text)

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


def _diff_rows(lines: list[tuple[str, str]], budget: int) -> list[str]:
    rows = []
    for tag, line in lines[:budget]:  # a huge diff must not freeze the kernel or the browser
        color = {"+": "#e6ffec", "-": "#ffebe9", "@": "#ddf4ff"}.get(tag, "transparent")
        sign = {"@": "", " ": " "}.get(tag, tag)
        rows.append(f'<div class="escouade-diff-{_DIFF_CLASS.get(tag, "ctx")}" '
                    f'style="background:{color};white-space:pre-wrap">{esc(sign + line)}</div>')
    return rows


def _more(hidden: int) -> str:
    return f'<div class="escouade-diff-more" style="color:#8a8a8a">… {hidden} more lines</div>' if hidden > 0 else ""


def _diff_box(head: str, body: str, cls: str = "escouade-diff") -> str:
    return (f'<div class="{cls}" style="{MONO};line-height:1.4;border:1px solid #d0d7de;'
            f'border-radius:4px;margin:2px 0">'
            f'<div style="padding:2px 6px;background:#f6f8fa;border-bottom:1px solid #d0d7de">{head}</div>{body}</div>')


def diff_html(item: dict[str, Any], kernel_notebook: str | None = None) -> str:
    """An ACP ``diff`` content as added/removed lines (a missing oldText is a new file);
    a notebook's (``.ipynb``) cell by cell, or as text saying why not. ``kernel_notebook``:
    the path of the notebook the kernel runs, when known (its diff says so)."""
    path = item.get("path", "")
    old = item.get("oldText")
    why = ""
    if is_notebook_path(path):
        nb = notebook_diff(old, item.get("newText", ""), path)
        if nb.error is None:
            return notebook_diff_html(nb, kernel_notebook=path == kernel_notebook)
        why = (f'<div class="escouade-notebook-fallback" style="padding:2px 6px;color:#57606a">'
               f'not shown cell by cell: {esc(nb.error)}</div>')
    lines = diff_lines(old, item.get("newText", ""), path)
    head = f'{"new file" if old is None else "edit"} <b>{esc(path)}</b>'
    return _diff_box(head, why + "".join(_diff_rows(lines, MAX_DIFF_ROWS)) + _more(len(lines) - MAX_DIFF_ROWS))


_CELL_COLOR = {"added": "#1a7f37", "removed": "#cf222e", "changed": "#9a6700", "unchanged": "#57606a"}


def notebook_diff_html(nb: NotebookDiff, *, kernel_notebook: bool = False) -> str:
    """A :class:`~..core.notebook_diff.NotebookDiff`: a head with the summary, then one
    block per touched cell (heading, source diff, details), then the notebook's own
    changes; at most :data:`MAX_DIFF_ROWS` source lines in all."""
    head = (f'{"new notebook" if nb.new_file else "notebook"} <b>{esc(nb.path)}</b> '
            f'<span style="color:#57606a">{esc(nb.summary())}</span>')
    if kernel_notebook:
        head += ('<div class="escouade-kernel-notebook" style="color:#bf8700;font-weight:600">'
                 'this is the notebook you are in</div>')
    blocks = []
    budget = MAX_DIFF_ROWS
    hidden = 0
    for cell in nb.cells:
        color = _CELL_COLOR["changed" if cell.moved and cell.kind == "unchanged" else cell.kind]
        rows = _diff_rows(list(cell.source), budget)
        budget -= len(rows)
        hidden += len(cell.source) - len(rows)
        if cell.kind in ("added", "removed") and not cell.source:
            rows.append('<div style="color:#8a8a8a">(empty)</div>')
        details = (f'<div class="escouade-cell-details" style="color:#57606a">{esc("; ".join(cell.details))}</div>'
                   if cell.details else "")
        blocks.append(f'<div class="escouade-cell escouade-cell-{cell.kind}" style="border-top:1px solid #d0d7de;'
                      f'padding:1px 0"><div style="padding:0 6px;color:{color};font-weight:600">'
                      f'{esc(cell.heading())}</div>{"".join(rows)}{details}</div>')
    notes = "".join(f'<div style="padding:0 6px;color:#57606a;border-top:1px solid #d0d7de">{esc(p)}</div>'
                    for p in nb.metadata)
    return _diff_box(head, "".join(blocks) + _more(hidden) + notes, "escouade-diff escouade-notebook-diff")


def terminal_html(terminal_id: str, term: dict | None) -> str:
    """A terminal embedded in a tool call: its live output and, once it ended, how."""
    if term is None:
        return pre(f"(terminal {terminal_id})")
    head = f'<div style="color:#57606a;font-size:11px">terminal {esc(terminal_id)} · {esc(terminal_state(term))}' \
           f'{" · output truncated (newest kept)" if term.get("truncated") else ""}</div>'
    return f'<div class="escouade-terminal">{head}{pre(cut(term.get("output", ""), 8000))}</div>'


def code_html(code: str, language: str = "python") -> str:
    """``code`` highlighted by Pygments (inline styles: no stylesheet needed; escaped)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
    body = highlight(cut(code), get_lexer_by_name(language), formatter)
    return f'<pre class="escouade-code" style="margin:2px 0;white-space:pre-wrap">{body}</pre>'


INLINE_MEDIA_MAX = 4 * 1024 * 1024
"""Images and audio bigger than this (bytes) are named, not shown inline."""
_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})  # no SVG: it can script


def block_html(block: dict[str, Any]) -> str:
    """A non-text ACP content block as safe HTML: an image inline (raster types, at most
    :data:`INLINE_MEDIA_MAX`, height-capped), audio with controls, an http(s) link as a
    link (``file://`` and others as their text: the browser could not open them), an
    embedded text as a collapsed block; anything else as :func:`block_text` says."""
    kind = block.get("type")
    label = esc(block_text(block).split("\n", 1)[0])
    data = block.get("data")
    if kind in ("image", "audio") and isinstance(data, str) and blob_size(data) <= INLINE_MEDIA_MAX:
        mime = str(block.get("mimeType") or "")
        if kind == "image" and mime in _IMAGE_MIMES:
            return (f'<div class="escouade-block"><img src="data:{esc(mime)};base64,{esc(data)}" alt="{label}" '
                    f'title="{label}" style="max-width:100%;max-height:360px;border-radius:4px"></div>')
        if kind == "audio" and mime.startswith("audio/"):
            return (f'<div class="escouade-block"><audio controls src="data:{esc(mime)};base64,{esc(data)}" '
                    f'title="{label}"></audio></div>')
    if kind == "resource_link":
        uri = str(block.get("uri") or "")
        if uri.startswith(("http://", "https://")):
            name = block.get("title") or block.get("name") or uri
            return (f'<div class="escouade-block">🔗 <a href="{esc(uri)}" target="_blank" rel="noopener noreferrer">'
                    f'{esc(name)}</a></div>')
    if kind == "resource":
        res = block.get("resource") or {}
        if isinstance(res.get("text"), str):
            return (f'<details class="escouade-block"><summary>{label}</summary>'
                    f'{pre(cut(res["text"]))}</details>')
    return f'<div class="escouade-block" style="color:#8a8a8a">{label}</div>'


def tool_body_html(call: ToolCall) -> str:
    """The body of a tool card: input (unless a diff shows it), outputs, diffs, terminals.
    Code the kernel's ``run_code`` is given is shown highlighted, not as JSON."""
    parts = []
    code = call.raw_input.get("code") if isinstance(call.raw_input, dict) else None
    if call.mcp is not None and call.mcp[1] == "run_code" and isinstance(code, str):
        parts.append(f'<div class="escouade-tool-input">{code_html(code)}</div>')
        inp = ""
    else:
        inp = "" if call.diffs else tool_input_text(call.raw_input)  # a diff already shows what is written
    if inp:
        parts.append(f'<div class="escouade-tool-input">{pre(inp)}</div>')
    for c in call.content:
        if c.get("type") == "diff":
            parts.append(diff_html(c, call.kernel_notebook))
        elif c.get("type") == "terminal":
            tid = str(c.get("terminalId"))
            parts.append(terminal_html(tid, call.terminals.get(tid)))
        elif c.get("type") == "content" and (c.get("content") or {}).get("type") not in (None, "text"):
            parts.append(block_html(c["content"]))
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
            f'<span style="color:#8a8a8a">{esc(call.kind or "other")}</span>'
            + (f'<div class="escouade-not-asked" style="color:#8a8a8a;font-size:11px">{esc(call.not_asked)}</div>'
               if call.not_asked else "") + '</div>')


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
