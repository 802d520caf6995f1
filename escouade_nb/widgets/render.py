"""HTML fragments for the views. Everything the agent sends is escaped here: agent text
is rendered as markdown with raw HTML turned off (so ``<script>`` shows as text) and
markdown-it's link check refuses ``javascript:`` and ``data:`` URLs; code is highlighted by
Pygments (its token classes, coloured by the front-end's stylesheet from JupyterLab's
editor theme variables). No colour is written here: every fragment carries ``esc-``
classes that ``widgets/escouade.css`` styles from JupyterLab's theme variables (with
fallbacks for a page outside JupyterLab: nbconvert, GitHub), so the dark theme and a
live theme switch need nothing from Python.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import hashlib
import html
import re
from collections.abc import Callable, Iterator
from typing import Any

from markdown_it import MarkdownIt

from .._errors import EscouadeError
from ..core.conversation import Plan, ToolCall
from ..core.notebook_diff import NotebookDiff, notebook_diff
from ..core.render_text import (PLAN_MARK, blob_size, block_text, content_text, count_hidden, cut, diff_lines,
                                is_notebook_path, raw_output_text, reveal, terminal_state, tool_input_text)


def _highlight_fence(code: str, lang: str, _attrs: str) -> str:
    """markdown-it's ``highlight`` hook: a fenced block with a language Pygments knows is
    highlighted (escaped by Pygments), else ``""`` (markdown-it escapes it)."""
    if not lang or len(code) > HIGHLIGHT_MAX:
        return ""
    try:
        from pygments.lexers import get_lexer_by_name
        from pygments.util import ClassNotFound
        try:
            lexer = get_lexer_by_name(lang.split()[0])
        except ClassNotFound:
            return ""
        return _pygments(code, lexer, f"language-{esc(lang.split()[0])}")
    except Exception:  # a lexer bug must not lose the reply: markdown-it escapes it instead
        return ""


_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "highlight": _highlight_fence}).enable(
    ["table", "strikethrough"])


def _link_open(self, tokens, idx, options, env):
    """A link opens in a new tab, never in place of the notebook (nor with its opener)."""
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


_md.add_render_rule("link_open", _link_open)


def _image(self, tokens, idx, options, env):
    """An image of the reply shows inline only from a ``data:`` URL (markdown-it allows
    raster types only): a remote one would be fetched by the browser on its own — a way
    out for what the agent read — so it is a link to click instead."""
    token = tokens[idx]
    src = token.attrGet("src") or ""
    if src.startswith("data:image/"):
        return self.image(tokens, idx, options, env)
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    return (f'<a href="{esc(src)}" target="_blank" rel="noopener noreferrer" class="esc-remote-image" '
            f'title="{esc(src)}">🖼 {esc(alt)}</a>')


_md.add_render_rule("image", _image)

HIGHLIGHT_MAX = 20_000
"""A fenced block longer than this (characters) is shown escaped, not highlighted (Pygments
on 60 KB holds the loop ~0.2 s)."""

TOOL_STATUSES = frozenset({"pending", "in_progress", "completed", "failed", "cancelled"})
"""ACP's tool call statuses (and ``cancelled``, the client's): the only ones given a style."""
MAX_DIFF_ROWS = 400
"""A diff shows at most this many lines, then says how many more there are."""
_DIFF_CLASS = {"+": "add", "-": "del", "@": "hunk"}


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


_NOT_PLAIN = re.compile(r'[\\`*_\[\]<>!&#|~\x00]|(?![ \n])\s|^ {0,3}(?:[-+*>=#]|\d{1,9}[.)])|^ {4}| {2,}$',
                        re.M)
"""What makes a block more than plain paragraphs for CommonMark: inline marks, escapes,
entities, raw HTML, a line that opens a list, quote, heading, rule or code block, a hard
break (two spaces at a line's end) — or any whitespace but the space and the line end
(tabs and Unicode spaces, where markdown-it's trimming has rules of its own)."""


def _plain_paragraphs(text: str) -> str | None:
    """The HTML markdown-it gives for ``text`` when it is only plain paragraphs (prose
    without a mark), made without parsing it — most of a reply, at a fraction of the cost;
    None when the text has anything else (then markdown-it renders it)."""
    if _NOT_PLAIN.search(text):
        return None
    out: list[str] = []
    lines: list[str] = []
    for line in text.split("\n") + [""]:  # a blank line (spaces only) ends a paragraph
        if line.strip(" "):  # CommonMark's whitespace here is the space (a tab is not plain: see above)
            lines.append(line.strip(" "))
        elif lines:
            para = "\n".join(lines).strip()  # markdown-it strips a paragraph's ends of any whitespace
            if para:
                out.append("<p>" + para.replace('"', "&quot;") + "</p>\n")
            lines = []
    return "".join(out)


def markdown(text: str) -> str:
    """Markdown to HTML with raw HTML escaped, fenced code highlighted (markdown-it-py;
    plain paragraphs take a shortcut that gives the same HTML)."""
    body = _plain_paragraphs(text)
    return f'<div class="esc-md">{_md.render(text) if body is None else body}</div>'


_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")
_NOT_A_LINE_CUT = re.compile(r"^(?: |\t|\||>|[-+*] |\d{1,9}[.)] )|\|")
"""A line after which a paragraph may not be cut: indented (code, a list item's own lines),
a table's, a quote's, a list item's."""


def split_frozen(text: str, max_tail: int = 4096) -> int:
    """Where the settled part of a streaming markdown text ends: after the last blank
    line that is not inside a fenced code block — text before it renders the same
    whatever arrives next. Fences are told as CommonMark does (a closing fence is of the
    opener's character, at least as long, with nothing after it). When the still-growing
    tail would exceed ``max_tail`` characters with no such line (one endless paragraph),
    it is cut at its last line end outside a fence instead, but never inside a table, a
    list, a quote or indented code — so a long reply is never re-sent whole."""
    cut_at = 0
    line_cut = 0
    fence: str | None = None  # the opening fence's run (``` or ~~~~), while inside one
    pos = 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        bare = line.rstrip("\r\n")
        if fence is None:
            m = _FENCE_OPEN.match(bare)
            if m:
                fence = m.group(1)
                continue
        else:
            stripped = bare.strip(" ")
            if stripped and stripped == stripped[0] * len(stripped) and stripped[0] == fence[0] \
                    and len(stripped) >= len(fence) and len(bare) - len(bare.lstrip(" ")) <= 3:
                fence = None
            continue
        if not line.endswith("\n") or pos >= len(text):
            continue
        if bare.strip() == "":
            cut_at = pos
        elif not _NOT_A_LINE_CUT.search(bare):
            line_cut = pos
    if len(text) - cut_at > max_tail and line_cut > cut_at:
        return line_cut
    return cut_at


def pre(text: str, cls: str = "") -> str:
    return f'<pre class="esc-pre{" " + cls if cls else ""}">{esc(text)}</pre>'


def _diff_rows(lines: list[tuple[str, str]], budget: int) -> list[str]:
    rows = []
    for tag, line in lines[:budget]:  # a huge diff must not freeze the kernel or the browser
        sign = {"@": "", " ": " "}.get(tag, tag)
        rows.append(f'<div class="esc-diff-{_DIFF_CLASS.get(tag, "ctx")}">{esc(sign + line)}</div>')
    return rows


def _more(hidden: int) -> str:
    return f'<div class="esc-diff-more">… {hidden} more lines</div>' if hidden > 0 else ""


def _diff_box(head: str, body: str, cls: str = "esc-diff") -> str:
    return f'<div class="{cls}"><div class="esc-diff-head">{head}</div>{body}</div>'


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
        why = f'<div class="esc-notebook-fallback esc-dim">not shown cell by cell: {esc(nb.error)}</div>'
    lines = diff_lines(old, item.get("newText", ""), path)
    head = f'{"new file" if old is None else "edit"} <b>{esc(path)}</b>'
    return _diff_box(head, why + "".join(_diff_rows(lines, MAX_DIFF_ROWS)) + _more(len(lines) - MAX_DIFF_ROWS))


def unified_diff_html(text: str, budget: int = MAX_DIFF_ROWS) -> str:
    """A unified diff's text (a file pending review: ``engine/review/file_review.py``) as the views'
    diff rows, its ``---``/``+++`` lines left out, at most ``budget`` rows (then how many more)."""
    lines = [(line[:1] if line[:1] in "+-@" else " ", line[1:] if line[:1] in "+- " else line)
             for line in text.splitlines() if not line.startswith(("--- ", "+++ "))]
    return "".join(_diff_rows(lines, budget)) + _more(len(lines) - budget)


def notebook_diff_html(nb: NotebookDiff, *, kernel_notebook: bool = False) -> str:
    """A :class:`~..core.notebook_diff.NotebookDiff`: a head with the summary, then one
    block per touched cell (heading, source diff, details), then the notebook's own
    changes; at most :data:`MAX_DIFF_ROWS` source lines in all."""
    head = (f'{"new notebook" if nb.new_file else "notebook"} <b>{esc(nb.path)}</b> '
            f'<span class="esc-dim">{esc(nb.summary())}</span>')
    if kernel_notebook:
        head += '<div class="esc-kernel-notebook esc-warn">this is the notebook you are in</div>'
    blocks = []
    budget = MAX_DIFF_ROWS
    hidden = 0
    for cell in nb.cells:
        kind = "changed" if cell.moved and cell.kind == "unchanged" else cell.kind
        rows = _diff_rows(list(cell.source), budget)
        budget -= len(rows)
        hidden += len(cell.source) - len(rows)
        if cell.kind in ("added", "removed") and not cell.source:
            rows.append('<div class="esc-dim">(empty)</div>')
        details = (f'<div class="esc-cell-details esc-dim">{esc("; ".join(cell.details))}</div>'
                   if cell.details else "")
        blocks.append(f'<div class="esc-cell esc-cell-{cell.kind}"><div class="esc-cell-head esc-cell-{kind}">'
                      f'{esc(cell.heading())}</div>{"".join(rows)}{details}</div>')
    notes = "".join(f'<div class="esc-cell esc-dim">{esc(p)}</div>' for p in nb.metadata)
    return _diff_box(head, "".join(blocks) + _more(hidden) + notes, "esc-diff esc-notebook-diff")


# -- ANSI colours (SGR) of terminal output ------------------------------------------------------
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_OTHER_ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-ln-z]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Za-z0-9]|[=>])")


