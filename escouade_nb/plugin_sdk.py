"""A small SDK to write a rule plugin in Python: a decorated function and ``run()``.

::

    from escouade_nb.plugin_sdk import allow, ask, decide, deny, run

    @decide
    def rules(req):                      # a DecideRequest
        if req.tool == "Bash" and req.command.startswith("rm -rf"):
            return deny("no rm -rf here")
        return ask()

    run()

``run()`` speaks the plugin side of the protocol on stdin/stdout (JSON-RPC 2.0, one
message per line): it answers ``initialize`` (protocol version 1) after calling the
``@on_start`` functions with the plugin folder — read your rules there, not during a
request — then each ``permissions/decide`` with your function's answer (``allow()``,
``deny(message)``, ``ask()``, the strings ``"allow"``/``"deny"``/``"ask"``, or None for
ask), and ``shutdown`` by exiting. An exception in your function answers a JSON-RPC error
(Escouade counts it as ask). While your code runs, ``print`` goes to stderr: stdout is
the wire.

:func:`split_commands` cuts a shell line into its commands (after ``&&``, ``||``, ``;``,
``|``, ``&``, newlines, inside ``$( … )``, ``<( … )`` and backticks; heredoc bodies are
text, not commands) and each command into words with :mod:`shlex`; :func:`matches`
compares a command with a prefix on word boundaries.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "PROTOCOL_VERSION", "DecideRequest", "Answer", "allow", "deny", "ask", "Plugin", "decide", "on_start", "run",
    "split_commands", "command_words", "matches", "command_of",
]

PROTOCOL_VERSION = 1


# -- the request --------------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class RequestPart(_Wire):
    id: str = ""
    kind: str = "tool"
    tool: str = ""
    input: dict[str, Any] = Field(default_factory=dict)


class ProjectPart(_Wire):
    id: str = ""
    name: str = ""
    private: bool = False


class TicketPart(_Wire):
    id: str = ""
    key: str | None = None
    title: str | None = None


class AgentPart(_Wire):
    id: str = ""
    name: str = ""


class DecideRequest(_Wire):
    """The params of ``permissions/decide``, with shortcuts: ``tool``, ``kind``,
    ``input``, ``command`` (the Bash command as one string, "" for another tool)."""

    request: RequestPart
    project: ProjectPart = Field(default_factory=ProjectPart)
    ticket: TicketPart | None = None
    agent: AgentPart = Field(default_factory=AgentPart)

    @property
    def tool(self) -> str:
        return self.request.tool

    @property
    def kind(self) -> str:
        return self.request.kind

    @property
    def input(self) -> dict[str, Any]:
        return self.request.input

    @property
    def command(self) -> str:
        return command_of(self.request.input) if self.request.tool == "Bash" else ""


def command_of(input: dict[str, Any]) -> str:
    """The command of a Bash input, as one string (an argv list is quoted)."""
    cmd = input.get("command", input.get("cmd"))
    if isinstance(cmd, str):
        return cmd
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        return shlex.join(cmd)
    return ""


class Answer(_Wire):
    """A plugin's answer: ``{"decision": "allow"|"deny"|"ask", "message"?: str}``."""

    decision: Literal["allow", "deny", "ask"]
    message: str | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


def allow(message: str | None = None) -> Answer:
    return Answer(decision="allow", message=message)


def deny(message: str | None = None) -> Answer:
    return Answer(decision="deny", message=message)


def ask(message: str | None = None) -> Answer:
    return Answer(decision="ask", message=message)


def _answer(value: Any) -> Answer:
    if value is None:
        return ask()
    if isinstance(value, Answer):
        return value
    if isinstance(value, str):
        return Answer(decision=value)  # type: ignore[arg-type]
    if isinstance(value, dict):
        return Answer.model_validate(value)
    raise TypeError(f"a decide function returns allow(), deny(message), ask() or None, not {value!r}")


# -- the shell line -----------------------------------------------------------------------

_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "(", ")", "time", "fi", "done",
             "esac"}
_WRAPPERS = {"sudo", "command", "exec", "nohup", "builtin", "nice"}
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^']*)'|\"([^\"]*)\"|\\?([^\s;&|<>()]+))")
SUBSTITUTION = "$(…)"
"""The word that stands for a substitution's output in the command around it."""


