"""What a rule plugin is asked: the ``permissions/decide`` params, built from an ACP
permission request, whatever the harness.

Everything here is a table or a pure function, tested without processes.

``request.tool`` is the tool as Claude Code names it. It is found, in this order:

1. the agent's own tool name — ``_meta.<agent>.toolCall.toolName`` (also
   ``_meta.<agent>.toolName`` and ``_meta.tool_name``), the tool call's unstable
   ``name``, else the title before ``"·"`` — looked up in the harness manifest's
   ``acp.tools`` map (agent tool name -> Claude Code name);
2. that name itself when it already is a Claude Code name (``Bash``, ``mcp__s__t``;
   ``mcp__acp__Bash`` — Claude Code's ACP wrapper — is ``Bash``), or an MCP tool
   (``<server>__<tool>``, or a ``_meta`` giving ``mcpServer``/``server``) as
   ``mcp__<server>__<tool>``;
3. the ACP tool kind (:data:`KIND_TOOLS`): execute -> Bash; edit -> Edit, or Write for a
   new file (a diff without ``oldText``); read -> Read; search -> Grep, or Glob for a file
   pattern; fetch -> WebFetch, or WebSearch for a query; delete/move -> Edit;
4. the agent's own name as it is, else ``"Tool"``.

``request.kind`` is the family of the tool (:data:`FAMILIES`): command, edit, read,
fetch, mcp or tool. What the ACP tool call says itself — its ``kind``, ``title``, the
paths of its ``locations`` and of its diffs — is added as ``acpKind``, ``title``,
``locations``, ``diffPaths`` (:func:`tool_call_fields`). ``request.input`` is the tool
call's ``rawInput`` (a command given as an argv list, or as ``cmd``, becomes the
``command`` string Claude Code's Bash takes), every text whole. :func:`fit_params`
bounds what is sent: every field whole up to :data:`MAX_REQUEST` bytes of params,
``request.sizes`` saying the length of each; past it the longest texts are cut
(``request.truncated`` names them) and the broker honours no plugin's allowance of it.

A plan to approve (``ExitPlanMode``/``exit_plan_mode``, or ACP kind ``switch_mode``)
and a question of the agent (``AskUserQuestion``…) are :attr:`Normalised.reserved`:
they never go to plugins.

The wire models of the params (:class:`DecideParams` and its parts) are those of
:mod:`.protocol`, shared with the plugin SDK; they are re-exported here.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.notebook_diff import notebook_diff
from ..core.tool_names import agent_tool_name, title_head
from .protocol import MAX_REQUEST, AgentInfo, DecideParams, Family, ProjectInfo, RequestInfo, TicketInfo

__all__ = [
    "CLAUDE_TOOLS", "FAMILIES", "KIND_TOOLS", "PLAN_TOOLS", "QUESTION_TOOLS", "MAX_REQUEST",
    "Family", "Normalised", "RequestInfo", "ProjectInfo", "TicketInfo", "AgentInfo", "DecideParams",
    "agent_tool_name", "normalise", "family_of", "target_of", "tool_call_fields", "mcp_tool_of", "mcp_arguments_of",
    "Fitted", "fit_params", "text_size", "too_large",
]

FAMILIES: dict[str, Family] = {
    "Bash": "command",
    "Edit": "edit", "Write": "edit", "MultiEdit": "edit", "NotebookEdit": "edit",
    "Read": "read", "Grep": "read", "Glob": "read", "LS": "read",
    "WebFetch": "fetch", "WebSearch": "fetch",
}
"""Claude Code tool -> family. ``mcp__*`` is ``mcp``; anything else is ``tool``."""

CLAUDE_TOOLS = frozenset(FAMILIES) | {
    "BashOutput", "KillShell", "Task", "Agent", "TodoWrite", "ExitPlanMode", "AskUserQuestion",
    "SlashCommand", "Skill", "NotebookRead",
}
"""Names that already are Claude Code's."""

PLAN_TOOLS = frozenset({"ExitPlanMode", "exit_plan_mode"})
QUESTION_TOOLS = frozenset({"AskUserQuestion", "ask_user_question", "request_user_input", "ask_user"})
RESERVED_KINDS = {"switch_mode": "plan"}
"""ACP kinds that are the user's (Claude Code's ACP asks ExitPlanMode as ``switch_mode``)."""