def ansi_html(text: str) -> str:
    """Terminal output with its SGR colours (ECMA-48 ``ESC [ … m``: bold, the 8 colours
    and their bright forms, foreground and background; 256-colour and RGB codes are
    read and dropped) as escaped text in ``esc-fg-N`` / ``esc-bg-N`` / ``esc-bold``
    spans; other escape sequences (cursor moves, titles) are removed."""
    text = _OTHER_ESCAPES.sub("", text)
    out: list[str] = []
    fg: int | None = None
    bg: int | None = None
    bold = False
    pos = 0

    def emit(chunk: str) -> None:
        if not chunk:
            return
        classes = [c for c in (f"esc-fg-{fg}" if fg is not None else "", f"esc-bg-{bg}" if bg is not None else "",
                               "esc-bold" if bold else "") if c]
        out.append(f'<span class="{" ".join(classes)}">{esc(chunk)}</span>' if classes else esc(chunk))

    for m in _SGR.finditer(text):
        emit(text[pos:m.start()])
        pos = m.end()
        codes = [int(c) if c.isdigit() else 0 for c in m.group(1).split(";")] if m.group(1) else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                fg = bg = None
                bold = False
            elif c == 1:
                bold = True
            elif c == 22:
                bold = False
            elif 30 <= c <= 37:
                fg = c - 30
            elif 90 <= c <= 97:
                fg = c - 90 + 8
            elif c == 39:
                fg = None
            elif 40 <= c <= 47:
                bg = c - 40
            elif 100 <= c <= 107:
                bg = c - 100 + 8
            elif c == 49:
                bg = None
            elif c in (38, 48) and i + 1 < len(codes):  # 256-colour (5;n) or RGB (2;r;g;b): not shown
                i += 2 if codes[i + 1] == 5 else 4
            i += 1
    emit(text[pos:])
    return "".join(out)


