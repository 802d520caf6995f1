"""The durable record of each call of the kernel's MCP tools: :class:`KernelRecord`.

Whatever decided — you, "run without asking again", a rule plugin, a cancellation,
escouade_nb for a read — every call of the kernel's server is written down twice:

* in the agent's transcript, lines of escouade_nb's own (:mod:`..wire.kernel_calls`): the
  ``run_code`` card when it is made (the code whole), its answer, the call's result
  (status, size, the text the model read); a read in one line. ``%escouade resume``
  rebuilds the card from them as it read live;
* in the journal, under :data:`JOURNAL_ID`: one ``Answer`` entry per decision, naming who
  decided (``by``), whether or not a rule plugin is installed.

The engine calls three methods, at three points of a call; none blocks (the transcript
and the journal write in their own threads) and none raises into the caller:
:meth:`KernelRecord.card` once the ``run_code`` card exists, before it is answered;
:meth:`KernelRecord.answered` once it is settled (whatever settled it, a cancellation
too); :meth:`KernelRecord.done` when the kernel's server ends any call (its
``ToolOwner.tool_done``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..permissions.journal import Journal
from ..permissions.request import target_of
from ..wire import kernel_calls
from ..kernel_mcp.tasks import BY_USER
from ..kernel_mcp.tools import EDIT_TOOLS

if TYPE_CHECKING:
    from .interfaces import JournaledAgent
    from .cards import PermissionCard

log = logging.getLogger(__name__)

JOURNAL_ID = "kernel-tools"
"""The journal's name for the kernel's tools' decisions (a file ``kernel-tools.jsonl``
beside the rule plugins' own)."""
SERVER = "escouade"
READ_BY = "escouade_nb"
"""Who allows the kernel's read tools (reading the kernel is what its server is for)."""


def journal_of(agent: JournaledAgent) -> Journal | None:
    """The journal of ``agent``'s squad: that of its first policy holding one (the
    squad's rule-plugin broker, which every squad agent has); None outside a squad."""
    for policy in agent.policies:
        journal = getattr(policy, "journal", None)
        if isinstance(journal, Journal):
            return journal
    return None


@dataclass
class _Open:
    """A ``run_code`` (or ``execute_cell``) card made and its call not ended yet; ``code``:
    the code, or the cell's source, the card showed; ``arguments``: the cell's id and more."""

    card: PermissionCard
    code: str
    asked_at: float
    tool: str = "run_code"
    arguments: dict[str, Any] | None = None


