"""Rebuilding an agent from its transcript (after a kernel restart), and reattaching it.

:func:`resumed` reads the transcript once, replays it into a fresh conversation, and
counts the updates the agent will replay if it reloads the session (``session/load``),
so that replay is folded in, not appended twice (:class:`ReplaySkip`). A harness whose
manifest has gone gets a stand-in (:func:`missing_harness`): the agent is listed
"harness missing" and its conversation stays readable.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.adapters import adapt
from ..core.status import AgentStatus
from ..manifest import Harness, HarnessRef, Manifest
from ..wire import kernel_calls
from ..wire import transcript as tr
from .review.file_review import restore_settled

if TYPE_CHECKING:
    from .interfaces import ResumedAgent


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
    updates (tool calls, plans, non-text content) are matched whole, by count."""

    def __init__(self, keys: collections.Counter[str] | None = None,
                 texts: dict[str, str] | None = None) -> None:
        self.keys: collections.Counter[str] = keys or collections.Counter()
        self.texts: dict[str, str] = dict(texts or {})
        self.active = False

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
        if not self.active:
            return False
        chunk = _chunk_text(update)
        if chunk is not None:
            role, text = chunk
            have = self.texts.get(role, "")
            if not have:
                return False
            wanted = text.strip()
            if not wanted:  # whitespace between messages: nothing to show twice
                return True
            at = have.find(wanted)
            if at < 0:
                return False
            self.texts[role] = have[at + len(wanted):]
            return True
        if not self.keys:
            return False
        key = replay_key(update)
        if self.keys[key] > 0:
            self.keys[key] -= 1
            return True
        return False

    def done(self) -> None:
        self.active = False
        self.keys.clear()
        self.texts.clear()


def resumable_text(found: Iterable[tr.Summary]) -> str:
    """What ``%escouade resume`` prints: per agent, its name, when its transcript was last
    written (local time), its first prompt, and the transcript's path."""
    found = list(found)
    if not found:
        return "No transcript to resume from."
    lines = ["Resumable agents:"]
    for s in found:
        prompt = f"“{s.first_prompt}”" if s.first_prompt is not None else "(no prompt)"
        lines.append(f"  {s.name:<14} {s.written_text}  {prompt}  {s.path}")
    return "\n".join(lines)


def missing_harness(harness_id: str) -> HarnessRef:
    """A stand-in for a harness whose manifest has gone (its agents stay readable)."""
    plugin, _, short = harness_id.rpartition(":")
    manifest = Manifest(id=plugin.removeprefix("plugin:") or "missing", name="(missing)")
    return HarnessRef(manifest=manifest, harness=Harness(id=short or harness_id, name=short or harness_id,
                                                         acp={"args": []}),
                      path=Path("(missing)"), source="extra")


def expected_replay(records: list[tr.Record], session_id: str | None) -> Iterator[Any]:
    """What the agent will replay when session ``session_id`` is reloaded, as the
    conversation has it: that session's updates as they came (not those of a
    ``session/load``'s replay, which repeat them), and our prompts as the agent's
    ``user_message_chunk``s."""
    loads: set[Any] = set()  # ids of session/load requests not answered yet
    for r in records:
        msg = r.msg or {}
        params = msg.get("params") or {}
        if r.kind == "out" and msg.get("method") == "session/load" and "id" in msg:
            loads.add(msg["id"])
        elif r.kind == "in" and "id" in msg and "method" not in msg:
            loads.discard(msg["id"])
        if params.get("sessionId") not in (None, session_id):
            continue
        if r.kind == "in" and msg.get("method") == "session/update" and not loads:
            yield params.get("update")
        elif r.kind == "out" and msg.get("method") == "session/prompt":
            for block in params.get("prompt") or []:
                yield {"sessionUpdate": "user_message_chunk", "content": block}


def resumed(transcript_path: Path, harness: HarnessRef | None, *, program: str | None,
            **kwargs: Any) -> dict[str, Any]:
    """The arguments of the agent rebuilt from ``transcript_path`` (see
    :meth:`~.agent.Agent.resume`): its harness (a stand-in when ``harness`` is None), name
    and folder as its header has them, and what its session was set up with (``add_dirs``,
    ``system_prompt``…, and ``via``: a launcher's agent runs where it ran) unless ``kwargs``
    give them anew."""
    head = tr.header(transcript_path) or {}
    setup = {k: head[k] for k in ("add_dirs", "system_prompt", "system_prompt_mode", "review", "via")
             if head.get(k) is not None}
    return {"harness": harness if harness is not None else missing_harness(head.get("harness", "?")),
            "program": program or "", "name": head.get("agent"), "cwd": head.get("cwd"), **{**setup, **kwargs}}


def rebuild(agent: ResumedAgent, transcript_path: Path, harness: HarnessRef | None) -> None:
    """Replay ``transcript_path`` into ``agent``'s conversation (not written again), point
    its next start at the session and file, and mark it ``resumable`` (``harness missing``
    when ``harness`` is None)."""
    records = tr.history(transcript_path)  # from before any restart too
    head = tr.header(transcript_path) or {}
    agent.keeper.paused = True  # what is rebuilt is on record already
    try:
        info = tr.replay(iter(records), agent.conversation,
                         adapt=lambda update: adapt(agent.harness.short_id, agent.conversation, update))
    finally:
        agent.keeper.paused = False
    review = agent.edit_review
    if review is not None:  # what the user answered of its changes to the notebook (the saved form says it)
        for done in kernel_calls.settled(records):
            review.restore(done["cell"], done["change"], done["outcome"])
        restore_settled(records, review)  # and of the files it changed (review=True)
    checkpoints = agent.folder_checkpoints
    if checkpoints is not None:  # its checkpoints on record: the folder can be rewound to them
        checkpoints.rebuild(records)
    session_id = info.get("session_id")
    agent.resume_from(transcript_path, session_id, ReplaySkip.of(expected_replay(records, session_id)))
    if harness is None:
        agent.mark(AgentStatus.HARNESS_MISSING, f"the harness {head.get('harness')!r} is not installed any more")
    else:
        agent.mark(AgentStatus.RESUMABLE)