def terminal_html(terminal_id: str, term: dict | None, command: str | None = None) -> str:
    """A terminal embedded in a tool call: ``$ command args``, its live output (ANSI
    colours shown), and once it ended, how. The terminal id is only a tooltip."""
    command = (term or {}).get("command") or command
    head = f'<span class="esc-term-cmd">$ {esc(command)}</span>' if command else '<span class="esc-term-cmd">$</span>'
    if term is None:
        return f'<div class="esc-terminal" title="terminal {esc(terminal_id)}">{head}</div>'
    state = terminal_state(term)
    tail = (f'<span class="esc-term-state esc-dim">{esc(state)}'
            f'{" · output truncated (newest kept)" if term.get("truncated") else ""}</span>')
    output = cut(term.get("output", ""), 8000)
    body = f'<pre class="esc-pre esc-term-out">{ansi_html(output)}</pre>' if output else ""
    return f'<div class="esc-terminal" title="terminal {esc(terminal_id)}">{head} {tail}{body}</div>'


def _pygments(code: str, lexer: Any, extra: str = "") -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="esc-pre esc-code {extra}">{body}</pre>'


def code_html(code: str, language: str = "python") -> str:
    """``code`` highlighted by Pygments (token classes; escaped by Pygments)."""
    from pygments.lexers import get_lexer_by_name

    return _pygments(cut(code), get_lexer_by_name(language))


