"""The stdio transport filter between an agent's pipes and the SDK's connection.

It implements the SDK's message-level ``Transport`` (``send``/``receive``/``close`` of
decoded JSON-RPC objects), so the SDK keeps doing the JSON-RPC bookkeeping while we
decide what reaches it:

* framing is ACP's stdio framing: one UTF-8 JSON object per ``\\n``-terminated line.
  Lines are assembled from raw chunks before decoding, so a multibyte character split
  across reads is whole again, and a line of any length up to ``max_line_bytes`` is
  taken (the SDK's own reader has a 64 KiB asyncio limit when spawned by hand);
* a line that is not JSON, not UTF-8, too long, or JSON but not an object (which kills
  the SDK's receive loop) is skipped and recorded in ``skipped``, never fatal;
* a line over the cap (:data:`MAX_LINE_BYTES`) is never held whole nor parsed: its bytes are
  dropped as they come, only its first and last bytes kept to read its envelope
  (:func:`~.framing.envelope`). A request (``id`` and ``method``) is answered with a
  JSON-RPC error (:data:`TOO_LARGE`) and a notification dropped, each told to ``on_refused``;
  anything else (a response: what a turn or a card may wait for) goes to ``on_skip``;
* ``intercept`` sees every incoming object first and may consume it: the agent folds
  ``session/update`` notifications there, synchronously and in arrival order (the
  SDK's one-task-per-notification dispatch can reorder them and drops unknown kinds).
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream

from .framing import LineBuffer, Skipped, envelope

log = logging.getLogger(__name__)

_JSON = json.JSONDecoder()
YIELD_AFTER = 0.004
"""Seconds of folding lines of one read before the reader lets the loop turn."""

MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest line taken from an agent (bytes, 8 MiB); a longer one is refused unread. Why 8 MiB:
it is twice what rule plugins judge whole (a request over 4 MiB has its fields cut for them,
``permissions/request.py``), under the kernel's MCP server's 10 MB body limit (413), far above any
message the seven released agents were measured to send, and json.loads of a line of that size takes
40–65 ms (a worker thread would not help: the decoder holds the GIL); a 40 MB line held the loop 10.5 s
before the cap."""
TOO_LARGE = -32600
"""The JSON-RPC error code a refused request is answered with (Invalid Request: over the cap)."""

Intercept = Callable[[dict[str, Any]], bool]
Observer = Callable[[str, dict[str, Any]], None]


