"""Prompt building, pure: text and content blocks, attachments as blocks, and the
``promptCapabilities`` gate (ACP schema v1: ``PromptCapabilities`` ``image``, ``audio``,
``embeddedContext``; text and ``resource_link`` are always accepted).

Nothing here reads a file: the engine reads an attachment's bytes (in a thread) and
passes them to :func:`attachment_block`.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ATTACH_EMBED_MAX = 4 * 1024 * 1024
"""An attached file bigger than this (bytes) is sent as a link, not embedded."""


def blocks(prompt: str | Sequence[Any]) -> list[dict[str, Any]]:
    """ACP content blocks (wire dicts) from text, or from a list of blocks given as
    strings, dicts or SDK pydantic models."""
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    out = []
    for block in prompt:
        if isinstance(block, str):
            out.append({"type": "text", "text": block})
        elif hasattr(block, "model_dump"):
            out.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        else:
            out.append(dict(block))
    return out


def attachment_link(path: Path) -> dict[str, Any]:
    """A ``resource_link`` block to ``path`` (absolute), with its MIME type when known."""
    mime = mimetypes.guess_type(path.name)[0]
    return {"type": "resource_link", "uri": path.as_uri(), "name": path.name, **({"mimeType": mime} if mime else {})}


def attachment_block(path: Path, data: bytes | None) -> dict[str, Any]:
    """The block of an attached file: an ``image`` block for an image, an embedded
    ``resource`` for UTF-8 text, else (or when ``data`` is None: too big to read, see
    :data:`ATTACH_EMBED_MAX`) a ``resource_link`` to its ``file://`` URI."""
    link = attachment_link(path)
    if data is None:
        return link
    mime = link.get("mimeType")
    if mime is not None and mime.startswith("image/"):
        return {"type": "image", "mimeType": mime, "data": base64.b64encode(data).decode("ascii")}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return link
    return {"type": "resource", "resource": {"uri": path.as_uri(), "mimeType": mime or "text/plain", "text": text}}


def gate(prompt: list[dict[str, Any]], caps: Mapping[str, Any],
         who: str = "the agent") -> tuple[list[dict[str, Any]], list[str]]:
    """Keep only content the agent said it takes (``caps`` = its ``promptCapabilities``):
    an embedded resource it cannot take becomes a ``resource_link`` to its file, or, when
    its URI names no file (``kernel://variable/df``), a text block ``[URI]`` + its text; an image or audio it
    cannot take is left out (``who`` names the agent in the notice). Returns (blocks to send, one notice per block left out)."""
    out: list[dict[str, Any]] = []
    notices: list[str] = []
    for block in prompt:
        kind = block.get("type")
        if kind in ("image", "audio") and not caps.get(kind):
            notices.append(f"The {kind} was not sent: {who} does not accept {kind}s "
                           f"(promptCapabilities.{kind} is false).")
            continue
        if kind == "resource" and not caps.get("embeddedContext"):
            res = block.get("resource") or {}
            uri = res.get("uri", "")
            if not uri.startswith("file:") and isinstance(res.get("text"), str):
                # nothing the agent could open (kernel://variable/df): the text itself, named
                out.append({"type": "text", "text": f"[{uri}]\n{res['text']}"})
                continue
            link = {"type": "resource_link", "uri": uri, "name": unquote(uri.rsplit("/", 1)[-1]) or uri}
            if res.get("mimeType"):
                link["mimeType"] = res["mimeType"]
            out.append(link)
            continue
        out.append(block)
    return out, notices