def _diffs(call: Any) -> list[dict[str, Any]]:
    return [c for c in (getattr(call, "content", None) or []) if isinstance(c, dict) and c.get("type") == "diff"]


def _raw(call: Any) -> dict[str, Any]:
    raw = getattr(call, "raw_input", None)
    return raw if isinstance(raw, dict) else {}


def _edit_or_write(call: Any) -> str:
    diffs = _diffs(call)
    if diffs:
        return "Write" if all(d.get("oldText") is None for d in diffs) else "Edit"
    raw = _raw(call)
    if "old_string" in raw or "edits" in raw:
        return "Edit"
    return "Write" if "content" in raw else "Edit"


_REGEX_MARKS = ("\\", "^", "$", "(", ")", "|", "+", ".*")


def _grep_or_glob(call: Any) -> str:
    title = (getattr(call, "title", None) or "").strip().lower()
    if title.startswith(("glob", "find", "list")):
        return "Glob"
    pattern = _raw(call).get("pattern")
    if isinstance(pattern, str) and ("*" in pattern or "?" in pattern) and not any(m in pattern for m in _REGEX_MARKS):
        return "Glob"
    return "Grep"


def _fetch_or_search(call: Any) -> str:
    raw = _raw(call)
    return "WebSearch" if "query" in raw and "url" not in raw else "WebFetch"


KIND_TOOLS: dict[str, str | Callable[[Any], str]] = {
    "execute": "Bash",
    "edit": _edit_or_write,
    "delete": "Edit",
    "move": "Edit",
    "read": "Read",
    "search": _grep_or_glob,
    "fetch": _fetch_or_search,
}
"""ACP ``ToolKind`` -> Claude Code tool (a name, or a function of the tool call)."""


def family_of(tool: str) -> Family:
    if tool.startswith("mcp__"):
        return "mcp"
    return FAMILIES.get(tool, "tool")


def _as_claude(name: str, server: str | None) -> str | None:
    """``name`` as a Claude Code name when it is one, or an MCP tool; else None."""
    if not name or any(c.isspace() for c in name):
        return None  # a sentence of a title, not a tool name
    if server:
        return f"mcp__{server}__{name}"
    if name.startswith("mcp__acp__") and name[len("mcp__acp__"):] in CLAUDE_TOOLS:
        return name[len("mcp__acp__"):]
    if name.startswith("mcp__") or name in CLAUDE_TOOLS:
        return name
    if "__" in name.strip("_"):
        srv, tool = name.strip("_").split("__", 1)
        if srv and tool:
            return f"mcp__{srv}__{tool}"
    return None


