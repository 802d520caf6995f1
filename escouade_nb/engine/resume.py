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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.status import AgentStatus
from ..manifest import Harness, HarnessRef, Manifest
from ..wire import transcript as tr

if TYPE_CHECKING:
    from .agent import Agent


def replay_key(update: Any) -> str:
    """How an update replayed by ``session/load`` is recognised as one the transcript
    already has: a message chunk by its role and content (agents replay them with or
    without their ``messageId``), anything else whole."""
    if isinstance(update, dict) and update.get("sessionUpdate") in (
            "user_message_chunk", "agent_message_chunk", "agent_thought_chunk"):
        return json.dumps([update["sessionUpdate"], update.get("content")], sort_keys=True)
    return json.dumps(update, sort_keys=True)


class ReplaySkip:
    """The updates a reloaded session will replay that the conversation already has.
    ``active`` only while ``session/load`` runs; :meth:`skip` consumes one match."""

    def __init__(self, keys: collections.Counter[str] | None = None) -> None:
        self.keys: collections.Counter[str] = keys or collections.Counter()
        self.active = False

    def skip(self, update: Any) -> bool:
        if not self.active or not self.keys:
            return False
        key = replay_key(update)
        if self.keys[key] > 0:
            self.keys[key] -= 1
            return True
        return False

    def done(self) -> None:
        self.active = False
        self.keys.clear()


def missing_harness(harness_id: str) -> HarnessRef:
    """A stand-in for a harness whose manifest has gone (its agents stay readable)."""
    plugin, _, short = harness_id.rpartition(":")
    manifest = Manifest(id=plugin.removeprefix("plugin:") or "missing", name="(missing)")
    return HarnessRef(manifest=manifest, harness=Harness(id=short or harness_id, name=short or harness_id,
                                                         acp={"args": []}),
                      path=Path("(missing)"), source="extra")


def resumed(cls: type[Agent], transcript_path: Path, harness: HarnessRef | None, *, program: str | None,
            **kwargs: Any) -> Agent:
    """See :meth:`Agent.resume`."""
    records = list(tr.read(transcript_path))
    head = tr.header(transcript_path) or {}
    agent = cls(harness if harness is not None else missing_harness(head.get("harness", "?")),
                program=program or "", name=head.get("agent"), cwd=head.get("cwd"), **kwargs)
    info = tr.replay(iter(records), agent.conversation)
    keys: collections.Counter[str] = collections.Counter(
        replay_key((r.msg.get("params") or {}).get("update"))
        for r in records if r.kind == "in" and (r.msg or {}).get("method") == "session/update")
    keys.update(  # our prompts come back as the agent's user_message_chunk
        replay_key({"sessionUpdate": "user_message_chunk", "content": block})
        for r in records if r.kind == "out" and (r.msg or {}).get("method") == "session/prompt"
        for block in (r.msg.get("params") or {}).get("prompt") or [])
    agent._resume_from(transcript_path, info.get("session_id"), ReplaySkip(keys))
    if harness is None:
        agent.mark(AgentStatus.HARNESS_MISSING, f"the harness {head.get('harness')!r} is not installed any more")
    else:
        agent.mark(AgentStatus.RESUMABLE)
    return agent
