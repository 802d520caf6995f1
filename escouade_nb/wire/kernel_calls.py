"""The transcript's own record of each call of the kernel's MCP tools, and its replay.

A call of the kernel's server (``run_code``, ``list_variables``, ``inspect_variable``,
``notebook_cells``, ``insert_cell``, ``edit_cell``, ``delete_cell``) is not on the ACP wire:
the agent reaches the kernel over MCP, and the
``run_code`` card is the client's own. So escouade_nb writes lines of its own in the
agent's transcript — client-side ``event`` records, as ``start``/``exit``/``resume`` are:
``{"t": epoch seconds, "kind": "event", "event": "kernel_tool", "data": {"phase": …}}``.

``data`` by phase (``call`` is the card's tool call id; times are epoch seconds):

``card``
    a ``run_code`` (or ``execute_cell``: ``tool`` says, ``code`` is the cell's source the card
    showed, beside ``cell_id`` and ``unreviewed``) card was made (its place in the conversation): ``request`` (true when
    the card is the agent's own permission request for that call, folded by identity: the
    request just before it with that id is not drawn again), ``call``, ``server``,
    ``tool``, ``title``, ``kind``, ``own`` (true when the card is on a call the server made, the agent
    having announced none: :data:`ORIGIN`), ``options`` (``{optionId, name, kind}``), ``arguments``
    (``{"code": CODE}``, whole up to :data:`CODE_MAX` characters; above it, the first
    :data:`CODE_MAX` characters with ``code_cut: true``, ``code_chars`` (the whole length)
    and ``code_sha256`` (hex, of the whole code's UTF-8)).
``answer``
    the card was answered: ``call``, ``tool``, ``outcome`` (``selected``/``cancelled``),
    ``option_id``, ``option_kind``, ``option_name``, ``answered_by`` (``you``, a rule
    plugin's ``NAME via Escouade``, ``you (earlier, for this session)``; for a
    cancellation, why), ``message``, ``denied``, ``asked_at``.
``result``
    the call ended: ``call`` (None when no card was made: the kernel was busy first),
    ``tool``, ``status`` (``ok`` ran, ``error`` ran and raised, ``refused``,
    ``cancelled``, ``busy`` not run), ``chars`` (characters of the text the model read),
    ``output`` (that text, cut to :data:`OUTPUT_MAX` with ``output_cut: true``); without a
    card, the ``arguments`` too.
``read``
    a read tool's call: ``tool``, ``arguments``, ``allowed_by``, ``status``, ``chars``,
    and ``detail`` (the error, cut) when it did not answer.
``edit``
    a change of the open notebook (``insert_cell``, ``edit_cell``, ``delete_cell``: made at
    once, pending the user's review), the same fields as ``read``: ``arguments`` (the new
    source whole up to 1,000 characters), ``status`` (``error`` for a stale edit: its
    ``detail`` says the cell changed since).
``settle``
    one of those changes was answered (the user's Keep or Reject, in the page, a view or
    Python; or dropped: the agent removed its own new cell before review): ``cell`` (its
    id), ``change`` (``insert``, ``edit``, ``delete``), ``outcome`` (``kept``,
    ``rejected``, ``dropped``). The conversation's notice saying so is beside it (what
    ``%escouade resume`` shows).

:class:`KernelReplay` rebuilds the ``run_code`` cards from these lines when a transcript is
replayed (``%escouade resume``): the card in its place, its answer, the output on its call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from ..core.conversation import Conversation, Permission, PermissionState, ToolCall, frozen_request

EVENT = "kernel_tool"
"""The ``event`` name of these transcript lines."""
CODE_MAX = 100_000
"""Characters of ``run_code``'s code written whole; above, the start, its length and sha256."""
OUTPUT_MAX = 20_000
"""Characters of a result's text written (its whole length is ``chars``)."""
DETAIL_MAX = 2_000
"""Characters of a failed read's error text written."""
PASSED_BY = "escouade_nb"
"""Who answers the agent's own ``run_code`` request, passed on to the kernel's server
(``engine/cards.py``): a request answered so, with a ``card`` line of its id after it, is folded."""
ORIGIN = "kernel"
"""The :attr:`~..core.conversation.ToolCall.origin` of a call the kernel's server made its card on (the agent
announced none): ``kind: "event"`` lines say so with ``own: true``."""
RAN = ("ok", "error")
"""The ``result`` statuses of a ``run_code`` whose code ran."""


