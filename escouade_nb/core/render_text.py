"""Plain-text renders of conversation items: deterministic, for terminals, reprs and nbval.

Widgets use the same helpers (``diff_lines``, ``tool_input_text``) so that the text and
the HTML views say the same thing.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

from .conversation import Compaction, Item, Message, Notice, Permission, Plan, Question, Subagent, ToolCall, Unknown
from .notebook_diff import notebook_diff
from .plans import visible_text
from .text_diff import diff_lines, is_notebook_path, lines_of

MAX_INPUT_CHARS = 2000
"""Tool inputs and outputs longer than this are cut in views (characters)."""

_VERB = {
    "allow_once": "Allowed once",
    "allow_always": "Always allowed",
    "reject_once": "Rejected",
    "reject_always": "Always rejected",
}
"""What an option's kind says, used only where its name is silent (see :func:`answer_label`)."""

_PLAIN_NAMES = {
    "allow_once": {"allow once", "allow"},
    "allow_always": {"always allow", "allow always"},
    "reject_once": {"reject", "reject once", "deny"},
    "reject_always": {"always reject", "reject always", "always deny"},
}
"""Option names that say what their kind says, no more (no scope of their own)."""


def _says_only_its_kind(name: str, kind: str) -> bool:
    return " ".join(name.casefold().replace("_", " ").split()).strip(" .!") in _PLAIN_NAMES.get(kind, ())


def answer_label(perm: Permission) -> str:
    """What a settled card says — what the chosen option said, no more: its name
    (``"Allowed by you: Allow for this session"``), or the words of its kind only where
    the name is silent (none, or plain "Allow once": ``"Allowed once by you"``); a rule
    plugin's answer in the seed's words (``"Allowed by Team rules via Escouade"``); a
    refusal, whatever carried it, ``"Denied by … — message"``; ``"Cancelled (why)"``."""
    if perm.state == "pending":
        return "Waiting for you"
    if perm.denied:
        text = f"Denied by {perm.answered_by}" if perm.answered_by else "Denied"
        return f"{text} — {perm.message}" if perm.message else text
    if perm.state == "cancelled":
        return f"Cancelled ({perm.answered_by})" if perm.answered_by else "Cancelled"
    option = perm.chosen or {}
    kind = option.get("kind", "")
    if perm.plan is not None:
        verb = "Approved" if kind.startswith("allow") else "Sent back"
        text = f"{verb} by {perm.answered_by}" if perm.answered_by else verb
        return f"{text}: {perm.message}" if perm.message else text
    name = str(option.get("name") or "").strip()
    by = f" by {perm.answered_by}" if perm.answered_by else ""
    if perm.answered_by and perm.answered_by.endswith(" via Escouade"):  # a rule plugin's answer (the seed's words)
        text = ("Allowed" if kind.startswith("allow") else "Denied") + by
    elif kind in _VERB and (not name or _says_only_its_kind(name, kind)):
        text = _VERB[kind] + by
    else:
        verb = "Allowed" if kind.startswith("allow") else "Rejected" if kind.startswith("reject") else "Answered"
        text = f"{verb}{by}: {name or perm.option_id}"
    return f"{text} — {perm.message}" if perm.message else text