class KernelRecord:
    """The record of one agent's kernel-tool calls (see the module). A call's lines are
    tied by the asyncio task that serves it (the MCP request's): :meth:`card`,
    :meth:`answered` and :meth:`done` of one call run in that task."""

    def __init__(self, agent: JournaledAgent) -> None:
        self.agent = agent
        self._open: dict[asyncio.Task | None, _Open] = {}
        self._tasks: dict[str, tuple[Any, str]] = {}  # task_id -> (the card's tool call, tool)
        self._live: dict[int, tuple[Any, Any]] = {}  # id(the card's tool call) -> (that call, the kernel's RunTask)
        self._followers: set[asyncio.Future] = set()

    # -- a run left running, as its card's call shows it ----------------------------------------
    def task_started(self, task: Any) -> None:
        """The kernel's server left this call's ``run_code`` running as ``task`` (its own
        :class:`~..kernel_mcp.tasks.RunTask`; told in the call's task, its card still open): the
        card's call gets :attr:`~..core.conversation.ToolCall.kernel_task`, its output followed at
        most every :data:`TASK_REDRAW` s while it prints (:meth:`_follow`)."""
        try:
            opened = self._open.get(_task())
            if opened is None or opened.tool != "run_code":  # a card made in another task: by its code
                code = task.arguments.get("code")
                opened = next((o for o in self._open.values() if o.tool == "run_code" and o.code == code), None)
            call = opened.card.permission.tool_call if opened is not None else None
            if call is None or task.run is None:
                return
            self._live[id(call)] = (call, task)
            call.kernel_task = {"task_id": task.task_id, "state": "running", "by": None, **_tail(task.run)}
            self._touch(call)
            follower = asyncio.ensure_future(self._follow(call, task))
            self._followers.add(follower)  # held: the loop keeps only a weak reference to a task
            follower.add_done_callback(self._followers.discard)
        except Exception:
            log.exception("the kernel-tool record of a task's start failed")

    def task_of(self, call: Any) -> Any:
        """The kernel's own task still running for ``call`` (the card's tool call), or None."""
        live = self._live.get(id(call))
        return live[1] if live is not None and live[0] is call and live[1].state == "running" else None

    def interrupt(self, call: Any) -> bool:
        """The user's Interrupt of ``call``'s task (a button of the agent's view): its run stopped as the
        agent's ``task_cancel`` would, on record as "interrupted by you". False when none runs."""
        task = self.task_of(call)
        return task is not None and task.stop(BY_USER)

    async def _follow(self, call: Any, task: Any) -> None:
        """Redraw ``call`` while ``task`` runs: at most every :data:`TASK_REDRAW` s, when it printed more."""
        seen = (task.run.out.size, task.run.err.size)
        while task.state == "running" and not task.job.done():
            await asyncio.wait({task.job}, timeout=TASK_REDRAW)
            now = (task.run.out.size, task.run.err.size)
            if now != seen and task.state == "running" and call.kernel_task is not None and \
                    call.kernel_task.get("state") == "running":
                seen = now
                call.kernel_task = {**call.kernel_task, **_tail(task.run)}
                self._touch(call)

    def _touch(self, call: Any) -> None:
        conversation = getattr(self.agent, "conversation", None)
        if conversation is not None:
            conversation.touch(call)

    # -- the three points -------------------------------------------------------------------
    def card(self, card: PermissionCard, code: str, request: bool = False, tool: str = "run_code",
             arguments: dict[str, Any] | None = None) -> None:
        """The ``run_code`` card ``card`` was made for ``code`` (call it before it is answered:
        the line marks the card's place in the conversation); ``request``: the card is the
        agent's own permission request, folded (see :mod:`..wire.kernel_calls`). ``tool``
        ``execute_cell``: ``code`` is the cell's source the card shows, ``arguments`` its
        ``cell_id`` and ``unreviewed`` (written beside the code)."""
        try:
            call = card.request or card.tool_call
            self._open[_task()] = _Open(card, code, time.time(), tool, dict(arguments or {}))
            self._write({"phase": "card", "request": request, "call": call.tool_call_id if call else None,
                         "own": card.origin == kernel_calls.ORIGIN,  # our call, by who made it (never by its id)
                         "server": SERVER, "tool": tool, "title": call.title if call else None,
                         "kind": call.kind if call else None,
                         "options": [{k: o.get(k) for k in ("optionId", "name", "kind")} for o in card.options],
                         "arguments": {**kernel_calls.code_fields(code), **(arguments or {})}})
        except Exception:
            log.exception("the kernel-tool record of a card failed")

    def answered(self, card: PermissionCard) -> None:
        """``card`` was settled (or is being withdrawn): its answer, in the transcript and the
        journal. A card still pending is left to :meth:`done`."""
        try:
            perm = card.permission
            if perm.state == "pending":
                return
            opened = self._open.get(_task())
            chosen = perm.chosen or {}
            call_id = perm.tool_call.tool_call_id if perm.tool_call else None
            tool = opened.tool if opened else "run_code"
            self._write({"phase": "answer", "call": call_id, "tool": tool, "outcome": perm.state,
                         "option_id": perm.option_id, "option_kind": chosen.get("kind"),
                         "option_name": chosen.get("name"),
                         "answered_by": perm.answered_by, "message": perm.message, "denied": perm.denied,
                         "asked_at": round(opened.asked_at, 3) if opened else None})
            code = opened.code if opened else str(((perm.tool_call.raw_input if perm.tool_call else None) or {})
                                                  .get("code", ""))
            if perm.state == "selected" and not perm.denied and str(chosen.get("kind", "")).startswith("allow"):
                verdict, by, message = "allowed", perm.answered_by or "you", perm.message
            elif perm.state == "selected" or perm.denied:
                verdict, by, message = "refused", perm.answered_by or "you", perm.message
            else:  # cancelled: answered_by says why
                verdict, by, message = "cancelled", None, perm.answered_by or perm.message
            asked = {"source": code, **(opened.arguments or {})} if tool == "execute_cell" and opened else \
                {"code": code}
            self._journal(verdict, tool, asked, by, message, call_id)
        except Exception:
            log.exception("the kernel-tool record of an answer failed")

    def done(self, tool: str, arguments: dict[str, Any], status: str, text: str) -> None:
        """The kernel's server ended a call of ``tool``: ``status`` ``ok``, ``error``,
        ``refused``, ``cancelled``, ``busy``, or ``running`` (a call that left its run running as
        task ``arguments["task_id"]``); ``text`` what the model read. ``tool`` ``task``: such a
        run ended (``status`` ``done``, ``interrupted``, ``cancelled`` by the agent, ``ended`` with
        its session; ``arguments``: ``task_id``, ``tool``, ``ran`` ``ok``/``error``): its result on
        the card's call, and a ``Stop`` line in the journal."""
        try:
            if tool == "task":
                self._task_end(arguments, status, text)
                return
            if tool in ("run_code", "execute_cell"):
                self._run_done(arguments, status, text, tool)
                return
            allowed = status not in ("refused", "cancelled")
            self._write({"phase": "edit" if tool in EDIT_TOOLS else "read", "tool": tool,
                         "arguments": _short(arguments), "status": status,
                         "allowed_by": READ_BY if allowed else None, **kernel_calls.output_fields(text),
                         **({"detail": text[:kernel_calls.DETAIL_MAX]} if status != "ok" else {})}, output=False)
            self._journal("allowed" if allowed else "refused" if status == "refused" else "cancelled", tool,
                          arguments, READ_BY if status != "cancelled" else None,
                          None if allowed else text[:kernel_calls.DETAIL_MAX], None)
        except Exception:
            log.exception("the kernel-tool record of a call's end failed")

    # -- inside -----------------------------------------------------------------------------
    def _run_done(self, arguments: dict[str, Any], status: str, text: str, tool: str = "run_code") -> None:
        code = str(arguments.get("code", ""))
        opened = self._open.pop(_task(), None)
        if opened is not None and opened.tool != tool:  # cannot be: one task, one call
            opened = None

        def same(o: _Open) -> bool:  # a run_code by its code; a cell by its id
            if tool == "execute_cell":
                return o.tool == tool and (o.arguments or {}).get("cell_id") == arguments.get("cell_id")
            return o.tool == tool and o.code == code

        if opened is None:  # a card made in another task than the call's end: by its code then
            key = next((k for k, o in self._open.items() if same(o)), _NONE)
            if key is not _NONE:
                opened = self._open.pop(key)  # type: ignore[call-overload]  # a key of _open (not _NONE)
        if opened is None:  # no card was made (the kernel was busy first)
            self._write({"phase": "result", "call": None, "tool": tool, "status": status,
                         "arguments": kernel_calls.code_fields(code) if tool == "run_code" else dict(arguments),
                         **kernel_calls.output_fields(text)})
            return
        perm = opened.card.permission
        if status == "refused" and perm.state == "cancelled" and not perm.denied:
            status = "cancelled"
        if perm.state == "pending":  # the call ended before an answer (the request was cancelled)
            self.answered(opened.card)
        call = perm.tool_call
        task_id = arguments.get("task_id") if status == "running" else None
        if isinstance(task_id, str):
            self._tasks[task_id] = (call, tool)
        self._write({"phase": "result", "call": call.tool_call_id if call else None, "tool": tool,
                     "status": status, **({"task_id": task_id} if isinstance(task_id, str) else {}),
                     **kernel_calls.output_fields(text)})
        if call is not None:
            call.kernel_run = {"status": status, "chars": len(text), "by": perm.answered_by}

    def _task_end(self, arguments: dict[str, Any], end: str, text: str) -> None:
        """A run left running as a task ended: the card's call gets its result line (``status``
        ``ok``/``error`` as the run ended, ``task_end`` how), the journal a ``Stop`` line."""
        task_id = str(arguments.get("task_id", ""))
        call, tool = self._tasks.pop(task_id, (None, str(arguments.get("tool", "run_code"))))
        call_id = call.tool_call_id if call is not None else None
        ran = "ok" if arguments.get("ran") == "ok" else "error"
        self._write({"phase": "result", "call": call_id, "tool": tool, "status": ran, "task_id": task_id,
                     "task_end": end, **({"task_by": "you"} if end == "interrupted" and arguments.get("by") == BY_USER
                                         else {}), **kernel_calls.output_fields(text)})
        by_user = end == "interrupted" and arguments.get("by") == BY_USER
        if call is not None:
            call.kernel_run = {**(call.kernel_run or {}), "status": ran, "chars": len(text), "task_end": end}
            self._live.pop(id(call), None)
            # its whole result is on the call already (KernelAccess.ran_code): the task's line says how it ended
            call.kernel_task = {"task_id": task_id, "state": end, "by": "you" if by_user else None, "output": "",
                                "cut": 0}
            self._touch(call)
        journal = journal_of(self.agent)
        if journal is not None:
            how = {"done": "done", "interrupted": "interrupted by you (Interrupt in the agent's view)" if by_user
                   else "interrupted (Jupyter's Interrupt)",
                   "cancelled": "cancelled by the agent (task_cancel)",
                   "ended": "ended: the agent's session closed"}.get(end, end)
            project = self.agent.project
            journal.add(JOURNAL_ID, "Stop", text=f"task {task_id} of {tool} {how}", tool=f"mcp__{SERVER}__{tool}",
                        request_id=call_id, agent=self.agent.name,
                        project=project.name if project is not None else None)

    def _write(self, data: dict[str, Any], output: bool = True) -> None:
        transcript = self.agent.transcript
        if not output:
            data.pop("output", None)
            data.pop("output_cut", None)
        if transcript is not None:
            transcript.event(kernel_calls.EVENT, **data)

    def _journal(self, verdict: str, tool: str, arguments: dict[str, Any], by: str | None, message: str | None,
                 call_id: str | None) -> None:
        journal = journal_of(self.agent)
        if journal is None:
            return
        name = f"mcp__{SERVER}__{tool}"
        project = self.agent.project
        journal.add(JOURNAL_ID, "Answer", verdict=verdict, tool=name, target=target_of(name, arguments) or None,
                    by=by, message=message, request_id=call_id, agent=self.agent.name,
                    project=project.name if project is not None else None)