def _hidden_mark(ch: str) -> str:
    return (f'<span class="esc-hidden-char" title="an invisible or direction-changing character">'
            f'⟨U+{ord(ch):04X}⟩</span>')


def _line_ends(code: str) -> int:
    """Line ends as Python counts them: \\n, \\r\\n and a lone \\r (not U+2028: shown as hidden)."""
    return code.count("\n") + code.count("\r") - code.count("\r\n")


def _code_box(code: str, lines: int, hidden: int, body: str) -> str:
    lines += 0 if not code or code.endswith(("\n", "\r")) else 1
    warn = (f' · <b class="esc-hidden-count">{hidden:,} invisible or direction-changing character'
            f'{"s" if hidden != 1 else ""}, shown as ⟨U+…⟩</b>') if hidden else ""
    size = (f'<div class="esc-code-size esc-dim esc-small">the whole code: {lines:,} line{"s" if lines != 1 else ""}'
            f', {len(code):,} character{"s" if len(code) != 1 else ""}{warn}</div>')
    return f'{size}<div class="esc-code-all">{body}</div>'


def _run_code_now(code: str) -> str:
    from pygments.lexers import get_lexer_by_name

    body = _pygments(code, get_lexer_by_name("python")) if len(code) <= HIGHLIGHT_MAX else pre(code, "esc-code")
    # Pygments and esc() escape <, > and &, not the characters that hide or reorder text: shown as such
    body, hidden = reveal(body, _hidden_mark)
    return _code_box(code, _line_ends(code), hidden, body)


def run_code_html(code: str) -> str:
    """The code a "Run code in the kernel" card asks to run: ALL of it — never cut, what
    is approved is what runs — highlighted (escaped, not highlighted, past
    :data:`HIGHLIGHT_MAX` characters; the hidden characters marked either way), in a box
    that scrolls past about 24 lines, under a line giving its size (lines, characters).
    Past :data:`DRAW_AT_ONCE` characters, inside a running loop, it is drawn in pieces
    (:class:`NotDrawnYet`, :func:`draw_later`)."""
    return _drawn(code, "code", _run_code_now)


