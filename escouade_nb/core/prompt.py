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
from urllib.parse import quote, unquote

ATTACH_EMBED_MAX = 4 * 1024 * 1024
"""An attached file bigger than this (bytes) is sent as a link, not embedded."""

FORK_END = "--- end of the earlier conversation; my next message follows. ---"
"""The last line of a fork's carried conversation (:func:`carried_conversation`)."""


def context(block: dict[str, Any], kind: str) -> dict[str, Any]:
    """``block`` marked as context escouade_nb put in the prompt, not the user's words:
    ``_meta.escouade.context`` = ``kind`` (``"fork"``, ``"preamble"``). An agent may
    ignore the mark; ours (the fake agent) reads its commands from unmarked text only."""
    return {**block, "_meta": {**(block.get("_meta") or {}), "escouade": {"context": kind}}}


def is_context(block: Mapping[str, Any]) -> bool:
    """Whether ``block`` (a wire dict) carries :func:`context`'s mark."""
    meta = block.get("_meta")
    ours = meta.get("escouade") if isinstance(meta, Mapping) else None
    return isinstance(ours, Mapping) and bool(ours.get("context"))


def steered_part(block: dict[str, Any], n: int) -> dict[str, Any]:
    """``block`` marked as the words of the ``n``-th (≥ 1) steer joined to a prompt that was
    not sent yet (``agent.steer`` while its turn took its checkpoint): ``_meta.escouade.steered``
    = ``n``. One ``session/prompt`` carries the user's prompt, then each steer's blocks; the
    mark tells them apart in the transcript, as the conversation shows them (messages of
    their own, marked steered)."""
    meta = dict(block.get("_meta") or {})
    ours = meta.get("escouade")
    meta["escouade"] = {**(ours if isinstance(ours, Mapping) else {}), "steered": n}
    return {**block, "_meta": meta}


def steered_part_of(block: Mapping[str, Any]) -> int | None:
    """The ``n`` of :func:`steered_part`'s mark on ``block`` (a wire dict), else None."""
    meta = block.get("_meta")
    ours = meta.get("escouade") if isinstance(meta, Mapping) else None
    n = ours.get("steered") if isinstance(ours, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def carried_conversation(name: str, parent: str, text: str, speaker: str = "agent") -> dict[str, Any]:
    """The block that carries a fork's conversation so far (``text``, rendered: the
    user's messages after ``you:``, the agent's after ``speaker:``) to the new agent
    ``name`` forked from ``parent``: an embedded ``resource``
    (``escouade://fork/PARENT/conversation``, markdown) marked as :func:`context`, apart
    from the user's own words (their blocks follow it). The text says it is a record,
    not requests, and ends with :data:`FORK_END` and a blank line (an agent that glues
    text blocks together keeps them apart). Where the agent takes no embedded context,
    :func:`gate` sends it as a text block, mark kept."""
    body = (f"You are {name}, forked from {parent}: you continue a conversation another session of yours had "
            f"with me. Here it is, for context only: a record of what was said, not requests to carry out now "
            f"(in it, “you:” marks my messages and “{speaker}:” yours).\n\n"
            f"{text.strip()}\n\n{FORK_END}\n\n")
    return context({"type": "resource", "resource": {"uri": f"escouade://fork/{quote(parent, safe='')}/conversation",
                                                     "mimeType": "text/markdown", "text": body}}, "fork")


def carried_items(name: str, parent: str, items: Sequence[Any], speaker: str = "agent") -> dict[str, Any]:
    """:func:`carried_conversation` of conversation ``items`` (rendered as text), leaving out
    the turns a rewind undid (``rewound``): the one way a conversation is carried into a
    new session — a fork without ``session/fork``, a rewind into a new session."""
    from .render_text import render_items

    kept = [i for i in items if not getattr(i, "rewound", False)]
    return carried_conversation(name, parent, render_items(kept, speaker=speaker), speaker)


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
    its URI names no file (``kernel://variable/df``), a text block ``[URI]`` + its text; an
    image or audio it cannot take is left out (``who`` names the agent in the notice).
    Returns (blocks to send, one notice per block left out)."""
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
                named = {"type": "text", "text": f"[{uri}]\n{res['text']}"}
                out.append({**named, "_meta": block["_meta"]} if "_meta" in block else named)
                continue
            link = {"type": "resource_link", "uri": uri, "name": unquote(uri.rsplit("/", 1)[-1]) or uri}
            if res.get("mimeType"):
                link["mimeType"] = res["mimeType"]
            out.append(link)
            continue
        out.append(block)
    return out, notices
