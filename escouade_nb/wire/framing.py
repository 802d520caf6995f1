"""Line framing, pure: bytes in, whole lines out (h11's ``_receivebuffer`` style).

ACP's stdio framing, and the rule plugins' JSON-RPC, is one UTF-8 JSON object per
``\\n``-terminated line. :class:`LineBuffer` assembles lines from chunks of any size, so
a multibyte character split across reads is whole again; a line longer than
``max_line`` bytes is dropped (once, however many chunks it spans) and reported as a
:class:`Skipped`. It never awaits, reads or decodes JSON: the transport, the plugin
host and ``plugin_sdk`` each feed it their own reads.

    buf = LineBuffer(max_line=1 << 20)
    for event in buf.feed(chunk):      # bytes (a line, no newline) or Skipped
        ...
    for event in buf.close():          # end of stream: the last unterminated line
        ...
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

HEAD_KEPT = 64 * 1024
"""Bytes of a too-long line's start kept (``report_at_end``): enough for its JSON-RPC envelope."""
TAIL_KEPT = 4 * 1024
"""Bytes of a too-long line's end kept (``report_at_end``): an envelope written after its params."""


@dataclass(frozen=True)
class Skipped:
    """A line that was not passed on; ``why`` is a short reason, ``size`` its length
    in bytes as far as it was seen. With ``report_at_end``, a too-long line is told once it
    ended, ``size`` its whole length, ``head`` and ``tail`` its first and last bytes
    (:data:`HEAD_KEPT`, :data:`TAIL_KEPT`): what :func:`envelope` reads; nothing else of it is held."""

    why: str
    size: int
    head: bytes = field(default=b"", compare=False, repr=False)
    tail: bytes = field(default=b"", compare=False, repr=False)


_STRING = rb'"(?:[^"\\]|\\.)*"'
_SCALAR = rb'(?:' + _STRING + rb'|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)'
_MEMBER = re.compile(rb'\s*(' + _STRING + rb')\s*:\s*')
_SCALAR_AT = re.compile(_SCALAR)
_TOKEN = re.compile(_STRING + rb'|[\[\]{}]')
_SEPARATOR = re.compile(rb'\s*([,}])')
MEMBERS_READ = 16
"""Top-level members read at most at each end of a too-long line: a JSON-RPC envelope has four."""
_LAST_MEMBER = re.compile(rb'[,{]\s*(' + _STRING + rb')\s*:\s*(' + _SCALAR + rb')\s*$')


def _top_members_of_head(head: bytes) -> dict[str, Any]:
    """The top-level scalar members of a JSON object's first bytes, as far as they go."""
    out: dict[str, Any] = {}
    at = len(head) - len(head.lstrip())
    if head[at:at + 1] != b"{":
        return out
    at += 1
    for _ in range(MEMBERS_READ):
        m = _MEMBER.match(head, at)
        if m is None:
            return out
        key, at = m.group(1), m.end()
        value = _SCALAR_AT.match(head, at)
        if value is not None:
            try:
                out.setdefault(json.loads(key), json.loads(value.group(0)))
            except ValueError:
                return out
            at = value.end()
        elif head[at:at + 1] in (b"{", b"["):  # a container: skipped when it closes within the head
            depth = 0
            for token in _TOKEN.finditer(head, at):
                t = token.group(0)
                depth += 1 if t in (b"{", b"[") else -1 if t in (b"}", b"]") else 0
                if depth == 0:
                    at = token.end()
                    break
            else:
                return out
        else:
            return out
        sep = _SEPARATOR.match(head, at)
        if sep is None or sep.group(1) == b"}":
            return out
        at = sep.end()
    return out


def _top_members_of_tail(tail: bytes) -> dict[str, Any]:
    """The top-level scalar members a JSON object's last bytes end with (``,"id":5}``)."""
    out: dict[str, Any] = {}
    rest = tail.rstrip()
    if not rest.endswith(b"}"):
        return out
    rest = rest[:-1]
    for _ in range(MEMBERS_READ):
        m = _LAST_MEMBER.search(rest)
        if m is None:
            return out
        try:
            out.setdefault(json.loads(m.group(1)), json.loads(m.group(2)))
        except ValueError:
            return out
        rest = rest[:m.start() + 1].rstrip(b"{")  # the member before it ends where this one's comma is
        rest = rest[:-1] if rest.endswith(b",") else rest
    return out