PLAN_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def cut(text: str, limit: int = MAX_INPUT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


_SHOWN_CONTROLS = frozenset("\t\n")


def is_hidden(ch: str) -> bool:
    """Whether a character shows as nothing, or moves the text around it, where code is
    read: a format character (bidi overrides and isolates, zero-width joiners and spaces,
    the BOM, tag characters — Unicode category Cf), the variation selectors and the blank
    letters Python takes in names (``show\ufe00`` is not ``show``), a control other than tab
    and ``\n`` (Cc: a lone ``\r`` too, which hides what precedes it in a terminal), a line
    or paragraph separator a browser breaks on but Python does not (Zl, Zp), a private-use
    or surrogate code point (Co, Cs)."""
    if ch in _SHOWN_CONTROLS:
        return False
    return unicodedata.category(ch) in ("Cf", "Cc", "Zl", "Zp", "Co", "Cs") or ch in _BLANK_LETTERS or \
        _is_variation_selector(ch)


_BLANK_LETTERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0\u180b\u180c\u180d\u180e\u180f")
"""Characters Python takes in a name that draw as nothing: the combining grapheme joiner,
the Hangul and halfwidth fillers, Khmer's inherent vowels, Mongolian's variation selectors."""


def _is_variation_selector(ch: str) -> bool:
    return "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef"


def count_hidden(text: str) -> int:
    """How many characters :func:`reveal` would mark in ``text`` (C-level counts: linear, fast)."""
    if text.isascii() and text.replace("\n", "").replace("\t", "").isprintable():
        return 0
    hidden = [ch for ch in (_ASCII_CONTROLS & set(text) if text.isascii() else set(text)) if is_hidden(ch)]
    return sum(text.count(ch) for ch in hidden) - (text.count("\r\n") if "\r" in hidden else 0)


def reveal(text: str, mark: Callable[[str], str] = lambda ch: f"⟨U+{ord(ch):04X}⟩") -> tuple[str, int]:
    """``text`` with each hidden character (:func:`is_hidden`) replaced by ``mark(ch)``
    (``⟨U+202E⟩``), and how many there were: code shown on a card reads as it runs
    ("Trojan Source", CVE-2021-42574)."""
    if text.isascii() and text.replace("\n", "").replace("\t", "").isprintable():  # C-level scans only
        return text, 0
    # each distinct character judged once, then C-level counts and one translate: linear in the text
    # whatever it holds (a per-character loop took seconds on a few MB of code: issue 32)
    hidden = [ch for ch in (_ASCII_CONTROLS & set(text) if text.isascii() else set(text)) if is_hidden(ch)]
    if not hidden:
        return text, 0
    table = {ord(ch): mark(ch) for ch in hidden}
    count = sum(text.count(ch) for ch in hidden)
    if ord("\r") in table:  # CRLF is a line end: only a lone \r is hidden
        count -= text.count("\r\n")
        out = "\r\n".join(part.translate(table) for part in text.split("\r\n"))
    else:
        out = text.translate(table)
    return (out, count) if count else (text, 0)


_ASCII_CONTROLS = frozenset(chr(c) for c in [*range(0x20), 0x7F]) - _SHOWN_CONTROLS


def tool_input_text(value: Any) -> str:
    """A tool's raw input as text: a lone ``command`` as is, else indented JSON."""
    if value is None:
        return ""
    if isinstance(value, dict) and set(value) <= {"command", "description"} and isinstance(value.get("command"), str):
        return value["command"]
    if isinstance(value, str):
        return cut(value)
    return cut(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))


def content_text(item: dict[str, Any], kernel_notebook: str | None = None) -> str:
    """One ACP ``ToolCallContent`` (or ``ContentBlock``) as text. A diff of a notebook
    (``.ipynb``) is shown cell by cell (:mod:`.notebook_diff`), or as a text diff saying
    why not; ``kernel_notebook`` (the path of the notebook the kernel runs, when known)
    makes a diff of that path say so."""
    kind = item.get("type")
    if kind == "content":
        return content_text(item.get("content") or {})
    if kind == "text":
        return item.get("text", "")
    if kind == "diff":
        path = item.get("path", "")
        why = ""
        if is_notebook_path(path):

            nb = notebook_diff(item.get("oldText"), item.get("newText", ""), path)
            if nb.error is None:
                return nb.text(kernel_notebook=path == kernel_notebook)
            why = f"\n(not shown cell by cell: {nb.error})"
        head = (f"new file {path}" if item.get("oldText") is None else f"diff {path}") + why
        pairs = diff_lines(item.get("oldText"), item.get("newText", ""), path)
        body = "\n".join(line if tag == "@" else tag + line for tag, line in pairs)
        return head + ("\n" + body if body else "")
    if kind == "terminal":
        return f"(terminal {item.get('terminalId')})"
    if kind in ("resource_link", "resource", "image", "audio"):
        return block_text(item)
    return f"({kind or 'unknown'} content)"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


def blob_size(data: Any) -> int:
    """Bytes of a base64 ``data``/``blob`` field (0 when absent)."""
    if not isinstance(data, str):
        return 0
    return len(data) * 3 // 4 - data[-2:].count("=")


