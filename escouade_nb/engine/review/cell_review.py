"""An agent's changes to the open notebook, pending the user's review, from Python:
:class:`EditReview` (one per agent: ``agent.pending_edits`` is its list) and
:class:`PendingEdit`, with ``.keep()`` and ``.reject()``.

The pending state itself lives in the page, in each cell's metadata (see
``labextension/src/index.js``: the change, the source before it): Keep and Reject are
operations the kernel sends to the page (:meth:`~...kernel_mcp.server.LiveNotebook.settle_cell`),
which keeps the change (the mark removed; a delete done) or takes it back exactly (the
source before restored; a new cell removed), outside the user's undo history. This list is
the kernel's own knowledge of what this agent changed and has not yet settled through it.

``keep()`` / ``reject()`` start the operation at once and return a :class:`Settling`,
which may be awaited (for the outcome, or the page's error) or not: the task belongs to
the :class:`EditReview`, which cancels what is still running on :meth:`EditReview.close`;
an error nobody awaited is logged.

The user's Keep and Reject buttons in the page (drawn inside the cell) do not act there:
the page tells the kernel, which settles the change through the agent's review
(:func:`pending_edit` finds it), so this list stays true. A Reject is told to the agent
once, in its next tool result of the kernel's MCP server or its next prompt
(:meth:`EditReview.take_notice`).

Every answer is on record: :attr:`EditReview.settled` keeps what was ``kept``, ``rejected``
or ``dropped`` (the agent removed its own new cell before review), and the review's
``on_settled(edit)`` callback (the agent's state: a notice in the conversation, so in the
transcript, which ``%escouade resume`` replays; and a ``kernel_tool`` line of phase
``settle``) is called once per answer. ``on_change()`` is called whenever the pending list
changes (a change arrives, is settled, starts settling): the agent's views redraw from it.

With ``review=True`` the files the agent changed join the same list
(:class:`~.file_review.FileEdit`, added by :class:`~.file_review.FileWatch` through
:meth:`EditReview.add_item`): their Keep and Reject are done by the edit itself (its
``apply``), not by a page; a rejected file is told to the agent in the same notice.

The agent also learns, once, in the same notice: that the user edited or deleted a cell it
touched in its current turn (inserted, edited, ran: :meth:`EditReview.touch`;
:func:`user_changed`, told by the page), so it does not rebuild from a stale picture; and
that a change of its was dropped — gone without a Keep or Reject (:func:`drop`: the page
reloaded without saving it, the user deleted the cell) — which then leaves the list.

A closed agent's review stays settleable: :meth:`EditReview.close` leaves the changes still
pending in the kernel's registry (held there, even once the agent object is gone, until each
is answered), so the page's Keep and Reject (and ``pending_edits[i].keep()``) still settle
them; :attr:`EditReview.closed` is then true, and a Reject after the close is on record as
not told to the agent (it has no next turn to be told in).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

from ...kernel_mcp.tools import ToolFailure

__all__ = ["PendingEdit", "Settling", "EditReview", "pending_edit", "user_changed", "drop", "CHANGE_WORDS"]

log = logging.getLogger(__name__)

CHANGE_WORDS = {"insert": "new cell", "edit": "edit of cell", "delete": "deletion of cell"}
"""How a change is named to the user (:attr:`PendingEdit.label`)."""


class Settling:
    """A Keep or Reject under way: ``await`` it for the outcome (``"kept"``,
    ``"rejected"``; ``"partial"``: one hunk of a file's edit answered, others left); the
    page's error is raised as :class:`~...kernel_mcp.tools.ToolFailure`.
    Not awaiting it is fine: it runs all the same."""

    def __init__(self, task: asyncio.Task) -> None:
        self.task = task

    def __await__(self) -> Generator[Any, None, str]:
        return self.task.__await__()

    @property
    def done(self) -> bool:
        return self.task.done()

    def __repr__(self) -> str:
        if not self.task.done():
            return "<Settling: under way>"
        if self.task.cancelled():
            return "<Settling: cancelled>"
        error = self.task.exception()
        return f"<Settling: {self.task.result() if error is None else f'failed: {error}'}>"


class PendingEdit:
    """One change of this agent's to a cell, pending review: ``cell_id``, ``change``
    (``insert``, ``edit``, ``delete``), ``at`` (epoch seconds of the last change), ``state``
    (``pending``, ``kept``, ``rejected``, ``dropped``: gone without a Keep or Reject, see
    :func:`drop`), ``settled_at`` (epoch seconds of the answer, else ``None``), ``why`` (why
    it was dropped, else ``None``), ``changed_by_user`` (the page found the user had changed
    the cell after the agent when it was kept or rejected: a Keep's provenance says so, a
    Reject dropped the user's lines too — the page's Reject button asks first)."""

    def __init__(self, review: EditReview, cell_id: str, change: str, live: Any) -> None:
        self._review = review
        self.cell_id = cell_id
        self.change = change
        self.at = time.time()
        self.state = "pending"
        self.settled_at: float | None = None
        self.why: str | None = None
        self.changed_by_user = False
        self._live = live

    @property
    def label(self) -> str:
        """The change named for the user: ``new cell ID``, ``edit of cell ID``, ``deletion of cell ID``."""
        return f"{CHANGE_WORDS.get(self.change, self.change)} {self.cell_id}"

    @property
    def settling(self) -> bool:
        """A Keep or Reject of it is under way."""
        return self.cell_id in self._review._busy

    @property
    def key(self) -> str:
        """Its key in the review (its cell id; a file's edit has ``file:PATH``)."""
        return self.cell_id

    def keep(self, *, client: str | None = None) -> Settling:
        """Keep the change (the cell stays as the agent made it, its provenance in its
        metadata; a delete is done). ``client``: the page to do it in (the one whose button
        was clicked), else the page the channel chooses."""
        return self._review._settle(self, True, client)

    def reject(self, *, client: str | None = None) -> Settling:
        """Take the change back exactly: the source before it restored, a new cell removed,
        a cell marked for deletion left as it was. The agent is told (see
        :meth:`EditReview.take_notice`; not once the agent is closed: :attr:`EditReview.closed`).
        When the user had changed the cell after the agent, their lines go too (the page's
        Reject button asks first; this call is its own consent). Outside the undo history,
        which the page clears for the cell: no undo brings the agent's text back."""
        return self._review._settle(self, False, client)

    def __repr__(self) -> str:
        return f"<PendingEdit {self.change} of cell {self.cell_id} ({self.state})>"


class EditReview:
    """An agent's :class:`PendingEdit` list and the Keep/Reject tasks under way.

    ``on_change()``: called when the pending list changes or a settle starts;
    ``on_settled(edit)``: called once per answer (``edit.state`` ``kept``, ``rejected``,
    ``dropped``); ``on_failed(edit, keep, error)``: a Keep (``keep`` true) or Reject that
    failed (no page answered, the page's error): the change stays pending. All optional; an
    exception in them is logged, never raised."""

    def __init__(self, on_change: Callable[[], object] | None = None,
                 on_settled: Callable[[PendingEdit], object] | None = None,
                 on_failed: Callable[[PendingEdit, bool, BaseException], object] | None = None) -> None:
        self.on_change = on_change
        self.on_settled = on_settled
        self.on_failed = on_failed
        self.settled: list[PendingEdit] = []
        """The answered changes, oldest first (kept, rejected, dropped)."""
        self._edits: list[PendingEdit] = []
        self._tasks: set[asyncio.Task] = set()
        self._busy: set[str] = set()  # cells whose Keep or Reject is under way
        self._untold: list[str] = []  # cells whose change was rejected, not yet told to the agent
        self._touched: set[str] = set()  # cells the agent changed or ran in its current turn
        self._changed: list[str] = []  # the user's changes of those, not yet told
        self._told: set[tuple[str, str]] = set()  # (cell, what) already noted in this turn
        self._dropped: list[str] = []  # changes dropped, not yet told
        self._files_untold: list[str] = []  # files whose change was rejected, not yet told (review/file_review.py)
        self.closed = False
        """The agent closed: its pending changes still settle, a Reject is no longer told to it."""
        _reviews.add(self)

    @property
    def pending(self) -> list[PendingEdit]:
        """The changes still pending, oldest first (a copy)."""
        return [e for e in self._edits if e.state == "pending"]

    def add(self, cell_id: str, change: str, live: Any) -> PendingEdit | None:
        """A change the page made (the kernel's MCP server calls it through the owner):
        a second change of a pending cell stays one pending edit (an insert stays an insert);
        ``removed`` (the agent deleted its own new cell) drops it."""
        same = next((e for e in self._edits if e.cell_id == cell_id and e.state == "pending"), None)
        self.touch(cell_id)
        if change == "removed":
            if same is not None:
                self._edits.remove(same)
                self._answered(same, "dropped")
            return None
        if same is not None:
            if same.change != "insert":
                same.change = change
            same.at, same._live = time.time(), live
            self._tell(self.on_change)
            return same
        edit = PendingEdit(self, cell_id, change, live)
        self._edits.append(edit)
        self._tell(self.on_change)
        return edit

    def restore(self, cell_id: str, change: str, outcome: str) -> None:
        """An answer read back from the transcript (``%escouade resume``): in
        :attr:`settled`, told to no one (it is on record already)."""
        edit = PendingEdit(self, cell_id, change, None)
        edit.state = outcome
        self.settled.append(edit)

    def _answered(self, edit: PendingEdit, outcome: str) -> None:
        edit.state, edit.settled_at = outcome, time.time()
        self.settled.append(edit)
        self._tell(self.on_settled, edit)
        self._tell(self.on_change)
        if self.closed and not self.pending:  # a closed review with nothing left to answer: let go of
            _held.discard(self)
            _reviews.discard(self)

    @staticmethod
    def _tell(callback: Callable[..., object] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.exception("escouade_nb: an observer of the review failed")

    def settle_all(self, keep: bool) -> list[Settling]:
        """Keep (``keep`` true) or Reject every change still pending and not already being
        settled: one :class:`Settling` each (await them or not)."""
        return [self._settle(e, keep) for e in self.pending if e.key not in self._busy]

    # -- other kinds of pending edits (a file's: engine/review/file_review.py) ---------------------------------
    def add_item(self, edit: Any) -> None:
        """A pending edit made elsewhere (a :class:`~.file_review.FileEdit`): in the list."""
        self._edits.append(edit)
        self._tell(self.on_change)

    def touched_item(self, edit: Any) -> None:
        """A pending edit changed (a file changed again): the views redraw."""
        self._tell(self.on_change)

    def drop_item(self, edit: Any) -> None:
        """A pending edit gone without a Keep or Reject (``edit.why`` says why): ``dropped``."""
        if edit in self._edits and edit.key not in self._busy:
            self._edits.remove(edit)
            self._answered(edit, "dropped")

    def restore_item(self, edit: Any) -> None:
        """An answer of another kind read back from the transcript: in :attr:`settled`."""
        self.settled.append(edit)

    def touch(self, cell_id: str) -> None:
        """The agent touched ``cell_id`` in its current turn (an insert, edit or delete through
        :meth:`add`; a run of the cell): the user's later change of it is told to the agent."""
        self._touched.add(cell_id)
        self._told = {t for t in self._told if t[0] != cell_id}  # touched again: a new change is news

    def new_turn(self) -> None:
        """The agent's next turn begins: what it touched before is no longer "this turn"."""
        self._touched.clear()
        self._told.clear()

    def user_changed(self, cell_id: str, what: str) -> bool:
        """The user ``edited`` or ``deleted`` ``cell_id``: noted for the agent (once per cell
        and kind) when it touched the cell in its current turn; a deletion drops the cell's
        pending edit. Whether the agent will be told (never once it is closed)."""
        if what == "deleted":
            self._drop(cell_id, "the user deleted the cell", tell=False)
        if self.closed:
            return False
        if cell_id not in self._touched or (cell_id, what) in self._told:
            return False
        self._told.add((cell_id, what))
        self._changed.append(f"cell {cell_id} {'deleted' if what == 'deleted' else 'edited'} by the user")
        return True

    def _drop(self, cell_id: str, why: str, tell: bool = True) -> bool:
        edit = next((e for e in self._edits if e.cell_id == cell_id and e.state == "pending"), None)
        if edit is None or cell_id in self._busy:
            return False
        edit.why = why
        self._edits.remove(edit)
        self._answered(edit, "dropped")
        if tell:
            self._dropped.append(f"{edit.change} of cell {cell_id} ({why})")
        return True

    def _settle(self, edit: Any, keep: bool, client: str | None = None, hunk: int | None = None) -> Settling:
        if edit.state != "pending":
            raise ValueError(f"this change was already {edit.state}")
        if edit.key in self._busy:
            raise ValueError("this change is being kept or rejected already")
        task = asyncio.get_running_loop().create_task(self._run(edit, keep, client, hunk))
        self._busy.add(edit.key)
        task.add_done_callback(lambda _t: self._busy.discard(edit.key))
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        self._tell(self.on_change)
        return Settling(task)

    async def _run(self, edit: Any, keep: bool, client: str | None, hunk: int | None = None) -> str:
        apply = getattr(edit, "apply", None)  # a file's edit does its own Keep or Reject
        try:
            if apply is not None:
                reply = await apply(keep, hunk)
                if reply.get("outcome") == "partial":  # one hunk answered, others left: still pending
                    if not keep:
                        self._files_untold.append(edit.told(hunk))
                    self._tell(self.on_change)
                    return "partial"
            elif client is None:
                reply = await edit._live.settle_cell(edit.cell_id, keep)
            else:
                reply = await edit._live.settle_cell(edit.cell_id, keep, client=client)
            outcome = reply.get("outcome") if isinstance(reply, dict) else None
            if outcome not in ("kept", "rejected"):
                raise ToolFailure("the notebook page answered no outcome")
            edit.changed_by_user = isinstance(reply, dict) and reply.get("changed_by_user") is True
        except Exception as exc:
            self._tell(self.on_failed, edit, keep, exc)
            raise
        if edit in self._edits:
            self._edits.remove(edit)
        if outcome == "rejected" and apply is not None:
            self._files_untold.append(edit.told(hunk))
        elif outcome == "rejected":
            self._untold.append(f"{edit.change} of cell {edit.cell_id}")
        self._answered(edit, outcome)
        return outcome

    def take_notice(self) -> str | None:
        """What the agent has not yet been told of the user's review and changes, once: the
        files whose change the user rejected (named by absolute path, first), the notebook
        changes the user rejected since (named by cell), the cells it touched this turn that
        the user edited or deleted, its changes dropped; or ``None``."""
        if not (self._untold or self._changed or self._dropped or self._files_untold):
            return None
        parts = []
        if self._files_untold:  # the files come first: their note names them, then says to read them again
            parts.append("The user rejected your change(s) to these files: " + "; ".join(self._files_untold)
                         + ". Each is back as it was before your change, byte for byte: read it again before "
                           "changing it.")
            self._files_untold = []
            if not (self._untold or self._changed or self._dropped):
                return "[escouade_nb notice] " + " ".join(parts)
        if self._untold:
            parts.append("The user rejected your change(s) to the open notebook: " + "; ".join(self._untold)
                         + ". They are taken back (the source before restored, a new cell removed).")
        if self._changed:
            parts.append("The user changed cells you touched in this turn: " + "; ".join(self._changed) + ".")
        if self._dropped:
            parts.append("Your change(s) to the open notebook were dropped, neither kept nor rejected: "
                         + "; ".join(self._dropped) + ".")
        self._untold, self._changed, self._dropped = [], [], []
        return ("[escouade_nb notice] " + " ".join(parts)
                + ' Read the cells again (notebook_cells(source="live")) before changing them.')

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._tell(self.on_change)  # a failed settle leaves the change pending: redrawn so
        if not task.cancelled() and task.exception() is not None:
            log.warning("escouade_nb: a Keep or Reject failed: %s", task.exception())

    def close(self) -> None:
        """The agent closes: the Keep/Reject operations under way are cancelled (their changes
        stay pending); the changes still pending stay settleable (the review held by the kernel's
        registry until each is answered: :func:`pending_edit` finds them), else it leaves the registry."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        if any(getattr(e, "cell_id", None) is not None for e in self.pending):
            _held.add(self)
        else:
            _reviews.discard(self)
            _held.discard(self)


_reviews: weakref.WeakSet[EditReview] = weakref.WeakSet()
_held: set[EditReview] = set()  # closed reviews with cell changes still pending: kept alive until answered


def user_changed(cell_id: str, what: str) -> int:
    """The user ``edited`` or ``deleted`` ``cell_id`` (the page saw it): each open agent's
    review that touched the cell in its current turn notes it for the agent
    (:meth:`EditReview.user_changed`). How many agents will be told."""
    return sum(review.user_changed(cell_id, what) for review in list(_reviews))


def drop(cell_id: str, why: str) -> bool:
    """The pending edit of ``cell_id`` is gone without a Keep or Reject (``why``, told to the
    agent once): marked ``dropped`` and out of ``agent.pending_edits``. Whether one was."""
    return any([review._drop(cell_id, why) for review in list(_reviews)])


def pending_edit(cell_id: str) -> PendingEdit | None:
    """The pending edit of ``cell_id`` in any open agent's review (the page's Keep or Reject
    button names only the cell), or ``None``."""
    for review in list(_reviews):
        for edit in review._edits:
            if edit.cell_id == cell_id and edit.state == "pending":
                return edit
    return None
