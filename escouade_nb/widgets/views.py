"""What every view shares: the cell that shows a view and the owner of the tasks a click
starts. Every view is one anywidget model (:class:`.front.FrontView`), drawn by
``widgets/escouade.js`` by its ``kind``: agent, turn, squad, journal, compare, sessions,
update.
"""

from __future__ import annotations

import asyncio
import weakref
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .front import on_loop

if TYPE_CHECKING:  # what the mixin is mixed into (a FrontView comes after it in the bases)
    from .front import FrontView as _Mixed
else:
    _Mixed = object

__all__ = ["on_loop", "CurrentText", "current_run", "shown_in_cell", "Tasks", "clicks"]

log = logging.getLogger(__name__)


class CurrentText(_Mixed):
    """Mixin for a :class:`.front.FrontView` (listed before it) whose widget output must never
    keep a stale ``text/plain``: the widget's output is displayed with a display id and kept, and
    each :meth:`update_companion` re-says its text — :meth:`widget_text` (``final``: the companion
    holds the whole text now, so the widget's is empty: nbconvert would print it twice).
    :meth:`show` puts the view in two outputs made beforehand (display handles)."""

    _widget_out: Any = None
    _widget_bundle: tuple[dict, dict] = ({}, {})

    def widget_text(self, final: bool) -> str:
        """The widget output's ``text/plain`` (overridable): the text repr while the view is
        not final, nothing once it is."""
        return "" if final else repr(self)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._companion_sent = self.companion_bundle()
        self._companion = display(self._companion_sent, metadata=self.form_metadata(), raw=True, display_id=True)
        self._form_marked = True
        data, meta = self._widget_bundle = self._repr_mimebundle_()
        self._widget_out = display({**data, "text/plain": self.widget_text(False)}, metadata=meta, raw=True,
                                   display_id=True)

    def show(self, companion: Any, widget: Any, final: bool = True) -> None:
        """Show the view in two outputs displayed before it existed (``display_id`` handles):
        its saved form, then the widget."""
        self._companion, self._widget_out = companion, widget
        self._form_marked = False  # displayed without the saved form's metadata: the first redraw adds it
        self._widget_bundle = self._repr_mimebundle_()
        self.update_companion(final)

    def update_companion(self, final: bool = False) -> None:
        super().update_companion(final)
        if self._widget_out is not None:
            data, meta = self._widget_bundle
            try:
                self._widget_out.update({**data, "text/plain": self.widget_text(final)}, metadata=meta, raw=True)
            except Exception:  # the saved form above holds the text anyway
                log.exception("%s: its widget output could not be updated", type(self).__name__)


_cells: dict[str, tuple[object, list[weakref.ref]]] = {}
"""cell id -> (the run of that cell that showed them, weak references to its views)."""


def current_run() -> tuple[str | None, object]:
    """(cell id, run) of the notebook cell being run: JupyterLab and Notebook 7 send the
    cell's id in the execute request's metadata; the run is that request's ``msg_id``.
    ``(None, None)`` in a script or a frontend that does not say."""
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
    except Exception:
        return None, None
    cell = ((parent or {}).get("metadata") or {}).get("cellId")
    if not isinstance(cell, str) or not cell:
        return None, None
    return cell, ((parent or {}).get("header") or {}).get("msg_id")


def shown_in_cell(view: Any, cell: str | None, run: object = None) -> None:
    """``view`` is shown by notebook cell ``cell`` in its run ``run``: when the cell runs
    again (another run; ``run`` None counts as a new one each time), the views it showed
    before are closed — their output is gone, they must not stay subscribed. A view
    closed otherwise drops out by itself (weak references)."""
    if cell is None:
        return
    before, refs = _cells.get(cell, (None, []))
    if run is None or run != before:
        for ref in refs:
            old = ref()
            if old is not None and old is not view:
                old.close()
        refs = []
    refs = [r for r in refs if r() is not None] + [weakref.ref(view)]
    _cells[cell] = (run if run is not None else object(), refs)


class Tasks:
    """The owner of tasks a view starts: kept until done (asyncio keeps only a weak
    reference to a task), an error logged, ``cancel()`` ends those still running."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task] = set()

    def start(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a task failed", self.name, exc_info=task.exception())

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)


clicks = Tasks("widget clicks")
"""The owner of what a click starts on an agent (restart, stop, sign in, a mode, an
option, a model): operations of the agent, not of the view, so closing the view that was
clicked does not cancel them (a restart cut in the middle would leave the agent half
started). They are kept here until done; the agent's own ``close()`` ends what they wait
for, and at kernel exit the squad kills every agent process."""