class _Splitter:
    def __init__(self, text: str) -> None:
        self.s = text
        self.segments: list[str] = []

    def parse(self, i: int, closer: str | None) -> int:
        s = self.s
        cur: list[str] = []
        heredocs: list[tuple[str, bool]] = []

        def flush() -> None:
            text = "".join(cur).strip()
            if text:
                self.segments.append(text)
            cur.clear()

        while i < len(s):
            c = s[i]
            if closer is not None and s.startswith(closer, i):
                flush()
                return i + len(closer)
            if c == "\\":
                if s.startswith("\\\n", i):
                    i += 2  # a line continuation
                    continue
                cur.append(s[i:i + 2])
                i += 2
            elif c == "'":
                j = s.find("'", i + 1)
                j = len(s) - 1 if j < 0 else j
                cur.append(s[i:j + 1])
                i = j + 1
            elif c == '"':
                i = self._double(i, cur)
            elif s.startswith("$((", i):
                j = s.find("))", i + 3)
                j = len(s) - 2 if j < 0 else j
                cur.append("0")
                i = j + 2
            elif s.startswith(("$(", "<(", ">("), i):
                i = self.parse(i + 2, ")")
                cur.append(" " + SUBSTITUTION + " ")
            elif c == "`":
                i = self.parse(i + 1, "`")
                cur.append(" " + SUBSTITUTION + " ")
            elif s.startswith("<<<", i):
                cur.append("<<<")
                i += 3
            elif s.startswith("<<", i):
                m = _HEREDOC.match(s, i)
                if m:
                    heredocs.append((m.group(2) or m.group(3) or m.group(4) or "", m.group(1) == "-"))
                    cur.append(" ")
                    i = m.end()
                else:
                    cur.append("<<")
                    i += 2
            elif c == "\n":
                flush()
                i += 1
                for delim, tabs in heredocs:
                    i = self._skip_body(i, delim, tabs)
                heredocs.clear()
            elif s.startswith(("&&", "||", "|&", ";;"), i):
                flush()
                i += 2
            elif c in ";|&()":
                flush()
                i += 1
            elif c == "#" and (not cur or cur[-1][-1:].isspace()):
                j = s.find("\n", i)
                i = len(s) if j < 0 else j
            else:
                cur.append(c)
                i += 1
        flush()
        return i

    def _double(self, i: int, cur: list[str]) -> int:
        s = self.s
        out = ['"']
        i += 1
        while i < len(s):
            c = s[i]
            if c == "\\":
                out.append(s[i:i + 2])
                i += 2
            elif c == '"':
                out.append('"')
                i += 1
                break
            elif s.startswith("$((", i):
                j = s.find("))", i + 3)
                j = len(s) - 2 if j < 0 else j
                out.append("0")
                i = j + 2
            elif s.startswith("$(", i):
                i = self.parse(i + 2, ")")
                out.append(SUBSTITUTION)
            elif c == "`":
                i = self.parse(i + 1, "`")
                out.append(SUBSTITUTION)
            else:
                out.append(c)
                i += 1
        cur.append("".join(out))
        return i

    def _skip_body(self, i: int, delim: str, tabs: bool) -> int:
        s = self.s
        while i < len(s):
            j = s.find("\n", i)
            line = s[i:] if j < 0 else s[i:j]
            i = len(s) if j < 0 else j + 1
            if (line.lstrip("\t") if tabs else line) == delim:
                break
        return i


def command_words(segment: str) -> list[str]:
    """One command's words (shlex), without leading ``VAR=value`` assignments, shell
    keywords (``if``, ``then``, ``!``…) and wrappers (``sudo``, ``env``, ``nohup``…)."""
    try:
        words = shlex.split(segment, posix=True)
    except ValueError:  # an unclosed quote: split on blanks
        words = segment.split()
    while words:
        w = words[0]
        if w in _KEYWORDS or _ASSIGN.match(w) or w in _WRAPPERS:
            words = words[1:]
        elif w == "env":
            words = words[1:]
            while words and (words[0].startswith("-") or _ASSIGN.match(words[0])):
                words = words[1:]
        else:
            break
    if words and "/" in words[0]:
        words = [os.path.basename(words[0]) or words[0], *words[1:]]
    return words