def settled(records: Sequence[Any]) -> list[dict[str, str]]:
    """The ``settle`` lines of ``records`` (a transcript's), in order: ``[{"cell", "change",
    "outcome"}]`` (text fields only; a line missing one is skipped), what the review of
    the agent rebuilt from them says was kept, rejected or dropped."""
    out = []
    for rec in records:
        data = getattr(rec, "data", None) or {}
        if getattr(rec, "kind", None) == "event" and getattr(rec, "event", None) == EVENT and \
                data.get("phase") == "settle":
            fields = {k: v[:200] for k in ("cell", "change", "outcome") if isinstance(v := data.get(k), str) and v}
            if len(fields) == 3:
                out.append(fields)
    return out


def code_fields(code: str) -> dict[str, Any]:
    """``{"code": CODE}``, or above :data:`CODE_MAX` characters its start with
    ``code_cut``, ``code_chars`` and ``code_sha256``."""
    if len(code) <= CODE_MAX:
        return {"code": code}
    return {"code": code[:CODE_MAX], "code_cut": True, "code_chars": len(code),
            "code_sha256": hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()}


def output_fields(text: str) -> dict[str, Any]:
    """``{"chars": N, "output": TEXT}``, the text cut to :data:`OUTPUT_MAX` (``output_cut``)."""
    if len(text) <= OUTPUT_MAX:
        return {"chars": len(text), "output": text}
    return {"chars": len(text), "output": text[:OUTPUT_MAX], "output_cut": True}


def _request_id(rec: Any) -> str | None:
    """The tool call id of a transcript record that is the agent's ``session/request_permission``."""
    msg = getattr(rec, "msg", None) or {}
    if getattr(rec, "kind", None) != "in" or msg.get("method") != "session/request_permission" or "id" not in msg:
        return None
    call = (msg.get("params") or {}).get("toolCall") or {}
    return str(call.get("toolCallId", "")) if isinstance(call, dict) else None


def _key(rpc_id: Any) -> str:
    return repr(rpc_id)


def _passed_on(rec: Any) -> bool:
    """Whether a record is our answer to a permission request passed on to the kernel's
    server (``_meta.escouade.by == "escouade_nb"``: the agent cannot write our answers)."""
    msg = getattr(rec, "msg", None) or {}
    result = msg.get("result") if getattr(rec, "kind", None) == "out" and "id" in msg else None
    meta = ((result.get("_meta") or {}).get("escouade") or {}) if isinstance(result, dict) else {}
    return isinstance(meta, dict) and meta.get("by") == PASSED_BY


def _card_id(rec: Any) -> str | None:
    data = getattr(rec, "data", None) or {}
    if getattr(rec, "kind", None) == "event" and getattr(rec, "event", None) == EVENT and data.get("phase") == "card":
        return str(data.get("call", ""))
    return None