_NONE = object()


TASK_REDRAW = 0.5
"""Seconds between two redraws of a running task's output in its card (at most; none while it prints nothing)."""
TASK_LINES = 20
"""Lines of a task's output its card shows (the last ones)."""
TASK_CHARS = 4000
"""Characters of those lines, at most (the end kept)."""


def _tail_of(text: str, before: bool = False) -> dict[str, Any]:
    """``{"output": the last TASK_LINES lines of text (at most TASK_CHARS characters), "cut": lines before
    (at least 1 when ``before``: more came before ``text``)}``."""
    lines = text.splitlines()
    kept = "\n".join(lines[-TASK_LINES:])
    cut = max(len(lines) - TASK_LINES, int(before))
    if len(kept) > TASK_CHARS:
        kept, cut = "…" + kept[-TASK_CHARS:], cut or 1
    return {"output": kept, "cut": cut}


def _tail(run: Any) -> dict[str, Any]:
    """The end of what a run printed so far (its stdout, then its stderr), as :func:`_tail_of`."""
    starts = max(run.out.size - 2 * TASK_CHARS, 0), max(run.err.size - 2 * TASK_CHARS, 0)  # not all of it each time
    out, err = run.out.text(starts[0]), run.err.text(starts[1])
    text = out + (("\n" if out and not out.endswith("\n") else "") + "stderr:\n" + err if err else "")
    return _tail_of(text, before=any(starts))


def _task() -> asyncio.Task | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _short(arguments: dict[str, Any]) -> dict[str, Any]:
    """A read's arguments as written: strings cut to 1,000 characters."""
    return {k: (v[:1000] if isinstance(v, str) else v) for k, v in arguments.items()}