def block_text(block: dict[str, Any]) -> str:
    """A non-text ACP content block as text that says what it is: ``[image image/png,
    12.3 KB]``, ``[audio …]``, ``[link NAME <URI>]``, ``[embedded text URI (mime, N
    lines)]`` followed by the text, ``[embedded binary URI (mime, N B)]``."""
    kind = block.get("type")
    if kind in ("image", "audio"):
        where = f" {block['uri']}" if isinstance(block.get("uri"), str) and block.get("uri") else ""
        return f"[{kind} {block.get('mimeType') or '?'}, {_size(blob_size(block.get('data')))}{where}]"
    if kind == "resource_link":
        name = block.get("title") or block.get("name") or ""
        size = f", {_size(block['size'])}" if isinstance(block.get("size"), int) else ""
        mime = f", {block['mimeType']}" if block.get("mimeType") else ""
        return f"[link {name} <{block.get('uri', '')}>{mime}{size}]".replace("[link  <", "[link <")
    res = block.get("resource") or {}
    uri, mime = res.get("uri", ""), res.get("mimeType") or "?"
    if isinstance(res.get("text"), str):
        text = res["text"]
        return f"[embedded text {uri} ({mime}, {len(lines_of(text))} lines)]\n{cut(text)}"
    return f"[embedded binary {uri} ({mime}, {_size(blob_size(res.get('blob')))})]"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in lines_of(text))


def terminal_state(term: dict[str, Any]) -> str:
    """How a terminal stands: running, exited with a code, or killed by a signal."""
    if term.get("running"):
        return "running…"
    if term.get("signal"):
        return f"killed by {term['signal']}"
    return f"exited with code {term.get('exit_code')}"


def terminal_text(terminal_id: str, term: dict[str, Any]) -> str:
    trunc = ", output truncated (newest kept)" if term.get("truncated") else ""
    return f"terminal {terminal_id}: {terminal_state(term)}{trunc}\n{term.get('output', '')}".rstrip()


def raw_output_text(call: ToolCall) -> str:
    """A tool's ``rawOutput`` when its content does not already carry it (Codex sends
    its stdout only there), as text; "" otherwise."""
    out = call.raw_output
    if out is None:
        return ""
    if isinstance(out, dict):
        out = next((out[k] for k in ("stdout", "formatted_output", "aggregated_output", "output")
                    if isinstance(out.get(k), str) and out.get(k)), out)
    text = out if isinstance(out, str) else tool_input_text(out)
    if not call.content:
        return cut(text)
    shown = "".join(content_text(c) for c in call.content)
    return cut(text) if isinstance(out, str) and out.strip() and out.strip() not in shown else ""


def tool_call_text(call: ToolCall, *, whole: bool = True) -> str:
    """A tool call as text: its title, kind and input as its permission card asked them
    (:attr:`ToolCall.asked`, frozen) when it had one, else as the agent sent them; then
    its status, contents and output as they are now. ``whole`` False (a saved form): an
    input past :data:`SAVED_CODE_MAX` characters by its start, length and SHA-256."""
    named = call.asked or call
    head = f"[tool] {named.title or call.tool_call_id} ({named.kind or 'other'}, {call.shown_status})"
    parts = [head]
    if call.not_asked:
        parts.append(_indent(call.not_asked))
    # a notebook's diff shows what is written, cell by cell: its JSON text as the input would not
    notebook = any(is_notebook_path(d.get("path")) for d in call.diffs)
    inp = "" if notebook else tool_input_text(named.raw_input)
    if inp:
        parts.append(_indent("input: " + _long_cut(inp, "input", whole)))
    for c in call.content:
        term = call.terminals.get(str(c.get("terminalId"))) if c.get("type") == "terminal" else None
        parts.append(_indent(cut(terminal_text(c["terminalId"], term) if term
                                 else content_text(c, call.kernel_notebook))))
    out = raw_output_text(call)
    if out:
        parts.append(_indent("output: " + out))
    if call.kernel_task is not None:
        parts.append(_indent(kernel_task_text(call.kernel_task, live=whole)))
    for sub in call.subagents:  # its child sessions, each its nested conversation
        parts.append(_indent(subagent_text(sub), "    "))
    return "\n".join(parts)


def kernel_task_text(task: dict[str, Any], live: bool = True) -> str:
    """A ``run_code`` left running as a task (:attr:`ToolCall.kernel_task`): ``task ID: running as a task``
    (``… when saved``: ``live`` False), ``task ID: interrupted by you``…, then the last lines it printed."""
    state = str(task.get("state"))
    words = {"running": "running as a task" + ("" if live else " when saved"), "done": "done",
             "cancelled": "cancelled by the agent", "ended": "ended: the agent's session closed",
             "lost": "no end on record: its kernel or its agent's process ended while it ran",
             "interrupted": "interrupted" + (f" by {task['by']}" if task.get("by") else "")}.get(state, state)
    output = str(task.get("output") or "")
    lines = f"task {task.get('task_id', '')}: {words}"
    if output:
        lines += "\n" + ("… (earlier lines not shown)\n" if task.get("cut") else "") + output
    return lines