def _texts_of(call: Any) -> list[str]:
    """The strings an agent may name an MCP tool in: its own tool name, the title, and the
    text content of the request (codex: ``Allow the kernel MCP server to run tool "X"?``)."""
    name, _ = agent_tool_name(call)
    texts = [t for t in (name, getattr(call, "title", None)) if isinstance(t, str) and t]
    for c in getattr(call, "content", None) or []:
        inner = c.get("content") if isinstance(c, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
            texts.append(inner["text"][:500])
    return texts


def mcp_tool_of(call: Any, servers: Mapping[str, Collection[str]]) -> tuple[str, str] | None:
    """``(server, tool)`` when the tool call names a tool of one of ``servers`` — the MCP
    servers this client gave the agent, by name, each with the tool names known of it
    (empty when unknown) — else None. Each agent names an MCP tool its own way (measured
    on the released agents, ``reference/mcp-in-the-kernel.md`` §4): ``mcp__S__T``
    (claude-agent), ``mcp_S_T`` (gemini's model), ``T (S MCP Server)`` (gemini's title),
    ``S_T`` (opencode), ``S__T`` (fast-agent's model), ``S/T`` (fast-agent's title, codex's
    ``Tool: S/T``), ``mcp_S.T`` (mistral-vibe), codex's approval (``rawInput.server_name``
    and its own sentence ``Allow the S MCP server to run tool "T"?``), and a bare ``T`` or
    ``T: {json}`` (kimi's title) or kimi's own request text ``Requesting approval to perform:
    Call MCP tool `T`.`` — a bare name only when it is a known tool of exactly one server.

    A name is matched on the WHOLE field (the agent's tool name, the title, a text
    content), never on its first word: a shell request titled ``run_code || touch x`` names
    no tool. This says what the call is called; whether it provably asks for that tool
    with valid arguments is the caller's check (:func:`mcp_arguments_of`)."""
    raw = _raw(call)
    texts = _texts_of(call)
    for server, tools in servers.items():
        s = re.escape(server)
        if raw.get("server_name") == server or raw.get("server") == server:
            tool = raw.get("tool")
            if isinstance(tool, str) and tool:
                return server, tool
            for text in texts:
                m = re.fullmatch(rf'Allow the {s} MCP server to run tool "([^"]+)"\?.*', text.strip(), re.DOTALL)
                if m:
                    return server, m.group(1)
        patterns = (rf"mcp__{s}__(\w[\w.-]*)", rf"mcp_{s}[_.](\w[\w-]*)", rf"(\w[\w.-]*) \({s} MCP Server\)",
                    rf"(?:Tool: )?{s}/(\w[\w.-]*)", rf"{s}__(\w[\w.-]*)", rf"{s}_(\w[\w.-]*)")
        for text in texts:
            head = text.strip()
            for pattern in patterns:
                m = re.fullmatch(pattern, head)
                if m and (not tools or m.group(1) in tools):
                    return server, m.group(1)
    owners: dict[str, list[str]] = {}
    for server, tools in servers.items():
        for tool in tools:
            owners.setdefault(tool, []).append(server)
    for text in texts:
        head = text.strip()
        said = re.fullmatch(r"Requesting approval to perform: Call MCP tool `([\w.-]+)`\.", head)  # kimi's own words
        name, _, rest = (said.group(1), "", "") if said else head.partition(":")
        if rest and _json_object(rest) is None:
            continue  # "T: …" only when what follows is the call's JSON arguments (kimi's title)
        if len(owners.get(name, ())) == 1:
            return owners[name][0], name
    return None


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as one JSON object, else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def mcp_arguments_of(call: Any, tool: str) -> list[tuple[int, dict[str, Any]]]:
    """Every place the tool call states the arguments of its MCP tool ``tool``, each as
    ``(tier, dict)``: tier 0 structured fields — codex's approval
    (``rawInput.request._meta.tool_params``), ``rawInput.arguments`` beside
    ``server``/``tool`` (codex's call), ``rawInput`` itself; tier 1 a text content that is
    one JSON object (gemini, kimi's call); tier 2 the JSON after ``T:`` in the title (kimi,
    which abbreviates long values there: "…"). Nothing is inferred: a caller that needs the
    arguments checks them against the tool's own schema, takes the lowest tier that fits
    whole, and never lets a title outrank a field."""
    raw = _raw(call)
    out: list[tuple[int, dict[str, Any]]] = []
    request = raw.get("request")
    meta = request.get("_meta") if isinstance(request, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("tool_params"), dict):
        out.append((0, dict(meta["tool_params"])))
    if isinstance(raw.get("arguments"), dict) and ("server" in raw or "server_name" in raw):
        out.append((0, dict(raw["arguments"])))
    if isinstance(getattr(call, "raw_input", None), dict):
        out.append((0, dict(raw)))
    for c in getattr(call, "content", None) or []:
        inner = c.get("content") if isinstance(c, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
            parsed = _json_object(inner["text"].strip())
            if parsed is not None:
                out.append((1, parsed))
    title = getattr(call, "title", None)
    if isinstance(title, str) and title.strip().startswith(f"{tool}:"):
        parsed = _json_object(title.strip()[len(tool) + 1:])
        if parsed is not None:
            out.append((2, parsed))
    return out


def _mcp_arguments(call: Any) -> dict[str, Any]:
    """The arguments of an MCP tool call: ``rawInput`` — or, for codex's approval request,
    its ``request._meta.tool_params`` (its ``arguments`` for its tool call)."""
    raw = _raw(call)
    request = raw.get("request")
    meta = request.get("_meta") if isinstance(request, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("tool_params"), dict):
        return dict(meta["tool_params"])
    if isinstance(raw.get("arguments"), dict) and ("server" in raw or "server_name" in raw):
        return dict(raw["arguments"])
    return raw


def tool_call_fields(call: Any) -> dict[str, Any]:
    """What the ACP tool call itself says, as :class:`RequestInfo`'s extra fields:
    ``acp_kind`` (its ``kind``, None when the agent gave none), ``title`` (None when
    none), ``locations`` (the paths of its ``locations``) and ``diff_paths`` (the paths
    of its ``diff`` contents) — lists of strings, in the agent's order, no repeats; every
    text whole (:func:`fit_params` bounds the request) — and ``notebooks`` (each ``.ipynb`` it writes: path, the
    ids of the cells it changes, whether it is the kernel's own notebook)."""
    kind = getattr(call, "kind", None)
    title = getattr(call, "title", None)
    locations = [loc.get("path") for loc in (getattr(call, "locations", None) or []) if isinstance(loc, dict)]
    diffs = [d.get("path") for d in _diffs(call)]
    notebooks = []
    for d in _diffs(call):
        path = d.get("path")
        if isinstance(path, str) and path.lower().endswith(".ipynb") and isinstance(d.get("newText"), str):
            changed = notebook_diff(d.get("oldText"), d["newText"], path).changed_cell_ids
            notebooks.append({"path": path, "changed_cell_ids": list(changed),
                              "kernel_notebook": bool(getattr(call, "kernel_notebook", None))})
    return {
        "notebooks": notebooks,
        "acp_kind": kind if isinstance(kind, str) and kind else None,
        "title": title if isinstance(title, str) else None,
        "locations": list(dict.fromkeys(p for p in locations if isinstance(p, str) and p)),
        "diff_paths": list(dict.fromkeys(p for p in diffs if isinstance(p, str) and p)),
    }


_DIGEST_FROM = 120
"""Fields longer than this (characters, the journal's one-line target) are kept in
:attr:`Fitted.long` for the journal's digest."""
_SKIP = frozenset({"id", "kind", "sizes", "truncated"})
"""Fields of ``request`` :func:`fit_params` never cuts (the host's own, bounded)."""


@dataclass
class Fitted:
    """What :func:`fit_params` made of a request: ``params`` (the wire dict to send) and
    ``data`` (its compact UTF-8 JSON, at most :data:`MAX_REQUEST` bytes: what the host
    writes to every plugin, encoded once), ``sizes`` and ``truncated`` (as set in
    ``params["request"]``), ``total`` (characters of the input's strings, whole) and
    ``long`` (path -> the whole text, for each field longer than a journal line shows)."""

    params: dict[str, Any]
    data: bytes
    sizes: dict[str, int] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    total: int = 0
    long: dict[str, str] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        return not self.truncated


def _json(value: Any) -> bytes:
    """``value`` as the wire writes it: compact JSON, UTF-8 (a lone surrogate of the
    agent's JSON is written as ``\\udXXX``: ``ensure_ascii``'s escapes, for those only)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def _encoded(value: Any) -> int:
    """Bytes of ``value`` as the wire writes it (:func:`_json`)."""
    return len(_json(value))


def _leaves(value: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(value, str):
        out.append((path, value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _leaves(v, f"{path}[{i}]", out)


def _replace(value: Any, path: str, new: Mapping[str, str]) -> Any:
    """``value`` with the strings at the paths of ``new`` replaced (a copy where changed)."""
    if isinstance(value, str):
        return new.get(path, value)
    if isinstance(value, dict):
        return {k: _replace(v, f"{path}.{k}" if path else str(k), new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, f"{path}[{i}]", new) for i, v in enumerate(value)]
    return value


def _cut_to(text: str, budget: int) -> str:
    """``text`` cut so that, marked, it takes at most ``budget`` bytes as a JSON string."""
    k = min(len(text), budget)
    while k > 0:
        cut = text[:k] + f"… ({len(text) - k} more characters)"
        size = _encoded(cut)
        if size <= budget:
            return cut
        k = min(k - 1, k * budget // size - 1)
    return f"… ({len(text)} more characters)"


def _cap(sizes: list[int], budget: int) -> int:
    """The largest cap ``c`` with ``sum(min(s, c)) <= budget`` (water-filling)."""
    remaining, ordered = budget, sorted(sizes)
    for i, s in enumerate(ordered):
        if s * (len(ordered) - i) <= remaining:
            remaining -= s
            continue
        return remaining // (len(ordered) - i)
    return max(ordered, default=0)


def fit_params(wire: dict[str, Any], limit: int = MAX_REQUEST) -> Fitted:
    """The ``permissions/decide`` params ``wire`` (:meth:`DecideParams.wire`) as sent to a
    plugin: every field whole when the params take at most ``limit`` bytes of JSON; else
    the longest texts of ``request`` (its input, title, paths…) are cut to one same size,
    the largest that fits (:func:`_cap`: the shorter texts stay whole), and named in
    ``request.truncated``. ``request.sizes`` gives every input string's length in
    characters (and every cut field's); an input whose very shape is over the limit (a
    huge number of fields) is left out whole: ``input`` is ``{}``, ``truncated``
    ``["input"]``. Pure; its cost is linear in the request's size — one JSON encoding
    when it fits (about 7 ms a MiB), a few when it is cut: run a large one off the loop
    (:func:`text_size`)."""
    request = dict(wire.get("request") or {})
    leaves: list[tuple[str, str]] = []
    for key, value in request.items():
        if key not in _SKIP:
            _leaves(value, key, leaves)
    sizes = {p: len(t) for p, t in leaves if p == "input" or p.startswith(("input.", "input["))}
    total = sum(sizes.values())
    long = {p: t for p, t in leaves if len(t) > _DIGEST_FROM}
    request["sizes"], request["truncated"] = sizes, []
    params = {**wire, "request": request}
    if sum(len(t) for _, t in leaves) <= limit:
        data = _json(params)
        if len(data) <= limit:
            return Fitted(params, data, sizes, [], total, long)  # the usual case: one encoding
    # too large: the texts are measured apart from the shape (everything else)
    by_path = dict(leaves)
    weights = {p: (_encoded(t) if len(t) <= limit else limit + 1) for p, t in leaves}
    shape = _encoded({**wire, "request": _replace(request, "", {p: "" for p in by_path})}) - 2 * len(by_path)
    reserve = 0
    for _ in range(6):
        cap = _cap(list(weights.values()), limit - shape - reserve)
        marks = [p for p, _ in leaves if weights[p] > cap]
        if not marks or cap < 64:
            break
        cut_sizes = {**sizes, **{p: len(by_path[p]) for p in marks}}
        cut = _replace(request, "", {p: _cut_to(by_path[p], cap) for p in marks})
        cut.update(sizes=cut_sizes, truncated=marks)
        params = {**wire, "request": cut}
        data = _json(params)
        if len(data) <= limit:
            return Fitted(params, data, cut_sizes, marks, total, long)
        reserve += len(data) - limit + 64
    # the input's very shape is over the limit: left out whole
    sizes = {"input": total}
    slim = {k: ("" if isinstance(v, str) and k not in _SKIP else v) for k, v in request.items()}
    slim.update(input={}, sizes=sizes, truncated=["input"], locations=[], diffPaths=[], notebooks=[])
    params = {**wire, "request": slim}
    return Fitted(params, _json(params), sizes, ["input"], total, long)


def text_size(wire: dict[str, Any]) -> int:
    """Characters of the texts of ``wire``'s ``request`` (a cheap measure, no encoding):
    what tells a caller whether :func:`fit_params` is worth running off the loop."""
    leaves: list[tuple[str, str]] = []
    _leaves(wire.get("request"), "", leaves)
    return sum(len(t) for _, t in leaves)


def too_large(fitted: Fitted) -> str | None:
    """Why the request cannot be judged whole by a rule plugin, as the card and the
    journal say it: ``"too large for rule plugins to judge whole: input.code (5,000,000
    characters)"`` (None when nothing was cut)."""
    if fitted.whole:
        return None
    parts = ", ".join(f"{p} ({fitted.sizes.get(p, 0):,} characters)" for p in fitted.truncated)
    return f"too large for rule plugins to judge whole: {parts}"


_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish"}


def command_text(command: Any) -> str | None:
    """A command as one string: as is, or an argv list (``["/bin/bash", "-lc", S]`` is
    ``S``; another list is quoted with :func:`shlex.join`)."""
    if isinstance(command, str):
        return command
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
        prog = command[0].rsplit("/", 1)[-1]
        if prog in _SHELLS and len(command) == 3 and command[1].startswith("-") and "c" in command[1]:
            return command[2]
        return shlex.join(command)
    return None


def _input_of(call: Any, tool: str) -> dict[str, Any]:
    raw = getattr(call, "raw_input", None)
    if isinstance(raw, dict):
        out = dict(raw)
    elif isinstance(raw, str) and raw:
        out = {"command": raw} if tool == "Bash" else {"input": raw}
    else:
        out = {}
        diffs = _diffs(call)
        locations = [loc.get("path") for loc in (getattr(call, "locations", None) or []) if isinstance(loc, dict)]
        if diffs:
            d = diffs[0]
            if tool == "Write":
                out = {"file_path": d.get("path"), "content": d.get("newText", "")}
            else:
                out = {"file_path": d.get("path"), "old_string": d.get("oldText") or "",
                       "new_string": d.get("newText", "")}
        elif locations and locations[0]:
            out = {"file_path": locations[0]}
    if tool == "Bash":
        for key in ("command", "cmd"):
            text = command_text(out.get(key))
            if text is not None:
                if key == "cmd":
                    out.pop("cmd")
                out["command"] = text
                break
    return out


@dataclass(frozen=True)
class Normalised:
    """One permission request, translated: ``tool`` (Claude Code's name), ``kind`` (its
    family), ``input`` (whole), ``agent_tool`` (the agent's own name, if known) and
    ``reserved`` (``"plan"`` or ``"question"``: the user's, never a plugin's)."""

    tool: str
    kind: Family
    input: dict[str, Any]
    agent_tool: str | None = None
    reserved: Literal["plan", "question"] | None = None

    @property
    def target(self) -> str:
        return target_of(self.tool, self.input)


def normalise(call: Any, tools_map: Mapping[str, str] | None = None) -> Normalised:
    """Translate a tool call (the conversation's ``ToolCall``, or anything with ``title``,
    ``kind``, ``raw_input``, ``meta``, ``content``, ``locations``) with the harness's
    ``acp.tools`` map. A call the client knows as a tool of an MCP server it gave the agent
    (``call.mcp``, ``(server, tool)``: see :func:`mcp_tool_of`) is ``mcp__<server>__<tool>``
    whatever the agent calls it, its input the tool's arguments."""
    tools_map = dict(tools_map or {})
    name, server = agent_tool_name(call)
    head = title_head(call)
    acp_kind = getattr(call, "kind", None)
    tool: str | None = None
    known = getattr(call, "mcp", None)
    if known:
        tool = f"mcp__{known[0]}__{known[1]}"
        return Normalised(tool=tool, kind="mcp", input=_mcp_arguments(call), agent_tool=name or head)
    for candidate in (name, head):
        if candidate and candidate in tools_map:
            tool = tools_map[candidate]
            break
    if tool is None:
        for candidate, srv in ((name, server), (head, None)):
            if candidate:
                tool = _as_claude(candidate, srv)
                if tool:
                    break
    if tool is None and acp_kind in KIND_TOOLS:
        rule = KIND_TOOLS[acp_kind]
        tool = rule(call) if callable(rule) else rule
    word_head = head if head and not any(c.isspace() for c in head) else None
    if tool is None:
        tool = name or word_head or "Tool"
    reserved: Literal["plan", "question"] | None = None
    names = {tool, name or "", head or ""}
    if names & PLAN_TOOLS or RESERVED_KINDS.get(acp_kind or "") == "plan":
        reserved = "plan"
    elif names & QUESTION_TOOLS:
        reserved = "question"
    return Normalised(tool=tool, kind=family_of(tool), input=_input_of(call, tool),
                      agent_tool=name or word_head, reserved=reserved)


_TARGET_KEYS = {
    "Bash": ("command",),
    "Edit": ("file_path", "path"), "Write": ("file_path", "path"), "MultiEdit": ("file_path", "path"),
    "NotebookEdit": ("notebook_path", "file_path", "path"), "Read": ("file_path", "path"),
    "Grep": ("pattern",), "Glob": ("pattern",), "LS": ("path",),
    "WebFetch": ("url",), "WebSearch": ("query",),
}


def target_of(tool: str, input: Mapping[str, Any], limit: int = 120) -> str:
    """What a request aims at, on one line: the command, the file, the url…"""
    text = ""
    for key in _TARGET_KEYS.get(tool, ()):
        if isinstance(input.get(key), str):
            text = input[key]
            break
    else:
        for value in input.values():
            if isinstance(value, str) and value:
                text = value
                break
    head = " ".join(text[: limit * 16].split())  # a head: a long text is never split whole (its size is unbounded)
    return head if len(head) <= limit and len(text) <= limit * 16 else head[: limit - 1] + "…"
