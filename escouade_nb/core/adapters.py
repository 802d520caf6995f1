"""Named per-harness adapters: workarounds for a released agent's own bugs.

Each adapter is keyed by the harness's short id and rewrites a ``session/update`` before
the fold (returning None drops it). Every entry says which agent bug it works around;
the harness's manifest says so too (its ``$comment``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .conversation import Conversation

Adapter = Callable[[Conversation, dict[str, Any]], "dict[str, Any] | None"]

_CODEX_WARNING = re.compile(r"Model metadata for `[^`]*` not found\. Defaulting to fallback metadata; "
                            r"this can degrade performance and cause issues\.")


def codex_metadata_warning(conversation: Conversation, update: dict[str, Any]) -> dict[str, Any] | None:
    """codex-acp sends "Model metadata for `…` not found…" as visible reply text: show it
    as a warning notice instead, and keep the rest of the chunk."""
    content = update.get("content") or {}
    if update.get("sessionUpdate") != "agent_message_chunk" or content.get("type") != "text":
        return update
    match = _CODEX_WARNING.search(content.get("text", ""))
    if match is None:
        return update
    conversation.add_notice(match.group(0), level="warning")
    rest = content["text"].replace(match.group(0), "")
    return {**update, "content": {**content, "text": rest}} if rest.strip() else None


_GEMINI_MODE = re.compile(r"\A\s*\[MODE_UPDATE\] (\S+)\s*\Z")


def gemini_mode_update(conversation: Conversation, update: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini CLI (0.61) tells a change of its approval mode as reply text, a chunk of its
    own: ``[MODE_UPDATE] autoEdit``. Show it as a notice and fold it as the
    ``current_mode_update`` it means (its approval modes are its ACP mode ids), so the
    mode menus move and no reply says it."""
    content = update.get("content") or {}
    if update.get("sessionUpdate") != "agent_message_chunk" or content.get("type") != "text":
        return update
    match = _GEMINI_MODE.match(content.get("text", ""))
    if match is None:
        return update
    conversation.add_notice(f"The agent switched to its mode {match.group(1)!r} (it said so as "
                            f"\"[MODE_UPDATE] {match.group(1)}\").")
    return {"sessionUpdate": "current_mode_update", "currentModeId": match.group(1)}


ADAPTERS: dict[str, list[Adapter]] = {"codex": [codex_metadata_warning], "gemini": [gemini_mode_update]}


def adapt(harness_id: str, conversation: Conversation, update: Any) -> Any:
    """Run the harness's adapters over one update (None: drop it)."""
    for adapter in ADAPTERS.get(harness_id, ()):
        if not isinstance(update, dict):
            return update
        update = adapter(conversation, update)
        if update is None:
            return None
    return update