def envelope(skipped: Skipped) -> dict[str, Any]:
    """What a too-long line's kept ends say of its JSON-RPC envelope — ``method`` and ``id``
    when found as top-level members (a string, a number) at its start or end — without
    parsing the line (it is not held). ``{}`` when neither is found: a response, or not JSON-RPC."""
    found = {**_top_members_of_tail(skipped.tail), **_top_members_of_head(skipped.head)}
    out: dict[str, Any] = {}
    if isinstance(found.get("method"), str):
        out["method"] = found["method"]
    if "id" in found and (isinstance(found["id"], (str, int)) and not isinstance(found["id"], bool)):
        out["id"] = found["id"]
    return out


class LineBuffer:
    """Reassembles ``\\n``-terminated lines. ``max_line``: the longest line passed on
    (bytes, newline excluded); longer ones become :class:`Skipped` — told as soon as seen, or,
    with ``report_at_end``, once the line ended (its whole size, its kept ``head`` and ``tail``)."""

    def __init__(self, max_line: int, *, report_at_end: bool = False) -> None:
        self.max_line = max_line
        self.report_at_end = report_at_end
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._discarding = False  # inside a too-long line: drop up to its newline
        self._dropped = 0
        self._head = b""  # report_at_end: the first bytes of the line being dropped
        self._tail = b""  # … and its last ones so far

    @property
    def pending(self) -> int:
        """Bytes held that do not make a line yet."""
        return len(self._buffer)

    def _too_long(self, size: int) -> Skipped:
        return Skipped(f"line longer than {self.max_line} bytes", size)

    def feed(self, data: bytes) -> list[bytes | Skipped]:
        """Take a chunk; return the lines it completed (and what was skipped), in order."""
        out: list[bytes | Skipped] = []
        self._buffer += data
        cut = self._buffer.find(b"\n", self._scanned)
        if cut >= 0:  # one copy of what is held, the lines sliced from it, what follows the last kept
            text, start = bytes(self._buffer), 0
            while cut >= 0:
                line, start = text[start:cut], cut + 1
                cut = text.find(b"\n", start)
                if self._discarding:
                    self._discarding = False
                    if self.report_at_end:
                        out.append(self._ended(line))
                    self._dropped = 0
                elif len(line) <= self.max_line:
                    out.append(line)
                else:
                    out.append(Skipped(self._too_long(len(line)).why, len(line), line[:HEAD_KEPT], line[-TAIL_KEPT:])
                               if self.report_at_end else self._too_long(len(line)))
            del self._buffer[:start]
        if len(self._buffer) > self.max_line:
            if not self._discarding:  # a long line is told once, however many reads it spans
                self._discarding = True
                if self.report_at_end:
                    self._head = bytes(self._buffer[:HEAD_KEPT])
                else:
                    out.append(self._too_long(len(self._buffer)))
            if self.report_at_end:
                self._tail = (self._tail + bytes(self._buffer[-TAIL_KEPT:]))[-TAIL_KEPT:]
            self._dropped += len(self._buffer)
            self._buffer.clear()
        self._scanned = len(self._buffer)
        return out

    def _ended(self, rest: bytes) -> Skipped:
        """The too-long line being dropped ended with ``rest``: told whole (``report_at_end``)."""
        size = self._dropped + len(rest)
        tail = (self._tail + rest)[-TAIL_KEPT:]
        head = self._head
        self._head = self._tail = b""
        return Skipped(self._too_long(size).why, size, head, tail)

    def close(self) -> list[bytes | Skipped]:
        """End of stream: the last line if it had no newline (or its skip)."""
        line, discarding = bytes(self._buffer), self._discarding
        self._buffer.clear()
        self._scanned = 0
        self._discarding = False
        if discarding and self.report_at_end:
            ended = self._ended(line)
            self._dropped = 0
            return [ended]
        if discarding or not line:
            return []
        return [line if len(line) <= self.max_line else self._too_long(len(line))]
