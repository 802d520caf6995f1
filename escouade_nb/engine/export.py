"""A conversation as a Jupyter notebook: :func:`to_notebook`.

The notebook (nbformat 4.5) reads top to bottom as the conversation went, in markdown
cells that GitHub and nbconvert render:

* a title cell (the title, the agent, its harness and version, its folder, the time);
* your prompts as ``**you:**`` and a quote (``**you (steered):**``, ``**you (rewound):**``
  as the view marks them; every other cell of a turn a rewind undid begins ``*(rewound)*``);
  the agent's replies as the markdown it wrote (raw HTML in it shown as text, as the views
  do); its thoughts folded in a ``<details>`` block;
* each tool call: its title, kind and status, its input (unless a diff shows it), its
  diffs (a text diff fenced as ``diff``, a notebook's cell by cell), its output and
  terminals;
* each permission card or plan to approve: what was asked and who answered what
  (:func:`~..core.render_text.answer_label`); questions and their answers; plans; notices;
* the code the agent ran in the kernel through ``run_code`` (the kernel's MCP server) as
  a **code cell** with that code and no outputs, after its card, and the output it had
  in a markdown cell after it: running the notebook runs that code again. A ``run_code``
  that was denied or not run is shown as markdown, not as a code cell.

The cells are taken from the conversation on the event loop (a snapshot: the agent may go
on meanwhile); the notebook is built, validated with nbformat and written in a worker
thread (nbformat's first import costs about 0.9 s).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any


from .._version import __version__
from ..core.conversation import (Compaction, Conversation, Item, Message, Notice, Permission, Plan, Question, ToolCall,
                                 Unknown)
from ..core.notebook_diff import NotebookDiff, notebook_diff
from ..core.plans import visible_text
from ..core.render_text import (PLAN_MARK, answer_label, compaction_text, content_text, diff_lines, is_notebook_path,
                                question_text, raw_output_text, terminal_text, tool_input_text)
from ..permissions.request import mcp_tool_of

__all__ = ["to_notebook", "notebook_cells", "run_code_of", "MAX_BLOCK"]

MAX_BLOCK = 20_000
"""Characters of one tool output, input or diff kept in the notebook (the rest is cut, saying so)."""
_KERNEL_SERVER = "escouade"


def _cut(text: str, limit: int = MAX_BLOCK) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def fenced(text: str, lang: str = "") -> str:
    """``text`` in a fenced code block whose fence is longer than any backtick run in it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def no_raw_html(text: str) -> str:
    """Markdown with its raw HTML shown as text (``<`` written ``&lt;`` outside fenced
    blocks and code spans), as the views show agent text: nbconvert's HTML keeps raw
    HTML, so an agent's ``<script>`` must not reach it as a tag."""
    out = []
    fence: str | None = None
    for line in text.split("\n"):
        stripped = line.lstrip()
        mark = re.match(r"(`{3,}|~{3,})", stripped)
        if fence is not None:
            if mark and mark.group(1)[0] == fence[0] and len(mark.group(1)) >= len(fence):
                fence = None
            out.append(line)
            continue
        if mark:
            fence = mark.group(1)
            out.append(line)
            continue
        pieces, pos = [], 0
        for m in _CODE_SPAN.finditer(line):
            pieces.append(line[pos:m.start()].replace("<", "&lt;"))
            pieces.append(m.group(0))
            pos = m.end()
        pieces.append(line[pos:].replace("<", "&lt;"))
        out.append("".join(pieces))
    return "\n".join(out)


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in no_raw_html(text).split("\n"))


def run_code_of(call: ToolCall) -> str | None:
    """The code of a call of the kernel's ``run_code`` tool (``call.mcp`` set by the
    client, or the agent's own name for it: ``mcp__escouade__run_code``, …), else None."""
    asked = call.asked or call  # what its card asked, frozen, when it had one: the code that was approved
    mcp = asked.mcp or call.mcp or mcp_tool_of(call, {_KERNEL_SERVER: ("run_code",)})
    if mcp != (_KERNEL_SERVER, "run_code"):
        return None
    raw = asked.raw_input if isinstance(asked.raw_input, dict) else {}
    for args in (raw, raw.get("arguments")):
        if isinstance(args, dict) and isinstance(args.get("code"), str):
            return args["code"]
    return None


def _ran(call: ToolCall, cards: list[Permission]) -> bool:
    """Whether a ``run_code`` call ran: as the kernel's server said when it served it
    (``call.kernel_run``), else a card of it allowed (when it had cards) and the call not
    cancelled."""
    if call.kernel_run is not None:
        return call.kernel_run.get("status") in ("ok", "error")
    if call.shown_status == "cancelled":
        return False
    if cards:
        return any(c.state == "selected" and (c.chosen or {}).get("kind", "").startswith("allow") for c in cards)
    return call.status == "completed"