def subagent_state(sub: Subagent) -> str:
    """``running``, ``idle, end_turn``, ``cancelled``…: how a subagent stands."""
    if sub.state == "idle":
        return f"idle, {sub.stop_reason}" if sub.stop_reason else "idle"
    if sub.cancelled:
        return "cancelled"
    return (sub.state or "announced").replace("_", " ")


def subagent_head(sub: Subagent) -> str:
    """``⤷ subagent NAME (STATE) — DESCRIPTION``."""
    return f"⤷ subagent {sub.name} ({subagent_state(sub)})" + (f" — {sub.description}" if sub.description else "")


def subagent_text(sub: Subagent, speaker: str = "agent") -> str:
    """A subagent's head line, then its conversation indented by two spaces."""
    body = render_items(sub.conversation.items, speaker)
    return subagent_head(sub) + ("\n" + _indent(body) if body else "")


SAVED_CODE_MAX = 256 * 1024
"""Characters of a card's code a saved form's text keeps (``whole=False``); then its length and SHA-256."""


_shas: dict[int, tuple[str, str]] = {}  # id(text) -> (text, its SHA-256): a saved form is redrawn often


def _sha256_of(text: str) -> str:
    import hashlib

    hit = _shas.get(id(text))
    if hit is not None and hit[0] is text:
        return hit[1]
    sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if len(_shas) >= 8:
        _shas.pop(next(iter(_shas)))
    _shas[id(text)] = (text, sha)
    return sha


def _long_cut(text: str, what: str, whole: bool) -> str:
    """``text``, or (``whole`` False) past :data:`SAVED_CODE_MAX` characters its start, its length and SHA-256."""
    if whole or len(text) <= SAVED_CODE_MAX:
        return text
    sha = _sha256_of(text)
    return (text[:SAVED_CODE_MAX] + f"\n… {len(text) - SAVED_CODE_MAX:,} more characters not in this saved form "
            f"(the whole {what}: {len(text):,} characters, SHA-256 {sha})")


def _code_text(code: str, whole: bool) -> str:
    if whole or len(code) <= SAVED_CODE_MAX:
        return reveal(code)[0]
    cut_at = _long_cut(code, "code", whole)
    return reveal(cut_at[:SAVED_CODE_MAX])[0] + cut_at[SAVED_CODE_MAX:]


def render_item(item: Item, speaker: str = "agent", *, whole: bool = True) -> str:
    """One item as plain text; ``whole`` False (a saved form): a card's code past
    :data:`SAVED_CODE_MAX` characters by its start, length and SHA-256."""
    if isinstance(item, Message):
        extra = "".join(" " + content_text(b) for b in item.blocks)
        if item.role == "thought":
            return f"({speaker} thinks) {item.text}{extra}"
        who = ("you (steered)" if item.steered else "you") if item.role == "user" else speaker
        who += " (rewound)" if item.rewound and item.role == "user" else ""  # a turn a rewind undid
        text = item.text if item.role == "user" else visible_text(item.text)
        return f"{who}: {text}{extra}"
    if isinstance(item, ToolCall):
        return tool_call_text(item, whole=whole)
    if isinstance(item, Permission):
        call = item.request or item.tool_call  # what was asked, frozen
        title = (call.title if call else None) or (call.tool_call_id if call else "a tool")
        options = " ".join(f"[{o.get('name', o.get('optionId'))}]" for o in item.options)
        if item.plan is not None:
            plan = _indent(item.plan) + "\n" if item.plan else ""
            if item.state == "pending":
                return f"[plan to approve]\n{plan}  [Approve] [Keep planning]"
            return f"[plan to approve]\n{plan}  {answer_label(item)}"
        kernel_nb = item.tool_call.kernel_notebook if item.tool_call is not None else None  # the client's note
        notebooks = "".join("\n" + _indent(cut(content_text(d, kernel_nb)))
                            for d in (call.diffs if call else []) if is_notebook_path(d.get("path")))
        code = call.raw_input.get("code") if call is not None and isinstance(call.raw_input, dict) else None
        if call is not None and call.mcp is not None and call.mcp[1] == "execute_cell" and \
                isinstance(call.raw_input, dict):
            code = call.raw_input.get("source")  # the cell's whole source
        if call is not None and call.mcp is not None and call.mcp[1] in ("run_code", "execute_cell") and \
                isinstance(code, str):
            notebooks += "\n" + _indent(_code_text(code, whole))  # the code asked to run, hidden characters shown
        if item.state == "pending":
            note = f" ({item.note})" if item.note and not item.deciding else ""
            return f"[permission] {title}: {options}" + (" (deciding…)" if item.deciding else "") + note + notebooks
        return f"[permission] {title}: {answer_label(item)}" + notebooks
    if isinstance(item, Plan):
        lines = ["[plan]" + (" (removed)" if item.removed else "")]
        for e in item.entries:
            lines.append(f"  {PLAN_MARK.get(str(e.get('status')), '[?]')} {e.get('content', '')}")
        if item.markdown:
            lines.append(_indent(item.markdown))
        return "\n".join(lines)
    if isinstance(item, Question):
        return question_text(item)
    if isinstance(item, Notice):
        text = f"[{speaker} {item.severity}] {item.text}" if item.origin == "agent" else f"[{item.level}] {item.text}"
        return text + ("\n" + _indent(item.detail) if item.detail else "")
    if isinstance(item, Compaction):
        return compaction_text(item)
    if isinstance(item, Subagent):  # one no tool call of the parent runs
        return subagent_text(item, speaker)
    if isinstance(item, Unknown):
        return f"[unknown update {item.raw.get('sessionUpdate', '?')}] {item.reason}"
    return repr(item)


