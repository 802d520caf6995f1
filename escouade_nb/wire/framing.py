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

from dataclasses import dataclass


@dataclass(frozen=True)
class Skipped:
    """A line that was not passed on; ``why`` is a short reason, ``size`` its length
    in bytes as far as it was seen."""

    why: str
    size: int


class LineBuffer:
    """Reassembles ``\\n``-terminated lines. ``max_line``: the longest line passed on
    (bytes, newline excluded); longer ones become :class:`Skipped`."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._discarding = False  # inside a too-long line: drop up to its newline
        self._dropped = 0

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
        while True:
            cut = self._buffer.find(b"\n", self._scanned)
            if cut < 0:
                break
            line = bytes(self._buffer[:cut])
            del self._buffer[:cut + 1]
            self._scanned = 0
            if self._discarding:
                self._discarding = False
                self._dropped = 0
                continue
            out.append(line if len(line) <= self.max_line else self._too_long(len(line)))
        if len(self._buffer) > self.max_line:
            if not self._discarding:  # a long line is told once, however many reads it spans
                self._discarding = True
                out.append(self._too_long(len(self._buffer)))
            self._dropped += len(self._buffer)
            self._buffer.clear()
        self._scanned = len(self._buffer)
        return out

    def close(self) -> list[bytes | Skipped]:
        """End of stream: the last line if it had no newline (or its skip)."""
        line, discarding = bytes(self._buffer), self._discarding
        self._buffer.clear()
        self._scanned = 0
        self._discarding = False
        if discarding or not line:
            return []
        return [line if len(line) <= self.max_line else self._too_long(len(line))]