class KernelReplay:
    """The ``run_code`` cards of a transcript's records, rebuilt as they read live.

    Live, the agent's own permission request for ``run_code`` that provably asks for it IS
    the card (its ``card`` line says ``request: true``; older transcripts answered it at
    once, by ``escouade_nb``, and the server asked with its own card). So such a request
    whose tool call id is that of a ``card`` line further on (before another request of
    that id) is :meth:`folded`: its tool call is noted, no second card; the ``card`` line
    makes the card."""

    def __init__(self, records: Sequence[Any], starts_segment: Callable[[Any], bool] = lambda rec: False) -> None:
        """``starts_segment(record)``: whether a record starts another agent process's stretch
        of the transcript (its ids are its own: a request is only folded into a card of its
        own stretch)."""
        self._folded: set[int] = set()
        segment, seg = [], 0  # the stretch of each record: JSON-RPC ids are only unique in one
        for r in records:
            seg += starts_segment(r)
            segment.append(seg)
        passed = {(segment[i], _key(r.msg["id"])) for i, r in enumerate(records) if _passed_on(r)}
        ahead: set[str] = set()  # ids of card lines not claimed by a request yet, reading backwards
        is_request: set[str] = set()  # of those, the cards that ARE the agent's request (``request: true``)
        for i in range(len(records) - 1, -1, -1):
            if starts_segment(records[i]):
                ahead, is_request = set(), set()
                continue
            card = _card_id(records[i])
            if card is not None:
                ahead.add(card)
                if (getattr(records[i], "data", None) or {}).get("request") is True:
                    is_request.add(card)
                else:
                    is_request.discard(card)
                continue
            asked = _request_id(records[i])
            if asked is not None and asked in ahead and \
                    (asked in is_request or (segment[i], _key(records[i].msg["id"])) in passed):
                ahead.discard(asked)
                is_request.discard(asked)
                self._folded.add(i)
        self.cards: dict[str, Permission] = {}  # tool call id -> the card rebuilt (the newest of that id)
        self.made: list[Permission] = []

    def folded(self, index: int) -> bool:
        """Whether the record at ``index`` is an agent's request folded into our card."""
        return index in self._folded

    @staticmethod
    def note_call(conversation: Conversation, tool_call: dict[str, Any]) -> None:
        """A folded request: its tool call known (as live), no card."""
        tcid = str(tool_call.get("toolCallId", ""))
        if tcid and tcid not in conversation.tool_calls:
            conversation.apply({"sessionUpdate": "tool_call", **tool_call})

    def new_segment(self) -> None:
        """Another agent process's stretch begins: its tool call ids are its own."""
        self.cards = {}

    def apply(self, conversation: Conversation, data: dict[str, Any]) -> Permission | None:
        """One ``kernel_tool`` line: a card (returned), its answer, or its result (reads
        change nothing)."""
        phase = data.get("phase")
        call_id = str(data.get("call") or "")
        if phase == "card" and call_id:
            args = data.get("arguments")
            if not isinstance(args, dict):
                args = {}
            raw: dict[str, dict[str, Any]] = {} if args.get("code_cut") else \
                {"rawInput": {"code": str(args.get("code", ""))}}  # cut: the agent's
            if raw and data.get("tool") == "execute_cell":  # a cell's card: its source, as the live card asked
                raw = {"rawInput": {"source": raw["rawInput"]["code"], "cell_id": str(args.get("cell_id", "")),
                                    "unreviewed": args.get("unreviewed") is True}}
            known = conversation.tool_calls.get(call_id)
            # ours when our line says so; a line written before ``own`` was: ours when no call of the agent had its id
            own = data.get("own") is True if "own" in data else (known is None and data.get("request") is not True)
            if own:
                known = None  # an agent's call of that id is not it
            mcp = (data["server"], data["tool"]) if isinstance(data.get("server"), str) and \
                isinstance(data.get("tool"), str) else None
            wire = {"toolCallId": call_id} if known is not None else \
                {"toolCallId": call_id, "title": data.get("title"), "kind": data.get("kind"), "status": "pending",
                 **raw}
            asked = frozen_request(known or ToolCall("", tool_call_id=call_id, origin=ORIGIN if own else None),
                                   title=data.get("title"),
                                   kind=data.get("kind"), raw_input=raw.get("rawInput"), content=[], locations=[],
                                   meta=None, extra={}, mcp=mcp)
            perm = conversation.add_permission(wire, [o for o in data.get("options") or [] if isinstance(o, dict)],
                                               request=asked, origin=ORIGIN if own else None)
            if perm.tool_call is not None and mcp is not None:
                perm.tool_call.mcp = mcp
            self.cards[call_id] = perm
            self.made.append(perm)
            return perm
        elif phase == "answer" and call_id in self.cards:
            outcome: PermissionState = "selected" if data.get("outcome") == "selected" else "cancelled"
            conversation.resolve_permission(self.cards[call_id], outcome, data.get("option_id") if outcome == "selected"
                                            else None, data.get("answered_by"), data.get("message"),
                                            denied=data.get("denied") is True)
        elif phase == "result" and call_id in self.cards:
            perm = self.cards[call_id]
            if perm.tool_call is not None:
                self._result(conversation, perm, perm.tool_call, data)
        return None

    @staticmethod
    def _result(conversation: Conversation, perm: Permission, call: ToolCall, data: dict[str, Any]) -> None:
        status = str(data.get("status", ""))
        call.kernel_run = {"status": status, "chars": data.get("chars"), "by": perm.answered_by}
        if status == "running" and isinstance(data.get("task_id"), str):
            # left running as a task: "lost" unless a later line of the record says how it ended
            call.kernel_task = {"task_id": data["task_id"], "state": "lost", "by": None, "output": "", "cut": 0}
        if status not in RAN:
            return
        if isinstance(data.get("task_end"), str):  # a run left running as a task: how it ended (its line)
            call.kernel_task = {"task_id": str(data.get("task_id", "")), "state": data["task_end"],
                                "by": "you" if data.get("task_by") == "you" else None, "output": "", "cut": 0}
        text = str(data.get("output", "")) + ("… [cut in the transcript]" if data.get("output_cut") else "")
        conversation.add_tool_content(call, {"type": "content", "content": {"type": "text", "text": text}})
        if call.origin == ORIGIN:  # a call the agent did not announce: ours to close
            call.status = "failed" if status == "error" else "completed"
            conversation.touch(call)

    def unanswered(self) -> list[Permission]:
        """The cards rebuilt that were never answered (the kernel went away first)."""
        return [p for p in self.made if p.state == "pending"]