COMPACTION_HEAD = {
    "in_progress": "summarising earlier context…",
    "completed": "earlier context summarised",
    "failed": "summarising earlier context failed",
    "cancelled": "summarising earlier context was cancelled",
}
"""The boundary line of a :class:`Compaction`, by status (another status is named)."""


def compaction_head(item: Compaction) -> str:
    """``"earlier context summarised"`` and the like (see :data:`COMPACTION_HEAD`)."""
    return COMPACTION_HEAD.get(item.status, f"earlier context: {item.status}")


def compaction_text(item: Compaction) -> str:
    """``──── earlier context summarised ────`` then the summary (and error), indented."""
    lines = [f"──── {compaction_head(item)} ────"]
    if item.summary_text:
        lines.append(_indent("summary: " + item.summary_text))
    if item.error:
        lines.append(_indent("error: " + item.error))
    return "\n".join(lines)


def question_text(q: Question) -> str:
    lines = [f"[question] {q.message}".rstrip()]
    if q.mode == "url":
        lines.append(f"  open {q.url}")
    for name, spec in ((q.schema or {}).get("properties") or {}).items():
        choices = spec.get("enum") or [o.get("const") for o in spec.get("oneOf") or [] if "const" in o]
        req = " *" if name in ((q.schema or {}).get("required") or []) else ""
        lines.append(f"  {spec.get('title') or name}{req} ({spec.get('type', 'string')})"
                     + (f": {' | '.join(map(str, choices))}" if choices else ""))
    for question in q.questions:
        opts = question.get("options")
        lines.append(f"  {question['question']}" + (f" [{' | '.join(opts)}]" if opts else ""))
    if q.state == "pending":
        lines.append("  (waiting for you)")
    elif q.state == "accept":
        lines.append(f"  → answered: {json.dumps(q.answer, ensure_ascii=False, sort_keys=True)}")
    else:
        lines.append(f"  → {q.state}d" if q.state == "decline" else "  → cancelled")
    return "\n".join(lines)


def sessions_text(agent: str, sessions: list[dict[str, Any]], next_cursor: str | None = None) -> str:
    """A page of ACP ``session/list`` (``SessionInfo`` wire dicts) as lines: updated,
    title, id; the cursor of the next page when there is one."""
    if not sessions:
        return f"{agent} has no sessions for this folder."
    lines = [f"Sessions of {agent}:"]
    for info in sessions:
        lines.append(f"  {info.get('updatedAt') or '-':<22} {info.get('title') or '(untitled)':<40} "
                     f"{info.get('sessionId')}")
    if next_cursor:
        lines.append(f"  … more: %escouade sessions {agent} --cursor {next_cursor}")
    return "\n".join(lines)


def render_items(items: list[Item], speaker: str = "agent") -> str:
    """The items as plain text, one after the other; an item that cannot be drawn (an
    agent's value no renderer expected) says so in its place, the others are kept."""
    return "\n".join(safe_render_item(i, speaker) for i in items)


def safe_render_item(item: Item, speaker: str = "agent", *, whole: bool = True) -> str:
    """:func:`render_item`, or a line saying the item could not be drawn, and why."""
    try:
        return render_item(item, speaker, whole=whole)
    except Exception as exc:
        return f"[{type(item).__name__.lower()} {item.key}: not drawn ({type(exc).__name__}: {exc})]"
