"""A reloaded session's replay matched against what the conversation already has: :class:`ReplaySkip`.

An agent that reloads a session (``session/load``; one that replays on ``session/resume``
although it must not) sends its history again as ``session/update`` notifications before its
answer. What the conversation has of that session is skipped; the rest — a history this client
never saw (a session of the agent's own list), or what the agent replays differently from what
it said (the agent is untrusted: its replay is shown, never taken for ours) — is shown, and is
kept in the record as it was shown: :func:`~.transcript.replay` matches a load's replay with the
same :class:`ReplaySkip` live does, so a resume of a resume needs nothing from the agent.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from typing import Any

MESSAGE_CHUNKS = {"user_message_chunk": "user", "agent_message_chunk": "agent", "agent_thought_chunk": "thought"}


def replay_key(update: Any) -> str:
    """How an update replayed by ``session/load`` that is not a text chunk is recognised
    as one the transcript already has: a message chunk by its role and content (agents
    replay them with or without their ``messageId``), anything else whole."""
    if isinstance(update, dict) and update.get("sessionUpdate") in MESSAGE_CHUNKS:
        return json.dumps([update["sessionUpdate"], update.get("content")], sort_keys=True)
    return json.dumps(update, sort_keys=True)


def _chunk_text(update: Any) -> tuple[str, str] | None:
    """``(role, text)`` of a text message chunk, else None."""
    if not isinstance(update, dict) or update.get("sessionUpdate") not in MESSAGE_CHUNKS:
        return None
    content = update.get("content")
    if not isinstance(content, dict) or content.get("type") != "text" or not isinstance(content.get("text"), str):
        return None
    return MESSAGE_CHUNKS[update["sessionUpdate"]], content["text"]


class ReplaySkip:
    """The updates a reloaded session will replay that the conversation already has.
    ``active`` only while ``session/load`` runs; :meth:`skip` consumes one match.

    Text chunks are matched by content, not by chunk boundaries: per role (user, agent,
    thought) the text the conversation has, in order, as one string; a replayed chunk is
    skipped when its text comes next in it (surrounding whitespace aside), or further on
    (the agent replays less than the transcript has), and that much is consumed. Other
    updates (tool calls, plans, non-text content) are matched whole, by count.
    ``shown``: how many replayed updates were not skipped while the conversation had
    something of the session (the replay differs from the record), so far."""

    def __init__(self, keys: collections.Counter[str] | None = None,
                 texts: dict[str, str] | None = None) -> None:
        self.keys: collections.Counter[str] = keys or collections.Counter()
        self.texts: dict[str, str] = dict(texts or {})
        self.known = bool(self.keys) or any(self.texts.values())  # the conversation has some of the session
        self.active = False
        self.shown = 0

    @classmethod
    def of(cls, updates: Iterable[Any]) -> ReplaySkip:
        """Expect ``updates`` (session/update payloads, in order, our prompts as
        ``user_message_chunk``s) to be replayed."""
        keys: collections.Counter[str] = collections.Counter()
        texts: dict[str, list[str]] = {}
        for update in updates:
            chunk = _chunk_text(update)
            if chunk is not None:
                texts.setdefault(chunk[0], []).append(chunk[1])
            elif update is not None:
                keys[replay_key(update)] += 1
        return cls(keys, {role: "".join(parts) for role, parts in texts.items()})

    def skip(self, update: Any) -> bool:
        """Whether ``update`` (replayed while :attr:`active`) is one the conversation has
        (consumed, not to show); False when not active."""
        if not self.active:
            return False
        if self._matched(update):
            return True
        chunk = _chunk_text(update)
        if self.known and (chunk is None or chunk[1].strip()):
            self.shown += 1
        return False

    def _matched(self, update: Any) -> bool:
        chunk = _chunk_text(update)
        if chunk is not None:
            role, text = chunk
            wanted = text.strip()
            if not wanted:  # whitespace between messages: nothing to show twice
                return bool(self.texts.get(role))
            have = self.texts.get(role, "")
            at = have.find(wanted) if have else -1
            if at < 0:
                return False
            self.texts[role] = have[at + len(wanted):]
            return True
        key = replay_key(update)
        if self.keys[key] > 0:
            self.keys[key] -= 1
            return True
        return False

    def done(self) -> None:
        self.active = False
        self.keys.clear()
        self.texts.clear()