# -- drawing big texts in pieces ---------------------------------------------------------------------
DRAW_AT_ONCE = 256 * 1024
"""Characters of code or input a card draws at once (~5 ms). A longer one is drawn in pieces of this
size, one per turn of the kernel's loop (:func:`draw_later`): meanwhile the card says it is being drawn
and shows no button (nothing is approved unseen); once drawn it shows the text whole."""
_DRAWN_KEPT = 8
_drawn_html: collections.OrderedDict[tuple[int, str], tuple[str, str]] = collections.OrderedDict()
_drawing: dict[tuple[int, str], asyncio.Task[None]] = {}


class NotDrawnYet(EscouadeError):
    """A text too long to draw at once, not drawn yet: the view shows that it is being drawn and
    calls :func:`draw_later`. ``text``, ``kind`` (``code``: a run card's code; ``input``: a tool's input)."""

    def __init__(self, text: str, kind: str) -> None:
        super().__init__(f"{len(text):,} characters of {kind} being drawn")
        self.text, self.kind = text, kind


_saved: contextvars.ContextVar[bool] = contextvars.ContextVar("escouade_saved_form", default=False)


@contextlib.contextmanager
def saved_form() -> Iterator[None]:
    """Draw a saved form (a view's static copy, redrawn at each status change, kept in the notebook):
    a code or input past :data:`DRAW_AT_ONCE` characters is shown by its start, its whole length and
    its SHA-256 — as the transcript keeps code past 100,000 characters — not whole: the live card,
    where it is answered, shows it whole."""
    token = _saved.set(True)
    try:
        yield
    finally:
        _saved.reset(token)


def _saved_cut(text: str, kind: str, drawn: tuple[str, str, int, int] | None = None) -> str:
    """A saved form's ``text`` past :data:`DRAW_AT_ONCE`: its first piece, then its length and SHA-256
    (code: in its box, with its lines and hidden characters counted). ``drawn``: (the first piece's
    HTML, the SHA-256, lines, hidden), when :func:`_draw` counted them piece by piece."""
    head = next(_pieces(text))
    if drawn is None:
        shown = esc(head)
        if kind == "code":
            shown = reveal(shown, _hidden_mark)[0]
        sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        drawn = (shown, sha, _line_ends(text), count_hidden(text) if kind == "code" else 0)
    shown, sha, lines, hidden = drawn
    note = (f'<div class="esc-saved-cut esc-dim esc-small">… {len(text) - len(head):,} more characters are not in '
            f'this saved form (the whole {esc(kind)}: {len(text):,} characters, SHA-256 {sha}); its live card '
            f'showed it whole</div>')
    if kind != "code":
        return f'<pre class="esc-pre">{shown}</pre>' + note
    return _code_box(text, lines, hidden, f'<pre class="esc-pre esc-code">{shown}</pre>' + note)