def split_commands(line: str) -> list[list[str]]:
    """Every command of a shell line, each as its words (see the module's doc)."""
    sp = _Splitter(line)
    sp.parse(0, None)
    return [w for w in (command_words(seg) for seg in sp.segments) if w]


def matches(words: list[str], prefix: str | list[str]) -> bool:
    """True when the command ``words`` starts with ``prefix``, word for word: ``npm
    test`` matches ``npm test -- -u``, not ``npm testing``."""
    pre = command_words(prefix) if isinstance(prefix, str) else list(prefix)
    return bool(pre) and words[: len(pre)] == pre


# -- the plugin ------------------------------------------------------------------------------


class Plugin:
    """A rule plugin: ``@plugin.on_start`` functions get the plugin folder at
    ``initialize``; ``@plugin.decide`` is the decision; ``plugin.run()`` serves."""

    def __init__(self, name: str = "plugin") -> None:
        self.name = name
        self.folder: Path = Path.cwd()
        self._start: list[Callable[[Path], Any]] = []
        self._decide: Callable[[DecideRequest], Any] | None = None

    def on_start(self, fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        self._start.append(fn)
        return fn

    def decide(self, fn: Callable[[DecideRequest], Any]) -> Callable[[DecideRequest], Any]:
        self._decide = fn
        return fn

    # -- serving --------------------------------------------------------------------------
    def handle(self, msg: Any) -> dict[str, Any] | None:
        """The response to one incoming message (None for a notification)."""
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            return _error(msg.get("id") if isinstance(msg, dict) else None, -32600, "invalid request")
        rid = msg.get("id")
        method = msg["method"]
        params = msg.get("params") or {}
        if rid is None:
            return None
        if method == "initialize":
            folder = (params.get("plugin") or {}).get("folder") if isinstance(params, dict) else None
            if folder:
                self.folder = Path(folder)
            try:
                for fn in self._start:
                    fn(self.folder)
            except Exception as exc:
                return _error(rid, -32603, f"start failed: {type(exc).__name__}: {exc}")
            return {"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": PROTOCOL_VERSION, "capabilities": {"permissions": {"decide": True}}}}
        if method == "permissions/decide":
            if self._decide is None:
                return _error(rid, -32601, "this plugin has no @decide function")
            try:
                req = DecideRequest.model_validate(params)
            except ValidationError as exc:
                return _error(rid, -32602, f"invalid params: {exc.errors()[0]['msg']}")
            try:
                answer = _answer(self._decide(req))
            except Exception as exc:
                return _error(rid, -32603, f"{type(exc).__name__}: {exc}")
            return {"jsonrpc": "2.0", "id": rid, "result": answer.wire()}
        if method == "shutdown":
            return {"jsonrpc": "2.0", "id": rid, "result": None}
        return _error(rid, -32601, f"method not found: {method}")

    def run(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
        """Serve until ``shutdown`` or the end of stdin; returns the exit code."""
        inp = stdin or sys.stdin.buffer
        out = stdout or sys.stdout.buffer
        real_stdout = sys.stdout
        sys.stdout = sys.stderr  # a print() of the plugin must not reach the wire
        try:
            for raw in inp:
                if not raw.strip():
                    continue
                msg: Any = None
                try:
                    msg = json.loads(raw)
                except ValueError:
                    reply: dict[str, Any] | None = _error(None, -32700, "parse error")
                else:
                    reply = self.handle(msg)
                if reply is not None:
                    out.write(json.dumps(reply, ensure_ascii=False).encode("utf-8") + b"\n")
                    out.flush()
                if isinstance(msg, dict) and msg.get("method") == "shutdown":
                    return 0
        finally:
            sys.stdout = real_stdout
        return 0


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


_default = Plugin()


def on_start(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Register a start function of the module's plugin (gets the plugin folder)."""
    return _default.on_start(fn)


def decide(fn: Callable[[DecideRequest], Any]) -> Callable[[DecideRequest], Any]:
    """Register the module's plugin's decision function."""
    return _default.decide(fn)


def run() -> None:
    """Serve the module's plugin on stdin/stdout, then exit."""
    sys.exit(_default.run())