REWOUND_MD = "*(rewound)*"
"""The first line of an exported markdown cell of a turn a rewind undid (its prompt: ``**you (rewound):**``)."""
REWOUND_CODE = "# (rewound)"
"""The first line of an exported code cell (``run_code``) of a turn a rewind undid."""


class _Cells:
    def __init__(self) -> None:
        self.cells: list[dict[str, Any]] = []

    def markdown(self, cell_id: str, text: str) -> None:
        self.cells.append({"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text})

    def rewound(self, start: int) -> None:
        """Mark the cells from ``start`` on as part of a turn a rewind undid: markdown cells
        begin with ``*(rewound)*``, code cells with a ``# (rewound)`` line."""
        for cell in self.cells[start:]:
            cell["source"] = (REWOUND_MD + "\n\n" + cell["source"] if cell["cell_type"] == "markdown"
                              else REWOUND_CODE + "\n" + cell["source"])

    def code(self, cell_id: str, code: str, metadata: dict[str, Any]) -> None:
        self.cells.append({"cell_type": "code", "id": cell_id, "metadata": metadata, "source": code,
                           "outputs": [], "execution_count": None})


def _notebook_md(nb: NotebookDiff, kernel: bool) -> list[str]:
    head = "new notebook" if nb.new_file else "notebook"
    parts = [f"**{head}** `{nb.path}`: {nb.summary()}" + (" — *this is the notebook you are in*" if kernel else "")]
    for cell in nb.cells:
        parts.append(f"*{cell.heading()}*" + (f" — {'; '.join(cell.details)}" if cell.details else ""))
        if cell.source:
            parts.append(fenced(_cut("\n".join(line if tag == "@" else tag + line for tag, line in cell.source)),
                                "diff"))
    parts.extend(f"*{p}*" for p in nb.metadata)
    return parts


def _diff_md(item: Mapping[str, Any], kernel_notebook: str | None) -> list[str]:
    path = item.get("path", "")
    old, new = item.get("oldText"), item.get("newText", "")
    why = ""
    if is_notebook_path(path):
        nb = notebook_diff(old, new, path)
        if nb.error is None:
            return _notebook_md(nb, path == kernel_notebook)
        why = f" (not shown cell by cell: {nb.error})"
    body = "\n".join(line if tag == "@" else tag + line for tag, line in diff_lines(old, new, path))
    head = f"**{'new file' if old is None else 'diff'}** `{path}`{why}"
    return [head, fenced(_cut(body), "diff")] if body else [head]


def _tool_md(call: ToolCall, *, input_shown: bool = True) -> str:
    named = call.asked or call  # its title, kind and input as its card asked them (frozen), if it had one
    parts = [f"**tool** · {no_raw_html(named.title or call.tool_call_id)} · *{named.kind or 'other'}, "
             f"{call.shown_status}*"]
    inp = "" if call.diffs or not input_shown else tool_input_text(named.raw_input)
    if inp:
        parts.append(fenced(_cut(inp)))
    for c in call.content:
        if c.get("type") == "diff":
            parts.extend(_diff_md(c, call.kernel_notebook))
        elif c.get("type") == "terminal":
            term = call.terminals.get(str(c.get("terminalId")))
            parts.append(fenced(_cut(terminal_text(c["terminalId"], term) if term else content_text(c))))
        else:
            text = content_text(c)
            if text:
                parts.append(fenced(_cut(text)))
    out = raw_output_text(call)
    if out:
        parts.append(fenced(_cut(out)))
    return "\n\n".join(parts)


def _permission_md(perm: Permission, speaker: str) -> str:
    call = perm.request or perm.tool_call  # what was asked, frozen
    title = no_raw_html((call.title if call else None) or (call.tool_call_id if call else "a tool"))
    if perm.plan is not None:
        return f"**{speaker} presents a plan to approve**\n\n{no_raw_html(perm.plan)}\n\n**{answer_label(perm)}**"
    offered = ", ".join(str(o.get("name") or o.get("optionId")) for o in perm.options)
    return f"**{speaker} asks permission** · {title} — **{answer_label(perm)}**" + (
        f"  \n*offered: {no_raw_html(offered)}*" if offered else "")


def _plan_md(plan: Plan) -> str:
    marks = {"[x]": "[x]", "[~]": "[ ] *(in progress)*", "[ ]": "[ ]"}
    lines = ["**plan**" + (" *(removed)*" if plan.removed else "")]
    for e in plan.entries:
        mark = marks.get(PLAN_MARK.get(str(e.get("status")), ""), "[ ]")
        lines.append(f"- {mark} {no_raw_html(str(e.get('content', '')))}")
    if plan.markdown:
        lines.append("\n" + no_raw_html(plan.markdown))
    return "\n".join(lines)


def notebook_cells(items: list[Item], *, speaker: str = "agent", agent_name: str | None = None) -> list[dict[str, Any]]:
    """The cells (nbformat v4 dicts, ids from the items' keys) for a conversation's items;
    see the module's documentation. Pure: reads the items, touches nothing."""
    out = _Cells()
    cards_of: dict[int, list[Permission]] = {}
    for item in items:
        if isinstance(item, Permission) and item.tool_call is not None:
            cards_of.setdefault(id(item.tool_call), []).append(item)
    run_code = {id(i): code for i in items if isinstance(i, ToolCall) and (code := run_code_of(i)) is not None}
    deferred: dict[int, ToolCall] = {}  # a run_code call shown after its last card, by the card's id()
    for item in items:
        if isinstance(item, ToolCall) and id(item) in run_code and cards_of.get(id(item)):
            deferred[id(cards_of[id(item)][-1])] = item
    for item in items:
        key = item.key
        made = len(out.cells)
        if isinstance(item, Message):
            if item.role == "user":
                extra = "".join(f"\n>\n> *({no_raw_html(content_text(b))})*" for b in item.blocks)
                marks = ", ".join(m for m, on in (("steered", item.steered), ("rewound", item.rewound)) if on)
                out.markdown(key, f"**you{f' ({marks})' if marks else ''}:**\n\n{_quote(item.text)}{extra}")
            elif item.role == "thought":
                out.markdown(key, f"<details><summary>{speaker} thinks…</summary>\n\n{no_raw_html(item.text)}"
                                  f"\n\n</details>")
            else:
                text = visible_text(item.text)
                extra = "".join(f"\n\n*({no_raw_html(content_text(b))})*" for b in item.blocks)
                if text.strip() or extra:
                    out.markdown(key, no_raw_html(text) + extra)
        elif isinstance(item, ToolCall):
            if id(item) in run_code:
                if not cards_of.get(id(item)):
                    _run_code_cells(out, item, run_code[id(item)], [], agent_name)
            else:
                out.markdown(key, _tool_md(item))
        elif isinstance(item, Permission):
            out.markdown(key, _permission_md(item, speaker))
            call = deferred.get(id(item))
            if call is not None:
                _run_code_cells(out, call, run_code[id(call)], cards_of[id(call)], agent_name)
        elif isinstance(item, Plan):
            out.markdown(key, _plan_md(item))
        elif isinstance(item, Question):
            lines = question_text(item).split("\n")
            out.markdown(key, f"**{speaker} asks:** {no_raw_html(item.message)}\n\n"
                              + fenced("\n".join(line.strip() for line in lines[1:])))
        elif isinstance(item, Notice):
            label = f"{speaker} · {item.severity}" if item.origin == "agent" else item.level  # the agent's own notice
            text = f"> **{no_raw_html(label)}:** {no_raw_html(item.text)}"
            out.markdown(key, text + ("\n\n" + fenced(_cut(item.detail)) if item.detail else ""))
        elif isinstance(item, Compaction):
            out.markdown(key, "---\n\n" + fenced(compaction_text(item)))
        elif isinstance(item, Unknown):
            out.markdown(key, f"*unknown update `{item.raw.get('sessionUpdate', '?')}`: {no_raw_html(item.reason)}*")
        if item.rewound and not (isinstance(item, Message) and item.role == "user"):
            out.rewound(made)  # as the view marks every item of a turn a rewind undid
    return out.cells


def _run_code_cells(out: _Cells, call: ToolCall, code: str, cards: list[Permission], agent_name: str | None) -> None:
    key = call.key
    if not _ran(call, cards):
        out.markdown(key, f"**run_code** · *{_not_run(call, cards)}* — the code the agent asked to run:\n\n"
                          + fenced(_cut(code), "python"))
        return
    meta = {"escouade": {"run_code": True, "toolCallId": call.tool_call_id,
                         **({"agent": agent_name} if agent_name else {})}, "tags": ["escouade-run-code"]}
    out.code(f"{key}-code", code, meta)
    shown = [content_text(c) for c in call.content if c.get("type") != "diff"]
    shown = [t for t in shown if t and t != f"```python\n{code}\n```"]  # the card's own copy of the code
    raw = raw_output_text(call)
    if raw:
        shown.append(raw)
    body = "\n".join(shown) or "(no output shown)"
    run = call.kernel_run
    how = call.shown_status if run is None else (
        f"{'ran' if run.get('status') == 'ok' else 'raised an error'}, {run.get('chars', 0):,} characters; "
        f"{no_raw_html(_answered(cards))}")
    out.markdown(f"{key}-output", f"**output** of the code above, when the agent ran it (*{how}*):\n\n"
                                  + fenced(_cut(body)))


_NOT_RUN = {"refused": "refused", "cancelled": "cancelled", "busy": "not run: the kernel was busy"}


def _answered(cards: list[Permission]) -> str:
    """Who answered a ``run_code``'s last card, as the card says it (``Allowed once by you``)."""
    return answer_label(cards[-1]) if cards else "no card"


def _not_run(call: ToolCall, cards: list[Permission]) -> str:
    """Why a ``run_code`` did not run, in a few words: refused (by whom), cancelled, busy."""
    run = call.kernel_run
    if run is None:  # the server never received it: refused on the agent's own request, or never called
        last = cards[-1] if cards else None
        if last is not None and last.state != "pending" and not (last.chosen or {}).get("kind", "").startswith("allow"):
            return no_raw_html(f"{answer_label(last)}, not run")
        return f"{call.shown_status}, not run"
    status = str(run.get("status"))
    if status == "running":  # run_code with wait: left running as a task, not ended when this was written
        return "running as a task, no result yet"
    why = _NOT_RUN.get(status, status)
    if status in ("refused", "cancelled") and cards:
        why = answer_label(cards[-1])
    return no_raw_html(f"{why}, not run")


def _title_cell(title: str, agent: Mapping[str, Any], when: datetime.datetime) -> str:
    lines = [f"# {no_raw_html(title)}", ""]
    who = []
    if agent.get("name"):
        who.append(f"agent `{agent['name']}`")
    harness = " ".join(str(agent[k]) for k in ("display_name", "version") if agent.get(k))
    if harness:
        who.append(no_raw_html(harness))
    if agent.get("cwd"):
        who.append(f"folder `{agent['cwd']}`")
    lines.append(" · ".join(who + [f"exported {when.strftime('%Y-%m-%d %H:%M %Z').strip()} by escouade_nb "
                                   f"{__version__}"]))
    return "\n".join(lines)


async def to_notebook(conversation: Conversation, path: str | os.PathLike[str], *, title: str | None = None,
                      agent: Mapping[str, Any] | None = None, force: bool = False) -> Path:
    """Write ``conversation`` as a notebook at ``path`` and return its absolute path.

    ``title``: the first cell's heading (default ``Conversation with NAME``); ``agent``:
    what the title cell and the notebook's ``metadata.escouade`` say of the agent —
    ``name``, ``harness`` (its id), ``display_name``, ``version``, ``cwd``, ``session_id``,
    ``speaker`` (how replies are attributed), each optional. A relative ``path`` is taken
    in the process's working folder. Raises ``ValueError`` when ``path`` does not end in
    ``.ipynb``, ``FileExistsError`` when it exists and ``force`` is false,
    ``FileNotFoundError`` when its folder does not exist, ``OSError`` for the write."""
    target = Path(os.path.abspath(path))
    if not is_notebook_path(target.name):
        raise ValueError(f"{path} does not end in .ipynb: a conversation is exported as a Jupyter notebook")
    info = dict(agent or {})
    speaker = str(info.get("speaker") or info.get("display_name") or info.get("name") or "agent")
    when = datetime.datetime.now().astimezone()
    cells = [{"cell_type": "markdown", "id": "escouade-title", "metadata": {},
              "source": _title_cell(title or f"Conversation with {info.get('name') or speaker}", info, when)}]
    cells += notebook_cells(list(conversation.items), speaker=speaker, agent_name=info.get("name"))
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "escouade": {**{k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))},
                         "exported": when.isoformat(timespec="seconds"), "escouade_nb": __version__}}
    nb = {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    await asyncio.to_thread(_write, nb, target, force)
    return target


def _write(nb: dict[str, Any], target: Path, force: bool) -> None:
    """Validate and write (in a worker thread): a new file is created exclusively; with
    ``force`` an existing one is replaced whole (a temporary file, then a rename)."""
    import nbformat  # here, in the worker thread: it imports jsonschema

    node = nbformat.from_dict(nb)
    nbformat.validate(node)
    text = nbformat.writes(node)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"cannot export to {target}: the folder {target.parent} does not exist")
    if not force:
        try:
            with open(target, "x", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
        except FileExistsError:
            raise FileExistsError(f"{target} exists already; export with force=True (--force) to replace it") \
                from None
        return
    tmp = target.with_name(f".{target.name}.escouade-{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
