"""Real PNG images for tests, made here (no image library): :func:`png`."""

from __future__ import annotations

import zlib


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG of ``width`` × ``height`` grey pixels (8-bit greyscale), as bytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    head = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x00\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