def _drawn(text: str, kind: str, now: Callable[[str], str]) -> str:
    """``now(text)``, or what :func:`draw_later` drew of this very text; :class:`NotDrawnYet` for a long
    text not drawn yet while a loop runs (with no loop running nothing waits for it: drawn at once).
    In a saved form (:func:`saved_form`) a long text is cut, said so."""
    if len(text) <= DRAW_AT_ONCE:
        return now(text)
    if _saved.get():
        kind, now = kind + " saved", lambda t, k=kind: _saved_cut(t, k)  # type: ignore[misc]
    hit = _drawn_html.get((id(text), kind))
    if hit is not None and hit[0] is text:
        _drawn_html.move_to_end((id(text), kind))
        return hit[1]
    if _saved.get():
        drawn = now(text)
        _keep((id(text), kind), text, drawn)
        return drawn
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return now(text)
    raise NotDrawnYet(text, kind)


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about :data:`DRAW_AT_ONCE` characters, never between \\r and \\n."""
    at = 0
    while at < len(text):
        end = min(len(text), at + DRAW_AT_ONCE)
        if text[end - 1:end] == "\r" and text[end:end + 1] == "\n":
            end += 1
        yield text[at:end]
        at = end


async def _draw(text: str, kind: str) -> None:
    """Draw ``text`` (``kind`` ``code`` or ``input``) a piece per turn of the loop: the card whole, and
    its saved form's cut (:func:`_saved_cut`) from the same pieces — the SHA-256 and counts too."""
    parts: list[str] = []
    lines = hidden = 0
    sha = hashlib.sha256()
    for piece in _pieces(text):
        shown = esc(piece)
        if kind == "code":
            shown, n = reveal(shown, _hidden_mark)
            hidden += n
            lines += _line_ends(piece)
        sha.update(piece.encode("utf-8", "surrogatepass"))
        parts.append(shown)
        await asyncio.sleep(0)  # one piece per turn of the loop
    if kind == "code":
        html_ = _code_box(text, lines, hidden, f'<pre class="esc-pre esc-code">{"".join(parts)}</pre>')
    else:
        html_ = f'<pre class="esc-pre">{"".join(parts)}</pre>'
    _keep((id(text), kind + " saved"), text, _saved_cut(text, kind, (parts[0], sha.hexdigest(), lines, hidden)))
    _keep((id(text), kind), text, html_)


def _keep(key: tuple[int, str], text: str, drawn: str) -> None:
    _drawn_html[key] = (text, drawn)
    while len(_drawn_html) > _DRAWN_KEPT:
        _drawn_html.popitem(last=False)


def draw_later(pending: NotDrawnYet, then: Callable[[], object]) -> None:
    """Draw ``pending``'s text in pieces (one task per text, shared by the views that wait for it),
    then call ``then()`` (the view draws its item again: now at once). The task ends by itself after
    one turn of the loop per piece; its own registry holds it until then."""
    key = (id(pending.text), pending.kind)
    task = _drawing.get(key)
    if task is None:
        task = _drawing[key] = asyncio.get_running_loop().create_task(_draw(pending.text, pending.kind))
        task.add_done_callback(lambda _t: _drawing.pop(key, None))
    task.add_done_callback(lambda t: None if t.cancelled() else then())


INLINE_MEDIA_MAX = 4 * 1024 * 1024
"""Images and audio bigger than this (bytes) are named, not shown inline."""
_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})  # no SVG: it can script


def block_html(block: dict[str, Any]) -> str:
    """A non-text ACP content block as safe HTML: an image inline (raster types, at most
    :data:`INLINE_MEDIA_MAX`, height-capped), audio with controls, an http(s) link as a
    link, a ``file://`` link as a link the front-end opens in JupyterLab (its path in
    ``data-open``), an embedded text as a collapsed block; anything else as
    :func:`block_text` says."""
    kind = block.get("type")
    label = esc(block_text(block).split("\n", 1)[0])
    data = block.get("data")
    if kind in ("image", "audio") and isinstance(data, str) and blob_size(data) <= INLINE_MEDIA_MAX:
        mime = str(block.get("mimeType") or "")
        if kind == "image" and mime in _IMAGE_MIMES:
            return (f'<div class="esc-block"><img class="esc-img" src="data:{esc(mime)};base64,{esc(data)}" '
                    f'alt="{label}" title="{label}"></div>')
        if kind == "audio" and mime.startswith("audio/"):
            return (f'<div class="esc-block"><audio controls src="data:{esc(mime)};base64,{esc(data)}" '
                    f'title="{label}"></audio></div>')
    if kind == "resource_link":
        uri = str(block.get("uri") or "")
        name = block.get("title") or block.get("name") or uri
        if uri.startswith(("http://", "https://")):
            return (f'<div class="esc-block">🔗 <a href="{esc(uri)}" target="_blank" rel="noopener noreferrer">'
                    f'{esc(name)}</a></div>')
        if uri.startswith("file://"):
            from urllib.parse import unquote, urlparse

            path = unquote(urlparse(uri).path)
            return (f'<div class="esc-block">📄 <a class="esc-open" href="#" data-open="{esc(path)}" '
                    f'title="{esc(path)}">{esc(name)}</a></div>')
    if kind == "resource":
        res = block.get("resource") or {}
        if isinstance(res.get("text"), str):
            return f'<details class="esc-block"><summary>{label}</summary>{pre(cut(res["text"]))}</details>'
    return f'<div class="esc-block esc-dim">{label}</div>'


