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

Every field of ``req.input`` comes whole (the whole code, command, file content) and
``req.sizes`` says each one's length in characters, by path (``{"input.code": 2113}``).
Only a request over :data:`~escouade_nb.permissions.protocol.MAX_REQUEST` bytes has its
longest texts cut, named in ``req.truncated`` (``req.whole`` is False): Escouade then
honours no allowance of it (a denial still counts) — do not allow on part of a text
either::

    if not req.whole:
        return ask("too large to judge whole")

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
from typing import Any, BinaryIO

from pydantic import ValidationError

from .permissions.protocol import (
    DECIDE,
    INITIALIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_LINE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION,
    SHUTDOWN,
    AgentInfo,
    DecideParams,
    DecideResult,
    InitializeParams,
    InitializeResult,
    Message,
    ProjectInfo,
    RequestInfo,
    TicketInfo,
    command_of,
    error_response,
    response,
)
from .wire.framing import LineBuffer, Skipped

__all__ = [
    "PROTOCOL_VERSION", "DecideRequest", "Answer", "allow", "deny", "ask", "Plugin", "decide", "on_start", "run",
    "split_commands", "command_words", "matches", "command_of",
]


# -- the request and the answer: the plugin wire's own models (permissions/protocol.py) ----

DecideRequest = DecideParams
"""The params of ``permissions/decide``, with shortcuts: ``tool``, ``kind``, ``input``,
``command`` (the Bash command as one string, "" for another tool), and what the ACP tool
call says itself: ``acp_kind`` (``"delete"``, ``"edit"``, ``"execute"``…, None when the
agent gave none), ``title``, ``locations`` and ``diff_paths`` (lists of paths), ``paths``
(all the paths the call names, input included); ``sizes`` (characters of each input text,
by path), ``truncated`` (the paths of the texts cut: the request was too large) and
``whole`` (nothing cut)."""
Answer = DecideResult
"""A plugin's answer: ``{"decision": "allow"|"deny"|"ask", "message"?: str}``."""
RequestPart, ProjectPart, TicketPart, AgentPart = RequestInfo, ProjectInfo, TicketInfo, AgentInfo


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
        return Answer(decision=value)
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
        """The response to one incoming message, a decoded JSON value (None for a
        notification)."""
        try:
            m = Message.model_validate(msg)
        except ValidationError:
            m = None
        if m is None or m.method is None:
            return error_response(msg.get("id") if isinstance(msg, dict) else None, INVALID_REQUEST,
                                  "invalid request")
        rid, method = m.id, m.method
        if rid is None:
            return None
        if method == INITIALIZE:
            try:
                params = InitializeParams.model_validate(m.params or {})
            except ValidationError as exc:
                return error_response(rid, INVALID_PARAMS, f"invalid params: {exc.errors()[0]['msg']}")
            if params.plugin is not None and params.plugin.folder:
                self.folder = Path(params.plugin.folder)
            try:
                for fn in self._start:
                    fn(self.folder)
            except Exception as exc:
                return error_response(rid, INTERNAL_ERROR, f"start failed: {type(exc).__name__}: {exc}")
            result = InitializeResult(protocol_version=PROTOCOL_VERSION, capabilities={"permissions": {"decide": True}})
            return response(rid, result.wire())
        if method == DECIDE:
            if self._decide is None:
                return error_response(rid, METHOD_NOT_FOUND, "this plugin has no @decide function")
            try:
                req = DecideRequest.model_validate(m.params or {})
            except ValidationError as exc:
                return error_response(rid, INVALID_PARAMS, f"invalid params: {exc.errors()[0]['msg']}")
            try:
                answer = _answer(self._decide(req))
            except Exception as exc:
                return error_response(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            return response(rid, answer.wire())
        if method == SHUTDOWN:
            return response(rid, None)
        return error_response(rid, METHOD_NOT_FOUND, f"method not found: {method}")

    def run(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
        """Serve until ``shutdown`` or the end of stdin; returns the exit code. Lines
        longer than :data:`~escouade_nb.permissions.protocol.MAX_LINE` bytes are
        answered with an invalid-request error (their id cannot be known)."""
        inp = stdin or sys.stdin.buffer
        out = stdout or sys.stdout.buffer
        read = getattr(inp, "read1", inp.read)  # what is there, without waiting for more
        buffer = LineBuffer(MAX_LINE)
        real_stdout = sys.stdout
        sys.stdout = sys.stderr  # a print() of the plugin must not reach the wire
        try:
            while True:
                chunk = read(65536)
                lines = buffer.feed(chunk) if chunk else buffer.close()
                for line in lines:
                    if self._serve_line(line, out):
                        return 0
                if not chunk:
                    return 0
        finally:
            sys.stdout = real_stdout

    def _serve_line(self, line: bytes | Skipped, out: BinaryIO) -> bool:
        """Answer one line; True after ``shutdown``."""
        if isinstance(line, Skipped):
            reply: dict[str, Any] | None = error_response(None, INVALID_REQUEST, f"invalid request: {line.why}")
            msg: Any = None
        elif not line.strip():
            return False
        else:
            msg = None
            try:
                msg = json.loads(line)
            except ValueError:
                reply = error_response(None, PARSE_ERROR, "parse error")
            else:
                reply = self.handle(msg)
        if reply is not None:
            out.write(json.dumps(reply, ensure_ascii=False).encode("utf-8") + b"\n")
            out.flush()
        return isinstance(msg, dict) and msg.get("method") == SHUTDOWN


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
