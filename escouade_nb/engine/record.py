"""The transcript as the record of what the conversation showed: :class:`ConversationRecord`.

The wire lines of a transcript hold what the agent sent and what we answered; they do not
hold what only this client knew. So the conversation's own additions go in too, as
client ``event`` lines (:mod:`..wire.transcript` replays them, see :func:`~..wire.transcript.replay`):

``segment``
    ``{"record": RECORD}``: one agent process's stretch of the transcript starts (written
    when a transcript is attached to the agent: a start, a restart, a resume). Ids the agent
    gives (session, message, tool call, JSON-RPC) are only unique within a segment.
``notice``
    ``{"level", "text", "detail"}``: a notice of the client (an agent's ``notice`` update is
    on the wire already), in its place.
``answer``
    ``{"call", "own", "outcome", "option_id", "answered_by", "message", "denied"}`` (and ``plan``,
    the markdown, when the card was a plan to approve): a permission card of the conversation
    was settled — by you, a rule plugin, the mode, a grant, a cancellation (``answered_by``
    says why) — as the card said it. ``own``: the part of escouade_nb whose card it was (``"budget"``…,
    ``ToolCall.origin``), null for the agent's request: replay settles the card of that origin and id.
``question`` / ``question_answer``
    ``{"n", "mode", "message", "schema", "url", "questions", "tool_call_id", "elicitation_id"}``
    when a question card is made (``n`` numbers them in the segment), ``{"n", "state",
    "answer"}`` when it is settled: an ``elicitation/create`` form or link, or questions an
    agent wrote in text (those are not on the wire as a card at all).
``not_asked``
    ``{"call", "text"}``: the client's note on a call the agent ran without asking, after an
    "always" answer earlier in the session (``ToolCall.not_asked``).
``checkpoint`` / ``rewind``
    ``{"turn", "prompt", "at", "commit", "ref", "git_dir", "fork"}`` when the agent's folder is
    checkpointed before a turn, ``{"turn", "commit", "session"}`` when it is rewound to one
    (written by :mod:`.review.checkpoints`; the turns from ``turn`` on are marked rewound).

A notice made while the agent has no transcript (a restart: the old file is closed, the
new one not made yet) waits and is written first thing in the next one; nothing is written
while the conversation is being rebuilt from a transcript (:attr:`paused`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..core.conversation import Change, Notice, Permission, Question, ToolCall
from ..wire.transcript import (ANSWER_EVENT, NOT_ASKED_EVENT, NOTICE_EVENT, QUESTION_ANSWER_EVENT, QUESTION_EVENT,
                               RECORD, SEGMENT_EVENT)

if TYPE_CHECKING:
    from .interfaces import RecordedAgent

WAITING_MAX = 200
"""Notices kept at most while no transcript is attached (an agent that records nothing keeps none)."""


class ConversationRecord:
    """Writes ``agent``'s client notices and card answers in its transcript (see the module)."""

    def __init__(self, agent: RecordedAgent) -> None:
        self.agent = agent
        self.paused = False
        self._folding = 0
        self._waiting: list[dict[str, Any]] = []
        self._answered: weakref.WeakSet[Permission | Question | ToolCall] = weakref.WeakSet()
        self._asked: weakref.WeakKeyDictionary[Question, int] = weakref.WeakKeyDictionary()  # question -> its n
        self._questions = 0  # question cards made in this segment
        agent.conversation.subscribe(self._changed, chunks=False)  # cards, calls, notices: never text

    def folding(self) -> ConversationRecord:
        """``with record.folding():`` while an agent's update is folded: a notice it makes (a
        harness adapter's) is made again when the transcript is replayed, so it is not
        written. (A plain context manager: it is on every update's path.)"""
        return self

    def __enter__(self) -> None:
        self._folding += 1

    def __exit__(self, *_exc: object) -> None:
        self._folding -= 1

    def attached(self) -> None:
        """A transcript was attached to the agent (a new process's stretch): the segment's
        mark, then the notices that waited for it."""
        transcript = self.agent.transcript
        if transcript is None:
            return
        transcript.event(SEGMENT_EVENT, record=RECORD)
        self._asked, self._questions = weakref.WeakKeyDictionary(), 0  # numbered anew in each segment
        waiting, self._waiting = self._waiting, []
        for data in waiting:
            transcript.event(NOTICE_EVENT, **data)

    def _changed(self, changes: list[Change]) -> None:
        if self.paused:  # rebuilt: on record already (a later change of such a card writes nothing either)
            self._answered.update(c.item for c in changes if isinstance(c.item, (Permission, Question))
                                  and c.item.state != "pending" or isinstance(c.item, ToolCall) and c.item.not_asked)
            return
        for change in changes:
            item = change.item
            if change.kind == "added" and isinstance(item, Notice) and item.origin == "client" and not self._folding:
                self._write(NOTICE_EVENT, {"level": item.level, "text": item.text, "detail": item.detail})
            elif change.kind == "added" and isinstance(item, Question) and self.agent.transcript is not None:
                self._questions += 1
                n = self._asked[item] = self._questions
                self._write(QUESTION_EVENT, {"n": n, "mode": item.mode, "message": item.message, "schema": item.schema,
                                             "url": item.url, "questions": item.questions,
                                             "tool_call_id": item.tool_call_id, "elicitation_id": item.elicitation_id})
            elif isinstance(item, Question) and item.state != "pending" and item in self._asked \
                    and item not in self._answered:
                self._answered.add(item)
                self._write(QUESTION_ANSWER_EVENT, {"n": self._asked[item], "state": item.state, "answer": item.answer})
            elif isinstance(item, ToolCall) and item.not_asked and item not in self._answered:
                self._answered.add(item)
                self._write(NOT_ASKED_EVENT, {"call": item.tool_call_id, "text": item.not_asked})
            elif isinstance(item, Permission) and item.state != "pending" and item not in self._answered:
                self._answered.add(item)
                call = item.tool_call.tool_call_id if item.tool_call is not None else None
                origin = item.tool_call.origin if item.tool_call is not None else None
                plan = {"plan": item.plan} if item.plan is not None else {}
                self._write(ANSWER_EVENT, {"call": call, "own": origin, "outcome": item.state,
                                           "option_id": item.option_id, "answered_by": item.answered_by,
                                           "message": item.message, "denied": item.denied, **plan})

    def _write(self, event: str, data: dict[str, Any]) -> None:
        transcript = self.agent.transcript
        if transcript is not None:
            transcript.event(event, **data)
        elif event == NOTICE_EVENT and self.agent.record and len(self._waiting) < WAITING_MAX:
            self._waiting.append(data)
