"""Rebuilding an agent from its transcript (after a kernel restart), and reattaching it.

:func:`resumed` reads the transcript once, replays it into a fresh conversation, and
counts the updates the agent will replay if it reloads the session (``session/load``),
so that replay is folded in, not appended twice (:class:`~..wire.reloads.ReplaySkip`: what
the conversation has of it, the history a load replayed included, as the replay kept it). A harness whose
manifest has gone gets a stand-in (:func:`missing_harness`): the agent is listed
"harness missing" and its conversation stays readable.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.adapters import adapt
from ..core.status import AgentStatus
from ..manifest import Harness, HarnessRef, Manifest
from ..wire import kernel_calls
from ..wire import transcript as tr
from ..wire.reloads import ReplaySkip
from .review.file_review import restore_settled

if TYPE_CHECKING:
    from .interfaces import ResumedAgent


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
    agent.resume_from(transcript_path, session_id, ReplaySkip.of(tr.expected_replay(info, session_id)))
    if harness is None:
        agent.mark(AgentStatus.HARNESS_MISSING, f"the harness {head.get('harness')!r} is not installed any more")
    else:
        agent.mark(AgentStatus.RESUMABLE)