def _terminal_command(call: ToolCall) -> str | None:
    """``command args`` from a tool call's raw input, when it carries one."""
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    cmd = raw.get("command")
    if isinstance(cmd, list):
        return " ".join(map(str, cmd))
    if isinstance(cmd, str):
        args = raw.get("args")
        return " ".join([cmd, *map(str, args)]) if isinstance(args, list) else cmd
    return None


def tool_body_html(call: ToolCall, *, show_input: bool = True, content: list[dict[str, Any]] | None = None,
                   outputs: bool = True) -> str:
    """The body of a tool card: input (unless a diff or a terminal shows it), outputs,
    diffs, terminals. Code the kernel's ``run_code`` is given is shown whole and
    highlighted (:func:`run_code_html`), not as JSON; a terminal as ``$ command args`` with
    its output. ``content`` draws those items instead of ``call.content``; ``outputs``
    False leaves out ``rawOutput``."""
    parts = []
    items = call.content if content is None else content
    code = call.raw_input.get("code") if isinstance(call.raw_input, dict) else None
    if call.mcp is not None and call.mcp[1] == "execute_cell" and isinstance(call.raw_input, dict):
        code = call.raw_input.get("source")  # the cell's whole source, as the card asks to run it
    terminal = any(c.get("type") == "terminal" for c in call.content)
    diffs = any(c.get("type") == "diff" for c in call.content)
    if not show_input:
        pass
    elif call.mcp is not None and call.mcp[1] in ("run_code", "execute_cell") and isinstance(code, str):
        parts.append(f'<div class="esc-tool-input">{run_code_html(code)}</div>')
    elif not diffs and not terminal:  # a diff or a terminal already shows it
        inp = tool_input_text(call.raw_input)
        if inp:
            if "\n" in inp or len(inp) > 120:
                parts.append(f'<details class="esc-tool-input"><summary>input</summary>{_drawn(inp, "input", pre)}'
                             f'</details>')
            else:
                parts.append(f'<div class="esc-tool-input">{pre(inp)}</div>')
    for c in items:
        if c.get("type") == "diff":
            parts.append(diff_html(c, call.kernel_notebook))
        elif c.get("type") == "terminal":
            tid = str(c.get("terminalId"))
            parts.append(terminal_html(tid, call.terminals.get(tid), _terminal_command(call)))
        elif c.get("type") == "content" and (c.get("content") or {}).get("type") not in (None, "text"):
            parts.append(block_html(c["content"]))
        else:
            parts.append(f'<div class="esc-tool-output">{pre(cut(content_text(c)))}</div>')
    out = raw_output_text(call) if outputs else ""
    if out:
        parts.append(f'<div class="esc-tool-output">{pre(out)}</div>')
    return "".join(parts)


TASK_WORDS = {"running": "running as a task", "done": "task done", "interrupted": "task interrupted",
              "cancelled": "task cancelled by the agent", "ended": "task ended: the agent's session closed",
              "lost": "task: no end on record: its kernel or its agent's process ended while it ran"}
"""What a ``run_code`` left running as a task (:attr:`ToolCall.kernel_task`) says of its state."""
TASK_TONES = {"running": "in_progress", "done": "completed", "interrupted": "cancelled", "cancelled": "cancelled",
              "ended": "cancelled", "lost": "cancelled"}


def task_words(task: dict[str, Any], live: bool = True) -> str:
    """``running as a task`` (``running as a task when saved`` in a saved form, ``live`` False),
    ``task interrupted by you``, ``task done``…"""
    state = str(task.get("state"))
    if state == "running" and not live:
        return "running as a task when saved"
    word = TASK_WORDS.get(state, f"task {state}")
    return word + (f" by {task['by']}" if state == "interrupted" and task.get("by") else "")


