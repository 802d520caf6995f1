"""The images of a notebook's outputs that one answer of the kernel's MCP server carries
(``notebook_cells(source="live")``, ``execute_cell``). Pure: checks what a notebook page
sent (untrusted) and names each image in the text.

The page sends ``image/png`` and ``image/jpeg`` data as Jupyter holds it (base64), at most
:data:`MAX_IMAGES` per answer and :data:`MAX_IMAGE_BYTES` each; an image it does not send
comes as ``{"not_sent": "too large" | "too many", "bytes": int}``. The kernel checks all of
it again: valid base64 whose bytes start as the MIME type says, the same caps.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IMAGE_MIMES", "MAX_IMAGE_BYTES", "MAX_IMAGES", "Images"]

IMAGE_MIMES = ("image/png", "image/jpeg")
"""The MIME types of outputs sent as images (MCP ``ImageContent``); any other is named only."""

MAX_IMAGE_BYTES = 1_000_000
"""Bytes (decoded) of one image beyond which it is named with its size, not attached."""

MAX_IMAGES = 4
"""Images attached to one answer; further ones are named with their size, not attached."""

_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1000 else f"{n / 1000:.1f} kB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


@dataclass
class Images:
    """The images one answer attaches, in order: ``items`` is ``[{"mime_type", "data"
    (base64, no whitespace), "bytes" (decoded size), "cell_id", "index"}]``, at most
    ``limit``, each at most ``max_bytes`` decoded. :meth:`take` checks one output's image
    and says in text what became of it."""

    limit: int = MAX_IMAGES
    max_bytes: int = MAX_IMAGE_BYTES
    items: list[dict[str, Any]] = field(default_factory=list)

    def take(self, mime: str, value: Any, cell_id: str | None = None, index: int | None = None) -> str:
        """One image of an output (``mime`` one of :data:`IMAGE_MIMES`; ``value`` as the
        page sent it: base64 text, ``{"not_sent", "bytes"}`` or anything else), kept when it
        is valid and within the caps: the text naming it (``[image/png, 12.3 kB: image 1 of
        this answer, attached after the text]``, ``… not attached``, ``… refused``), never
        its data; ``""`` when the page sent no data (the output's text says what it is)."""
        if isinstance(value, Mapping):
            n = value.get("bytes")
            n = n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 10**12 else None
            why = "beyond the" if value.get("not_sent") == "too many" else "over the"
            what = f"{self.limit} images of one answer" if why == "beyond the" else \
                f"{_size(self.max_bytes)} of one image"
            return f"[{mime}{', ' + _size(n) if n is not None else ''}: {why} {what}, not attached]"
        if not isinstance(value, str) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return ""
        joined = value if isinstance(value, str) else "".join(value)
        compact = "".join(joined.split())  # Jupyter's base64 may hold line breaks
        if not compact:
            return ""
        if len(compact) > (self.max_bytes + 2) // 3 * 4:
            return f"[{mime}, {_size(len(compact) * 3 // 4)}: over the {_size(self.max_bytes)} of one image, " \
                   "not attached]"
        try:
            raw = base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError):
            return f"[{mime}: refused, the page sent no valid base64]"
        if len(raw) > self.max_bytes:
            return f"[{mime}, {_size(len(raw))}: over the {_size(self.max_bytes)} of one image, not attached]"
        if not raw.startswith(_MAGIC.get(mime, b"\x00")):
            return f"[{mime}: refused, the data is no {mime.split('/')[1].upper()} image]"
        if len(self.items) >= self.limit:
            return f"[{mime}, {_size(len(raw))}: beyond the {self.limit} images of one answer, not attached]"
        self.items.append({"mime_type": mime, "data": compact, "bytes": len(raw), "cell_id": cell_id,
                           "index": index})
        return f"[{mime}, {_size(len(raw))}: image {len(self.items)} of this answer, attached after the text]"

    def listing(self) -> list[dict[str, Any]]:
        """The attached images without their data, for the answer's text: ``[{"image" (from
        1), "cell_id", "index", "mime_type", "bytes"}]``."""
        return [{"image": n, "cell_id": it["cell_id"], "index": it["index"], "mime_type": it["mime_type"],
                 "bytes": it["bytes"]} for n, it in enumerate(self.items, 1)]