class LineTransport:
    """NDJSON over a byte send stream (agent's stdin) and receive stream (its stdout).

    ``intercept(message) -> bool``: called for each incoming object; True means
    consumed (not passed to the SDK). ``on_skip(why)``: told of each skipped line.
    ``observers``: ``fn(direction, message)`` for every message in (``"in"``) and out
    (``"out"``), for transcripts and counters."""

    def __init__(self, send_stream: ByteSendStream, receive_stream: ByteReceiveStream, *,
                 intercept: Intercept | None = None, max_line_bytes: int = MAX_LINE_BYTES,
                 on_skip: Callable[[str], None] | None = None,
                 on_refused: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        self._send_stream = send_stream
        self._receive_stream = receive_stream
        self._intercept = intercept
        self._on_skip = on_skip
        self._on_refused = on_refused
        self.max_line_bytes = max_line_bytes
        self._framing = LineBuffer(max_line_bytes, report_at_end=True)
        self._lines: collections.deque[bytes | Skipped] = collections.deque()
        self._eof = False
        self._turned = time.monotonic()  # when the loop last turned under this reader
        self._send_lock = anyio.Lock()
        self.observers: list[Observer] = []
        # fn(direction, line): the exact JSON text of each message (no newline), for
        # transcripts, which then need not serialise the message again
        self.line_observers: list[Callable[[str, bytes], None]] = []
        self.skipped: collections.deque[str] = collections.deque(maxlen=50)
        self.skipped_count = 0

    # -- sending ----------------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        async with self._send_lock:
            try:
                await self._send_stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ConnectionError(f"agent's stdin is closed: {exc}") from exc
        self._notify("out", message, data[:-1])

    async def close(self) -> None:
        try:
            await self._send_stream.aclose()
        except Exception:  # already gone
            pass

    # -- receiving --------------------------------------------------------------------
    async def receive(self) -> dict[str, Any] | None:
        lines = self._lines
        while True:
            # the commonest: a line of the last read and no turn due (_next_line's first case), without
            # a coroutine per line
            if lines and type(lines[0]) is bytes and time.monotonic() - self._turned <= YIELD_AFTER:
                line: bytes | None = cast(bytes, lines.popleft())
            else:
                line = await self._next_line()
            if line is None:
                return None
            message = self._decode(line)
            if message is None:
                continue
            self._notify("in", message, line.strip())
            if self._intercept is not None and self._intercept(message):
                continue
            return message

    async def _next_line(self) -> bytes | None:
        while True:
            if self._lines and time.monotonic() - self._turned > YIELD_AFTER:
                # one read holds hundreds of lines, each folded synchronously: let the
                # kernel's loop turn (redraws, cells, other agents) every few ms of that work
                await anyio.lowlevel.checkpoint()
                self._turned = time.monotonic()
            while self._lines:
                event = self._lines.popleft()
                if isinstance(event, Skipped):
                    await self._refuse(event)
                    continue
                return event
            if self._eof:
                return None
            # a chatty agent must not monopolise the kernel's loop: a read that finds data
            # already buffered does not suspend, so yield once per chunk read
            await anyio.lowlevel.checkpoint()
            self._turned = time.monotonic()
            try:
                chunk = await self._receive_stream.receive(1 << 16)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._eof = True
                self._lines.extend(self._framing.close())
                continue
            self._lines.extend(self._framing.feed(chunk))

    def _decode(self, line: bytes) -> dict[str, Any] | None:
        line = line.strip()
        if not line:
            return None
        try:
            text = line.decode("utf-8")
            value, end = _JSON.raw_decode(text)  # json.loads without its two whitespace scans: the line is stripped
            if end != len(text):
                raise ValueError("extra data after the JSON value")
        except UnicodeDecodeError:
            self._skip("line is not UTF-8", line)
            return None
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            self._skip("line is not JSON", line)
            return None
        if not isinstance(value, dict):
            self._skip(f"JSON line is a {type(value).__name__}, not an object", line)
            return None
        return value

    async def _refuse(self, skipped: Skipped) -> None:
        """A line over the cap, dropped unread: a request is answered with an error, a
        notification dropped, each told to ``on_refused(size, envelope)``; anything else
        (a response, a line without an envelope) is a skip (``on_skip``)."""
        found = envelope(skipped) if skipped.head or skipped.tail else {}
        if "method" not in found:
            self._skip(skipped.why)
            return
        self.skipped_count += 1
        self.skipped.append(f"{skipped.why}: refused {found['method']} ({skipped.size} bytes)")
        if "id" in found:
            error = {"code": TOO_LARGE, "message": f"message refused: {skipped.size} bytes, over the client's cap "
                                                   f"of {self.max_line_bytes} bytes",
                     "data": {"size": skipped.size, "cap": self.max_line_bytes}}
            try:
                await self.send({"jsonrpc": "2.0", "id": found["id"], "error": error})
            except ConnectionError:
                pass  # the agent is gone: nothing to answer
        if self._on_refused is not None:
            try:
                self._on_refused(skipped.size, found)
            except Exception:
                log.exception("on_refused failed")

    def _skip(self, why: str, line: bytes = b"") -> None:
        self.skipped_count += 1
        sample = line[:200].decode("utf-8", "replace")
        self.skipped.append(f"{why}: {sample}" if sample else why)
        if self._on_skip is not None:
            try:
                self._on_skip(why)
            except Exception:
                log.exception("on_skip failed")
        log.debug("skipped agent output: %s", why)

    def _notify(self, direction: str, message: dict[str, Any], line: bytes) -> None:
        for raw in self.line_observers:
            try:
                raw(direction, line)
            except Exception:
                log.exception("transport line observer failed")
        for fn in self.observers:
            try:
                fn(direction, message)
            except Exception:
                log.exception("transport observer failed")