def task_html(task: dict[str, Any], key: str | None) -> str:
    """A ``run_code`` left running as a task: its state, the last lines it printed, and while it
    runs an **Interrupt** button (``key``: the tool call's, None in a static form: no button)."""
    state = str(task.get("state"))
    live = key is not None
    head = (f'<span class="esc-status esc-st-{esc(TASK_TONES.get(state, "other"))}">● '
            f'{esc(task_words(task, live))}</span> <span class="esc-dim">{esc(task.get("task_id", ""))}</span>')
    if live and state == "running":
        head += (f' <button class="esc-btn esc-reject" data-act="interrupt_task" data-key="{esc(key)}" '
                 f'title="Stop this run (a KeyboardInterrupt in its code), as the agent\'s task_cancel would">'
                 f'Interrupt</button>')
    output = str(task.get("output") or "")
    cut_note = '<div class="esc-dim">… (earlier lines not shown)</div>' if task.get("cut") and output else ""
    body = f'{cut_note}<pre class="esc-pre esc-task-out">{ansi_html(output)}</pre>' if output else ""
    return f'<div class="esc-task" data-task-state="{esc(state)}">{head}{body}</div>'


def asked_body_html(call: ToolCall, asked: ToolCall, answered: bool) -> str:
    """The body of a tool card that carries a permission: what was asked — ``asked``, the
    frozen request (its input or code, diffs, texts) — then the terminals it runs (ours:
    their output is the client's), and, once ``answered``, what the live ``call``
    reported since (outputs, diffs the request did not have, its ``rawOutput``). While
    the card waits, nothing the agent sent after asking is drawn."""
    body = tool_body_html(asked, content=[c for c in asked.content if c.get("type") != "terminal"], outputs=False)
    later = [c for c in call.content if c.get("type") == "terminal" or (answered and c not in asked.content)]
    if later or answered:
        body += tool_body_html(call, show_input=False, content=later, outputs=answered)
    return body


def tool_header_html(call: ToolCall, status_word: str | None = None, tone: str | None = None,
                     asked: ToolCall | None = None) -> str:
    """The head line of a tool card: ``● status`` (``status_word`` when the card knows
    better than the agent's status: "rejected by you"), title, kind — those of ``asked``,
    the frozen request, when the card carries a permission — and the client's note when
    it ran without asking."""
    named = asked if asked is not None else call
    status = call.shown_status
    word = status_word or {"in_progress": "running"}.get(status, str(status))
    if status not in TOOL_STATUSES:  # an agent's own word is shown as it is, but styled as nothing known
        status = "other"
    return (f'<div class="esc-tool-header"><span class="esc-status esc-st-{esc(tone or status)}">● {esc(word)}</span> '
            f'<b class="esc-title">{esc(named.title or "a tool call")}</b> '
            f'<span class="esc-kind esc-dim" title="{esc(call.tool_call_id)}">{esc(named.kind or "other")}</span>'
            + (f'<div class="esc-not-asked esc-dim">{esc(call.not_asked)}</div>' if call.not_asked else "") + '</div>')


def plan_html(plan: Plan) -> str:
    rows = []
    for e in plan.entries:
        mark = {"[ ]": "☐", "[~]": "◐", "[x]": "☑"}.get(PLAN_MARK.get(e.get("status") or "", ""), "?")
        done = " esc-done" if e.get("status") == "completed" else ""
        rows.append(f'<li class="esc-plan-entry{done}">{mark} {esc(e.get("content", ""))}'
                    f' <span class="esc-dim esc-small">{esc(e.get("priority", ""))}</span></li>')
    body = f'<ul class="esc-plan-list">{"".join(rows)}</ul>' if rows else ""
    if plan.markdown:
        body += markdown(plan.markdown)
    title = "Plan" + (" (removed)" if plan.removed else "")
    return f'<div class="esc-plan"><b>{title}</b>{body}</div>'
